package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xam-project/xam/datapath/encap"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/nicfw/daemon"
)

// `xam lab up --fw`: a firmware daemon (`xam fw`) per host of the lab, each
// a process of this binary detached from the command (lab.StartDaemon), on
// the host's device in its namespace, host i knowing every other host's id
// and MAC, serving its own socket in the lab's state dir. `xam lab list`
// shows them and `xam lab down` stops them.

// daemonStartBound bounds the wait for a daemon's socket to answer: loading
// and attaching the XDP program and opening the AF_XDP socket take a
// fraction of a second, far longer on a loaded machine.
const daemonStartBound = 2 * time.Minute

// labFwSet are the `xam fw` flags that `lab up --fw` sets itself: --fw-args
// may not give them.
var labFwSet = []string{"dev", "netns", "id", "host", "socket", "map", "map-follow", "probe", "job", "hostfile", "rank"}

// labDaemon is a lab host's firmware daemon, as `lab up --fw` reports it.
type labDaemon struct {
	Host   string `json:"host"`
	NS     string `json:"netns"`
	MAC    string `json:"mac"`
	ID     int    `json:"host_id"`
	Socket string `json:"socket"`
	Log    string `json:"log"`
	PID    int    `json:"pid"`
	// Ping pings the next host (by id, around) through this daemon, and
	// Serve answers the previous host's pings: host i's Ping pairs with
	// host i+1's Serve.
	Ping  string `json:"ping"`
	Serve string `json:"serve"`
}

// checkFwArgs checks --fw-args as `xam fw` takes them, before the lab is
// built, and returns them split at white space.
func checkFwArgs(s string) ([]string, error) {
	extra := strings.Fields(s)
	quiet := &env{stdout: io.Discard, stderr: io.Discard}
	own, err := parseFw(quiet, extra)
	if errors.Is(err, flag.ErrHelp) {
		return nil, usageError("--fw-args: -h: see `xam fw -h` for the daemon's options")
	}
	if err != nil {
		return nil, usageError("--fw-args: %v", err)
	}
	for _, f := range labFwSet {
		if own.given[f] {
			return nil, usageError("--fw-args: --%s is the lab's to set (each daemon gets its host's)", f)
		}
	}
	c, err := parseFw(quiet, append([]string{"--dev", "eth0", "--id", "0", "--host", "1=02:00:00:00:00:01"}, extra...))
	if err == nil {
		err = c.checkLimits()
	}
	if err == nil {
		err = c.resolve()
	}
	if err != nil {
		return nil, usageError("--fw-args: %v", err)
	}
	return extra, nil
}

// startLabDaemons starts a firmware daemon on each host of l, with the
// extra `xam fw` arguments, and waits until each answers on its socket. If
// one fails to start, or a signal comes, it removes the lab, daemons and
// all, and says why: a failed daemon's log's last lines.
func startLabDaemons(l *lab.Lab, extra []string, in *interrupts) ([]labDaemon, error) {
	var ds []*lab.Daemon
	err := errInterrupted
	if !in.interrupted() {
		ds, err = spawnLabDaemons(l, extra)
	}
	if err == nil {
		err = waitLabDaemons(ds, in)
	}
	if err != nil {
		if derr := lab.Down(l.Name); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing lab %s: %w", l.Name, derr))
		}
		return nil, err
	}
	out := make([]labDaemon, len(ds))
	n := len(l.Hosts)
	for i, h := range l.Hosts {
		addr := h.MAC.String()
		if l.Router != nil {
			addr = encap.Addr(h.Addr.Addr()).String() // the daemons' host table: the UDP form's address
		}
		out[i] = labDaemon{Host: h.Name, NS: h.NS, MAC: addr, ID: i, Socket: ds[i].Socket, Log: ds[i].Log, PID: ds[i].PID,
			Ping:  fmt.Sprintf("xam ping --api amii --socket %s --peer-host %d", ds[i].Socket, (i+1)%n),
			Serve: fmt.Sprintf("xam ping --api amii --socket %s --peer-host %d --serve", ds[i].Socket, (i+n-1)%n)}
	}
	return out, nil
}

