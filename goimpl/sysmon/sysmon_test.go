//go:build linux

package sysmon

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// switches returns thread tid's voluntary context switches so far.
func switches(t *testing.T, tid int) int {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no voluntary_ctxt_switches for thread %d", tid)
	return 0
}

// nice returns thread tid's nice value, read from /proc.
func nice(t *testing.T, tid int) int {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	require.NoError(t, err)
	// The command name, in parentheses, may hold spaces: count fields from
	// after its closing parenthesis. nice is field 19 of stat, the 17th
	// after the name.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	require.GreaterOrEqual(t, len(f), 17, "short /proc stat for thread %d", tid)
	n, err := strconv.Atoi(f[16])
	require.NoError(t, err)
	return n
}

// TestFindAndLower finds sysmon and checks the thread behaves as only
// sysmon does: while one goroutine computes and nothing else happens, it
// keeps waking (its tick is at most 10 ms), where a parked thread of the
// runtime sleeps throughout. Then it lowers it and reads the value back.
func TestFindAndLower(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := syscall.Gettid()
	tid, err := Find()
	require.NoError(t, err)
	require.NotEqual(t, me, tid, "Find returned the calling thread")

	before := switches(t, tid)
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
	}
	woke := switches(t, tid) - before
	// 20 ticks of 10 ms at the slowest, fewer once it is lowered on a
	// busy host; a parked thread does not wake at all.
	require.GreaterOrEqual(t, woke, 3, "thread %d woke %d times in 200 ms of computing; sysmon ticks at least every 10 ms", tid, woke)

	myNice := nice(t, me)
	require.NoError(t, Lower(tid, 19))
	require.Equal(t, 19, nice(t, tid))
	require.Equal(t, myNice, nice(t, me), "lowering sysmon changed the calling thread")
}
