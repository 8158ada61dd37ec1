package bench

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// The experiments, in one table: what `xam bench NAME` runs, what
// `xam bench all` puts in its report (those with a paper), and what the
// report says of each. Adding an experiment is adding a Spec here.

// RunOptions are what every experiment's run takes besides its own
// figures: the XDP attach mode, where to say what is measured next, and
// a flag that ends the run before its next measurement (a signal).
type RunOptions struct {
	Mode     loader.Mode
	Progress func(what string)
	Stop     *atomic.Bool
	// Exe is the xam program, whose `xam fw` the experiments that measure
	// firmware mode as deployed run as a process per host; empty: they
	// measure it in this process only.
	Exe string
}

// Params are an experiment's parameters from the command line (`xam
// bench`'s flags); zero fields take each experiment's defaults.
type Params struct {
	RunOptions
	// Quick: fewer iterations, the same experiments (`xam bench all
	// --quick`): each Spec's quick configuration.
	Quick bool
	// Count is the round trips per path and calls timed per cost
	// (default 20000); the experiments that measure otherwise derive
	// theirs from it.
	Count int
	// Bulk is the bytes of each bandwidth run (0: each experiment's
	// default).
	Bulk    int64
	Clients int // logp: the most clients (default 7)
	Flood   int // hostile: forged frames (default 100000)
	// Dup is the fraction of xam frames the lab's switch delivers twice
	// (hostile; its lab then has a switch).
	Dup float64
	// Incast is the incast experiment's points and switch.
	Incast IncastParams
}

// IncastParams are the incast experiment's points and its switch's ports.
type IncastParams struct {
	Senders    []int  // numbers of senders (default 1, 2, 3, 7)
	Sizes      []int  // message sizes (default 1, 4, 8 and 16 KB)
	PortRate   uint64 // bits per second of each switch port (default 100 Mbit/s)
	PortBuffer int    // bytes each port queues (default 16 KB)
	Runs       int    // runs per point (default 3)
}

// count returns p.Count, or its default.
func (p Params) count() int { return cmp.Or(p.Count, 20000) }

// pick returns quick in a quick run, full otherwise.
func pick[T any](p Params, quick, full T) T {
	if p.Quick {
		return quick
	}
	return full
}

// Result is what an experiment's run returns: its tables, as its Markdown
// and its JSON (the value itself). Those of the report's experiments also
// give their figures (Figures) and draw plots (PlotRuns).
type Result interface {
	Markdown(w io.Writer) error
}

// Reported is the result of an experiment of the report: its figures
// of one run, and the charts it draws (PlotRuns).
type Reported interface {
	Result
	Figures() []Figure
	charts() []chart
}

// Spec is one experiment.
type Spec struct {
	Name string // as `xam bench NAME` runs it
	// Paper is the paper it reproduces, whose section of `xam bench
	// all`'s report holds it; nil for one the report leaves out.
	Paper *Section
	// Title, Measured (what the paper measured) and Differs (what differs
	// today, and why): what the report says of it.
	Title, Measured, Differs string
	// Seconds estimates how long one run takes, quick and full, in the
	// report (its labs built once), for the report's estimate of the time
	// left.
	Seconds [2]float64
	// Plots says whether its result draws plots.
	Plots bool
	// Labs are the labs it runs on, built in this order for Run; each
	// Name is a prefix, to which the caller adds what makes it unique
	// (its process id).
	Labs func(p Params) []lab.Config
	// Run runs it on the labs built.
	Run func(labs []*lab.Lab, p Params) (Result, error)
}

// twoHosts is the lab of most experiments: two hosts, a veth pair.
func twoHosts(Params) []lab.Config { return []lab.Config{{Name: "bench", Hosts: 2}} }

// hostsOf returns the places and addresses of l's hosts.
func hostsOf(l *lab.Lab) ([]datapath.Place, []netip.Addr) {
	var places []datapath.Place
	var addrs []netip.Addr
	for _, h := range l.Hosts {
		places = append(places, datapath.OnHost(h))
		addrs = append(addrs, h.Addr.Addr())
	}
	return places, addrs
}

// resultOf returns r as a Result: a nil interface, not a nil pointer in
// one, when the experiment measured nothing.
func resultOf[R any, P interface {
	*R
	Result
}](r P, err error) (Result, error) {
	if r == nil {
		return nil, err
	}
	return r, err
}

