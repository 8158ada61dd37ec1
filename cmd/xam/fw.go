package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/coord"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/mapper"
	"github.com/xam-project/xam/nicfw/transport"
)

// hostFlags collects repeated --host ID=MAC flags.
type hostFlags map[nicfw.HostID]net.HardwareAddr

func (h hostFlags) String() string { return fmt.Sprint(map[nicfw.HostID]net.HardwareAddr(h)) }

func (h hostFlags) Set(s string) error {
	id, mac, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q: want ID=MAC", s)
	}
	n, err := strconv.ParseUint(id, 10, 16)
	if err != nil {
		return fmt.Errorf("%q: host id: %v", s, err)
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if _, dup := h[nicfw.HostID(n)]; dup {
		return fmt.Errorf("host %d given twice", n)
	}
	h[nicfw.HostID(n)] = hw
	return nil
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

func runFw(e *env, args []string) error {
	if len(args) > 0 && args[0] == "stats" {
		return runFwStats(e, args[1:])
	}
	if len(args) > 0 && args[0] == "grant" {
		return runFwGrant(e, args[1:])
	}
	a, err := parseFw(e, args)
	if err != nil {
		return err
	}
	mods, err := fwModules(a.modules, a.given, a.coord)
	if err != nil {
		return err
	}
	memQuota, err := parseSize(a.userMemory)
	if err != nil || memQuota < 1<<20 || memQuota > 1<<40 {
		return usageError("--user-memory %q: want a size from 1m to 1024g", a.userMemory)
	}
	cores, err := parseCores(a.coreList)
	if err != nil {
		return usageError("--cores: %v", err)
	}
	mode, err := loader.ParseMode(a.xdpMode)
	if err != nil {
		return usageError("--xdp-mode: %v", err)
	}
	if err := needPrivileges("xam fw"); err != nil {
		return err
	}
	here, err := devicePlace(a.dev, a.ns)
	if err != nil {
		return err
	}
	raw, err := datapath.Open(here, mode, a.queue)
	if err != nil {
		return err
	}
	defer raw.Close()
	if err := os.MkdirAll(dirOf(a.socket), 0o755); err != nil {
		return err
	}
	level := slog.LevelWarn
	if a.verbose {
		level = slog.LevelInfo
	}
	cfg := daemon.Config{
		Engine: nicfw.EngineConfig{Host: nicfw.HostID(a.id), Resident: a.resident, Window: a.window, Modules: mods,
			Transport: transport.Config{Channels: a.channels, GiveUpAfter: a.giveUp, RetransmitAfter: a.retransmit}},
		Hosts: a.hosts, Socket: a.socket, Cores: cores, Sleep: a.sleep,
		MaxPerUser: a.maxEndpoints, MaxConnsPerUser: a.maxConns, MaxConns: a.maxConnsTotal, UserMemory: int64(memQuota),
		Log: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})),
	}
	if a.useMap {
		cfg.Map = &mapper.Config{ProbeInterval: a.probe, Queue: a.queue, Privileged: !a.follow}
	}
	d, err := daemon.New(raw.Sock, cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if a.useMap {
		fmt.Fprintf(e.stderr, "xam fw: mapper on %s (%s), socket %s, cores %v\n", a.dev, here.MAC, a.socket, cores)
	} else {
		fmt.Fprintf(e.stderr, "xam fw: host %d on %s (%s), socket %s, cores %v\n", a.id, a.dev, here.MAC, a.socket, cores)
	}
	for _, m := range mods {
		fmt.Fprintf(e.stderr, "xam fw: module %s\n", describeModule(m))
	}
	err = d.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// fwArgs is what xam fw was asked: its flags, parsed and checked.
type fwArgs struct {
	dev, ns, coreList, socket, xdpMode, userMemory, modules string
	id, resident, channels, window, queue                   int
	maxEndpoints, maxConns, maxConnsTotal                   int
	hosts                                                   hostFlags
	sleep, giveUp, retransmit, probe                        time.Duration
	useMap, follow, verbose                                 bool
	coord                                                   coordFlags
	given                                                   map[string]bool // the flags given
}

// parseFw parses xam fw's flags and checks them.
func parseFw(e *env, args []string) (*fwArgs, error) {
	a := &fwArgs{hosts: hostFlags{}, given: map[string]bool{}}
	fs := newFlags(e, "fw", "fw --dev IF [--netns NS] (--id N --host ID=MAC... | --map [--map-follow]) [--cores LIST] [--socket PATH] [--sleep D] [--retransmit D]\n       [--module coord [--coord-threshold B] [--coord-early B] [--coord-link-rate RATE --coord-port-buffer B]]\n       xam fw stats [--socket PATH] [--json]\n       xam fw grant --tag T (--uid U | --gid G) [--revoke] [--socket PATH]")
	fs.StringVar(&a.dev, "dev", "", "the device whose AF_XDP queue the engine owns")
	fs.StringVar(&a.ns, "netns", "", "the named network namespace the device is in")
	fs.IntVar(&a.id, "id", -1, "this host's id in the host table (0..65535, as the mapper numbers them)")
	fs.Var(a.hosts, "host", "a peer host: ID=MAC (repeat for each peer)")
	fs.StringVar(&a.coreList, "cores", "", "CPUs the engine thread runs on, e.g. 2 or 2,3 or 2-3 (default: any)")
	fs.StringVar(&a.socket, "socket", "/run/xam/fw.sock", "the unix socket applications connect to")
	fs.DurationVar(&a.sleep, "sleep", 0, "sleep on an eventfd after this long without work (0: busy-poll)")
	fs.IntVar(&a.resident, "resident", nicfw.DefaultResident, "endpoints resident in the engine at once (R)")
	fs.IntVar(&a.channels, "channels", transport.DefaultChannels, "logical channels per peer host (C)")
	fs.IntVar(&a.window, "window", 1, "messages of one endpoint in flight at once (above 1: in order per channel only)")
	fs.DurationVar(&a.giveUp, "give-up", transport.DefaultGiveUpAfter, "how long to retry before a host is unreachable")
	fs.DurationVar(&a.retransmit, "retransmit", transport.DefaultRetransmitAfter, "how long a message waits for its acknowledgement before it is sent again")
	fs.StringVar(&a.xdpMode, "xdp-mode", "auto", "XDP attach mode: auto, generic or native")
	fs.IntVar(&a.queue, "queue", 0, "the device queue to own")
	fs.BoolVar(&a.useMap, "map", false, "find the hosts with the mapper protocol instead of --id and --host")
	fs.BoolVar(&a.follow, "map-follow", false, "with --map: never lead (adopt the leader's tables only)")
	fs.DurationVar(&a.probe, "probe", time.Second, "with --map: the mapper's probe interval")
	fs.BoolVar(&a.verbose, "v", false, "log connections, endpoints and host tables")
	fs.IntVar(&a.maxEndpoints, "max-endpoints", daemon.DefaultMaxPerUser, "endpoints one user (uid) may have open")
	fs.IntVar(&a.maxConns, "max-conns", daemon.DefaultMaxConnsPerUser, "connections one user may have open")
	fs.IntVar(&a.maxConnsTotal, "max-conns-total", daemon.DefaultMaxConns, "connections all users together may have open")
	fs.StringVar(&a.userMemory, "user-memory", "1g", "endpoint memory one user's endpoints may take together (e.g. 256m, 1g)")
	fs.StringVar(&a.modules, "module", "", "extension modules to load, comma-separated: coord (sender coordination)")
	fs.IntVar(&a.coord.threshold, "coord-threshold", coord.DefaultThreshold, "coord: messages of at most this many bytes are not coordinated")
	fs.IntVar(&a.coord.early, "coord-early", 0, "coord: pass the token on when this many bytes of the message are left (Early Token Release)")
	fs.StringVar(&a.coord.rate, "coord-link-rate", "", "coord: the switch ports' rate, e.g. 100mbit or 1gbit: a holder keeps the token until its message has crossed the port at that rate")
	fs.StringVar(&a.coord.buffer, "coord-port-buffer", "", "coord: the bytes a switch port queues, e.g. 16k: with --coord-link-rate, the holder paces its message to three quarters of it")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { a.given[f.Name] = true })
	if err := a.checkHosts(); err != nil {
		return nil, err
	}
	return a, a.checkLimits()
}

