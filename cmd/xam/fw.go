package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"os/user"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/units"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	_ "github.com/xam-project/xam/nicfw/coord" // a built-in module: registers --module coord and its flags
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/daemon/metrics"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/mapper"
	"github.com/xam-project/xam/nicfw/transport"
)

// sleepConfig is the daemon's Config.Sleep for a --sleep or --fw-sleep
// flag, whose 0 means busy-polling.
func sleepConfig(d time.Duration) time.Duration {
	if d == 0 {
		return daemon.BusyPoll
	}
	return d
}

// ackDelayConfig is --ack-delay as transport.Config.AckDelay: 0 there
// would be the daemon's default, so 0 here is the least delay there is,
// the end of the next Poll.
func ackDelayConfig(d time.Duration) time.Duration {
	if d == 0 {
		return time.Nanosecond
	}
	return d
}

// replyAckDelayConfig is --reply-ack-delay as
// transport.Config.AckSoonDelay: 0 there would be the daemon's default,
// so 0 here is negative there (the next Poll).
func replyAckDelayConfig(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// parseCores parses a CPU list such as "2,3" or "2-5".
func parseCores(s string) ([]int, error) {
	var cores []int
	if s == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		bad := fmt.Errorf("%q: want CPU numbers 0..1023, e.g. 2 or 2,3 or 2-3", part)
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, bad
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, bad
			}
		}
		if a < 0 || b < a || b >= 1024 {
			return nil, bad
		}
		for c := a; c <= b; c++ {
			cores = append(cores, c)
		}
	}
	return cores, nil
}

// fwConfig is `xam fw`'s command line: the daemon's settings as given,
// then (resolve) as the daemon takes them.
type fwConfig struct {
	dev, ns       string // the device, and the network namespace it is in
	encapFlag     string
	encap         datapath.Encap
	hostIPs       []netip.Addr // the peers given as --host ID=IP
	id            int
	hosts         hostFlags
	coreList      string
	socket        string
	sleep         time.Duration
	resident      int
	channels      int
	window        int
	giveUp        time.Duration
	retransmit    time.Duration
	ackDelay      time.Duration
	replyAckDelay time.Duration
	xdpMode       string
	zeroCopy      string
	queueList     string // --queues, as given
	queues        []int
	busyPoll      time.Duration
	tuneNAPI      bool
	steer         bool
	timestamps    bool
	queue         int
	useMap        bool
	follow        bool
	job           bool   // --job: the peers from the Slurm step (fwjob.go)
	hostfile      string // --hostfile: the peers from a hostfile's job, as --rank
	rank          int
	probe         time.Duration
	verbose       bool
	maxEndpoints  int
	maxConns      int
	maxConnsTotal int
	userMemory    string
	metrics       string          // --metrics: the address to serve Prometheus metrics at
	modules       string          // --module, comma-separated
	moduleFlags   *moduleFlags    // the registered modules and their flags
	given         map[string]bool // the names of the flags set on the command line

	// What resolve makes of the flags.
	mods     []fwModule
	memQuota uint64
	cores    []int
	mode     loader.Mode
}

// runFw runs `xam fw`: the firmware daemon, or its stats and grant
// subcommands. The daemon's flags are parsed and checked, modules and all,
// before it needs privileges or its device.
func runFw(e *env, args []string) error {
	if len(args) > 0 && args[0] == "stats" {
		return runFwStats(e, args[1:])
	}
	if len(args) > 0 && args[0] == "grant" {
		return runFwGrant(e, args[1:])
	}
	c, err := parseFw(e, args)
	if err != nil {
		return err
	}
	if err := c.checkHosts(); err != nil {
		return err
	}
	if err := c.checkLimits(); err != nil {
		return err
	}
	if err := c.resolve(); err != nil {
		return err
	}
	// SIGINT and SIGTERM end the daemon without an error, from here on:
	// a daemon of a job may be stopped while it joins.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var j *cluster.Job
	if c.inJob() {
		if j, err = c.joinJob(ctx); err != nil {
			return unlessStopped(ctx, err)
		}
	}
	if err := needPrivileges("xam fw"); err != nil {
		return c.failJob(j, err)
	}
	return unlessStopped(ctx, serveFw(ctx, e, c, j))
}

