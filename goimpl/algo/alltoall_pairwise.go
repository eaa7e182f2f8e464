package algo

import "github.com/gohccl/gohccl/goimpl/algo/pattern"

const phaseAllToAll = 7

// Blocks describes one rank's side of an all-to-all: for each peer p, the
// byte range of the buffer exchanged with p and its element count.
type Blocks struct {
	Offsets, Lens []int // bytes
	Counts        []int // elements, carried in each frame's fingerprint
}

// AllToAllPairwise exchanges blocks directly: at step i rank r sends to r+i
// and receives from r-i, so every link carries one message at a time and
// each step is a perfect matching. n-1 steps; each rank sends everything
// but its own block once. A peer whose block size differs from the expected
// one fails the op on both sides, since each frame carries the sender's count.
func AllToAllPairwise(o *Op, in []byte, send Blocks, out []byte, recv Blocks) error {
	r, n := o.Rank(), o.Size()
	copy(out[recv.Offsets[r]:recv.Offsets[r]+recv.Lens[r]], in[send.Offsets[r]:send.Offsets[r]+send.Lens[r]])
	pw := pattern.Pairwise{Rank: r, Size: n}
	for i := 1; i < n; i++ {
		to, from := pw.SendPeer(i), pw.RecvPeer(i)
		sb := in[send.Offsets[to] : send.Offsets[to]+send.Lens[to]]
		rb := out[recv.Offsets[from] : recv.Offsets[from]+recv.Lens[from]]
		nsend, nrecv := framesOf(len(sb)), framesOf(len(rb))
		for f := 0; f < max(nsend, nrecv); f++ {
			var pending bool
			if f < nrecv {
				o.Stamp.Count = uint64(recv.Counts[from])
				o.post(0, from, tag(phaseAllToAll, i, f), part(rb, DirectFrame, f))
				pending = true
			}
			if f < nsend {
				o.Stamp.Count = uint64(send.Counts[to])
				if err := o.send(to, tag(phaseAllToAll, i, f), part(sb, DirectFrame, f)); err != nil {
					return err
				}
			}
			if pending {
				if err := o.wait(&o.Recvs[0]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
