package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/loader"
)

// defaultReportDir is where `xam bench all` writes without --out.
const defaultReportDir = "xam-report"

// reported is what every experiment of the report returns.
type reported interface {
	Figures() []bench.Figure
	Markdown(io.Writer) error
	Plot(dir string) ([]string, error)
}

// allExperiment is one experiment of `xam bench all`: its paper, how long
// it takes (quick and full, for the estimate of the time left), and how
// it runs.
type allExperiment struct {
	name    string
	paper   bench.Section
	seconds [2]float64 // quick, full
	run     func(br *benchRun, quick bool) (reported, error)
}

// allExperiments are the papers' experiments, in the report's order.
func allExperiments(mode loader.Mode) []allExperiment {
	pick := func(quick bool, q, full int) int {
		if quick {
			return q
		}
		return full
	}
	return []allExperiment{
		{"ssam", bench.PaperSSAMSection, [2]float64{2, 6}, func(br *benchRun, quick bool) (reported, error) {
			return reportedOf(benchSSAM(br, bench.SSAMTablesConfig{Count: pick(quick, 2000, 20000), Bulk: int64(pick(quick, 4<<20, 64<<20)), Mode: mode, Stop: br.in.flag()}, true, ""))
		}},
		{"logp", bench.PaperAMII, [2]float64{2, 6}, func(br *benchRun, quick bool) (reported, error) {
			return reportedOf(benchLogP(br, bench.LogPConfig{Count: pick(quick, 2000, 20000), Clients: 7, Mode: mode, Stop: br.in.flag()}, true, ""))
		}},
		{"amii", bench.PaperAMII, [2]float64{1, 3}, func(br *benchRun, quick bool) (reported, error) {
			return reportedOf(benchAMII(br, bench.AMIIBandwidthConfig{Messages: pick(quick, 20000, 200000), Bulk: int64(pick(quick, 4<<20, 32<<20)), Mode: mode, Stop: br.in.flag()}, true, ""))
		}},
		{"permutations", bench.PaperAMII, [2]float64{5, 14}, func(br *benchRun, quick bool) (reported, error) {
			cfg := bench.PermutationsConfig{Duration: time.Duration(pick(quick, 1, 3)) * time.Second, RTTs: pick(quick, 500, 5000), Mode: mode, Stop: br.in.flag()}
			return reportedOf(benchPermutations(br, cfg, true, ""))
		}},
		{"overcommit", bench.PaperAMII, [2]float64{6, 16}, func(br *benchRun, quick bool) (reported, error) {
			cfg := bench.OvercommitConfig{Duration: time.Duration(pick(quick, 1, 3)) * time.Second, Mode: mode, Stop: br.in.flag()}
			return reportedOf(benchOvercommit(br, cfg, true, ""))
		}},
		{"incast", bench.PaperDVCM, [2]float64{12, 195}, func(br *benchRun, quick bool) (reported, error) {
			sizes, runs := "1k,4k,8k,16k", 3
			if quick {
				sizes, runs = "1k,16k", 1
			}
			c, err := incastFlags("1,2,3,7", sizes, "100mbit", "16k")
			if err != nil {
				return nil, err
			}
			c.Runs, c.Mode, c.Stop = runs, mode, br.in.flag()
			if quick {
				c.Bytes = 2 << 20
			}
			return reportedOf(benchIncast(br, c, true, ""))
		}},
		{"grim", bench.PaperGRIM, [2]float64{8, 30}, func(br *benchRun, quick bool) (reported, error) {
			return reportedOf(benchGRIM(br, bench.GRIMConfig{Count: pick(quick, 500, 5000), Bulk: int64(pick(quick, 2<<20, 16<<20)), Mode: mode, Stop: br.in.flag()}, true, ""))
		}},
	}
}

// reportedOf returns r as reported: a nil interface, not a nil pointer in
// one, when the experiment measured nothing.
func reportedOf[R any, P interface {
	*R
	reported
}](r P, err error) (reported, error) {
	if r == nil {
		return nil, err
	}
	return r, err
}

