package bench

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// plotsDir, when set, keeps the plots TestPlotRuns draws there, to look at.
var plotsDir = flag.String("plots", "", "draw the plots of sample runs into this directory")

// perturb scales every float64 that v (a pointer to a result) holds, each
// by a factor of its own near k, so that runs of made-up results differ
// as runs do, ratios too. Integers (sizes, counts: the x of the plots)
// are left as they are.
func perturb(v any, k float64) {
	i := 0
	var walk func(reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			for j := range v.NumField() {
				if f := v.Type().Field(j); f.IsExported() && f.Name != "Paper" { // the paper's figures stay
					walk(v.Field(j))
				}
			}
		case reflect.Slice, reflect.Array:
			for j := range v.Len() {
				walk(v.Index(j))
			}
		case reflect.Float64:
			i++
			v.SetFloat(v.Float() * (1 + (k-1)*(1+0.5*math.Sin(float64(i)))))
		}
	}
	walk(reflect.ValueOf(v))
}

// sampleRuns returns three runs of every experiment of the report, made
// up: sampleResults (fakeTables for SSAM, which has round trips to draw)
// scaled differently in each run.
func sampleRuns() map[string][]Reported {
	runs := map[string][]Reported{}
	for i, k := range []float64{1, 0.8, 1.25} {
		res := sampleResults()
		res["ssam"] = fakeTables()
		for name, r := range res {
			perturb(r, k+0.01*float64(i))
			runs[name] = append(runs[name], r)
		}
	}
	return runs
}

// TestPlotRuns draws the plots of three runs of every experiment: a PNG
// and an SVG per chart, each point of the merged charts holding the three
// runs, the SVGs naming every series and peer in their legends.
func TestPlotRuns(t *testing.T) {
	dir := *plotsDir
	if dir == "" {
		dir = t.TempDir()
	}
	want := map[string][]string{
		"ssam":         {"ssam-rtt"},
		"logp":         {"logp-contention"},
		"amii":         {"amii-bandwidth"},
		"permutations": {"permutations"},
		"overcommit":   {"overcommit"},
		"incast":       {"incast"},
		"grim":         {"grim-bandwidth", "grim-gap"},
	}
	for name, runs := range sampleRuns() {
		paths, err := PlotRuns(dir, runs)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var got []string
		for _, p := range paths {
			if filepath.Ext(p) == ".png" {
				got = append(got, strings.TrimSuffix(filepath.Base(p), ".png"))
			}
		}
		if !slices.Equal(got, want[name]) {
			t.Errorf("%s: drew %v, want %v", name, got, want[name])
		}
		var charts [][]chart
		for _, r := range runs {
			charts = append(charts, r.charts())
		}
		for _, c := range mergeCharts(charts) {
			svg, err := os.ReadFile(filepath.Join(dir, c.name+".svg"))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.series {
				for _, p := range s.points {
					if len(p.y.Runs) != 3 || !(p.y.Min <= p.y.Median && p.y.Median <= p.y.Max) {
						t.Errorf("%s: %s at %v%s: %+v, want 3 runs", c.name, s.name, p.x, p.cat, p.y)
					}
				}
				if (len(s.points) > 0 || len(s.hists) > 0) && !bytes.Contains(svg, []byte(s.name)) {
					t.Errorf("%s.svg does not name %q", c.name, s.name)
				}
			}
			for _, r := range c.refs {
				if len(r.v.Runs) != 3 || !bytes.Contains(svg, []byte(r.name)) {
					t.Errorf("%s: peer %q: %+v, or not named in the SVG", c.name, r.name, r.v)
				}
			}
		}
	}
}

