package tune

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Measuring. Where the model's prices are known to mislead (a host with
// more ranks than cores, where every hand-off waits for a descheduled peer
// to be woken and get a core), the tuner does not trust its cheapest row
// alone: for each (collective, size class) it runs the few rows the model
// ranks best in each place as the first ops of that class, each for Rounds
// ops in a row in each of Passes passes, and keeps the one that was
// fastest. Every rank must keep the same row, so the ranks agree on the
// times before the class's next op: right after its last trial op, the
// largest over the ranks of each rank's time per candidate and pass is
// taken by one small all-reduce (the communicator's agree step), whose
// integer figures are the same on every rank, and Settle picks from them.
// The largest, because the slowest rank is the one the next op waits for:
// in a stream of ops it sets the pace. From then on the class costs one
// array lookup, as a modelled one does.
//
// The candidates are ordered by price, the model's own choice first; a
// candidate whose agreed time is within Tie of the fastest loses to an
// earlier one, so the model's choice stays unless another row is clearly
// faster.

// Rounds is how many ops in a row a trial runs each candidate, each pass.
// The first is not counted (it pays for the switch from the candidate
// before: the other schedule's waiters going to sleep, buffers touched the
// first time) and of the others the median counts, so one slow run (a
// wake-up that came late) does not decide: what is measured is the
// candidate back to back, as a stream of ops runs it. A class whose
// cheapest row the model prices so that SmallRounds ops take at most
// SmallTrial runs SmallRounds ops a run: an op of up to a few hundred
// microseconds is moved by one late wake-up; at 2 ranks medians of 3 kept
// a link row 3.6x slower than the engine's for 64 KiB broadcasts in half
// the jobs, and put the engine's rows for a 1 MiB all-reduce out of order
// (one row's 200 us an op against another's 140). Longer ops run Rounds,
// so a trial of the largest messages costs tens of their ops, not
// hundreds.
const (
	Rounds      = 4
	SmallRounds = 16
	SmallTrial  = 5 * time.Millisecond
)

// RoundsFor is the ops in a row a trial runs each candidate, for a class
// whose cheapest row is priced seconds.
func RoundsFor(seconds float64) int {
	if seconds*SmallRounds <= SmallTrial.Seconds() {
		return SmallRounds
	}
	return Rounds
}

// Passes is how many times a trial runs through its candidates, every
// other time in reverse order, and a candidate's time is the median of its
// passes' medians, so that two passes must agree. A communicator's first
// ops are slow whatever they run (at 4 ranks on 2 cores the first 15 or so
// took 2-3x their later time: the processes' threads and pages being set
// up, the wait policy's evidence gathered), and a single pass charged that
// to the candidate that ran first, the model's own choice (the engine's
// one-shot broadcast of 64 KiB was measured at 424 us and left for a row
// that ran 7x slower than it in a stream). The smaller of two passes then
// kept rows that were fast in one pass only (a ring broadcast of 16 KiB at
// 2 ranks: 1.2 us an op in one pass, 7.5 in the other, 4-13 in the stream
// that followed); and one pass of a row can run 3x slower than its others
// (the one-shot all-reduce of 1 MiB at 2 ranks: 381 us an op, then 123).
const Passes = 3

// On one host whose ranks share the engine, a trial does not run the links'
// rows: each link has a receive goroutine that copies its frames, and the
// core time it takes falls between the ops a trial times, not in them. At 2
// ranks on 2 cores a ring broadcast of 16 KiB took 0.8-1.1 us an op (the
// trials' medians put it at 1.2-1.3 us, under the engine's one-shot row at
// 1.9) and 6.7-7.9 us an op in a stream of 50 (its ops plus the time
// between them: a rank's thread descheduled for hundreds of microseconds,
// and the stream's first op waiting for a peer that had gone to sleep),
// where the one-shot row runs 2-4 us: in a third to three quarters of the
// jobs the trial kept a link row that ran 2-4x slower than the engine's.
// The model prices the links' rows there at 5-10x the engine's, which they
// are; it is the engine's rows, priced from a few figures of the host,
// whose order the trial is for.
//
// trialPerPlace is how many rows of the links and of the hierarchy a trial
// runs at most (the engine's rows, three at most, are all tried: their
// prices come from a few figures of the host and have ranked them wrongly
// by up to 1.6x, docs/algorithms.md), and trialPriceSpan how far above the
// cheapest price a row may be priced and still be tried: the model's
// errors on a crowded host have been measured at up to 12x (docs/tuning.md).
const (
	trialPerPlace  = 2
	trialPriceSpan = 100
)

