package comm

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	// so the engine's rows can run whole collectives.
	whole bool
	// singleCopy: every pair of these ranks may read each other's
	// memory; figures: this host's measured figures, as the lowest local
	// rank measured them (every local rank prices with the same).
	singleCopy bool
	figures    mesh.Figures
	// chunk is the engine's bytes of message per chunk.
	chunk int
	// settlers are the shared-memory links from the other local ranks,
	// which a collective lets deliver before it returns (Comm.settle).
	settlers []settler
}

// settler is a link whose frames a collective waits to see compared
// before it returns (transport/shm's Link.Settle).
type settler interface{ Settle(budget time.Duration) }

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
	// The wait policy is this communicator's, and so is its evidence that
	// the host's cores are taken (shm.Busy): more of the group's ranks on
	// this host than the cores they may run on always are; otherwise the
	// waits find out as they run (the job's compute threads, other jobs).
	mopt := mesh.DefaultOptions()
	if opt.Config.Wait != "spin" {
		crowded := hostLoads(peers)[machine(peers[rank].Host)].crowded()
		mopt.Wait.Busy = shm.NewBusy(shm.HostCPUs(), crowded, opt.Config.Wait == "sleep")
	}
	meshBytes := mesh.RegionSize(n, meshBudget(budget), mopt)
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
		v, err := awaitKey(store, statusKey(ranks[0]), deadline, m.Health)
		switch {
		case err != nil:
			// Silence is not a verdict: a rank that never reports is
			// absent or dead, and the bootstrap fails naming it, rather
			// than going on as if the host had no shared memory.
			return nil, nil, fmt.Errorf("waiting for rank %d to create the shared segment: %v", ranks[0], err)
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
		v, err := awaitKey(store, statusKey(r), deadline, m.Health)
		if err != nil {
			return nil, nil, fmt.Errorf("waiting for rank %d to map the shared segment: %v", r, err)
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
	engine, err := mesh.Attach(region[:meshBytes], n, me, meshBudget(budget), mopt)
	if err != nil {
		return nil, nil, err
	}
	engine.SetRanks(ranks)
	engine.SetStop(m.Health)
	links, err = shmlink.Attach(region[meshSize:], ranks, me, ring, m, mopt.Wait)
	if err != nil {
		engine.Close()
		return nil, nil, err
	}
	l = &local{ranks: ranks, me: me, seg: seg, engine: engine, whole: n == len(peers),
		chunk: mesh.ChunkBytes(n, meshBudget(budget), mopt)}
	for _, lk := range links {
		if s, ok := lk.(settler); ok {
			l.settlers = append(l.settlers, s)
		}
	}
	if err := l.measure(store, prefix, rank, deadline, m.Health); err != nil {
		for _, lk := range links {
			if lk != nil {
				lk.Close()
			}
		}
		engine.Close()
		l = nil
		return nil, nil, err
	}
	engine.SetSingleCopy(l.singleCopy)
	log.Infof("shared memory with ranks %v: %d bytes (mesh %d, rings %d per pair); single copy %v; %s",
		ranks, size, meshSize, ring, l.singleCopy, describeFigures(l.figures))
	return l, links, nil
}

// measure settles what the engine's rows are priced with, the same on every
// local rank: whether the ranks may read each other's memory (each tries
// the others' probes, mesh.Probe), and this host's figures, which the
// lowest local rank measures (mesh.MeasureHost, and the hand-off with the
// next local rank) and the others read from the store.
func (l *local) measure(store rendezvous.Store, prefix string, rank int, deadline time.Time, health func() error) error {
	key := func(what string, r int) string { return fmt.Sprintf("%sshm%s/%d", prefix, what, r) }
	pid, addr, want := mesh.Probe()
	if err := store.Set(key("probe", rank), []byte(fmt.Sprintf("%d %d %x", pid, addr, want))); err != nil {
		return fmt.Errorf("store: %v", err)
	}
	reads := true
	for _, r := range l.ranks {
		if r == rank {
			continue
		}
		v, err := awaitKey(store, key("probe", r), deadline, health)
		if err != nil {
			return fmt.Errorf("waiting for rank %d's shared-memory probe: %v", r, err)
		}
		var pid int
		var addr uintptr
		var hexWant string
		if _, err := fmt.Sscanf(string(v), "%d %d %s", &pid, &addr, &hexWant); err != nil {
			return fmt.Errorf("rank %d published a malformed probe %q", r, v)
		}
		var w [16]byte
		if b, err := hex.DecodeString(hexWant); err != nil || len(b) != len(w) {
			return fmt.Errorf("rank %d published a malformed probe %q", r, v)
		} else {
			copy(w[:], b)
		}
		reads = reads && mesh.CanReadPeer(pid, addr, w)
	}
	handOff, cross, err := l.engine.MeasureHandOff(deadline)
	if err != nil {
		return err
	}
	verdict := fmt.Sprintf("%t", reads)
	if l.me == 0 {
		f := mesh.MeasureHost()
		f.HandOff, f.Cross = handOff, cross
		verdict += " " + f.String()
	}
	if err := store.Set(key("verdict", rank), []byte(verdict)); err != nil {
		return fmt.Errorf("store: %v", err)
	}
	l.singleCopy = true
	for _, r := range l.ranks {
		v, err := awaitKey(store, key("verdict", r), deadline, health)
		if err != nil {
			return fmt.Errorf("waiting for rank %d's shared-memory verdict: %v", r, err)
		}
		ok, figures, _ := strings.Cut(string(v), " ")
		l.singleCopy = l.singleCopy && ok == "true"
		if r == l.ranks[0] {
			if l.figures, err = mesh.ParseFigures(figures); err != nil {
				return fmt.Errorf("rank %d published its host figures: %v", r, err)
			}
		}
	}
	return nil
}

// describeFigures writes the host figures for the INFO log.
func describeFigures(f mesh.Figures) string {
	var b strings.Builder
	fmt.Fprintf(&b, "host figures: hand-off %.2fus, cross-core copy %.1f GB/s, copy", f.HandOff*1e6, f.Cross/1e9)
	for i, s := range f.Sizes {
		fmt.Fprintf(&b, " %s %.1f", tune.FormatBytes(s), f.Copy[i]/1e9)
	}
	b.WriteString(" GB/s")
	if len(f.Kernel) > 0 {
		b.WriteString(", process_vm_readv")
		for i, s := range f.Sizes {
			fmt.Fprintf(&b, " %s %.1f", tune.FormatBytes(s), f.Kernel[i]/1e9)
		}
		fmt.Fprintf(&b, " GB/s, %.2fus a call", f.Syscall*1e6)
	}
	return b.String()
}

// storeSlice is how long one store read of the bootstrap waits before it
// looks at the links again: a peer whose process died after the ranks
// connected is known dead from its closed connection, and the bootstrap
// fails within about this long of that, not at its timeout.
const storeSlice = time.Second

// awaitKey reads key from the store, waiting until deadline, in slices of
// storeSlice between which health (the links' state: a lost peer) may end
// the wait. A read that fails well before its slice ends failed for
// another reason than time (the store is gone) and ends the wait too.
func awaitKey(store rendezvous.Store, key string, deadline time.Time, health func() error) ([]byte, error) {
	for {
		left := time.Until(deadline)
		slice := min(max(left, time.Millisecond), storeSlice)
		start := time.Now()
		v, err := store.Get(key, slice)
		if err == nil {
			return v, nil
		}
		if health != nil {
			if herr := health(); herr != nil {
				return nil, herr
			}
		}
		if left <= slice || time.Since(start) < slice/2 {
			return nil, err
		}
	}
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

// meshFacts is what every rank of a communicator that spans several hosts
// (or nodes) learns of every node's shared memory, so that all price the
// hierarchical rows' level0 on the engines alike: level0 says every node
// is one group of ranks sharing an engine, all of one size; figures and
// chunk are the first group's (every rank prices with the same).
type meshFacts struct {
	level0  bool
	figures mesh.Figures
	chunk   int
}

// agreeMesh publishes what this rank's group (the ranks of its host and
// node, which setupLocal shared memory among) found, if it is the group's
// lowest rank, and reads every group's record: the facts every rank then
// prices with. l is this rank's shared memory, nil if it has none.
func agreeMesh(store rendezvous.Store, prefix string, rank int, peers []peerInfo, opt Options, l *local, deadline time.Time, health func() error) (meshFacts, error) {
	node := func(p int) int {
		if k := opt.Config.RanksPerNode; k > 0 {
			return p / k
		}
		return 0
	}
	lowest := map[int]bool{}
	size := map[int]int{}
	var mine int
	for p := range peers {
		low := p
		for q := 0; q < p; q++ {
			if peers[q].Host == peers[p].Host && node(q) == node(p) {
				low = q
				break
			}
		}
		lowest[low] = true
		size[low]++
		if p == rank {
			mine = low
		}
	}
	key := func(r int) string { return fmt.Sprintf("%sgroup/%d", prefix, r) }
	if mine == rank {
		rec := "none"
		if l != nil {
			rec = fmt.Sprintf("%d %d %s", len(l.ranks), l.chunk, l.figures)
		}
		if err := store.Set(key(rank), []byte(rec)); err != nil {
			return meshFacts{}, fmt.Errorf("store: %v", err)
		}
	}
	var groups []int
	for low := range lowest {
		groups = append(groups, low)
	}
	slices.Sort(groups)
	facts := meshFacts{level0: true}
	for i, low := range groups {
		v, err := awaitKey(store, key(low), deadline, health)
		if err != nil {
			return meshFacts{}, fmt.Errorf("waiting for rank %d to say what shared memory its host has: %v", low, err)
		}
		n, chunk, figures := 0, 0, ""
		parts := strings.SplitN(string(v), " ", 3)
		if len(parts) == 3 {
			n, _ = strconv.Atoi(parts[0])
			chunk, _ = strconv.Atoi(parts[1])
			figures = parts[2]
		}
		if n != size[low] || n != size[groups[0]] {
			facts.level0 = false
			continue
		}
		if i == 0 {
			f, err := mesh.ParseFigures(figures)
			if err != nil {
				return meshFacts{}, fmt.Errorf("rank %d published its host figures: %v", low, err)
			}
			facts.figures, facts.chunk = f, chunk
		}
	}
	if !facts.level0 {
		return meshFacts{}, nil
	}
	return facts, nil
}
