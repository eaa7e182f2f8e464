package tune

import (
	"fmt"
	"math/bits"
	"strings"
)

// Tie is how close (as a fraction) a candidate's price must come to the
// cheapest for the tuner to prefer it for coming earlier in the table's
// order: the model cannot tell apart schedules whose prices differ by less
// than its own error, and the earlier rows (ring first, the larger segment
// first) stream best.
const Tie = 0.05

// Priced is one candidate of a table: a choice and its price, or why it
// cannot run.
type Priced struct {
	Choice  Choice
	Seconds float64
	Err     error
}

// segments returns the candidate segments of a streaming schedule, largest
// first: the model's segment (the largest the communicator's buffer
// allows) and two smaller ones, which pipeline a chain or a tree more
// finely at the cost of more frames.
func (m Model) segments() [3]int {
	top := m.Segment
	if top <= 0 {
		top = 1 << 20
	}
	floor := min(top, 16<<10)
	return [3]int{top, max(top/4&^63, floor), max(top/16&^63, floor)}
}

// Candidates lists every choice restriction r allows for coll on s, in the
// table's order, each streaming row with each candidate segment of m. The
// hierarchical row appears only across two or more nodes of two or more
// ranks each, unless r names it.
func (m Model) Candidates(coll Coll, s Shape, r Restriction) []Choice {
	var cs []Choice
	add := func(c Choice) {
		if !r.allows(c) {
			return
		}
		if !c.Row.Streams() {
			cs = append(cs, c)
			return
		}
		seen := 0
		for _, seg := range m.segments() {
			if seg != seen {
				c.Segment, seen = seg, seg
				cs = append(cs, c)
			}
		}
	}
	for _, row := range table[coll] {
		if row.Place != Levels {
			add(Choice{Row: row})
			continue
		}
		if r.Auto() && (s.Nodes < 2 || s.PerNode < 2) {
			continue
		}
		for _, l0 := range level0Rows {
			for _, l1 := range table[coll] {
				if l1.IsLevel1() {
					add(Choice{Row: row, Level0: l0, Level1: l1})
				}
			}
		}
	}
	return cs
}

// Price prices every candidate restriction r allows for coll moving bytes
// on s.
func (m Model) Price(coll Coll, s Shape, bytes float64, r Restriction) []Priced {
	s.Bytes = bytes
	var out []Priced
	for _, c := range m.Candidates(coll, s, r) {
		p := Priced{Choice: c}
		if p.Err = c.CanRun(s); p.Err == nil {
			p.Seconds = m.Cost(c, s)
		}
		out = append(out, p)
	}
	return out
}

// Cost prices choice c on s (which must be able to run it), with the
// model's segment set to the choice's.
func (m Model) Cost(c Choice, s Shape) float64 {
	if c.Segment > 0 {
		m.Segment = c.Segment
	}
	return c.Row.Cost(m, s, c)
}

// Best returns the choice a tuner makes from ps: the earliest whose price
// is within Tie of the cheapest; the zero Choice if none can run.
func Best(ps []Priced) Choice {
	best := -1
	for i, p := range ps {
		if p.Err == nil && (best < 0 || p.Seconds < ps[best].Seconds) {
			best = i
		}
	}
	if best < 0 {
		return Choice{}
	}
	for _, p := range ps {
		if p.Err == nil && p.Seconds <= ps[best].Seconds*(1+Tie) {
			return p.Choice
		}
	}
	return ps[best].Choice
}

// Tuner chooses per (collective, size class) and remembers the choice, so a
// steady stream of operations costs one array lookup and allocates nothing.
// It is not safe for concurrent use; a communicator calls it under its lock.
type Tuner struct {
	spec  Spec
	model Model
	shape Shape
	cache [NumColls][65]Choice
	// measure makes a class not chosen yet start a trial (trial.go);
	// trials holds those under way.
	measure bool
	trials  [NumColls][65]*trial
	// settled holds the classes whose trial ended and that will be
	// measured again (Revisit), counting their ops.
	settled [NumColls][65]*trial
	// Revisit is when settled classes are measured again.
	Revisit Revisit
	// warned records, per collective, that a forced choice fell back.
	warned [NumColls]bool
	// Logf, when set, receives the priced table once per (collective,
	// size class); Warnf the fallback warnings.
	Logf, Warnf func(format string, args ...any)
}

// New returns a tuner for a group of shape s.
func New(spec Spec, m Model, s Shape) *Tuner {
	return &Tuner{spec: spec, model: m, shape: s, Revisit: DefaultRevisit}
}

// Shape returns the shape the tuner prices.
func (t *Tuner) Shape() Shape { return t.shape }

// Model returns the model the tuner prices with.
func (t *Tuner) Model() Model { return t.model }

