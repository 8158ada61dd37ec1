package bench

import (
	"encoding/json"
	"math"
	"testing"
)

// TestJudge decides rules on medians and ranges: inside the rule yes,
// outside no, on a bound yes, runs more than 2x apart unsettled whatever
// the median, nothing measured not measured.
func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule Rule
		runs []float64
		want Verdict
	}{
		{"storage 1.2-1.5x within [1, 2]", within(1, 2), []float64{1.2, 1.4, 1.5}, Yes},
		{"storage 0.93x within [1, 2]", within(1, 2), []float64{0.93, 0.95, 0.9}, No},
		{"above the range", within(1, 2), []float64{2.5, 2.6, 2.4}, No},
		{"on the bounds", within(1, 2), []float64{1, 1, 1}, Yes},
		{"faster than kernel UDP", atMost(1), []float64{0.3, 0.35, 0.4}, Yes},
		{"slower than kernel UDP", atMost(1), []float64{1.1, 1.3, 1.2}, No},
		{"median inside, runs apart", atMost(1), []float64{0.3, 0.5, 0.9}, Unsettled},
		{"GRIM's 10.3-31.9 µs over 13", atMost(2), []float64{10.3 / 13, 31.9 / 13, 13.4 / 13}, Unsettled},
		{"at least half", atLeast(0.5), []float64{0.9, 1, 1.1}, Yes},
		{"below half", atLeast(0.5), []float64{0.3, 0.31, 0.29}, No},
		{"nothing", atLeast(0.5), nil, NotMeasured},
	} {
		m := measure(tc.runs...)
		if got := judge(tc.rule, &m); got != tc.want {
			t.Errorf("%s: %s on %v: %q, want %q", tc.name, tc.rule, tc.runs, got, tc.want)
		}
	}
	if got := judge(atMost(1), nil); got != NotMeasured {
		t.Errorf("no figure: %q", got)
	}
}

// TestRule: rules print as the report states them, and an open bound
// survives JSON.
func TestRule(t *testing.T) {
	for _, tc := range []struct {
		r    Rule
		want string
	}{{atMost(1), "≤ 1"}, {atLeast(0.8), "≥ 0.8"}, {within(1.2, 1.5), "in [1.2, 1.5]"}} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.r, got, tc.want)
		}
		b, err := json.Marshal(tc.r)
		var back Rule
		if err != nil || json.Unmarshal(b, &back) != nil || back != tc.r {
			t.Errorf("%+v: JSON %s, %v: back %+v", tc.r, b, err, back)
		}
	}
	if !atLeast(0.5).holds(math.MaxFloat64) || atMost(1).holds(1.0001) {
		t.Error("open bounds")
	}
}

// TestClaimsRead: every claim reads a figure the experiments give (its
// pattern matches a figure of the sample results, and the figure has
// what it reads), so that no claim is "not measured" for a name that
// changed; and it reads the right quantity.
func TestClaimsRead(t *testing.T) {
	results := sampleResults()
	for _, c := range Claims() {
		r, ok := results[c.Experiment]
		if !ok {
			t.Errorf("claim %q: no experiment %q", c.Says, c.Experiment)
			continue
		}
		name, m := c.read(mergeFigures([][]Figure{r.Figures()}))
		if name == "" || m == nil || !m.Measured() {
			t.Errorf("claim %q: %s of %q: read %q, %+v", c.Says, c.Of, c.Figure, name, m)
		}
		if c.Says == "" || c.PaperValue == "" || c.Rule.Lo > c.Rule.Hi {
			t.Errorf("claim %+v: incomplete", c)
		}
	}
	figs := []Figure{paperFig("host to storage endpoint, p50", "µs", 21, 28, peer("host to host, firmware mode", 20))}
	storage := Claims()[len(Claims())-1]
	if _, m := storage.read(figs); m == nil || m.Median != 1.4 {
		t.Errorf("storage over host: %+v, want 1.4", m)
	}
}

// TestJudgeReport judges the claims on a report: a storage endpoint at
// 0.93x of host to host is not reproduced, GRIM's round trip of 10.3,
// 13.4 and 31.9 µs is unsettled, an experiment not run leaves its claims
// not measured; and the report prints each verdict with its criterion.
func TestJudgeReport(t *testing.T) {
	var grim [][]Figure
	for _, v := range [][2]float64{{10.3, 100}, {13.4, 95}, {31.9, 98}} {
		grim = append(grim, []Figure{
			paperFig("host-to-host round trip, short message, p50", "µs", 13, v[0]),
			paperFig("host to storage endpoint, p50", "µs", 21, 0.93*v[1], peer("host to host, firmware mode", v[1])),
		})
	}
	r := &Report{Runs: 3, Sections: []*Section{NewSection(PaperGRIM)}}
	r.Sections[0].Add(NewExperiment("grim")).Figures = mergeFigures(grim)
	verdicts := map[string]Verdict{}
	for _, c := range r.Judge(Claims()) {
		verdicts[c.Figure] = c.Verdict
		if c.Criterion == "" {
			t.Errorf("claim %q: no criterion", c.Says)
		}
	}
	for fig, want := range map[string]Verdict{
		"host to storage endpoint, p50":               No,
		"host-to-host round trip, short message, p50": Unsettled,
		"gap, burst of 1000 (answered)":               NotMeasured,
		"trap: send16":                                NotMeasured,
	} {
		if verdicts[fig] != want {
			t.Errorf("%s: %q, want %q", fig, verdicts[fig], want)
		}
	}
}
