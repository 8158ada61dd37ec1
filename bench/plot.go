package bench

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// rttSeries is one round-trip distribution to plot: nanoseconds, as the
// ping-pongs record them.
type rttSeries struct {
	Name string
	Hist *hdrhistogram.Histogram
}

// rttMark is a vertical reference line, at Micros.
type rttMark struct {
	Name   string
	Micros float64
}

// maxCDFPoints bounds the points drawn per series (the HDR histogram has a
// bucket per 0.1% of value).
const maxCDFPoints = 1500

// cdf returns the cumulative distribution of h as steps: x in microseconds
// (the upper end of each non-empty bucket), y the fraction of values at or
// below x. Buckets closer than a factor of (max/min)^(1/maxCDFPoints) are
// merged.
func cdf(h *hdrhistogram.Histogram) plotter.XYs {
	total := h.TotalCount()
	if total == 0 {
		return nil
	}
	lo, hi := float64(max(h.Min(), 1)), float64(max(h.Max(), 1))
	step := math.Pow(hi/lo, 1.0/maxCDFPoints)
	var xy plotter.XYs
	var cum int64
	prevY, lastX := 0.0, 0.0
	for _, bar := range h.Distribution() {
		if bar.Count == 0 {
			continue
		}
		if len(xy) == 0 {
			xy = append(xy, plotter.XY{X: float64(max(bar.From, 1)) / 1e3, Y: 0})
		}
		cum += bar.Count
		x, y := float64(max(bar.To, 1))/1e3, float64(cum)/float64(total)
		if cum < total && lastX > 0 && x < lastX*step {
			continue // merged into the next point
		}
		xy = append(xy, plotter.XY{X: x, Y: prevY}, plotter.XY{X: x, Y: y})
		prevY, lastX = y, x
	}
	return xy
}

// plotRTT draws the cumulative distributions of the series' round trips,
// microseconds on a log scale, with gonum/plot, and saves the plot to each
// path; the extension picks the format (.png, .svg, .pdf, ...). Series
// with no values are left out.
func plotRTT(title string, series []rttSeries, marks []rttMark, paths ...string) (err error) {
	defer func() {
		if r := recover(); r != nil { // gonum/plot panics on some inputs
			err = fmt.Errorf("plotting round trips: %v", r)
		}
	}()
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "round trip (µs, log scale)"
	p.Y.Label.Text = "fraction of round trips ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = vg.Points(36)
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	drawn := 0
	for i, s := range series {
		if s.Hist == nil {
			continue
		}
		xy := cdf(s.Hist)
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", s.Name, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p50 %.1f µs)", s.Name, float64(s.Hist.ValueAtQuantile(50))/1e3), l)
		lo, hi = min(lo, xy[0].X), max(hi, xy[len(xy)-1].X)
		drawn++
	}
	if drawn == 0 {
		return errors.New("no round trips to plot")
	}
	for i, m := range marks {
		if m.Micros <= 0 {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: m.Micros, Y: 0}, {X: m.Micros, Y: 1}})
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(len(series) + i)
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(m.Name, l)
		lo, hi = min(lo, m.Micros), max(hi, m.Micros)
	}
	p.X.Min, p.X.Max = lo/1.2, hi*1.2
	for _, path := range paths {
		if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// Plot writes the round-trip distributions of raw AF_XDP, SSAM, UDP and
// TCP, with SSAM's 1994 round trip for reference, to dir/ssam-rtt.png and
// dir/ssam-rtt.svg, and returns the paths: none, and no error, when no
// round trip was measured (an interrupted run's).
func (t *ssamTablesResult) Plot(dir string) ([]string, error) {
	names := map[string]string{"raw": "raw AF_XDP", "ssam": "SSAM", "udp": "kernel UDP", "tcp": "kernel TCP"}
	var series []rttSeries
	measured := false
	for _, path := range []string{"raw", "ssam", "udp", "tcp"} {
		h := t.hists[path]
		series = append(series, rttSeries{Name: names[path], Hist: h})
		measured = measured || (h != nil && h.TotalCount() > 0)
	}
	if !measured {
		return nil, nil
	}
	size := ssamMessage
	if len(t.RTT) > 0 {
		size = t.RTT[0].Size
	}
	paths := []string{filepath.Join(dir, "ssam-rtt.png"), filepath.Join(dir, "ssam-rtt.svg")}
	err := plotRTT(fmt.Sprintf("Round trips of %d-byte messages on one lab (%d each)", size, t.Count),
		series, []rttMark{{Name: fmt.Sprintf("SSAM 1994 (~%g µs)", t.Paper.RTTMicros), Micros: t.Paper.RTTMicros}}, paths...)
	if err != nil {
		return nil, err
	}
	return paths, nil
}

// line is one series of a line plot.
type line struct {
	name string
	xy   plotter.XYs
}

// plotLines draws lines (those with points) against x, on a log scale
// with logX, y from 0, into dir/name.png and dir/name.svg, and returns the
// paths written: none, and no error, when no line has points.
func plotLines(dir, name, title, xLabel, yLabel string, logX bool, lines []line) (paths []string, err error) {
	defer func() {
		if rec := recover(); rec != nil { // gonum/plot panics on some inputs
			err = fmt.Errorf("plotting %s: %v", name, rec)
		}
	}()
	pl := plot.New()
	pl.Title.Text, pl.X.Label.Text, pl.Y.Label.Text = title, xLabel, yLabel
	if logX {
		pl.X.Scale, pl.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	pl.Add(plotter.NewGrid())
	drawn := 0
	for i, s := range lines {
		if len(s.xy) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(s.xy)
		if err != nil {
			return nil, fmt.Errorf("plotting %s: %w", s.name, err)
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		pl.Add(l, pts)
		pl.Legend.Add(s.name, l, pts)
		drawn++
	}
	if drawn == 0 {
		return nil, nil // an interrupted run's: nothing measured to draw
	}
	pl.Y.Min, pl.Legend.Top = 0, true
	for _, ext := range []string{"png", "svg"} {
		path := filepath.Join(dir, name+"."+ext)
		if err := pl.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
			return paths, fmt.Errorf("writing %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}
