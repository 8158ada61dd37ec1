package bench

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
)

// SSAM's tables (von Eicken et al., section 4; shared/papers/README.md §1)
// with today's numbers, measured in one run between two places (two lab
// hosts), each figure beside its peers:
//
//  1. the traps of the SSAM device over AF_XDP (driver.Open): send one
//     cell (and a batch of sixteen), receive one and sixteen cells,
//     send-receive, and a null system call for reference;
//  2. the same calls on the system-call path (driver.OpenPacket: AF_PACKET,
//     a system call per cell);
//  3. the Active Messages layer over AF_XDP: send request, handle request,
//     reply, handle reply, explicit ack;
//  4. round trips (HDR histograms) of SSAM, raw AF_XDP, kernel UDP and
//     kernel TCP, and the bandwidth of an SSAM bulk write next to a TCP
//     stream and a UDP blast of the same bytes;
//
// and the memory the device pins per peer.
//
// Parts 1 to 3 are measured in ssamtables_costs.go, the kernel's paths of
// part 4 in ssamtables_kernel.go; this file runs them all and writes the
// tables.
//
// How costs are timed. Reading the clock costs tens to hundreds of
// nanoseconds on a VM, as much as some of the calls measured, so no call is
// timed alone: calls run in rounds, the clock is read once per round, and
// each figure is the total time divided by the calls. What a call needs in
// place (cells that have arrived, a window with room) is arranged between
// rounds, untimed; over AF_XDP the XDP program's Redirected counter says
// when the frames a round will receive have reached the socket. Rounds are
// small enough that no ring overflows. The one exception is Token.Reply,
// which runs inside a handler inside Poll: it is bracketed with clock reads,
// and the cost of an empty bracket, measured in the same run, is subtracted.

// ssamTablesConfig configures runSSAMTables.
type ssamTablesConfig struct {
	Count       int   // round trips per path, and calls timed per cost; default 20000
	Bulk        int64 // bytes of each bandwidth run; default 64 MiB
	BulkMessage int   // bytes per SSAM message, TCP write and UDP datagram; default 8192
	RunOptions        // the XDP attach mode, where progress goes, what stops the run
}

func (c *ssamTablesConfig) fill() error {
	if c.Count == 0 {
		c.Count = 20000
	}
	if c.Bulk == 0 {
		c.Bulk = 64 << 20
	}
	if c.BulkMessage == 0 {
		c.BulkMessage = 8192
	}
	switch {
	case c.Count < 1:
		return fmt.Errorf("count %d: want at least 1", c.Count)
	case c.Bulk < 1:
		return fmt.Errorf("bulk %d bytes: want at least 1", c.Bulk)
	case c.BulkMessage < 1 || c.BulkMessage > ssam.MaxBulk || c.BulkMessage > maxDatagram:
		return fmt.Errorf("bulk message of %d bytes out of range [1, %d]", c.BulkMessage, min(ssam.MaxBulk, maxDatagram))
	}
	return nil
}

// maxDatagram is the largest UDP payload over IPv4.
const maxDatagram = 65507

// ssamMessage is the data of the single-cell messages: as in the round
// trips, 32 of the cell's 40 data bytes.
const ssamMessage = 32

// paperInfo is what the SSAM paper reported, for context.
type paperInfo struct {
	Source       string  `json:"source"`
	Setup        string  `json:"setup"`
	RTTMicros    float64 `json:"rtt_us"`        // application to application, small messages
	BulkMBPerSec float64 `json:"bulk_mb_per_s"` // bulk transfer
}

// paperSSAM holds SSAM's headline figures (the paper's abstract).
var paperSSAM = paperInfo{
	Source:       "von Eicken, Avula, Basu, Buch: Low-Latency Communication over ATM Networks using Active Messages (1994)",
	Setup:        "SPARCstations, Fore SBA-100 on the SBus, 140 Mbit/s TAXI, no switch",
	RTTMicros:    20,
	BulkMBPerSec: 5.5,
}

