package mesh

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/stretchr/testify/require"
)

// The tests and benchmarks with two real processes: the test binary runs
// itself again as local rank 1, with childRole in its environment naming
// what it does, over a segment the parent created.
const (
	childRole    = "GOHCCL_MESH_TEST_ROLE"
	childSegment = "GOHCCL_MESH_TEST_SEGMENT"
	childBudget  = "GOHCCL_MESH_TEST_BUDGET"
)

func TestMain(m *testing.M) {
	// The schedules reach the child through the environment (the
	// options' measurement hooks do too: testOptions reads them).
	if s := os.Getenv("GOHCCL_MESH_TEST_SCHEDULES"); s != "" {
		schedules = s
	}
	if role := os.Getenv(childRole); role != "" {
		if err := child(role); err != nil {
			fmt.Fprintf(os.Stderr, "mesh test child (%s): %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The control segment next to the region: the parent's commands to a
// serving child. A command is an op, a message size and an iteration count,
// published by bumping cmdSeq.
const (
	ctlSeq   = 0
	ctlOp    = 64
	ctlSize  = 72
	ctlIters = 80
	ctlBytes = 4096
)

// The ops a serving child runs.
const (
	serveExit = iota
	serveAllReduce
	serveAllGather
	serveReduceScatter
	serveBroadcast
	serveReduce
)

// proc is the parent's side of a two-process run.
type proc struct {
	e      *Engine
	ctl    []byte
	seq    uint64 // commands sent
	exited atomic.Bool
	done   chan error
	cmd    *exec.Cmd
	stderr bytes.Buffer
}

var segments atomic.Int64

// startChild creates the region and control segments, starts the child in
// role, and attaches the parent as local rank 0. Cleanup kills and reaps
// the child and removes both segments.
func startChild(tb testing.TB, role string, budget int) *proc {
	tb.Helper()
	name := fmt.Sprintf("%smeshtest-%d-%d", shm.Prefix, os.Getpid(), segments.Add(1))
	seg, err := shm.Create(name, RegionSize(2, budget, testOptions(2)))
	require.NoError(tb, err)
	ctl, err := shm.Create(name+"-ctl", ctlBytes)
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	p := &proc{ctl: ctl.Bytes(), done: make(chan error, 1)}
	p.cmd = exec.CommandContext(ctx, os.Args[0])
	// The child runs the schedules this process runs now (withSchedules
	// changes them between subtests), and single copy with them.
	p.cmd.Env = append(os.Environ(), childRole+"="+role, childSegment+"="+name, childBudget+"="+strconv.Itoa(budget),
		"GOHCCL_MESH_TEST_SCHEDULES="+schedules)
	p.cmd.Stdout, p.cmd.Stderr = os.Stdout, &p.stderr
	require.NoError(tb, p.cmd.Start())
	go func() {
		err := p.cmd.Wait()
		p.exited.Store(true)
		p.done <- err
	}()
	e, err := Attach(seg.Bytes(), 2, 0, budget, testOptions(2))
	require.NoError(tb, err)
	e.SetSingleCopy(schedules == "singlecopy")
	p.e = e
	tb.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		cancel()
		e.Close()
		seg.Unlink()
		ctl.Unlink()
		seg.Close()
		ctl.Close()
	})
	return p
}

// send tells a serving child to run iters ops of op on size bytes.
func (p *proc) send(op, size, iters int) {
	binary.LittleEndian.PutUint64(p.ctl[ctlOp:], uint64(op))
	binary.LittleEndian.PutUint64(p.ctl[ctlSize:], uint64(size))
	binary.LittleEndian.PutUint64(p.ctl[ctlIters:], uint64(iters))
	p.seq++
	shm.CounterAt(p.ctl, ctlSeq).Store(p.seq)
}

// wait waits for the child to exit and returns its error with its stderr.
func (p *proc) wait(tb testing.TB) error {
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			return fmt.Errorf("%v: %s", err, p.stderr.String())
		}
		return nil
	case <-time.After(2 * time.Minute):
		return errors.New("child did not exit")
	}
}

