package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// benchmarks are the names `xam bench` knows; "all" runs the papers'
// experiments (benchmarks less engine and hostile) into a report.
var benchmarks = []string{"ssam", "logp", "amii", "permutations", "overcommit", "engine", "incast", "grim", "hostile"}

const benchUsage = "bench ssam|logp|amii|permutations|overcommit|engine|incast|grim|hostile|all [--quick] [--count N] [--bulk BYTES] [--clients N] [--flood N] [--senders LIST] [--sizes LIST] [--port-rate BPS] [--port-buffer BYTES] [--runs N] [--mode auto|generic|native] [--json] [--out DIR]"

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
	bulk                        *int64
	mode, out                   *string
	senders, sizes              *string
	portRate, portBuffer        *string
	asJSON, quick               *bool
	set                         map[string]bool // the flags given
}

// runBench runs the named benchmarks, each on a lab of its own, or with
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
		clients:    fs.Int("clients", 7, "logp: the most clients of the contention experiment"),
		flood:      fs.Int("flood", 100_000, "hostile: forged frames of the wire and on-path scenarios, and a twentieth as many connections of the other user (pings: --count/10)"),
		asJSON:     fs.Bool("json", false, "print the results as one JSON document (an object with a member per benchmark; with all, the report) instead of Markdown"),
		out:        fs.String("out", "", "write plots into this directory (all: the report too; default xam-report)"),
		quick:      fs.Bool("quick", false, "all: fewer iterations, the same experiments (a few minutes)"),
		senders:    fs.String("senders", "1,2,3,7", "incast: numbers of senders, e.g. 1,2,3,7"),
		sizes:      fs.String("sizes", "1k,4k,8k,16k", "incast: message sizes, e.g. 1k,4k,16k,64k"),
		portRate:   fs.String("port-rate", "100mbit", "incast: bits per second of each switch port (tbf), e.g. 100mbit, 1gbit"),
		portBuffer: fs.String("port-buffer", "16k", "incast: bytes each switch port queues (the tbf's limit)"),
		runs:       fs.Int("runs", 3, "incast: runs per point (the median is reported)"),
		set:        map[string]bool{},
	}
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	names = append(names, fs.Args()...)
	if len(names) == 0 {
		return usageError("name a benchmark: %s or all", strings.Join(benchmarks, ", "))
	}
	for _, n := range names {
		if n == "all" {
			if len(names) > 1 {
				return usageError("all runs every experiment: name no other benchmark beside it")
			}
			continue
		}
		if !slices.Contains(benchmarks, n) {
			return usageError("unknown benchmark %q (have: %s, all)", n, strings.Join(benchmarks, ", "))
		}
	}
	if names[0] == "all" {
		return runBenchAll(e, f)
	}
	if *f.quick {
		return usageError("--quick: only with all")
	}
	if *f.count < 1 {
		return usageError("--count %d: want at least 1", *f.count)
	}
	if *f.bulk < 1 {
		return usageError("--bulk %d: want at least 1 byte", *f.bulk)
	}
	if *f.clients < 1 || *f.clients > 64 {
		return usageError("--clients %d: want 1..64", *f.clients)
	}
	if *f.flood < 1 {
		return usageError("--flood %d: want at least 1", *f.flood)
	}
	icfg, err := incastFlags(*f.senders, *f.sizes, *f.portRate, *f.portBuffer)
	if err != nil {
		return err
	}
	if f.set["bulk"] {
		icfg.Bytes = *f.bulk // all senders' together, per measurement
	}
	if *f.runs < 1 || *f.runs > 100 {
		return usageError("--runs %d: want 1..100", *f.runs)
	}
	icfg.Runs = *f.runs
	m, err := loader.ParseMode(*f.mode)
	if err != nil {
		return usageError("--mode: %v", err)
	}
	plots := false
	for _, n := range names {
		plots = plots || (n != "engine" && n != "hostile")
		if n == "logp" && *f.count < 100 {
			return usageError("--count %d: logp needs at least 100", *f.count)
		}
	}
	if *f.out != "" && !plots {
		return usageError("--out: engine and hostile draw no plots")
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
	count, bulk, asJSON, out := *f.count, *f.bulk, *f.asJSON, *f.out
	results := map[string]any{}
	for _, n := range names {
		if in.interrupted() {
			break
		}
		var r any
		var err error
		switch n {
		case "ssam":
			r, err = benchSSAM(br, bench.SSAMTablesConfig{Count: count, Bulk: bulk, Mode: m, Stop: in.flag()}, asJSON, out)
		case "logp":
			r, err = benchLogP(br, bench.LogPConfig{Count: count, Clients: *f.clients, Mode: m, Stop: in.flag()}, asJSON, out)
		case "incast":
			icfg.Mode, icfg.Stop = m, in.flag()
			r, err = benchIncast(br, icfg, asJSON, out)
		case "engine":
			r, err = benchEngine(br, bench.EngineConfig{Count: count, Bulk: bulk, Mode: m, Stop: in.flag()}, asJSON)
		case "amii":
			ac := bench.AMIIBandwidthConfig{Messages: 10 * count, Mode: m, Stop: in.flag()}
			if f.set["bulk"] {
				ac.Bulk = bulk
			}
			r, err = benchAMII(br, ac, asJSON, out)
		case "permutations":
			pc := bench.PermutationsConfig{RTTs: min(count, 5000), Mode: m, Stop: in.flag()}
			r, err = benchPermutations(br, pc, asJSON, out)
		case "overcommit":
			r, err = benchOvercommit(br, bench.OvercommitConfig{Mode: m, Stop: in.flag()}, asJSON, out)
		case "grim":
			gc := bench.GRIMConfig{Count: min(count, 5000), Mode: m, Stop: in.flag()}
			if f.set["bulk"] {
				gc.Bulk = bulk
			}
			r, err = benchGRIM(br, gc, asJSON, out)
		case "hostile":
			r, err = benchHostile(br, bench.HostileConfig{Pings: max(count/10, 100), Flood: *f.flood}, asJSON)
		}
		if err != nil {
			return err
		}
		results[n] = r
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	}
	if in.interrupted() {
		return fmt.Errorf("%w: the results hold what was measured", errInterrupted)
	}
	return nil
}

