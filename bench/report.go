package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A Report is what `xam bench all` writes: one section per paper, and in
// each the paper's experiments, each run Runs times in a row on its labs,
// every figure the paper reported beside today's (the median of the runs
// with their range) and today's beside its peers measured in the same
// runs on the same lab; then the papers' claims judged on the figures
// (Claims, Judge). It is written as report.md and report.json
// (WriteFiles).
type Report struct {
	Command     string        `json:"command"`
	Started     time.Time     `json:"started"`
	Seconds     float64       `json:"seconds"`
	Quick       bool          `json:"quick"`
	Runs        int           `json:"runs"` // of each experiment
	Setup       Setup         `json:"setup"`
	Sections    []*Section    `json:"sections"`
	Claims      []ClaimResult `json:"claims"`
	Failed      int           `json:"failed"`
	Interrupted bool          `json:"interrupted,omitempty"`
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
	Name string `json:"name"` // as `xam bench NAME` runs it alone
	// Command runs it where `xam bench NAME` does not (a job's
	// experiments: `xam bench all --job`).
	Command  string `json:"command,omitempty"`
	Title    string `json:"title"`
	Measured string `json:"measured"` // what the paper measured
	Differs  string `json:"differs"`  // what differs today, and why
	// Status: "ok", "failed" (Error says why), "interrupted" (what was
	// measured before the signal is here) or "not run" (the run was
	// interrupted before it).
	Status  string  `json:"status"`
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
	// Runs is how many runs measured the figures.
	Runs    int      `json:"runs"`
	Figures []Figure `json:"figures"`
	Plots   []string `json:"plots"` // file names in the report's directory
	// Results are the experiment's own tables of each run (its `xam
	// bench NAME --json`).
	Results []any `json:"results,omitempty"`
	// Details are the experiment's own tables of each run, as Markdown.
	Details []string `json:"-"`
}

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

