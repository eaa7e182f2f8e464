package comm

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/topo"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// interLink is the inter-node link every rank of a communicator prices
// with, and how it was learned; the zero value (a group on one node, or a
// communicator made without a store) leaves the tuner its defaults.
type interLink struct {
	link tune.Link
	// nodeBW is what a node's ranks carry across at once, when that is
	// less than each carrying the link's bandwidth (they share a NIC):
	// tune.Model.NodeBW. 0: each has a link of its own, or not measured.
	nodeBW float64
	source string
}

func (l interLink) valid() bool { return l.link.Bandwidth > 0 && l.link.Latency > 0 }

// measuredLinks holds, per pair of hosts (and the settings that shape the
// probe), the link rank 0 of an earlier communicator of this process
// measured: torch makes a communicator per group, and the link does not
// change between them.
var measuredLinks sync.Map

// The probe's shape: pings for the latency, then bursts each way at once in
// rounds that double from probeFirst frames until one lasts probeLong or
// reaches probeMax bytes.
const (
	probePings = 16
	probeFrame = 128 << 10
	probeFirst = 8
	probeLong  = 8 * time.Millisecond
	probeMax   = 16 << 20
)

// The probe's frames: a collective stamp no operation uses (sequence 0),
// phases in the tag.
const (
	probePing = iota + 1
	probePong
	probeBurst
	probeReport // the far rank's measured rate, after each round
	probeNext   // rank 0's verdict: frames of the next round, 0 to stop
)

