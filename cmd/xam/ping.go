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
	fs := newFlags(e, "ping", pingUsage)
	api := fs.String("api", "raw", "what to ping over: raw (xam frames over AF_XDP), ssam (SSAM request/reply), amii (AM-II on the firmware engine; see --mode), grim (GRIM on the firmware engine: short messages up to 16 bytes, bulk above; see --mode), udp (kernel UDP), packet (AF_PACKET)")
	loss := fs.Float64("loss", 0, "with --api ssam, amii or grim: the fraction of xam frames both hosts' XDP programs drop, in [0, 1)")
	fwSleep := fs.Duration("fw-sleep", 20*time.Microsecond, "with --mode firmware: how long the engines poll without work before they sleep (0: busy-poll)")
	fwThreads := fs.Int("fw-threads", 1, "with --mode firmware: engine threads for the lab's two hosts: 1 (one thread runs both engines, as one NIC processor with two ports) or 2 (one each)")
	engineMode := fs.String("mode", "inline", "with --api amii or grim: where the firmware engine runs: inline (in the application's thread) or firmware (a daemon per host, reached through its unix socket)")
	var cfg bench.PingConfig
	fs.IntVar(&cfg.Count, "count", 10000, "measured round trips (at least 1)")
	warmup := fs.Int("warmup", -1, "unmeasured round trips first (default count/10, at most 1000; 0: none)")
	fs.IntVar(&cfg.Size, "size", 32, fmt.Sprintf("message bytes, 1..%d (raw/packet: carried in ceil(size/48) cells; grim: default 16, a short message, and bulk above)", maxPingSize))
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "a round trip not answered within this is counted lost (positive)")
	mode := fs.String("xdp-mode", "auto", "XDP attach mode: auto (as xam doctor recommends), generic or native")
	fs.IntVar(&cfg.Queue, "queue", 0, "device queue for the AF_XDP socket (--dev)")
	dev := fs.String("dev", "", "ping over this device instead of a lab built for the run")
	peer := fs.String("peer", "", "with --dev: the MAC address of the peer, which runs `xam ping --dev IF --serve`")
	serve := fs.Bool("serve", false, "with --dev: answer pings until interrupted, any number of clients in turn (--api ssam: with --peer, the pinging host's MAC)")
	asJSON := fs.Bool("json", false, "print the result as one JSON document, and no progress")
	socket := fs.String("socket", "", "with --api amii: ping through the running firmware daemon (xam fw) at this socket instead of building a lab")
	peerHost := fs.Uint("peer-host", 0, "with --socket (required): the other side's host id, 0..65535, as `xam fw stats` lists it (the mapper numbers hosts from 0)")
	epID := fs.Uint("endpoint", uint(daemon.FirstUserEndpoint), "with --socket: the endpoint each side opens (the same number on both hosts)")
	tagFlag := fs.String("tag", "", "with --socket: the virtual network both sides open, a 64-bit number (0x...), or 'new' with --serve to draw one and print it; default a fixed tag that only root may use (users other than root need a tag of their own: daemon.WeakTag)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.Mode, err = loader.ParseMode(*mode); err != nil {
		return usageError("--xdp-mode: %v", err)
	}
	if *api == "grim" && !seen(fs, "size") {
		cfg.Size = 4 * grim.ShortArgs // a short message
	}
	switch *api {
	case "raw", "ssam", "amii", "grim", "udp", "packet":
	default:
		return usageError("--api %q: want raw, ssam, amii, grim, udp or packet", *api)
	}
	switch {
	case cfg.Count < 1:
		return usageError("--count %d: want at least 1", cfg.Count)
	case *warmup < -1:
		return usageError("--warmup %d: want 0 or more", *warmup)
	case cfg.Size < 1 || cfg.Size > maxPingSize:
		return usageError("--size %d: want 1..%d bytes", cfg.Size, maxPingSize)
	case cfg.Timeout <= 0:
		return usageError("--timeout %v: want a positive duration, e.g. 1s", cfg.Timeout)
	case cfg.Queue < 0:
		return usageError("--queue %d: want 0 or more", cfg.Queue)
	case *fwSleep < 0:
		return usageError("--fw-sleep %v: want 0 (busy-poll) or a positive duration", *fwSleep)
	case *fwThreads != 1 && *fwThreads != 2:
		return usageError("--fw-threads %d: want 1 or 2", *fwThreads)
	case *api == "grim" && cfg.Size > grim.MaxBulk:
		return usageError("--size %d: a GRIM message carries at most %d bytes", cfg.Size, grim.MaxBulk)
	case *loss != 0 && *api != "ssam" && *api != "amii" && *api != "grim":
		return usageError("--loss works with --api ssam, amii or grim only (the reliable paths); --api %s has no retransmission", *api)
	case *loss < 0 || *loss >= 1:
		return usageError("--loss %v: want a fraction in [0, 1)", *loss)
	case *engineMode != "inline" && *engineMode != "firmware":
		return usageError("--mode %q: want inline or firmware", *engineMode)
	case *engineMode == "firmware" && *api != "amii" && *api != "grim":
		return usageError("--mode firmware works with --api amii or grim only")
	}
	switch *warmup {
	case -1: // the default: bench's
	case 0:
		cfg.NoWarmup = true
	default:
		cfg.Warmup = *warmup
	}
	run := bench.RunConfig{Device: *dev, Peer: *peer, InjectedLoss: *loss}
	if *api == "amii" || *api == "grim" {
		run.EngineMode = *engineMode
		if *engineMode == "firmware" {
			run.FWSleepNS = int64(*fwSleep)
			run.FWThreads = *fwThreads
		}
	}
	if *socket != "" {
		switch {
		case *api != "amii":
			return usageError("--socket works with --api amii (the daemons run AM-II's engine)")
		case *dev != "" || *peer != "":
			return usageError("--socket reaches the daemon, which owns the device: no --dev or --peer")
		case !seen(fs, "peer-host") || *peerHost > 65535:
			return usageError("--peer-host N (0..65535) is required with --socket: the other side's host id, as `xam fw stats` lists it")
		case *epID < uint(daemon.FirstUserEndpoint) || *epID > 65535:
			return usageError("--endpoint %d: want %d..65535", *epID, daemon.FirstUserEndpoint)
		case *loss > 0:
			return usageError("--loss needs the lab built for the run (no --socket)")
		}
		tag := uint64(bench.DaemonTag)
		switch {
		case *tagFlag == "new" && !*serve:
			return usageError("--tag new draws the serving side's tag: give --serve, and the drawn tag to the pinging side")
		case *tagFlag == "new":
			tag = daemon.NewTag()
			fmt.Fprintf(e.stderr, "xam ping: serving on tag %#x: ping with --tag %#x\n", tag, tag)
		case *tagFlag != "":
			t, err := strconv.ParseUint(*tagFlag, 0, 64)
			if err != nil || t == 0 {
				return usageError("--tag %q: want a 64-bit number other than 0 (0x...), or new", *tagFlag)
			}
			tag = t
		}
		if err := checkPeerHost(*socket, nicfw.HostID(*peerHost)); err != nil {
			return err
		}
		return pingDaemon(e, bench.DaemonEndpoint{Socket: *socket, Endpoint: nicfw.EndpointID(*epID), PeerHost: nicfw.HostID(*peerHost), Tag: tag},
			*serve, cfg, *asJSON)
	}
	if *dev != "" {
		if *api != "raw" && *api != "ssam" {
			return usageError("--dev works with --api raw or ssam")
		}
		switch {
		case *api == "raw" && *serve == (*peer != ""):
			return usageError("with --dev give either --peer MAC or --serve")
		case *api == "ssam" && *peer == "":
			return usageError("with --dev --api ssam give --peer MAC (and --serve on the responding host): an SSAM connection is bound to its peer")
		case *loss > 0:
			return usageError("--loss needs the lab built for the run (no --dev)")
		}
	} else if *serve || *peer != "" {
		return usageError("--peer and --serve need --dev")
	}
	var mac net.HardwareAddr
	if *peer != "" {
		if mac, err = net.ParseMAC(*peer); err != nil {
			return usageError("--peer %q: %v", *peer, err)
		}
	}
	if err := needPrivileges("xam ping"); err != nil {
		return err
	}

	in := watchInterrupts(e, "what was measured follows")
	defer in.release()
	cfg.Stop = in.flag()
	if !*asJSON {
		cfg.Progress = progressLine(e)
	}

	var r any
	if *dev != "" {
		link, err := netlink.LinkByName(*dev)
		if err != nil {
			return fmt.Errorf("device %s: %w", *dev, err)
		}
		here := datapath.Here(link.Attrs().Index, link.Attrs().HardwareAddr)
		if *api == "ssam" {
			return pingSSAMDevice(e, here, mac, *serve, *dev, cfg, run, *asJSON, in)
		}
		ep, err := datapath.Open(here, cfg.Mode, cfg.Queue)
		if err != nil {
			return err
		}
		defer ep.Close()
		if *serve {
			return serveRaw(e, ep, *dev, in)
		}
		pr, err := bench.RawPingFrom(ep, mac, cfg)
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
		if r, err = pingLab(*api, *engineMode, pa, pb, a, b, cfg, *loss, bench.FirmwareLayout{Threads: *fwThreads, Sleep: *fwSleep}); err != nil {
			return err
		}
	}
	pr := pingResult(r)
	pr.Config.InjectedLoss, pr.Config.EngineMode, pr.Config.FWSleepNS, pr.Config.FWThreads = run.InjectedLoss, run.EngineMode, run.FWSleepNS, run.FWThreads
	if *asJSON {
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
