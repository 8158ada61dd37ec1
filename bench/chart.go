package bench

import (
	"cmp"
	"slices"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// A chart is what a plot shows, before it is drawn: each experiment of
// the report gives its charts of one run (Reported.charts), mergeCharts
// puts the charts of several runs together (each point the median of its
// runs, with their range) and drawChart draws them (plot.go).
type chart struct {
	name           string // the file's name, without its extension
	title          string
	xLabel, yLabel string
	kind           chartKind
	logX           bool
	xBytes         bool     // the x values are bytes: ticks read 1k, 16k
	series         []series // lines, bars or distributions
	refs           []ref    // peers: a horizontal line each, labelled
	marks          []ref    // distributions: a vertical line each (the paper's figure)
}

// chartKind is how a chart draws its series.
type chartKind int

const (
	// lineChart: each series a line through its points, against a
	// numeric x (a size, a count), a tick at each x measured.
	lineChart chartKind = iota
	// barChart: categories (the points' cat) side by side as bars, a
	// group per category, a bar per series.
	barChart
	// cdfChart: each series the distribution of its hists' values
	// (round trips in nanoseconds, drawn in microseconds on a log scale).
	cdfChart
)

// A series is one line, one set of bars or one distribution of a chart.
type series struct {
	name   string
	points []point
	hists  []*hdrhistogram.Histogram // cdfChart: one per run
}

// A point is a series' value at x (lineChart) or in category cat
// (barChart).
type point struct {
	x   float64
	cat string
	y   Measured
}

// A ref is a named value drawn across a chart: a peer's (refs) or the
// paper's (marks).
type ref struct {
	name string
	v    Measured
}

// key identifies the point within its series.
func (p point) key() any {
	if p.cat != "" {
		return p.cat
	}
	return p.x
}

// xy returns the series' points of one run: a point per (x, y).
func xy(name string, xs []float64, ys []float64) series {
	s := series{name: name}
	for i := range xs {
		s.points = append(s.points, point{x: xs[i], y: measure(ys[i])})
	}
	return s
}

// empty reports whether the chart has nothing to draw.
func (c chart) empty() bool {
	for _, s := range c.series {
		if len(s.points) > 0 {
			return false
		}
		for _, h := range s.hists {
			if h != nil && h.TotalCount() > 0 {
				return false
			}
		}
	}
	return true
}

// mergeCharts returns the charts of several runs as one list: a chart per
// name, in the order they first appear, with each series' points (by x or
// category), each distribution's histograms and each reference value
// holding the runs of every run that has them.
func mergeCharts(runs [][]chart) []chart {
	var out []chart
	index := map[string]int{}
	for _, charts := range runs {
		for _, c := range charts {
			i, ok := index[c.name]
			if !ok {
				i, index[c.name] = len(out), len(out)
				m := c
				m.series, m.refs, m.marks = nil, nil, nil
				out = append(out, m)
			}
			o := &out[i]
			for _, s := range c.series {
				o.series = mergeSeries(o.series, s)
			}
			o.refs = mergeRefs(o.refs, c.refs)
			o.marks = mergeRefs(o.marks, c.marks)
		}
	}
	for i := range out {
		for j := range out[i].series {
			s := &out[i].series[j]
			for k := range s.points {
				s.points[k].y = measure(s.points[k].y.Runs...)
			}
			if out[i].kind == lineChart {
				slices.SortStableFunc(s.points, func(a, b point) int { return cmp.Compare(a.x, b.x) })
			}
		}
		for _, rs := range [][]ref{out[i].refs, out[i].marks} {
			for k := range rs {
				rs[k].v = measure(rs[k].v.Runs...)
			}
		}
	}
	return out
}

// mergeSeries adds the runs of s to the series of the same name in to.
func mergeSeries(to []series, s series) []series {
	j := slices.IndexFunc(to, func(t series) bool { return t.name == s.name })
	if j < 0 {
		j = len(to)
		to = append(to, series{name: s.name})
	}
	t := &to[j]
	t.hists = append(t.hists, s.hists...)
	for _, p := range s.points {
		k := slices.IndexFunc(t.points, func(q point) bool { return q.key() == p.key() })
		if k < 0 {
			k = len(t.points)
			t.points = append(t.points, point{x: p.x, cat: p.cat})
		}
		t.points[k].y.Runs = append(t.points[k].y.Runs, p.y.Runs...)
	}
	return to
}

// mergeRefs adds the runs of refs to those of the same name in to.
func mergeRefs(to, refs []ref) []ref {
	for _, r := range refs {
		j := slices.IndexFunc(to, func(t ref) bool { return t.name == r.name })
		if j < 0 {
			j = len(to)
			to = append(to, ref{name: r.name})
		}
		to[j].v.Runs = append(to[j].v.Runs, r.v.Runs...)
	}
	return to
}

// PlotRuns draws the charts of an experiment's runs, merged, into dir as
// PNG and SVG, and returns the files written: none, and no error, for a
// chart with nothing measured (an interrupted run's).
func PlotRuns(dir string, runs []Reported) ([]string, error) {
	var charts [][]chart
	for _, r := range runs {
		charts = append(charts, r.charts())
	}
	var paths []string
	for _, c := range mergeCharts(charts) {
		p, err := drawChart(dir, c)
		paths = append(paths, p...)
		if err != nil {
			return paths, err
		}
	}
	return paths, nil
}