// costRow is one measured operation of parts 1-3: the mean time of Calls
// calls.
type costRow struct {
	Op        string  `json:"op"` // short stable name: send, recv1, recv16, sendrecv, null_syscall, ...
	What      string  `json:"what"`
	Calls     int     `json:"calls"`
	NsPerCall float64 `json:"ns_per_call"`
	Cells     int     `json:"cells_per_call,omitempty"`
	NsPerCell float64 `json:"ns_per_cell,omitempty"`
	Syscalls  int     `json:"syscalls_per_call,omitempty"` // system calls one call makes (system-call path)
	// EmptyReceives counts receive calls in the timed rounds that found
	// nothing (a cell arrived late); their time is in the figure.
	EmptyReceives int `json:"empty_receives,omitempty"`
}

func newCost(op, what string, calls int, total time.Duration, cellsPerCall int) costRow {
	c := costRow{Op: op, What: what, Calls: calls, Cells: cellsPerCall}
	if calls > 0 {
		c.NsPerCall = roundTo(float64(total.Nanoseconds())/float64(calls), 1)
	}
	if cellsPerCall > 0 {
		c.NsPerCell = roundTo(c.NsPerCall/float64(cellsPerCall), 1)
	}
	return c
}

// roundTo rounds v to the given decimal places, for the JSON.
func roundTo(v float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(v*p) / p
}

// rttRow is one path of the round-trip table.
type rttRow struct {
	Path      string  `json:"path"` // raw, ssam, udp, tcp
	What      string  `json:"what"`
	Count     int     `json:"count"`
	Size      int     `json:"size"`
	Lost      int     `json:"lost"`
	RTT       RTT     `json:"rtt_ns"`
	P50VsRaw  float64 `json:"p50_vs_raw"`
	P99VsRaw  float64 `json:"p99_vs_raw"`
	P50VsSSAM float64 `json:"p50_vs_ssam"`
	P99VsSSAM float64 `json:"p99_vs_ssam"`
}

// bandwidthRow is one path of the bandwidth table.
type bandwidthRow struct {
	Path     string  `json:"path"` // ssam, tcp, udp
	What     string  `json:"what"`
	Bytes    int64   `json:"bytes"` // delivered
	Message  int     `json:"message_bytes"`
	Seconds  float64 `json:"seconds"`
	MBPerSec float64 `json:"mb_per_s"`
	VsSSAM   float64 `json:"vs_ssam"`
	Sent     int     `json:"datagrams_sent,omitempty"`
	Received int     `json:"datagrams_received,omitempty"`
	Loss     float64 `json:"loss"` // fraction of datagrams lost (UDP)
}

// ssamMemory is what an SSAM device pins.
type ssamMemory struct {
	Window       int `json:"window"`
	MaxMessage   int `json:"max_message"`
	SendSlots    int `json:"send_slots"` // 48-byte payload slots per connection
	RecvSlots    int `json:"recv_slots"` // 53-byte cells per connection
	PinnedBytes  int `json:"pinned_bytes"`
	PerPeerBytes int `json:"per_peer_bytes"` // what one more connection adds
}

// Setup describes where the tables were measured; the caller fills it in.
type Setup struct {
	Kernel string `json:"kernel,omitempty"`
	CPUs   int    `json:"cpus,omitempty"`
	Lab    string `json:"lab,omitempty"`
	// Hosts are a job's hosts (`xam bench all --job`), by rank; none for
	// a lab on this machine.
	Hosts []HostSetup `json:"hosts,omitempty"`
	// XSK is the AF_XDP mode of the run's sockets (datapath.XSKInUse),
	// and the --zerocopy it ran with.
	XSK *datapath.XSKUse `json:"xsk,omitempty"`
	// Device is what xam doctor says of the labs' devices (each lab host
	// has one of the same kind): driver, XDP and AF_XDP modes,
	// multi-buffer, metadata, queues.
	Device *netdev.Device `json:"device,omitempty"`
}

