// Package pattern is the rank arithmetic of gohccl's collective algorithms:
// who a rank's ring neighbours are, its parent and children in a binomial,
// binary or double binary tree, its recursive halving-doubling partner, its
// dissemination and pairwise-exchange peers, and how a buffer splits into
// blocks. It does no I/O and knows nothing about links or buffers, so every
// pattern is tested on its own for every group size from 1 to 1024.
//
// Each pattern is a small value type holding a rank and a group size (and a
// root where one matters). Accessors assume the value is valid (Size >= 1,
// 0 <= Rank, Root < Size); call Validate once when the values come from
// outside, then use the accessors freely in the hot path: they do not check,
// do not allocate, and return plain ints, small arrays, or append to a
// caller's slice.
//
// Terms used throughout:
//   - rank: a process's index in the group, 0..Size-1.
//   - virtual rank: a rank renumbered so that the pattern's root (or first
//     active rank) is 0; each type that uses one converts both ways.
//   - step / round: one exchange that every participating rank does at the
//     same time; step numbers start at 0 unless a type says otherwise.
//   - chunk / block: a contiguous piece of the buffer, identified by its index;
//     Blocks maps an index to an element range.
//   - -1: "no such rank" (no parent, no neighbour at the end of a chain).
package pattern
