package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A Report is what `xam bench all` writes: one section per paper, and in
// each the paper's experiments, every figure the paper reported beside
// today's and today's beside its peers measured in the same run on the
// same lab. It is written as report.md and report.json (WriteFiles).
type Report struct {
	Command     string     `json:"command"`
	Started     time.Time  `json:"started"`
	Seconds     float64    `json:"seconds"`
	Quick       bool       `json:"quick"`
	Setup       Setup      `json:"setup"`
	Sections    []*Section `json:"sections"`
	Failed      int        `json:"failed"`
	Interrupted bool       `json:"interrupted,omitempty"`
}

// A Section is one paper's experiments.
type Section struct {
	Paper       string        `json:"paper"`    // SSAM, AM-II, DVCM, GRIM
	Source      string        `json:"source"`   // the citation
	Hardware    string        `json:"hardware"` // what the paper measured on
	Experiments []*Experiment `json:"experiments"`
}

// An Experiment is one of a paper's measurements, run today.
type Experiment struct {
	Name     string `json:"name"` // as `xam bench NAME` runs it alone
	Title    string `json:"title"`
	Measured string `json:"measured"` // what the paper measured
	Differs  string `json:"differs"`  // what differs today, and why
	// Status: "ok", "failed" (Error says why), "interrupted" (what was
	// measured before the signal is here) or "not run" (the run was
	// interrupted before it).
	Status  string   `json:"status"`
	Error   string   `json:"error,omitempty"`
	Seconds float64  `json:"seconds"`
	Figures []Figure `json:"figures"`
	Plots   []string `json:"plots"` // file names in the report's directory
	// Result is the experiment's own tables (its `xam bench NAME --json`).
	Result any `json:"result,omitempty"`
	// Details is the experiment's own tables as Markdown.
	Details string `json:"-"`
}

// A Figure is one number: the paper's (nil where the paper gives none as a
// number; PaperNote then says what it reported), today's, and today's
// against its peers.
type Figure struct {
	Name      string   `json:"name"`
	Unit      string   `json:"unit"`
	Paper     *float64 `json:"paper"`
	PaperNote string   `json:"paper_note,omitempty"`
	Today     float64  `json:"today"`
	// VsPaper is Today over Paper; nil, and absent from the JSON, where
	// the paper gives no figure as a number (or gives 0).
	VsPaper *float64 `json:"today_vs_paper,omitempty"`
	Peers   []Peer   `json:"peers,omitempty"`
}

// A Peer is today's figure of another path measured in the same run:
// Ratio is the experiment's figure over the peer's. A peer that could not
// be measured (a tool not installed) has Missing set, and no value. Ratio
// is nil, and absent from the JSON, where the peer is missing or its
// value is 0.
type Peer struct {
	Name    string   `json:"name"`
	Value   float64  `json:"value"`
	Ratio   *float64 `json:"ratio,omitempty"`
	Missing string   `json:"missing,omitempty"`
}

// paperFig is a figure with the paper's value. The figure holds a copy of
// peers, so figures may be built from one slice of peers.
func paperFig(name, unit string, paper, today float64, peers ...Peer) Figure {
	f := Figure{Name: name, Unit: unit, Paper: &paper, Today: finite(today), Peers: slices.Clone(peers)}
	f.fillRatios()
	return f
}

// noteFig is a figure the paper reported only in words (note). The
// figure holds a copy of peers, as paperFig's does.
func noteFig(name, unit, note string, today float64, peers ...Peer) Figure {
	f := Figure{Name: name, Unit: unit, PaperNote: note, Today: finite(today), Peers: slices.Clone(peers)}
	f.fillRatios()
	return f
}