// unlessStopped returns err, or nil once ctx, the daemon's life, has ended:
// a signal stopped it.
func unlessStopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// fwUsage is `xam fw`'s usage. The line of the modules comes from the
// registry (nicfw.RegisterModule), as their flags do.
func fwUsage(kinds []nicfw.ModuleKind) string {
	return "fw --dev IF [--netns NS] (--id N --host ID=MAC... | --map [--map-follow] | --job | --hostfile FILE --rank N) [--cores LIST] [--socket PATH] [--sleep D] [--retransmit D]\n" +
		"       [--zerocopy auto|require|off] [--xdp-mode auto|generic|native] [--queue N | --queues LIST] [--busy-poll D] [--tune-napi]\n" +
		"       [--metrics ADDR]  (Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9464)\n" +
		moduleUsage(kinds) +
		"       xam fw stats [--socket PATH] [--json]\n       xam fw grant --tag T (--uid U | --gid G) [--revoke] [--socket PATH]"
}

// parseFw parses `xam fw`'s command line, the registered modules' flags
// included.
func parseFw(e *env, args []string) (*fwConfig, error) {
	c := &fwConfig{hosts: hostFlags{}, given: map[string]bool{}}
	kinds := nicfw.ModuleKinds()
	fs := newFlags(e, "fw", fwUsage(kinds))
	fs.StringVar(&c.dev, "dev", "", "the device whose AF_XDP queue the engine owns")
	fs.StringVar(&c.ns, "netns", "", "the named network namespace the device is in")
	fs.IntVar(&c.id, "id", -1, "this host's id in the host table (0..65535, as the mapper numbers them)")
	fs.Var(hostFlag{c}, "host", "a peer host: ID=MAC, or with --encap udp ID=IP (repeat for each peer)")
	fs.StringVar(&c.encapFlag, "encap", "raw", "the frames' form: raw (Ethernet frames of xam's EtherType, one LAN) or udp[:PORT] / udp6[:PORT] (xam's UDP form over IPv4 / IPv6, which crosses routers; every host of the job on the same port; peers given as --host ID=IP)")
	fs.StringVar(&c.coreList, "cores", "", "CPUs the engine thread runs on, e.g. 2 or 2,3 or 2-3 (default: any)")
	fs.StringVar(&c.socket, "socket", "/run/xam/fw.sock", "the unix socket applications connect to")
	fs.DurationVar(&c.sleep, "sleep", daemon.DefaultSleep, "without work the engine polls on, yielding the CPU, and blocks in poll(2) after this long (0: busy-poll, never yield or block: give it --cores of its own)")
	fs.IntVar(&c.resident, "resident", nicfw.DefaultResident, "endpoints resident in the engine at once (R)")
	fs.IntVar(&c.channels, "channels", transport.DefaultChannels, "logical channels per peer host (C)")
	fs.IntVar(&c.window, "window", 1, "messages of one endpoint in flight at once to each destination endpoint (above 1: in order per channel only)")
	fs.DurationVar(&c.giveUp, "give-up", transport.DefaultGiveUpAfter, "how long to retry before a host is unreachable")
	fs.DurationVar(&c.replyAckDelay, "reply-ack-delay", daemon.DefaultReplyAckDelay, "how long the acknowledgement of a reply waits for the application's next request to that host to carry it before it leaves in a frame of its own (0: at the next poll; at most --ack-delay)")
	fs.DurationVar(&c.ackDelay, "ack-delay", daemon.DefaultAckDelay, "how long the acknowledgement of a request to an endpoint that answers every request (AM-II's) waits for the reply to carry it before it leaves in a frame of its own; replies wait --reply-ack-delay, other messages are acknowledged at the next poll (0: at the next poll too; negative: every frame at once)")
	fs.DurationVar(&c.retransmit, "retransmit", transport.DefaultRetransmitAfter, "how long a message waits for its acknowledgement before it is sent again")
	fs.StringVar(&c.xdpMode, "xdp-mode", "auto", "XDP attach mode: auto, generic or native")
	fs.StringVar(&c.zeroCopy, "zerocopy", "auto", "AF_XDP socket: auto (zero-copy where the driver has it, else copy mode, said by xam fw stats), require (zero-copy or fail) or off (copy mode)")
	fs.IntVar(&c.queue, "queue", 0, "the device queue to own")
	fs.DurationVar(&c.busyPoll, "busy-poll", afxdp.DefaultBusyPoll, "preferred busy polling of the AF_XDP socket: the time a recvfrom polls the device's queue (SO_BUSY_POLL with SO_PREFER_BUSY_POLL; 0: off); it takes effect on devices whose queues have a NAPI instance (not veth)")
	fs.BoolVar(&c.timestamps, "timestamps", false, "load the device-bound XDP program (native mode) that puts the NIC's receive stamp in front of each frame, and have the engine count them: xam fw stats shows how many frames the NIC stamped and the mean time from its stamp to the engine (Linux 6.3 and later; one queue, raw frames)")
	fs.BoolVar(&c.steer, "steer", false, "install an n-tuple rule on the device that steers xam's frames (its EtherType, or with --encap udp its UDP port) to --queue, and remove it on exit: for NICs that spread frames over queues (ethtool -N; a veth takes none)")
	fs.BoolVar(&c.tuneNAPI, "tune-napi", false, "set the device's napi_defer_hard_irqs and gro_flush_timeout for preferred busy polling while the daemon runs, and restore them on exit (needs sysfs of the device's namespace: ip netns exec)")
	fs.StringVar(&c.queueList, "queues", "", "own several device queues, e.g. 0-3 or 0,2: a socket on each (one UMEM), so that frames the NIC spreads over them all arrive (instead of --queue)")
	fs.BoolVar(&c.useMap, "map", false, "find the hosts with the mapper protocol instead of --id and --host")
	fs.BoolVar(&c.job, "job", false, "run as a step of a Slurm job, one task per node (srun --ntasks-per-node=1 --mpi=pmi2): learn this host's id and the peers from the job, instead of --id and --host; the socket defaults to /run/xam/job-$SLURM_JOB_ID.sock")
	fs.StringVar(&c.hostfile, "hostfile", "", "learn this host's id and the peers from a hostfile's job (docs/cluster.md), as --rank, instead of --id and --host; --dev defaults to the rank's device there")
	fs.IntVar(&c.rank, "rank", -1, "with --hostfile: this daemon's rank in the file")
	fs.BoolVar(&c.follow, "map-follow", false, "with --map: never lead (adopt the leader's tables only)")
	fs.DurationVar(&c.probe, "probe", time.Second, "with --map: the mapper's probe interval")
	fs.BoolVar(&c.verbose, "v", false, "log connections, endpoints and host tables")
	fs.IntVar(&c.maxEndpoints, "max-endpoints", daemon.DefaultMaxPerUser, "endpoints one user (uid) may have open")
	fs.IntVar(&c.maxConns, "max-conns", daemon.DefaultMaxConnsPerUser, "connections one user may have open")
	fs.IntVar(&c.maxConnsTotal, "max-conns-total", daemon.DefaultMaxConns, "connections all users together may have open")
	fs.StringVar(&c.userMemory, "user-memory", "1g", "endpoint memory one user's endpoints may take together (e.g. 256m, 1g)")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics: HOST:PORT or :PORT, e.g. 127.0.0.1:9464 (port 0: any free port, announced)")
	fs.StringVar(&c.modules, "module", "", moduleHelp(kinds))
	c.moduleFlags = declareModules(fs, kinds)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { c.given[f.Name] = true })
	return c, nil
}