// Revisiting. A trial sees the machine as it is while the trial runs, and
// a VM can run every copy 3-4x slower for seconds at a time, some rows
// more than others (stop 32, docs/algorithms.md): a 16 MiB all-reduce
// trial in such a stretch measured the two-phase row at 9.7-10.6 ms and
// single copy at 4.8-5.3, kept single copy, and ran it at 4-5 ms for the
// rest of the job where two-phase runs 2.4. So a class that keeps running
// is tried again: once its kept row has run for about Revisit.After (as
// the agreed time of that row prices its ops), then Revisit.Spacing times
// as long, Revisit.Times times in all, each at least Revisit.MinTrials
// trials' worth of ops after the one before, so that trials stay a small
// share of the class's ops. A candidate's time is then the smallest of its
// median passes over the class's trials (a slow stretch only adds time),
// and the class keeps the earliest within Tie of the fastest. Every rank
// counts the same ops of the class and prices the distance from the same
// agreed figures, so every rank starts a revisit at the same op.
type Revisit struct {
	After     time.Duration // the kept row's run before the first revisit
	Spacing   int           // how many times longer each later wait is
	Times     int           // revisits in all (0: none)
	MinTrials int           // the shortest wait, in trials' worth of ops
}

// DefaultRevisit is two more trials, after about 2 and 16 seconds of a
// class's ops: longer than the slow stretches seen, and for a training
// job's gradient buckets a few of its first steps.
var DefaultRevisit = Revisit{After: 2 * time.Second, Spacing: 8, Times: 2, MinTrials: 8}

// opsUntil is how many ops of a class whose kept row runs seconds an op
// come before its revisit after trial done (1 for the first), for a trial
// of trialOps ops; 0 for none.
func (r Revisit) opsUntil(done int, seconds float64, trialOps int) int {
	if done > r.Times {
		return 0
	}
	after := r.After.Seconds()
	for range done - 1 {
		after *= float64(max(r.Spacing, 1))
	}
	ops := max(r.MinTrials*trialOps, 1)
	if seconds > 0 && after/seconds > float64(ops) {
		ops = int(min(after/seconds, 1<<40))
	}
	return ops
}

// trial is one (collective, size class) being measured.
type trial struct {
	cands []Choice
	// rounds is the ops of each run (RoundsFor the class's cheapest price).
	rounds int
	// order is the candidate each run of rounds ops runs: every candidate
	// once a pass, every other pass in reverse.
	order []int
	// times holds this rank's seconds, round r of run j at j*rounds+r:
	// the order the ops ran in.
	times []float64
	calls int
	// nanos is each candidate's median in each pass in nanoseconds, pass p
	// of candidate i at p*len(cands)+i, then the largest over the ranks,
	// which Settle reads. The agreement takes the largest per pass, not of
	// each rank's median over passes: a pass's figures are the ranks' view
	// of one moment.
	nanos []int64
	// best is each candidate's smallest median pass over the class's
	// trials so far, done how many have settled, left the class's ops
	// until the next (see Revisit).
	best       []int64
	done, left int
}

// SetMeasure turns measuring on or off for the classes not chosen yet.
func (t *Tuner) SetMeasure(on bool) { t.measure = on }

// Measuring says whether classes not chosen yet are measured.
func (t *Tuner) Measuring() bool { return t.measure }