// SizeClass is the bucket of a byte count: 0 for 0, else bits.Len.
func SizeClass(bytes int) int { return bits.Len(uint(bytes)) }

// Choose returns the choice for coll moving bytes. Every rank of a group
// makes the same choice: it depends only on the spec, the model, the shape
// and the bytes, which are the same on all ranks, and, while the class is
// measured, on how many ops of it ran before (trial.go).
func (t *Tuner) Choose(coll Coll, bytes int) Choice {
	class := SizeClass(bytes)
	if c := t.cache[coll][class]; c.Row != nil {
		return c
	}
	if tr := t.trials[coll][class]; tr != nil {
		return tr.next()
	}
	c, ps := t.choose(coll, bytes, class)
	// A class of no bytes (barrier, all-to-all, empty tensors) is not
	// measured: its ops' times say nothing of the next ones'.
	if t.measure && class > 0 {
		if tr := t.startTrial(ps, c); tr != nil {
			t.trials[coll][class] = tr
			if t.Logf != nil {
				names := make([]string, len(tr.cands))
				for i, cand := range tr.cands {
					names[i] = cand.String()
				}
				t.Logf("%s %s: measuring %s, %d ops in a row each, %d passes", coll, classRange(class), strings.Join(names, ", "), tr.rounds, Passes)
			}
			return tr.next()
		}
	}
	t.cache[coll][class] = c
	return c
}

func (t *Tuner) choose(coll Coll, bytes, class int) (Choice, []Priced) {
	r := t.spec.Per[coll]
	ps := t.model.Price(coll, t.shape, float64(bytes), r)
	c := Best(ps)
	why := ""
	if !r.Auto() {
		why = " (GOHCCL_ALGO allows " + r.String() + ")"
	}
	if c.Row == nil && !r.Auto() {
		if !t.warned[coll] && t.Warnf != nil {
			t.warned[coll] = true
			t.Warnf("GOHCCL_ALGO asks for %s for %s, which cannot run here (%s); choosing automatically", r, coll, whyNot(ps, r))
		}
		ps = t.model.Price(coll, t.shape, float64(bytes), Restriction{})
		c = Best(ps)
		why = " (GOHCCL_ALGO's " + r.String() + " cannot run)"
	}
	if c.Row == nil {
		// Every collective has a row that always runs; only a table
		// without one gets here.
		panic(fmt.Sprintf("tune: no schedule for %s on %+v", coll, t.shape))
	}
	t.log(coll, class, ps, c, why)
	return c, ps
}

// whyNot says why no candidate of ps runs.
func whyNot(ps []Priced, r Restriction) string {
	if len(ps) == 0 {
		return "no such form for this collective"
	}
	for _, p := range ps {
		if p.Err != nil {
			return p.Err.Error()
		}
	}
	return "no candidate"
}

// Table formats the priced table of coll at bytes as the INFO log prints
// it: each candidate's best segment and price, and the choice.
func (t *Tuner) Table(coll Coll, bytes int) string {
	ps := t.model.Price(coll, t.shape, float64(bytes), t.spec.Per[coll])
	return t.format(coll, SizeClass(bytes), ps, t.Modeled(coll, bytes), "")
}

func (t *Tuner) log(coll Coll, class int, ps []Priced, c Choice, why string) {
	if t.Logf != nil {
		t.Logf("%s", t.format(coll, class, ps, c, why))
	}
}

// format writes one line: the candidates (each row and level pair at its
// cheapest segment), then the choice.
func (t *Tuner) format(coll Coll, class int, ps []Priced, c Choice, why string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s on %d ranks (%d nodes): ", coll, classRange(class), t.shape.N, t.shape.Nodes)
	for i, p := range Collapse(ps) {
		if i > 0 {
			b.WriteString(", ")
		}
		if p.Err != nil {
			fmt.Fprintf(&b, "%s n/a", p.Choice.Name())
		} else {
			fmt.Fprintf(&b, "%s %s", p.Choice, FormatSeconds(p.Seconds))
		}
	}
	b.WriteString(why)
	fmt.Fprintf(&b, " -> %s", c)
	return b.String()
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

// Collapse keeps, of each row (or level pair) in ps, the candidate with the
// cheapest segment that runs (or its first if none runs), in ps's order.
func Collapse(ps []Priced) []Priced {
	at := map[string]int{}
	var out []Priced
	for _, p := range ps {
		name := p.Choice.Name()
		i, ok := at[name]
		switch {
		case !ok:
			at[name] = len(out)
			out = append(out, p)
		case p.Err == nil && (out[i].Err != nil || p.Seconds < out[i].Seconds):
			out[i] = p
		}
	}
	return out
}