// checkHosts checks how the daemon is told its hosts: given (--id and
// --host) or found by the mapper (--map), never both.
func (c *fwConfig) checkHosts() error {
	var err error
	if c.encap, err = datapath.ParseEncap(c.encapFlag); err != nil {
		return usageError("%v", err)
	}
	switch {
	case c.encap.UDP && c.useMap:
		return usageError("--map finds hosts on one LAN by broadcast; with --encap %s give the peers with --host ID=IP", c.encap)
	case !c.encap.UDP && len(c.hostIPs) > 0:
		return usageError("--host ID=IP needs --encap udp (or udp6): raw frames go to MACs")
	case c.encap.UDP && len(c.hostIPs) != len(c.hosts):
		return usageError("with --encap %s give every peer as --host ID=IP", c.encap)
	case c.encap.IPv6 && (c.job || c.given["hostfile"]):
		return usageError("--encap udp6 with a job: not built (a job's cards carry IPv4 addresses of the UDP form only)")
	}
	for _, ip := range c.hostIPs {
		if ip.Is4() == c.encap.IPv6 {
			return usageError("--host %v: --encap %s takes addresses of the other family", ip, c.encap)
		}
	}
	if c.job || c.given["hostfile"] || c.given["rank"] {
		return c.checkJob()
	}
	switch {
	case c.dev == "":
		return usageError("--dev is required")
	case c.useMap && len(c.hosts) > 0:
		return usageError("--map finds the hosts: no --host")
	case c.useMap && c.given["id"]:
		return usageError("--map assigns this host's id: no --id")
	case c.useMap && c.probe <= 0:
		return usageError("--probe must be positive")
	case !c.useMap && c.follow:
		return usageError("--map-follow needs --map")
	case c.useMap:
	case c.id < 0 || c.id > 65535:
		return usageError("--id N (0..65535) is required, or --map")
	case len(c.hosts) == 0:
		return usageError("give the peers with --host ID=MAC, or --map")
	}
	if c.useMap {
		c.id = 0 // the mapper assigns it
	}
	if _, self := c.hosts[nicfw.HostID(c.id)]; self {
		return usageError("--host %d is this host (--id)", c.id)
	}
	return nil
}

