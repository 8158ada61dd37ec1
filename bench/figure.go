package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// A Figure is one number of an experiment: the paper's (nil where the
// paper gives none as a number; PaperNote then says what it reported),
// today's in every run, and today's against its peers of the same run.
// An experiment's run gives its figures of one run each (Figures);
// mergeFigures puts the runs of the report's together.
type Figure struct {
	Name      string   `json:"name"`
	Unit      string   `json:"unit"`
	Paper     *float64 `json:"paper"`
	PaperNote string   `json:"paper_note,omitempty"`
	Today     Measured `json:"today"`
	// VsPaper is Today over Paper, run by run; nil, and absent from the
	// JSON, where the paper gives no figure as a number (or gives 0).
	VsPaper *Measured `json:"today_vs_paper,omitempty"`
	Peers   []Peer    `json:"peers,omitempty"`
}

// A Peer is today's figure of another path measured in the same runs:
// Ratio is the experiment's figure over the peer's, run by run (each run
// measures the two side by side, so a drift of the machine between runs
// falls on both). A peer that could not be measured (a tool not
// installed) has Missing set, and no value. Ratio is nil, and absent from
// the JSON, where the peer is missing or its value is 0.
type Peer struct {
	Name    string    `json:"name"`
	Value   Measured  `json:"value"`
	Ratio   *Measured `json:"ratio,omitempty"`
	Missing string    `json:"missing,omitempty"`
}

// paperFig is a figure of one run with the paper's value. The figure
// holds a copy of peers, so figures may be built from one slice of peers.
func paperFig(name, unit string, paper, today float64, peers ...Peer) Figure {
	f := Figure{Name: name, Unit: unit, Paper: &paper, Today: measure(today), Peers: slices.Clone(peers)}
	f.fillRatios()
	return f
}

// noteFig is a figure of one run the paper reported only in words (note).
// The figure holds a copy of peers, as paperFig's does.
func noteFig(name, unit, note string, today float64, peers ...Peer) Figure {
	f := Figure{Name: name, Unit: unit, PaperNote: note, Today: measure(today), Peers: slices.Clone(peers)}
	f.fillRatios()
	return f
}

// peer is a peer measured in one run.
func peer(name string, v float64) Peer { return Peer{Name: name, Value: measure(v)} }

// fillRatios sets the figure's ratios from its runs and the paper's
// figure, as checkRatios recomputes them.
func (f *Figure) fillRatios() {
	f.VsPaper = nil
	if f.Paper != nil && *f.Paper != 0 {
		f.VsPaper = ratioOf(f.Today.Runs, slices.Repeat([]float64{*f.Paper}, len(f.Today.Runs)))
	}
	for i := range f.Peers {
		p := &f.Peers[i]
		p.Ratio = nil
		if p.Missing == "" {
			p.Ratio = ratioOf(f.Today.Runs, p.Value.Runs)
		}
	}
}

// ratioOf returns the figure of a over b, run by run, or nil where no run
// pairs up (see runRatios).
func ratioOf(a, b []float64) *Measured {
	r := runRatios(a, b)
	if len(r) == 0 {
		return nil
	}
	m := measure(r...)
	return &m
}

// mergeFigures returns the figures of several runs of an experiment (each
// run's from its Figures) as one list: a figure per name, in the order
// they first appear, its runs those of every run that has it, and each
// peer's runs paired with the figure's. A peer missing in every run stays
// missing; one missing in some runs has the others' values.
func mergeFigures(runs [][]Figure) []Figure {
	var out []Figure
	index := map[string]int{}
	for _, figs := range runs {
		for _, f := range figs {
			i, ok := index[f.Name]
			if !ok {
				i, index[f.Name] = len(out), len(out)
				out = append(out, Figure{Name: f.Name, Unit: f.Unit, Paper: f.Paper, PaperNote: f.PaperNote})
			}
			out[i].add(f)
		}
	}
	for i := range out {
		out[i].Today = measure(out[i].Today.Runs...)
		for j := range out[i].Peers {
			p := &out[i].Peers[j]
			p.Value = measure(p.Value.Runs...)
			if p.Value.Measured() {
				p.Missing = ""
			}
		}
		out[i].fillRatios()
	}
	return out
}

// add appends the runs of g, a figure of the same name, to f's, and the
// runs of its peers to f's peers of the same names. A peer's runs pair
// with the figure's in order: one not measured in every run of the figure
// gets no ratio (see runRatios), its values shown still.
func (f *Figure) add(g Figure) {
	f.Today.Runs = append(f.Today.Runs, g.Today.Runs...)
	for _, p := range g.Peers {
		j := slices.IndexFunc(f.Peers, func(q Peer) bool { return q.Name == p.Name })
		if j < 0 {
			j = len(f.Peers)
			f.Peers = append(f.Peers, Peer{Name: p.Name, Missing: p.Missing})
		}
		f.Peers[j].Value.Runs = append(f.Peers[j].Value.Runs, p.Value.Runs...)
	}
}

// checkRatios checks f, a figure of experiment exp as report.json holds
// it: each Measured consistent with its runs, and its ratios recomputed
// from its runs: Today over Paper where the paper gives a number, else no
// ratio to the paper; Today over each peer's value where the peer was
// measured in as many runs, else no ratio.
func checkRatios(exp string, f Figure) []error {
	var errs []error
	bad := func(what string, err error) {
		errs = append(errs, fmt.Errorf("%s: figure %q: %s: %w", exp, f.Name, what, err))
	}
	check := func(what string, got *Measured, num, den []float64) {
		want := runRatios(num, den)
		switch {
		case len(want) == 0 && got != nil:
			errs = append(errs, fmt.Errorf("%s: figure %q: %s is %v, want none", exp, f.Name, what, got.Runs))
		case len(want) > 0 && got == nil:
			errs = append(errs, fmt.Errorf("%s: figure %q: no %s, want %v over %v", exp, f.Name, what, num, den))
		case got != nil && !slices.EqualFunc(got.Runs, want, closeTo):
			errs = append(errs, fmt.Errorf("%s: figure %q: %s is %v, want %v over %v", exp, f.Name, what, got.Runs, num, den))
		case got != nil:
			if err := got.check(); err != nil {
				bad(what, err)
			}
		}
	}
	if err := f.Today.check(); err != nil {
		bad("today", err)
	}
	var paper []float64
	if f.Paper != nil && *f.Paper != 0 {
		paper = slices.Repeat([]float64{*f.Paper}, len(f.Today.Runs))
	}
	check("today_vs_paper", f.VsPaper, f.Today.Runs, paper)
	for _, p := range f.Peers {
		if err := p.Value.check(); err != nil {
			bad(fmt.Sprintf("peer %q", p.Name), err)
		}
		if p.Missing != "" && p.Value.Measured() {
			errs = append(errs, fmt.Errorf("%s: figure %q: peer %q is missing yet has values %v", exp, f.Name, p.Name, p.Value.Runs))
		}
		var den []float64
		if p.Missing == "" {
			den = p.Value.Runs
		}
		check(fmt.Sprintf("ratio to peer %q", p.Name), p.Ratio, f.Today.Runs, den)
	}
	return errs
}

// closeTo reports whether got is want to the four significant digits of
// finite.
func closeTo(got, want float64) bool {
	if want == 0 || math.IsNaN(want) || math.IsInf(want, 0) {
		return got == 0
	}
	return math.Abs(got-want) <= 1e-3*math.Abs(want)
}

// finite rounds v to four significant digits, to the float nearest the
// decimal, so that rounding again changes nothing; NaN and the
// infinities, which JSON cannot carry, become 0.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
		return 0
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return r
}
