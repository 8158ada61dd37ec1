package bench

import (
	"slices"
	"strings"
	"testing"
)

// TestMeasure: the median of an odd number of runs is the middle one, of
// an even number the mean of the two middle ones; the lowest and highest
// are the runs'; every value keeps four significant digits.
func TestMeasure(t *testing.T) {
	for _, tc := range []struct {
		runs                []float64
		median, lo, hi      float64
		unsettled, measured bool
	}{
		{[]float64{5.1, 4.9, 4.7}, 4.9, 4.7, 5.1, false, true},
		{[]float64{3, 1, 4, 2}, 2.5, 1, 4, true, true},
		{[]float64{10.3, 31.9, 13.4}, 13.4, 10.3, 31.9, true, true},
		{[]float64{1.23456, 1.23449, 1.2}, 1.234, 1.2, 1.235, false, true},
		{[]float64{7}, 7, 7, 7, false, true},
		{nil, 0, 0, 0, false, false},
	} {
		m := measure(tc.runs...)
		if m.Median != tc.median || m.Min != tc.lo || m.Max != tc.hi || m.Unsettled != tc.unsettled || m.Measured() != tc.measured {
			t.Errorf("measure(%v) = %+v, want median %g [%g, %g], unsettled %v", tc.runs, m, tc.median, tc.lo, tc.hi, tc.unsettled)
		}
		if len(m.Runs) != len(tc.runs) {
			t.Errorf("measure(%v): runs %v", tc.runs, m.Runs)
		}
		if err := m.check(); err != nil {
			t.Errorf("measure(%v): check: %v", tc.runs, err)
		}
	}
}

// TestUnsettled: runs more than 2x apart are unsettled, exactly 2x apart
// are not; 0 beside a value, or values of both signs, are unsettled;
// negative values compare by magnitude.
func TestUnsettled(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   bool
	}{
		{10.3, 31.9, true}, {10.3, 13.4, false}, {1, 2, false}, {1, 2.001, true}, {0, 0, false}, {0, 5, true},
		{-1, 1, true}, {-3, -1, true}, {-2, -1, false}, {-1, 0, true}, {0.5, 0.5, false},
	} {
		if got := unsettled(tc.lo, tc.hi); got != tc.want {
			t.Errorf("unsettled(%g, %g) = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
}

// TestMeasuredString: a settled figure reads "median [min–max]", a
// single run its value, an unsettled one its range and how many runs,
// never one number.
func TestMeasuredString(t *testing.T) {
	for _, tc := range []struct {
		runs []float64
		want string
	}{
		{[]float64{4.9, 4.7, 5.1}, "4.90 [4.70–5.10]"},
		{[]float64{31.9, 10.3, 13.4}, "unsettled: 10.3–31.9 (3 runs)"},
		{[]float64{5084, 5084, 5084}, "5084 [5084–5084]"},
		{[]float64{5084}, "5084"},
		{[]float64{126500, 80740, 98000}, "98000 [80740–126500]"},
		{nil, "—"},
	} {
		if got := measure(tc.runs...).String(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.runs, got, tc.want)
		}
	}
}

// TestMeasuredCheck: check finds a median, a range and a flag that are
// not those of the runs, and runs not rounded as the report rounds them.
func TestMeasuredCheck(t *testing.T) {
	good := measure(1, 2, 3)
	for _, tc := range []struct {
		name string
		m    Measured
		want string
	}{
		{"median", Measured{Runs: good.Runs, Median: 2.5, Min: 1, Max: 3, Unsettled: true}, "median 2.5"},
		{"range", Measured{Runs: good.Runs, Median: 2, Min: 0.5, Max: 3, Unsettled: true}, "[0.5, 3]"},
		{"flag", Measured{Runs: good.Runs, Median: 2, Min: 1, Max: 3}, "unsettled false, want true"},
		{"rounding", Measured{Runs: []float64{1.23456, 1.23456, 1.23456}, Median: 1.235, Min: 1.235, Max: 1.235}, "not rounded"},
	} {
		if err := tc.m.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestMergeFigures: the runs of a figure merge by name in the order the
// figures first appear; each peer's runs pair with the figure's, so its
// ratio is taken run by run; a peer missing in every run stays missing
// and has no ratio; one measured in fewer runs than the figure shows its
// values and has no ratio; a figure only some runs have keeps the runs it
// has.
func TestMergeFigures(t *testing.T) {
	run := func(today, raw float64, ucx bool, extra bool) []Figure {
		peers := []Peer{peer("raw", raw), {Name: "ucx", Missing: "not installed"}}
		if ucx {
			peers[1] = peer("ucx", 2*today)
		}
		figs := []Figure{paperFig("rtt", "µs", 20, today, peers...)}
		if extra {
			figs = append([]Figure{noteFig("extra", "ns", "words", today)}, figs...)
		}
		return figs
	}
	got := mergeFigures([][]Figure{run(4, 2, false, false), run(6, 2, false, true), run(5, 4, true, false)})
	if len(got) != 2 || got[0].Name != "rtt" || got[1].Name != "extra" {
		t.Fatalf("figures %+v", got)
	}
	rtt := got[0]
	if !slices.Equal(rtt.Today.Runs, []float64{4, 6, 5}) || rtt.Today.Median != 5 || rtt.Today.Min != 4 || rtt.Today.Max != 6 {
		t.Errorf("today %+v", rtt.Today)
	}
	if v := rtt.VsPaper; v == nil || !slices.Equal(v.Runs, []float64{0.2, 0.3, 0.25}) || v.Median != 0.25 {
		t.Errorf("today/paper %+v", v)
	}
	raw := rtt.Peers[0]
	if raw.Name != "raw" || !slices.Equal(raw.Value.Runs, []float64{2, 2, 4}) || raw.Ratio == nil ||
		!slices.Equal(raw.Ratio.Runs, []float64{2, 3, 1.25}) || raw.Ratio.Median != 2 || !raw.Ratio.Unsettled {
		t.Errorf("raw %+v, ratio %+v: want the ratios run by run, 1.25-3 unsettled", raw, raw.Ratio)
	}
	ucx := rtt.Peers[1]
	if ucx.Missing != "" || !slices.Equal(ucx.Value.Runs, []float64{10}) || ucx.Ratio != nil {
		t.Errorf("ucx %+v: want its one value and no ratio", ucx)
	}
	if extra := got[1]; !slices.Equal(extra.Today.Runs, []float64{6}) {
		t.Errorf("extra %+v", extra.Today)
	}
	none := mergeFigures([][]Figure{run(4, 2, false, false), run(6, 2, false, false), run(5, 4, false, false)})
	if u := none[0].Peers[1]; u.Missing == "" || u.Ratio != nil || u.Value.Measured() {
		t.Errorf("ucx missing in every run: %+v", u)
	}
	for _, f := range append(got, none...) {
		if errs := checkRatios("x", f); len(errs) > 0 {
			t.Errorf("checkRatios(%q): %v", f.Name, errs)
		}
	}
}