// checkLimits checks the engine's and the daemon's sizes, counts and
// times.
func (c *fwConfig) checkLimits() error {
	switch {
	case c.resident < 1:
		return usageError("--resident %d: want at least 1", c.resident)
	case c.channels < 1 || c.channels > 255:
		return usageError("--channels %d: want 1..255", c.channels)
	case c.window < 1:
		return usageError("--window %d: want at least 1", c.window)
	case c.giveUp <= 0:
		return usageError("--give-up %v: want a positive duration", c.giveUp)
	case c.retransmit <= 0 || c.retransmit >= c.giveUp:
		return usageError("--retransmit %v: want a positive duration below --give-up (%v)", c.retransmit, c.giveUp)
	case c.ackDelay >= c.retransmit:
		return usageError("--ack-delay %v: want less than --retransmit (%v)", c.ackDelay, c.retransmit)
	case c.replyAckDelay < 0:
		return usageError("--reply-ack-delay %v: want 0 (at the next poll) or a positive duration", c.replyAckDelay)
	case c.sleep < 0:
		return usageError("--sleep %v: want 0 (busy-poll) or a positive duration", c.sleep)
	case c.queue < 0:
		return usageError("--queue %d: want 0 or more", c.queue)
	case c.maxEndpoints < 1:
		return usageError("--max-endpoints %d: want at least 1", c.maxEndpoints)
	case c.maxConns < 1:
		return usageError("--max-conns %d: want at least 1", c.maxConns)
	case c.maxConnsTotal < 1:
		return usageError("--max-conns-total %d: want at least 1", c.maxConnsTotal)
	}
	return nil
}

