package pattern

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHalvingDoublingKnown(t *testing.T) {
	// Size 6: p = 4, ranks 0 and 2 fold into 1 and 3; the active ranks
	// 1, 3, 4, 5 are virtual 0..3.
	type row struct {
		active        bool
		fold, virtual int
		partners      []int
		keep0, keep1  [2]int
		send0         [2]int
	}
	want := []row{
		{false, 1, -1, []int{-1, -1}, [2]int{0, 0}, [2]int{0, 0}, [2]int{0, 0}},
		{true, 0, 0, []int{4, 3}, [2]int{0, 2}, [2]int{0, 1}, [2]int{2, 4}},
		{false, 3, -1, []int{-1, -1}, [2]int{0, 0}, [2]int{0, 0}, [2]int{0, 0}},
		{true, 2, 1, []int{5, 1}, [2]int{0, 2}, [2]int{1, 2}, [2]int{2, 4}},
		{true, -1, 2, []int{1, 5}, [2]int{2, 4}, [2]int{2, 3}, [2]int{0, 2}},
		{true, -1, 3, []int{3, 4}, [2]int{2, 4}, [2]int{3, 4}, [2]int{0, 2}},
	}
	for r, w := range want {
		h := HalvingDoubling{Rank: r, Size: 6}
		got := row{active: h.Active(), fold: h.FoldPartner(), virtual: h.VirtualRank(), partners: []int{h.Partner(0), h.Partner(1)}}
		got.keep0[0], got.keep0[1] = h.Keep(0)
		got.keep1[0], got.keep1[1] = h.Keep(1)
		got.send0[0], got.send0[1] = h.Send(0)
		require.Equal(t, w, got, "rank %d", r)
	}
	h := HalvingDoubling{Rank: 0, Size: 6}
	require.Equal(t, [3]int{4, 2, 2}, [3]int{h.Pow2(), h.Extra(), h.Steps()})
}

