package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/endpoint"
)

const pingUsage = "ping [--api raw|ssam|amii|grim|udp|packet] [--mode inline|firmware] [--count N] [--warmup N] [--size B] [--timeout D] [--loss P] [--dup P] [--mtu M] [--zerocopy auto|require|off] [--timestamps] [--json] [--dev IF (--peer MAC | --serve)]\n       xam ping --api amii --socket PATH (--peer-host N | --serve --peer-host N) [--endpoint E]   through running firmware daemons (xam fw)"

// maxPingSize bounds --size: a message larger than the device's MTU is
// refused by the path itself, with the MTU in its error.
const maxPingSize = 65535

// pingOptions is `xam ping`'s command line.
type pingOptions struct {
	fs         *flag.FlagSet // to tell a flag given from its default (seen)
	encapFlag  string
	encap      datapath.Encap
	peerIP     netip.Addr       // --peer with --encap udp
	cfg        bench.PingConfig // --count, --size, --timeout, --queue; the XDP mode and warm-up once checked
	api        string
	engineMode string // --mode: inline or firmware
	xdpMode    string
	loss       float64
	dup        float64
	fwSleep    time.Duration
	fwLayout   string
	fwShape    bench.FirmwareShape
	fwCores    string   // --fw-cores
	fwCoreSets [2][]int // its CPU lists: host a's engine, host b's
	warmup     int
	dev        string
	mtu        int    // --mtu: the lab's
	zeroCopy   string // --zerocopy
	peer       string
	serve      bool
	asJSON     bool
	socket     string
	peerHost   uint
	endpoint   uint
	tag        string
}

// runPing runs `xam ping`: through a running firmware daemon (--socket),
// over a device (--dev), or in a lab of two hosts built for the run. Its
// flags are checked before it needs privileges.
func runPing(e *env, args []string) error {
	o, err := parsePing(e, args)
	if err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	if o.socket != "" {
		return o.throughDaemon(e)
	}
	if err := o.checkDevice(); err != nil {
		return err
	}
	var mac net.HardwareAddr
	switch {
	case o.peer != "" && o.encap.UDP:
		if o.peerIP, err = netip.ParseAddr(o.peer); err != nil || o.peerIP.Is4() == o.encap.IPv6 {
			return usageError("--peer %q: with --encap %s, the peer's IP address of that family", o.peer, o.encap)
		}
	case o.peer != "":
		if mac, err = net.ParseMAC(o.peer); err != nil {
			return usageError("--peer %q: %v", o.peer, err)
		}
	}
	if err := needPrivileges("xam ping"); err != nil {
		return err
	}
	return o.measure(e, mac)
}

