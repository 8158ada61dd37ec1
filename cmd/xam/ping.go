package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

const pingUsage = "ping [--api raw|ssam|amii|grim|udp|packet] [--mode inline|firmware] [--count N] [--warmup N] [--size B] [--timeout D] [--loss P] [--json] [--dev IF (--peer MAC | --serve)]\n       xam ping --api amii --socket PATH (--peer-host N | --serve --peer-host N) [--endpoint E]   through running firmware daemons (xam fw)"

// maxPingSize bounds --size: a message larger than the device's MTU is
// refused by the path itself, with the MTU in its error.
const maxPingSize = 65535

func runPing(e *env, args []string) error {
	p, err := parsePing(e, args)
	if err != nil {
		return err
	}
	if p.socket != "" {
		return p.throughDaemon(e)
	}
	mac, err := p.checkDevice()
	if err != nil {
		return err
	}
	if err := needPrivileges("xam ping"); err != nil {
		return err
	}

	in := watchInterrupts(e, "what was measured follows")
	defer in.release()
	p.cfg.Stop = in.flag()
	if !p.asJSON {
		p.cfg.Progress = progressLine(e)
	}
	run := p.runConfig()
	var r any
	if p.dev != "" {
		link, err := netlink.LinkByName(p.dev)
		if err != nil {
			return fmt.Errorf("device %s: %w", p.dev, err)
		}
		here := datapath.Here(link.Attrs().Index, link.Attrs().HardwareAddr)
		if p.api == "ssam" {
			return pingSSAMDevice(e, here, mac, p.serve, p.dev, p.cfg, run, p.asJSON, in)
		}
		ep, err := datapath.Open(here, p.cfg.Mode, p.cfg.Queue)
		if err != nil {
			return err
		}
		defer ep.Close()
		if p.serve {
			return serveRaw(e, ep, p.dev, in)
		}
		pr, err := bench.RawPingFrom(ep, mac, p.cfg)
		if err != nil {
			return err
		}
		pr.Config.Device, pr.Config.Peer = run.Device, run.Peer
		r = pr
	} else {
		l, err := lab.Up(lab.Config{Name: fmt.Sprintf("ping%d", os.Getpid())})
		if err != nil {
			return err
		}
		in.onExit(l.Down)
		defer l.Down()
		a, b := l.Hosts[0], l.Hosts[1]
		pa := datapath.OnHost(a)
		pb := datapath.OnHost(b)
		if r, err = pingLab(p.api, p.engineMode, pa, pb, a, b, p.cfg, p.loss, bench.FirmwareLayout{Threads: p.fwThreads, Sleep: p.fwSleep}); err != nil {
			return err
		}
	}
	return reportPing(e, r, run, p.asJSON)
}

// pingArgs is what xam ping was asked: its flags, parsed and checked.
type pingArgs struct {
	api, engineMode, dev, peer, socket, tag string
	loss                                    float64
	fwSleep                                 time.Duration
	fwThreads                               int
	serve, asJSON                           bool
	peerHost, endpoint                      uint
	peerHostSeen                            bool
	cfg                                     bench.PingConfig
}