// TestHalvingDoubling checks, for every size 1..1024: the fold leaves a
// power of two of active ranks with a one-to-one virtual numbering; the
// partners of every step are mutual; at each step two partners split what
// they held into two disjoint halves and each sends the half the other
// keeps; the final blocks are distinct and cover all blocks. It then runs
// the reduce-scatter with fingerprints and the allgather with sets, and
// checks that the reduce-scatter leaves each block fully reduced at its
// owner and the allgather gives every active rank every block (for a subset
// of sizes; see below).
func TestHalvingDoubling(t *testing.T) {
	t.Parallel()
	st := newHDState(floorPow2(maxSize))
	eachSize(t, func(t *testing.T, n int) {
		h0 := HalvingDoubling{Rank: 0, Size: n}
		p, steps := h0.Pow2(), h0.Steps()
		require.True(t, p&(p-1) == 0 && p <= n && n < 2*p, "Pow2 %d is not the largest power of two <= %d", p, n)
		require.Equal(t, p, 1<<steps, "Steps")
		require.Equal(t, n-p, h0.Extra())

		virtual := make([]int, 0, p) // virtual ranks of the active ranks, in rank order
		real := make([]int, p)       // real[v]: the active rank with virtual rank v
		standsFor := make([]int, n)  // standsFor[r]: how many inactive ranks fold into r
		for r := range n {
			h := HalvingDoubling{Rank: r, Size: n}
			f := h.FoldPartner()
			if f >= 0 && (f >= n || (HalvingDoubling{Rank: f, Size: n}).FoldPartner() != r) {
				require.Failf(t, "fold pairs", "rank %d folds with %d, which does not fold with it", r, f)
			}
			if !h.Active() {
				if f < 0 || !(HalvingDoubling{Rank: f, Size: n}).Active() || h.VirtualRank() != -1 || h.Partner(0) != -1 {
					require.Failf(t, "inactive rank", "rank %d is inactive but has fold partner %d, virtual rank %d, partner %d", r, f, h.VirtualRank(), h.Partner(0))
				}
				standsFor[f]++
				continue
			}
			v := h.VirtualRank()
			if v < 0 || v >= p || h.RealRank(v) != r {
				require.Failf(t, "virtual rank", "rank %d has virtual rank %d of %d, which maps back to %d", r, v, p, h.RealRank(v))
			}
			virtual = append(virtual, v)
			real[v] = r
		}
		require.Len(t, virtual, p, "active ranks")
		require.Equal(t, identity(p), slices.Sorted(slices.Values(virtual)), "virtual ranks are not 0..p-1 once each")
		require.LessOrEqual(t, slices.Max(standsFor), 1, "an active rank stands in for several inactive ones")

		// held[v] is the block range virtual rank v holds before a step.
		held := make([][2]int, p)
		for v := range held {
			held[v] = [2]int{0, p}
		}
		for k := range steps {
			next := make([][2]int, p)
			for v, r := range real {
				h := HalvingDoubling{Rank: r, Size: n}
				q := h.Partner(k)
				hq := HalvingDoubling{Rank: q, Size: n}
				if q < 0 || q >= n || q == r || !hq.Active() || hq.Partner(k) != r {
					require.Failf(t, "partners", "step %d: rank %d's partner is %d, whose partner is %d", k, r, q, hq.Partner(k))
				}
				keepLo, keepHi := h.Keep(k)
				sendLo, sendHi := h.Send(k)
				qLo, qHi := hq.Keep(k)
				u := hq.VirtualRank()
				switch {
				case held[u] != held[v]:
					require.Failf(t, "partners hold different blocks", "step %d: rank %d holds %v, its partner %d holds %v", k, r, held[v], q, held[u])
				case [2]int{sendLo, sendHi} != [2]int{qLo, qHi}:
					require.Failf(t, "send is not what the partner keeps", "step %d: rank %d sends %d..%d, partner %d keeps %d..%d", k, r, sendLo, sendHi, q, qLo, qHi)
				case keepHi-keepLo != (held[v][1]-held[v][0])/2 || keepHi-keepLo < 1:
					require.Failf(t, "not a halving", "step %d: rank %d keeps %d..%d of %v", k, r, keepLo, keepHi, held[v])
				case !(keepHi == qLo || qHi == keepLo):
					require.Failf(t, "halves not adjacent", "step %d: rank %d keeps %d..%d, partner %d keeps %d..%d", k, r, keepLo, keepHi, q, qLo, qHi)
				case min(keepLo, qLo) != held[v][0] || max(keepHi, qHi) != held[v][1]:
					require.Failf(t, "halves do not cover", "step %d: rank %d keeps %d..%d, partner %d keeps %d..%d, of %v", k, r, keepLo, keepHi, q, qLo, qHi, held[v])
				}
				next[v] = [2]int{keepLo, keepHi}
			}
			held = next
		}
		// After the last step: one block each, all different, so all p.
		owner := make([]int, p)
		for b := range owner {
			owner[b] = -1
		}
		for v, rng := range held {
			if rng[1]-rng[0] != 1 || owner[rng[0]] != -1 {
				require.Failf(t, "final blocks", "virtual rank %d ends with blocks %v", v, rng)
			}
			owner[rng[0]] = v
		}
		if steps > 0 {
			for v, r := range real {
				lo, hi := HalvingDoubling{Rank: r, Size: n}.Keep(steps - 1)
				require.Equal(t, [2]int{v, v + 1}, [2]int{lo, hi}, "rank %d: last Keep is its own virtual rank's block", r)
			}
		}

		// The data-moving simulation costs about 5p^2 per size; the checks
		// above already cover every size, so the simulation takes all
		// sizes up to 256 and the edges of the larger powers of two.
		if n <= 256 || slices.Contains([]int{511, 512, 513, 767, 1000, 1023, 1024}, n) {
			simulateHalvingDoubling(t, n, real, st)
		}
	})
}

