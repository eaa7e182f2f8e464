package shm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	shmem "github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// The two-process tests re-execute this test binary as the peer. These
// variables tell the child its role and its segment; TestMain runs the
// child instead of the tests when they are set.
const (
	envRole    = "SHMLINK_TEST_ROLE"
	envSegment = "SHMLINK_TEST_SEGMENT"
	envRing    = "SHMLINK_TEST_RING"
	envSize    = "SHMLINK_TEST_SIZE"
)

// The parent is local rank 0 (communicator rank 0), the child local rank 1.
var pairRanks = []int{0, 1}

// testWait is the wait policy of the tests' links (and their children's).
var testWait = shmem.DefaultPolicy

func TestMain(m *testing.M) {
	// SHMLINK_TEST_SPIN (a duration) and SHMLINK_TEST_YIELD set the wait
	// policy of the tests and of their children, to compare policies in
	// the benchmarks.
	if v := os.Getenv("SHMLINK_TEST_SPIN"); v != "" {
		d, _ := time.ParseDuration(v)
		testWait = shmem.Policy{Spin: d, Yield: os.Getenv("SHMLINK_TEST_YIELD") != ""}
	}
	if role := os.Getenv(envRole); role != "" {
		if err := runChild(role); err != nil {
			fmt.Fprintf(os.Stderr, "child %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild maps the parent's segment, attaches, tells the parent it is
// ready on file descriptor 3, and plays role.
func runChild(role string) error {
	ringBytes, err := strconv.Atoi(os.Getenv(envRing))
	if err != nil {
		return err
	}
	seg, err := shmem.Open(os.Getenv(envSegment), RegionSize(2, ringBytes))
	if err != nil {
		return err
	}
	defer seg.Close()
	m := transport.NewMatcher(1, 2)
	links, err := Attach(seg.Bytes(), pairRanks, 1, ringBytes, m, testWait)
	if err != nil {
		return err
	}
	l := links[0]
	defer l.Close()
	ready := os.NewFile(3, "ready")
	if _, err := ready.WriteString("ready\n"); err != nil {
		return err
	}
	ready.Close()
	switch role {
	case "exchange":
		return exchange(l, m, 0, childSeed, parentSeed, exchangeFrames, ringBytes)
	case "echo":
		size, err := strconv.Atoi(os.Getenv(envSize))
		if err != nil {
			return err
		}
		hd := p2pHeader(1, size)
		r := transport.Recv{Peer: 0, Want: hd, Buf: make([]byte, size)}
		for {
			m.Post(&r)
			if err := m.Wait(&r, time.Now().Add(time.Minute)); err != nil {
				if errors.Is(err, transport.ErrPeerLost) {
					return nil // the parent is done
				}
				return err
			}
			if err := l.Send(&hd, r.Buf, time.Now().Add(time.Minute)); err != nil {
				return err
			}
		}
	case "idle":
		time.Sleep(time.Minute) // until the parent kills it
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

// child is a peer process.
type child struct {
	cmd      *exec.Cmd
	stderr   bytes.Buffer
	waitOnce sync.Once
	waitErr  error
}

// wait reaps the child once, however many callers ask.
func (c *child) wait() error {
	c.waitOnce.Do(func() { c.waitErr = c.cmd.Wait() })
	return c.waitErr
}

// segmentName makes a name no other test run uses.
func segmentName() string {
	return fmt.Sprintf("%stest-link-%d-%d", shmem.Prefix, os.Getpid(), time.Now().UnixNano())
}

// startPair creates a segment for a pair, starts a child playing role on
// it, waits until the child mapped and attached, unlinks the segment and
// attaches the parent's side. The child is killed and reaped when the test
// ends, whatever happened.
func startPair(t testing.TB, role string, ringBytes int, env ...string) (*child, transport.Link, *transport.Matcher) {
	t.Helper()
	name := segmentName()
	seg, err := shmem.Create(name, RegionSize(2, ringBytes))
	require.NoError(t, err)
	t.Cleanup(func() { shmem.Unlink(name) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c := &child{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(os.Environ(), envRole+"="+role, envSegment+"="+name, envRing+"="+strconv.Itoa(ringBytes))
	c.cmd.Env = append(c.cmd.Env, env...)
	c.cmd.Stderr = &c.stderr
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	c.cmd.ExtraFiles = []*os.File{pw}
	require.NoError(t, c.cmd.Start())
	pw.Close()
	t.Cleanup(func() {
		cancel()
		c.cmd.Process.Kill()
		c.wait()
	})

	readyCh := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(pr).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("child said %q", line)
		}
		readyCh <- err
		pr.Close()
	}()
	select {
	case err := <-readyCh:
		if err != nil {
			c.cmd.Process.Kill()
			c.wait()
			t.Fatalf("child did not get ready: %v; its stderr: %s", err, c.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not get ready in 30s")
	}
	// Both have mapped it: the name can go, and nothing is left in
	// /dev/shm however either process ends.
	require.NoError(t, seg.Unlink())

	m := transport.NewMatcher(0, 2)
	links, err := Attach(seg.Bytes(), pairRanks, 0, ringBytes, m, testWait)
	require.NoError(t, err)
	t.Cleanup(func() {
		links[1].Close()
		seg.Close()
	})
	return c, links[1], m
}

const (
	parentSeed     = 11
	childSeed      = 22
	exchangeFrames = 3000
	procRing       = 64 << 10
)

// frameSize draws a mix: mostly small frames, some medium, a few larger
// than the ring.
func frameSize(rng *rand.Rand, ringBytes int) int {
	switch p := rng.IntN(100); {
	case p < 70:
		return rng.IntN(257)
	case p < 95:
		return rng.IntN(64 << 10)
	default:
		return rng.IntN(3*ringCap(ringBytes) + 8)
	}
}

// exchange sends count frames drawn from sendSeed to peer while it
// receives count frames drawn from recvSeed and checks every byte.
func exchange(l transport.Link, m *transport.Matcher, peer int, sendSeed, recvSeed uint64, count, ringBytes int) error {
	sendErr := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(sendSeed, 0))
		for i := range count {
			n := frameSize(rng, ringBytes)
			hd := p2pHeader(uint64(i%7), n)
			if err := l.Send(&hd, randomBytes(rng, n), time.Now().Add(time.Minute)); err != nil {
				sendErr <- fmt.Errorf("sending frame %d: %w", i, err)
				return
			}
		}
		sendErr <- nil
	}()
	rng := rand.New(rand.NewPCG(recvSeed, 0))
	var r transport.Recv
	for i := range count {
		n := frameSize(rng, ringBytes)
		want := randomBytes(rng, n)
		r.Peer, r.Want, r.Buf = peer, p2pHeader(uint64(i%7), n), make([]byte, n)
		m.Post(&r)
		if err := m.Wait(&r, time.Now().Add(time.Minute)); err != nil {
			return fmt.Errorf("receiving frame %d: %w", i, err)
		}
		if !bytes.Equal(want, r.Buf) {
			return fmt.Errorf("frame %d (%d bytes) differs", i, n)
		}
	}
	return <-sendErr
}

// TestTwoProcesses exchanges thousands of frames of mixed sizes both ways
// with a child process over a real segment.
func TestTwoProcesses(t *testing.T) {
	c, l, m := startPair(t, "exchange", procRing)
	require.NoError(t, exchange(l, m, 1, parentSeed, childSeed, exchangeFrames, procRing))
	require.NoError(t, c.wait(), "child: %s", c.stderr.String())
}

// TestChildKilled stops the child, blocks a send on its full ring, then
// kills it: the blocked send and a posted receive must fail well within
// their deadline, not hang.
func TestChildKilled(t *testing.T) {
	c, l, m := startPair(t, "idle", testRing)
	hd := p2pHeader(1, 8)
	r := transport.Recv{Peer: 1, Want: hd, Buf: make([]byte, 8)}
	m.Post(&r)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
	// kill returns before the child's threads have stopped; until they
	// have, its receiver may drain the whole send.
	require.NoError(t, waitStopped(c.cmd.Process.Pid, 10*time.Second))
	big := make([]byte, 1<<20)
	bigHd := p2pHeader(2, len(big))
	deadline := time.Now().Add(10 * time.Second)
	sent := make(chan error, 1)
	go func() { sent <- l.Send(&bigHd, big, deadline) }()
	select {
	case err := <-sent:
		t.Fatalf("send to a stopped peer returned: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	start := time.Now()
	require.NoError(t, c.cmd.Process.Kill())
	go c.wait() // a launcher reaps its children

	err := m.Wait(&r, deadline)
	require.Error(t, err)
	sendErr := <-sent
	require.Error(t, sendErr)
	if selfIdentity().pid == 0 {
		t.Logf("no /proc here: the waits fail at their deadline (%v, %v)", err, sendErr)
		return
	}
	assert.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Contains(t, err.Error(), "exited without closing")
	assert.ErrorIs(t, sendErr, transport.ErrPeerLost)
	assert.Less(t, time.Since(start), 3*time.Second, "noticed long before the 10s deadline")
	t.Logf("death noticed after %v: %v", time.Since(start), err)
}

// TestChildCloses checks that a child that closes its link and exits
// fails the parent's receive with the close, not a timeout.
func TestChildCloses(t *testing.T) {
	c, l, m := startPair(t, "echo", procRing, envSize+"=100")
	hd := p2pHeader(1, 100)
	r := transport.Recv{Peer: 1, Want: hd, Buf: make([]byte, 100)}
	m.Post(&r)
	require.NoError(t, l.Send(&hd, make([]byte, 100), time.Now().Add(time.Second)))
	require.NoError(t, m.Wait(&r, time.Now().Add(10*time.Second)))
	// A frame of another size fails the child's receive; it returns and
	// closes its link on the way out.
	other := p2pHeader(1, 3)
	require.NoError(t, l.Send(&other, make([]byte, 3), time.Now().Add(time.Second)))
	m.Post(&r)
	err := m.Wait(&r, time.Now().Add(10*time.Second))
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 1 closed its shared-memory link")
	assert.Error(t, c.wait(), "the child reports the size mismatch")
	assert.Contains(t, c.stderr.String(), "size or type mismatch")
}

// TestTruncatedSegment truncates a live segment under two attached ranks:
// every access then raises SIGBUS, which must fail the send and the posted
// receive with an error, not crash the process.
func TestTruncatedSegment(t *testing.T) {
	name := segmentName()
	size := RegionSize(2, testRing)
	seg, err := shmem.Create(name, size)
	require.NoError(t, err)
	defer seg.Close()
	defer shmem.Unlink(name)
	ma, mb := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	la, err := Attach(seg.Bytes(), pairRanks, 0, testRing, ma, testWait)
	require.NoError(t, err)
	lb, err := Attach(seg.Bytes(), pairRanks, 1, testRing, mb, testWait)
	require.NoError(t, err)
	hd := p2pHeader(1, 100)
	r := transport.Recv{Peer: 0, Want: hd, Buf: make([]byte, 100)}
	mb.Post(&r)
	require.NoError(t, la[1].Send(&hd, make([]byte, 100), soon()))
	require.NoError(t, mb.Wait(&r, soon()))

	mb.Post(&r)
	require.NoError(t, os.Truncate(shmem.Path(name), 0))
	err = la[1].Send(&hd, make([]byte, 100), soon())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shared memory vanished")
	err = mb.Wait(&r, soon())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 0")
	require.Error(t, la[1].Send(&hd, make([]byte, 100), soon()), "the link stays broken")
	la[1].Close()
	lb[0].Close()
}

// waitStopped waits until every thread of process pid is stopped (state T
// in /proc/pid/task/*/stat).
func waitStopped(pid int, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		stopped := len(tasks) > 0
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			// The state follows the command name, which is in parentheses.
			if i := bytes.LastIndexByte(b, ')'); err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				stopped = false
				break
			}
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not stop within %v", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