// Record puts what the runs of the experiment measured into it: their
// figures merged (each the median of the runs, with their range), their
// tables, and their plots, each point the median of the runs, drawn into
// dir unless noPlots. It returns the error of drawing.
func (e *Experiment) Record(runs []Reported, dir string, noPlots bool) error {
	e.Runs = len(runs)
	var figs [][]Figure
	for _, r := range runs {
		figs = append(figs, r.Figures())
		e.Results = append(e.Results, r)
		var md strings.Builder
		if err := r.Markdown(&md); err == nil {
			e.Details = append(e.Details, md.String())
		}
	}
	e.Figures = mergeFigures(figs)
	if noPlots || len(runs) == 0 {
		return nil
	}
	paths, err := PlotRuns(dir, runs)
	for _, p := range paths {
		e.Plots = append(e.Plots, filepath.Base(p))
	}
	return err
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

// WriteFiles writes report.md and report.json into dir, the papers'
// claims judged on the figures first.
func (r *Report) WriteFiles(dir string) (paths []string, err error) {
	r.Count()
	if len(r.Setup.Hosts) == 0 { // a job's report has none of the claims' experiments
		r.Claims = r.Judge(Claims())
	}
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
	if len(r.Setup.Hosts) > 0 {
		p("# The four papers' cluster experiments, measured across a job's nodes\n\n")
	} else {
		p("# The four papers, measured today\n\n")
	}
	p("`%s`, started %s, took %s", r.Command, r.Started.UTC().Format(time.RFC3339), (time.Duration(r.Seconds) * time.Second).String())
	if r.Quick {
		p(" (--quick: fewer iterations, the same experiments)")
	}
	p(". Measured on %s.\n\n", r.Setup.describe())
	if len(r.Setup.Hosts) > 0 {
		hostsMarkdown(&b, r.Setup.Hosts)
	}
	if r.Interrupted {
		p("**Interrupted**: the report holds what was measured before the run was stopped.\n\n")
	}
	if r.Failed > 0 {
		p("**%d experiment(s) failed**; each says why in its section.\n\n", r.Failed)
	}
	p("Each experiment ran %d times in a row on its labs, each run measuring its peers beside it. Each figure: the paper's, and today's as the median of the runs with their range, `median [min–max]`; "+
		"a figure whose runs disagree by more than %dx is **unsettled**: its range is shown, not one number. "+
		"Ratios (today over the paper, today over each peer of the same run) are taken run by run; above 1 means today's figure is the larger: for times, slower; for rates, faster.\n\n", r.Runs, unsettledFactor)
	r.unsettledSummary(&b)
	p("| paper | experiment | status | runs | seconds |\n|---|---|---|--:|--:|\n")
	for _, s := range r.Sections {
		for _, e := range s.Experiments {
			p("| %s | %s (`%s`) | %s | %d | %.1f |\n", s.Paper, e.Title, e.Name, e.Status, e.Runs, e.Seconds)
		}
	}
	if len(r.Claims) > 0 {
		r.claimsSection(&b)
	}
	for _, s := range r.Sections {
		p("\n## %s\n\n%s. Measured on: %s.\n", s.Paper, s.Source, s.Hardware)
		for _, e := range s.Experiments {
			e.markdown(&b)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// claimsSection writes the report's section of the claims.
func (r *Report) claimsSection(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	p("\n## Reproduced?\n\nEach claim is decided by the criterion beside it, on the median of the runs (`bench.Claims`); a claim whose measured quantity is unsettled is neither reproduced nor refuted. docs/reproduction.md says why a claim cannot hold on this lab where it cannot.\n\n")
	claimsMarkdown(b, r.Claims)
}

// unsettledSummary writes the list of the unsettled figures and peers'
// values, each once (a peer beside several figures, or a figure that is
// another's peer, is one measurement), or says there is none.
func (r *Report) unsettledSummary(b *strings.Builder) {
	var flagged []string
	seen := map[string]bool{}
	add := func(exp, what string, m Measured) {
		if key := exp + "\x00" + m.String(); m.Unsettled && !seen[key] {
			seen[key] = true
			flagged = append(flagged, fmt.Sprintf("%s: %s (%s)", exp, what, m))
		}
	}
	for _, s := range r.Sections {
		for _, e := range s.Experiments {
			for _, f := range e.Figures {
				add(e.Name, f.Name, f.Today)
			}
			for _, f := range e.Figures {
				for _, pr := range f.Peers {
					add(e.Name, f.Name+", peer "+pr.Name, pr.Value)
				}
			}
		}
	}
	if len(flagged) == 0 {
		b.WriteString("**Unsettled figures**: none; every figure's runs agree within 2x.\n\n")
		return
	}
	fmt.Fprintf(b, "**Unsettled figures** (%d, runs more than %dx apart):\n\n- %s\n\n", len(flagged), unsettledFactor, strings.Join(flagged, "\n- "))
}

// markdown writes the experiment's part of the report: its figures, a
// row per figure and a row per peer under it, its plots and its tables of
// each run.
func (e *Experiment) markdown(b *strings.Builder) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	cmd := "xam bench " + e.Name
	if e.Command != "" {
		cmd = e.Command
	}
	p("\n### %s (`%s`)\n\n", e.Title, cmd)
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
		p("| figure | unit | paper | today: median [min–max] | ratio: today / paper, today / peer |\n|---|---|--:|--:|--:|\n")
		for _, f := range e.Figures {
			paper := f.PaperNote
			if f.Paper != nil {
				paper = num(*f.Paper)
				if f.PaperNote != "" {
					paper += " (" + f.PaperNote + ")"
				}
			}
			p("| %s | %s | %s | %s | %s |\n", f.Name, f.Unit, paper, f.Today, f.VsPaper.orNone())
			for _, pr := range f.Peers {
				if pr.Missing != "" {
					p("| ↳ peer: %s | | | %s | — |\n", pr.Name, pr.Missing)
					continue
				}
				p("| ↳ peer: %s | %s | | %s | %s |\n", pr.Name, f.Unit, pr.Value, pr.Ratio.orNone())
			}
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
	if len(e.Plots) > 0 && e.Runs > 1 {
		p("Each point of the plots is the median of the %d runs, its bar their range; a peer's line is at its median.\n\n", e.Runs)
	}
	for i, d := range e.Details {
		p("<details><summary>The experiment's tables, run %d of %d</summary>\n\n%s\n</details>\n", i+1, len(e.Details), demote(d))
	}
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
	if d := s.Device; d != nil {
		mb := "frames of one 4 KB chunk"
		if d.MultiBuffer {
			mb = "multi-buffer frames"
		}
		where = append(where, fmt.Sprintf("devices %s (XDP %s, AF_XDP %s, %s, XDP receive metadata: %s)",
			d.Driver, d.XDPMode, d.XSKMode, mb, strings.Join(append([]string{}, d.RxMetadata...), " ")))
	}
	if x := s.XSK; x != nil && x.Mode != "" {
		m := "AF_XDP in " + x.Mode + " mode (--zerocopy " + x.Policy
		if x.Why != "" {
			m += "; " + x.Why
		}
		where = append(where, m+")")
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
// section for each paper, each experiment with a status, an experiment
// that ran through with every figure measured in at least MinRuns runs,
// every figure's median and range recomputed from its runs and its
// ratios from its runs (today over the paper's, present only where the
// paper gives a number, and today over each measured peer's), every plot
// named written, every claim judged as Judge judges it, and report.md
// showing the claims' table and each unsettled figure as unsettled; it
// returns what is wrong, or nil. It checks no speed.
func CheckReport(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("report.json: %w", err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	var errs []error
	if r.Runs < MinRuns {
		errs = append(errs, fmt.Errorf("%d runs of each experiment, want at least %d", r.Runs, MinRuns))
	}
	have := map[string]bool{}
	for _, s := range r.Sections {
		have[s.Paper] = true
		if len(s.Experiments) == 0 {
			errs = append(errs, fmt.Errorf("section %s: no experiments", s.Paper))
		}
		for _, e := range s.Experiments {
			errs = append(errs, checkExperiment(dir, string(md), e)...)
		}
	}
	for _, s := range []Section{PaperSSAMSection, PaperAMII, PaperDVCM, PaperGRIM} {
		if !have[s.Paper] {
			errs = append(errs, fmt.Errorf("no section %s", s.Paper))
		}
	}
	errs = append(errs, checkClaims(&r, string(md))...)
	return errors.Join(errs...)
}

// checkExperiment checks experiment e of a report written into dir, whose
// report.md is md.
func checkExperiment(dir, md string, e *Experiment) []error {
	var errs []error
	ok := e.Status == "ok"
	switch {
	case e.Status == "":
		errs = append(errs, fmt.Errorf("%s: no status", e.Name))
	case ok && len(e.Figures) == 0:
		errs = append(errs, fmt.Errorf("%s: no figures", e.Name))
	case ok && len(e.Plots) == 0:
		errs = append(errs, fmt.Errorf("%s: no plots", e.Name))
	case ok && e.Runs < MinRuns:
		errs = append(errs, fmt.Errorf("%s: %d runs, want at least %d", e.Name, e.Runs, MinRuns))
	}
	for _, f := range e.Figures {
		if ok && len(f.Today.Runs) < MinRuns {
			errs = append(errs, fmt.Errorf("%s: figure %q measured in %d runs, want at least %d", e.Name, f.Name, len(f.Today.Runs), MinRuns))
		}
		if f.Paper == nil && f.PaperNote == "" {
			errs = append(errs, fmt.Errorf("%s: figure %q has no paper figure or note", e.Name, f.Name))
		}
		errs = append(errs, checkRatios(e.Name, f)...)
		if row := mdRow(md, fmt.Sprintf("| %s | %s | ", f.Name, f.Unit)); !strings.Contains(row, " | "+f.Today.String()+" | ") {
			errs = append(errs, fmt.Errorf("%s: figure %q: report.md shows %q, not %s", e.Name, f.Name, row, f.Today))
		}
		if f.Today.Unsettled && !strings.Contains(md, fmt.Sprintf("\n- %s: %s (%s)\n", e.Name, f.Name, f.Today)) {
			errs = append(errs, fmt.Errorf("%s: figure %q is unsettled, and the summary does not list it", e.Name, f.Name))
		}
	}
	for _, pl := range e.Plots {
		if st, err := os.Stat(filepath.Join(dir, pl)); err != nil || st.Size() == 0 {
			errs = append(errs, fmt.Errorf("%s: plot %s not written", e.Name, pl))
		}
	}
	return errs
}

// mdRow returns the first line of md that begins with prefix, or "".
func mdRow(md, prefix string) string {
	for line := range strings.Lines(md) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSuffix(line, "\n")
		}
	}
	return ""
}

// checkClaims checks the claims of r as report.json holds them: every
// claim of Claims judged, each as Judge judges it on r's figures, and
// report.md's table showing each verdict.
func checkClaims(r *Report, md string) []error {
	var errs []error
	if !strings.Contains(md, "\n## Reproduced?\n") {
		errs = append(errs, errors.New("report.md has no table of claims"))
	}
	want := r.Judge(Claims())
	if len(r.Claims) != len(want) {
		return append(errs, fmt.Errorf("%d claims judged, want %d", len(r.Claims), len(want)))
	}
	for i, c := range r.Claims {
		w := want[i]
		switch {
		case c.Says != w.Says || c.Criterion != w.Criterion:
			errs = append(errs, fmt.Errorf("claim %d: %q (%s), want %q (%s)", i+1, c.Says, c.Criterion, w.Says, w.Criterion))
		case c.Verdict != w.Verdict:
			errs = append(errs, fmt.Errorf("claim %q: verdict %q, want %q from %s", c.Says, c.Verdict, w.Verdict, w.Measured.orNone()))
		case !strings.Contains(md, fmt.Sprintf("| %s | **%s** |", c.Measured.orNone(), c.Verdict)):
			errs = append(errs, fmt.Errorf("claim %q: report.md does not show %s, %s", c.Says, c.Measured.orNone(), c.Verdict))
		}
	}
	return errs
}

// NewExperiment returns experiment name with what the report says of it.
func NewExperiment(name string) *Experiment {
	sp, _ := SpecOf(name)
	return &Experiment{Name: name, Status: "not run", Title: sp.Title, Measured: sp.Measured, Differs: sp.Differs}
}