// hdState is the per-block state of simulateHalvingDoubling, kept across
// sizes so the sweep does not allocate p*p entries per size.
type hdState struct {
	acc, msg []hdBlock // [v*p+b]: virtual rank v's copy of block b, and block b on its way to v
	has      []bool    // [v*p+b]: virtual rank v holds block b in the allgather
	sent     []bool    // [v*p+b]: block b is on its way to virtual rank v
}

// hdBlock is the fingerprint of a reduced block: the number of ranks
// reduced into it and the sum of their random weights.
type hdBlock struct {
	count int
	sum   uint64
}

func newHDState(p int) *hdState {
	return &hdState{make([]hdBlock, p*p), make([]hdBlock, p*p), make([]bool, p*p), make([]bool, p*p)}
}

// simulateHalvingDoubling runs the folded reduce-scatter with fingerprints
// per block, then the recursive-doubling allgather with sets, moving
// exactly the blocks that Send and Keep name, and checks that every block
// ends fully reduced at its owner and then at every active rank.
func simulateHalvingDoubling(t *testing.T, n int, real []int, st *hdState) {
	t.Helper()
	p, steps := len(real), HalvingDoubling{Rank: 0, Size: n}.Steps()
	w := rankWeights(n)
	full := hdBlock{count: n}
	for _, x := range w {
		full.sum += x
	}
	acc, msg, has, sent := st.acc[:p*p], st.msg[:p*p], st.has[:p*p], st.sent[:p*p]
	final := func(v, r int) int { // the block virtual rank v (rank r) owns after the halving
		if steps == 0 {
			return 0
		}
		b, _ := HalvingDoubling{Rank: r, Size: n}.Keep(steps - 1)
		return b
	}
	for v, r := range real {
		own := hdBlock{1, w[r]}
		if f := (HalvingDoubling{Rank: r, Size: n}).FoldPartner(); f >= 0 {
			own = hdBlock{2, w[r] + w[f]} // the inactive partner's buffer, folded in
		}
		for b := range p {
			acc[v*p+b] = own
		}
	}
	for k := range steps {
		for _, r := range real {
			h := HalvingDoubling{Rank: r, Size: n}
			v, u := h.VirtualRank(), HalvingDoubling{Rank: h.Partner(k), Size: n}.VirtualRank()
			lo, hi := h.Send(k)
			copy(msg[u*p+lo:u*p+hi], acc[v*p+lo:v*p+hi])
		}
		for _, r := range real {
			h := HalvingDoubling{Rank: r, Size: n}
			v, q := h.VirtualRank(), h.Partner(k)
			lo, hi := HalvingDoubling{Rank: q, Size: n}.Send(k) // what the partner sent
			keepLo, keepHi := h.Keep(k)
			if lo < keepLo || hi > keepHi {
				require.Failf(t, "reduce outside the kept half", "step %d: rank %d receives %d..%d but keeps %d..%d", k, r, lo, hi, keepLo, keepHi)
			}
			for b := lo; b < hi; b++ {
				acc[v*p+b].count += msg[v*p+b].count
				acc[v*p+b].sum += msg[v*p+b].sum
			}
		}
	}
	for v, r := range real {
		if b := final(v, r); acc[v*p+b] != full {
			require.Failf(t, "block not reduced", "rank %d ends with %d of %d contributions in block %d", r, acc[v*p+b].count, n, b)
		}
	}

	// Allgather: each active rank starts with its final block and runs the
	// steps backwards, sending what it kept and receiving what it sent.
	clear(has)
	clear(sent)
	for v, r := range real {
		has[v*p+final(v, r)] = true
	}
	for j := range steps {
		k := steps - 1 - j
		inFlight := 0
		for _, r := range real {
			h := HalvingDoubling{Rank: r, Size: n}
			v, u := h.VirtualRank(), HalvingDoubling{Rank: h.Partner(k), Size: n}.VirtualRank()
			lo, hi := h.Keep(k)
			for b := lo; b < hi; b++ {
				if !has[v*p+b] {
					require.Failf(t, "send of a missing block", "doubling step %d: rank %d sends block %d, which it does not hold", j, r, b)
				}
				sent[u*p+b] = true
			}
			inFlight += hi - lo
		}
		for _, r := range real {
			h := HalvingDoubling{Rank: r, Size: n}
			v := h.VirtualRank()
			lo, hi := h.Send(k)
			for b := lo; b < hi; b++ {
				if !sent[v*p+b] || has[v*p+b] {
					require.Failf(t, "allgather mismatch", "doubling step %d: rank %d expects block %d; it arrived: %v, held before: %v", j, r, b, sent[v*p+b], has[v*p+b])
				}
				has[v*p+b], sent[v*p+b] = true, false
			}
			inFlight -= hi - lo
		}
		// Every block sent was expected by its receiver.
		require.Zero(t, inFlight, "doubling step %d: blocks sent but not received", j)
	}
	for i, h := range has {
		if !h {
			require.Failf(t, "allgather incomplete", "rank %d lacks block %d", real[i/p], i%p)
		}
	}
}

