// Package tune chooses an algorithm for each collective: it parses
// GOHCCL_ALGO (HCCL's syntax), prices every candidate that can run with an
// alpha-beta model per level (latency x steps + bytes / bandwidth + reduce
// cost), and picks the cheapest, falling back to that automatic choice when
// a forced algorithm cannot run.
package tune

import (
	"fmt"
	"strings"
)

// Coll names a collective that has more than one schedule.
type Coll uint8

// The collectives the tuner chooses for.
const (
	AllReduce Coll = iota
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	NumColls
)

var collNames = [NumColls]string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter"}

func (c Coll) String() string { return collNames[c] }

// Algo names an algorithm, or one level's algorithm of a hierarchical one.
type Algo uint8

// The algorithms. Hier is the hierarchical form; its levels are in Choice.
const (
	Auto     Algo = iota
	Ring          // ring (all-reduce, allgather, reduce-scatter) or pipelined chain (broadcast, reduce)
	Tree          // pipelined binary tree
	DTree         // double binary tree
	RHD           // recursive halving-doubling (recursive doubling for allgather, halving for reduce-scatter)
	Binomial      // binomial tree (broadcast, reduce)
	Hier          // level0 inside each node, level1 across nodes
	Mesh          // shared memory among the ranks of one host (goimpl/mesh); chosen by the communicator, not priced here
	numAlgos
)

var algoNames = [numAlgos]string{"auto", "ring", "tree", "dtree", "rhd", "binomial", "hier", "mesh"}

func (a Algo) String() string { return algoNames[a] }

// Choice is an algorithm for one collective; Level0 and Level1 are set for
// Hier (Auto there means the tuner picks that level).
type Choice struct {
	Algo           Algo
	Level0, Level1 Algo
}

func (c Choice) String() string {
	if c.Algo != Hier {
		return c.Algo.String()
	}
	return "level0:" + c.Level0.String() + ";level1:" + c.Level1.String()
}

// Spec is a parsed GOHCCL_ALGO: a choice per collective, Auto where unset.
type Spec struct {
	Per [NumColls]Choice
}

// IsAuto reports whether nothing is forced.
func (s Spec) IsAuto() bool { return s == Spec{} }

// forms lists the valid forms, for error messages.
const forms = "valid forms: auto | mesh | ring | tree | dtree | rhd | binomial | level0:ring;level1:tree " +
	"(level0: ring or rhd, level1: ring, tree, dtree or rhd for allreduce, ring or rhd for allgather and reducescatter; " +
	"either level may be left out or auto) | " +
	"per collective COLL=FORM joined by '/', COLL one of allreduce, broadcast, reduce, allgather, reducescatter, " +
	"e.g. allreduce=level0:ring;level1:rhd/allgather=level0:ring;level1:ring/reducescatter=rhd"

// valid lists, per collective, the algorithms it has.
var valid = [NumColls][]Algo{
	AllReduce:     {Mesh, Ring, Tree, DTree, RHD, Hier},
	Broadcast:     {Mesh, Ring, Binomial, Tree, DTree},
	Reduce:        {Mesh, Ring, Binomial, Tree, DTree},
	AllGather:     {Mesh, Ring, RHD, Hier},
	ReduceScatter: {Mesh, Ring, RHD, Hier},
}

// levels1 lists, per collective, the algorithms its hierarchical form runs
// at level1 (level0 runs ring or rhd for every collective).
var levels1 = [NumColls][]Algo{
	AllReduce:     {Ring, Tree, DTree, RHD},
	AllGather:     {Ring, RHD},
	ReduceScatter: {Ring, RHD},
}

// checkLevels says why the hierarchical choice c cannot be coll's: a level1
// algorithm coll's hierarchical form lacks. Auto levels pass.
func checkLevels(coll Coll, c Choice) error {
	if c.Algo != Hier || c.Level1 == Auto {
		return nil
	}
	for _, a := range levels1[coll] {
		if a == c.Level1 {
			return nil
		}
	}
	ns := names(levels1[coll])
	if i := strings.LastIndex(ns, ", "); i >= 0 {
		ns = ns[:i] + " or " + ns[i+2:]
	}
	return fmt.Errorf("%s's level1 runs %s, not %s", coll, ns, c.Level1)
}