// resolve builds the modules and reads the flags that need parsing: the
// memory quota, the cores and the XDP mode. Like the checks, it runs
// before the daemon needs its device or privileges.
func (c *fwConfig) resolve() error {
	var err error
	if c.mods, err = c.moduleFlags.load(c.modules); err != nil {
		return err
	}
	c.memQuota, err = units.ParseSize(c.userMemory)
	if err != nil || c.memQuota < 1<<20 || c.memQuota > 1<<40 {
		return usageError("--user-memory %q: want a size from 1m to 1024g", c.userMemory)
	}
	if c.cores, err = parseCores(c.coreList); err != nil {
		return usageError("--cores: %v", err)
	}
	if c.queues, err = parseCores(c.queueList); err != nil {
		return usageError("--queues: %v", strings.Replace(err.Error(), "CPU numbers", "queue numbers", 1))
	}
	if len(c.queues) > 0 && c.given["queue"] {
		return usageError("--queue and --queues: give one")
	}
	if c.mode, err = loader.ParseMode(c.xdpMode); err != nil {
		return usageError("--xdp-mode: %v", err)
	}
	zc, err := datapath.ParseZeroCopy(c.zeroCopy)
	if err != nil {
		return usageError("%v", err)
	}
	datapath.SetZeroCopy(zc)
	switch {
	case c.busyPoll < 0:
		return usageError("--busy-poll %v: want 0 (off) or a positive time", c.busyPoll)
	case c.busyPoll == 0:
		datapath.SetBusyPoll(-1)
	default:
		datapath.SetBusyPoll(c.busyPoll)
	}
	if c.timestamps && (len(c.queues) > 0 || c.encap.UDP) {
		return usageError("--timestamps takes one --queue and raw frames (no --queues, no --encap)")
	}
	if c.steer && len(c.queues) > 0 {
		return usageError("--steer steers to the one --queue; with --queues the frames may land on any of them")
	}
	if c.tuneNAPI && c.busyPoll == 0 {
		return usageError("--tune-napi is for preferred busy polling, which --busy-poll 0 turns off")
	}
	if c.metrics != "" {
		return checkMetricsAddr(c.metrics)
	}
	return nil
}

// daemonConfig returns the daemon's configuration, its log on e's stderr.
func (c *fwConfig) daemonConfig(e *env) daemon.Config {
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelInfo
	}
	cfg := daemon.Config{
		Engine: nicfw.EngineConfig{Host: nicfw.HostID(c.id), Resident: c.resident, Window: c.window, Modules: engineModules(c.mods),
			Transport: transport.Config{Channels: c.channels, GiveUpAfter: c.giveUp, RetransmitAfter: c.retransmit, AckDelay: ackDelayConfig(c.ackDelay), AckSoonDelay: replyAckDelayConfig(c.replyAckDelay)}},
		Hosts: c.hosts, Socket: c.socket, Cores: c.cores, Sleep: sleepConfig(c.sleep),
		MaxPerUser: c.maxEndpoints, MaxConnsPerUser: c.maxConns, MaxConns: c.maxConnsTotal, UserMemory: int64(c.memQuota),
		Log: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})),
	}
	if c.useMap {
		cfg.Map = &mapper.Config{ProbeInterval: c.probe, Queue: c.queue, Privileged: !c.follow}
	}
	return cfg
}