// plotInto draws r's plots into out, if set, and says so.
func plotInto(br *benchRun, what string, r interface {
	Plot(string) ([]string, error)
}, out string) error {
	if out == "" {
		return nil
	}
	paths, err := r.Plot(out)
	if err != nil {
		return err
	}
	if len(paths) > 0 { // none when nothing was measured to draw
		br.say("xam bench %s: wrote %s", what, strings.Join(paths, ", "))
	}
	return nil
}

// benchGrace is how long a benchmark has, after a signal, to end the
// measurement in progress, print and remove its lab.
const benchGrace = 30 * time.Second

// withLab builds a two-host lab for benchmark what, runs f on it and
// removes it afterwards (also on failure, and on an interrupt).
func withLab(br *benchRun, what string, f func(l *lab.Lab, pa, pb datapath.Place) error) (err error) {
	return withLabConfig(br, what, lab.Config{Name: fmt.Sprintf("bench%d", os.Getpid())}, f)
}

// withLabConfig is withLab on a lab built with cfg.
func withLabConfig(br *benchRun, what string, cfg lab.Config, f func(l *lab.Lab, pa, pb datapath.Place) error) (err error) {
	name := cfg.Name
	l, err := lab.Up(cfg)
	if err != nil {
		return err
	}
	br.in.onExit(l.Down)
	defer func() {
		if derr := l.Down(); derr != nil && err == nil {
			err = fmt.Errorf("removing lab %s: %w", name, derr)
		}
	}()
	a, b := l.Hosts[0], l.Hosts[1]
	pa := datapath.OnHost(a)
	pb := datapath.OnHost(b)
	br.say("xam bench %s: lab %s: %s %v (%v) <-> %s %v (%v)", what, name, a.NS, a.MAC, a.Addr, b.NS, b.MAC, b.Addr)
	return f(l, pa, pb)
}

// benchHostile runs the hostile suite, and prints its table unless asJSON.
func benchHostile(br *benchRun, cfg bench.HostileConfig, asJSON bool) (r *bench.HostileResult, err error) {
	err = withLab(br, "hostile", func(_ *lab.Lab, pa, pb datapath.Place) error {
		if r, err = bench.RunHostile(pa, pb, cfg); err != nil || asJSON {
			return err
		}
		return r.Markdown(br.e.stdout)
	})
	return r, err
}

// incastBench is the incast benchmark's configuration from the command
// line: the experiment's, and the switch's port rate and buffer.
type incastBench struct {
	bench.IncastConfig
	rate   uint64
	buffer uint32
}

