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
	wg.Go(func() { hand, cross, err0 = es[0].MeasureHandOff(time.Now().Add(time.Minute)) })
	wg.Go(func() { _, _, err1 = es[1].MeasureHandOff(time.Now().Add(time.Minute)) })
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
	for _, bad := range []string{"", "1 2", "0.1 0.1 nan 2097152 1:2:3", "1 1 1 1 1:2"} {
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