// serveFw opens the device and runs the daemon until ctx ends (SIGINT or
// SIGTERM). With --metrics it listens first, so that a busy address
// leaves nothing behind, and serves the metrics while the daemon runs. In
// a job (j not nil) it learns its hosts from the other daemons once its
// device is open.
func serveFw(ctx context.Context, e *env, c *fwConfig, j *cluster.Job) error {
	var ln net.Listener
	if c.metrics != "" {
		var err error
		if ln, err = listenMetrics(c.metrics); err != nil {
			return c.failJob(j, err)
		}
		defer ln.Close()
	}
	here, err := devicePlace(c.dev, c.ns)
	if err != nil {
		return c.failJob(j, err)
	}
	here.Encap = c.encap
	undo, err := c.tuneDevice(e, here)
	if err != nil {
		return c.failJob(j, err)
	}
	defer undo()
	var raw *datapath.Endpoint
	if len(c.queues) > 0 {
		raw, err = datapath.OpenQueues(here, c.mode, c.queues)
	} else {
		mode, cfg := c.mode, loader.Config{DstMAC: here.MAC}
		if c.timestamps {
			// The metadata program is bound to its device, in native mode.
			mode, cfg.RxMetadata, cfg.Ifindex = loader.ModeNative, true, here.Ifindex
		}
		raw, err = datapath.OpenConfig(here, mode, c.queue, cfg)
	}
	if err != nil {
		return c.failJob(j, err)
	}
	defer raw.Close()
	if err := os.MkdirAll(dirOf(c.socket), 0o755); err != nil {
		return c.failJob(j, err)
	}
	if raw.UDP != nil {
		// The next hops toward the peers, looked up now rather than at
		// the first frames (which would be lost, and sent again).
		for _, ip := range c.hostIPs {
			if _, err := raw.UDP.Resolve(ip); err != nil {
				fmt.Fprintf(e.stderr, "xam fw: %v (frames to it wait until the kernel knows its next hop)\n", err)
			}
		}
	}
	if j != nil {
		if err := c.exchangeHosts(ctx, e, j, raw.MAC); err != nil {
			return err
		}
	}
	var d *daemon.Daemon
	var srv *http.Server
	if ln != nil {
		// The server is built before the daemon, so that nothing is left
		// to undo if it cannot be, and serves once the daemon is made.
		stats := func() (daemon.Stats, error) { return d.Stats() }
		if srv, err = metricsServer(metrics.Sources{Stats: stats, XDP: raw.Prog.Counters, Socket: raw.Link().(afxdp.Statser).Stats}, e.stderr); err != nil {
			return err
		}
	}
	dcfg := c.daemonConfig(e)
	dcfg.CopyWhy = datapath.XSKInUse().Why
	dcfg.Engine.Transport.RxStamps = c.timestamps
	d, err = daemon.New(raw.Link(), dcfg)
	if err != nil {
		return err
	}
	c.announce(e, raw.MAC)
	if raw.UDP != nil {
		u := raw.UDP.Config()
		fmt.Fprintf(e.stderr, "xam fw: xam's UDP form (--encap %s) from %v\n", c.encap, netip.AddrPortFrom(u.Local, u.Port))
	}
	x := datapath.XSKInUse()
	where := fmt.Sprintf("socket on %s queue %d", c.dev, c.queue)
	if len(c.queues) > 0 {
		where = fmt.Sprintf("sockets on %s queues %v (one UMEM)", c.dev, c.queues)
	}
	fmt.Fprintf(e.stderr, "xam fw: AF_XDP %s in %s mode (--zerocopy %s)%s\n", where, x.Mode, x.Policy, whyText(x.Why))
	if j != nil {
		c.announceJob(e, j)
	}
	if srv != nil {
		go srv.Serve(ln) // returns http.ErrServerClosed once closed
		defer srv.Close()
		fmt.Fprintf(e.stderr, "xam fw: metrics at http://%s/metrics\n", ln.Addr())
	}
	return d.Run(ctx)
}

// announce says on stderr what the daemon serves, and what each module is
// set to do.
func (c *fwConfig) announce(e *env, mac net.HardwareAddr) {
	if c.useMap {
		fmt.Fprintf(e.stderr, "xam fw: mapper on %s (%s), socket %s, cores %v\n", c.dev, mac, c.socket, c.cores)
	} else {
		fmt.Fprintf(e.stderr, "xam fw: host %d on %s (%s), socket %s, cores %v\n", c.id, c.dev, mac, c.socket, c.cores)
	}
	for _, m := range c.mods {
		fmt.Fprintf(e.stderr, "xam fw: module %s\n", m.describe())
	}
}

// devicePlace finds device dev, in namespace ns if given.
func devicePlace(dev, ns string) (datapath.Place, error) {
	if ns == "" {
		link, err := netlink.LinkByName(dev)
		if err != nil {
			return datapath.Place{}, fmt.Errorf("device %s: %w", dev, err)
		}
		return datapath.Here(link.Attrs().Index, link.Attrs().HardwareAddr), nil
	}
	n, err := lab.OpenNamespace(ns)
	if err != nil {
		return datapath.Place{}, err
	}
	var link netlink.Link
	if err := n.Do(func() (err error) { link, err = netlink.LinkByName(dev); return err }); err != nil {
		n.Close()
		return datapath.Place{}, fmt.Errorf("device %s in %s: %w", dev, ns, err)
	}
	// The namespace stays open for the life of the command.
	return datapath.Place{Ifindex: link.Attrs().Index, MAC: link.Attrs().HardwareAddr, Do: n.Do, Dev: dev, Netns: ns}, nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i]
	}
	return "."
}

