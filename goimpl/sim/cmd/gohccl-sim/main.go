// Command gohccl-sim runs a collective's real schedules on a simulated
// cluster and prints, per algorithm, the alpha-beta prediction, the
// simulated time, algbw and busbw, and the tuner's choice.
//
//	gohccl-sim -nodes 4 -per-node 8 -bytes 1G     # the seed's case
//	gohccl-sim -nodes 128 -per-node 8 -bytes 64M -algos ring,level0:ring;level1:tree
//	gohccl-sim -nodes 1 -per-node 4 -intra-bw 1.2 -intra-lat 30 -bytes 1M -json   # one JSON object per line
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/sim"
	"github.com/gohccl/gohccl/goimpl/tune"
)

func main() {
	nodes := flag.Int("nodes", 4, "nodes")
	perNode := flag.Int("per-node", 8, "ranks per node")
	size := flag.String("bytes", "1G", "message size (K/M/G suffix)")
	coll := flag.String("coll", "allreduce", "allreduce, broadcast, allgather or reducescatter")
	intraBW := flag.Float64("intra-bw", 392, "intra-node GB/s per rank (HCCS)")
	intraLat := flag.Float64("intra-lat", 2, "intra-node latency per step, us")
	interBW := flag.Float64("inter-bw", 12.5, "inter-node GB/s per rank (100 Gb/s RoCE = 12.5)")
	interLat := flag.Float64("inter-lat", 10, "inter-node latency per step, us")
	nodeBW := flag.Float64("node-bw", 0, "shared uplink GB/s per node (0: one NIC per rank, no sharing)")
	reduceBW := flag.Float64("reduce-bw", 200, "reduce kernel GB/s")
	segment := flag.String("segment", "4M", "streaming segment")
	algos := flag.String("algos", "", "comma-separated choices in GOHCCL_ALGO syntax (default: every candidate)")
	asJSON := flag.Bool("json", false, "print one JSON object per algorithm (and one for the tuner's choice) instead of the table")
	flag.Parse()

	bytes, err := config.ParseBytes(*size)
	check(err)
	seg, err := config.ParseBytes(*segment)
	check(err)
	net := sim.Net{Ranks: *nodes * *perNode, PerNode: *perNode,
		Intra:  tune.Link{Latency: *intraLat * 1e-6, Bandwidth: *intraBW * 1e9},
		Inter:  tune.Link{Latency: *interLat * 1e-6, Bandwidth: *interBW * 1e9},
		NodeBW: *nodeBW * 1e9, ReduceBW: *reduceBW * 1e9, Segment: int(seg)}
	c, ok := map[string]tune.Coll{"allreduce": tune.AllReduce, "broadcast": tune.Broadcast, "allgather": tune.AllGather,
		"reducescatter": tune.ReduceScatter}[*coll]
	if !ok {
		check(fmt.Errorf("-coll %q: allreduce, broadcast, allgather or reducescatter", *coll))
	}
	m := tune.Model{Intra: net.Intra, Inter: net.Inter, ReduceBW: net.ReduceBW, Segment: net.Segment}
	shape := tune.Shape{N: net.Ranks, Nodes: *nodes, PerNode: *perNode, Consecutive: true}
	// The rows on a host's shared-memory engine have no links to simulate.
	onLinks := func(ps []tune.Priced) []tune.Priced {
		var out []tune.Priced
		for _, p := range ps {
			if p.Choice.Row.Place != tune.Node && (p.Choice.Level0 == nil || p.Choice.Level0.Name != "mesh") {
				out = append(out, p)
			}
		}
		return out
	}
	all := onLinks(m.Price(c, shape, float64(bytes), tune.Restriction{}))
	rows := tune.Collapse(all)
	if *algos != "" {
		rows = nil
		for _, a := range strings.Split(*algos, ",") {
			spec, err := tune.ParseAlgo(a)
			check(err)
			ps := tune.Collapse(onLinks(m.Price(c, shape, float64(bytes), spec.Per[c])))
			if len(ps) == 0 {
				check(fmt.Errorf("%s has no %s schedule over links", *coll, a))
			}
			rows = append(rows, ps[0])
		}
	}
	n := float64(net.Ranks)
	factor := map[tune.Coll]float64{tune.AllReduce: 2 * (n - 1) / n, tune.Broadcast: 1, tune.AllGather: (n - 1) / n,
		tune.ReduceScatter: (n - 1) / n}[c]
	best := tune.Best(all)
	emit := func(v map[string]any) {
		v["coll"], v["bytes"], v["nodes"], v["per_node"] = *coll, bytes, *nodes, *perNode
		b, err := json.Marshal(v)
		check(err)
		fmt.Println(string(b))
	}
	if !*asJSON {
		fmt.Printf("# %s of %s on %d nodes x %d ranks; intra %g GB/s %g us, inter %g GB/s %g us, reduce %g GB/s, segment %s\n",
			*coll, *size, *nodes, *perNode, *intraBW, *intraLat, *interBW, *interLat, *reduceBW, *segment)
		fmt.Printf("%-34s %12s %12s %10s %10s\n", "algorithm", "model", "simulated", "algbw", "busbw")
	}
	for _, r := range rows {
		if r.Err != nil {
			if *asJSON {
				emit(map[string]any{"algorithm": r.Choice.String(), "error": r.Err.Error()})
			} else {
				fmt.Printf("%-34s %s\n", r.Choice, r.Err)
			}
			continue
		}
		t, err := sim.Run(net, c, r.Choice, int(bytes))
		check(err)
		algbw := float64(bytes) / t / 1e9
		if *asJSON {
			emit(map[string]any{"algorithm": r.Choice.String(), "model_s": r.Seconds, "sim_s": t, "algbw": algbw, "busbw": algbw * factor})
			continue
		}
		fmt.Printf("%-34s %12s %12s %8.2fGB/s %8.2fGB/s\n", r.Choice, tune.FormatSeconds(r.Seconds), tune.FormatSeconds(t), algbw, algbw*factor)
	}
	if *asJSON {
		emit(map[string]any{"tuner": best.String()})
		return
	}
	fmt.Printf("tuner's choice: %s\n", best)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gohccl-sim:", err)
		os.Exit(2)
	}
}
