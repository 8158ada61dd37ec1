package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/units"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// benchNames are the experiments `xam bench` knows (bench.Specs); "all"
// runs those of the papers (the specs with a paper) into a report.
func benchNames() []string {
	var names []string
	for _, sp := range bench.Specs() {
		names = append(names, sp.Name)
	}
	return names
}

const benchUsage = "bench ssam|logp|amii|permutations|overcommit|incast|grim|engine|hostile|all [--quick] [--count N] [--bulk BYTES] [--clients N] [--flood N] [--dup P] [--senders LIST] [--sizes LIST] [--port-rate BPS] [--port-buffer BYTES] [--runs N] [--mode auto|generic|native] [--job [--dev IF] [--hostfile FILE --rank N]] [--json] [--out DIR]"

// benchRun is what the benchmarks of one command share: the signals that
// stop them, and where they say what they do.
type benchRun struct {
	e  *env
	in *interrupts
	// say prints a line about the run (a lab built, files written).
	say func(format string, args ...any)
	// progress is told what is measured next.
	progress func(what string)
}

// newBenchRun returns a benchRun that prints its lines to e's stderr.
func newBenchRun(e *env, in *interrupts) *benchRun {
	return &benchRun{e: e, in: in,
		say:      func(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) },
		progress: func(what string) { fmt.Fprintf(e.stderr, "  measuring %s ...\n", what) },
	}
}

// benchFlags are the flags of `xam bench`.
type benchFlags struct {
	count, clients, flood, runs *int
	dup                         *float64
	bulk                        *int64
	mode, out                   *string
	senders, sizes              *string
	portRate, portBuffer        *string
	asJSON, quick, job          *bool
	dev, hostfile               *string
	rank                        *int
	zeroCopy                    *string
	set                         map[string]bool // the flags given
}

// runBench runs the named benchmarks, each on labs of its own, or with
// "all" the papers' experiments into a report.
func runBench(e *env, args []string) error {
	var names []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		names, args = append(names, args[0]), args[1:]
	}
	fs := newFlags(e, "bench", benchUsage)
	f := benchFlags{
		count:      fs.Int("count", 20000, "round trips per path, and calls timed per cost"),
		bulk:       fs.Int64("bulk", 64<<20, "bytes of each bandwidth run (SSAM bulk write, AM-II Stores, TCP stream, UDP blast)"),
		mode:       fs.String("mode", "auto", "XDP attach mode: auto (as xam doctor recommends), generic or native"),
		zeroCopy:   fs.String("zerocopy", "auto", "AF_XDP sockets: auto (zero-copy where the driver has it, else copy mode, said in the results), require (zero-copy or fail) or off (copy mode)"),
		clients:    fs.Int("clients", 7, "logp: the most clients of the contention experiment"),
		dup:        fs.Float64("dup", 0, "hostile: the fraction of xam frames delivered twice throughout, in [0, 1) (the lab gets a switch, whose ports copy them)"),
		flood:      fs.Int("flood", 100_000, "hostile: forged frames of the wire and on-path scenarios, and a twentieth as many connections of the other user (pings: --count/10)"),
		asJSON:     fs.Bool("json", false, "print the results as one JSON document (an object with a member per benchmark; with all, the report) instead of Markdown"),
		out:        fs.String("out", "", "write plots into this directory (all: the report too; default xam-report)"),
		quick:      fs.Bool("quick", false, "all: fewer iterations, the same experiments (a few minutes)"),
		senders:    fs.String("senders", "1,2,3,7", "incast: numbers of senders, e.g. 1,2,3,7"),
		sizes:      fs.String("sizes", "1k,4k,8k,16k", "incast: message sizes, e.g. 1k,4k,16k,64k"),
		portRate:   fs.String("port-rate", "100mbit", "incast: bits per second of each switch port (tbf), e.g. 100mbit, 1gbit"),
		portBuffer: fs.String("port-buffer", "16k", "incast: bytes each switch port queues (the tbf's limit)"),
		job:        fs.Bool("job", false, "all: run the experiments between the tasks of the job this process is one of (srun -N NODES --ntasks-per-node=1 --mpi=pmi2 xam bench all --job --dev IF), one task per node; rank 0 writes the report"),
		dev:        fs.String("dev", "", "all --job: the network device of every node (default: the hostfile's)"),
		hostfile:   fs.String("hostfile", "", "all --job: the job is the hostfile's (docs/cluster.md), not Slurm's; with --rank"),
		rank:       fs.Int("rank", -1, "all --job --hostfile: this process's rank in the hostfile"),
		runs:       fs.Int("runs", 3, "all: runs of each experiment, at least 3 (each figure the median of the runs, with their range); incast alone: runs per point"),
		set:        map[string]bool{},
	}
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	names = append(names, fs.Args()...)
	if err := checkBenchNames(names); err != nil {
		return err
	}
	if names[0] == "all" {
		return runBenchAll(e, f)
	}
	p, err := f.params(names)
	if err != nil {
		return err
	}
	if err := needPrivileges("xam bench"); err != nil {
		return err
	}
	if *f.out != "" {
		if err := os.MkdirAll(*f.out, 0o755); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	// A signal stops a benchmark before its next measurement: what was
	// measured is printed, and xam exits 130. A measurement in progress
	// finishes first (within the grace time; a second signal stops at once).
	in := watchInterrupts(e, "what was measured follows once the measurement in progress ends")
	in.grace = benchGrace
	defer in.release()
	br := newBenchRun(e, in)
	p.Stop, p.Progress = in.flag(), br.progress
	results := map[string]any{}
	for _, n := range names {
		if in.interrupted() {
			break
		}
		sp, _ := bench.SpecOf(n)
		rs, err := runSpec(br, sp, p, 1, nil)
		var r bench.Result
		if len(rs) > 0 {
			r = rs[0]
		}
		if r != nil {
			results[n] = r
			if perr := showResult(br, sp, r, *f.asJSON, *f.out); err == nil {
				err = perr
			}
		}
		if err != nil {
			return err
		}
	}
	xsk := datapath.XSKInUse()
	if *f.asJSON {
		results["xsk"] = xsk
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	} else if xsk.Mode != "" {
		fmt.Fprintf(e.stdout, "\nAF_XDP sockets: %s mode (--zerocopy %s)%s\n", xsk.Mode, xsk.Policy, whyText(xsk.Why))
	}
	if in.interrupted() {
		return fmt.Errorf("%w: the results hold what was measured", errInterrupted)
	}
	return nil
}