// TestHalvingDoublingBlocks maps the final blocks to elements for counts
// below, at and above the number of blocks: the owners' element ranges must
// tile [0, count).
func TestHalvingDoublingBlocks(t *testing.T) {
	for _, n := range []int{1, 3, 6, 7, 8, 12, 100, 1000} {
		h := HalvingDoubling{Rank: 0, Size: n}
		p := h.Pow2()
		for _, count := range []int{0, 1, p - 1, p, p + 3, 1000003} {
			spans := make([][2]int, 0, p)
			for r := range n {
				h := HalvingDoubling{Rank: r, Size: n}
				if !h.Active() {
					continue
				}
				lo, hi := 0, p
				if h.Steps() > 0 {
					lo, hi = h.Keep(h.Steps() - 1)
				}
				off, length := BlockSpan(count, p, lo, hi)
				spans = append(spans, [2]int{off, off + length})
			}
			slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
			end := 0
			for _, s := range spans {
				require.Equal(t, end, s[0], "n %d count %d: owned element ranges %v do not tile", n, count, spans)
				end = s[1]
			}
			require.Equal(t, count, end, "n %d count %d: owned element ranges end short", n, count)
		}
	}
}

// TestHalvingRealSpan checks, for every size 1..1024, that the virtual
// blocks of RealSpan tile the ranks in order, that virtual rank v's block
// holds v's own rank and its fold partner and nothing else, and that spans
// of several virtual ranks are the union of theirs.
func TestHalvingRealSpan(t *testing.T) {
	t.Parallel()
	eachSize(t, func(t *testing.T, n int) {
		h := HalvingDoubling{Rank: 0, Size: n}
		p := h.Pow2()
		next := 0
		for v := 0; v < p; v++ {
			lo, hi := h.RealSpan(v, v+1)
			r := h.RealRank(v)
			a := HalvingDoubling{Rank: r, Size: n}
			want := []int{r}
			if f := a.FoldPartner(); f >= 0 {
				want = []int{min(r, f), max(r, f)}
			}
			if lo != next || hi-lo != len(want) || lo != want[0] || hi-1 != want[len(want)-1] {
				require.Failf(t, "virtual block", "n=%d virtual rank %d (rank %d, stands for %v) spans [%d, %d), previous ended at %d", n, v, r, want, lo, hi, next)
			}
			next = hi
		}
		if next != n {
			require.Failf(t, "tiling", "n=%d: virtual blocks end at %d", n, next)
		}
		for _, s := range [][2]int{{0, p}, {0, p / 2}, {p / 2, p}, {p / 4, 3 * p / 4}} {
			lo, hi := h.RealSpan(s[0], s[1])
			wlo, _ := h.RealSpan(s[0], min(s[0]+1, p))
			_, whi := h.RealSpan(max(s[1]-1, 0), s[1])
			if s[0] == s[1] {
				wlo, whi = lo, lo
			}
			if lo != wlo || hi != whi {
				require.Failf(t, "span", "n=%d RealSpan(%d, %d) = [%d, %d), want [%d, %d)", n, s[0], s[1], lo, hi, wlo, whi)
			}
		}
	})
}
