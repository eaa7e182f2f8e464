package comm

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
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
	link   tune.Link
	source string
}

func (l interLink) valid() bool { return l.link.Bandwidth > 0 && l.link.Latency > 0 }

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
// the same choices even if their environments differ.
func agreeInter(store rendezvous.Store, prefix string, rank int, m *transport.Mesh, t *topo.Topology,
	cfg config.Config, deadline time.Time) (interLink, error) {
	if t.NumNodes() < 2 {
		return interLink{}, nil
	}
	far := t.Nodes[1][0]
	planKey, key := prefix+"inter/plan", prefix+"inter"
	switch rank {
	case 0:
		given := cfg.InterLatency > 0 && cfg.InterBW > 0
		plan := "probe"
		if given {
			plan = "given"
		}
		if err := store.Set(planKey, []byte(plan)); err != nil {
			return interLink{}, fmt.Errorf("store: %v", err)
		}
		l := interLink{link: tune.Link{Latency: cfg.InterLatency, Bandwidth: cfg.InterBW}, source: "GOHCCL_INTER_LATENCY and GOHCCL_INTER_BW"}
		if !given {
			p := linkProbe{mesh: m, peer: far, deadline: deadline}
			got, what, err := p.measure(true)
			if err != nil {
				return interLink{}, fmt.Errorf("measuring the link to rank %d on another node: %w", far, err)
			}
			l.source = fmt.Sprintf("measured between ranks 0 and %d: %s", far, what)
			if cfg.InterLatency > 0 {
				got.Latency = cfg.InterLatency
				l.source += "; latency from GOHCCL_INTER_LATENCY"
			}
			if cfg.InterBW > 0 {
				got.Bandwidth = cfg.InterBW
				l.source += "; bandwidth from GOHCCL_INTER_BW"
			}
			l.link = got
		}
		if err := store.Set(key, []byte(fmt.Sprintf("%g %g %s", l.link.Latency, l.link.Bandwidth, l.source))); err != nil {
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
		}
	}
	v, err := store.Get(key, time.Until(deadline))
	if err != nil {
		return interLink{}, fmt.Errorf("waiting for rank 0's inter-node link figures: %v", err)
	}
	return parseInter(string(v))
}

// parseInter reads rank 0's record: latency and bandwidth, then the source.
func parseInter(v string) (interLink, error) {
	var l interLink
	fields := strings.SplitN(v, " ", 3)
	if len(fields) == 3 {
		_, e1 := fmt.Sscan(fields[0], &l.link.Latency)
		_, e2 := fmt.Sscan(fields[1], &l.link.Bandwidth)
		l.source = fields[2]
		if e1 == nil && e2 == nil && l.valid() && !math.IsInf(l.link.Latency+l.link.Bandwidth, 0) {
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
		if frames *= 2; round > 0 && (took >= probeLong || frames*probeFrame > probeMax) {
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
