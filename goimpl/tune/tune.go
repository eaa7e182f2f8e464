package tune

import (
	"fmt"
	"math/bits"
	"strings"
)

// Tie is how close (as a fraction) a candidate's price must come to the
// cheapest for the tuner to prefer it for coming earlier in the candidate
// order (ring first): the model cannot tell apart schedules whose prices
// differ by less than its own error, and the ring streams best.
const Tie = 0.05

// Row is one priced candidate.
type Row struct {
	Choice  Choice
	Seconds float64
	Err     error // why it cannot run; Seconds is then 0
}

// Candidates lists what the tuner considers for coll on s, in preference
// order. Hierarchical forms appear only across two or more nodes of two or
// more ranks each.
func Candidates(coll Coll, s Shape) []Choice {
	var cs []Choice
	hier := false
	for _, a := range valid[coll] {
		if a != Hier && a != Mesh { // mesh is the communicator's choice, before any pricing
			cs = append(cs, Choice{Algo: a})
		}
		hier = hier || a == Hier
	}
	if hier && s.Nodes >= 2 && s.PerNode >= 2 {
		for _, l0 := range levels0 {
			for _, l1 := range levels1[coll] {
				cs = append(cs, Choice{Algo: Hier, Level0: l0, Level1: l1})
			}
		}
	}
	return cs
}

// levels0 lists the algorithms a hierarchical form runs at level0.
var levels0 = []Algo{Ring, RHD}

// Price prices every candidate for coll moving bytes on s.
func (m Model) Price(coll Coll, s Shape, bytes float64) []Row {
	s.Bytes = bytes
	var rows []Row
	for _, c := range Candidates(coll, s) {
		r := Row{Choice: c}
		if r.Err = CanRun(coll, c, s); r.Err == nil {
			r.Seconds = m.Cost(coll, c, s)
		}
		rows = append(rows, r)
	}
	return rows
}

// Best returns the choice the tuner makes from rows: the earliest whose
// price is within Tie of the cheapest.
func Best(rows []Row) Choice {
	best := -1
	for i, r := range rows {
		if r.Err == nil && (best < 0 || r.Seconds < rows[best].Seconds) {
			best = i
		}
	}
	if best < 0 {
		return Choice{Algo: Ring}
	}
	for _, r := range rows {
		if r.Err == nil && r.Seconds <= rows[best].Seconds*(1+Tie) {
			return r.Choice
		}
	}
	return rows[best].Choice
}

// Tuner chooses per (collective, size class) and remembers the choice, so a
// steady stream of operations costs one array lookup and allocates nothing.
// It is not safe for concurrent use; a communicator calls it under its lock.
type Tuner struct {
	spec  Spec
	model Model
	shape Shape
	cache [NumColls][65]Choice
	known [NumColls][65]bool
	// warned records, per collective, that a forced choice fell back.
	warned [NumColls]bool
	// Logf, when set, receives the candidate table once per (collective,
	// size class); Warnf the fallback warnings.
	Logf, Warnf func(format string, args ...any)
}

// New returns a tuner for a group of shape s.
func New(spec Spec, m Model, s Shape) *Tuner {
	return &Tuner{spec: spec, model: m, shape: s}
}

// SizeClass is the bucket of a byte count: 0 for 0, else bits.Len.
func SizeClass(bytes int) int { return bits.Len(uint(bytes)) }

// Choose returns the algorithm for coll moving bytes. Every rank of a group
// makes the same choice: it depends only on the spec, the model, the shape
// and the op sequence, which are the same on all ranks.
func (t *Tuner) Choose(coll Coll, bytes int) Choice {
	class := SizeClass(bytes)
	if t.known[coll][class] {
		return t.cache[coll][class]
	}
	c := t.choose(coll, bytes, class)
	t.cache[coll][class], t.known[coll][class] = c, true
	return c
}

func (t *Tuner) choose(coll Coll, bytes, class int) Choice {
	s := t.shape
	s.Bytes = float64(bytes)
	forced := t.spec.Per[coll]
	if forced.Algo != Auto {
		if forced.Algo == Hier {
			forced = t.fillLevels(coll, forced, s)
		}
		err := CanRun(coll, forced, s)
		if err == nil {
			t.logTable(coll, class, nil, forced, "forced by GOHCCL_ALGO")
			return forced
		}
		if !t.warned[coll] && t.Warnf != nil {
			t.warned[coll] = true
			t.Warnf("GOHCCL_ALGO asks for %s for %s, which cannot run here (%v); choosing automatically", t.spec.Per[coll], coll, err)
		}
	}
	rows := t.model.Price(coll, t.shape, float64(bytes))
	c := Best(rows)
	t.logTable(coll, class, rows, c, "")
	return c
}

// fillLevels picks the cheapest algorithm for a level of coll left as auto.
func (t *Tuner) fillLevels(coll Coll, c Choice, s Shape) Choice {
	pick := func(set func(*Choice, Algo), opts []Algo) {
		var rows []Row
		for _, a := range opts {
			x := c
			set(&x, a)
			if x.Level0 == Auto {
				x.Level0 = Ring
			}
			if x.Level1 == Auto {
				x.Level1 = Ring
			}
			r := Row{Choice: x}
			if r.Err = CanRun(coll, x, s); r.Err == nil {
				r.Seconds = t.model.Cost(coll, x, s)
			}
			rows = append(rows, r)
		}
		c = Best(rows)
	}
	if c.Level0 == Auto {
		pick(func(x *Choice, a Algo) { x.Level0 = a }, levels0)
	}
	if c.Level1 == Auto {
		pick(func(x *Choice, a Algo) { x.Level1 = a }, levels1[coll])
	}
	return c
}

func (t *Tuner) logTable(coll Coll, class int, rows []Row, c Choice, why string) {
	if t.Logf == nil {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s on %d ranks (%d nodes): ", coll, classRange(class), t.shape.N, t.shape.Nodes)
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		if r.Err != nil {
			fmt.Fprintf(&b, "%s n/a", r.Choice)
		} else {
			fmt.Fprintf(&b, "%s %s", r.Choice, FormatSeconds(r.Seconds))
		}
	}
	b.WriteString(why)
	fmt.Fprintf(&b, " -> %s", c)
	t.Logf("%s", b.String())
}

// classRange names a size class, e.g. "[1MiB, 2MiB)".
func classRange(class int) string {
	if class == 0 {
		return "0 bytes"
	}
	return "[" + FormatBytes(float64(uint64(1)<<(class-1))) + ", " + FormatBytes(float64(uint64(1)<<class)) + ")"
}

// FormatBytes writes a power-of-two-ish byte count briefly.
func FormatBytes(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%gGiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%gMiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%gKiB", n/(1<<10))
	}
	return fmt.Sprintf("%gB", n)
}

// FormatSeconds writes a duration in us or ms.
func FormatSeconds(s float64) string {
	if s < 1e-3 {
		return fmt.Sprintf("%.1fus", s*1e6)
	}
	return fmt.Sprintf("%.3fms", s*1e3)
}
