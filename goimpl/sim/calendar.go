package sim

import "sort"

// calendar is the busy time of one resource (a rank's egress or ingress, a
// node's uplink): disjoint intervals sorted by start. A reservation takes
// the earliest gap at or after the time asked for, so goroutines that reach
// the resource out of virtual-time order do not push each other back.
type calendar struct {
	busy []interval
}

type interval struct{ start, end float64 }

// fit returns the earliest t >= from at which [t, t+dur) is free.
func (c *calendar) fit(from, dur float64) float64 {
	i := sort.Search(len(c.busy), func(i int) bool { return c.busy[i].end > from })
	t := from
	for ; i < len(c.busy); i++ {
		if c.busy[i].start >= t+dur {
			break
		}
		t = max(t, c.busy[i].end)
	}
	return t
}

// take marks [t, t+dur) busy; it must be free (fit returned t).
func (c *calendar) take(t, dur float64) {
	if dur <= 0 {
		return
	}
	iv := interval{t, t + dur}
	i := sort.Search(len(c.busy), func(i int) bool { return c.busy[i].start >= iv.start })
	// Merge with a neighbour that it touches, to keep the list short.
	const eps = 1e-15
	if i > 0 && c.busy[i-1].end >= iv.start-eps {
		c.busy[i-1].end = max(c.busy[i-1].end, iv.end)
		if i < len(c.busy) && c.busy[i].start <= c.busy[i-1].end+eps {
			c.busy[i-1].end = max(c.busy[i-1].end, c.busy[i].end)
			c.busy = append(c.busy[:i], c.busy[i+1:]...)
		}
		return
	}
	if i < len(c.busy) && c.busy[i].start <= iv.end+eps {
		c.busy[i].start = iv.start
		return
	}
	c.busy = append(c.busy, interval{})
	copy(c.busy[i+1:], c.busy[i:])
	c.busy[i] = iv
}

// reserve finds the earliest t >= from at which every calendar is free for
// its duration, takes it on all of them and returns t.
func reserve(from float64, cals []*calendar, durs []float64) float64 {
	t := from
	for changed := true; changed; {
		changed = false
		for i, c := range cals {
			if u := c.fit(t, durs[i]); u > t {
				t, changed = u, true
			}
		}
	}
	for i, c := range cals {
		c.take(t, durs[i])
	}
	return t
}