// startTrial returns the trial of a class whose priced candidates are ps
// and whose modelled choice is model, or nil when there is only one
// candidate worth running.
func (t *Tuner) startTrial(ps []Priced, model Choice) *trial {
	cands := []Choice{model}
	cheapest, engine := -1.0, false
	for _, p := range ps {
		if p.Err == nil && (cheapest < 0 || p.Seconds < cheapest) {
			cheapest = p.Seconds
		}
		engine = engine || p.Err == nil && p.Choice.Row.Place == Node
	}
	// How many rows of a place a trial runs at most, the model's choice
	// counted where it is one of them.
	limit := func(place Place) int {
		switch {
		case place == Node:
			return len(ps)
		case place == Links && engine && t.shape.Nodes == 1:
			return 0 // the links beside the engine: see above trialPerPlace
		}
		return trialPerPlace
	}
	rows := Collapse(ps)
	slices.SortStableFunc(rows, func(a, b Priced) int {
		switch {
		case a.Err != nil || b.Err != nil:
			return boolInt(a.Err != nil) - boolInt(b.Err != nil)
		case a.Seconds < b.Seconds:
			return -1
		case a.Seconds > b.Seconds:
			return 1
		}
		return 0
	})
	var per [Levels + 1]int
	per[model.Row.Place]++
	for _, p := range rows {
		place := p.Choice.Row.Place
		if p.Err != nil || p.Choice.Name() == model.Name() || per[place] >= limit(place) || p.Seconds > cheapest*trialPriceSpan {
			continue
		}
		per[place]++
		cands = append(cands, p.Choice)
	}
	if len(cands) < 2 {
		return nil
	}
	order := make([]int, 0, Passes*len(cands))
	for p := range Passes {
		for i := range cands {
			if p%2 == 1 {
				i = len(cands) - 1 - i
			}
			order = append(order, i)
		}
	}
	rounds := RoundsFor(cheapest)
	return &trial{cands: cands, rounds: rounds, order: order, times: make([]float64, len(order)*rounds), nanos: make([]int64, Passes*len(cands))}
}

// next is the candidate the trial's next op runs.
func (tr *trial) next() Choice { return tr.cands[tr.order[tr.calls/tr.rounds]] }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Observe records that this rank's op of coll moving bytes, run with the
// choice Choose returned for it, took seconds. It reports whether that op
// was the last of its class's trial: the communicator must then, before
// its next op and on every rank alike, take the largest of Timings over the
// ranks and pass
// them to Settle.
func (t *Tuner) Observe(coll Coll, bytes int, seconds float64) bool {
	class := SizeClass(bytes)
	tr := t.trials[coll][class]
	if tr == nil {
		t.countToRevisit(coll, class)
		return false
	}
	if tr.calls == len(tr.times) {
		return false
	}
	tr.times[tr.calls] = seconds
	tr.calls++
	return tr.calls == len(tr.times)
}

// countToRevisit counts an op of a settled class and starts its next trial
// when it is due: the class's next op runs the trial's first candidate.
func (t *Tuner) countToRevisit(coll Coll, class int) {
	tr := t.settled[coll][class]
	if tr == nil {
		return
	}
	if tr.left--; tr.left > 0 {
		return
	}
	t.settled[coll][class] = nil
	tr.calls = 0
	t.trials[coll][class] = tr
	t.cache[coll][class] = Choice{}
	if t.Logf != nil {
		t.Logf("%s %s: measuring again (trial %d of %d), %d ops in a row each, %d passes", coll, classRange(class), tr.done+1, t.Revisit.Times+1, tr.rounds, Passes)
	}
}

// Timings returns, for the trial of coll at bytes that Observe reported
// complete, this rank's time of each candidate in each pass in nanoseconds
// (the median of the run's ops after its first; pass p of candidate i at
// p*len(candidates)+i), in a slice the caller overwrites with the largest
// over the ranks.
func (t *Tuner) Timings(coll Coll, bytes int) []int64 {
	tr := t.trials[coll][SizeClass(bytes)]
	k := len(tr.cands)
	runs := make([]float64, tr.rounds-1)
	for j, i := range tr.order {
		copy(runs, tr.times[j*tr.rounds+1:(j+1)*tr.rounds])
		slices.Sort(runs)
		tr.nanos[j/k*k+i] = int64(runs[len(runs)/2] * 1e9)
	}
	return tr.nanos
}

