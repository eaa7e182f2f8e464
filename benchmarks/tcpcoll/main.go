// Command tcpcoll times gohccl's collectives between two hosts over TCP
// with nothing else in the process: no Python, no torch, no agent. Beside
// tcpceiling (plain TCP between the same hosts) it tells the transport's
// own cost from what a torch job adds (docs/transports.md).
//
// Both hosts run it at once; they meet through files in -dir (a directory
// both see: tests/netns.py's hosts share the file system):
//
//	go build -o /tmp/tcpcoll ./benchmarks/tcpcoll
//	python tests/netns.py up --hosts 2 -- /tmp/tcpcoll -rank {host} -master {master} -dir /tmp/tcpcoll.$$
//
// GOHCCL_* variables apply as in a torch job. Rank 0 prints, per op and size,
// the median over -n samples of the mean time of -block back-to-back calls,
// and the bytes each rank sends per second (for broadcast: the root's), and the
// CPU time (user and system) a call costs the busier rank.
// -cpuprofile writes a Go CPU profile of the timed loops.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
)

func main() {
	rank := flag.Int("rank", 0, "this host's rank (0 or 1)")
	master := flag.String("master", "127.0.0.1", "address of rank 0's host")
	dir := flag.String("dir", "", "a new directory both ranks see, for the rendezvous (each run needs its own)")
	ops := flag.String("c", "broadcast,all_gather,all_reduce,reduce_scatter", "comma list of ops")
	sizes := flag.String("sizes", "1M,16M", "comma list of message sizes in bytes (K/M suffix)")
	iters := flag.Int("n", 10, "samples per row")
	block := flag.Int("block", 5, "back-to-back calls per sample")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the timed loops to this file")
	locked := flag.Bool("locked", false, "call the ops from a goroutine locked to its thread, as the C ABI's callers (torch's threads) are")
	flag.Parse()
	errc := make(chan error)
	go func() {
		if *locked {
			runtime.LockOSThread()
		}
		errc <- run(*rank, *master, *dir, *ops, *sizes, *iters, *block, *cpuprofile)
	}()
	if err := <-errc; err != nil {
		fmt.Fprintf(os.Stderr, "tcpcoll rank %d: %v\n", *rank, err)
		os.Exit(1)
	}
}

func run(rank int, master, dir, ops, sizes string, iters, block int, cpuprofile string) error {
	if dir == "" {
		return fmt.Errorf("-dir is required")
	}
	cfg, err := config.Load(os.LookupEnv)
	if err != nil {
		return err
	}
	store, err := newFileStore(dir)
	if err != nil {
		return err
	}
	c, err := comm.New(store, comm.Options{Rank: rank, Size: 2, Timeout: time.Minute, Config: cfg,
		MasterAddr: master, CapProcs: os.Getenv("GOMAXPROCS") == ""})
	if err != nil {
		return err
	}
	defer c.Close()
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	for _, op := range strings.Split(ops, ",") {
		for _, s := range strings.Split(sizes, ",") {
			n, err := config.ParseBytes(s)
			if err != nil {
				return err
			}
			if err := row(c, rank, op, int(n)&^7, iters, block); err != nil {
				return err
			}
		}
	}
	return nil
}

// row times op on n bytes (the output's size for all_gather, the input's
// for reduce_scatter, as nccl-tests counts).
func row(c *comm.Comm, rank int, op string, n, iters, block int) error {
	count := n / 4
	buf := make([]byte, n)
	half := make([]byte, n/2)
	var call func() error
	var sent float64 // bytes each rank sends per call
	switch op {
	case "broadcast":
		call = func() error { return c.Broadcast(buf, count, reduce.Float32, 0, 0) }
		sent = float64(n)
	case "all_gather":
		call = func() error { return c.AllGather(half, buf, count/2, reduce.Float32, 0) }
		sent = float64(n / 2)
	case "all_reduce":
		call = func() error { return c.AllReduce(buf, count, reduce.Float32, reduce.Sum, 0) }
		sent = float64(n)
	case "reduce_scatter":
		call = func() error { return c.ReduceScatter(buf, half, count/2, reduce.Float32, reduce.Sum, 0) }
		sent = float64(n / 2)
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	for i := 0; i < 2*block; i++ { // warm-up
		if err := call(); err != nil {
			return err
		}
	}
	samples := make([]float64, iters)
	cpu0 := cpuTime()
	for i := range samples {
		// Start each sample together: a small all-reduce as a barrier.
		if err := c.AllReduce(make([]byte, 4), 1, reduce.Float32, reduce.Sum, 0); err != nil {
			return err
		}
		t := time.Now()
		for j := 0; j < block; j++ {
			if err := call(); err != nil {
				return err
			}
		}
		samples[i] = time.Since(t).Seconds() / float64(block)
	}
	cpu := (cpuTime() - cpu0) / float64(iters*block)
	slices.Sort(samples)
	med := samples[len(samples)/2]
	// Each rank's median; rank 0 prints the larger of the two.
	b := make([]byte, 16)
	putF64(b, med)
	putF64(b[8:], cpu)
	if err := c.AllReduce(b, 2, reduce.Float64, reduce.Max, 0); err != nil {
		return err
	}
	med, cpu = getF64(b), getF64(b[8:])
	if rank == 0 {
		fmt.Printf("%-15s %10d %10.1f us %8.2f GB/s sent per rank, cpu %8.1f us per call (busier rank)\n",
			op, n, med*1e6, sent/med/1e9, cpu*1e6)
	}
	return nil
}

// cpuTime returns the process's user and system CPU seconds so far.
func cpuTime() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// fileStore is a rendezvous.Store over files in a directory both hosts see.
type fileStore struct{ dir string }

func newFileStore(dir string) (*fileStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &fileStore{dir}, nil
}

func (s *fileStore) path(key string) string {
	return filepath.Join(s.dir, strings.NewReplacer("/", "_").Replace(key))
}

func (s *fileStore) Set(key string, value []byte) error {
	tmp := s.path(key) + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, value, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path(key))
}

func (s *fileStore) Get(key string, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(s.path(key))
		if err == nil {
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s", rendezvous.ErrTimeout, key)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (s *fileStore) Add(key string, delta int64) (int64, error) {
	lock, err := os.OpenFile(filepath.Join(s.dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return 0, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	var v int64
	if b, err := os.ReadFile(s.path(key)); err == nil {
		v, _ = strconv.ParseInt(string(b), 10, 64)
	}
	v += delta
	return v, s.Set(key, []byte(strconv.FormatInt(v, 10)))
}

func putF64(b []byte, f float64) { binary.LittleEndian.PutUint64(b, math.Float64bits(f)) }

func getF64(b []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b)) }