// checkHosts checks how the daemon finds its peers: --map, or --id and
// --host.
func (a *fwArgs) checkHosts() error {
	switch {
	case a.dev == "":
		return usageError("--dev is required")
	case a.useMap && len(a.hosts) > 0:
		return usageError("--map finds the hosts: no --host")
	case a.useMap && a.given["id"]:
		return usageError("--map assigns this host's id: no --id")
	case a.useMap && a.probe <= 0:
		return usageError("--probe must be positive")
	case !a.useMap && a.follow:
		return usageError("--map-follow needs --map")
	case a.useMap:
	case a.id < 0 || a.id > 65535:
		return usageError("--id N (0..65535) is required, or --map")
	case len(a.hosts) == 0:
		return usageError("give the peers with --host ID=MAC, or --map")
	}
	if a.useMap {
		a.id = 0 // the mapper assigns it
	}
	if _, self := a.hosts[nicfw.HostID(a.id)]; self {
		return usageError("--host %d is this host (--id)", a.id)
	}
	return nil
}

// checkLimits checks the engine's and the daemon's numbers.
func (a *fwArgs) checkLimits() error {
	switch {
	case a.resident < 1:
		return usageError("--resident %d: want at least 1", a.resident)
	case a.channels < 1 || a.channels > 255:
		return usageError("--channels %d: want 1..255", a.channels)
	case a.window < 1:
		return usageError("--window %d: want at least 1", a.window)
	case a.giveUp <= 0:
		return usageError("--give-up %v: want a positive duration", a.giveUp)
	case a.retransmit <= 0 || a.retransmit >= a.giveUp:
		return usageError("--retransmit %v: want a positive duration below --give-up (%v)", a.retransmit, a.giveUp)
	case a.sleep < 0:
		return usageError("--sleep %v: want 0 (busy-poll) or a positive duration", a.sleep)
	case a.queue < 0:
		return usageError("--queue %d: want 0 or more", a.queue)
	case a.maxEndpoints < 1:
		return usageError("--max-endpoints %d: want at least 1", a.maxEndpoints)
	case a.maxConns < 1:
		return usageError("--max-conns %d: want at least 1", a.maxConns)
	case a.maxConnsTotal < 1:
		return usageError("--max-conns-total %d: want at least 1", a.maxConnsTotal)
	}
	return nil
}

