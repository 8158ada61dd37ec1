package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/am"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/lab"
	"github.com/xam-project/xam/loader"
)

func runPing(e *env, args []string) error {
	fs := newFlags(e, "ping", "ping [--api raw|ssam|udp|packet] [--count N] [--size B] [--loss P] [--json] [--dev IF [--peer MAC] [--serve]]")
	api := fs.String("api", "raw", "what to ping over: raw (xam frames over AF_XDP), ssam (SSAM request/reply), udp (kernel UDP), packet (AF_PACKET); amii and grim come with their layers")
	loss := fs.Float64("loss", 0, "with --api ssam or amii: fraction of xam frames both hosts' XDP programs drop (0..1)")
	fwSleep := fs.Duration("fw-sleep", 20*time.Microsecond, "with --mode firmware: how long the engines poll without work before they sleep (0: busy-poll)")
	engineMode := fs.String("mode", "inline", "with --api amii: where the firmware engine runs: inline (in the application's thread) or firmware (a daemon per host, reached through its unix socket)")
	var cfg bench.PingConfig
	fs.IntVar(&cfg.Count, "count", 10000, "measured round trips")
	fs.IntVar(&cfg.Warmup, "warmup", 0, "unmeasured round trips first (default count/10, at most 1000)")
	fs.IntVar(&cfg.Size, "size", 32, "message bytes (raw/packet: carried in ceil(size/48) cells, at least one)")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "a round trip not answered within this is counted lost")
	mode := fs.String("xdp-mode", "auto", "XDP attach mode: auto (as xam doctor recommends), generic or native")
	fs.IntVar(&cfg.Queue, "queue", 0, "device queue for the AF_XDP socket (--dev)")
	dev := fs.String("dev", "", "ping over this device instead of a lab built for the run")
	peer := fs.String("peer", "", "with --dev: the MAC address of the peer running `xam ping --serve`")
	serve := fs.Bool("serve", false, "with --dev: answer pings until interrupted (--api ssam: with --peer, the pinging host's MAC)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.Mode, err = loader.ParseMode(*mode); err != nil {
		return usageError("--xdp-mode: %v", err)
	}
	if cfg.Count < 1 || cfg.Size < 0 || cfg.Warmup < 0 {
		return usageError("--count must be at least 1, --size and --warmup not negative")
	}
	switch *api {
	case "raw", "ssam", "amii", "udp", "packet":
	case "grim":
		return usageError("--api %s: that layer is not built yet; --api raw, ssam, amii, udp and packet work", *api)
	default:
		return usageError("--api %q: want raw, ssam, amii, udp or packet", *api)
	}
	if *loss < 0 || *loss > 1 || *loss > 0 && *api != "ssam" && *api != "amii" {
		return usageError("--loss %v: a fraction in [0, 1], with --api ssam or amii", *loss)
	}
	if *engineMode != "inline" && *engineMode != "firmware" {
		return usageError("--mode %q: want inline or firmware", *engineMode)
	}
	if *engineMode == "firmware" && *api != "amii" {
		return usageError("--mode firmware works with --api amii")
	}

	var r any
	switch {
	case *dev != "":
		if *api != "raw" && *api != "ssam" {
			return usageError("--dev works with --api raw or ssam")
		}
		switch {
		case *api == "raw" && *serve == (*peer != ""):
			return usageError("with --dev give either --peer MAC or --serve")
		case *api == "ssam" && *peer == "":
			return usageError("with --dev --api ssam give --peer MAC (and --serve on the responding host): an SSAM connection is bound to its peer")
		}
		if *loss > 0 {
			return usageError("--loss needs the lab built for the run (no --dev)")
		}
		link, err := netlink.LinkByName(*dev)
		if err != nil {
			return fmt.Errorf("device %s: %w", *dev, err)
		}
		here := bench.Here(link.Attrs().Index, link.Attrs().HardwareAddr)
		var mac net.HardwareAddr
		if *peer != "" {
			if mac, err = net.ParseMAC(*peer); err != nil {
				return usageError("--peer: %v", err)
			}
		}
		if *api == "ssam" {
			return pingSSAMDevice(e, here, mac, *serve, *dev, cfg, *asJSON)
		}
		ep, err := bench.OpenRaw(here, cfg.Mode, cfg.Queue)
		if err != nil {
			return err
		}
		defer ep.Close()
		if *serve {
			return serveRaw(e, ep, *dev)
		}
		if r, err = ep.Ping(mac, cfg); err != nil {
			return err
		}
	default:
		if *serve || *peer != "" {
			return usageError("--peer and --serve need --dev")
		}
		l, err := lab.Up(lab.Config{Name: fmt.Sprintf("ping%d", os.Getpid())})
		if err != nil {
			return err
		}
		defer l.Down()
		a, b := l.Hosts[0], l.Hosts[1]
		pa := bench.Place{Ifindex: a.Index, MAC: a.MAC, Do: a.Do}
		pb := bench.Place{Ifindex: b.Index, MAC: b.MAC, Do: b.Do}
		switch *api {
		case "raw":
			r, err = bench.RawPing(pa, pb, cfg)
		case "ssam":
			r, err = bench.SSAMPing(pa, pb, cfg, *loss, am.SSAMConfig{})
		case "amii":
			if *engineMode == "firmware" {
				r, err = bench.AMIIFirmwarePing(pa, pb, cfg, *loss, [2][]int{}, *fwSleep)
			} else {
				r, err = bench.AMIIPing(pa, pb, cfg, *loss)
			}
		case "packet":
			r, err = bench.PacketPing(pa, pb, cfg)
		case "udp":
			r, err = bench.UDPPing(pa, pb, a.Addr.Addr(), b.Addr.Addr(), cfg)
		}
		if err != nil {
			return err
		}
	}
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(r)
	}
	switch r := r.(type) {
	case *bench.PingResult:
		printPing(e, r)
	case *bench.SSAMResult:
		printPing(e, &r.PingResult)
		fmt.Fprintf(e.stdout, "sent %d, delivered %d, duplicates %d, retransmits %d\n", r.Sent, r.Delivered, r.Duplicates, r.Retransmits)
	case *bench.AMIIResult:
		printPing(e, &r.PingResult)
		fmt.Fprintf(e.stdout, "sent %d, delivered %d, duplicates %d, retransmits %d\n", r.Sent, r.Delivered, r.Duplicates, r.Retransmits)
	}
	return nil
}