// ssamTablesResult is the outcome of runSSAMTables (the JSON of `xam bench ssam`).
type ssamTablesResult struct {
	Setup       Setup          `json:"setup"`
	Count       int            `json:"count"`
	Bulk        int64          `json:"bulk_bytes"`
	Traps       []costRow      `json:"traps"`     // part 1: AF_XDP
	Syscalls    []costRow      `json:"syscalls"`  // part 2: AF_PACKET
	AM          []costRow      `json:"am"`        // part 3
	RTT         []rttRow       `json:"rtt"`       // part 4
	Bandwidth   []bandwidthRow `json:"bandwidth"` // part 4
	Memory      ssamMemory     `json:"memory"`
	ClockNs     float64        `json:"clock_bracket_ns"` // an empty time.Now/time.Since bracket
	Paper       paperInfo      `json:"paper"`
	Retransmits uint64         `json:"ssam_retransmits"` // during the AM-layer and round-trip runs
	Interrupted bool           `json:"interrupted,omitempty"`

	hists map[string]*hdrhistogram.Histogram
}

// Histogram returns the round trips recorded for path (raw, ssam, udp,
// tcp), or nil.
func (t *ssamTablesResult) Histogram(path string) *hdrhistogram.Histogram { return t.hists[path] }

// runSSAMTables measures SSAM's tables between a and b, whose IPv4
// addresses are aAddr and bAddr. No XDP program may be attached to either
// device when it starts.
func runSSAMTables(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg ssamTablesConfig) (*ssamTablesResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	t := &ssamTablesResult{Count: cfg.Count, Bulk: cfg.Bulk, Paper: paperSSAM, hists: map[string]*hdrhistogram.Histogram{}}
	// step says what is measured next, or false when the run is to stop.
	step := stepper(cfg.Stop, cfg.Progress, &t.Interrupted)
	var err error
	if !step("trap costs over AF_XDP") {
		return t, nil
	}
	if t.Traps, t.Memory, err = xdpTraps(a, b, cfg); err != nil {
		return nil, fmt.Errorf("trap costs over AF_XDP: %w", err)
	}
	if !step("the same calls through AF_PACKET system calls") {
		return t, nil
	}
	if t.Syscalls, err = packetTraps(a, b, cfg); err != nil {
		return nil, fmt.Errorf("system-call path: %w", err)
	}
	t.Syscalls = append([]costRow{t.Traps[0]}, t.Syscalls...) // the null system call, for reference
	if !step("the Active Messages layer") {
		return t, nil
	}
	if t.AM, t.ClockNs, t.Retransmits, err = amCosts(a, b, cfg); err != nil {
		return nil, fmt.Errorf("AM layer: %w", err)
	}
	if err := t.roundTrips(a, b, aAddr, bAddr, cfg, step); err != nil {
		return nil, err
	}
	if err := t.bandwidth(a, b, aAddr, bAddr, cfg, step); err != nil {
		return nil, err
	}
	return t, nil
}

// roundTrips measures part 4's round trips.
func (t *ssamTablesResult) roundTrips(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg ssamTablesConfig, step func(string) bool) error {
	pc := PingConfig{Count: cfg.Count, Size: ssamMessage, Mode: cfg.Mode}
	paths := []struct {
		path, what string
		ping       func() (*PingResult, error)
	}{
		{"raw", "xam frames over AF_XDP, echoed by the peer", func() (*PingResult, error) { return RawPing(a, b, pc) }},
		{"ssam", "SSAM request/reply, single cell, reliable", func() (*PingResult, error) {
			r, err := SSAMPing(a, b, pc, 0, ssam.Config{})
			if err != nil {
				return nil, err
			}
			t.Retransmits += r.Retransmits
			return &r.PingResult, nil
		}},
		{"udp", "kernel UDP sockets, blocking echo", func() (*PingResult, error) { return UDPPing(a, b, aAddr, bAddr, pc) }},
		{"tcp", "kernel TCP, TCP_NODELAY, blocking echo", func() (*PingResult, error) { return tcpPing(a, b, aAddr, bAddr, pc) }},
	}
	for _, p := range paths {
		if !step(p.path + " round trips") {
			break
		}
		r, err := p.ping()
		if err != nil {
			return fmt.Errorf("%s round trips: %w", p.path, err)
		}
		if r.Histogram().TotalCount() == 0 {
			return fmt.Errorf("%s round trips: all %d lost", p.path, r.Lost)
		}
		t.hists[p.path] = r.Histogram()
		t.RTT = append(t.RTT, rttRow{Path: p.path, What: p.what, Count: r.Count, Size: r.Size, Lost: r.Lost, RTT: r.RTT})
	}
	if len(t.RTT) < 2 {
		return nil // interrupted before the ratios' references
	}
	raw, ssam := t.RTT[0].RTT, t.RTT[1].RTT
	for i := range t.RTT {
		r := &t.RTT[i]
		r.P50VsRaw = ratio(r.RTT.P50, raw.P50)
		r.P99VsRaw = ratio(r.RTT.P99, raw.P99)
		r.P50VsSSAM = ratio(r.RTT.P50, ssam.P50)
		r.P99VsSSAM = ratio(r.RTT.P99, ssam.P99)
	}
	return nil
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return roundTo(float64(a)/float64(b), 3)
}