// runBenchAll runs every experiment of the four papers, each on labs of
// its own, and writes the report into --out: report.md, report.json and
// the plots. A failed experiment says why in its section and the run goes
// on; the exit status then says that something failed. A signal stops the
// run after the measurement in progress; the report holds what was
// measured.
func runBenchAll(e *env, f benchFlags) error {
	for name := range f.set {
		switch name {
		case "quick", "json", "out", "mode":
		default:
			return usageError("--%s: not with all (its iterations are fixed; --quick makes them fewer)", name)
		}
	}
	m, err := loader.ParseMode(*f.mode)
	if err != nil {
		return usageError("--mode: %v", err)
	}
	dir := *f.out
	if dir == "" {
		dir = defaultReportDir
	}
	if err := needPrivileges("xam bench"); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	quick := *f.quick
	in := watchInterrupts(e, "the report of what was measured follows once the measurement in progress ends")
	in.grace = benchGrace
	defer in.release()
	cmd := "xam bench all"
	if quick {
		cmd += " --quick"
	}
	rep := &bench.Report{Command: cmd, Started: time.Now(), Quick: quick, Setup: bench.Setup{
		Kernel: netdev.Probe().Kernel, CPUs: runtime.NumCPU(),
		Lab: "veth labs in network namespaces (two hosts; eight through a Linux bridge for permutations and incast)",
	}}
	exps := allExperiments(m)
	sections := map[string]*bench.Section{}
	entries := make([]*bench.Experiment, len(exps))
	for i, x := range exps {
		s := sections[x.paper.Paper]
		if s == nil {
			s = bench.NewSection(x.paper)
			sections[x.paper.Paper] = s
			rep.Sections = append(rep.Sections, s)
		}
		entries[i] = s.Add(bench.NewExperiment(x.name))
	}
	// The report is written once: at the end, or by the signal watcher if
	// the run does not end within the grace time.
	var mu sync.Mutex
	var written []string
	var writeErr error
	write := func() error {
		mu.Lock()
		defer mu.Unlock()
		if written == nil && writeErr == nil {
			rep.Seconds = time.Since(rep.Started).Round(time.Second).Seconds()
			rep.Interrupted = in.interrupted()
			written, writeErr = rep.WriteFiles(dir)
		}
		return writeErr
	}
	in.onExit(write)
	pl := newBenchProgress(e.stderr, exps, quick, *f.asJSON)
	br := newBenchRun(e, in)
	br.say = func(string, ...any) {}
	for i, x := range exps {
		if in.interrupted() {
			break
		}
		pl.start(i)
		br.progress = pl.what
		t0 := time.Now()
		r, err := x.run(br, quick)
		mu.Lock()
		ex := entries[i]
		if r != nil {
			ex.Result = r
			ex.Figures = r.Figures()
			var md strings.Builder
			if merr := r.Markdown(&md); merr == nil {
				ex.Details = md.String()
			}
			if err == nil {
				paths, perr := r.Plot(dir)
				for _, p := range paths {
					ex.Plots = append(ex.Plots, filepath.Base(p))
				}
				if perr != nil && !in.interrupted() { // an interrupted run may lack what a plot needs
					err = fmt.Errorf("plotting: %w", perr)
				}
			}
		}
		ex.Finish(time.Since(t0), in.interrupted(), err)
		mu.Unlock()
		pl.done(i, time.Since(t0))
	}
	pl.clear()
	if err := write(); err != nil {
		return err
	}
	if *f.asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "xam bench all: wrote %s and %d plots in %s (%s)\n", strings.Join(written, ", "), countPlots(rep), dir,
			time.Since(rep.Started).Round(time.Second))
	}
	if in.interrupted() {
		return fmt.Errorf("%w: the report holds what was measured", errInterrupted)
	}
	if rep.Failed > 0 {
		var names []string
		for _, s := range rep.Sections {
			for _, x := range s.Experiments {
				if x.Status == "failed" {
					names = append(names, x.Name)
				}
			}
		}
		return fmt.Errorf("bench all: %d experiment(s) failed (%s); the report says why", rep.Failed, strings.Join(names, ", "))
	}
	return nil
}

// countPlots counts the plot files of the report.
func countPlots(r *bench.Report) int {
	n := 0
	for _, s := range r.Sections {
		for _, x := range s.Experiments {
			n += len(x.Plots)
		}
	}
	return n
}

// benchProgress shows on the terminal which experiment runs (k of n), the
// time elapsed and an estimate of the time left: the estimates of the
// experiments still to run, scaled by how the finished ones compared with
// theirs. On a terminal it rewrites one line; elsewhere it prints a line
// per step. It is quiet when quiet.
type benchProgress struct {
	w       io.Writer
	tty     bool
	quiet   bool
	exps    []allExperiment
	est     []float64
	began   time.Time
	cur     int
	curT    time.Time
	doneEst float64 // estimates of the finished experiments
	doneAct float64 // and the seconds they took
	mu      sync.Mutex
}

func newBenchProgress(w io.Writer, exps []allExperiment, quick, quiet bool) *benchProgress {
	p := &benchProgress{w: w, quiet: quiet, exps: exps, began: time.Now()}
	for _, x := range exps {
		if quick {
			p.est = append(p.est, x.seconds[0])
		} else {
			p.est = append(p.est, x.seconds[1])
		}
	}
	if f, ok := w.(*os.File); ok {
		fi, err := f.Stat()
		p.tty = err == nil && fi.Mode()&os.ModeCharDevice != 0
	}
	return p
}

func (p *benchProgress) start(i int) {
	p.mu.Lock()
	p.cur, p.curT = i, time.Now()
	p.mu.Unlock()
	p.what("starting")
}

func (p *benchProgress) done(i int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.doneEst += p.est[i]
	p.doneAct += took.Seconds()
}

// left estimates the seconds left.
func (p *benchProgress) left() float64 {
	scale := 1.0
	if p.doneEst > 0 {
		scale = p.doneAct / p.doneEst
	}
	left := max(p.est[p.cur]*scale-time.Since(p.curT).Seconds(), 0)
	for _, e := range p.est[p.cur+1:] {
		left += e * scale
	}
	return left
}

// what shows what the current experiment measures now.
func (p *benchProgress) what(what string) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("xam bench all: %d/%d %s: %s · %s elapsed · about %s left", p.cur+1, len(p.exps), p.exps[p.cur].name, what,
		time.Since(p.began).Round(time.Second), (time.Duration(p.left()) * time.Second).Round(time.Second))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		return
	}
	fmt.Fprintln(p.w, line)
}

// clear ends the line on a terminal.
func (p *benchProgress) clear() {
	if p.tty && !p.quiet {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