// parsePing parses xam ping's flags and checks them, the device and
// daemon flags apart (checkDevice, throughDaemon).
func parsePing(e *env, args []string) (*pingArgs, error) {
	p := &pingArgs{}
	fs := newFlags(e, "ping", pingUsage)
	fs.StringVar(&p.api, "api", "raw", "what to ping over: raw (xam frames over AF_XDP), ssam (SSAM request/reply), amii (AM-II on the firmware engine; see --mode), grim (GRIM on the firmware engine: short messages up to 16 bytes, bulk above; see --mode), udp (kernel UDP), packet (AF_PACKET)")
	fs.Float64Var(&p.loss, "loss", 0, "with --api ssam, amii or grim: the fraction of xam frames both hosts' XDP programs drop, in [0, 1)")
	fs.DurationVar(&p.fwSleep, "fw-sleep", 20*time.Microsecond, "with --mode firmware: how long the engines poll without work before they sleep (0: busy-poll)")
	fs.IntVar(&p.fwThreads, "fw-threads", 1, "with --mode firmware: engine threads for the lab's two hosts: 1 (one thread runs both engines, as one NIC processor with two ports) or 2 (one each)")
	fs.StringVar(&p.engineMode, "mode", "inline", "with --api amii or grim: where the firmware engine runs: inline (in the application's thread) or firmware (a daemon per host, reached through its unix socket)")
	cfg := &p.cfg
	fs.IntVar(&cfg.Count, "count", 10000, "measured round trips (at least 1)")
	warmup := fs.Int("warmup", -1, "unmeasured round trips first (default count/10, at most 1000; 0: none)")
	fs.IntVar(&cfg.Size, "size", 32, fmt.Sprintf("message bytes, 1..%d (raw/packet: carried in ceil(size/48) cells; grim: default 16, a short message, and bulk above)", maxPingSize))
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "a round trip not answered within this is counted lost (positive)")
	mode := fs.String("xdp-mode", "auto", "XDP attach mode: auto (as xam doctor recommends), generic or native")
	fs.IntVar(&cfg.Queue, "queue", 0, "device queue for the AF_XDP socket (--dev)")
	fs.StringVar(&p.dev, "dev", "", "ping over this device instead of a lab built for the run")
	fs.StringVar(&p.peer, "peer", "", "with --dev: the MAC address of the peer, which runs `xam ping --dev IF --serve`")
	fs.BoolVar(&p.serve, "serve", false, "with --dev: answer pings until interrupted, any number of clients in turn (--api ssam: with --peer, the pinging host's MAC)")
	fs.BoolVar(&p.asJSON, "json", false, "print the result as one JSON document, and no progress")
	fs.StringVar(&p.socket, "socket", "", "with --api amii: ping through the running firmware daemon (xam fw) at this socket instead of building a lab")
	fs.UintVar(&p.peerHost, "peer-host", 0, "with --socket (required): the other side's host id, 0..65535, as `xam fw stats` lists it (the mapper numbers hosts from 0)")
	fs.UintVar(&p.endpoint, "endpoint", uint(daemon.FirstUserEndpoint), "with --socket: the endpoint each side opens (the same number on both hosts)")
	fs.StringVar(&p.tag, "tag", "", "with --socket: the virtual network both sides open, a 64-bit number (0x...), or 'new' with --serve to draw one and print it; default a fixed tag that only root may use (users other than root need a tag of their own: daemon.WeakTag)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var err error
	if cfg.Mode, err = loader.ParseMode(*mode); err != nil {
		return nil, usageError("--xdp-mode: %v", err)
	}
	if p.api == "grim" && !seen(fs, "size") {
		cfg.Size = 4 * grim.ShortArgs // a short message
	}
	p.peerHostSeen = seen(fs, "peer-host")
	if err := p.check(*warmup); err != nil {
		return nil, err
	}
	switch *warmup {
	case -1: // the default: bench's
	case 0:
		cfg.NoWarmup = true
	default:
		cfg.Warmup = *warmup
	}
	return p, nil
}

// check checks the flags that every ping has.
func (p *pingArgs) check(warmup int) error {
	cfg := &p.cfg
	switch p.api {
	case "raw", "ssam", "amii", "grim", "udp", "packet":
	default:
		return usageError("--api %q: want raw, ssam, amii, grim, udp or packet", p.api)
	}
	switch {
	case cfg.Count < 1:
		return usageError("--count %d: want at least 1", cfg.Count)
	case warmup < -1:
		return usageError("--warmup %d: want 0 or more", warmup)
	case cfg.Size < 1 || cfg.Size > maxPingSize:
		return usageError("--size %d: want 1..%d bytes", cfg.Size, maxPingSize)
	case cfg.Timeout <= 0:
		return usageError("--timeout %v: want a positive duration, e.g. 1s", cfg.Timeout)
	case cfg.Queue < 0:
		return usageError("--queue %d: want 0 or more", cfg.Queue)
	case p.fwSleep < 0:
		return usageError("--fw-sleep %v: want 0 (busy-poll) or a positive duration", p.fwSleep)
	case p.fwThreads != 1 && p.fwThreads != 2:
		return usageError("--fw-threads %d: want 1 or 2", p.fwThreads)
	case p.api == "grim" && cfg.Size > grim.MaxBulk:
		return usageError("--size %d: a GRIM message carries at most %d bytes", cfg.Size, grim.MaxBulk)
	case p.loss != 0 && p.api != "ssam" && p.api != "amii" && p.api != "grim":
		return usageError("--loss works with --api ssam, amii or grim only (the reliable paths); --api %s has no retransmission", p.api)
	case p.loss < 0 || p.loss >= 1:
		return usageError("--loss %v: want a fraction in [0, 1)", p.loss)
	case p.engineMode != "inline" && p.engineMode != "firmware":
		return usageError("--mode %q: want inline or firmware", p.engineMode)
	case p.engineMode == "firmware" && p.api != "amii" && p.api != "grim":
		return usageError("--mode firmware works with --api amii or grim only")
	}
	return nil
}