// bandwidth measures part 4's bandwidth.
func (t *ssamTablesResult) bandwidth(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg ssamTablesConfig, step func(string) bool) error {
	if !step("SSAM bulk write") {
		return nil
	}
	sb, err := SSAMBulk(a, b, cfg.Bulk, cfg.BulkMessage, cfg.Mode, ssam.Config{})
	if err != nil {
		return fmt.Errorf("SSAM bulk write: %w", err)
	}
	if !step("TCP stream") {
		return nil
	}
	tb, err := tcpStream(a, b, aAddr, bAddr, cfg.Bulk, cfg.BulkMessage)
	if err != nil {
		return fmt.Errorf("TCP stream: %w", err)
	}
	if !step("UDP blast") {
		return nil
	}
	ub, err := udpBlast(a, b, aAddr, bAddr, cfg.Bulk, cfg.BulkMessage)
	if err != nil {
		return fmt.Errorf("UDP blast: %w", err)
	}
	row := func(r *BulkResult, what string) bandwidthRow {
		return bandwidthRow{Path: r.API, What: what, Bytes: r.Bytes, Message: r.Message, Seconds: r.Seconds,
			MBPerSec: roundTo(r.MBPerSec, 2), VsSSAM: roundTo(r.MBPerSec/sb.MBPerSec, 3)}
	}
	u := row(&ub.BulkResult, "kernel UDP datagrams sent back to back; goodput at the receiver")
	u.Sent, u.Received, u.Loss = ub.Sent, ub.Received, ub.Loss
	t.Bandwidth = []bandwidthRow{
		row(sb, "SSAM bulk write: AAL5 requests pipelined through the window, acked explicitly"),
		row(tb, "kernel TCP stream of the same bytes"),
		u,
	}
	return nil
}