// Specs returns the experiments, the report's first, in the report's
// order.
func Specs() []Spec {
	return []Spec{
		{Name: "ssam", Paper: &PaperSSAMSection, Seconds: [2]float64{1, 6}, Plots: true,
			Title:    "Cost tables, round trip and bulk bandwidth",
			Measured: "the costs of the kernel traps (write a cell, read cells, write-then-read) beside the read/write system-call path, the costs of the Active Messages layer (send request, handle request, reply, ack), about 20 µs application-to-application round trips for small messages and about 5.5 MB/s bulk, between two SPARCstations with no switch.",
			Differs:  "the trap is AF_XDP's sendto/recvfrom on a veth in copy mode (generic XDP): a send runs the peer's XDP and receive copy inside the same system call, so send costs hold what was wire time on the ATM card, and the wire is memory, so bandwidth is bounded by copies and CPUs, not by a 140 Mbit/s fiber.",
			Labs:     twoHosts, Run: runSSAMSpec},
		{Name: "logp", Paper: &PaperAMII, Seconds: [2]float64{4, 6}, Plots: true,
			Title:    "LogP, the cost of reliability and protection, n clients to one server",
			Measured: "the LogP parameters (Os, Or, g, L, RTT) of short messages, the increments of reliability and of protection over a baseline, and 1..7 clients against one server endpoint (aggregate and per-client rate, round trip growing by g per client); 42 µs round trip.",
			Differs:  "the firmware is a Go engine on a host CPU (here inline, in the application's thread), not a LANai; on veth the sender's sendto runs the receiver's kernel path, so L cannot be separated from Os (it is reported inside Os), and the clients share the machine's CPUs with the server.",
			Labs:     twoHosts, Run: runLogPSpec},
		{Name: "amii", Paper: &PaperAMII, Seconds: [2]float64{2, 3}, Plots: true,
			Title:    "Bandwidth against message size",
			Measured: "node-to-node bandwidth against message size (short, medium and bulk messages), 31 MB/s peak over the SBus and Myrinet.",
			Differs:  "xam's frames are at most a 4 KB UMEM chunk (MTU 3826) that the kernel copies on veth, while kernel TCP moves 64 KB GSO segments with no per-frame cost: TCP is the ceiling on this machine, not a like-for-like peer; UCX runs its active messages over the same TCP.",
			Labs:     func(Params) []lab.Config { return []lab.Config{{Name: "amii", Hosts: 2, MTU: bulkMTU}} }, Run: runAMIISpec},
		{Name: "permutations", Paper: &PaperAMII, Seconds: [2]float64{3, 10}, Plots: true,
			Title:    "Permutations on eight hosts",
			Measured: "circular shift, neighbour exchange and bisection exchange among the hosts of a cluster (average and aggregate bandwidth with medium messages, round trip with one-word messages): bandwidth near the peak for the first two, the bisection pattern limited by the network's bisection cables.",
			Differs:  "the eight hosts are network namespaces on one machine joined by a Linux bridge: there is no bisection to saturate, and every host shares the machine's CPUs, so the aggregate is bounded by the CPUs, not by the links.",
			Labs:     func(Params) []lab.Config { return []lab.Config{{Name: "perm", Hosts: 8, Switch: true}} }, Run: runPermutationsSpec},
		{Name: "overcommit", Paper: &PaperAMII, Seconds: [2]float64{3, 11}, Plots: true,
			Title:    "Overcommitted endpoint frames",
			Measured: "many virtual networks, each a client endpoint and a server endpoint of its own, the server's NIC holding a few endpoint frames and faulting the rest in and out on demand, one server thread per endpoint blocking on its semaphore: the server's message rate degrades gracefully as the frames are overcommitted (8x and more).",
			Differs:  "the frames are the engine's resident set (R), and loading an endpoint maps host memory the daemon shares rather than copying it over the SBus, so a fault costs microseconds; server threads block on the daemon's eventfds.",
			Labs:     twoHosts, Run: runOvercommitSpec},
		{Name: "incast", Paper: &PaperDVCM, Seconds: [2]float64{11, 65}, Plots: true,
			Title:    "Incast: sender coordination with a token per link",
			Measured: "two and three senders to one receiver through an ATM switch: without coordination goodput collapses to nearly zero above about 600-byte messages; with a token per link, loss under 0.1% and a large fraction of the link; Early Token Release brings two senders close to one.",
			Differs:  "the switch is a Linux bridge whose ports are shaped by tbf (rate and buffer) in place of the ATM switch's port rate and cell buffers; the coordination module runs in the engine, as DVCM's ran on the NIC's coprocessor; kernel TCP's congestion control is the peer.",
			Labs:     incastLabs, Run: runIncastSpec},
		{Name: "grim", Paper: &PaperGRIM, Seconds: [2]float64{8, 30}, Plots: true,
			Title:    "Latency, injection, channels, gap, cut-through and a storage endpoint",
			Measured: "13 µs host-to-host round trip, about 1 µs injection, latency nearly flat for a few logical channels, a gap negligible for bursts under 200 messages and 20 µs past 1,000, 106 MB/s cut-through vs 74 MB/s store-and-forward, 21 µs to a remote I2O storage card.",
			Differs:  "the storage endpoint is a thread serving a file, not an i960 card; the copy into the payload region runs at memory speed, far faster than the send path, so cut-through has little to overlap here; firmware mode shares two CPUs between the engines and the applications.",
			Labs:     twoHosts, Run: runGRIMSpec},
		{Name: "engine", Title: "The firmware engine beside its peers: message rates, round trips and bulk goodput",
			Labs: func(Params) []lab.Config {
				ls := []lab.Config{{Name: "bench", Hosts: 2}}
				for _, mtu := range engineBulkMTUs() {
					ls = append(ls, lab.Config{Name: fmt.Sprintf("bulk%d", mtu), Hosts: 2, MTU: mtu})
				}
				return ls
			},
			Run: func(labs []*lab.Lab, p Params) (Result, error) {
				a, _ := hostsOf(labs[0])
				var links []bulkLink
				for i, mtu := range engineBulkMTUs() {
					b, addrs := hostsOf(labs[1+i])
					links = append(links, bulkLink{mtu, b[0], b[1], addrs[0], addrs[1]})
				}
				return resultOf(runEngine(a[0], a[1], links, engineConfig{Count: p.count(), Bulk: p.Bulk, RunOptions: p.RunOptions}))
			}},
		{Name: "hostile", Title: "Hostile input and faults against firmware mode, traffic running",
			Labs: func(p Params) []lab.Config { return []lab.Config{{Name: "bench", Hosts: 2, Switch: p.Dup > 0}} },
			Run:  runHostileSpec},
	}
}

