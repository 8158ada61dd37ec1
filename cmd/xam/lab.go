package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/xam-project/xam/internal/units"
	"github.com/xam-project/xam/lab"
)

func runLab(e *env, args []string) error {
	if len(args) == 0 {
		return usageError("want a subcommand: up, down or list")
	}
	switch args[0] {
	case "up":
		return runLabUp(e, args[1:])
	case "down":
		return runLabDown(e, args[1:])
	case "list":
		return runLabList(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprintln(e.stdout, "usage: xam lab up|down|list [options]; `xam lab up -h` (and down, list) for each one's options")
		return nil
	}
	return usageError("unknown subcommand %q (want up, down or list)", args[0])
}

func runLabUp(e *env, args []string) error {
	fs := newFlags(e, "lab up", "lab up [--hosts N] [--switch] [--port-rate R --port-buffer B] [--name X] [--mtu M] [--queues Q] [--routed] [--fw [--fw-args \"...\"]] [--json]")
	var cfg lab.Config
	fs.StringVar(&cfg.Name, "name", "lab", "lab name: namespaces are xam-NAME-h0, xam-NAME-h1, ... (and xam-NAME-sw)")
	fs.IntVar(&cfg.Hosts, "hosts", 2, "number of host namespaces")
	fs.BoolVar(&cfg.Switch, "switch", false, "join the hosts through a bridge namespace (implied by more than 2 hosts, unless --routed)")
	rate := fs.String("port-rate", "", "shape each switch port toward a host with tbf at this rate (e.g. 100mbit, 1gbit)")
	buffer := fs.String("port-buffer", "", "tbf queue limit of each switch port (e.g. 64k; default 64k with a rate)")
	fs.IntVar(&cfg.MTU, "mtu", 0, "MTU of the links (default the kernel's, 1500)")
	fs.IntVar(&cfg.Queues, "queues", 1, "TX/RX queues per veth end")
	fs.BoolVar(&cfg.IPv6, "ipv6", false, "leave IPv6 enabled on the links")
	fs.BoolVar(&cfg.Routed, "routed", false, "put each host on a subnet of its own (10.0.I.1/24, fd00:0:0:I::1/64), joined by a router namespace (xam-NAME-rt) that forwards between them: for xam's UDP form (--encap udp; with --fw the daemons use it)")
	fw := fs.Bool("fw", false, "start a firmware daemon (xam fw) on each host, its own socket in the lab's state dir, every other host its peer; xam lab down stops them")
	fwArgs := fs.String("fw-args", "", "with --fw: more options for every daemon, e.g. \"--sleep 50us -v\" (see xam fw -h; not --dev, --netns, --id, --host or --socket)")
	asJSON := fs.Bool("json", false, "describe the lab (and its daemons) as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	var extra []string
	if *fwArgs != "" && !*fw {
		return usageError("--fw-args needs --fw")
	}
	if *fw {
		if extra, err = checkFwArgs(*fwArgs); err != nil {
			return err
		}
	}
	if *rate != "" {
		if cfg.PortRate, err = units.ParseRate(*rate); err != nil {
			return usageError("--port-rate: %v", err)
		}
	}
	if *buffer != "" {
		b, err := units.ParseSize(*buffer)
		if err != nil || b > 1<<30 {
			return usageError("--port-buffer %q: want a size such as 64k", *buffer)
		}
		cfg.PortBuffer = uint32(b)
	}
	cfg.Persistent = true
	switch {
	case cfg.Hosts < 2 || cfg.Hosts > 250:
		return usageError("--hosts %d: want 2..250", cfg.Hosts)
	case *buffer != "" && *rate == "":
		return usageError("--port-buffer needs --port-rate (the buffer is the shaper's queue)")
	case cfg.Routed && (cfg.Switch || cfg.PortRate != 0):
		return usageError("--routed joins the hosts through a router: no --switch or --port-rate")
	case cfg.MTU != 0 && (cfg.MTU < 68 || cfg.MTU > 65535):
		return usageError("--mtu %d: want 68..65535", cfg.MTU)
	case cfg.Queues < 1 || cfg.Queues > 64:
		return usageError("--queues %d: want 1..64", cfg.Queues)
	}
	if err := needPrivileges("xam lab up"); err != nil {
		return err
	}
	var in *interrupts
	if *fw {
		// The daemons run detached, out of reach of the terminal's
		// signals: a signal while they start removes them with the lab.
		in = watchInterrupts(e, "removing the lab and its daemons")
		defer in.release()
	}
	l, err := lab.Up(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	var daemons []labDaemon
	if *fw {
		in.onExit(func() error { return lab.Down(l.Name) })
		if daemons, err = startLabDaemons(l, extra, in); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*lab.Lab
			Daemons []labDaemon `json:"daemons,omitempty"`
		}{l, daemons})
	}
	printLab(e.stdout, l)
	if len(daemons) > 0 {
		printLabDaemons(e.stdout, l.Name, daemons)
	}
	fmt.Fprintf(e.stdout, "remove it with: xam lab down --name %s\n", l.Name)
	return nil
}

// printLab describes a lab just built.
func printLab(w io.Writer, l *lab.Lab) {
	fmt.Fprintf(w, "lab %s is up:\n", l.Name)
	for _, h := range l.Hosts {
		fmt.Fprintf(w, "  %s  netns %-16s %s %v %v mtu %d\n", h.Name, h.NS, h.Link, h.MAC, h.Addr, h.MTU)
	}
	if sw := l.Switch; sw != nil {
		shaped := ""
		if sw.PortRate != 0 {
			shaped = fmt.Sprintf(", ports shaped to %d bit/s with %d-byte buffers", sw.PortRate, sw.PortBuffer)
		}
		fmt.Fprintf(w, "  switch netns %s, bridge %s, ports %s%s\n", sw.NS, sw.Bridge, strings.Join(sw.Ports, " "), shaped)
	}
	if rt := l.Router; rt != nil {
		for i, h := range l.Hosts {
			fmt.Fprintf(w, "  %s is also %v, behind router port %s (%v, %v) of netns %s\n", h.Name, h.Addr6, rt.Ports[i], rt.Addrs[i].Addr(), rt.Addrs6[i].Addr(), rt.NS)
		}
	}
}

func runLabList(e *env, args []string) error {
	fs := newFlags(e, "lab list", "lab list [--json]")
	asJSON := fs.Bool("json", false, "list the labs as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	infos, err := lab.Labs()
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(infos)
	}
	for _, i := range infos {
		switch i.State {
		case lab.Owned:
			fmt.Fprintf(e.stdout, "%s\towned by pid %d\n", i.Name, i.Owner)
		case lab.Stale:
			fmt.Fprintf(e.stdout, "%s\tstale: pid %d is gone (xam lab down --stale removes it)\n", i.Name, i.Owner)
		default:
			fmt.Fprintf(e.stdout, "%s\t%s\n", i.Name, i.State)
		}
		printDaemonsListed(e.stdout, i.Daemons)
	}
	return nil
}

func runLabDown(e *env, args []string) error {
	fs := newFlags(e, "lab down", "lab down --name X | --stale | --all")
	name := fs.String("name", "", "the lab to remove")
	stale := fs.Bool("stale", false, "remove the labs left behind by xam runs whose process is gone; labs live processes use stay")
	all := fs.Bool("all", false, "remove every xam lab, also those live processes use")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	given := 0
	for _, b := range []bool{*name != "", *stale, *all} {
		if b {
			given++
		}
	}
	if given != 1 {
		return usageError("give one of --name X, --stale or --all")
	}
	var removed []string
	var err error
	switch {
	case *all:
		var stopErrs []error
		if names, lerr := lab.List(); lerr == nil {
			for _, n := range names {
				stopErrs = append(stopErrs, stopLabDaemons(e, n))
			}
		}
		removed, err = lab.DownAll()
		err = errors.Join(append(stopErrs, err)...)
	case *stale:
		removed, err = lab.DownStale()
	default:
		return downNamed(e, *name)
	}
	for _, n := range removed {
		fmt.Fprintf(e.stdout, "removed lab %s\n", n)
	}
	if len(removed) == 0 && err == nil {
		fmt.Fprintln(e.stdout, "no lab to remove")
	}
	return err
}

// downNamed removes lab name and says so; a name a lab cannot have is a
// usage error, and a lab that is not there an error, not a silent success.
func downNamed(e *env, name string) error {
	if err := lab.CheckName(name); err != nil {
		return usageError("--name: %v", err)
	}
	labs, err := lab.List()
	if err != nil {
		return err
	}
	if !slices.Contains(labs, name) {
		// Daemons whose namespaces somebody else removed still go.
		if ds, _ := lab.Daemons(name); len(ds) == 0 {
			return fmt.Errorf("no lab %s (xam lab list shows them)", name)
		}
	}
	// The daemons go first, while their devices are there, each reported.
	if err := stopLabDaemons(e, name); err != nil {
		return err
	}
	if err := lab.Down(name); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "removed lab %s\n", name)
	return nil
}