// checkBenchNames checks the names given to `xam bench`.
func checkBenchNames(names []string) error {
	known := benchNames()
	if len(names) == 0 {
		return usageError("name a benchmark: %s or all", strings.Join(known, ", "))
	}
	for _, n := range names {
		if n == "all" {
			if len(names) > 1 {
				return usageError("all runs every experiment: name no other benchmark beside it")
			}
			continue
		}
		if !slices.Contains(known, n) {
			return usageError("unknown benchmark %q (have: %s, all)", n, strings.Join(known, ", "))
		}
	}
	return nil
}

// params checks the flags of a run of the named benchmarks (not all) and
// returns the experiments' parameters.
func (f benchFlags) params(names []string) (bench.Params, error) {
	var p bench.Params
	switch {
	case *f.quick:
		return p, usageError("--quick: only with all")
	case f.set["job"] || f.set["dev"] || f.set["hostfile"] || f.set["rank"]:
		return p, usageError("--job, --dev, --hostfile and --rank: only with all (xam bench all --job)")
	case *f.count < 1:
		return p, usageError("--count %d: want at least 1", *f.count)
	case *f.bulk < 1:
		return p, usageError("--bulk %d: want at least 1 byte", *f.bulk)
	case *f.clients < 1 || *f.clients > 64:
		return p, usageError("--clients %d: want 1..64", *f.clients)
	case *f.flood < 1:
		return p, usageError("--flood %d: want at least 1", *f.flood)
	case *f.runs < 1 || *f.runs > 100:
		return p, usageError("--runs %d: want 1..100", *f.runs)
	case *f.dup < 0 || *f.dup >= 1:
		return p, usageError("--dup %v: want a fraction in [0, 1)", *f.dup)
	case f.set["dup"] && !slices.Contains(names, "hostile"):
		return p, usageError("--dup: only with hostile")
	}
	ip, err := incastFlags(*f.senders, *f.sizes, *f.portRate, *f.portBuffer)
	if err != nil {
		return p, err
	}
	ip.Runs = *f.runs
	m, err := loader.ParseMode(*f.mode)
	if err != nil {
		return p, usageError("--mode: %v", err)
	}
	if err := f.setZeroCopy(); err != nil {
		return p, err
	}
	plots := false
	for _, n := range names {
		sp, _ := bench.SpecOf(n)
		plots = plots || sp.Plots
		if n == "logp" && *f.count < 100 {
			return p, usageError("--count %d: logp needs at least 100", *f.count)
		}
	}
	if *f.out != "" && !plots {
		return p, usageError("--out: engine and hostile draw no plots")
	}
	p = bench.Params{RunOptions: bench.RunOptions{Mode: m, Exe: xamExe()}, Count: *f.count, Clients: *f.clients, Flood: *f.flood, Dup: *f.dup, Incast: ip}
	if f.set["bulk"] {
		p.Bulk = *f.bulk // else each experiment's own default
	}
	return p, nil
}

