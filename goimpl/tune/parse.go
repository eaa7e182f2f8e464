package tune

import (
	"fmt"
	"strings"
)

// Restriction is what GOHCCL_ALGO allows for one collective: every row
// (the zero value), the rows of one name or family ("ring", "mesh",
// "mesh.twophase"), or the hierarchical row with a level0 and a level1
// name each ("" for either lets the tuner pick that level).
type Restriction struct {
	Name           string
	Level0, Level1 string
}

// Auto reports whether r allows every row.
func (r Restriction) Auto() bool { return r == Restriction{} }

// levels is the Restriction.Name of the hierarchical form.
const levels = "levels"

func (r Restriction) String() string {
	switch {
	case r.Auto():
		return "auto"
	case r.Name == levels:
		return "level0:" + orAuto(r.Level0) + ";level1:" + orAuto(r.Level1)
	}
	return r.Name
}

func orAuto(s string) string {
	if s == "" {
		return "auto"
	}
	return s
}

// allows reports whether r lets the tuner consider c.
func (r Restriction) allows(c Choice) bool {
	switch {
	case r.Auto():
		return true
	case r.Name == levels:
		return c.Row.Place == Levels && (r.Level0 == "" || r.Level0 == c.Level0.Name) &&
			(r.Level1 == "" || r.Level1 == c.Level1.Name)
	}
	return c.Row.Place != Levels && (r.Name == c.Row.Name || r.Name == c.Row.Family)
}

// Spec is a parsed GOHCCL_ALGO: a restriction per collective.
type Spec struct {
	Per [NumColls]Restriction
}

// ParseAlgo parses GOHCCL_ALGO. A bare form applies to the five
// collectives that have several schedules (where one of them lacks that
// form the tuner falls back to the automatic choice for it, with a
// warning); COLL=FORM items override it for one collective and must name a
// form that collective has.
func ParseAlgo(s string) (Spec, error) {
	var spec Spec
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" || s == "auto" {
		return spec, nil
	}
	fail := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("GOHCCL_ALGO=%q: %s; %s", s, fmt.Sprintf(format, args...), forms())
	}
	var global *Restriction
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
			r, err := parseForm(item)
			if err != nil {
				return fail("%v", err)
			}
			if !anyHas(r) {
				return fail("no collective has the algorithm %q", r.Name)
			}
			global = &r
			continue
		}
		c, ok := parseColl(strings.TrimSpace(collName))
		if !ok {
			return fail("unknown collective %q", strings.TrimSpace(collName))
		}
		if set[c] {
			return fail("%s given twice", c)
		}
		r, err := parseForm(strings.TrimSpace(form))
		if err != nil {
			return fail("%s: %v", c, err)
		}
		if err := check(c, r); err != nil {
			return fail("%v", err)
		}
		spec.Per[c], set[c] = r, true
	}
	if global != nil {
		for c := range numTuned {
			if !set[c] {
				spec.Per[c] = *global
			}
		}
	}
	return spec, nil
}

// check says why collective c has no form r.
func check(c Coll, r Restriction) error {
	if r.Auto() {
		return nil
	}
	if r.Name != levels {
		for _, row := range table[c] {
			if row.Place != Levels && (row.Name == r.Name || row.Family == r.Name) {
				return nil
			}
		}
		return fmt.Errorf("%s has no %s algorithm (it has %s)", c, r.Name, names(c))
	}
	if RowNamed(c, levels) == nil {
		return fmt.Errorf("%s has no hierarchical form", c)
	}
	if r.Level1 != "" {
		if row := RowNamed(c, r.Level1); row == nil || !row.IsLevel1() {
			return fmt.Errorf("%s's level1 runs %s, not %s", c, level1Names(c), r.Level1)
		}
	}
	return nil
}

// anyHas reports whether some collective has form r.
func anyHas(r Restriction) bool {
	for c := range NumColls {
		if check(Coll(c), r) == nil {
			return true
		}
	}
	return false
}

// names lists collective c's forms for error messages.
func names(c Coll) string {
	var ns []string
	seen := map[string]bool{}
	for _, row := range table[c] {
		n := row.Name
		if row.Place == Levels {
			n = "level0:X;level1:Y"
		}
		if !seen[row.Family] && row.Family != n && row.Place != Levels {
			seen[row.Family] = true
			ns = append(ns, row.Family)
		}
		ns = append(ns, n)
	}
	return join(ns)
}

