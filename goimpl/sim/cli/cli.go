// Package cli is gohccl-sim's command line as a library: the command
// (goimpl/sim/cmd/gohccl-sim) and the C ABI (gohccl_sim_main in capi, behind
// `python -m gohccl.sim`) both run Main, so the options and the output are
// the same wherever the simulator is run from.
//
//	gohccl-sim -nodes 4 -per-node 8 -bytes 1G     # the seed's case
//	gohccl-sim -nodes 128 -per-node 8 -bytes 64M -algos ring,level0:ring;level1:tree
//	gohccl-sim -nodes 1 -per-node 4 -intra-bw 1.2 -intra-lat 30 -bytes 1M -json   # one JSON object per line
package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/sim"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// Main runs the simulator with the command-line arguments args (without the
// program name), writing the table to stdout and usage and errors to
// stderr, and returns the exit status: 0, 2 for bad options or a failed run.
// name is the program name usage and errors are prefixed with.
func Main(name string, args []string, stdout, stderr io.Writer) int {
	if err := run(name, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		return 2
	}
	return 0
}

// errUsage marks a flag error the flag package has already reported.
var errUsage = errors.New("usage")

func run(name string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 4, "nodes")
	perNode := fs.Int("per-node", 8, "ranks per node")
	size := fs.String("bytes", "1G", "message size (K/M/G suffix)")
	coll := fs.String("coll", "allreduce", "allreduce, broadcast, allgather or reducescatter")
	intraBW := fs.Float64("intra-bw", 392, "intra-node GB/s per rank (HCCS)")
	intraLat := fs.Float64("intra-lat", 2, "intra-node latency per step, us")
	interBW := fs.Float64("inter-bw", 12.5, "inter-node GB/s per rank (100 Gb/s RoCE = 12.5)")
	interLat := fs.Float64("inter-lat", 10, "inter-node latency per step, us")
	nodeBW := fs.Float64("node-bw", 0, "shared uplink GB/s per node (0: one NIC per rank, no sharing)")
	reduceBW := fs.Float64("reduce-bw", 200, "reduce kernel GB/s")
	segment := fs.String("segment", "4M", "streaming segment")
	algos := fs.String("algos", "", "comma-separated choices in GOHCCL_ALGO syntax (default: every candidate)")
	asJSON := fs.Bool("json", false, "print one JSON object per algorithm (and one for the tuner's choice) instead of the table")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (options only; -h lists them)", fs.Arg(0))
	}
	if *nodes < 1 || *perNode < 1 {
		return fmt.Errorf("-nodes %d -per-node %d: both must be at least 1", *nodes, *perNode)
	}

	bytes, err := config.ParseBytes(*size)
	if err != nil {
		return err
	}
	seg, err := config.ParseBytes(*segment)
	if err != nil {
		return err
	}
	net := sim.Net{Ranks: *nodes * *perNode, PerNode: *perNode,
		Intra:  tune.Link{Latency: *intraLat * 1e-6, Bandwidth: *intraBW * 1e9},
		Inter:  tune.Link{Latency: *interLat * 1e-6, Bandwidth: *interBW * 1e9},
		NodeBW: *nodeBW * 1e9, ReduceBW: *reduceBW * 1e9, Segment: int(seg)}
	c, ok := map[string]tune.Coll{"allreduce": tune.AllReduce, "broadcast": tune.Broadcast, "allgather": tune.AllGather,
		"reducescatter": tune.ReduceScatter}[*coll]
	if !ok {
		return fmt.Errorf("-coll %q: allreduce, broadcast, allgather or reducescatter", *coll)
	}
	m := tune.Model{Intra: net.Intra, Inter: net.Inter, NodeBW: net.NodeBW, ReduceBW: net.ReduceBW, Segment: net.Segment}
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
			if err != nil {
				return err
			}
			ps := tune.Collapse(onLinks(m.Price(c, shape, float64(bytes), spec.Per[c])))
			if len(ps) == 0 {
				return fmt.Errorf("%s has no %s schedule over links", *coll, a)
			}
			rows = append(rows, ps[0])
		}
	}
	n := float64(net.Ranks)
	factor := map[tune.Coll]float64{tune.AllReduce: 2 * (n - 1) / n, tune.Broadcast: 1, tune.AllGather: (n - 1) / n,
		tune.ReduceScatter: (n - 1) / n}[c]
	best := tune.Best(all)
	emit := func(v map[string]any) error {
		v["coll"], v["bytes"], v["nodes"], v["per_node"] = *coll, bytes, *nodes, *perNode
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, string(b))
		return err
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "# %s of %s on %d nodes x %d ranks; intra %g GB/s %g us, inter %g GB/s %g us, reduce %g GB/s, segment %s\n",
			*coll, *size, *nodes, *perNode, *intraBW, *intraLat, *interBW, *interLat, *reduceBW, *segment)
		fmt.Fprintf(stdout, "%-34s %12s %12s %10s %10s\n", "algorithm", "model", "simulated", "algbw", "busbw")
	}
	for _, r := range rows {
		if r.Err != nil {
			if *asJSON {
				if err := emit(map[string]any{"algorithm": r.Choice.String(), "error": r.Err.Error()}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(stdout, "%-34s %s\n", r.Choice, r.Err)
			}
			continue
		}
		t, err := sim.Run(net, c, r.Choice, int(bytes))
		if err != nil {
			return err
		}
		algbw := float64(bytes) / t / 1e9
		if *asJSON {
			if err := emit(map[string]any{"algorithm": r.Choice.String(), "model_s": r.Seconds, "sim_s": t, "algbw": algbw, "busbw": algbw * factor}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(stdout, "%-34s %12s %12s %8.2fGB/s %8.2fGB/s\n", r.Choice, tune.FormatSeconds(r.Seconds), tune.FormatSeconds(t), algbw, algbw*factor)
	}
	if *asJSON {
		return emit(map[string]any{"tuner": best.String()})
	}
	_, err = fmt.Fprintf(stdout, "tuner's choice: %s\n", best)
	return err
}
