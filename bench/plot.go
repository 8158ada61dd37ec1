package bench

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/HdrHistogram/hdrhistogram-go"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The report's plots, drawn with gonum/plot from charts (chart.go): the
// legend below the data, never over it; on a numeric x a tick at each
// value measured (each message size, each count), labelled; categories
// as bars; each point the median of its runs with a bar over their range;
// peers as labelled horizontal lines; plain numbers on the axes (500k, not
// 500000.00). Where a peer lies far above the data, the y axis is
// logarithmic, so that the line does not squash the data to the floor.

// The size of a plot, without its legend's rows below it.
const (
	plotWidth  = 8 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// logYFactor is how far above the data a peer's value puts the y axis on
// a log scale.
const logYFactor = 4

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

// canvas is a plot under construction: the plot, its legend (drawn below
// it) and the extent of its data.
type canvas struct {
	p          *plot.Plot
	legend     plot.Legend
	xMin, xMax float64
	yMin, yMax float64
	color      int // the next series' color
}

// drawChart draws c into dir/c.name.png and .svg and returns the paths
// written: none, and no error, when c has nothing to draw.
func drawChart(dir string, c chart) (paths []string, err error) {
	defer func() {
		if rec := recover(); rec != nil { // gonum/plot panics on some inputs
			err = fmt.Errorf("plotting %s: %v", c.name, rec)
		}
	}()
	if c.empty() {
		return nil, nil
	}
	k := &canvas{p: plot.New(), legend: plot.NewLegend(), xMin: math.Inf(1), xMax: math.Inf(-1), yMin: math.Inf(1), yMax: math.Inf(-1)}
	k.legend.Left, k.legend.Top = true, true
	k.p.Title.Text, k.p.X.Label.Text, k.p.Y.Label.Text = c.title, c.xLabel, c.yLabel
	k.p.Add(plotter.NewGrid())
	switch c.kind {
	case cdfChart:
		err = k.distributions(c)
	case barChart:
		err = k.bars(c)
	default:
		err = k.lines(c)
	}
	if err != nil {
		return nil, err
	}
	if err := k.references(c.refs); err != nil {
		return nil, err
	}
	if c.kind != cdfChart {
		k.yAxis(c)
	}
	for _, ext := range []string{"png", "svg"} {
		path := filepath.Join(dir, c.name+"."+ext)
		if err := k.save(path, ext); err != nil {
			return paths, fmt.Errorf("writing %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// nextColor returns the color of the next series or line.
func (k *canvas) nextColor() color.Color {
	k.color++
	return plotutil.Color(k.color - 1)
}

// extend widens the data's extent to hold x and y (NaN: leave as is).
func (k *canvas) extend(x, y float64) {
	if !math.IsNaN(x) {
		k.xMin, k.xMax = min(k.xMin, x), max(k.xMax, x)
	}
	if !math.IsNaN(y) {
		k.yMin, k.yMax = min(k.yMin, y), max(k.yMax, y)
	}
}

// lines draws each series as a line through its medians, a bar over each
// point's runs, and puts a tick on x at each value measured.
func (k *canvas) lines(c chart) error {
	var xs []float64
	for i, s := range c.series {
		if len(s.points) == 0 {
			continue
		}
		var pts plotter.XYs
		for _, p := range s.points {
			pts = append(pts, plotter.XY{X: p.x, Y: p.y.Median})
			k.extend(p.x, p.y.Min)
			k.extend(p.x, p.y.Max)
			xs = append(xs, p.x)
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", s.name, err)
		}
		col := k.nextColor()
		l.Color, sc.Color, sc.Shape = col, col, plotutil.Shape(i)
		k.p.Add(l, sc, &rangeBars{points: s.points, color: col})
		k.legend.Add(s.name, l, sc)
	}
	if c.logX {
		k.p.X.Scale = plot.LogScale{}
	}
	slices.Sort(xs)
	var ticks plot.ConstantTicks
	for _, x := range slices.Compact(xs) {
		ticks = append(ticks, plot.Tick{Value: x, Label: xLabel(x, c.xBytes)})
	}
	k.p.X.Tick.Marker = ticks
	pad := (k.xMax - k.xMin) * 0.03
	if c.logX {
		k.p.X.Min, k.p.X.Max = k.xMin/1.15, k.xMax*1.15
	} else {
		k.p.X.Min, k.p.X.Max = k.xMin-pad, k.xMax+pad
	}
	return nil
}

// bars draws the categories as groups of bars, a bar per series at its
// median, a bar over its runs.
func (k *canvas) bars(c chart) error {
	var cats []string
	for _, s := range c.series {
		for _, p := range s.points {
			if !slices.Contains(cats, p.cat) {
				cats = append(cats, p.cat)
			}
		}
	}
	const width = 40
	n := len(c.series)
	for i, s := range c.series {
		vals := make(plotter.Values, len(cats))
		var pts []point
		for _, p := range s.points {
			j := slices.Index(cats, p.cat)
			vals[j] = p.y.Median
			pts = append(pts, point{x: float64(j), y: p.y})
			k.extend(float64(j), p.y.Max)
			k.extend(float64(j), p.y.Min)
		}
		b, err := plotter.NewBarChart(vals, vg.Points(width))
		if err != nil {
			return fmt.Errorf("plotting %s: %w", s.name, err)
		}
		col := k.nextColor()
		b.Color, b.LineStyle.Width = col, 0
		b.Offset = vg.Points(width * (float64(i) - float64(n-1)/2))
		k.p.Add(b, &rangeBars{points: pts, offset: b.Offset, color: color.Black})
		k.legend.Add(s.name, b)
	}
	k.p.NominalX(cats...)
	k.extend(-0.5, 0)
	k.extend(float64(len(cats))-0.5, 0)
	k.p.X.Min, k.p.X.Max = -0.5, float64(len(cats))-0.5
	return nil
}

// distributions draws each series' cumulative distribution, all its
// runs' round trips together, x in microseconds on a log scale, and the
// marks as vertical lines.
func (k *canvas) distributions(c chart) error {
	k.p.X.Scale = plot.LogScale{}
	k.p.X.Tick.Marker, k.p.Y.Tick.Marker = logTicks{}, plainTicks{}
	k.p.Y.Min, k.p.Y.Max = 0, 1
	drawn := 0
	for _, s := range c.series {
		h, p50s := mergeHists(s.hists)
		col := k.nextColor()
		if h == nil {
			continue
		}
		pts := cdf(h)
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", s.name, err)
		}
		l.Color, l.Width = col, vg.Points(1.5)
		k.p.Add(l)
		k.legend.Add(fmt.Sprintf("%s: p50 %s µs", s.name, measure(p50s...)), l)
		k.extend(pts[0].X, math.NaN())
		k.extend(pts[len(pts)-1].X, math.NaN())
		drawn++
	}
	if drawn == 0 {
		return errors.New("no round trips to plot")
	}
	for _, m := range c.marks {
		if m.v.Median <= 0 {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: m.v.Median, Y: 0}, {X: m.v.Median, Y: 1}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = k.nextColor(), []vg.Length{vg.Points(4), vg.Points(3)}
		k.p.Add(l)
		k.legend.Add(m.name, l)
		k.extend(m.v.Median, math.NaN())
	}
	k.p.X.Min, k.p.X.Max = k.xMin/1.2, k.xMax*1.2
	return nil
}

// mergeHists returns the values of hists together, and each one's median
// in microseconds; nil when none holds a value.
func mergeHists(hists []*hdrhistogram.Histogram) (*hdrhistogram.Histogram, []float64) {
	var all *hdrhistogram.Histogram
	var p50s []float64
	for _, h := range hists {
		if h == nil || h.TotalCount() == 0 {
			continue
		}
		p50s = append(p50s, float64(h.ValueAtQuantile(50))/1e3)
		if all == nil {
			all = hdrhistogram.New(h.LowestTrackableValue(), h.HighestTrackableValue(), int(h.SignificantFigures()))
		}
		all.Merge(h)
	}
	return all, p50s
}

// references draws each peer as a dashed horizontal line across the data
// at its median, labelled with its name at the line's left end, and
// named with its median and range in the legend.
func (k *canvas) references(refs []ref) error {
	for _, r := range refs {
		if !r.v.Measured() {
			continue
		}
		y := r.v.Median
		l, err := plotter.NewLine(plotter.XYs{{X: k.xMin, Y: y}, {X: k.xMax, Y: y}})
		if err != nil {
			return err
		}
		l.Color, l.Width, l.Dashes = k.nextColor(), vg.Points(1.5), []vg.Length{vg.Points(6), vg.Points(3)}
		lab, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: k.xMin, Y: y}}, Labels: []string{r.name}})
		if err != nil {
			return err
		}
		lab.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(3)}
		for i := range lab.TextStyle {
			lab.TextStyle[i].Color = l.Color
		}
		k.p.Add(l, lab)
		k.legend.Add(fmt.Sprintf("%s (peer): %s", r.name, r.v), l)
		k.extend(math.NaN(), r.v.Min)
		k.extend(math.NaN(), r.v.Max)
	}
	return nil
}

