package comm

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/transport/tcp"
	"golang.org/x/sys/unix"
)

// peerInfo is what each rank publishes about itself during bootstrap.
type peerInfo struct {
	Addr string `json:"addr"` // host:port of its listener
	Host string `json:"host"` // host identity: hostname and boot id
	PID  int    `json:"pid"`
	// CPUs is how many cores the rank's process may use (0: not said).
	CPUs int `json:"cpus"`
	// Cores is the set of cores it may run on, its affinity mask, 64 cores
	// a word (empty: not known). A host's ranks may each be bound to a core
	// of their own (mpirun's default), so whether they crowd their host is
	// the union of their masks against their number, not one rank's count.
	Cores []uint64 `json:"cores,omitempty"`
	// Settings are its values of the variables every rank must set
	// alike (config.SharedVars), compared before anything else is built.
	Settings map[string]string `json:"settings"`
	Key      []byte            `json:"key"` // X25519 public key its handshakes prove (JSON: base64)
}

// New bootstraps rank opt.Rank of a group through store, which every rank
// of the group shares (torch gives each group its own prefix):
//
//  1. Each rank takes a generation number from a counter of its own, so a
//     store reused by a later communicator never serves stale keys.
//  2. Rank 0 publishes a random communicator id.
//  3. Every rank makes a key pair, listens, publishes its address, host
//     identity and public key, and reads everyone else's.
//  4. Each rank connects to every lower rank and accepts every higher one;
//     both ends prove the id and their keys in a handshake (tcp/handshake.go).
func New(store rendezvous.Store, opt Options) (*Comm, error) {
	if opt.Size < 1 || opt.Rank < 0 || opt.Rank >= opt.Size {
		return nil, fmt.Errorf("%w: rank %d of a group of %d", ErrInvalid, opt.Rank, opt.Size)
	}
	if err := opt.Config.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 30 * time.Minute
	}
	if _, err := reduce.PathNamed(opt.Config.SIMD); err != nil {
		return nil, fmt.Errorf("%w: GOHCCL_SIMD: %v", ErrInvalid, err)
	}
	log := NewLogger(opt.Config.Debug, opt.Rank, opt.Size)
	deadline := time.Now().Add(opt.Timeout)
	c, err := bootstrap(store, opt, log, deadline)
	if errors.Is(err, ErrSettings) {
		return nil, fmt.Errorf("%w on rank %d of %d: %w", ErrBootstrap, opt.Rank, opt.Size, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w on rank %d of %d: %v", ErrBootstrap, opt.Rank, opt.Size, err)
	}
	log.Infof("%s", c.Describe())
	return c, nil
}

