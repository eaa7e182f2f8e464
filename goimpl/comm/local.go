package comm

import (
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gohccl/gohccl/goimpl/mesh"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
	shmlink "github.com/gohccl/gohccl/goimpl/transport/shm"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// local is the shared-memory side of a communicator: the ranks of this
// host, the one segment they share, and the mesh engine over it. The links
// to those ranks (shared-memory rings in the same segment) live in the
// communicator's transport.Mesh like any other link.
type local struct {
	ranks  []int // communicator ranks on this host, ascending
	me     int   // this rank's index in ranks
	seg    *shm.Segment
	engine *mesh.Engine
	// whole is true when every rank of the communicator is on this host,
	// so the mesh engine can run whole collectives; meshFor says which
	// collectives GOHCCL_ALGO leaves to it.
	whole   bool
	meshFor [tune.NumColls]bool
	// level0 says, per collective, that this host's ranks are exactly
	// this rank's node in the topology (set by the communicator once it
	// has one) and GOHCCL_ALGO names no level0 for it: its hierarchical
	// form then runs level0 on the mesh engine.
	level0 [tune.NumColls]bool
	spec   tune.Spec
	call   mesh.Call
}

// ringBytes is the ring each directed pair of local ranks gets for the
// shared-memory links: a quarter of GOHCCL_BUFFSIZE split among the pairs
// (the mesh engine, which carries the hot collectives, gets the rest),
// between 16 KiB (a few frames in flight) and 1 MiB (past which a larger
// ring only adds cache misses).
func ringBytes(budget, n int) int {
	r := budget / 4 / max(1, n*(n-1))
	return min(max(r, 16<<10), 1<<20) &^ 4095
}

// meshBudget is the data area of the mesh engine.
func meshBudget(budget int) int { return max(budget-budget/4, 64<<10) }

// segmentName names the segment of one host's ranks of one communicator:
// the communicator id and the host's lowest rank (distinct per host), so
// any rank of the host can remove it after a failure.
func segmentName(commID []byte, lowest int) string {
	return fmt.Sprintf("%s%s-%d", shm.Prefix, hex.EncodeToString(commID), lowest)
}

// setupLocal gives the ranks of this host a shared segment, after every
// rank has shown it can map the segment the lowest rank created (two
// containers can share a hostname and boot id yet not /dev/shm). It returns
// nil, nil when this rank shares its host with nobody, when GOHCCL_TRANSPORT
// is tcp, or (auto) when the probe fails, in which case TCP carries
// everything; with GOHCCL_TRANSPORT=shm a failed probe is an error.
//
// Every rank removes the segment's name as soon as all have mapped it, and
// on every failure path, so nothing is left in /dev/shm.
func setupLocal(store rendezvous.Store, prefix string, commID []byte, rank int, peers []peerInfo,
	opt Options, deadline time.Time, m *transport.Matcher, log *Logger) (l *local, links []transport.Link, err error) {
	if opt.Config.Transport == "tcp" {
		return nil, nil, nil
	}
	// GOHCCL_RANKS_PER_NODE splits a host into nodes: ranks of different
	// nodes then talk over TCP, as they would across hosts.
	node := func(p int) int {
		if k := opt.Config.RanksPerNode; k > 0 {
			return p / k
		}
		return 0
	}
	var ranks []int
	me := -1
	for p := range peers {
		if peers[p].Host == peers[rank].Host && node(p) == node(rank) {
			if p == rank {
				me = len(ranks)
			}
			ranks = append(ranks, p)
		}
	}
	n := len(ranks)
	if n < 2 {
		return nil, nil, nil
	}
	budget := int(opt.Config.BuffSize)
	meshBytes := mesh.RegionSize(n, meshBudget(budget))
	meshSize := (meshBytes + 4095) &^ 4095 // the links' rings start on a page
	ring := ringBytes(budget, n)
	size := meshSize + shmlink.RegionSize(n, ring)
	name := segmentName(commID, ranks[0])
	statusKey := func(r int) string { return fmt.Sprintf("%sshm/%d", prefix, r) }

	var seg *shm.Segment
	var probe error
	if me == 0 {
		seg, probe = shm.Create(name, size)
	} else {
		v, err := store.Get(statusKey(ranks[0]), time.Until(deadline))
		switch {
		case err != nil:
			probe = fmt.Errorf("waiting for rank %d to create the shared segment: %v", ranks[0], err)
		case string(v) != "ok":
			probe = fmt.Errorf("rank %d could not create the shared segment: %s", ranks[0], v)
		default:
			seg, probe = shm.Open(name, size)
		}
	}
	defer func() {
		shm.Unlink(name)
		if l == nil && seg != nil {
			seg.Close()
		}
	}()
	status := "ok"
	if probe != nil {
		status = probe.Error()
	}
	if err := store.Set(statusKey(rank), []byte(status)); err != nil {
		return nil, nil, fmt.Errorf("store: %v", err)
	}
	for i, r := range ranks {
		if r == rank || (i == 0 && me != 0) {
			continue
		}
		v, err := store.Get(statusKey(r), time.Until(deadline))
		if err != nil {
			probe = errors.Join(probe, fmt.Errorf("waiting for rank %d to map the shared segment: %v", r, err))
		} else if string(v) != "ok" {
			probe = errors.Join(probe, fmt.Errorf("rank %d cannot map the shared segment: %s", r, v))
		}
	}
	if probe != nil {
		if opt.Config.Transport == "shm" {
			return nil, nil, fmt.Errorf("GOHCCL_TRANSPORT=shm: ranks %v share host %s but not memory: %v", ranks, peers[rank].Host, probe)
		}
		log.Warnf("ranks %v share host %s but not memory, using TCP among them: %v", ranks, peers[rank].Host, probe)
		return nil, nil, nil
	}

	region := seg.Bytes()
	engine, err := mesh.Attach(region[:meshBytes], n, me, meshBudget(budget))
	if err != nil {
		return nil, nil, err
	}
	engine.SetRanks(ranks)
	engine.SetStop(m.Health)
	links, err = shmlink.Attach(region[meshSize:], ranks, me, ring, m)
	if err != nil {
		engine.Close()
		return nil, nil, err
	}
	if n > runtime.NumCPU() {
		// More ranks than cores: a spinning rank would hold the core
		// the rank it waits for needs, and so does one polling with
		// sched_yield, which CFS hands straight back to the poller. A
		// few microseconds of yielding polls, then the futex: with 4
		// ranks on 2 cores, a 1 ms yield phase made 16 MiB all-reduces
		// 25-105 ms against 18-21 ms, and 4 KiB broadcasts 1.2-1.8 ms
		// against 330-360 us (docs/transports.md).
		shm.SetPolicy(shm.Policy{Spin: 5 * time.Microsecond, Yield: true})
	}
	l = &local{ranks: ranks, me: me, seg: seg, engine: engine, whole: n == len(peers)}
	spec, _ := tune.ParseAlgo(opt.Config.Algo) // validated with the config
	l.spec = spec
	for coll := range l.meshFor {
		a := spec.Per[coll].Algo
		l.meshFor[coll] = a == tune.Auto || a == tune.Mesh
	}
	log.Infof("shared memory with ranks %v: %d bytes (mesh %d, rings %d per pair)", ranks, size, meshSize, ring)
	return l, links, nil
}

// close releases the segment. The links and the engine must be closed and
// no op may be running.
func (l *local) close() {
	l.engine.Close()
	l.seg.Close()
}

// pairedLink carries frames over shared memory and keeps the TCP connection
// to the same peer open only to learn at once when that peer's process
// ends: the kernel closes its sockets, the TCP link tells the
// shared-memory link, which delivers what the peer left in the ring and
// then fails its receives in the matcher, and every wait on shared memory
// sees it through the communicator's stop check.
type pairedLink struct {
	transport.Link                // shared memory
	watch          transport.Link // TCP, carries nothing
}

// newPairedLink pairs the shared-memory link to a peer with the TCP link
// that watches it. The watch's end goes to the shared-memory link, which
// delivers the frames the peer wrote before it exited, then fails its
// receives.
func newPairedLink(link, watch transport.Link) pairedLink {
	w, wok := watch.(interface{ OnLost(func(error)) })
	g, gok := link.(interface{ PeerGone(error) })
	if wok && gok {
		w.OnLost(g.PeerGone)
	}
	return pairedLink{Link: link, watch: watch}
}

func (p pairedLink) Close() error {
	err := p.Link.Close()
	p.watch.Close()
	return err
}