// runFwStats asks a running daemon for its host table, endpoints and
// counters.
func runFwStats(e *env, args []string) error {
	fs := newFlags(e, "fw stats", "fw stats [--socket PATH] [--json]")
	socket := fs.String("socket", "/run/xam/fw.sock", "the daemon's unix socket")
	asJSON := fs.Bool("json", false, "print the statistics as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := daemon.Dial(*socket)
	if err != nil {
		return fmt.Errorf("%w (is `xam fw` running with --socket %s?)", err, *socket)
	}
	defer c.Close()
	s, err := c.Stats()
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	w := e.stdout
	epoch := "static"
	if s.Epoch != 0 {
		epoch = fmt.Sprintf("mapper epoch %d", s.Epoch)
	}
	if l := s.Link; l != nil {
		printLink(w, l)
	}
	fmt.Fprintf(w, "hosts (%s):\n", epoch)
	for _, h := range s.Hosts {
		fmt.Fprintf(w, "  %d  %s\n", h.ID, h.MAC)
	}
	fmt.Fprintf(w, "endpoints: %d open, %d connections, %d requests refused\n", s.Endpoints, s.Connections, s.Refused)
	for _, ep := range s.List {
		q := ep.Queues
		tag := "tag hidden" // another user's: the daemon shows it only to its owner and root
		if ep.Tag != 0 {
			tag = fmt.Sprintf("tag %#x", ep.Tag)
		}
		fmt.Fprintf(w, "  %d  %s, %d table entries: %d taken, %d put, %d put into a full queue\n",
			ep.ID, tag, ep.Table, q.Taken, q.Put, q.PutFull)
		for r, n := range q.Refused {
			if n > 0 {
				fmt.Fprintf(w, "      %d descriptors refused: %s\n", n, strings.TrimPrefix(endpoint.Refusal(r).Error(), "nicfw: descriptor refused: "))
			}
		}
	}
	if len(s.Networks) > 0 {
		fmt.Fprintln(w, "virtual networks (yours, or all for root):")
	}
	for _, n := range s.Networks {
		fmt.Fprintf(w, "  tag %#x: %d endpoints, made by uid %d; open to its groups %v", n.Tag, n.Endpoints, n.Creator, n.Groups)
		if len(n.UIDs) > 0 {
			fmt.Fprintf(w, ", uids %v", n.UIDs)
		}
		if len(n.GIDs) > 0 {
			fmt.Fprintf(w, ", gids %v", n.GIDs)
		}
		fmt.Fprintln(w)
	}
	printCounters(w, "engine", s.Engine)
	printCounters(w, "transport", s.Transport)
	if t := s.Transport; t.RxMeta > 0 {
		lag := "no NIC stamp (a veth never stamps)"
		if t.RxStamped > 0 {
			lag = fmt.Sprintf("%d stamped by the NIC, its stamp to the engine %v on average (the receive path's time where phc2sys keeps the NIC's clock on the system's)",
				t.RxStamped, time.Duration(t.RxStampLagNs/t.RxStamped))
		}
		fmt.Fprintf(w, "receive stamps (--timestamps): %d frames with xam's receive metadata, %s\n", t.RxMeta, lag)
	}
	for _, p := range s.Peers {
		printCounters(w, fmt.Sprintf("peer host %d", p.Host), p.Transport)
		for r := range p.ReturnsSent {
			if p.ReturnsSent[r]+p.Returned[r] > 0 {
				fmt.Fprintf(w, "  returned: %d of its messages to it, %d of ours from it: %v\n", p.ReturnsSent[r], p.Returned[r], endpoint.Reason(r))
			}
		}
	}
	printCounters(w, "residency", s.Residency)
	for _, m := range s.Modules {
		var cs []counterCell
		for _, c := range m.Counters {
			cs = append(cs, counterCell{c.Name, c.Value})
		}
		printCells(w, fmt.Sprintf("module %s (id %d)", m.Name, m.ID), cs)
	}
	if s.Backplane != nil {
		printCounters(w, "modules' engine work", *s.Backplane)
	}
	fmt.Fprintf(w, "engine slept %d times\n", s.Sleeps)
	return nil
}

// runFwGrant lets a user or a group open endpoints of a virtual network
// the caller made on a running daemon (or, with --revoke, no longer).
func runFwGrant(e *env, args []string) error {
	fs := newFlags(e, "fw grant", "fw grant --tag T (--uid U | --gid G) [--revoke] [--socket PATH]")
	socket := fs.String("socket", "/run/xam/fw.sock", "the daemon's unix socket")
	tagFlag := fs.String("tag", "", "the virtual network's tag (0x... or decimal), one you made on this daemon")
	uidFlag := fs.String("uid", "", "the user to let in: a uid or a user name")
	gidFlag := fs.String("gid", "", "the group to let in: a gid or a group name")
	revoke := fs.Bool("revoke", false, "take the grant back (endpoints already open stay open)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tag, err := strconv.ParseUint(*tagFlag, 0, 64)
	if err != nil || tag == 0 {
		return usageError("--tag %q: want a virtual network's tag, e.g. 0x8f3a...", *tagFlag)
	}
	if (*uidFlag == "") == (*gidFlag == "") {
		return usageError("give --uid or --gid (one of them)")
	}
	req := daemon.GrantRequest{Tag: tag, Revoke: *revoke}
	if *uidFlag != "" {
		id, err := lookupID(*uidFlag, func(n string) (string, error) {
			u, err := user.Lookup(n)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		})
		if err != nil {
			return usageError("--uid %q: %v", *uidFlag, err)
		}
		req.UID = &id
	} else {
		id, err := lookupID(*gidFlag, func(n string) (string, error) {
			g, err := user.LookupGroup(n)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		})
		if err != nil {
			return usageError("--gid %q: %v", *gidFlag, err)
		}
		req.GID = &id
	}
	c, err := daemon.Dial(*socket)
	if err != nil {
		return fmt.Errorf("%w (is `xam fw` running with --socket %s?)", err, *socket)
	}
	defer c.Close()
	return c.Grant(req)
}

// lookupID returns s as a number, or the id that lookup finds for the name s.
func lookupID(s string, lookup func(string) (string, error)) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), nil
	}
	id, err := lookup(s)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(id, 10, 32)
	return uint32(n), err
}

