// Package sim runs the real schedules of goimpl/algo on goroutine ranks
// over a virtual-time network, to predict how an algorithm scales to
// hundreds of ranks without the machines.
//
// Each rank keeps a virtual clock. A frame sent at the sender's clock
// occupies the sender's egress and the receiver's ingress (and, between
// nodes, the nodes' shared uplinks if NodeBW is set) for len/bandwidth,
// starting when all of them are free, and arrives one link latency after it
// has been serialized; a receive moves the receiver's clock to the arrival
// time, a reduce kernel adds len/ReduceBW. Payloads are virtual: frames
// carry headers and lengths only, nothing is copied and the kernels compute
// nothing, so every rank can share one buffer that is never touched.
//
// Goroutines reach the resources in an order that can differ from
// virtual-time order when several senders contend for one
// receiver: each resource keeps a calendar of busy intervals and a frame
// takes the earliest gap at or after its sender's clock, so a late
// goroutine does not queue behind frames that are later in virtual time.
// Without contention (a ring, halving-doubling partners) it is exact.
package sim

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/topo"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// Net describes the simulated cluster.
type Net struct {
	Ranks, PerNode int       // PerNode consecutive ranks share a node
	Intra, Inter   tune.Link // per-rank links inside a node and between nodes
	// NodeBW, when above 0, is each node's shared uplink (and downlink)
	// bandwidth: inter-node frames of all its ranks contend for it.
	NodeBW float64
	// ReduceBW is the reduce kernels' speed; 0 or +Inf makes them free.
	ReduceBW float64
	// Segment is the streaming unit of the schedules.
	Segment int
}

type frame struct {
	h  transport.Header
	at float64
}

type result struct {
	at  float64
	err error
}

// world is the shared state of one simulated run.
type world struct {
	net      Net
	topo     *topo.Topology
	mu       sync.Mutex
	egress   []calendar // per rank: when its sending side is busy
	ingress  []calendar
	nodeUp   []calendar // per node, with Net.NodeBW
	nodeDown []calendar
	ranks    []*endpoint
}

// endpoint is one rank: an algo.Endpoint with a virtual clock.
type endpoint struct {
	w     *world
	rank  int
	clock float64

	mu      sync.Mutex
	cond    *sync.Cond
	arrived [][]frame           // per peer, in arrival order
	posted  [][]*transport.Recv // per peer, in posting order
	done    map[*transport.Recv]result
}

func (e *endpoint) Rank() int { return e.rank }
func (e *endpoint) Size() int { return len(e.w.ranks) }

// Send reserves the path's resources and queues the frame at the receiver.
func (e *endpoint) Send(peer int, h *transport.Header, _ []byte, _ time.Time) error {
	w := e.w
	d := w.ranks[peer]
	n := float64(h.Len)
	inter := w.topo.Node[e.rank] != w.topo.Node[peer]
	l := w.net.Intra
	if inter {
		l = w.net.Inter
	}
	dur := n / l.Bandwidth
	var cals [4]*calendar
	var durs [4]float64
	cals[0], cals[1], durs[0], durs[1] = &w.egress[e.rank], &w.ingress[peer], dur, dur
	k := 2
	if inter && w.net.NodeBW > 0 {
		nodeDur := n / w.net.NodeBW
		cals[2], cals[3], durs[2], durs[3] = &w.nodeUp[w.topo.Node[e.rank]], &w.nodeDown[w.topo.Node[peer]], nodeDur, nodeDur
		k = 4
		dur = max(dur, nodeDur)
	}
	w.mu.Lock()
	start := reserve(e.clock, cals[:k], durs[:k])
	w.mu.Unlock()
	if e.rank == peer {
		start, dur, l.Latency = e.clock, 0, 0
	}
	d.mu.Lock()
	d.arrived[e.rank] = append(d.arrived[e.rank], frame{h: *h, at: start + dur + l.Latency})
	d.match(e.rank)
	d.mu.Unlock()
	return nil
}

// Post queues a receive; frames from one peer match receives in order.
func (e *endpoint) Post(r *transport.Recv) {
	e.mu.Lock()
	delete(e.done, r)
	e.posted[r.Peer] = append(e.posted[r.Peer], r)
	e.match(r.Peer)
	e.mu.Unlock()
}

// match pairs frames and receives from peer; the caller holds e.mu.
func (e *endpoint) match(peer int) {
	for len(e.arrived[peer]) > 0 && len(e.posted[peer]) > 0 {
		f, r := e.arrived[peer][0], e.posted[peer][0]
		e.arrived[peer], e.posted[peer] = e.arrived[peer][1:], e.posted[peer][1:]
		var err error
		if f.h != r.Want {
			err = fmt.Errorf("%w: rank %d expected %s from rank %d, got %s", transport.ErrMismatch, e.rank, r.Want.String(), peer, f.h.String())
		}
		e.done[r] = result{f.at, err}
		e.cond.Broadcast()
	}
}