// fillRatios rounds the peers' values and sets the figure's ratios from
// Today, Paper and the rounded values, as checkRatios recomputes them.
func (f *Figure) fillRatios() {
	f.VsPaper = nil
	if f.Paper != nil && *f.Paper != 0 {
		f.VsPaper = figureRatio(f.Today, *f.Paper)
	}
	for i := range f.Peers {
		p := &f.Peers[i]
		p.Value, p.Ratio = finite(p.Value), nil
		if p.Missing == "" && p.Value != 0 {
			p.Ratio = figureRatio(f.Today, p.Value)
		}
	}
}

// figureRatio returns a over b, rounded by finite.
func figureRatio(a, b float64) *float64 {
	v := finite(a / b)
	return &v
}

// checkRatios recomputes the ratios of f, a figure of experiment exp as
// report.json holds it, from its figures: Today over Paper where the
// paper gives a number, else no ratio to the paper; Today over each
// peer's value where the peer was measured and is not 0, else no ratio.
func checkRatios(exp string, f Figure) []error {
	var errs []error
	check := func(what string, got *float64, num, den float64, want bool) {
		switch {
		case !want && got != nil:
			errs = append(errs, fmt.Errorf("%s: figure %q: %s is %g, want none", exp, f.Name, what, *got))
		case want && got == nil:
			errs = append(errs, fmt.Errorf("%s: figure %q: no %s, want %g/%g", exp, f.Name, what, num, den))
		case want && !closeTo(*got, num/den):
			errs = append(errs, fmt.Errorf("%s: figure %q: %s is %g, want %g/%g = %.4g", exp, f.Name, what, *got, num, den, num/den))
		}
	}
	paper := 0.0
	if f.Paper != nil {
		paper = *f.Paper
	}
	check("today_vs_paper", f.VsPaper, f.Today, paper, paper != 0)
	for _, p := range f.Peers {
		if p.Missing != "" && p.Value != 0 {
			errs = append(errs, fmt.Errorf("%s: figure %q: peer %q is missing yet has value %g", exp, f.Name, p.Name, p.Value))
		}
		check(fmt.Sprintf("ratio to peer %q", p.Name), p.Ratio, f.Today, p.Value, p.Missing == "" && p.Value != 0)
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

// finite rounds v to four significant digits; NaN and the infinities,
// which JSON cannot carry, become 0.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) || v == 0 {
		return 0
	}
	p := math.Pow10(3 - int(math.Floor(math.Log10(math.Abs(v)))))
	return math.Round(v*p) / p
}

// peer is a measured peer.
func peer(name string, v float64) Peer { return Peer{Name: name, Value: v} }

// The papers, in the order of the report.
var (
	PaperSSAMSection = Section{Paper: "SSAM", Source: paperSSAM.Source, Hardware: paperSSAM.Setup}
	PaperAMII        = Section{Paper: "AM-II",
		Source:   "Chun, Mainwaring, Culler: Virtual Network Transport Protocols for Myrinet (1997)",
		Hardware: "100+ Sun UltraSPARC workstations, Myrinet (LANai NICs with an embedded processor and SRAM on the SBus, link-level back-pressure, source-routed crossbar switches)"}
	PaperDVCM = Section{Paper: "DVCM",
		Source:   "Rosu, Schwan: Sender Coordination in the Distributed Virtual Communication Machine (1998)",
		Hardware: "UltraSPARC-I hosts, Fore SBA-200E ATM NICs running the DVCM firmware, a ForeRunner ASX-200WG switch (a star), AAL5, UBR"}
	PaperGRIM = Section{Paper: "GRIM",
		Source:   "Ulmer, Yalamanchili: A Messaging Layer for Heterogeneous Endpoints in Resource Rich Clusters (2001)",
		Hardware: "Pentium III hosts, Myrinet LANai 4 NICs (33 MHz, 1 MB), an i960 I2O card as a storage endpoint"}
)

// NewSection returns a copy of s, without experiments, for a report.
func NewSection(s Section) *Section { s.Experiments = nil; return &s }

// Add appends e to the section and returns it.
func (s *Section) Add(e *Experiment) *Experiment {
	s.Experiments = append(s.Experiments, e)
	return e
}