// runSpec runs experiment sp runs times in a row on labs built for it and
// removed after it (also on failure, and on an interrupt), telling each
// run's start (from 0) to begin if set. It returns the results of the
// runs that returned one, and the first error; a stop (p.Stop) ends it
// before its next run.
func runSpec(br *benchRun, sp bench.Spec, p bench.Params, runs int, begin func(k int)) ([]bench.Result, error) {
	var labs []*lab.Lab
	defer func() {
		for _, l := range slices.Backward(labs) {
			if err := l.Down(); err != nil {
				br.say("xam bench %s: removing lab %s: %v", sp.Name, l.Name, err)
			}
		}
	}()
	for _, cfg := range sp.Labs(p) {
		cfg.Name = fmt.Sprintf("%s%d", cfg.Name, os.Getpid())
		l, err := lab.Up(cfg)
		if err != nil {
			return nil, err
		}
		br.in.onExit(l.Down)
		labs = append(labs, l)
		a, b := l.Hosts[0], l.Hosts[1]
		br.say("xam bench %s: lab %s: %s %v (%v) <-> %s %v (%v)", sp.Name, cfg.Name, a.NS, a.MAC, a.Addr, b.NS, b.MAC, b.Addr)
	}
	var results []bench.Result
	for k := range runs {
		if k > 0 && p.Stop != nil && p.Stop.Load() {
			break
		}
		if begin != nil {
			begin(k)
		}
		r, err := sp.Run(labs, p)
		if r != nil {
			results = append(results, r)
		}
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

// showResult draws r's plots into out (if set) and prints its tables
// unless asJSON.
func showResult(br *benchRun, sp bench.Spec, r bench.Result, asJSON bool, out string) error {
	if rr, ok := r.(bench.Reported); ok && out != "" {
		paths, err := bench.PlotRuns(out, []bench.Reported{rr})
		if err != nil {
			return err
		}
		if len(paths) > 0 { // none when nothing was measured to draw
			br.say("xam bench %s: wrote %s", sp.Name, strings.Join(paths, ", "))
		}
	}
	if asJSON {
		return nil
	}
	return r.Markdown(br.e.stdout)
}

// benchGrace is how long a benchmark has, after a signal, to end the
// measurement in progress, print and remove its lab.
const benchGrace = 30 * time.Second

// incastFlags parses the incast flags.
func incastFlags(senders, sizes, rate, buffer string) (bench.IncastParams, error) {
	var c bench.IncastParams
	for part := range strings.SplitSeq(senders, ",") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > 15 {
			return c, usageError("--senders %q: want numbers 1..15, e.g. 1,2,3", senders)
		}
		c.Senders = append(c.Senders, n)
	}
	for part := range strings.SplitSeq(sizes, ",") {
		n, err := units.ParseSize(part)
		if err != nil || n < 1 || n > 256<<10 {
			return c, usageError("--sizes %q: want sizes 1..256k, e.g. 1k,4k,64k", sizes)
		}
		c.Sizes = append(c.Sizes, int(n))
	}
	r, err := units.ParseRate(rate)
	if err != nil || r < 1_000_000 || r > 100_000_000_000 {
		return c, usageError("--port-rate %q: want 1m..100g bits per second", rate)
	}
	b, err := units.ParseSize(buffer)
	if err != nil || b < 4<<10 || b > 64<<20 {
		return c, usageError("--port-buffer %q: want 4k..64m bytes", buffer)
	}
	c.PortRate, c.PortBuffer = r, int(b)
	return c, nil
}

// setZeroCopy sets the process's AF_XDP bind mode from --zerocopy.
func (f benchFlags) setZeroCopy() error {
	zc, err := datapath.ParseZeroCopy(*f.zeroCopy)
	if err != nil {
		return usageError("%v", err)
	}
	datapath.SetZeroCopy(zc)
	return nil
}

// whyText is why, the reason for copy mode, as the end of a sentence.
func whyText(why string) string {
	if why == "" {
		return ""
	}
	return ": " + why
}