// Wait blocks (in real time, up to a minute) for r's frame and moves the
// clock to its arrival.
func (e *endpoint) Wait(r *transport.Recv, _ time.Time) error {
	limit := time.Now().Add(time.Minute)
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		if res, ok := e.done[r]; ok {
			delete(e.done, r)
			e.clock = math.Max(e.clock, res.at)
			return res.err
		}
		if time.Now().After(limit) {
			return fmt.Errorf("%w: rank %d waiting for %s from rank %d (the schedule deadlocks)", transport.ErrTimeout, e.rank, r.Want.String(), r.Peer)
		}
		waitFor(e.cond, 100*time.Millisecond)
	}
}

// waitFor waits on c, waking after at most d so the caller can check its
// real-time limit.
func waitFor(c *sync.Cond, d time.Duration) {
	t := time.AfterFunc(d, func() { c.L.Lock(); c.Broadcast(); c.L.Unlock() })
	c.Wait()
	t.Stop()
}

// Run simulates one collective with choice c (a row of goimpl/tune's table
// that runs over links, with its segment) on net, moving bytes (the
// all-reduce, broadcast or reduce buffer; the allgather output; the
// reduce-scatter input), and returns the virtual time until the last rank
// finishes. The rows that run on a host's shared-memory engine have no
// links to simulate and are refused.
func Run(net Net, coll tune.Coll, c tune.Choice, bytes int) (float64, error) {
	if c.Row == nil || c.Row.Coll != coll {
		return 0, fmt.Errorf("the choice %s is not a schedule of %s", c, coll)
	}
	if c.Row.Place == tune.Node || (c.Level0 != nil && c.Level0.Leg == algo.Level0Node) {
		return 0, fmt.Errorf("%s runs on a host's shared-memory engine, which the simulator does not model", c)
	}
	n := net.Ranks
	if net.PerNode < 1 {
		net.PerNode = n
	}
	if net.Segment <= 0 {
		net.Segment = 1 << 20
	}
	w := &world{net: net, topo: topo.Blocked(n, net.PerNode),
		egress: make([]calendar, n), ingress: make([]calendar, n)}
	w.nodeUp, w.nodeDown = make([]calendar, w.topo.NumNodes()), make([]calendar, w.topo.NumNodes())
	w.ranks = make([]*endpoint, n)
	for r := range w.ranks {
		e := &endpoint{w: w, rank: r, arrived: make([][]frame, n), posted: make([][]*transport.Recv, n),
			done: map[*transport.Recv]result{}}
		e.cond = sync.NewCond(&e.mu)
		w.ranks[r] = e
	}
	count := bytes / 4
	shared := make([]byte, count*4) // never written: virtual payloads
	work := make([]byte, count*4)   // Op.Work of every rank, virtual too
	scratch := make([]byte, 4*max(net.Segment, c.Segment))
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, e := range w.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = runRank(w, e, coll, c, shared, scratch, work, count)
		}()
	}
	wg.Wait()
	var end float64
	for r, e := range w.ranks {
		if errs[r] != nil {
			return 0, fmt.Errorf("rank %d: %w", r, errs[r])
		}
		end = math.Max(end, e.clock)
	}
	return end, nil
}

func runRank(w *world, e *endpoint, coll tune.Coll, c tune.Choice, buf, scratch, work []byte, count int) error {
	cost := func(b []byte) {
		if rb := w.net.ReduceBW; rb > 0 && !math.IsInf(rb, 1) {
			e.clock += float64(len(b)) / rb
		}
	}
	o := &algo.Op{Mesh: e, Scratch: scratch, Segment: w.net.Segment, Recvs: make([]transport.Recv, 2*len(w.ranks)+2),
		DType: reduce.Float32, Deadline: time.Now().Add(time.Hour), Work: work,
		Kernel:  func(dst, _ []byte) { cost(dst) },
		Kernel3: func(dst, _, _ []byte) { cost(dst) }}
	o.Stamp = transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindAllReduce, DType: reduce.Float32, Count: uint64(count)}, Seq: 1}
	x := &tune.Exec{Op: o}
	if c.Row.Place == tune.Levels {
		l0, l1, err := w.topo.Levels(e.rank)
		if err != nil {
			return err
		}
		x.Hier = algo.Hierarchy{Local: l0, Cross: l1, Order: w.topo.SliceOrder()}
	}
	n := len(w.ranks)
	a := &tune.Args{Buf: buf, Count: count}
	switch coll {
	case tune.AllReduce, tune.Broadcast, tune.Reduce:
	case tune.AllGather:
		per := count / n
		a = &tune.Args{In: buf[e.rank*per*4 : (e.rank+1)*per*4], Out: buf[:n*per*4], Count: per}
	case tune.ReduceScatter:
		per := count / n
		a = &tune.Args{In: buf[:n*per*4], Out: buf[e.rank*per*4 : (e.rank+1)*per*4], Count: per}
	default:
		return fmt.Errorf("the simulator runs allreduce, broadcast, reduce, allgather and reducescatter, not %s", coll)
	}
	return c.Run(x, a)
}