func bootstrap(store rendezvous.Store, opt Options, log *Logger, deadline time.Time) (*Comm, error) {
	rank, size := opt.Rank, opt.Size
	gen, err := store.Add(fmt.Sprintf("gohccl/gen/%d", rank), 1)
	if err != nil {
		return nil, fmt.Errorf("store: %v", err)
	}
	prefix := fmt.Sprintf("gohccl/%d/", gen)

	var id tcp.Identity
	id.Size = size
	if rank == 0 {
		if _, err := rand.Read(id.CommID[:]); err != nil {
			return nil, err
		}
		if err := store.Set(prefix+"id", id.CommID[:]); err != nil {
			return nil, fmt.Errorf("store: %v", err)
		}
	}
	if id.Key, err = tcp.NewKey(); err != nil {
		return nil, err
	}

	ln, err := listen(opt.Config, opt.MasterAddr, size)
	if err != nil {
		return nil, err
	}
	if ln != nil {
		defer ln.Close()
	}
	me := peerInfo{Host: hostIdentity(), PID: os.Getpid(), CPUs: runtime.NumCPU(), Cores: affinity(), Key: id.Key.PublicKey().Bytes(), Settings: opt.Config.Shared()}
	if ln != nil {
		me.Addr = ln.Addr()
	}
	blob, _ := json.Marshal(me)
	if err := store.Set(fmt.Sprintf("%speer/%d", prefix, rank), blob); err != nil {
		return nil, fmt.Errorf("store: %v", err)
	}
	if rank != 0 {
		v, err := store.Get(prefix+"id", time.Until(deadline))
		if err != nil {
			return nil, fmt.Errorf("waiting for rank 0 to publish the communicator id: %v", err)
		}
		if len(v) != len(id.CommID) {
			return nil, fmt.Errorf("the store holds a malformed communicator id (%d bytes)", len(v))
		}
		copy(id.CommID[:], v)
	}
	peers := make([]peerInfo, size)
	for p := range peers {
		if p == rank {
			peers[p] = me
			continue
		}
		v, err := store.Get(fmt.Sprintf("%speer/%d", prefix, p), time.Until(deadline))
		if err != nil {
			return nil, fmt.Errorf("waiting for rank %d to publish its address (did it start?): %v", p, err)
		}
		if err := json.Unmarshal(v, &peers[p]); err != nil {
			return nil, fmt.Errorf("rank %d published a malformed address: %v", p, err)
		}
	}

	if err := compareSettings(peers); err != nil {
		return nil, err
	}
	if id.Public, err = publicKeys(peers); err != nil {
		return nil, err
	}

	links, err := connect(store, prefix, ln, &id, rank, peers, stripesTo(opt, peers), opt.Config.PeerTimeout, deadline, log)
	if err != nil {
		return nil, err
	}
	matcher := transport.NewMatcher(rank, size)
	matcher.SetEarlyLimit(int(opt.Config.EarlyBytes))
	tl := make([]transport.Link, size)
	for p, conns := range links {
		link := tcp.NewStripedLink(conns, p, matcher)
		link.Watch(peers[p].name(p), opt.Config.PeerTimeout)
		tl[p] = link
	}
	loc, shmLinks, err := setupLocal(store, prefix, id.CommID[:], rank, peers, opt, deadline, matcher, log)
	if err != nil {
		for _, l := range tl {
			if l != nil {
				l.Close()
			}
		}
		return nil, err
	}
	if loc != nil {
		for i, p := range loc.ranks {
			if p != rank {
				tl[p] = newPairedLink(shmLinks[i], tl[p])
			}
		}
	}
	var facts meshFacts
	if loc == nil || !loc.whole {
		facts, err = agreeMesh(store, prefix, rank, peers, opt, loc, deadline, matcher.Health)
	}
	mesh := transport.NewMesh(rank, tl, matcher)
	if err != nil {
		mesh.Close(err)
		if loc != nil {
			loc.close()
		}
		return nil, err
	}
	hosts := make([]string, size)
	for p := range peers {
		hosts[p] = peers[p].Host
	}
	// The inter-node link is measured before anything else uses the links.
	inter, err := agreeInter(store, prefix, rank, mesh, nodesOf(opt.Config, size, hosts), hosts, opt.Config, deadline)
	if err != nil {
		mesh.Close(err)
		if loc != nil {
			loc.close()
		}
		return nil, err
	}
	if opt.CapProcs {
		capProcs(peers, me.Host, log)
	}
	c := newComm(mesh, opt, hex.EncodeToString(id.CommID[:4]), log)
	c.local = loc
	if loc != nil {
		loc.engine.SetStop(c.engineStop)
	}
	c.share = share(peers)
	c.crowded = c.share > 1
	if err := c.initTuning(hosts, facts, inter); err != nil {
		mesh.Close(err)
		if loc != nil {
			loc.close()
		}
		return nil, err
	}
	if opt.Config.Debug >= config.Info {
		for p, pi := range peers {
			log.Infof("rank %d: %s host %s pid %d", p, pi.Addr, pi.Host, pi.PID)
		}
	}
	return c, nil
}

// compareSettings fails when the ranks' values of a variable that must
// agree differ, naming the variable and which ranks hold which value. Every
// rank reads every rank's record, so every rank fails alike, before any
// connection is made.
func compareSettings(peers []peerInfo) error {
	var problems []string
	for _, name := range config.SharedVars {
		byValue := map[string][]int{}
		var order []string
		for p := range peers {
			if peers[p].Settings == nil {
				continue // a record without settings (a test's): nothing to compare
			}
			v, ok := peers[p].Settings[name]
			if !ok {
				v = "(not reported)"
			}
			if byValue[v] == nil {
				order = append(order, v)
			}
			byValue[v] = append(byValue[v], p)
		}
		if len(order) < 2 {
			continue
		}
		parts := make([]string, len(order))
		for i, v := range order {
			parts[i] = fmt.Sprintf("%s on %s", v, rankList(byValue[v]))
		}
		problems = append(problems, fmt.Sprintf("%s differs: %s", name, strings.Join(parts, "; ")))
	}
	if problems == nil {
		return nil
	}
	return fmt.Errorf("%w: every rank must set these alike: %s", ErrSettings, strings.Join(problems, "; "))
}