func child(role string) error {
	name := os.Getenv(childSegment)
	budget, err := strconv.Atoi(os.Getenv(childBudget))
	if err != nil {
		return err
	}
	seg, err := shm.Open(name, RegionSize(2, budget, testOptions(2)))
	if err != nil {
		return err
	}
	ctl, err := shm.Open(name+"-ctl", ctlBytes)
	if err != nil {
		return err
	}
	e, err := Attach(seg.Bytes(), 2, 1, budget, testOptions(2))
	if err != nil {
		return err
	}
	e.SetSingleCopy(schedules == "singlecopy")
	parent := os.Getppid()
	e.SetStop(func() error {
		if os.Getppid() != parent {
			return errors.New("the parent process is gone")
		}
		return nil
	})
	switch role {
	case "check":
		return checkScript(e, 1)
	case "serve":
		return serve(e, ctl.Bytes(), parent)
	}
	return fmt.Errorf("unknown role %q", role)
}

// serve runs the parent's commands until told to exit.
func serve(e *Engine, ctl []byte, parent int) error {
	seq := shm.CounterAt(ctl, ctlSeq)
	bufs := map[int][2][]byte{}
	stop := func() error {
		if os.Getppid() != parent {
			return errors.New("the parent process is gone")
		}
		return nil
	}
	for i := uint64(1); ; i++ {
		if err := seq.WaitAtLeast(i, time.Now().Add(10*time.Minute), stop, nil); err != nil {
			return err
		}
		op, size, iters := binary.LittleEndian.Uint64(ctl[ctlOp:]), int(binary.LittleEndian.Uint64(ctl[ctlSize:])), int(binary.LittleEndian.Uint64(ctl[ctlIters:]))
		if op == serveExit {
			return nil
		}
		b, ok := bufs[size]
		if !ok {
			b = [2][]byte{touched(size), touched(2 * size)}
			bufs[size] = b
		}
		if err := serveOp(e, int(op), b[0], b[1], 1, iters, 1, true, nil); err != nil {
			return err
		}
	}
}

// touched returns size bytes of memory that is really there: a fresh
// allocation reads as the kernel's one zero page until written, which would
// make a benchmark read from cache.
func touched(size int) []byte {
	b := make([]byte, size)
	for i := 0; i < size; i += 4096 {
		b[i] = 1
	}
	clear(b)
	return b
}

// serveOp runs iters ops of op on rank me, numbered from seq on, the same
// on both ranks, and with end a barrier after them. With lat, it records
// each op's time there.
func serveOp(e *Engine, op int, buf, out []byte, seq uint64, iters, me int, end bool, lat []time.Duration) error {
	count := len(buf) / 4
	kind := [...]transport.Kind{serveAllReduce: transport.KindAllReduce, serveAllGather: transport.KindAllGather,
		serveReduceScatter: transport.KindReduceScatter, serveBroadcast: transport.KindBroadcast, serveReduce: transport.KindReduce}[op]
	c := newCall(kind, reduce.Float32, reduce.Sum, count, 0, 0)
	c.Variant = variantFor(kind, 2, len(buf))
	for i := range iters {
		c.Stamp.Seq = seq + uint64(i)
		t0 := time.Now()
		c.Deadline = t0.Add(time.Minute)
		var err error
		switch op {
		case serveAllReduce:
			err = e.AllReduce(c, buf)
		case serveAllGather:
			err = e.AllGather(c, buf, out)
		case serveReduceScatter:
			err = e.ReduceScatter(c, buf, buf[me*len(buf)/2:][:len(buf)/2])
		case serveBroadcast:
			err = e.Broadcast(c, buf, 0)
		case serveReduce:
			err = e.Reduce(c, buf, 0)
		}
		if err != nil {
			return err
		}
		if lat != nil {
			lat[i] = time.Since(t0)
		}
	}
	if !end {
		return nil
	}
	// A broadcast's root does not wait for the others: end every batch
	// together (end), so that the next batch's sequence numbers meet this
	// one's only after it is over everywhere.
	c.Stamp = transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBarrier}, Seq: seq + uint64(iters)}
	return e.Barrier(c)
}

