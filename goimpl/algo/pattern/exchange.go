package pattern

// Dissemination is rank Rank's view of the dissemination pattern over Size
// ranks, used by the dissemination barrier and the Bruck allgather. In round
// k, 0 <= k < Rounds(), every rank sends to Rank+2^k and receives from
// Rank-2^k (mod Size). After round k a rank has heard, directly or through
// others, from the 2^(k+1)-1 ranks before it (all ranks once that reaches
// Size-1), so Rounds() = ceil(log2 Size) rounds complete a barrier.
type Dissemination struct {
	Rank, Size int
}

// Validate reports whether d describes a rank in a non-empty group.
func (d Dissemination) Validate() error {
	return validate(d.Size, rankName, d.Rank)
}

// Rounds returns the number of rounds: ceil(log2 Size), 0 for one rank.
func (d Dissemination) Rounds() int {
	return ceilLog2(d.Size)
}

// SendPeer returns the rank this rank sends to in round k: Rank+2^k (mod
// Size).
func (d Dissemination) SendPeer(k int) int {
	return wrap(d.Rank+1<<k, d.Size)
}

// RecvPeer returns the rank this rank receives from in round k: Rank-2^k
// (mod Size).
func (d Dissemination) RecvPeer(k int) int {
	return wrap(d.Rank-1<<k, d.Size)
}

// AllgatherBlocks returns how many blocks each rank sends in round k of a
// Bruck allgather over these peers: min(2^k, Size-2^k). Each rank keeps its
// blocks in the order own, then Rank-1, Rank-2, ... (mod Size); before round
// k it holds the first 2^k of them, sends the first AllgatherBlocks(k) to
// SendPeer(k), and appends the ones from RecvPeer(k), which are the next in
// that order. The last round sends only what is still missing.
func (d Dissemination) AllgatherBlocks(k int) int {
	return min(1<<k, d.Size-1<<k)
}

// Pairwise is rank Rank's view of the pairwise-exchange all-to-all over Size
// ranks: at step i, 1 <= i <= Steps(), every rank sends its block for rank
// Rank+i and receives the block from rank Rank-i (mod Size). Each rank
// sends to and receives from every other rank exactly once, and at step i
// the rank this one sends to is receiving from this one.
type Pairwise struct {
	Rank, Size int
}

// Validate reports whether p describes a rank in a non-empty group.
func (p Pairwise) Validate() error {
	return validate(p.Size, rankName, p.Rank)
}

// Steps returns the number of exchange steps: Size-1 (the block for this
// rank itself is a local copy).
func (p Pairwise) Steps() int {
	return p.Size - 1
}

// SendPeer returns the rank this rank sends to at step i: (Rank+i) % Size.
func (p Pairwise) SendPeer(i int) int {
	return wrap(p.Rank+i, p.Size)
}

// RecvPeer returns the rank this rank receives from at step i:
// (Rank-i+Size) % Size.
func (p Pairwise) RecvPeer(i int) int {
	return wrap(p.Rank-i, p.Size)
}