// Has reports whether collective c has algorithm a (Auto always).
func Has(c Coll, a Algo) bool {
	if a == Auto {
		return true
	}
	for _, v := range valid[c] {
		if v == a {
			return true
		}
	}
	return false
}

// ParseAlgo parses GOHCCL_ALGO. A bare form applies to every collective
// (where a collective lacks that algorithm it falls back to the automatic
// choice with a warning); COLL=FORM items override it for one collective
// and must name an algorithm that collective has.
func ParseAlgo(s string) (Spec, error) {
	var spec Spec
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" || s == "auto" {
		return spec, nil
	}
	fail := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("GOHCCL_ALGO=%q: %s; %s", s, fmt.Sprintf(format, args...), forms)
	}
	var global *Choice
	var set [NumColls]bool
	for _, item := range strings.Split(s, "/") {
		item = strings.TrimSpace(item)
		if item == "" {
			return fail("empty item")
		}
		collName, form, per := strings.Cut(item, "=")
		if !per {
			if global != nil {
				return fail("more than one form without a collective")
			}
			ch, err := parseForm(item)
			if err != nil {
				return fail("%v", err)
			}
			global = &ch
			continue
		}
		c, ok := parseColl(strings.TrimSpace(collName))
		if !ok {
			return fail("unknown collective %q", strings.TrimSpace(collName))
		}
		if set[c] {
			return fail("%s given twice", c)
		}
		ch, err := parseForm(strings.TrimSpace(form))
		if err != nil {
			return fail("%s: %v", c, err)
		}
		if !Has(c, ch.Algo) {
			return fail("%s has no %s algorithm (it has %s)", c, ch.Algo, names(valid[c]))
		}
		if err := checkLevels(c, ch); err != nil {
			return fail("%v", err)
		}
		spec.Per[c], set[c] = ch, true
	}
	if global != nil {
		for c := range spec.Per {
			if !set[c] {
				spec.Per[c] = *global
			}
		}
	}
	return spec, nil
}

func names(as []Algo) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
		if a == Hier {
			s[i] = "level0:X;level1:Y"
		}
	}
	return strings.Join(s, ", ")
}

func parseColl(s string) (Coll, bool) {
	s = strings.ReplaceAll(s, "_", "")
	for c, n := range collNames {
		if s == n {
			return Coll(c), true
		}
	}
	return 0, false
}

func parseName(s string) (Algo, bool) {
	for a, n := range algoNames {
		if s == n && Algo(a) != Hier {
			return Algo(a), true
		}
	}
	return 0, false
}

// parseForm parses "name" or "level0:name;level1:name".
func parseForm(s string) (Choice, error) {
	if s == "" {
		return Choice{}, fmt.Errorf("empty algorithm")
	}
	if !strings.Contains(s, ":") {
		a, ok := parseName(s)
		if !ok {
			return Choice{}, fmt.Errorf("unknown algorithm %q", s)
		}
		return Choice{Algo: a}, nil
	}
	ch := Choice{Algo: Hier}
	var seen [2]bool
	for _, lv := range strings.Split(s, ";") {
		key, name, ok := strings.Cut(strings.TrimSpace(lv), ":")
		if !ok {
			return Choice{}, fmt.Errorf("level %q is not levelN:name", lv)
		}
		a, ok := parseName(strings.TrimSpace(name))
		if !ok {
			return Choice{}, fmt.Errorf("unknown algorithm %q", strings.TrimSpace(name))
		}
		switch strings.TrimSpace(key) {
		case "level0":
			if seen[0] {
				return Choice{}, fmt.Errorf("level0 given twice")
			}
			if a != Auto && a != Ring && a != RHD {
				return Choice{}, fmt.Errorf("level0 runs ring or rhd, not %s", a)
			}
			ch.Level0, seen[0] = a, true
		case "level1":
			if seen[1] {
				return Choice{}, fmt.Errorf("level1 given twice")
			}
			if a == Binomial {
				return Choice{}, fmt.Errorf("level1 runs ring, tree, dtree or rhd, not %s", a)
			}
			ch.Level1, seen[1] = a, true
		default:
			return Choice{}, fmt.Errorf("unknown level %q (level0 or level1)", strings.TrimSpace(key))
		}
	}
	return ch, nil
}