// checkScript runs the same sequence of checked collectives as the other
// process and compares this rank's results with the reference.
func checkScript(e *Engine, me int) error {
	seq := uint64(1)
	l := e.lay
	for _, col := range collectives {
		for _, count := range []int{0, 1, 1001, (16<<10)/4 + 5, 5*l.buf/4 + 3} {
			dt, op := reduce.Float32, reduce.Sum
			if col.kind == transport.KindReduceScatter {
				dt, op = reduce.Int32, reduce.Max
			}
			inCount := col.inCount(2, count)
			vals := [][]int64{values(dt, op, 0, inCount, int(seq)), values(dt, op, 1, inCount, int(seq))}
			rootArg := 0
			if col.kind == transport.KindBroadcast || col.kind == transport.KindReduce {
				rootArg = root(2)
			}
			c := newCall(col.kind, dt, op, count, rootArg, seq)
			c.Variant = variantFor(col.kind, 2, count*dt.Size())
			out, err := col.run(e, c, me, encode(dt, vals[me]), count)
			if err != nil {
				return fmt.Errorf("%s count %d: %w", col.name, count, err)
			}
			if want := col.want(dt, op, me, 2, vals, count); !bytes.Equal(out, want) {
				return fmt.Errorf("%s count %d: local rank %d has a wrong result", col.name, count, me)
			}
			seq++
		}
	}
	return nil
}

func TestTwoProcesses(t *testing.T) {
	for _, budget := range []int{MinBudget, 8 << 20} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			withSchedules(t, 2, func(t *testing.T) {
				p := startChild(t, "check", budget)
				require.NoError(t, checkScript(p.e, 0))
				require.NoError(t, p.wait(t))
			})
		})
	}
}

// TestKilledPeer kills the child in the middle of a stream of all-reduces:
// the parent's next wait ends at its deadline naming local rank 1, or, with
// a stop check that notices the child's exit, at once.
func TestKilledPeer(t *testing.T) {
	for _, withStop := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop=%v", withStop), func(t *testing.T) {
			p := startChild(t, "serve", MinBudget)
			if withStop {
				p.e.SetStop(func() error {
					if p.exited.Load() {
						return fmt.Errorf("%w: local rank 1 exited", transport.ErrPeerLost)
					}
					return nil
				})
			}
			buf := make([]byte, 1<<20)
			p.send(serveAllReduce, len(buf), 1<<30)
			c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, len(buf)/4, 0, 0)
			c.Variant = variantFor(transport.KindAllReduce, 2, len(buf)) // as serveOp's
			for i := 1; i <= 20; i++ {
				c.Stamp.Seq = uint64(i)
				c.Deadline = time.Now().Add(20 * time.Second)
				require.NoError(t, p.e.AllReduce(c, buf))
			}
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
			const deadline = 2 * time.Second
			t0 := time.Now()
			var err error
			for i := 21; err == nil; i++ {
				c.Stamp.Seq = uint64(i)
				c.Deadline = time.Now().Add(deadline)
				err = p.e.AllReduce(c, buf)
			}
			took := time.Since(t0)
			if schedules == "singlecopy" && errors.Is(err, syscall.ESRCH) {
				// The killed child had posted its buffer: reading it
				// finds the process gone, and the peer is lost at once.
				require.ErrorIs(t, err, transport.ErrPeerLost)
				require.ErrorContains(t, err, "local rank 1's buffer")
				require.Less(t, took, deadline)
			} else if withStop {
				require.ErrorIs(t, err, transport.ErrPeerLost)
				require.Less(t, took, deadline, "the stop check ends the wait before the deadline")
			} else {
				require.ErrorIs(t, err, transport.ErrTimeout)
				var te *TimeoutError
				require.ErrorAs(t, err, &te)
				require.Equal(t, []int{1}, te.Missing)
				require.ErrorContains(t, err, "local rank 1")
				require.Less(t, took, deadline+time.Second)
			}
			t.Logf("after %v: %v", took, err)
		})
	}
}