// agreeInter settles the inter-node link figures: rank 0 decides, from its
// GOHCCL_INTER_LATENCY and GOHCCL_INTER_BW, or by measuring the link to the
// lowest rank of the next node (probeLink) when either is unset, and
// publishes them; every rank prices with what rank 0 published, so all make
// the same choices even if their environments differ. When it measures and
// the first two nodes have two or more ranks each, their i-th ranks then
// pair up and burst all at once (shared): if pair 0 gets less than 80% of
// its rate alone beside the others, the nodes' ranks share one link.
func agreeInter(store rendezvous.Store, prefix string, rank int, m *transport.Mesh, t *topo.Topology,
	hosts []string, cfg config.Config, deadline time.Time) (interLink, error) {
	if t.NumNodes() < 2 {
		return interLink{}, nil
	}
	far := t.Nodes[1][0]
	planKey, key, sharedKey := prefix+"inter/plan", prefix+"inter", prefix+"inter/shared"
	pairs := min(len(t.Nodes[0]), len(t.Nodes[1]))
	goKey := func(i int) string { return fmt.Sprintf("%sinter/go/%d", prefix, i) }
	// shared runs this rank's part of the round of all pairs at once, if it
	// is in one of them, after rank 0 said how many frames: the other
	// pairs say they go and burst twice as long, and pair 0 (ranks 0 and
	// far) starts once all have gone, so its round runs wholly beside
	// theirs; it returns pair 0's rate on rank 0.
	shared := func() (float64, error) {
		i, mine := slices.Index(t.Nodes[0], rank), true
		if i < 0 {
			i, mine = slices.Index(t.Nodes[1], rank), false
		}
		if i < 0 || i >= pairs || pairs < 2 {
			return 0, nil
		}
		v, err := store.Get(sharedKey, time.Until(deadline))
		if err != nil {
			return 0, fmt.Errorf("waiting for rank 0 to start the shared-link probe: %v", err)
		}
		frames := 0
		fmt.Sscan(string(v), &frames)
		if frames <= 0 {
			return 0, nil
		}
		peer := t.Nodes[1][i]
		if !mine {
			peer = t.Nodes[0][i]
		}
		if i > 0 {
			frames *= 2
			if mine {
				if err := store.Set(goKey(i), []byte("go")); err != nil {
					return 0, fmt.Errorf("store: %v", err)
				}
			}
		} else {
			for j := 1; j < pairs; j++ {
				if _, err := store.Get(goKey(j), time.Until(deadline)); err != nil {
					return 0, fmt.Errorf("waiting for rank %d to start its share of the node's link: %v", t.Nodes[0][j], err)
				}
			}
		}
		p := linkProbe{mesh: m, peer: peer, deadline: deadline}
		rate, err := p.sharedRound(mine, frames)
		if err != nil {
			return 0, fmt.Errorf("measuring the link to rank %d with every pair at once: %w", peer, err)
		}
		return rate, nil
	}
	switch rank {
	case 0:
		given := cfg.InterLatency > 0 && cfg.InterBW > 0
		// A link this process measured already, for an earlier
		// communicator over the same two hosts, is not measured again.
		cacheKey := ""
		if len(hosts) == len(t.Node) {
			cacheKey = fmt.Sprintf("%s\x00%s\x00%d\x00%d\x00%s", hosts[0], hosts[far], pairs, cfg.RanksPerNode, cfg.Transport)
		}
		cached, known := measuredLinks.Load(cacheKey)
		known = known && cacheKey != ""
		plan := "probe"
		switch {
		case given:
			plan = "given"
		case known:
			plan = "known"
		}
		if err := store.Set(planKey, []byte(plan)); err != nil {
			return interLink{}, fmt.Errorf("store: %v", err)
		}
		l := interLink{link: tune.Link{Latency: cfg.InterLatency, Bandwidth: cfg.InterBW}, source: "GOHCCL_INTER_LATENCY and GOHCCL_INTER_BW"}
		switch {
		case given:
		case known:
			l = cached.(interLink)
			l.source = "as measured for an earlier communicator of this process: " + l.source
		default:
			p := linkProbe{mesh: m, peer: far, deadline: deadline}
			got, what, err := p.measure(true)
			if err != nil {
				return interLink{}, fmt.Errorf("measuring the link to rank %d on another node: %w", far, err)
			}
			l = interLink{link: got, source: fmt.Sprintf("measured between ranks 0 and %d: %s", far, what)}
			frames := 0
			if pairs >= 2 {
				frames = p.frames
			}
			if err := store.Set(sharedKey, []byte(fmt.Sprint(frames))); err != nil {
				return interLink{}, fmt.Errorf("store: %v", err)
			}
			rate, err := shared()
			if err != nil {
				return interLink{}, err
			}
			if frames > 0 {
				// Pair 0 beside the others: under 80% of its rate alone
				// says the pairs share their nodes' link, which then
				// carries what they carry together.
				if rate > 0 && rate < 0.8*got.Bandwidth {
					l.nodeBW = max(rate*float64(pairs), got.Bandwidth)
				}
				l.source += fmt.Sprintf("; beside %d other pairs: %.3f GB/s", pairs-1, rate/1e9)
			}
			if cacheKey != "" {
				measuredLinks.Store(cacheKey, l)
			}
		}
		if !given && cfg.InterLatency > 0 {
			l.link.Latency = cfg.InterLatency
			l.source += "; latency from GOHCCL_INTER_LATENCY"
		}
		if !given && cfg.InterBW > 0 {
			l.link.Bandwidth = cfg.InterBW
			l.source += "; bandwidth from GOHCCL_INTER_BW"
		}
		if err := store.Set(key, []byte(fmt.Sprintf("%g %g %g %s", l.link.Latency, l.link.Bandwidth, l.nodeBW, l.source))); err != nil {
			return interLink{}, fmt.Errorf("store: %v", err)
		}
		return l, nil
	case far:
		plan, err := store.Get(planKey, time.Until(deadline))
		if err != nil {
			return interLink{}, fmt.Errorf("waiting for rank 0 to say how the inter-node link is learned: %v", err)
		}
		if string(plan) == "probe" {
			p := linkProbe{mesh: m, peer: 0, deadline: deadline}
			if _, _, err := p.measure(false); err != nil {
				return interLink{}, fmt.Errorf("measuring the link to rank 0 on another node: %w", err)
			}
			if _, err := shared(); err != nil {
				return interLink{}, err
			}
		}
	default:
		if pairs >= 2 && (slices.Contains(t.Nodes[0][:pairs], rank) || slices.Contains(t.Nodes[1][:pairs], rank)) {
			plan, err := store.Get(planKey, time.Until(deadline))
			if err != nil {
				return interLink{}, fmt.Errorf("waiting for rank 0 to say how the inter-node link is learned: %v", err)
			}
			if string(plan) == "probe" {
				if _, err := shared(); err != nil {
					return interLink{}, err
				}
			}
		}
	}
	v, err := store.Get(key, time.Until(deadline))
	if err != nil {
		return interLink{}, fmt.Errorf("waiting for rank 0's inter-node link figures: %v", err)
	}
	return parseInter(string(v))
}