// Markdown writes the tables as Markdown, one table per part.
func (t *ssamTablesResult) Markdown(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# SSAM's tables, measured today\n\n")
	if t.Interrupted {
		p("**Interrupted**: the tables hold what was measured before the run was stopped.\n\n")
	}
	var where []string
	if t.Setup.Lab != "" {
		where = append(where, t.Setup.Lab)
	}
	if t.Setup.Kernel != "" {
		where = append(where, "Linux "+t.Setup.Kernel)
	}
	if t.Setup.CPUs > 0 {
		where = append(where, fmt.Sprintf("%d CPUs", t.Setup.CPUs))
	}
	if len(where) > 0 {
		p("Measured in one run on %s. ", strings.Join(where, ", "))
	}
	p("Costs are means over rounds of calls timed together (%d calls each). For context, SSAM (1994): %s.\n\n",
		t.Count, t.Paper.Setup)

	p("## 1. Trap costs over AF_XDP\n\n")
	costTable(&b, t.Traps, nil)
	p("\nAF_XDP on veth works in copy mode: a send's sendto(2) runs the kernel's transmit and the peer's XDP and receive copy before it returns.\n\n")

	p("## 2. The same calls through system calls (AF_PACKET, one per cell)\n\n")
	costTable(&b, t.Syscalls, t.Traps)

	p("\n## 3. Active Messages over AF_XDP\n\n")
	p("| operation | ns | what |\n|---|--:|---|\n")
	for _, c := range t.AM {
		p("| %s | %s | %s |\n", c.Op, ns(c.NsPerCall), c.What)
	}
	p("\nMeans over %d requests per kind, in rounds of a full window (%d); the clock bracket subtracted from Token.Reply costs %s ns.\n\n",
		amCalls(t.AM), amWindow, ns(t.ClockNs))

	p("## 4. Round trip and bandwidth on the same lab\n\n")
	p("| path | p50 (µs) | p99 (µs) | p50 / raw | p99 / raw | p50 / SSAM | p99 / SSAM | lost | what |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range t.RTT {
		p("| %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", r.Path, us(r.RTT.P50), us(r.RTT.P99),
			times(r.P50VsRaw), times(r.P99VsRaw), times(r.P50VsSSAM), times(r.P99VsSSAM), r.Lost, r.What)
	}
	p("| SSAM 1994 | ~%g | | | | | | | the paper: application to application, small messages |\n", t.Paper.RTTMicros)
	size, count := 0, 0
	if len(t.RTT) > 0 {
		size, count = t.RTT[0].Size, t.RTT[0].Count
	}
	p("\n%d-byte messages, %d round trips per path.\n\n", size, count)
	p("| path | MB/s | / SSAM | bytes delivered | message (bytes) | seconds | loss | what |\n")
	p("|---|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range t.Bandwidth {
		loss := ""
		if r.Sent > 0 {
			loss = fmt.Sprintf("%.2f%% of %d", 100*r.Loss, r.Sent)
		}
		p("| %s | %.1f | %s | %d | %d | %.3f | %s | %s |\n", r.Path, r.MBPerSec, times(r.VsSSAM), r.Bytes, r.Message, r.Seconds, loss, r.What)
	}
	p("| SSAM 1994 | ~%g | | | | | | the paper: bulk transfer |\n", t.Paper.BulkMBPerSec)

	m := t.Memory
	p("\n## Memory pinned per peer\n\n")
	p("| what | bytes | KiB |\n|---|--:|--:|\n")
	p("| SSAM device with one peer (window %d, %d-byte messages): %d send slots, %d receive cells, and the device's transmit frames | %d | %.0f |\n",
		m.Window, m.MaxMessage, m.SendSlots, m.RecvSlots, m.PinnedBytes, float64(m.PinnedBytes)/1024)
	p("| each further peer: its send area and receive ring | %d | %.0f |\n", m.PerPeerBytes, float64(m.PerPeerBytes)/1024)
	if t.Retransmits > 0 {
		p("\nSSAM retransmitted %d requests during the run.\n", t.Retransmits)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// costTable writes a table of costs; with base, a column of ratios to the
// base cost of the same operation.
func costTable(b *strings.Builder, costs, base []costRow) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	if base == nil {
		p("| operation | ns per call | cells | ns per cell | what |\n|---|--:|--:|--:|---|\n")
	} else {
		p("| operation | ns per call | cells | ns per cell | / AF_XDP | system calls | what |\n|---|--:|--:|--:|--:|--:|---|\n")
	}
	for _, c := range costs {
		cells, perCell := "", ""
		if c.Cells > 0 {
			cells, perCell = fmt.Sprint(c.Cells), ns(c.NsPerCell)
		}
		what := c.What
		if c.EmptyReceives > 0 {
			what += fmt.Sprintf(" (%d empty receives)", c.EmptyReceives)
		}
		if base == nil {
			p("| %s | %s | %s | %s | %s |\n", c.Op, ns(c.NsPerCall), cells, perCell, what)
			continue
		}
		vs, sys := "", ""
		for _, o := range base {
			if o.Op == c.Op && o.NsPerCall > 0 && c.Op != "null_syscall" {
				vs = times(c.NsPerCall / o.NsPerCall)
			}
		}
		if c.Syscalls > 0 {
			sys = fmt.Sprint(c.Syscalls)
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", c.Op, ns(c.NsPerCall), cells, perCell, vs, sys, what)
	}
}

func amCalls(costs []costRow) int {
	for _, c := range costs {
		if c.Op == "handle_request_reply" {
			return c.Calls
		}
	}
	return 0
}

func ns(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func us(v int64) string { return fmt.Sprintf("%.1f", float64(v)/1e3) }

func times(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f×", v)
}