// Finish sets the experiment's status from what its run returned: err
// (nil, or the failure), and whether it was interrupted.
func (e *Experiment) Finish(elapsed time.Duration, interrupted bool, err error) {
	e.Seconds = roundTo(elapsed.Seconds(), 1)
	switch {
	case err != nil:
		e.Status, e.Error = "failed", err.Error()
	case interrupted:
		e.Status = "interrupted"
	default:
		e.Status = "ok"
	}
}

// Count tallies the report's experiments that failed.
func (r *Report) Count() {
	r.Failed = 0
	for _, s := range r.Sections {
		for _, e := range s.Experiments {
			if e.Status == "failed" {
				r.Failed++
			}
		}
	}
}

// WriteFiles writes report.md and report.json into dir.
func (r *Report) WriteFiles(dir string) (paths []string, err error) {
	r.Count()
	md := filepath.Join(dir, "report.md")
	f, err := os.Create(md)
	if err != nil {
		return nil, err
	}
	err = r.Markdown(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", md, err)
	}
	js := filepath.Join(dir, "report.json")
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the report: %w", err)
	}
	if err := os.WriteFile(js, append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", js, err)
	}
	return []string{md, js}, nil
}

// Markdown writes the report.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# The four papers, measured today\n\n")
	p("`%s`, started %s, took %s", r.Command, r.Started.UTC().Format(time.RFC3339), (time.Duration(r.Seconds) * time.Second).String())
	if r.Quick {
		p(" (--quick: fewer iterations, the same experiments)")
	}
	p(". Measured on %s.\n\n", r.Setup.describe())
	if r.Interrupted {
		p("**Interrupted**: the report holds what was measured before the run was stopped.\n\n")
	}
	if r.Failed > 0 {
		p("**%d experiment(s) failed**; each says why in its section.\n\n", r.Failed)
	}
	p("Each figure: the paper's, today's, today over the paper, and today over each peer measured in the same run on the same lab (a ratio above 1 means today's figure is the larger: for times, slower; for rates, faster).\n\n")
	p("| paper | experiment | status | seconds |\n|---|---|---|--:|\n")
	for _, s := range r.Sections {
		for _, e := range s.Experiments {
			p("| %s | %s (`%s`) | %s | %.1f |\n", s.Paper, e.Title, e.Name, e.Status, e.Seconds)
		}
	}
	for _, s := range r.Sections {
		p("\n## %s\n\n%s. Measured on: %s.\n", s.Paper, s.Source, s.Hardware)
		for _, e := range s.Experiments {
			p("\n### %s (`xam bench %s`)\n\n", e.Title, e.Name)
			p("**The paper**: %s\n\n", e.Measured)
			switch e.Status {
			case "failed":
				p("**Failed**: %s\n\n", e.Error)
			case "interrupted":
				p("**Interrupted**: what follows was measured before the signal.\n\n")
			case "not run":
				p("**Not run**: the run was interrupted before it.\n\n")
			}
			if len(e.Figures) > 0 {
				p("| figure | unit | paper | today | today / paper | today / peers |\n|---|---|--:|--:|--:|---|\n")
				for _, f := range e.Figures {
					paper := f.PaperNote
					if f.Paper != nil {
						paper = num(*f.Paper)
						if f.PaperNote != "" {
							paper += " (" + f.PaperNote + ")"
						}
					}
					vs := "—" // the paper gives no figure as a number
					if f.VsPaper != nil {
						vs = fmt.Sprintf("%.2f", *f.VsPaper)
					}
					var peers []string
					for _, pr := range f.Peers {
						switch {
						case pr.Missing != "":
							peers = append(peers, fmt.Sprintf("%s: %s", pr.Name, pr.Missing))
						case pr.Ratio != nil:
							peers = append(peers, fmt.Sprintf("%s %s: %.2f", pr.Name, num(pr.Value), *pr.Ratio))
						default:
							peers = append(peers, fmt.Sprintf("%s %s", pr.Name, num(pr.Value)))
						}
					}
					p("| %s | %s | %s | %s | %s | %s |\n", f.Name, f.Unit, paper, num(f.Today), vs, strings.Join(peers, "; "))
				}
				p("\n")
			}
			if e.Differs != "" {
				p("**What differs**: %s\n\n", e.Differs)
			}
			for _, pl := range e.Plots {
				if strings.HasSuffix(pl, ".png") {
					p("![%s](%s)\n\n", pl, pl)
				}
			}
			if e.Details != "" {
				p("<details><summary>The experiment's tables</summary>\n\n%s\n</details>\n", demote(e.Details))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// describe says where the report was measured.
func (s Setup) describe() string {
	var where []string
	if s.Lab != "" {
		where = append(where, s.Lab)
	}
	if s.Kernel != "" {
		where = append(where, "Linux "+s.Kernel)
	}
	if s.CPUs > 0 {
		where = append(where, fmt.Sprintf("%d CPUs", s.CPUs))
	}
	if len(where) == 0 {
		return "this machine"
	}
	return strings.Join(where, ", ")
}

// demote moves an experiment's Markdown headings below the report's.
func demote(md string) string {
	lines := strings.Split(strings.TrimRight(md, "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "#") {
			lines[i] = "###" + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// num prints a figure with three significant digits, at least.
func num(v float64) string {
	switch a := math.Abs(v); {
	case v == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// CheckReport reads the report.json in dir and checks its structure: a
// section for each paper, each experiment with a status, every figure a
// finite number with its ratios recomputed from its figures (today over
// the paper's, present only where the paper gives a number, and today
// over each measured peer's), and every plot named written; it returns
// what is wrong, or nil. It checks no speed.
func CheckReport(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("report.json: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "report.md")); err != nil {
		return err
	}
	var errs []error
	have := map[string]bool{}
	for _, s := range r.Sections {
		have[s.Paper] = true
		if len(s.Experiments) == 0 {
			errs = append(errs, fmt.Errorf("section %s: no experiments", s.Paper))
		}
		for _, e := range s.Experiments {
			if e.Status == "" {
				errs = append(errs, fmt.Errorf("%s: no status", e.Name))
			}
			if e.Status == "ok" && len(e.Figures) == 0 {
				errs = append(errs, fmt.Errorf("%s: no figures", e.Name))
			}
			if e.Status == "ok" && len(e.Plots) == 0 {
				errs = append(errs, fmt.Errorf("%s: no plots", e.Name))
			}
			for _, f := range e.Figures {
				if math.IsNaN(f.Today) || math.IsInf(f.Today, 0) {
					errs = append(errs, fmt.Errorf("%s: figure %q is not a number", e.Name, f.Name))
				}
				if f.Paper == nil && f.PaperNote == "" {
					errs = append(errs, fmt.Errorf("%s: figure %q has no paper figure or note", e.Name, f.Name))
				}
				errs = append(errs, checkRatios(e.Name, f)...)
			}
			for _, pl := range e.Plots {
				if st, err := os.Stat(filepath.Join(dir, pl)); err != nil || st.Size() == 0 {
					errs = append(errs, fmt.Errorf("%s: plot %s not written", e.Name, pl))
				}
			}
		}
	}
	for _, s := range []Section{PaperSSAMSection, PaperAMII, PaperDVCM, PaperGRIM} {
		if !have[s.Paper] {
			errs = append(errs, fmt.Errorf("no section %s", s.Paper))
		}
	}
	return errors.Join(errs...)
}

// NewExperiment returns experiment name with what the report says of it.
func NewExperiment(name string) *Experiment {
	sp, _ := SpecOf(name)
	return &Experiment{Name: name, Status: "not run", Title: sp.Title, Measured: sp.Measured, Differs: sp.Differs}
}