// level1Names lists the rows collective c's hierarchical form runs at
// level1.
func level1Names(c Coll) string {
	var ns []string
	for _, row := range table[c] {
		if row.IsLevel1() {
			ns = append(ns, row.Name)
		}
	}
	return join(ns)
}

func join(ns []string) string {
	s := strings.Join(ns, ", ")
	if i := strings.LastIndex(s, ", "); i >= 0 {
		s = s[:i] + " or " + s[i+2:]
	}
	return s
}

// rowNames lists the table's flat rows and their families, in the table's
// order, each once.
func rowNames() []string {
	var names []string
	seen := map[string]bool{}
	for c := range NumColls {
		for _, r := range Rows(c) {
			if r.Place == Levels {
				continue
			}
			for _, n := range []string{r.Family, r.Name} {
				if !seen[n] {
					seen[n] = true
					names = append(names, n)
				}
			}
		}
	}
	return names
}

// forms describes the valid forms, for error messages.
func forms() string {
	var l0 []string
	for _, r := range level0Rows {
		l0 = append(l0, r.Name)
	}
	return "valid forms: auto | a row or family of the table (" + strings.Join(rowNames(), ", ") +
		") | level0:X;level1:Y (level0: " + join(l0) + "; level1: a schedule over links the " +
		"collective has at level1; either level may be left out or auto) | per collective COLL=FORM joined by '/', COLL one of " +
		strings.Join(collNames[:], ", ") + ", e.g. allreduce=level0:mesh;level1:rhd/allgather=ring/reducescatter=rhd"
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

// known reports whether some row of the table is called name or belongs
// to the family name.
func known(name string) bool {
	for c := range NumColls {
		for _, row := range table[c] {
			if row.Place != Levels && (row.Name == name || row.Family == name) {
				return true
			}
		}
	}
	return false
}

// parseForm parses "name" or "level0:name;level1:name".
func parseForm(s string) (Restriction, error) {
	if s == "" {
		return Restriction{}, fmt.Errorf("empty algorithm")
	}
	if !strings.Contains(s, ":") {
		if s == "auto" {
			return Restriction{}, nil
		}
		if !known(s) {
			return Restriction{}, fmt.Errorf("unknown algorithm %q", s)
		}
		return Restriction{Name: s}, nil
	}
	r := Restriction{Name: levels}
	var seen [2]bool
	for _, lv := range strings.Split(s, ";") {
		key, name, ok := strings.Cut(strings.TrimSpace(lv), ":")
		if !ok {
			return Restriction{}, fmt.Errorf("level %q is not levelN:name", lv)
		}
		name = strings.TrimSpace(name)
		if name == "auto" {
			name = ""
		}
		switch strings.TrimSpace(key) {
		case "level0":
			if seen[0] {
				return Restriction{}, fmt.Errorf("level0 given twice")
			}
			if name != "" && Level0Named(name) == nil {
				if known(name) {
					return Restriction{}, fmt.Errorf("level0 runs ring, rhd or mesh, not %s", name)
				}
				return Restriction{}, fmt.Errorf("unknown algorithm %q", name)
			}
			r.Level0, seen[0] = name, true
		case "level1":
			if seen[1] {
				return Restriction{}, fmt.Errorf("level1 given twice")
			}
			if name != "" && !level1Anywhere(name) {
				if known(name) {
					return Restriction{}, fmt.Errorf("level1 runs ring, tree, dtree or rhd, not %s", name)
				}
				return Restriction{}, fmt.Errorf("unknown algorithm %q", name)
			}
			r.Level1, seen[1] = name, true
		default:
			return Restriction{}, fmt.Errorf("unknown level %q (level0 or level1)", strings.TrimSpace(key))
		}
	}
	return r, nil
}

// level1Anywhere reports whether some collective runs row name at level1.
func level1Anywhere(name string) bool {
	for c := range NumColls {
		if row := RowNamed(Coll(c), name); row != nil && row.IsLevel1() {
			return true
		}
	}
	return false
}
