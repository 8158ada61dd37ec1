package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// runDemo is the main job: it builds a two-host veth lab, measures raw
// AF_XDP, SSAM, AF_PACKET and kernel UDP ping-pong and an SSAM bulk
// transfer side by side, prints one comparison table, and removes the lab.
func runDemo(e *env, args []string) error {
	fs := newFlags(e, "demo", "demo [--count N] [--bulk BYTES]")
	count := fs.Int("count", 20000, "round trips per ping-pong")
	bulk := fs.Int64("bulk", 64<<20, "bytes of the SSAM bulk transfer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *count < 1 {
		return usageError("--count %d: want at least 1", *count)
	}
	if *bulk < 1 {
		return usageError("--bulk %d: want at least 1 byte", *bulk)
	}
	if err := needPrivileges("xam demo"); err != nil {
		return err
	}
	in := watchInterrupts(e, "what was measured follows")
	defer in.release()
	w := e.stdout
	fmt.Fprintln(w, "xam demo: two hosts in network namespaces joined by a veth pair; xam's XDP program")
	fmt.Fprintln(w, "steers ATM-cell frames (EtherType 0x88B5) to AF_XDP sockets, everything else to the kernel.")
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("demo%d", os.Getpid())})
	if err != nil {
		return err
	}
	in.onExit(l.Down)
	defer l.Down()
	a, b := l.Hosts[0], l.Hosts[1]
	pa := datapath.OnHost(a)
	pb := datapath.OnHost(b)
	fmt.Fprintf(w, "lab: %s %v (%v) <-> %s %v (%v)\n\n", a.NS, a.MAC, a.Addr, b.NS, b.MAC, b.Addr)

	cfg := bench.PingConfig{Count: *count, Size: 32, Stop: in.flag()}
	type row struct {
		name, what string
		r          *bench.PingResult
	}
	var rows []row
	run := func(name, what string, f func() (*bench.PingResult, error)) error {
		if in.interrupted() {
			return nil
		}
		fmt.Fprintf(e.stderr, "  measuring %s ...\n", name)
		r, err := f()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if r.Done > r.Lost {
			rows = append(rows, row{name, what, r})
		}
		return nil
	}
	if err := run("raw", "xam frames over AF_XDP, echoed by the peer", func() (*bench.PingResult, error) {
		return bench.RawPing(pa, pb, cfg)
	}); err != nil {
		return err
	}
	var ssamRes *bench.SSAMResult
	if err := run("ssam", "SSAM request/reply, single cell, reliable", func() (*bench.PingResult, error) {
		r, err := bench.SSAMPing(pa, pb, cfg, 0, ssam.Config{})
		if err != nil {
			return nil, err
		}
		ssamRes = r
		return &r.PingResult, nil
	}); err != nil {
		return err
	}
	if err := run("packet", "the same frames through AF_PACKET system calls", func() (*bench.PingResult, error) {
		return bench.PacketPing(pa, pb, cfg)
	}); err != nil {
		return err
	}
	if err := run("udp", "kernel UDP sockets", func() (*bench.PingResult, error) {
		return bench.UDPPing(pa, pb, a.Addr.Addr(), b.Addr.Addr(), cfg)
	}); err != nil {
		return err
	}
	var bk *bench.BulkResult
	if !in.interrupted() {
		fmt.Fprintf(e.stderr, "  measuring the SSAM bulk transfer ...\n")
		if bk, err = bench.SSAMBulk(pa, pb, *bulk, 8192, loader.ModeAuto, ssam.Config{}); err != nil {
			return fmt.Errorf("bulk: %w", err)
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("%w before any round trip was measured", errInterrupted)
	}

	fmt.Fprintf(w, "Round trips of %d-byte messages (%d each, after %d warm-up):\n", cfg.Size, *count, min(*count/10, 1000))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  path\tp50\tp99\tp50 / raw\twhat")
	raw := float64(rows[0].r.RTT.P50)
	us := func(ns int64) string { return fmt.Sprintf("%.1f µs", float64(ns)/1e3) }
	for _, r := range rows {
		what := r.what
		if r.r.Interrupted {
			what += fmt.Sprintf(" (interrupted after %d)", r.r.Done)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%.2f×\t%s\n", r.name, us(r.r.RTT.P50), us(r.r.RTT.P99), float64(r.r.RTT.P50)/raw, what)
	}
	tw.Flush()
	if ssamRes != nil {
		fmt.Fprintf(w, "\nSSAM: %d requests, %d delivered, %d duplicates, %d retransmits.\n", ssamRes.Sent, ssamRes.Delivered, ssamRes.Duplicates, ssamRes.Retransmits)
	}
	if bk != nil {
		fmt.Fprintf(w, "SSAM bulk write: %d MiB in %d-byte AAL5 messages: %.1f MB/s (SSAM, 1994: about 5.5 MB/s).\n",
			bk.Bytes>>20, bk.Message, bk.MBPerSec)
	}
	if in.interrupted() {
		return fmt.Errorf("%w: the table holds what was measured", errInterrupted)
	}
	fmt.Fprintln(w, "\nThe lab is removed. More: xam ping --api raw|ssam|amii|udp|packet, xam bench, xam lab up, xam doctor, xam cells demo.")
	return nil
}