// rankList writes "rank 3" or "ranks 0, 2".
func rankList(ranks []int) string {
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %d", ranks[0])
	}
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = fmt.Sprint(r)
	}
	return "ranks " + strings.Join(s, ", ")
}

// affinity returns the cores this process may run on, 64 a word, without
// trailing zero words (nil where the kernel does not say).
func affinity() []uint64 {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	words := make([]uint64, len(set))
	for i, w := range set {
		words[i] = uint64(w)
	}
	for len(words) > 0 && words[len(words)-1] == 0 {
		words = words[:len(words)-1]
	}
	return words
}

// hostLoad is, for one machine, how many of the group's ranks it runs and
// on how many cores they may run together.
type hostLoad struct{ ranks, cores int }

// machine names the kernel a host identity runs on: its boot id. Hosts
// that share one (containers of one machine, or the emulated hosts of
// tests/netns.py, each with its own hostname) share its cores, so that is
// where ranks crowd; without a boot id, the host identity.
func machine(host string) string {
	if _, boot, ok := strings.Cut(host, "/"); ok && boot != "" {
		return boot
	}
	return host
}

// hostLoads returns each machine's ranks and cores (keyed by machine): the
// cores are the union of its ranks' affinity masks, or, where one of them
// did not say its mask, the fewest cores any of them said (0: none said).
// Every rank reads the same records, so every rank answers alike.
func hostLoads(peers []peerInfo) map[string]hostLoad {
	type acc struct {
		ranks, fewest int
		union         []uint64
		partial       bool
	}
	hosts := map[string]*acc{}
	for _, p := range peers {
		a := hosts[machine(p.Host)]
		if a == nil {
			a = &acc{}
			hosts[machine(p.Host)] = a
		}
		a.ranks++
		if p.CPUs > 0 && (a.fewest == 0 || p.CPUs < a.fewest) {
			a.fewest = p.CPUs
		}
		if len(p.Cores) == 0 {
			a.partial = true
		}
		for i, w := range p.Cores {
			if i == len(a.union) {
				a.union = append(a.union, 0)
			}
			a.union[i] |= w
		}
	}
	out := make(map[string]hostLoad, len(hosts))
	for h, a := range hosts {
		cores := a.fewest
		if !a.partial {
			cores = 0
			for _, w := range a.union {
				cores += bits.OnesCount64(w)
			}
		}
		out[h] = hostLoad{ranks: a.ranks, cores: cores}
	}
	return out
}

// crowded says whether this load has more ranks than cores to run them on.
func (l hostLoad) crowded() bool { return l.cores > 0 && l.ranks > l.cores }

// share is how many of the group's ranks each core runs on its most
// crowded machine (1 where every rank has a core). It is the group's, not
// one machine's, so that every rank prices alike and chooses alike; the
// most crowded machine sets the pace of an engine's level0 anyway.
func share(peers []peerInfo) float64 {
	most := 1.0
	for _, l := range hostLoads(peers) {
		if l.crowded() {
			most = max(most, float64(l.ranks)/float64(l.cores))
		}
	}
	return most
}

// capProcs caps GOMAXPROCS by the number of ranks on this host.
func capProcs(peers []peerInfo, host string, log *Logger) {
	local := 0
	for _, p := range peers {
		if p.Host == host {
			local++
		}
	}
	want := max(2, runtime.NumCPU()/max(local, 1))
	if want < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(want)
		log.Infof("GOMAXPROCS set to %d: %d ranks share this host's %d cores", want, local, runtime.NumCPU())
	}
}

// hostIdentity names this host: two containers sharing a hostname differ in
// boot id only if they run on different kernels, which is what shared
// memory cares about.
func hostIdentity() string {
	h, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return h + "/" + strings.TrimSpace(string(boot))
}