func printPing(e *env, r *bench.PingResult) {
	d := func(ns int64) string { return time.Duration(ns).String() }
	frame := ""
	if r.FrameBytes > 0 {
		frame = fmt.Sprintf(" (%d-byte frames)", r.FrameBytes)
	}
	fmt.Fprintf(e.stdout, "%s ping-pong: %d round trips of %d-byte messages%s, %d lost\n", r.API, r.Count, r.Size, frame, r.Lost)
	fmt.Fprintf(e.stdout, "RTT  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n",
		d(r.RTT.P50), d(r.RTT.P90), d(r.RTT.P99), d(r.RTT.P999), d(r.RTT.Max), d(r.RTT.Mean))
}

// stopOnSignal returns a flag set by SIGINT or SIGTERM, and a function that
// stops listening.
func stopOnSignal() (*atomic.Bool, func()) {
	var stop atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sig:
			stop.Store(true)
		case <-done:
		}
	}()
	return &stop, func() { signal.Stop(sig); close(done) }
}

// serveRaw echoes raw pings until SIGINT or SIGTERM.
func serveRaw(e *env, ep *bench.RawEndpoint, dev string) error {
	stop, release := stopOnSignal()
	defer release()
	fmt.Fprintf(e.stderr, "xam ping: echoing raw pings on %s (%v); interrupt to stop\n", dev, ep.MAC)
	return ep.Echo(stop)
}

// pingSSAMDevice runs the SSAM ping over a device with a peer (real NICs):
// serving the echo until interrupted, or pinging.
func pingSSAMDevice(e *env, here bench.Place, peer net.HardwareAddr, serve bool, dev string, cfg bench.PingConfig, asJSON bool) error {
	ep, err := bench.OpenSSAM(here, peer, cfg.Mode, am.SSAMConfig{MaxMessage: max(8192, cfg.Size)})
	if err != nil {
		return err
	}
	defer ep.Close()
	if serve {
		var counts bench.EchoCounts
		if err := ep.Echo(&counts); err != nil {
			return err
		}
		stop, release := stopOnSignal()
		defer release()
		fmt.Fprintf(e.stderr, "xam ping: serving SSAM pings from %v on %s (%v); interrupt to stop\n", peer, dev, here.MAC)
		err := ep.PollUntil(stop)
		fmt.Fprintf(e.stderr, "xam ping: %d requests handled, %d duplicates\n", counts.Delivered(), counts.Duplicates())
		return err
	}
	r, err := ep.Ping(cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(r)
	}
	printPing(e, &r.PingResult)
	fmt.Fprintf(e.stdout, "sent %d, retransmits %d (delivery and duplicates are counted by the server)\n", r.Sent, r.Retransmits)
	return nil
}
