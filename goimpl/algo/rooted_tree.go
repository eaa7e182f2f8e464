package algo

import (
	"github.com/gohccl/gohccl/goimpl/algo/pattern"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// rotation maps ranks so that a tree whose root is fixed by its pattern
// (the binary tree's root is rank 2^k-1) is rooted at the collective's root:
// virtual rank v = (r - root + treeRoot) mod n.
type rotation struct{ n, shift int }

func newRotation(n, root, treeRoot int) rotation {
	return rotation{n, ((treeRoot-root)%n + n) % n}
}

func (q rotation) virtual(r int) int { return (r + q.shift) % q.n }

func (q rotation) real(v int) int {
	if v < 0 {
		return -1
	}
	return (v - q.shift + q.n) % q.n
}

func (q rotation) realKids(k [2]int) [2]int { return [2]int{q.real(k[0]), q.real(k[1])} }

// BroadcastBinaryTree streams buf from root down the binary tree of
// pattern.BinaryTree, rotated so that its root is the broadcast's root:
// floor(log2 n)+nseg-1 segment times, an interior rank sends 2S.
func BroadcastBinaryTree(o *Op, buf []byte, root int) error {
	n := o.Size()
	if n == 1 || len(buf) == 0 {
		return nil
	}
	q := newRotation(n, root, pattern.BinaryTree{Size: n}.Root())
	t := pattern.BinaryTree{Rank: q.virtual(o.Rank()), Size: n}
	return o.treeDownAll(0, buf, q.real(t.Parent()), q.realKids(t.Children()))
}

// ReduceBinaryTree reduces buf onto root up the rotated binary tree,
// pipelined in segments; partial sums go through scratch, so only root's
// buffer changes. An interior rank receives 2S and sends S.
func ReduceBinaryTree(o *Op, buf []byte, root int) error {
	n := o.Size()
	if n == 1 || len(buf) == 0 {
		return nil
	}
	q := newRotation(n, root, pattern.BinaryTree{Size: n}.Root())
	t := pattern.BinaryTree{Rank: q.virtual(o.Rank()), Size: n}
	parent, kids := q.real(t.Parent()), q.realKids(t.Children())
	seg := o.Segment
	for j := 0; j < segments(len(buf), seg); j++ {
		mine := part(buf, seg, j)
		acc := mine
		if parent >= 0 {
			acc = o.slot(2)[:len(mine)]
		}
		if err := o.treeUp(0, j, mine, acc, parent, phaseTreeUp, kids); err != nil {
			return err
		}
	}
	return nil
}

// dtreeRooted is one rank's view of a double tree rotated so that tree 0's
// root is the collective's root; tree 1's root exchanges its half with the
// collective's root directly.
type dtreeRooted struct {
	parent [2]int
	kids   [2][2]int
	root1  int // tree 1's root
	half   [2][]byte
}

func newDTreeRooted(o *Op, buf []byte, root int) dtreeRooted {
	n := o.Size()
	shape := pattern.DoubleTree{Size: n}
	q := newRotation(n, root, shape.Root(0))
	d := pattern.DoubleTree{Rank: q.virtual(o.Rank()), Size: n}
	var x dtreeRooted
	count := len(buf) / o.esize()
	for t := range 2 {
		x.parent[t], x.kids[t] = q.real(d.Parent(t)), q.realKids(d.Children(t))
		off, l := pattern.Blocks(count, 2, t)
		x.half[t] = buf[off*o.esize() : (off+l)*o.esize()]
	}
	x.root1 = q.real(shape.Root(1))
	return x
}

// BroadcastDoubleTree broadcasts half t of buf down tree t of a rotated
// pattern.DoubleTree; root feeds tree 1 by sending its half to tree 1's
// root. The root also takes part in tree 1 as an ordinary rank: what its
// tree-1 parent sends it lands in scratch and is dropped, and it forwards
// its own copy. Each rank forwards about S/2... S, the root sends S.
func BroadcastDoubleTree(o *Op, buf []byte, root int) error {
	n := o.Size()
	if n == 1 || len(buf) == 0 {
		return nil
	}
	x := newDTreeRooted(o, buf, root)
	me, seg := o.Rank(), o.Segment
	nseg := segments(len(x.half[0]), seg)
	for j := 0; j < nseg; j++ {
		for t := range 2 {
			if j >= segments(len(x.half[t]), seg) {
				continue
			}
			mine := part(x.half[t], seg, j)
			parent, phase := x.parent[t], phaseTreeDown
			if t == 1 && me == x.root1 {
				parent, phase = root, phaseRootedOut
			}
			if t == 1 && me == root { // feed tree 1 before waiting in it
				if err := o.send(x.root1, tag(phaseRootedOut, 1, j), mine); err != nil {
					return err
				}
			}
			if parent >= 0 {
				dst := mine
				if t == 1 && me == root {
					dst = o.slot(0)[:len(mine)]
				}
				if err := o.wait(o.post(0, parent, tag(phase, t, j), dst)); err != nil {
					return err
				}
			}
			for _, c := range x.kids[t] {
				if c >= 0 {
					if err := o.send(c, tag(phaseTreeDown, t, j), mine); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// ReduceDoubleTree reduces half t of buf up tree t of a rotated
// pattern.DoubleTree; tree 1's root sends its half's result to root.
// Partial sums go through scratch, so only root's buffer changes.
func ReduceDoubleTree(o *Op, buf []byte, root int) error {
	n := o.Size()
	if n == 1 || len(buf) == 0 {
		return nil
	}
	x := newDTreeRooted(o, buf, root)
	me, seg := o.Rank(), o.Segment
	nseg := segments(len(x.half[0]), seg)
	// At the root, tree 1's result for segment j is posted right after the
	// root's own tree-1 step for j, the order in which tree 1's root sends
	// it among its other frames to the root, and waited for one segment
	// later, so the pipeline does not stall on tree 1's depth.
	var result [2]*transport.Recv
	for j := 0; j < nseg; j++ {
		for t := range 2 {
			if j >= segments(len(x.half[t]), seg) {
				continue
			}
			mine := part(x.half[t], seg, j)
			parent, up := x.parent[t], phaseTreeUp
			if t == 1 && me == x.root1 {
				parent, up = root, phaseRootedOut
			}
			acc := mine
			if me != root {
				acc = o.slot(2)[:len(mine)]
			}
			if err := o.treeUp(t, j, mine, acc, parent, up, x.kids[t]); err != nil {
				return err
			}
			if t == 1 && me == root {
				if j > 0 {
					if err := o.wait(result[(j-1)%2]); err != nil {
						return err
					}
				}
				result[j%2] = o.post(4+j%2, x.root1, tag(phaseRootedOut, 1, j), mine)
			}
		}
	}
	if n1 := segments(len(x.half[1]), seg); me == root && n1 > 0 {
		return o.wait(result[(n1-1)%2])
	}
	return nil
}
