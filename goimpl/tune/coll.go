// Package tune is gohccl's one table of schedules. For every collective it
// holds rows (table.go): a name, a one-line description, a check that says
// whether the row can run on a group (CanRun), its price from the
// alpha-beta model and this host's measured figures (Cost), and the code
// that runs it (Run). The communicator, the simulator, GOHCCL_ALGO and the
// INFO log all read this table; nothing else names an algorithm.
//
// A choice (Choice) is a row plus the axes the row leaves open: the
// streaming segment of a schedule over links (NCCL's "protocol": one frame
// per step for small messages, a pipeline of segments for large ones), and
// for a hierarchical row its level0 and level1 rows. The tuner (tuner.go)
// prices every choice the GOHCCL_ALGO restriction (parse.go) allows and
// can run, takes the cheapest, and remembers it per (collective, size
// class); every rank of a group makes the same choice, because it depends
// only on figures the ranks share.
package tune

import "fmt"

// Coll names a collective.
type Coll uint8

// The collectives. The first five have several schedules and are what a
// bare GOHCCL_ALGO form applies to; the others have one or two rows each.
const (
	AllReduce Coll = iota
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	Gather
	Scatter
	AllToAll
	Barrier
	NumColls
)

// numTuned is the count of collectives a bare GOHCCL_ALGO form applies to.
const numTuned = int(ReduceScatter) + 1

var collNames = [NumColls]string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter",
	"gather", "scatter", "alltoall", "barrier"}

func (c Coll) String() string {
	if c < NumColls {
		return collNames[c]
	}
	return fmt.Sprintf("coll(%d)", uint8(c))
}

// reducing reports whether c combines the ranks' data with a reduce kernel.
func (c Coll) reducing() bool { return c == AllReduce || c == Reduce || c == ReduceScatter }
