package mesh

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMeasure checks the host figures: every rate measured and positive,
// the hand-off and cross-core copy timed between two goroutine ranks, and
// the figures surviving the store's text form.
func TestMeasure(t *testing.T) {
	f := MeasureHost()
	require.Len(t, f.Copy, len(rateSizes))
	for i, r := range f.Copy {
		require.Greater(t, r, 0.0, "copy rate at %g bytes", f.Sizes[i])
	}
	require.Greater(t, f.L2, 0)
	es := engines(t, 2, MinBudget)
	var wg sync.WaitGroup
	var hand, cross float64
	var err0, err1 error
	wg.Go(func() { hand, _, cross, err0 = es[0].MeasureHandOff(time.Now().Add(time.Minute)) })
	wg.Go(func() { _, _, _, err1 = es[1].MeasureHandOff(time.Now().Add(time.Minute)) })
	wg.Wait()
	require.NoError(t, err0)
	require.NoError(t, err1)
	require.Greater(t, hand, 0.0)
	require.Greater(t, cross, 0.0)
	f.HandOff, f.Cross = hand, cross
	require.True(t, f.Valid())
	g, err := ParseFigures(f.String())
	require.NoError(t, err)
	require.Equal(t, f.String(), g.String())
	require.InDelta(t, f.CopyRate(1<<20), g.CopyRate(1<<20), 1)
	for _, bad := range []string{"", "1 2", "0.1 0.1 nan 2097152 0 1:2:3", "1 1 1 1 0 1:2", "1 1 1 1 -1 1:2:3", "1 1 1 1 1:2:3"} {
		_, err := ParseFigures(bad)
		require.Error(t, err, bad)
	}
	// Interpolation stays within the measured rates.
	lo, hi := min(f.Copy[0], f.Copy[len(f.Copy)-1]), max(f.Copy[0], f.Copy[len(f.Copy)-1])
	for _, r := range f.Copy {
		lo, hi = min(lo, r), max(hi, r)
	}
	for _, x := range []float64{1, 300 << 10, 5 << 20, 1 << 30} {
		require.GreaterOrEqual(t, f.CopyRate(x), lo)
		require.LessOrEqual(t, f.CopyRate(x), hi)
	}
}

// TestMeasureHandOffRing: with more than two ranks the token goes round
// all of them (every rank must take part: one that does not stalls the
// ring until the deadline), and only local rank 0 returns the figures.
func TestMeasureHandOffRing(t *testing.T) {
	for _, n := range []int{3, 5} {
		es := engines(t, n, MinBudget)
		hands, crosses, errs := make([]float64, n), make([]float64, n), make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() { hands[r], _, crosses[r], errs[r] = es[r].MeasureHandOff(time.Now().Add(time.Minute)) })
		}
		wg.Wait()
		for r := range n {
			require.NoError(t, errs[r], "rank %d of %d", r, n)
		}
		require.Greater(t, hands[0], 0.0)
		require.Greater(t, crosses[0], 0.0)
		for r := 1; r < n; r++ {
			require.Zero(t, hands[r])
			require.Zero(t, crosses[r])
		}

		// One rank missing: the others fail at their deadline, naming the
		// peer they waited for, instead of hanging.
		es = engines(t, n, MinBudget)
		for r := 0; r < n-1; r++ {
			wg.Go(func() { _, _, _, errs[r] = es[r].MeasureHandOff(time.Now().Add(200 * time.Millisecond)) })
		}
		wg.Wait()
		require.ErrorContains(t, errs[0], "measuring the hand-off time")
	}
}