// counterCell is one counter of a table: its name and value.
type counterCell struct {
	name  string
	value int64
}

// printCounters prints the numeric fields of the struct v as a table a
// person reads: a title, then the counters in three columns, names in
// words (PoolFull: pool full), those at 0 summed up in one line.
func printCounters(w io.Writer, title string, v any) {
	rv := reflect.ValueOf(v)
	var cs []counterCell
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		switch x := rv.Field(i); x.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			cs = append(cs, counterCell{words(f.Name), x.Int()})
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			cs = append(cs, counterCell{words(f.Name), int64(min(x.Uint(), math.MaxInt64))})
		}
	}
	printCells(w, title, cs)
}

// printCells prints cells under title: those not 0 in three aligned
// columns, and how many are 0.
func printCells(w io.Writer, title string, cs []counterCell) {
	fmt.Fprintf(w, "%s:\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	zero, col := 0, 0
	for _, c := range cs {
		if c.value == 0 {
			zero++
			continue
		}
		fmt.Fprintf(tw, "  %s\t %d\t", c.name, c.value)
		if col++; col == 3 {
			fmt.Fprintln(tw)
			col = 0
		}
	}
	if col != 0 {
		fmt.Fprintln(tw)
	}
	tw.Flush()
	if zero > 0 {
		fmt.Fprintf(w, "  (%d more at 0)\n", zero)
	}
}

// words spells a Go field name in lower-case words: PoolFull is "pool
// full", RTTMax "rtt max", AcksPiggybacked "acks piggybacked".
func words(name string) string {
	var b strings.Builder
	rs := []rune(name)
	for i, r := range rs {
		upper := unicode.IsUpper(r)
		if i > 0 && upper && (!unicode.IsUpper(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