// runConfig returns the run's configuration, for the result.
func (p *pingArgs) runConfig() bench.RunConfig {
	run := bench.RunConfig{Device: p.dev, Peer: p.peer, InjectedLoss: p.loss}
	if p.api == "amii" || p.api == "grim" {
		run.EngineMode = p.engineMode
		if p.engineMode == "firmware" {
			run.FWSleepNS = int64(p.fwSleep)
			run.FWThreads = p.fwThreads
		}
	}
	return run
}

// throughDaemon checks the flags of a ping through running daemons
// (--socket) and runs it.
func (p *pingArgs) throughDaemon(e *env) error {
	switch {
	case p.api != "amii":
		return usageError("--socket works with --api amii (the daemons run AM-II's engine)")
	case p.dev != "" || p.peer != "":
		return usageError("--socket reaches the daemon, which owns the device: no --dev or --peer")
	case !p.peerHostSeen || p.peerHost > 65535:
		return usageError("--peer-host N (0..65535) is required with --socket: the other side's host id, as `xam fw stats` lists it")
	case p.endpoint < uint(daemon.FirstUserEndpoint) || p.endpoint > 65535:
		return usageError("--endpoint %d: want %d..65535", p.endpoint, daemon.FirstUserEndpoint)
	case p.loss > 0:
		return usageError("--loss needs the lab built for the run (no --socket)")
	}
	tag := uint64(bench.DaemonTag)
	switch {
	case p.tag == "new" && !p.serve:
		return usageError("--tag new draws the serving side's tag: give --serve, and the drawn tag to the pinging side")
	case p.tag == "new":
		tag = daemon.NewTag()
		fmt.Fprintf(e.stderr, "xam ping: serving on tag %#x: ping with --tag %#x\n", tag, tag)
	case p.tag != "":
		t, err := strconv.ParseUint(p.tag, 0, 64)
		if err != nil || t == 0 {
			return usageError("--tag %q: want a 64-bit number other than 0 (0x...), or new", p.tag)
		}
		tag = t
	}
	if err := checkPeerHost(p.socket, nicfw.HostID(p.peerHost)); err != nil {
		return err
	}
	return pingDaemon(e, bench.DaemonEndpoint{Socket: p.socket, Endpoint: nicfw.EndpointID(p.endpoint), PeerHost: nicfw.HostID(p.peerHost), Tag: tag},
		p.serve, p.cfg, p.asJSON)
}

// checkDevice checks the flags of a ping over a device (--dev) and returns
// the peer's MAC, if given.
func (p *pingArgs) checkDevice() (net.HardwareAddr, error) {
	if p.dev != "" {
		if p.api != "raw" && p.api != "ssam" {
			return nil, usageError("--dev works with --api raw or ssam")
		}
		switch {
		case p.api == "raw" && p.serve == (p.peer != ""):
			return nil, usageError("with --dev give either --peer MAC or --serve")
		case p.api == "ssam" && p.peer == "":
			return nil, usageError("with --dev --api ssam give --peer MAC (and --serve on the responding host): an SSAM connection is bound to its peer")
		case p.loss > 0:
			return nil, usageError("--loss needs the lab built for the run (no --dev)")
		}
	} else if p.serve || p.peer != "" {
		return nil, usageError("--peer and --serve need --dev")
	}
	if p.peer == "" {
		return nil, nil
	}
	mac, err := net.ParseMAC(p.peer)
	if err != nil {
		return nil, usageError("--peer %q: %v", p.peer, err)
	}
	return mac, nil
}

// reportPing prints r, the result of a ping of run, as JSON or a table,
// and returns its outcome.
func reportPing(e *env, r any, run bench.RunConfig, asJSON bool) error {
	pr := pingResult(r)
	pr.Config.InjectedLoss, pr.Config.EngineMode, pr.Config.FWSleepNS, pr.Config.FWThreads = run.InjectedLoss, run.EngineMode, run.FWSleepNS, run.FWThreads
	if asJSON {
		if err := json.NewEncoder(e.stdout).Encode(r); err != nil {
			return err
		}
	} else {
		printPing(e, pr)
		switch r := r.(type) {
		case *bench.SSAMResult:
			fmt.Fprintf(e.stdout, "sent %d (warm-up included), delivered %d, duplicates %d, retransmits %d\n", r.Sent, r.Delivered, r.Duplicates, r.Retransmits)
		case *bench.AMIIResult:
			fmt.Fprintf(e.stdout, "sent %d (warm-up included), delivered %d, duplicates %d, retransmits %d\n", r.Sent, r.Delivered, r.Duplicates, r.Retransmits)
		case *bench.GRIMResult:
			fmt.Fprintf(e.stdout, "%s messages: sent %d (warm-up included), delivered %d, duplicates %d, retransmits %d\n", r.Message, r.Sent, r.Delivered, r.Duplicates, r.Retransmits)
		}
	}
	return pingOutcome(pr)
}