// parseInter reads rank 0's record: latency, bandwidth and the node's
// shared bandwidth (0 for none), then the source.
func parseInter(v string) (interLink, error) {
	var l interLink
	fields := strings.SplitN(v, " ", 4)
	if len(fields) == 4 {
		_, e1 := fmt.Sscan(fields[0], &l.link.Latency)
		_, e2 := fmt.Sscan(fields[1], &l.link.Bandwidth)
		_, e3 := fmt.Sscan(fields[2], &l.nodeBW)
		l.source = fields[3]
		if e1 == nil && e2 == nil && e3 == nil && l.valid() && l.nodeBW >= 0 &&
			!math.IsInf(l.link.Latency+l.link.Bandwidth+l.nodeBW, 0) {
			return l, nil
		}
	}
	return interLink{}, fmt.Errorf("rank 0 published malformed inter-node link figures %q", v)
}

// linkProbe measures one link over the mesh the collectives use, with
// frames of a stamp no collective carries (sequence 0). Both ends run
// measure; the first (rank 0) decides the rounds and returns the figures.
type linkProbe struct {
	mesh     *transport.Mesh
	peer     int
	deadline time.Time
	recvs    [4]transport.Recv
	// frames is the last round's frames, for the round of every pair.
	frames int
}

func (p *linkProbe) header(phase, step, k, n int) transport.Header {
	return transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBarrier},
		Tag: transport.StepTag(phase, step, k), Len: uint32(n)}
}

func (p *linkProbe) send(phase, step, k int, b []byte) error {
	h := p.header(phase, step, k, len(b))
	return p.mesh.Send(p.peer, &h, b, p.deadline)
}

func (p *linkProbe) post(i, phase, step, k int, b []byte) *transport.Recv {
	r := &p.recvs[i]
	r.Peer, r.Want, r.Buf = p.peer, p.header(phase, step, k, len(b)), b
	p.mesh.Post(r)
	return r
}

func (p *linkProbe) recv(phase, step, k int, b []byte) error {
	return p.mesh.Wait(p.post(0, phase, step, k, b), p.deadline)
}

