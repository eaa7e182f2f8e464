package algo

import "github.com/gohccl/gohccl/goimpl/algo/pattern"

// Phases of the ring schedules, for frame tags.
const (
	phaseReduceScatter = 1
	phaseAllGather     = 2
)

// AllReduceRing is the bandwidth-optimal all-reduce for few ranks and large
// messages: a ring reduce-scatter leaves each rank with one fully reduced
// chunk, a ring allgather then circulates the chunks. 2(n-1) steps; each rank
// sends 2(n-1)/n of the buffer. buf holds count elements and is reduced in
// place; every rank ends with the same bits, since each chunk is reduced once
// in ring order and then copied.
func AllReduceRing(o *Op, buf []byte, count int) error {
	if o.Size() == 1 || count == 0 {
		return nil
	}
	if err := reduceScatterRing(o, buf, nil, count); err != nil {
		return err
	}
	return allGatherRing(o, buf, count)
}

// reduceScatterRing runs the ring reduce-scatter over the count elements of
// in, split into Size chunks by pattern.Blocks. With out nil it works in
// place: partial sums accumulate in in's chunks and rank r's chunk r ends
// fully reduced. With out set (the out-of-place reduce-scatter, whose chunks
// are all of len(out) bytes), in is only read: partial sums accumulate in out,
// which ends holding chunk r.
func reduceScatterRing(o *Op, in, out []byte, count int) error {
	n, es := o.Size(), o.esize()
	ring := pattern.Ring{Rank: o.Rank(), Size: n}
	chunk := func(c int) []byte {
		off, l := pattern.Blocks(count, n, c)
		return in[off*es : (off+l)*es]
	}
	for s := 0; s < ring.Steps(); s++ {
		send := chunk(ring.RSSendChunk(s))
		own := chunk(ring.RSRecvChunk(s))
		acc := own
		if out != nil {
			if s > 0 {
				send = out
			}
			acc = out
		}
		err := o.exchange(phaseReduceScatter, s, ring.Next(), send, ring.Prev(), own, acc)
		if err != nil {
			return err
		}
	}
	return nil
}

// allGatherRing circulates the Size chunks of buf (count elements, split by
// pattern.Blocks) so that every rank ends with all of them; rank r starts
// owning chunk r. Received segments land in buf directly.
func allGatherRing(o *Op, buf []byte, count int) error {
	n, es := o.Size(), o.esize()
	ring := pattern.Ring{Rank: o.Rank(), Size: n}
	chunk := func(c int) []byte {
		off, l := pattern.Blocks(count, n, c)
		return buf[off*es : (off+l)*es]
	}
	for s := 0; s < ring.Steps(); s++ {
		err := o.exchange(phaseAllGather, s, ring.Next(), chunk(ring.AGSendChunk(s)),
			ring.Prev(), chunk(ring.AGRecvChunk(s)), nil)
		if err != nil {
			return err
		}
	}
	return nil
}