// pingLab runs the ping of api on a lab's two hosts.
func pingLab(api, engineMode string, pa, pb datapath.Place, a, b *lab.Host, cfg bench.PingConfig, loss float64, fw bench.FirmwareLayout) (any, error) {
	switch api {
	case "raw":
		return bench.RawPing(pa, pb, cfg)
	case "ssam":
		return bench.SSAMPing(pa, pb, cfg, loss, ssam.Config{})
	case "amii":
		if engineMode == "firmware" {
			return bench.AMIIFirmwarePing(pa, pb, cfg, loss, fw)
		}
		return bench.AMIIPing(pa, pb, cfg, loss)
	case "grim":
		return bench.GRIMPing(pa, pb, cfg, loss, engineMode == "firmware", fw)
	case "packet":
		return bench.PacketPing(pa, pb, cfg)
	default:
		return bench.UDPPing(pa, pb, a.Addr.Addr(), b.Addr.Addr(), cfg)
	}
}

// pingResult returns the PingResult inside any ping's result.
func pingResult(r any) *bench.PingResult {
	switch r := r.(type) {
	case *bench.SSAMResult:
		return &r.PingResult
	case *bench.AMIIResult:
		return &r.PingResult
	case *bench.GRIMResult:
		return &r.PingResult
	}
	return r.(*bench.PingResult)
}

// pingOutcome is the error a printed result ends the command with: an
// interrupted run, and a run in which every round trip was lost, do not
// exit 0.
func pingOutcome(r *bench.PingResult) error {
	switch {
	case r.Interrupted:
		return fmt.Errorf("%w after %d of %d measured round trips", errInterrupted, r.Done, r.Count)
	case r.AllLost():
		return fmt.Errorf("all %d round trips were lost: is the peer there and serving (xam ping --serve)?", r.Done)
	}
	return nil
}

func printPing(e *env, r *bench.PingResult) {
	d := func(ns int64) string { return time.Duration(ns).String() }
	frame := ""
	if r.FrameBytes > 0 {
		frame = fmt.Sprintf(" (%d-byte frames)", r.FrameBytes)
	}
	api := r.API
	if r.Config.EngineMode != "" {
		api += " (" + r.Config.EngineMode + " mode)"
	}
	done := fmt.Sprint(r.Done)
	if r.Interrupted {
		done = fmt.Sprintf("%d of %d (interrupted)", r.Done, r.Count)
	}
	fmt.Fprintf(e.stdout, "%s ping-pong: %s round trips of %d-byte messages%s after %d warm-up, %d lost (%.2f%%)\n",
		api, done, r.Size, frame, r.Warmup, r.Lost, 100*r.Loss)
	switch {
	case r.Done == 0:
		fmt.Fprintln(e.stdout, "RTT  none: no round trip was measured")
		return
	case r.Done == r.Lost:
		fmt.Fprintln(e.stdout, "RTT  none: no round trip was answered")
		return
	}
	fmt.Fprintf(e.stdout, "RTT  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n",
		d(r.RTT.P50), d(r.RTT.P90), d(r.RTT.P99), d(r.RTT.P999), d(r.RTT.Max), d(r.RTT.Mean))
}

// serveRaw echoes raw pings until SIGINT or SIGTERM.
func serveRaw(e *env, ep *datapath.Endpoint, dev string, in *interrupts) error {
	fmt.Fprintf(e.stderr, "xam ping: echoing raw pings on %s (%v); interrupt to stop\n", dev, ep.MAC)
	return ep.Echo(in.flag())
}

