package algo

// Phases of the tree, halving-doubling and hierarchical schedules, for frame
// tags (the ring, broadcast, reduce, gather, all-to-all and barrier phases
// are declared next to their schedules and use 1..8).
const (
	phaseTreeUp    = 9  // pipelined tree: partial sums up to the root
	phaseTreeDown  = 10 // pipelined tree: the result down to the leaves
	phaseFold      = 11 // halving-doubling: an extra rank hands its buffer in
	phaseHalving   = 12 // halving-doubling: recursive-halving reduce-scatter
	phaseDoubling  = 13 // halving-doubling: recursive-doubling allgather
	phaseUnfold    = 14 // halving-doubling: the result back to the extra rank
	phaseRootedOut = 15 // rooted tree collectives: the result moved to the root

	// phaseLevel0 and phaseLevel1 are added to the phases of the schedules a
	// hierarchical algorithm runs on its levels (see Op.View).
	phaseLevel0 = 32
	phaseLevel1 = 64
)