// TestPlotTicks: axis labels are plain numbers (500k, not 500000.00),
// byte sizes read as sizes, and a log axis is labelled at 1, 2 and 5 of
// each decade.
func TestPlotTicks(t *testing.T) {
	for _, tc := range []struct {
		v     float64
		bytes bool
		want  string
	}{
		{500000, false, "500k"}, {1.5e6, false, "1.5M"}, {0.30000000000000004, false, "0.3"}, {250, false, "250"},
		{5000, false, "5000"}, {12500, false, "12.5k"}, {2e9, false, "2G"}, {0, false, "0"},
		{64, true, "64"}, {1024, true, "1k"}, {48 << 10, true, "48k"}, {3826, true, "3826"}, {1 << 20, true, "1M"}, {2.5, true, "2.5"},
	} {
		if got := xLabel(tc.v, tc.bytes); got != tc.want {
			t.Errorf("xLabel(%g, %v) = %q, want %q", tc.v, tc.bytes, got, tc.want)
		}
	}
	var labels []string
	for _, tk := range (logTicks{}).Ticks(3, 120) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"5", "10", "20", "50", "100"}; !slices.Equal(labels, want) {
		t.Errorf("log ticks of [3, 120]: %v, want %v", labels, want)
	}
	labels = nil
	for _, tk := range (plainTicks{}).Ticks(0, 520000) {
		labels = append(labels, tk.Label)
	}
	if want := []string{"0", "100k", "200k", "300k", "400k", "500k"}; !slices.Equal(labels, want) {
		t.Errorf("ticks of [0, 520000]: %v, want %v", labels, want)
	}
	labels = nil
	for _, tk := range (plainTicks{}).Ticks(0, 0.7) {
		labels = append(labels, tk.Label)
	}
	if want := []string{"0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7"}; !slices.Equal(labels, want) {
		t.Errorf("ticks of [0, 0.7]: %v, want %v", labels, want)
	}
}

// TestMergeCharts: the runs of a chart merge by series and by x or
// category, and peers by name; a point measured in fewer runs keeps the
// runs it has; lines are sorted by x.
func TestMergeCharts(t *testing.T) {
	run := func(k float64, xs ...float64) []chart {
		ys := make([]float64, len(xs))
		for i := range ys {
			ys[i] = k * float64(i+1)
		}
		return []chart{
			{name: "l", series: []series{xy("a", xs, ys)}, refs: []ref{{"peer", measure(10 * k)}}},
			{name: "b", kind: barChart, series: []series{{name: "s", points: []point{{cat: "x", y: measure(k)}, {cat: "y", y: measure(2 * k)}}}}},
		}
	}
	got := mergeCharts([][]chart{run(1, 1, 2), run(2, 2, 1), run(4, 4)})
	if len(got) != 2 || got[0].name != "l" || got[1].name != "b" {
		t.Fatalf("charts %+v", got)
	}
	l := got[0].series[0].points
	if len(l) != 3 || l[0].x != 1 || l[1].x != 2 || l[2].x != 4 {
		t.Fatalf("points %+v, want x 1, 2, 4", l)
	}
	if !slices.Equal(l[0].y.Runs, []float64{1, 4}) || !slices.Equal(l[1].y.Runs, []float64{2, 2}) || !slices.Equal(l[2].y.Runs, []float64{4}) {
		t.Errorf("runs %v %v %v", l[0].y.Runs, l[1].y.Runs, l[2].y.Runs)
	}
	if r := got[0].refs[0].v; r.Median != 20 || r.Min != 10 || r.Max != 40 || !r.Unsettled {
		t.Errorf("peer %+v", r)
	}
	if b := got[1].series[0].points; b[0].cat != "x" || b[0].y.Median != 2 || b[1].y.Median != 4 {
		t.Errorf("bars %+v", b)
	}
}

// TestPlotNothingMeasured: an interrupted run's results, with nothing
// measured, draw no plot and return no error, whatever the experiment.
func TestPlotNothingMeasured(t *testing.T) {
	dir := t.TempDir()
	for name, r := range map[string]Reported{
		"ssam": &ssamTablesResult{}, "logp": &logpResult{}, "amii": &amiiBandwidthResult{}, "permutations": &permutationsResult{},
		"overcommit": &overcommitResult{}, "incast": &incastResult{}, "grim": &grimBenchResult{},
	} {
		if paths, err := PlotRuns(dir, []Reported{r, r, r}); len(paths) != 0 || err != nil {
			t.Errorf("%s: %v, %v; want nothing", name, paths, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("wrote %d files", len(ents))
	}
}