// SpecOf returns the experiment named name.
func SpecOf(name string) (Spec, bool) {
	specs := Specs()
	i := slices.IndexFunc(specs, func(s Spec) bool { return s.Name == name })
	if i < 0 {
		return Spec{}, false
	}
	return specs[i], true
}

func runSSAMSpec(labs []*lab.Lab, p Params) (Result, error) {
	pl, addrs := hostsOf(labs[0])
	t, err := runSSAMTables(pl[0], pl[1], addrs[0], addrs[1], ssamTablesConfig{Count: pick(p, 1000, p.count()),
		Bulk: pick(p, 2<<20, p.Bulk), RunOptions: p.RunOptions})
	if t != nil {
		h := labs[0].Hosts
		t.Setup = Setup{Kernel: netdev.Probe().Kernel, CPUs: runtime.NumCPU(),
			Lab: "a 2-host veth lab (network namespaces " + h[0].NS + ", " + h[1].NS + ")"}
	}
	return resultOf(t, err)
}

func runLogPSpec(labs []*lab.Lab, p Params) (Result, error) {
	pl, addrs := hostsOf(labs[0])
	cfg := logpConfig{Count: pick(p, 1000, p.count()), Clients: p.Clients, RunOptions: p.RunOptions}
	r, err := runLogP(pl[0], pl[1], cfg)
	if err == nil && !r.Interrupted {
		p.say("UCX active messages over TCP (ucx_perftest -t ucp_am_lat)")
		r.UCX = ucxPeer(pl[0], pl[1], addrs[1], "ucp_am_lat", 8, max(cfg.Count, 1000))
	}
	return resultOf(r, err)
}

func runAMIISpec(labs []*lab.Lab, p Params) (Result, error) {
	pl, addrs := hostsOf(labs[0])
	cfg := amiiBandwidthConfig{Messages: pick(p, 10000, 10*p.count()), Bulk: pick(p, 2<<20, p.Bulk),
		RunOptions: p.RunOptions}
	r, err := runAMIIBandwidth(pl[0], pl[1], addrs[0], addrs[1], cfg)
	if err == nil && !r.Interrupted {
		p.say("UCX active messages over TCP (ucx_perftest -t ucp_am_bw)")
		r.UCX = ucxPeer(pl[0], pl[1], addrs[1], "ucp_am_bw", 64<<10, max(int(cmp.Or(cfg.Bulk, 32<<20)>>16), 100))
	}
	return resultOf(r, err)
}