// incastFlags parses the incast flags.
func incastFlags(senders, sizes, rate, buffer string) (incastBench, error) {
	var c incastBench
	for part := range strings.SplitSeq(senders, ",") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > 15 {
			return c, usageError("--senders %q: want numbers 1..15, e.g. 1,2,3", senders)
		}
		c.Senders = append(c.Senders, n)
	}
	for part := range strings.SplitSeq(sizes, ",") {
		n, err := parseSize(part)
		if err != nil || n < 1 || n > 256<<10 {
			return c, usageError("--sizes %q: want sizes 1..256k, e.g. 1k,4k,64k", sizes)
		}
		c.Sizes = append(c.Sizes, int(n))
	}
	r, err := parseRate(rate)
	if err != nil || r < 1_000_000 || r > 100_000_000_000 {
		return c, usageError("--port-rate %q: want 1m..100g bits per second", rate)
	}
	b, err := parseSize(buffer)
	if err != nil || b < 4<<10 || b > 64<<20 {
		return c, usageError("--port-buffer %q: want 4k..64m bytes", buffer)
	}
	c.rate, c.buffer = r, uint32(b)
	c.LinkRate, c.PortBuffer = r, int(b)
	return c, nil
}

// benchIncast runs the incast experiment on a star lab built for it (the
// most senders plus a receiver, joined by a switch whose ports are
// shaped), prints its table unless asJSON, and plots it into out if set.
func benchIncast(br *benchRun, c incastBench, asJSON bool, out string) (r *bench.IncastResult, err error) {
	hosts := slices.Max(c.Senders) + 1
	cfg := lab.Config{Name: fmt.Sprintf("incast%d", os.Getpid()), Hosts: hosts, Switch: true, PortRate: c.rate, PortBuffer: c.buffer}
	err = withLabConfig(br, "incast", cfg, func(l *lab.Lab, _, _ datapath.Place) error {
		var places []datapath.Place
		var addrs []netip.Addr
		for _, h := range l.Hosts {
			places = append(places, datapath.OnHost(h))
			addrs = append(addrs, h.Addr.Addr())
		}
		rx := hosts - 1
		ic := c.IncastConfig
		ic.Progress = br.progress
		ic.Drops = func() (uint64, error) { return l.Switch.PortDrops(rx) }
		if r, err = bench.RunIncast(places[:rx], places[rx], addrs[:rx], addrs[rx], ic); err != nil {
			return err
		}
		if err := plotInto(br, "incast", r, out); err != nil {
			return err
		}
		if asJSON {
			return nil
		}
		fmt.Fprintf(br.e.stdout, "Switch ports shaped to %d bit/s, %d bytes of buffer each.\n\n", c.rate, c.buffer)
		return r.Markdown(br.e.stdout)
	})
	return r, err
}

// benchEngine measures the firmware engine's rates, round trips and bulk
// goodput beside their peers, on two labs: one of the default MTU, and
// one of bench.BulkMTU for the bulk runs; it prints the tables as Markdown
// unless asJSON.
func benchEngine(br *benchRun, cfg bench.EngineConfig, asJSON bool) (r *bench.EngineResult, err error) {
	cfg.Progress = br.progress
	err = withLab(br, "engine", func(_ *lab.Lab, pa, pb datapath.Place) error {
		bcfg := lab.Config{Name: fmt.Sprintf("bulk%d", os.Getpid()), MTU: bench.BulkMTU}
		return withLabConfig(br, "engine (bulk)", bcfg, func(bl *lab.Lab, ba, bb datapath.Place) error {
			r, err = bench.RunEngine(pa, pb, ba, bb, bl.Hosts[0].Addr.Addr(), bl.Hosts[1].Addr.Addr(), cfg)
			if err != nil || asJSON {
				return err
			}
			return r.Markdown(br.e.stdout)
		})
	})
	return r, err
}

// benchAMII measures AM-II's bandwidth against message size on a lab of
// MTU bench.BulkMTU, with UCX beside it, and prints it as Markdown unless
// asJSON; with out, it draws the plot there.
func benchAMII(br *benchRun, cfg bench.AMIIBandwidthConfig, asJSON bool, out string) (r *bench.AMIIBandwidth, err error) {
	cfg.Progress = br.progress
	lc := lab.Config{Name: fmt.Sprintf("amii%d", os.Getpid()), MTU: bench.BulkMTU}
	err = withLabConfig(br, "amii", lc, func(l *lab.Lab, pa, pb datapath.Place) error {
		if r, err = bench.RunAMIIBandwidth(pa, pb, l.Hosts[0].Addr.Addr(), l.Hosts[1].Addr.Addr(), cfg); err != nil {
			return err
		}
		if !r.Interrupted {
			br.progress("UCX active messages over TCP (ucx_perftest -t ucp_am_bw)")
			r.UCX = runUCX(pa, pb, l.Hosts[1].Addr.Addr(), "ucp_am_bw", 64<<10, max(int(cfg.Bulk>>16), 100))
		}
		return report(br, "amii", r, asJSON, out)
	})
	return r, err
}

