package algo

const (
	phaseGather  = 5
	phaseScatter = 6
)

// GatherDirect sends every rank's block straight to root, which posts a
// receive per peer into out (Size*len(in) bytes) before any data arrives:
// one step, root receives (n-1)/n of the output.
func GatherDirect(o *Op, in, out []byte, root int) error {
	n, r, b := o.Size(), o.Rank(), len(in)
	if r != root {
		return o.sendDirect(root, phaseGather, 0, in)
	}
	copy(out[r*b:(r+1)*b], in)
	for f := 0; f < framesOf(b); f++ {
		for p := 0; p < n; p++ {
			if p != root {
				o.post(p, p, tag(phaseGather, 0, f), part(out[p*b:(p+1)*b], DirectFrame, f))
			}
		}
		for p := 0; p < n; p++ {
			if p != root {
				if err := o.wait(&o.Recvs[p]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ScatterDirect sends block p of root's in (Size*len(out) bytes) straight to
// rank p: one step, root sends (n-1)/n of its input.
func ScatterDirect(o *Op, in, out []byte, root int) error {
	n, r, b := o.Size(), o.Rank(), len(out)
	if r != root {
		return o.recvDirect(0, root, phaseScatter, 0, out)
	}
	for p := 0; p < n; p++ {
		if p != root {
			if err := o.sendDirect(p, phaseScatter, 0, in[p*b:(p+1)*b]); err != nil {
				return err
			}
		}
	}
	copy(out, in[r*b:(r+1)*b])
	return nil
}
