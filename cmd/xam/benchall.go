package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// defaultReportDir is where `xam bench all` writes without --out.
const defaultReportDir = "xam-report"

// reportSpecs are the experiments of the report: those with a paper, in
// the table's order.
func reportSpecs() []bench.Spec {
	var specs []bench.Spec
	for _, sp := range bench.Specs() {
		if sp.Paper != nil {
			specs = append(specs, sp)
		}
	}
	return specs
}

// maxReportRuns bounds --runs with all.
const maxReportRuns = 20

// runBenchAll runs every experiment of the four papers, each on labs of
// its own, --runs times in a row, and writes the report into --out:
// report.md, report.json and the plots. A failed experiment says why in
// its section and the run goes on; the exit status then says that
// something failed. A signal stops the run after the measurement in
// progress; the report holds what was measured.
func runBenchAll(e *env, f benchFlags) error {
	for name := range f.set {
		switch name {
		case "quick", "json", "out", "mode", "runs", "job", "dev", "hostfile", "rank", "zerocopy":
		default:
			return usageError("--%s: not with all (its iterations are fixed; --quick makes them fewer)", name)
		}
	}
	m, err := loader.ParseMode(*f.mode)
	if err != nil {
		return usageError("--mode: %v", err)
	}
	if err := f.setZeroCopy(); err != nil {
		return err
	}
	runs := *f.runs
	if runs < bench.MinRuns || runs > maxReportRuns {
		return usageError("--runs %d: a report takes %d..%d runs of each experiment (the median of fewer says nothing of the spread)", runs, bench.MinRuns, maxReportRuns)
	}
	dir := cmp.Or(*f.out, defaultReportDir)
	for _, name := range []string{"dev", "hostfile", "rank"} {
		if f.set[name] && !*f.job {
			return usageError("--%s: with --job only (alone, the experiments build their labs)", name)
		}
	}
	if f.set["hostfile"] != f.set["rank"] {
		return usageError("--hostfile and --rank go together")
	}
	if err := needPrivileges("xam bench"); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if *f.job {
		return runBenchJob(e, f, m, runs, dir)
	}
	quick := *f.quick
	in := watchInterrupts(e, "the report of what was measured follows once the measurement in progress ends")
	in.grace = benchGrace
	defer in.release()
	specs := reportSpecs()
	rep, entries := newReport(specs, quick, runs)
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
			xsk := datapath.XSKInUse()
			rep.Setup.XSK = &xsk
			written, writeErr = rep.WriteFiles(dir)
		}
		return writeErr
	}
	in.onExit(write)
	pl := newBenchProgress(e.stderr, specs, quick, *f.asJSON, runs)
	br := newBenchRun(e, in)
	br.say = func(string, ...any) {}
	// Each experiment's runs measure its peers beside it, so that runs
	// alternate the paths compared; the incast points are measured once
	// per run, the runs giving the spread.
	p := bench.Params{RunOptions: bench.RunOptions{Mode: m, Progress: pl.what, Stop: in.flag(), Exe: xamExe()}, Quick: quick, Incast: bench.IncastParams{Runs: 1}}
	for i, sp := range specs {
		if in.interrupted() {
			break
		}
		pl.start(i)
		t0 := time.Now()
		rs, err := runSpec(br, sp, p, runs, pl.run)
		mu.Lock()
		record(entries[i], rs, err, dir, time.Since(t0), in.interrupted())
		mu.Unlock()
		pl.done(i, time.Since(t0))
	}
	pl.clear()
	if err := write(); err != nil {
		return err
	}
	return finishReport(e, rep, written, dir, *f.asJSON, in.interrupted())
}