// spawnLabDaemons starts the daemons: host i is `xam fw --id i`, its peers
// every other host.
func spawnLabDaemons(l *lab.Lab, extra []string) ([]*lab.Daemon, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to run its daemons: %w", err)
	}
	var ds []*lab.Daemon
	for i, h := range l.Hosts {
		socket := filepath.Join(lab.StateDir(l.Name), h.Name+".sock")
		args := []string{"fw", "--dev", h.Link, "--netns", h.NS, "--id", strconv.Itoa(i), "--socket", socket}
		if l.Router != nil {
			args = append(args, "--encap", "udp") // across the router
		}
		for j, p := range l.Hosts {
			switch {
			case j == i:
			case l.Router != nil:
				args = append(args, "--host", fmt.Sprintf("%d=%s", j, p.Addr.Addr()))
			default:
				args = append(args, "--host", fmt.Sprintf("%d=%s", j, p.MAC))
			}
		}
		d, err := lab.StartDaemon(l.Name, lab.DaemonSpec{Host: h.Name, Path: exe, Args: append(args, extra...), Socket: socket})
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// waitLabDaemons waits until every daemon answers a stats request on its
// socket, or one exits, the bound passes or a signal comes.
func waitLabDaemons(ds []*lab.Daemon, in *interrupts) error {
	bound := time.Now().Add(daemonStartBound)
	for _, d := range ds {
		for !answers(d.Socket) {
			switch {
			case in.interrupted():
				return errInterrupted
			case d.WaitExit(10 * time.Millisecond):
				return fmt.Errorf("the daemon of %s (pid %d) exited while starting; its log ends:\n%s", d.Host, d.PID, indent(lab.LogTail(d.Log, 10)))
			case time.Now().After(bound):
				return fmt.Errorf("the daemon of %s (pid %d) does not answer on %s after %v; its log ends:\n%s",
					d.Host, d.PID, d.Socket, daemonStartBound, indent(lab.LogTail(d.Log, 10)))
			}
		}
	}
	return nil
}

// answers reports whether a daemon answers a stats request at socket.
func answers(socket string) bool {
	c, err := daemon.Dial(socket)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Stats()
	return err == nil
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

// printLabDaemons prints the daemons of a lab just built, and how to ping
// through them.
func printLabDaemons(w io.Writer, name string, ds []labDaemon) {
	fmt.Fprintf(w, "firmware daemons (xam fw; logs and sockets in %s):\n", lab.StateDir(name))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  HOST\tNETNS\tMAC\tHOST ID\tSOCKET\tPID")
	for _, d := range ds {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%d\n", d.Host, d.NS, d.MAC, d.ID, d.Socket, d.PID)
	}
	tw.Flush()
	fmt.Fprintf(w, "ping from %s to %s through them (serve first, in another shell):\n", ds[0].Host, ds[1].Host)
	fmt.Fprintf(w, "  %s\n  %s\n", ds[1].Serve, ds[0].Ping)
	fmt.Fprintf(w, "`xam fw stats --socket SOCKET` shows a daemon's hosts, endpoints and counters\n")
}

// printDaemonsListed prints a lab's daemons for `lab list`.
func printDaemonsListed(w io.Writer, ds []lab.Daemon) {
	for _, d := range ds {
		state := "alive"
		if !d.Alive {
			state = "dead (xam lab down shows the end of its log)"
		}
		fmt.Fprintf(w, "  %s daemon pid %d %s, socket %s\n", d.Host, d.PID, state, d.Socket)
	}
}

// stopLabDaemons stops lab name's daemons before the lab goes, and says
// what became of each: stopped, killed, or found dead with the end of its
// log.
func stopLabDaemons(e *env, name string) error {
	stopped, err := lab.StopDaemons(name, lab.DaemonGrace)
	for _, s := range stopped {
		switch {
		case s.Early:
			fmt.Fprintf(e.stderr, "xam lab down: the daemon of %s (pid %d) had exited before lab down; its log ended:\n%s\n",
				s.Host, s.PID, indent(s.LogTail))
		case s.Killed:
			fmt.Fprintf(e.stdout, "killed the daemon of %s (pid %d): it did not exit within %v of SIGTERM\n", s.Host, s.PID, lab.DaemonGrace)
		default:
			fmt.Fprintf(e.stdout, "stopped the daemon of %s (pid %d)\n", s.Host, s.PID)
		}
	}
	return err
}