// runUCX runs a UCX peer; a failure is the peer's note, not the
// experiment's.
func runUCX(a, b datapath.Place, bAddr netip.Addr, test string, size, iters int) *bench.UCXResult {
	u, err := bench.RunUCX(a, b, bAddr, test, size, iters)
	if err != nil {
		return &bench.UCXResult{Test: test, Size: size, Iters: iters, Missing: "failed: " + err.Error()}
	}
	return u
}

// report draws r's plots into out (if set) and prints its tables unless
// asJSON.
func report(br *benchRun, what string, r interface {
	Plot(string) ([]string, error)
	Markdown(io.Writer) error
}, asJSON bool, out string) error {
	if err := plotInto(br, what, r, out); err != nil {
		return err
	}
	if asJSON {
		return nil
	}
	return r.Markdown(br.e.stdout)
}

// benchPermutations runs AM-II's permutations on an 8-host star lab.
func benchPermutations(br *benchRun, cfg bench.PermutationsConfig, asJSON bool, out string) (r *bench.PermutationsResult, err error) {
	cfg.Progress = br.progress
	lc := lab.Config{Name: fmt.Sprintf("perm%d", os.Getpid()), Hosts: 8, Switch: true}
	err = withLabConfig(br, "permutations", lc, func(l *lab.Lab, _, _ datapath.Place) error {
		var places []datapath.Place
		for _, h := range l.Hosts {
			places = append(places, datapath.OnHost(h))
		}
		if r, err = bench.RunPermutations(places, cfg); err != nil {
			return err
		}
		return report(br, "permutations", r, asJSON, out)
	})
	return r, err
}

// benchOvercommit runs AM-II's overcommit experiment on a two-host lab.
func benchOvercommit(br *benchRun, cfg bench.OvercommitConfig, asJSON bool, out string) (r *bench.OvercommitResult, err error) {
	cfg.Progress = br.progress
	err = withLab(br, "overcommit", func(_ *lab.Lab, pa, pb datapath.Place) error {
		if r, err = bench.RunOvercommit(pa, pb, cfg); err != nil {
			return err
		}
		return report(br, "overcommit", r, asJSON, out)
	})
	return r, err
}

// benchGRIM measures GRIM's figures beside its peers on a lab and prints
// them as Markdown unless asJSON; with out, it draws the plots there.
func benchGRIM(br *benchRun, cfg bench.GRIMConfig, asJSON bool, out string) (r *bench.GRIMBench, err error) {
	cfg.Progress = br.progress
	err = withLab(br, "grim", func(l *lab.Lab, pa, pb datapath.Place) error {
		if r, err = bench.RunGRIM(pa, pb, l.Hosts[0].Addr.Addr(), l.Hosts[1].Addr.Addr(), cfg); err != nil {
			return err
		}
		return report(br, "grim", r, asJSON, out)
	})
	return r, err
}

// benchLogP measures AM-II's LogP table and the contention experiment,
// with UCX's round trip beside them, and prints them as Markdown unless
// asJSON; with out, it draws the contention plot there.
func benchLogP(br *benchRun, cfg bench.LogPConfig, asJSON bool, out string) (r *bench.LogPResult, err error) {
	err = withLab(br, "logp", func(l *lab.Lab, pa, pb datapath.Place) error {
		if r, err = bench.RunLogP(pa, pb, cfg); err != nil {
			return err
		}
		if !r.Interrupted {
			br.progress("UCX active messages over TCP (ucx_perftest -t ucp_am_lat)")
			r.UCX = runUCX(pa, pb, l.Hosts[1].Addr.Addr(), "ucp_am_lat", 8, max(cfg.Count, 1000))
		}
		return report(br, "logp", r, asJSON, out)
	})
	return r, err
}

// benchSSAM measures SSAM's tables on a two-host lab built for the run, and
// prints them as Markdown unless asJSON.
func benchSSAM(br *benchRun, cfg bench.SSAMTablesConfig, asJSON bool, out string) (t *bench.SSAMTables, err error) {
	err = withLab(br, "ssam", func(l *lab.Lab, pa, pb datapath.Place) error {
		a, b := l.Hosts[0], l.Hosts[1]
		cfg.Progress = br.progress
		if t, err = bench.RunSSAMTables(pa, pb, a.Addr.Addr(), b.Addr.Addr(), cfg); err != nil {
			return err
		}
		t.Setup = bench.Setup{
			Kernel: netdev.Probe().Kernel,
			CPUs:   runtime.NumCPU(),
			Lab:    "a 2-host veth lab (network namespaces " + a.NS + ", " + b.NS + ")",
		}
		return report(br, "ssam", t, asJSON, out)
	})
	return t, err
}
