package pattern

// Ring is rank Rank's view of the ring 0 -> 1 -> ... -> Size-1 -> 0.
//
// A ring reduce-scatter or allgather splits the buffer into Size chunks
// (chunk c is Blocks(count, Size, c)) and runs Size-1 steps, numbered
// 0..Size-2. At every step each rank sends one chunk to Next and receives one
// chunk from Prev; the chunk a rank receives at step s is the chunk its Prev
// sends at step s, so the whole ring moves in lock step.
type Ring struct {
	Rank, Size int
}

// Validate reports whether r describes a rank in a non-empty group.
func (r Ring) Validate() error {
	return validate(r.Size, rankName, r.Rank)
}

// Next returns the rank this rank sends to.
func (r Ring) Next() int {
	if r.Rank+1 == r.Size {
		return 0
	}
	return r.Rank + 1
}

// Prev returns the rank this rank receives from.
func (r Ring) Prev() int {
	if r.Rank == 0 {
		return r.Size - 1
	}
	return r.Rank - 1
}

// Steps returns the number of steps of a ring reduce-scatter or allgather:
// Size-1.
func (r Ring) Steps() int {
	return r.Size - 1
}

// RSSendChunk returns the chunk this rank sends to Next at reduce-scatter
// step s: Rank-1-s (mod Size). At step 0 that is this rank's own
// contribution; at every later step it is the chunk received and reduced at
// step s-1. Chunk c starts at rank c+1 and travels the ring once, so it
// arrives complete at rank c in the last step.
func (r Ring) RSSendChunk(s int) int {
	return wrap(r.Rank-1-s, r.Size)
}

// RSRecvChunk returns the chunk this rank receives from Prev at
// reduce-scatter step s and reduces into its own copy: Rank-2-s (mod Size).
// At the last step, s = Size-2, that is chunk Rank, which is then fully
// reduced.
func (r Ring) RSRecvChunk(s int) int {
	return wrap(r.Rank-2-s, r.Size)
}

// AGSendChunk returns the chunk this rank sends to Next at allgather step s,
// for an allgather that starts with each rank owning chunk Rank (as a
// reduce-scatter leaves it): Rank-s (mod Size). At step 0 it is the owned
// chunk; later, the chunk received at step s-1.
func (r Ring) AGSendChunk(s int) int {
	return wrap(r.Rank-s, r.Size)
}

// AGRecvChunk returns the chunk this rank receives from Prev at allgather
// step s: Rank-1-s (mod Size). After Size-1 steps every rank holds every
// chunk.
func (r Ring) AGRecvChunk(s int) int {
	return wrap(r.Rank-1-s, r.Size)
}

// Chain is rank Rank's view of the ring cut open in front of Root: the path
// Root -> Root+1 -> ... -> Root-1 (mod Size). A pipelined broadcast sends
// segments down it; a pipelined reduce sends them up it.
type Chain struct {
	Rank, Size, Root int
}

// Validate reports whether c describes a rank and root in a non-empty group.
func (c Chain) Validate() error {
	return validate(c.Size, rankRootName, c.Rank, c.Root)
}

// Position returns this rank's distance from Root along the chain:
// 0 for Root, Size-1 for the last rank.
func (c Chain) Position() int {
	p := c.Rank - c.Root
	if p < 0 {
		p += c.Size
	}
	return p
}

// At returns the rank at position p of the chain, 0 <= p < Size.
func (c Chain) At(p int) int {
	r := c.Root + p
	if r >= c.Size {
		r -= c.Size
	}
	return r
}

// Prev returns the rank before this one (towards Root), or -1 at Root.
func (c Chain) Prev() int {
	if c.Rank == c.Root {
		return -1
	}
	return Ring{c.Rank, c.Size}.Prev()
}

// Next returns the rank after this one (away from Root), or -1 at the last
// rank.
func (c Chain) Next() int {
	n := Ring{c.Rank, c.Size}.Next()
	if n == c.Root {
		return -1
	}
	return n
}