// measure runs the probe: probePings round trips of 8-byte frames (the
// latency is half the median), then rounds of bursts both ways at once,
// each rank timing its round (burst), the far rank reporting its rate, rank
// 0 doubling the frames until a round after the first lasts probeLong or
// carries probeMax. The bandwidth is the lower of the
// two ranks' rates in the last round. what describes the run for logs.
func (p *linkProbe) measure(first bool) (l tune.Link, what string, err error) {
	start := time.Now()
	small := make([]byte, 8)
	rtts := make([]float64, 0, probePings)
	for i := 0; i < probePings; i++ {
		if first {
			t0 := time.Now()
			if err := p.send(probePing, 0, i, small); err != nil {
				return l, "", err
			}
			if err := p.recv(probePong, 0, i, small); err != nil {
				return l, "", err
			}
			rtts = append(rtts, time.Since(t0).Seconds())
		} else {
			if err := p.recv(probePing, 0, i, small); err != nil {
				return l, "", err
			}
			if err := p.send(probePong, 0, i, small); err != nil {
				return l, "", err
			}
		}
	}
	out := make([]byte, probeFrame)
	bufs := make([]byte, len(p.recvs)*probeFrame)
	frames, total := probeFirst, 0
	for round := 0; frames > 0; round++ {
		rate, took, err := p.burst(round, frames, out, bufs)
		if err != nil {
			return l, "", err
		}
		total += frames * probeFrame
		if !first {
			binary.LittleEndian.PutUint64(small, math.Float64bits(rate))
			if err := p.send(probeReport, round, 0, small); err != nil {
				return l, "", err
			}
			if err := p.recv(probeNext, round, 0, small); err != nil {
				return l, "", err
			}
			frames = int(binary.LittleEndian.Uint64(small))
			continue
		}
		if err := p.recv(probeReport, round, 0, small); err != nil {
			return l, "", err
		}
		l.Bandwidth = math.Min(rate, math.Float64frombits(binary.LittleEndian.Uint64(small)))
		if p.frames, frames = frames, frames*2; round > 0 && (took >= probeLong || frames*probeFrame > probeMax) {
			frames = 0
		}
		binary.LittleEndian.PutUint64(small, uint64(frames))
		if err := p.send(probeNext, round, 0, small); err != nil {
			return l, "", err
		}
	}
	if !first {
		return l, "", nil
	}
	slices.Sort(rtts)
	l.Latency = rtts[len(rtts)/2] / 2
	if !(l.Bandwidth > 0) || math.IsInf(l.Bandwidth, 0) || !(l.Latency > 0) {
		return l, "", fmt.Errorf("the probe measured nonsense: latency %gs, bandwidth %g B/s", l.Latency, l.Bandwidth)
	}
	what = fmt.Sprintf("%d round trips, %s each way in %s", probePings, tune.FormatBytes(float64(total)), tune.FormatSeconds(time.Since(start).Seconds()))
	return l, what, nil
}

// burst sends frames frames of out to the peer while receiving as many,
// and returns the rate at which this rank received them: the round's bytes
// over the time from its start to the last frame's arrival. The last frame
// cannot arrive before the link has carried the round, so a rank that is
// slow to look only lowers the figure; the latency in it is small against a
// round of probeLong, and a token bucket's burst is spent by the rounds
// before (the first round, which it flatters, is never the last).
func (p *linkProbe) burst(round, frames int, out, bufs []byte) (rate float64, took time.Duration, err error) {
	start := time.Now()
	sent := make(chan error, 1)
	go func() {
		for k := 0; k < frames; k++ {
			if err := p.send(probeBurst, round, k, out); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	slot := func(k int) []byte { i := k % len(p.recvs); return bufs[i*probeFrame : (i+1)*probeFrame] }
	for k := 0; k < min(frames, len(p.recvs)); k++ {
		p.post(k, probeBurst, round, k, slot(k))
	}
	for k := 0; k < frames; k++ {
		if err := p.mesh.Wait(&p.recvs[k%len(p.recvs)], p.deadline); err != nil {
			return 0, 0, err
		}
		if k+len(p.recvs) < frames {
			p.post(k%len(p.recvs), probeBurst, round, k+len(p.recvs), slot(k+len(p.recvs)))
		}
	}
	took = time.Since(start)
	if err := <-sent; err != nil {
		return 0, 0, err
	}
	return float64(frames*probeFrame) / max(took.Seconds(), 1e-9), took, nil
}

// probeSharedRound tags the round every pair runs at once.
const probeSharedRound = 1 << 20

// sharedRound runs one burst round of frames frames with the peer, as every
// pair of the first two nodes does at once, and returns, on the first
// node's side (first), the slower direction's rate; the other side sends
// its rate there.
func (p *linkProbe) sharedRound(first bool, frames int) (float64, error) {
	out := make([]byte, probeFrame)
	bufs := make([]byte, len(p.recvs)*probeFrame)
	rate, _, err := p.burst(probeSharedRound, frames, out, bufs)
	if err != nil {
		return 0, err
	}
	small := make([]byte, 8)
	if !first {
		binary.LittleEndian.PutUint64(small, math.Float64bits(rate))
		return rate, p.send(probeReport, probeSharedRound, 0, small)
	}
	if err := p.recv(probeReport, probeSharedRound, 0, small); err != nil {
		return 0, err
	}
	return math.Min(rate, math.Float64frombits(binary.LittleEndian.Uint64(small))), nil
}