// parsePing parses `xam ping`'s command line.
func parsePing(e *env, args []string) (*pingOptions, error) {
	o := &pingOptions{fs: newFlags(e, "ping", pingUsage)}
	fs := o.fs
	fs.StringVar(&o.api, "api", "raw", "what to ping over: raw (xam frames over AF_XDP), ssam (SSAM request/reply), amii (AM-II on the firmware engine; see --mode), grim (GRIM on the firmware engine: short messages up to 16 bytes, bulk above; see --mode), udp (kernel UDP), packet (AF_PACKET)")
	fs.Float64Var(&o.loss, "loss", 0, "with --api ssam, amii or grim: the fraction of xam frames both hosts' XDP programs drop, in [0, 1)")
	fs.Float64Var(&o.dup, "dup", 0, "with --api ssam, amii or grim: the fraction of xam frames delivered twice, in [0, 1) (the lab gets a switch, whose ports copy them)")
	fs.DurationVar(&o.fwSleep, "fw-sleep", daemon.DefaultSleep, "with --mode firmware: how long the engines poll without work, yielding the CPU, before they block (0: busy-poll)")
	fs.StringVar(&o.fwLayout, "fw-layout", "daemons", "with --mode firmware: where the two hosts' engines run: daemons (an xam fw process per host, as deployed; with --loss the default is group), group (one thread of this process runs both, as one NIC processor with two ports) or threads (a thread each in this process)")
	fs.StringVar(&o.fwCores, "fw-cores", "", "with --mode firmware: pin the engines to CPUs, host a's and host b's lists separated by a slash (e.g. 8/10; with --fw-layout group one list, for the one thread). The CPUs must be in this process's mask: to keep the applications on others, run e.g. taskset -c 2-5,8,10 (the applications then find 2-5 idle)")
	fs.StringVar(&o.engineMode, "mode", "inline", "with --api amii or grim: where the firmware engine runs: inline (in the application's thread) or firmware (a daemon per host, reached through its unix socket)")
	fs.IntVar(&o.cfg.Count, "count", 10000, "measured round trips (at least 1)")
	fs.IntVar(&o.warmup, "warmup", -1, "unmeasured round trips first (default count/10, at most 1000; 0: none)")
	fs.IntVar(&o.cfg.Size, "size", 32, fmt.Sprintf("message bytes, 1..%d (raw/packet: carried in ceil(size/48) cells; amii: up to %d a short message's arguments, above that a medium message of at most %d; grim: default 16, a short message, and bulk above, up to %d)", maxPingSize, 8*amii.MaxArgs, endpoint.MaxMedium, grim.MaxBulk))
	fs.DurationVar(&o.cfg.Timeout, "timeout", time.Second, "a round trip not answered within this is counted lost (positive)")
	fs.StringVar(&o.xdpMode, "xdp-mode", "auto", "XDP attach mode: auto (as xam doctor recommends), generic or native")
	fs.IntVar(&o.cfg.Queue, "queue", 0, "device queue for the AF_XDP socket (--dev)")
	fs.StringVar(&o.dev, "dev", "", "ping over this device instead of a lab built for the run")
	fs.StringVar(&o.zeroCopy, "zerocopy", "auto", "AF_XDP sockets: auto (zero-copy where the driver has it, else copy mode, said in the result), require (zero-copy or fail) or off (copy mode)")
	fs.IntVar(&o.mtu, "mtu", 0, fmt.Sprintf("MTU of the lab built for the run, %d..%d (default 1500; frames past one 4 KB chunk are multi-buffer frames)", 1280, datapath.MaxMTU(true)))
	fs.StringVar(&o.encapFlag, "encap", "raw", "the frames' form: raw (Ethernet frames of xam's EtherType, one LAN) or udp[:PORT] / udp6[:PORT] (xam's UDP form over IPv4 / IPv6, which crosses routers: the lab built for the run then has its two hosts on two subnets joined by a router namespace); with --api raw, amii or grim")
	fs.StringVar(&o.peer, "peer", "", "with --dev: the MAC address of the peer (with --encap udp, its IP address), which runs: xam ping --dev IF --serve")
	fs.BoolVar(&o.serve, "serve", false, "with --dev: answer pings until interrupted, any number of clients in turn (--api ssam: with --peer, the pinging host's MAC)")
	fs.BoolVar(&o.asJSON, "json", false, "print the result as one JSON document, and no progress")
	fs.BoolVar(&o.cfg.Timestamps, "timestamps", false, "with --api raw: read the NIC's receive stamp of every answer, through a device-bound XDP program in native mode (XDP metadata kfuncs, Linux 6.3 and later), and say how many were stamped")
	fs.StringVar(&o.socket, "socket", "", "with --api amii: ping through the running firmware daemon (xam fw) at this socket instead of building a lab")
	fs.UintVar(&o.peerHost, "peer-host", 0, "with --socket (required): the other side's host id, 0..65535, as xam fw stats lists it (the mapper numbers hosts from 0)")
	fs.UintVar(&o.endpoint, "endpoint", uint(daemon.FirstUserEndpoint), "with --socket: the endpoint each side opens (the same number on both hosts)")
	fs.StringVar(&o.tag, "tag", "", "with --socket: the virtual network both sides open, a 64-bit number (0x...), or 'new' with --serve to draw one and print it; default a fixed tag that only root may use (users other than root need a tag of their own: daemon.WeakTag)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return o, nil
}

// check refuses what no ping can run with, whatever it runs over, and
// completes the ping's configuration: its XDP mode, GRIM's default size
// and the warm-up.
func (o *pingOptions) check() error {
	var err error
	if o.cfg.Mode, err = loader.ParseMode(o.xdpMode); err != nil {
		return usageError("--xdp-mode: %v", err)
	}
	zc, err := datapath.ParseZeroCopy(o.zeroCopy)
	if err != nil {
		return usageError("%v", err)
	}
	datapath.SetZeroCopy(zc)
	if o.api == "grim" && !seen(o.fs, "size") {
		o.cfg.Size = 4 * grim.ShortArgs // a short message
	}
	// With --loss and no --fw-layout the daemons run in this process
	// (group), whose XDP programs the ping can set to drop.
	if o.loss > 0 && !seen(o.fs, "fw-layout") {
		o.fwLayout = bench.ShapeGroup.String()
	}
	if o.fwShape, err = bench.ParseShape(o.fwLayout); err != nil {
		return usageError("--fw-layout %v", err)
	}
	switch o.api {
	case "raw", "ssam", "amii", "grim", "udp", "packet":
	default:
		return usageError("--api %q: want raw, ssam, amii, grim, udp or packet", o.api)
	}
	if o.encap, err = datapath.ParseEncap(o.encapFlag); err != nil {
		return usageError("%v", err)
	}
	if o.encap.UDP {
		switch {
		case o.api != "raw" && o.api != "amii" && o.api != "grim":
			return usageError("--encap %s works with --api raw, amii or grim", o.encap)
		case o.engineMode == "firmware":
			return usageError("--encap %s runs the engines inline (--mode inline)", o.encap)
		case o.dup > 0:
			return usageError("--dup needs a switch's ports; --encap %s's lab is routed", o.encap)
		case o.cfg.Timestamps:
			return usageError("--timestamps works with raw frames (--encap raw)")
		}
	}
	switch {
	case o.cfg.Count < 1:
		return usageError("--count %d: want at least 1", o.cfg.Count)
	case o.warmup < -1:
		return usageError("--warmup %d: want 0 or more", o.warmup)
	case o.cfg.Size < 1 || o.cfg.Size > maxPingSize:
		return usageError("--size %d: want 1..%d bytes", o.cfg.Size, maxPingSize)
	case o.cfg.Timeout <= 0:
		return usageError("--timeout %v: want a positive duration, e.g. 1s", o.cfg.Timeout)
	case o.cfg.Queue < 0:
		return usageError("--queue %d: want 0 or more", o.cfg.Queue)
	case o.fwCores != "" && o.engineMode != "firmware":
		return usageError("--fw-cores works with --mode firmware")
	case o.fwSleep < 0:
		return usageError("--fw-sleep %v: want 0 (busy-poll) or a positive duration", o.fwSleep)
	case o.loss > 0 && o.engineMode == "firmware" && o.fwShape == bench.ShapeDaemons:
		return usageError("--loss with --mode firmware needs --fw-layout group or threads: the daemons' XDP programs are their own")
	case o.cfg.Timestamps && o.api != "raw":
		return usageError("--timestamps works with --api raw")
	case o.cfg.Timestamps && o.serve:
		return usageError("--timestamps is for the pinging side: the server only echoes")
	case o.api == "amii" && o.cfg.Size > endpoint.MaxMedium:
		return usageError("--size %d: an AM-II ping is a short message (up to %d bytes) or a medium one (up to %d bytes)", o.cfg.Size, 8*amii.MaxArgs, endpoint.MaxMedium)
	case o.api == "grim" && o.cfg.Size > grim.MaxBulk:
		return usageError("--size %d: a GRIM message carries at most %d bytes", o.cfg.Size, grim.MaxBulk)
	case o.loss != 0 && o.api != "ssam" && o.api != "amii" && o.api != "grim":
		return usageError("--loss works with --api ssam, amii or grim only (the reliable paths); --api %s has no retransmission", o.api)
	case o.loss < 0 || o.loss >= 1:
		return usageError("--loss %v: want a fraction in [0, 1)", o.loss)
	case o.dup != 0 && o.api != "ssam" && o.api != "amii" && o.api != "grim":
		return usageError("--dup works with --api ssam, amii or grim only (the paths that drop duplicates); --api %s would count them as answers", o.api)
	case o.dup < 0 || o.dup >= 1:
		return usageError("--dup %v: want a fraction in [0, 1)", o.dup)
	case o.engineMode != "inline" && o.engineMode != "firmware":
		return usageError("--mode %q: want inline or firmware", o.engineMode)
	case o.engineMode == "firmware" && o.api != "amii" && o.api != "grim":
		return usageError("--mode firmware works with --api amii or grim only")
	}
	if err := o.parseFwCores(); err != nil {
		return err
	}
	switch o.warmup {
	case -1: // the default: bench's
	case 0:
		o.cfg.NoWarmup = true
	default:
		o.cfg.Warmup = o.warmup
	}
	return nil
}

// firmwareLayout is where a firmware-mode ping's engines run: the
// daemons are this program's `xam fw`.
func (o *pingOptions) firmwareLayout() bench.FirmwareLayout {
	return bench.FirmwareLayout{Shape: o.fwShape, Exe: xamExe(), Sleep: sleepConfig(o.fwSleep), Cores: o.fwCoreSets}
}

// parseFwCores parses --fw-cores: one CPU list per host, separated by a
// slash; the one-thread group takes one.
func (o *pingOptions) parseFwCores() error {
	if o.fwCores == "" {
		return nil
	}
	lists := strings.Split(o.fwCores, "/")
	want := 2
	if o.fwShape == bench.ShapeGroup {
		want = 1
	}
	if len(lists) != want {
		return usageError("--fw-cores %q: want %d CPU list(s) separated by '/' for --fw-layout %s, e.g. %s", o.fwCores, want, o.fwShape, map[int]string{1: "2", 2: "2/3"}[want])
	}
	for i, l := range lists {
		cores, err := parseCores(l)
		if err != nil {
			return usageError("--fw-cores: %v", err)
		}
		if len(cores) == 0 {
			return usageError("--fw-cores %q: an empty CPU list", o.fwCores)
		}
		o.fwCoreSets[i] = cores
	}
	return nil
}

// xamExe is this program, whose `xam fw` runs the daemons of the
// measurements that place them as deployed; "" if it cannot be found
// (they then say what they lack, or measure in this process only).
func xamExe() string {
	exe, _ := os.Executable()
	return exe
}

// runConfig returns how the ping ran, as its result records it.
func (o *pingOptions) runConfig() bench.RunConfig {
	run := bench.RunConfig{Device: o.dev, Peer: o.peer, InjectedLoss: o.loss, InjectedDup: o.dup, Encap: o.encap.String(), Routed: o.encap.UDP && o.dev == ""}
	if o.api == "amii" || o.api == "grim" {
		run.EngineMode = o.engineMode
		if o.engineMode == "firmware" {
			run.FWSleepNS = int64(o.fwSleep)
			run.FWLayout = o.fwShape.String()
		}
	}
	return run
}

// throughDaemon pings, or serves pings, through the running firmware
// daemon at --socket, once the options and the peer host are checked.
func (o *pingOptions) throughDaemon(e *env) error {
	switch {
	case o.api != "amii":
		return usageError("--socket works with --api amii (the daemons run AM-II's engine)")
	case o.dev != "" || o.peer != "":
		return usageError("--socket reaches the daemon, which owns the device: no --dev or --peer")
	case !seen(o.fs, "peer-host") || o.peerHost > 65535:
		return usageError("--peer-host N (0..65535) is required with --socket: the other side's host id, as `xam fw stats` lists it")
	case o.endpoint < uint(daemon.FirstUserEndpoint) || o.endpoint > 65535:
		return usageError("--endpoint %d: want %d..65535", o.endpoint, daemon.FirstUserEndpoint)
	case o.loss > 0:
		return usageError("--loss needs the lab built for the run (no --socket)")
	case o.dup > 0:
		return usageError("--dup needs the lab built for the run (no --socket)")
	}
	tag, err := o.daemonTag(e)
	if err != nil {
		return err
	}
	if err := checkPeerHost(o.socket, nicfw.HostID(o.peerHost)); err != nil {
		return err
	}
	return pingDaemon(e, bench.DaemonEndpoint{Socket: o.socket, Endpoint: nicfw.EndpointID(o.endpoint), PeerHost: nicfw.HostID(o.peerHost), Tag: tag},
		o.serve, o.cfg, o.asJSON)
}

// daemonTag returns the virtual network that --tag names: a fixed tag by
// default, or one drawn for a serving side (--tag new), which it prints
// for the pinging side to give.
func (o *pingOptions) daemonTag(e *env) (uint64, error) {
	switch {
	case o.tag == "new" && !o.serve:
		return 0, usageError("--tag new draws the serving side's tag: give --serve, and the drawn tag to the pinging side")
	case o.tag == "new":
		tag := daemon.NewTag()
		fmt.Fprintf(e.stderr, "xam ping: serving on tag %#x: ping with --tag %#x\n", tag, tag)
		return tag, nil
	case o.tag != "":
		t, err := strconv.ParseUint(o.tag, 0, 64)
		if err != nil || t == 0 {
			return 0, usageError("--tag %q: want a 64-bit number other than 0 (0x...), or new", o.tag)
		}
		return t, nil
	}
	return uint64(bench.DaemonTag), nil
}

// checkDevice checks the options of a ping over a device (--dev), and
// that a ping in a lab has none.
func (o *pingOptions) checkDevice() error {
	if o.dev == "" {
		if o.serve || o.peer != "" {
			return usageError("--peer and --serve need --dev")
		}
		if o.mtu != 0 && (o.mtu < 1280 || o.mtu > datapath.MaxMTU(true)) {
			return usageError("--mtu %d: want 1280..%d", o.mtu, datapath.MaxMTU(true))
		}
		return nil
	}
	if o.mtu != 0 {
		return usageError("--mtu sets the lab built for the run; with --dev the device's MTU holds (ip link set %s mtu M)", o.dev)
	}
	if o.api != "raw" && o.api != "ssam" {
		return usageError("--dev works with --api raw or ssam")
	}
	switch {
	case o.api == "raw" && o.serve == (o.peer != ""):
		return usageError("with --dev give either --peer MAC or --serve")
	case o.api == "ssam" && o.peer == "":
		return usageError("with --dev --api ssam give --peer MAC (and --serve on the responding host): an SSAM connection is bound to its peer")
	case o.loss > 0:
		return usageError("--loss needs the lab built for the run (no --dev)")
	case o.dup > 0:
		return usageError("--dup needs the lab built for the run (no --dev)")
	}
	return nil
}

// measure runs the ping, over the device with peer mac or in a lab built
// for the run, and prints its result; an interrupt stops it, and what was
// measured until then is printed.
func (o *pingOptions) measure(e *env, mac net.HardwareAddr) error {
	run := o.runConfig()
	in := watchInterrupts(e, "what was measured follows")
	defer in.release()
	o.cfg.Stop = in.flag()
	if !o.asJSON {
		o.cfg.Progress = progressLine(e)
	}
	if o.dev != "" {
		return o.onDevice(e, mac, run, in)
	}
	return o.inLab(e, run, in)
}

// onDevice pings the peer with MAC mac over the device, or serves pings on
// it.
func (o *pingOptions) onDevice(e *env, mac net.HardwareAddr, run bench.RunConfig, in *interrupts) error {
	link, err := netlink.LinkByName(o.dev)
	if err != nil {
		return fmt.Errorf("device %s: %w", o.dev, err)
	}
	here := datapath.Here(link.Attrs().Index, link.Attrs().HardwareAddr)
	here.Dev, here.Encap = o.dev, o.encap
	run.MTU, run.MultiBuffer = link.Attrs().MTU, datapath.MultiBuffer(link.Attrs().MTU)
	if o.api == "ssam" {
		return pingSSAMDevice(e, here, mac, o.serve, o.dev, o.cfg, run, o.asJSON, in)
	}
	mode, cfg := o.cfg.Mode, loader.Config{DstMAC: here.MAC}
	if o.cfg.Timestamps {
		mode, cfg.RxMetadata, cfg.Ifindex = loader.ModeNative, true, here.Ifindex
	}
	ep, err := datapath.OpenConfig(here, mode, o.cfg.Queue, cfg)
	if err != nil {
		return err
	}
	defer ep.Close()
	if o.serve {
		return serveRaw(e, ep, o.dev, in)
	}
	if ep.UDP != nil {
		if mac, err = ep.UDP.Resolve(o.peerIP); err != nil {
			return err
		}
	}
	pr, err := bench.RawPingFrom(ep, mac, o.cfg)
	if err != nil {
		return err
	}
	pr.Config.Device, pr.Config.Peer = run.Device, run.Peer
	return reportPing(e, pr, run, o.asJSON)
}

// inLab pings between the two hosts of a lab built for the run, removed
// when the ping ends or is interrupted.
func (o *pingOptions) inLab(e *env, run bench.RunConfig, in *interrupts) error {
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("ping%d", os.Getpid()), Switch: o.dup > 0, MTU: o.mtu, Routed: o.encap.UDP})
	if err != nil {
		return err
	}
	in.onExit(l.Down)
	defer l.Down()
	if o.dup > 0 {
		ds, err := datapath.Duplicate(l, o.dup, 0)
		if err != nil {
			return err
		}
		defer ds.Close()
	}
	a, b := l.Hosts[0], l.Hosts[1]
	run.MTU, run.MultiBuffer = a.MTU, datapath.MultiBuffer(a.MTU)
	pa := datapath.OnHost(a)
	pb := datapath.OnHost(b)
	pa.Encap, pb.Encap = o.encap, o.encap
	r, err := pingLab(o.api, o.engineMode, pa, pb, a, b, o.cfg, o.loss, o.firmwareLayout())
	if err != nil {
		return err
	}
	return reportPing(e, r, run, o.asJSON)
}

