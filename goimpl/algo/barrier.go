package algo

import "github.com/gohccl/gohccl/goimpl/algo/pattern"

const phaseBarrier = 8

// BarrierDissemination is the dissemination barrier: in round k each rank
// sends an empty frame to r+2^k and waits for one from r-2^k. After
// ceil(log2 n) rounds every rank has heard, transitively, from every other.
func BarrierDissemination(o *Op) error {
	d := pattern.Dissemination{Rank: o.Rank(), Size: o.Size()}
	for k := 0; k < d.Rounds(); k++ {
		r := o.post(0, d.RecvPeer(k), tag(phaseBarrier, k, 0), nil)
		if err := o.send(d.SendPeer(k), tag(phaseBarrier, k, 0), nil); err != nil {
			return err
		}
		if err := o.wait(r); err != nil {
			return err
		}
	}
	return nil
}