// newReport returns the report of specs, every experiment not run yet,
// and its entries in specs' order.
func newReport(specs []bench.Spec, quick bool, runs int) (*bench.Report, []*bench.Experiment) {
	cmd := "xam bench all"
	if quick {
		cmd += " --quick"
	}
	if runs != bench.MinRuns {
		cmd += fmt.Sprintf(" --runs %d", runs)
	}
	rep := &bench.Report{Command: cmd, Started: time.Now(), Quick: quick, Runs: runs, Setup: bench.Setup{
		Kernel: netdev.Probe().Kernel, CPUs: runtime.NumCPU(),
		Lab:    "veth labs in network namespaces (two hosts; eight through a Linux bridge for permutations and incast)",
		Device: labDevice(),
	}}
	sections := map[string]*bench.Section{}
	entries := make([]*bench.Experiment, len(specs))
	for i, sp := range specs {
		s := sections[sp.Paper.Paper]
		if s == nil {
			s = bench.NewSection(*sp.Paper)
			sections[sp.Paper.Paper] = s
			rep.Sections = append(rep.Sections, s)
		}
		entries[i] = s.Add(bench.NewExperiment(sp.Name))
	}
	return rep, entries
}

// record puts what an experiment's runs returned into its entry: their
// figures, tables and plots (drawn into dir unless a run failed), and its
// status.
func record(ex *bench.Experiment, results []bench.Result, err error, dir string, took time.Duration, interrupted bool) {
	var runs []bench.Reported
	for _, r := range results {
		if rr, ok := r.(bench.Reported); ok {
			runs = append(runs, rr)
		}
	}
	// An interrupted run may lack what a plot needs.
	if perr := ex.Record(runs, dir, err != nil); perr != nil && err == nil && !interrupted {
		err = fmt.Errorf("plotting: %w", perr)
	}
	ex.Finish(took, interrupted, err)
}

// finishReport prints the report (asJSON) or where it went, and returns
// what the exit status says: interrupted, failed experiments, or nil.
func finishReport(e *env, rep *bench.Report, written []string, dir string, asJSON, interrupted bool) error {
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.stdout, "xam bench all: wrote %s and %d plots in %s (%s)\n", strings.Join(written, ", "), countPlots(rep), dir,
			time.Since(rep.Started).Round(time.Second))
	}
	if interrupted {
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

// benchProgress shows on the terminal which experiment runs (k of n), its
// run (r of runs), the time elapsed and an estimate of the time left: the estimates of the
// experiments still to run, scaled by how the finished ones compared with
// theirs. On a terminal it rewrites one line; elsewhere it prints a line
// per step. It is quiet when quiet.
type benchProgress struct {
	w       io.Writer
	tty     bool
	quiet   bool
	specs   []bench.Spec
	est     []float64 // seconds of each experiment, all its runs
	runs    int
	curRun  int
	began   time.Time
	cur     int
	curT    time.Time
	doneEst float64 // estimates of the finished experiments
	doneAct float64 // and the seconds they took
	mu      sync.Mutex
}

func newBenchProgress(w io.Writer, specs []bench.Spec, quick, quiet bool, runs int) *benchProgress {
	p := &benchProgress{w: w, quiet: quiet, specs: specs, began: time.Now(), runs: runs}
	for _, sp := range specs {
		if quick {
			p.est = append(p.est, sp.Seconds[0]*float64(runs))
		} else {
			p.est = append(p.est, sp.Seconds[1]*float64(runs))
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
	p.cur, p.curT, p.curRun = i, time.Now(), 0
	p.mu.Unlock()
	p.what("building its labs")
}

// run says that run k (from 0) of the current experiment begins.
func (p *benchProgress) run(k int) {
	p.mu.Lock()
	p.curRun = k
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
	line := fmt.Sprintf("xam bench all: %d/%d %s, run %d/%d: %s · %s elapsed · about %s left", p.cur+1, len(p.specs), p.specs[p.cur].Name, p.curRun+1, p.runs, what,
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

// labDevice returns what xam doctor says of a lab host's device, read on
// a lab built for the purpose; nil if that fails.
func labDevice() *netdev.Device {
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("probe%d", os.Getpid()), Hosts: 2})
	if err != nil {
		return nil
	}
	defer l.Down()
	h := l.Hosts[0]
	var d *netdev.Device
	if err := h.Do(func() (err error) { d, err = netdev.Describe(h.Link); return err }); err != nil {
		return nil
	}
	return d
}