// Settle ends the trial of coll at bytes with the candidates' times as the
// ranks agreed them (Timings' slice, after the all-reduce) and returns the
// choice kept: of the candidates' median passes, each the smallest over
// the class's trials so far (Revisit), the earliest within Tie of the
// fastest.
func (t *Tuner) Settle(coll Coll, bytes int, times []int64) Choice {
	class := SizeClass(bytes)
	tr := t.trials[coll][class]
	med := medians(times, len(tr.cands))
	if tr.best == nil {
		tr.best = med
	} else {
		for i, m := range med {
			tr.best[i] = min(tr.best[i], m)
		}
	}
	keep := fastest(tr.best)
	c := tr.cands[keep]
	t.cache[coll][class] = c
	t.trials[coll][class] = nil
	tr.done++
	if tr.left = t.Revisit.opsUntil(tr.done, float64(tr.best[keep])/1e9, len(tr.times)); tr.left > 0 {
		t.settled[coll][class] = tr
	}
	if t.Logf != nil {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s on %d ranks (%d nodes): measured (slowest rank's medians of %d in a row, in each of %d passes; the median pass counts): ", coll, classRange(class), t.shape.N, t.shape.Nodes, tr.rounds-1, Passes)
		for i, cand := range tr.cands {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s ", cand)
			for p := range Passes {
				if p > 0 {
					b.WriteString("/")
				}
				b.WriteString(FormatSeconds(float64(times[p*len(tr.cands)+i]) / 1e9))
			}
		}
		if tr.done > 1 {
			fmt.Fprintf(&b, "; best of %d trials: ", tr.done)
			for i, cand := range tr.cands {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%s %s", cand, FormatSeconds(float64(tr.best[i])/1e9))
			}
		}
		fmt.Fprintf(&b, " -> %s", c)
		if tr.left > 0 {
			fmt.Fprintf(&b, " (measured again after %d more ops)", tr.left)
		}
		t.Logf("%s", b.String())
	}
	return c
}

// medians returns each of k candidates' median pass of times (pass p of
// candidate i at p*k+i).
func medians(times []int64, k int) []int64 {
	med := make([]int64, k)
	passes := make([]int64, Passes)
	for i := range k {
		for p := range Passes {
			passes[p] = times[p*k+i]
		}
		slices.Sort(passes)
		med[i] = passes[Passes/2]
	}
	return med
}

// fastest returns the earliest of the candidates' times ts within Tie of
// the smallest.
func fastest(ts []int64) int {
	best := float64(slices.Min(ts))
	for i, m := range ts {
		if float64(m) <= best*(1+Tie) {
			return i
		}
	}
	return 0
}

// Modeled returns the model's choice for coll moving bytes, never a trial:
// what the communicator runs its agreement on.
func (t *Tuner) Modeled(coll Coll, bytes int) Choice {
	if c := t.cache[coll][SizeClass(bytes)]; c.Row != nil {
		return c
	}
	if c := Best(t.model.Price(coll, t.shape, float64(bytes), t.spec.Per[coll])); c.Row != nil {
		return c
	}
	return Best(t.model.Price(coll, t.shape, float64(bytes), Restriction{}))
}

// TrialLeft is how many more ops of coll at bytes the trial of its class
// runs (0: none under way).
func (t *Tuner) TrialLeft(coll Coll, bytes int) int {
	if tr := t.trials[coll][SizeClass(bytes)]; tr != nil {
		return len(tr.times) - tr.calls
	}
	return 0
}

// Trying says whether the class of coll at bytes is being measured.
func (t *Tuner) Trying(coll Coll, bytes int) bool { return t.trials[coll][SizeClass(bytes)] != nil }
