package tune

import (
	"fmt"
	"strings"

	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/mesh"
)

// Args are one collective's buffers and root, as the communicator checked
// them. Which fields a row reads depends on its collective:
//
//	all-reduce, broadcast, reduce: Buf (Count elements, in place), Root
//	allgather: In (Count elements) into Out (Size*Count)
//	reduce-scatter: In (Size*Count elements) into Out (Count)
//	gather: In (Count) into root's Out (Size*Count); scatter the reverse
//	all-to-all: In by Send into Out by Recv
type Args struct {
	Buf, In, Out []byte
	Count, Root  int
	Send, Recv   algo.Blocks
}

// Exec is what a row runs on: the communicator's op over its links
// (stamped and with its deadline), and, where the ranks of this host share
// memory, the engine over it with its call (stamped like the op), and this
// rank's two levels.
type Exec struct {
	Op   *algo.Op
	Node *mesh.Engine
	Call *mesh.Call
	Hier algo.Hierarchy
}

// Place is where a row's schedule runs.
type Place uint8

const (
	// Links: frames between ranks over the links (TCP, shared-memory
	// rings, the in-process transport or the simulator alike).
	Links Place = iota
	// Node: the shared-memory engine of one host's ranks, whole group.
	Node
	// Levels: level0 inside each node and level1 across, composed from
	// a level0 row (Level0Rows) and a level1 row of the collective.
	Levels
)

// Row is one way to run a collective.
type Row struct {
	Coll Coll
	// Name is how GOHCCL_ALGO, bench --algo and the INFO table call it.
	// The engine's rows are "mesh.<variant>"; the name "mesh" selects all
	// of them (Family).
	Name string
	// Family is the prefix before the dot, which selects every row that
	// shares it ("mesh"); a name without a dot is its own family.
	Family string
	Desc   string
	Place  Place
	// AllReduce, for an all-reduce row over links, is its schedule as the
	// hierarchical all-reduce runs it at level1; Vector, for an allgather
	// or reduce-scatter row, names its level1 form. A row with neither
	// cannot be a level1.
	AllReduce algo.AllReduceFunc
	Vector    *algo.Level1
	// CanRun says why the row cannot run on s, or nil.
	CanRun func(s Shape) error
	// Cost prices the row on s (s.Bytes set) with model m, whose Segment
	// is the choice's segment, in seconds.
	Cost func(m Model, s Shape, c Choice) float64
	// Run runs the row's schedule.
	Run func(x *Exec, c Choice, a *Args) error
}

// IsLevel1 says whether the row may run level1 of the hierarchical row.
func (r *Row) IsLevel1() bool { return r.AllReduce != nil || r.Vector != nil }

// Streams says whether the row's schedule streams in segments over links,
// so that its choice includes a segment (the protocol axis).
func (r *Row) Streams() bool {
	return r.Place != Node && r.Coll != Gather && r.Coll != Scatter && r.Coll != AllToAll && r.Coll != Barrier
}

// Level0Row is one way to run the intra-node legs of the hierarchical
// rows: a reduce-scatter and an allgather over the node's blocks for the
// all-reduce, an allgather or reduce-scatter of the node's slices for the
// others.
type Level0Row struct {
	Name string
	Desc string
	Leg  algo.Level0
	// CanRun says why the legs cannot run for coll on s, or nil.
	CanRun func(coll Coll, s Shape) error
	// Cost prices the legs for coll on one node of s (s.Bytes the whole
	// buffer of the collective on one rank).
	Cost func(m Model, coll Coll, s Shape) float64
}

// Choice is a row with its open axes set: the segment a streaming row
// pipelines in (0 for rows that do not stream), and the level rows of the
// hierarchical row. The zero Choice is no choice.
type Choice struct {
	Row     *Row
	Level0  *Level0Row
	Level1  *Row
	Segment int
}

// String names the choice as GOHCCL_ALGO would, with the segment of a
// streaming row: "ring/1MiB", "level0:mesh;level1:rhd/256KiB",
// "mesh.oneshot".
func (c Choice) String() string {
	if c.Row == nil {
		return "none"
	}
	name := c.Row.Name
	if c.Row.Place == Levels {
		name = "level0:" + c.Level0.Name + ";level1:" + c.Level1.Name
	}
	if c.Segment > 0 {
		name += "/" + FormatBytes(float64(c.Segment))
	}
	return name
}