// coordFlags are the coordination module's flags of `xam fw`, as given.
type coordFlags struct {
	threshold, early int
	rate, buffer     string // --coord-link-rate, --coord-port-buffer
}

// fwModules returns the modules that --module names (comma-separated),
// configured by their flags; given holds the names of the flags set on
// the command line, so that a module's flag without its module is an
// error rather than ignored.
func fwModules(names string, given map[string]bool, cf coordFlags) ([]nicfw.Module, error) {
	var mods []nicfw.Module
	loaded := map[string]bool{}
	for name := range strings.SplitSeq(names, ",") {
		switch {
		case name == "":
			continue
		case loaded[name]:
			return nil, usageError("--module %s given twice", name)
		case name != "coord":
			return nil, usageError("--module %q: unknown module (have: coord)", name)
		}
		loaded[name] = true
		cfg, err := cf.config(given)
		if err != nil {
			return nil, err
		}
		mods = append(mods, coord.New(cfg))
	}
	for _, f := range []string{"coord-threshold", "coord-early", "coord-link-rate", "coord-port-buffer"} {
		if given[f] && !loaded["coord"] {
			return nil, usageError("--%s needs --module coord", f)
		}
	}
	return mods, nil
}

// config checks the coordination module's flags and returns its
// configuration.
func (cf coordFlags) config(given map[string]bool) (coord.Config, error) {
	cfg := coord.Config{Threshold: cf.threshold, EarlyRelease: cf.early}
	if cf.early < 0 {
		return cfg, usageError("--coord-early %d: want 0 or more bytes", cf.early)
	}
	if given["coord-link-rate"] {
		r, err := parseRate(cf.rate)
		if err != nil {
			return cfg, usageError("--coord-link-rate: %v", err)
		}
		cfg.LinkRate = r
	}
	if given["coord-port-buffer"] {
		b, err := parseSize(cf.buffer)
		if err != nil || b < 1<<10 || b > 1<<30 {
			return cfg, usageError("--coord-port-buffer %q: want a size from 1k to 1g, e.g. 16k", cf.buffer)
		}
		if cfg.LinkRate == 0 {
			return cfg, usageError("--coord-port-buffer needs --coord-link-rate: the port's queue is estimated from the rate it drains at")
		}
		cfg.PortBuffer = int(b)
	}
	return cfg, nil
}

// describeModule says what module m is set to do, for the daemon's first
// lines.
func describeModule(m nicfw.Module) string {
	c, ok := m.(*coord.Module)
	if !ok {
		return m.Name()
	}
	cfg := c.Config()
	s := fmt.Sprintf("coord: messages above %d bytes wait for the token", cfg.Threshold)
	if cfg.Threshold < 0 {
		s = "coord: every message waits for the token"
	}
	if cfg.EarlyRelease > 0 {
		s += fmt.Sprintf(", released with %d bytes left", cfg.EarlyRelease)
	}
	switch {
	case cfg.PortBuffer > 0:
		s += fmt.Sprintf("; paced to %d bit/s and a %d-byte port buffer", cfg.LinkRate, cfg.PortBuffer)
	case cfg.LinkRate > 0:
		s += fmt.Sprintf("; held until the message crossed a %d bit/s port, not paced (no --coord-port-buffer)", cfg.LinkRate)
	default:
		s += "; not paced (no --coord-link-rate, --coord-port-buffer)"
	}
	return s
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
	return datapath.Place{Ifindex: link.Attrs().Index, MAC: link.Attrs().HardwareAddr, Do: n.Do}, nil
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
	en, tr := s.Engine, s.Transport
	fmt.Fprintf(w, "engine: %+v\n", en)
	fmt.Fprintf(w, "transport: %+v\n", tr)
	fmt.Fprintf(w, "residency: %+v\n", s.Residency)
	for _, m := range s.Modules {
		fmt.Fprintf(w, "module %s (id %d):", m.Name, m.ID)
		for _, c := range m.Counters {
			fmt.Fprintf(w, " %s=%d", c.Name, c.Value)
		}
		fmt.Fprintln(w)
	}
	if s.Backplane != nil {
		fmt.Fprintf(w, "modules' engine work: %+v\n", *s.Backplane)
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