func runPermutationsSpec(labs []*lab.Lab, p Params) (Result, error) {
	pl, _ := hostsOf(labs[0])
	return resultOf(runPermutations(pl, permutationsConfig{Duration: pick(p, 400*time.Millisecond, 0), RTTs: pick(p, 300, min(p.count(), 5000)),
		RunOptions: p.RunOptions}))
}

func runOvercommitSpec(labs []*lab.Lab, p Params) (Result, error) {
	pl, _ := hostsOf(labs[0])
	return resultOf(runOvercommit(pl[0], pl[1], overcommitConfig{Duration: pick(p, 400*time.Millisecond, 0),
		RunOptions: p.RunOptions}))
}

func runGRIMSpec(labs []*lab.Lab, p Params) (Result, error) {
	pl, addrs := hostsOf(labs[0])
	return resultOf(runGRIM(pl[0], pl[1], addrs[0], addrs[1], grimConfig{Count: pick(p, 500, min(p.count(), 5000)),
		Bulk: pick(p, 1<<20, p.Bulk), Light: p.Quick, RunOptions: p.RunOptions}))
}

// incastParams returns p's incast points and switch, defaults filled in,
// the quick ones in a quick run.
func incastParams(p Params) IncastParams {
	ip := p.Incast
	if len(ip.Senders) == 0 {
		ip.Senders = pick(p, []int{1, 3, 7}, []int{1, 2, 3, 7})
	}
	if len(ip.Sizes) == 0 {
		ip.Sizes = []int{1 << 10, 4 << 10, 8 << 10, 16 << 10}
	}
	ip.PortRate = cmp.Or(ip.PortRate, 100_000_000)
	ip.PortBuffer = cmp.Or(ip.PortBuffer, 16<<10)
	ip.Runs = cmp.Or(ip.Runs, 3)
	if p.Quick {
		ip.Sizes, ip.Runs = []int{1 << 10, 16 << 10}, 1
	}
	return ip
}

// incastLabs is the incast experiment's star: the most senders and a
// receiver, joined by a switch whose ports are shaped.
func incastLabs(p Params) []lab.Config {
	ip := incastParams(p)
	return []lab.Config{{Name: "incast", Hosts: slices.Max(ip.Senders) + 1, Switch: true, PortRate: ip.PortRate, PortBuffer: uint32(ip.PortBuffer)}}
}

func runIncastSpec(labs []*lab.Lab, p Params) (Result, error) {
	ip := incastParams(p)
	l := labs[0]
	pl, addrs := hostsOf(l)
	rx := len(pl) - 1
	cfg := incastConfig{Senders: ip.Senders, Sizes: ip.Sizes, Runs: ip.Runs, LinkRate: ip.PortRate, PortBuffer: ip.PortBuffer,
		Bytes: pick(p, int64(1<<20), p.Bulk), Latencies: pick(p, 50, 0), RunOptions: p.RunOptions,
		Drops: func() (uint64, error) { return l.Switch.PortDrops(rx) }}
	r, err := runIncast(pl[:rx], pl[rx], addrs[:rx], addrs[rx], cfg)
	if r != nil {
		r.PortRate, r.PortBuffer = ip.PortRate, ip.PortBuffer
	}
	return resultOf(r, err)
}

// say tells p's progress what is measured next, if it listens.
func (p Params) say(what string) {
	if p.Progress != nil {
		p.Progress(what)
	}
}

// ucxPeer runs a UCX peer; a failure is the peer's note, not the
// experiment's.
func ucxPeer(a, b datapath.Place, bAddr netip.Addr, test string, size, iters int) *ucxResult {
	u, err := runUCX(a, b, bAddr, test, size, iters)
	if err != nil {
		return &ucxResult{Test: test, Size: size, Iters: iters, Missing: "failed: " + err.Error()}
	}
	return u
}

// runHostileSpec runs the hostile suite, every frame of the lab delivered
// twice with probability p.Dup.
func runHostileSpec(labs []*lab.Lab, p Params) (Result, error) {
	var ds datapath.Duplicators
	if p.Dup > 0 {
		var err error
		if ds, err = datapath.Duplicate(labs[0], p.Dup, 0); err != nil {
			return nil, err
		}
		defer ds.Close()
	}
	a, _ := hostsOf(labs[0])
	r, err := runHostile(a[0], a[1], hostileConfig{Pings: max(p.count()/10, 100), Flood: p.Flood})
	if r != nil && ds != nil {
		r.Dup = p.Dup
		if c, cerr := ds.Counters(); cerr == nil {
			r.Duplicated = c.Duplicated
		}
	}
	return resultOf(r, err)
}