// Name is String without the segment: what GOHCCL_ALGO takes.
func (c Choice) Name() string {
	if c.Row != nil && c.Row.Place == Levels {
		return "level0:" + c.Level0.Name + ";level1:" + c.Level1.Name
	}
	if c.Row == nil {
		return "none"
	}
	return c.Row.Name
}

// Run runs the choice: the segment is set on the op for the row's schedule
// and put back after.
func (c Choice) Run(x *Exec, a *Args) error {
	if c.Row == nil {
		return fmt.Errorf("internal: no schedule chosen")
	}
	if c.Segment > 0 && x.Op != nil {
		saved := x.Op.Segment
		x.Op.Segment = c.Segment
		defer func() { x.Op.Segment = saved }()
	}
	return c.Row.Run(x, c, a)
}

// CanRun says why c cannot run on s (its row or its levels), or nil.
func (c Choice) CanRun(s Shape) error {
	if c.Row == nil {
		return fmt.Errorf("no schedule")
	}
	if err := c.Row.CanRun(s); err != nil {
		return err
	}
	if c.Row.Place != Levels {
		return nil
	}
	if err := c.Level0.CanRun(c.Row.Coll, s); err != nil {
		return fmt.Errorf("level0 %s: %w", c.Level0.Name, err)
	}
	if err := c.Level1.CanRun(crossShape(s)); err != nil {
		return fmt.Errorf("level1 %s: %w", c.Level1.Name, err)
	}
	return nil
}

// Rows returns coll's rows in preference order (on a tie of price the
// earlier wins).
func Rows(coll Coll) []*Row { return table[coll] }

// RowNamed returns coll's row called name, or nil.
func RowNamed(coll Coll, name string) *Row {
	for _, r := range table[coll] {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Level0Named returns the level0 row called name, or nil.
func Level0Named(name string) *Level0Row {
	for _, r := range level0Rows {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Level0Rows returns the level0 rows in preference order.
func Level0Rows() []*Level0Row { return level0Rows }

// table holds every collective's rows (rows.go fills it).
var table [NumColls][]*Row

// register adds rows to the table, filling Family from Name. Each
// collective's rows keep the order given, but for the engine's rows, which
// go first: on a tie of price the earlier row wins, and where the engine
// can run at all (every rank on one host) it moves each byte through
// memory once, which frames over links cannot beat.
func register(rows ...*Row) {
	for _, r := range rows {
		if r.Family == "" {
			r.Family, _, _ = strings.Cut(r.Name, ".")
		}
	}
	for _, place := range []Place{Node, Links, Levels} {
		for _, r := range rows {
			if r.Place == place {
				table[r.Coll] = append(table[r.Coll], r)
			}
		}
	}
}

// Named returns coll's choice of the row called form, or of the
// hierarchical row for "level0:X;level1:Y" (both levels named), with the
// given segment for a streaming row (0 for rows that do not stream). Tools
// and tests name choices this way; the communicator asks the tuner.
func Named(coll Coll, form string, segment int) (Choice, error) {
	r, err := parseForm(strings.ToLower(strings.TrimSpace(form)))
	if err != nil {
		return Choice{}, err
	}
	if err := check(coll, r); err != nil {
		return Choice{}, err
	}
	var c Choice
	switch {
	case r.Name == levels:
		if r.Level0 == "" || r.Level1 == "" {
			return Choice{}, fmt.Errorf("%s: name both levels", form)
		}
		c = Choice{Row: RowNamed(coll, levels), Level0: Level0Named(r.Level0), Level1: RowNamed(coll, r.Level1)}
	default:
		c.Row = RowNamed(coll, r.Name)
		if c.Row == nil {
			return Choice{}, fmt.Errorf("%s is a family of %s's rows, not one row", form, coll)
		}
	}
	if c.Row.Streams() {
		c.Segment = segment
	}
	return c, nil
}