// yAxis sets the y axis of a line or bar chart: from 0, plain numbers; or
// logarithmic where every value is above 0 and the highest (a peer's) is
// more than logYFactor times the highest median of the data, so that the peer's
// line does not squash the data to the floor.
func (k *canvas) yAxis(c chart) {
	lo, hi := k.yMin, k.yMax
	if lo > 0 && hi > logYFactor*dataMax(c) {
		k.p.Y.Scale, k.p.Y.Tick.Marker = plot.LogScale{}, logTicks{}
		k.p.Y.Min, k.p.Y.Max = lo/1.5, hi*1.5
		return
	}
	k.p.Y.Tick.Marker = plainTicks{}
	if hi <= 0 {
		hi = 1 // nothing above 0: an axis to 1 rather than one of 0 to 0
	}
	k.p.Y.Min, k.p.Y.Max = min(0, lo*1.08), hi*1.08
}

// dataMax returns the highest median of c's series.
func dataMax(c chart) float64 {
	m := 0.0
	for _, s := range c.series {
		for _, p := range s.points {
			m = max(m, p.y.Median)
		}
	}
	return m
}

// save writes the plot with its legend below it to path, in format ext.
func (k *canvas) save(path, ext string) error {
	rect := k.legend.Rectangle(draw.Canvas{})
	legendH := rect.Size().Y + vg.Points(16)
	cw, err := draw.NewFormattedCanvas(plotWidth, plotHeight+legendH, ext)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	k.p.Draw(draw.Crop(dc, 0, 0, legendH, 0))
	lc := draw.Crop(dc, vg.Points(56), 0, vg.Points(6), -(plotHeight + vg.Points(6)))
	k.legend.Draw(lc)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = cw.WriteTo(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rangeBars draws a vertical bar over the runs of each point, from the
// lowest to the highest, with caps; offset moves them sideways (onto a
// bar of a group). Points of one run, or of runs all alike, draw nothing.
type rangeBars struct {
	points []point
	offset vg.Length
	color  color.Color
}

// Plot implements plot.Plotter.
func (r *rangeBars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := draw.LineStyle{Color: r.color, Width: vg.Points(1)}
	capW := vg.Points(3)
	for _, pt := range r.points {
		if pt.y.Min == pt.y.Max {
			continue
		}
		x := trX(pt.x) + r.offset
		lo, hi := trY(pt.y.Min), trY(pt.y.Max)
		c.StrokeLine2(sty, x, lo, x, hi)
		c.StrokeLine2(sty, x-capW, lo, x+capW, lo)
		c.StrokeLine2(sty, x-capW, hi, x+capW, hi)
	}
}

// plainTicks mark a linear axis at five to ten round values (a step of
// 1, 2 or 5 of a power of ten), each labelled as a plain number.
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return []plot.Tick{{Value: lo, Label: plainNumber(lo)}}
	}
	mag := math.Pow10(int(math.Floor(math.Log10((hi - lo) / 5))))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if (hi-lo)/(m*mag) <= 10 {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := k * step
		if v == 0 {
			v = 0 // not -0
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: plainNumber(v)})
	}
	return ticks
}

// logTicks mark 1, 2 and 5 of each decade, labelled as plain numbers,
// and the other digits unlabelled.
type logTicks struct{}

// Ticks implements plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var ticks []plot.Tick
	for d := math.Pow10(int(math.Floor(math.Log10(lo)))); d <= hi; d *= 10 {
		for i := 1; i < 10; i++ {
			v := d * float64(i)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 || i == 2 || i == 5 {
				t.Label = plainNumber(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// plainNumber prints an axis value with at most four significant digits
// and an SI suffix from ten thousand: 0.5, 250, 5000, 12k, 500k, 1.5M.
func plainNumber(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return strconv.FormatFloat(v/1e9, 'g', 4, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// xLabel prints a measured x: bytes as 64, 1k, 48k (of 1024), 1M; other
// values as plain numbers.
func xLabel(v float64, bytes bool) string {
	n := int64(v)
	switch {
	case !bytes || float64(n) != v:
		return plainNumber(v)
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "M"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "k"
	}
	return strconv.FormatInt(n, 10)
}