// reportPing prints result r of a ping that ran as run says, as JSON or
// as text, and returns the error the command ends with (pingOutcome).
func reportPing(e *env, r any, run bench.RunConfig, asJSON bool) error {
	pr := pingResult(r)
	pr.Config.InjectedLoss, pr.Config.InjectedDup = run.InjectedLoss, run.InjectedDup
	pr.Config.EngineMode, pr.Config.FWSleepNS, pr.Config.FWLayout = run.EngineMode, run.FWSleepNS, run.FWLayout
	pr.Config.MTU, pr.Config.MultiBuffer = run.MTU, run.MultiBuffer
	pr.Config.Encap, pr.Config.Routed = run.Encap, run.Routed
	pr.Config.XSKUse = datapath.XSKInUse()
	if asJSON {
		if err := json.NewEncoder(e.stdout).Encode(r); err != nil {
			return err
		}
		return pingOutcome(pr)
	}
	printPing(e, pr)
	switch r := r.(type) {
	case *bench.SSAMResult:
		fmt.Fprintf(e.stdout, "sent %d (warm-up included), delivered %d, duplicates %d, retransmits %d\n", r.Sent, r.Delivered, r.Duplicates, r.Retransmits)
	case *bench.AMIIResult:
		fmt.Fprintf(e.stdout, "sent %d (warm-up included), delivered %d, duplicates %d, retransmits %d\n", r.Sent, r.Delivered, r.Duplicates, r.Retransmits)
		printReturns(e, r.Returned)
	case *bench.GRIMResult:
		fmt.Fprintf(e.stdout, "%s messages: sent %d (warm-up included), delivered %d, duplicates %d, retransmits %d\n", r.Message, r.Sent, r.Delivered, r.Duplicates, r.Retransmits)
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
	if st := r.RxStamps; st != nil {
		switch {
		case st.WithMeta == 0:
			fmt.Fprintf(e.stdout, "RX stamps: no receive metadata reached the socket in %d answers\n", st.Answers)
		case st.Stamped == 0:
			fmt.Fprintf(e.stdout, "RX stamps: no hardware stamp: 0 of %d answers stamped by the NIC (the driver has the kfunc, and gives no stamp; a veth never stamps)\n", st.Answers)
		default:
			fmt.Fprintf(e.stdout, "RX stamps: %d of %d answers stamped by the NIC; system clock at the application less the NIC's stamp, p50 %s (the receive path's time if phc2sys keeps the NIC's clock on the system's)\n",
				st.Stamped, st.Answers, time.Duration(st.NICToAppNs))
		}
	}
	if st := r.RxStamps; st != nil && st.WithMeta > 0 {
		fmt.Fprintf(e.stdout, "RSS hash: %d of %d answers carried the driver's hash (XDP metadata kfunc; a veth computes it in software)\n", st.Hashed, st.Answers)
	}
	if st := r.TxStamps; st != nil {
		switch {
		case st.Stamped == 0:
			fmt.Fprintf(e.stdout, "TX stamps: none of %d requests stamped (AF_XDP TX metadata taken, no stamp written back)\n", st.Requests)
		default:
			fmt.Fprintf(e.stdout, "TX stamps: %d of %d requests stamped; stamp less the application's send (CLOCK_TAI), p50 %s (copy mode: the kernel's clock as the frame's buffer is released)\n",
				st.Stamped, st.Requests, time.Duration(st.AppToTxNs))
		}
		if st.NICToNICNs != 0 {
			fmt.Fprintf(e.stdout, "round trip split: p50 %s from the request's TX stamp to the answer's RX stamp (wire and peer), %s on this host\n",
				time.Duration(st.NICToNICNs), time.Duration(st.HostNs))
		} else if rx := r.RxStamps; rx != nil {
			fmt.Fprintln(e.stdout, "round trip split: none (it needs the NIC's stamps both ways, on one clock)")
		}
	}
	if c := r.Config; c.Encap != "" && c.Encap != "raw" {
		where := ""
		if c.Routed {
			where = ", through the lab's router (two subnets)"
		}
		fmt.Fprintf(e.stdout, "frames: xam's UDP form (--encap %s)%s\n", c.Encap, where)
	}
	if x := r.Config.XSKUse; x.Mode != "" {
		fmt.Fprintf(e.stdout, "AF_XDP sockets: %s mode (--zerocopy %s)%s\n", x.Mode, x.Policy, whyText(x.Why))
	}
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
	r.Config.MTU, r.Config.MultiBuffer = run.MTU, run.MultiBuffer
	r.Config.XSKUse = datapath.XSKInUse()
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
		printReturns(e, r.Returned)
	}
	return pingOutcome(&r.PingResult)
}

// progressLine prints a ping's progress, once a second, on stderr.
func progressLine(e *env) func(bench.Progress) {
	return func(p bench.Progress) {
		fmt.Fprintf(e.stderr, "  %d of %d round trips, %.0f/s, %d lost\n", p.Made, p.Total, float64(p.Made)/p.Elapsed.Seconds(), p.Lost)
	}
}

// printReturns says which of a ping's messages came back to the pinger,
// by reason, if any did.
func printReturns(e *env, returned map[string]int) {
	if len(returned) == 0 {
		return
	}
	var by []string
	for _, reason := range slices.Sorted(maps.Keys(returned)) {
		by = append(by, fmt.Sprintf("%s %d", reason, returned[reason]))
	}
	fmt.Fprintf(e.stdout, "returned to sender: %s\n", strings.Join(by, ", "))
}