// pingSSAMDevice runs the SSAM ping over a device with a peer (real NICs):
// serving the echo until interrupted, or pinging.
func pingSSAMDevice(e *env, here datapath.Place, peer net.HardwareAddr, serve bool, dev string, cfg bench.PingConfig, run bench.RunConfig, asJSON bool, in *interrupts) error {
	ep, err := bench.OpenSSAM(here, peer, cfg.Mode, ssam.Config{MaxMessage: max(8192, cfg.Size)})
	if err != nil {
		return err
	}
	defer ep.Close()
	if serve {
		var counts bench.EchoCounts
		if err := ep.Echo(&counts); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "xam ping: serving SSAM pings from %v on %s (%v), one client after another; interrupt to stop\n", peer, dev, here.MAC)
		err := ep.PollUntil(in.flag())
		fmt.Fprintf(e.stderr, "xam ping: %d requests handled from %d clients, %d duplicates\n", counts.Delivered(), ep.AM.Stats().Sessions, counts.Duplicates())
		return err
	}
	r, err := ep.Ping(cfg)
	if err != nil {
		return err
	}
	r.Config.Device, r.Config.Peer = run.Device, run.Peer
	if asJSON {
		if err := json.NewEncoder(e.stdout).Encode(r); err != nil {
			return err
		}
	} else {
		printPing(e, &r.PingResult)
		fmt.Fprintf(e.stdout, "sent %d (warm-up included), retransmits %d (delivery and duplicates are counted by the server)\n", r.Sent, r.Retransmits)
	}
	return pingOutcome(&r.PingResult)
}

// errNoSuchHost: --peer-host names no host of the daemon's host table.
var errNoSuchHost = errors.New("no such host")

// checkPeerHost asks the running daemon at socket for its host table and
// returns an error wrapping errNoSuchHost, naming the hosts the table
// holds, unless host is one of them: a ping to a host the daemon does not
// know would only be returned, and counted lost.
func checkPeerHost(socket string, host nicfw.HostID) error {
	c, err := daemon.Dial(socket)
	if err != nil {
		return fmt.Errorf("%w (is `xam fw` running with --socket %s?)", err, socket)
	}
	defer c.Close()
	s, err := c.Stats()
	if err != nil {
		return fmt.Errorf("asking the daemon at %s for its host table: %w", socket, err)
	}
	known := make([]string, 0, len(s.Hosts))
	for _, h := range s.Hosts {
		if h.ID == host {
			return nil
		}
		known = append(known, strconv.Itoa(int(h.ID)))
	}
	table := "static table"
	switch {
	case s.Epoch != 0:
		table = fmt.Sprintf("mapper epoch %d", s.Epoch)
	case s.Mapper != nil:
		table = "the mapper has distributed no table yet"
	}
	return fmt.Errorf("--peer-host %d: %w: the daemon at %s knows hosts %s (%s; `xam fw stats` lists them)",
		host, errNoSuchHost, socket, strings.Join(known, ", "), table)
}

// pingDaemon pings, or serves pings, through a running firmware daemon.
// Neither needs privileges: the daemon owns the device.
func pingDaemon(e *env, d bench.DaemonEndpoint, serve bool, cfg bench.PingConfig, asJSON bool) error {
	in := watchInterrupts(e, "what was measured follows")
	defer in.release()
	if serve {
		fmt.Fprintf(e.stderr, "xam ping: serving AM-II pings on endpoint %d of the daemon at %s, from host %d; interrupt to stop\n", d.Endpoint, d.Socket, d.PeerHost)
		n, err := bench.AMIIDaemonServe(d, in.flag())
		fmt.Fprintf(e.stderr, "xam ping: %d requests handled\n", n)
		return err
	}
	cfg.Stop = in.flag()
	if !asJSON {
		cfg.Progress = progressLine(e)
	}
	r, err := bench.AMIIDaemonPing(d, cfg)
	if err != nil {
		return err
	}
	r.Config.EngineMode = "firmware"
	r.Config.Device = "daemon at " + d.Socket
	if asJSON {
		if err := json.NewEncoder(e.stdout).Encode(r); err != nil {
			return err
		}
	} else {
		printPing(e, &r.PingResult)
		fmt.Fprintf(e.stdout, "sent %d (warm-up included), retransmits counted by the daemons (xam fw stats)\n", r.Sent)
	}
	return pingOutcome(&r.PingResult)
}

// progressLine prints a ping's progress, once a second, on stderr.
func progressLine(e *env) func(bench.Progress) {
	return func(p bench.Progress) {
		fmt.Fprintf(e.stderr, "  %d of %d round trips, %.0f/s, %d lost\n", p.Made, p.Total, float64(p.Made)/p.Elapsed.Seconds(), p.Lost)
	}
}
