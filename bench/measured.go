package bench

import (
	"fmt"
	"math"
	"slices"
)

// A Measured is one figure measured in several runs of an experiment: every
// run's value, their median, lowest and highest. A figure whose runs
// disagree by more than a factor of unsettledFactor is Unsettled: the
// report shows its range rather than one number, and a claim read from it
// is neither reproduced nor refuted.
type Measured struct {
	Runs      []float64 `json:"runs"`
	Median    float64   `json:"median"`
	Min       float64   `json:"min"`
	Max       float64   `json:"max"`
	Unsettled bool      `json:"unsettled"`
}

// unsettledFactor is how far apart, highest over lowest, the runs of a
// settled figure may lie.
const unsettledFactor = 2

// MinRuns is the fewest runs of each experiment a report takes: the
// median of fewer says nothing of the spread.
const MinRuns = 3

// measure returns the figure of runs, each rounded by finite.
func measure(runs ...float64) Measured {
	m := Measured{Runs: make([]float64, len(runs))}
	for i, v := range runs {
		m.Runs[i] = finite(v)
	}
	if len(runs) == 0 {
		return m
	}
	s := slices.Clone(m.Runs)
	slices.Sort(s)
	m.Min, m.Max = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		m.Median = s[n/2]
	} else {
		m.Median = finite((s[n/2-1] + s[n/2]) / 2)
	}
	m.Unsettled = unsettled(m.Min, m.Max)
	return m
}

// unsettled reports whether lo and hi, the lowest and highest of a
// figure's runs, disagree by more than unsettledFactor: of one sign, the
// larger magnitude over the smaller; of both signs (or 0 beside a value
// that is not), always.
func unsettled(lo, hi float64) bool {
	switch {
	case lo == 0 && hi == 0:
		return false
	case lo <= 0 && hi >= 0:
		return true
	}
	a, b := math.Abs(lo), math.Abs(hi)
	return max(a, b) > unsettledFactor*min(a, b)
}

// Measured reports whether the figure has a run.
func (m Measured) Measured() bool { return len(m.Runs) > 0 }

// check returns what is wrong with m as report.json holds it: its median,
// lowest, highest and flag recomputed from its runs.
func (m Measured) check() error {
	want := measure(m.Runs...)
	switch {
	case !slices.Equal(want.Runs, m.Runs):
		return fmt.Errorf("runs %v are not rounded to four digits", m.Runs)
	case !closeTo(m.Median, want.Median) || m.Min != want.Min || m.Max != want.Max:
		return fmt.Errorf("median %g [%g, %g], want %g [%g, %g] of runs %v", m.Median, m.Min, m.Max, want.Median, want.Min, want.Max, m.Runs)
	case !(m.Min <= m.Median && m.Median <= m.Max):
		return fmt.Errorf("median %g outside [%g, %g]", m.Median, m.Min, m.Max)
	case m.Unsettled != want.Unsettled:
		return fmt.Errorf("unsettled %v, want %v for [%g, %g]", m.Unsettled, want.Unsettled, m.Min, m.Max)
	}
	return nil
}

// String prints the figure as the report shows it: the median with the
// range of the runs, "4.90 [4.40–5.10]"; a single run's value alone; an
// unsettled figure's range with no median, "unsettled: 10.3–31.9 (3
// runs)".
func (m Measured) String() string {
	switch {
	case len(m.Runs) == 0:
		return "—"
	case m.Unsettled:
		return fmt.Sprintf("unsettled: %s–%s (%d runs)", num(m.Min), num(m.Max), len(m.Runs))
	case len(m.Runs) == 1:
		return num(m.Median)
	}
	return fmt.Sprintf("%s [%s–%s]", num(m.Median), num(m.Min), num(m.Max))
}

// runRatios returns, for each run, a over b, leaving out the runs where b is
// 0; none when the two were not measured in as many runs (the runs of a
// figure and its peer pair up in order).
func runRatios(a, b []float64) []float64 {
	if len(a) != len(b) {
		return nil
	}
	var r []float64
	for i := range a {
		if b[i] != 0 {
			r = append(r, a[i]/b[i])
		}
	}
	return r
}
