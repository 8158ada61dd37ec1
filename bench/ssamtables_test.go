package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
)

// fakeTables returns tables with made-up numbers and histograms.
func fakeTables() *ssamTablesResult {
	cost := func(op string, ns float64, cells, sys int) costRow {
		c := costRow{Op: op, What: op + " does things", Calls: 1000, NsPerCall: ns, Cells: cells, Syscalls: sys}
		if cells > 0 {
			c.NsPerCell = ns / float64(cells)
		}
		return c
	}
	null := cost("null_syscall", 250, 0, 0)
	t := &ssamTablesResult{
		Setup: Setup{Kernel: "6.18.0", CPUs: 2, Lab: "a test lab"},
		Count: 1000, Bulk: 1 << 20, Paper: paperSSAM, ClockNs: 31,
		Traps: []costRow{null, cost("send", 2700, 1, 0), cost("recv1", 80, 1, 0), cost("recv16", 480, 16, 0)},
		Syscalls: []costRow{null, cost("send", 2200, 1, 1), cost("recv1", 1200, 1, 1),
			func() costRow { c := cost("recv16", 16000, 16, 16); c.EmptyReceives = 3; return c }()},
		AM: []costRow{cost("send_request", 2900, 0, 0), cost("handle_request_reply", 3100, 0, 0)},
		RTT: []rttRow{
			{Path: "raw", What: "raw frames", Count: 1000, Size: 32, RTT: RTT{P50: 4000, P99: 8000}, P50VsRaw: 1, P99VsRaw: 1, P50VsSSAM: 0.5, P99VsSSAM: 0.8},
			{Path: "ssam", What: "SSAM", Count: 1000, Size: 32, RTT: RTT{P50: 8000, P99: 10000}, P50VsRaw: 2, P99VsRaw: 1.25, P50VsSSAM: 1, P99VsSSAM: 1},
			{Path: "tcp", What: "TCP", Count: 1000, Size: 32, Lost: 1, RTT: RTT{P50: 16500, P99: 36000}, P50VsRaw: 4.126, P99VsRaw: 4.5, P50VsSSAM: 2.0625, P99VsSSAM: 3.6},
		},
		Bandwidth: []bandwidthRow{
			{Path: "ssam", What: "bulk", Bytes: 1 << 20, Message: 8192, Seconds: 0.004, MBPerSec: 262.1, VsSSAM: 1},
			{Path: "udp", What: "blast", Bytes: 1 << 19, Message: 8192, Seconds: 0.002, MBPerSec: 262.1, VsSSAM: 1, Sent: 128, Received: 64, Loss: 0.5},
		},
		Memory: ssamMemory{Window: 8, MaxMessage: 8192, SendSlots: 4096, RecvSlots: 2048, PinnedBytes: 532480, PerPeerBytes: 307200},
		hists:  map[string]*hdrhistogram.Histogram{},
	}
	for i, path := range []string{"raw", "ssam", "udp", "tcp"} {
		h := newHistogram()
		for v := range 2000 {
			h.RecordValue(int64((i+1)*3000 + v*(i+1)*5))
		}
		t.hists[path] = h
	}
	return t
}

func TestSSAMTablesMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := fakeTables().Markdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"Measured in one run on a test lab, Linux 6.18.0, 2 CPUs.",
		"## 1. Trap costs over AF_XDP\n\n| operation | ns per call | cells | ns per cell | what |\n|---|--:|--:|--:|---|\n",
		"| null_syscall | 250 |  |  | null_syscall does things |\n",
		"| recv16 | 480 | 16 | 30 | recv16 does things |\n",
		"## 2. The same calls through system calls",
		"| operation | ns per call | cells | ns per cell | / AF_XDP | system calls | what |",
		"| null_syscall | 250 |  |  |  |  | null_syscall does things |\n", // no ratio to itself
		"| recv1 | 1200 | 1 | 1200 | 15.00× | 1 | recv1 does things |\n",
		"| recv16 | 16000 | 16 | 1000 | 33.33× | 16 | recv16 does things (3 empty receives) |\n",
		"## 3. Active Messages over AF_XDP\n\n| operation | ns | what |\n",
		"| send_request | 2900 | send_request does things |\n",
		"Means over 1000 requests per kind, in rounds of a full window (63); the clock bracket subtracted from Token.Reply costs 31 ns.",
		"| path | p50 (µs) | p99 (µs) | p50 / raw | p99 / raw | p50 / SSAM | p99 / SSAM | lost | what |",
		"| raw | 4.0 | 8.0 | 1.00× | 1.00× | 0.50× | 0.80× | 0 | raw frames |\n",
		"| tcp | 16.5 | 36.0 | 4.13× | 4.50× | 2.06× | 3.60× | 1 | TCP |\n",
		"| SSAM 1994 | ~20 |",
		"32-byte messages, 1000 round trips per path.",
		"| path | MB/s | / SSAM | bytes delivered | message (bytes) | seconds | loss | what |",
		"| ssam | 262.1 | 1.00× | 1048576 | 8192 | 0.004 |  | bulk |\n",
		"| udp | 262.1 | 1.00× | 524288 | 8192 | 0.002 | 50.00% of 128 | blast |\n",
		"| SSAM 1994 | ~5.5 |",
		"| SSAM device with one peer (window 8, 8192-byte messages): 4096 send slots, 2048 receive cells, and the device's transmit frames | 532480 | 520 |\n",
		"| each further peer: its send area and receive ring | 307200 | 300 |\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "retransmitted") {
		t.Error("Markdown mentions retransmissions when there were none")
	}
	// Every table row has as many cells as its header.
	var cols int
	for i, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		n := strings.Count(line, "|")
		if cols == 0 {
			cols = n
		} else if n != cols {
			t.Errorf("line %d has %d cells, its table %d: %q", i+1, n-1, cols-1, line)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + md)
	}
}

func TestPlotRTT(t *testing.T) {
	dir := t.TempDir()
	paths, err := PlotRuns(dir, []Reported{fakeTables()})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("paths %v", paths)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(p) {
		case ".png":
			if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
				t.Errorf("%s is not a PNG", p)
			}
		case ".svg":
			if !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("SSAM")) {
				t.Errorf("%s is not an SVG with a legend", p)
			}
		default:
			t.Errorf("unexpected file %s", p)
		}
	}
	empty := chart{name: "x", kind: cdfChart, series: []series{{name: "empty", hists: []*hdrhistogram.Histogram{newHistogram()}}, {name: "nil"}}}
	if paths, err := drawChart(dir, empty); err != nil || len(paths) != 0 {
		t.Errorf("plotting no round trips: %v, %v; want nothing", paths, err)
	}
	if _, err := PlotRuns(filepath.Join(dir, "no", "such"), []Reported{fakeTables()}); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

func TestCDF(t *testing.T) {
	h := newHistogram()
	for _, v := range []int64{1000, 1000, 2000, 4000} {
		h.RecordValue(v)
	}
	xy := cdf(h)
	if len(xy) < 4 || xy[0].Y != 0 || xy[len(xy)-1].Y != 1 {
		t.Fatalf("cdf %v", xy)
	}
	for i := 1; i < len(xy); i++ {
		if xy[i].X < xy[i-1].X || xy[i].Y < xy[i-1].Y {
			t.Fatalf("cdf not monotone at %d: %v", i, xy)
		}
	}
	// Half the values are at 1 µs.
	for _, p := range xy {
		if p.X >= 1 && p.X < 1.01 && p.Y > 0 && p.Y != 0.5 {
			t.Errorf("F(%.3f µs) = %v, want 0.5", p.X, p.Y)
		}
	}
	if cdf(newHistogram()) != nil {
		t.Error("cdf of an empty histogram")
	}
}

func TestSSAMTablesConfig(t *testing.T) {
	c := ssamTablesConfig{}
	if err := c.fill(); err != nil || c.Count != 20000 || c.Bulk != 64<<20 || c.BulkMessage != 8192 {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for _, c := range []ssamTablesConfig{{Count: -1}, {Bulk: -5}, {BulkMessage: 70000}} {
		if err := c.fill(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestKernelPeers runs the kernel peers that runSSAMTables adds to UDPPing:
// the TCP ping-pong, the TCP stream and the UDP blast.
func TestKernelPeers(t *testing.T) {
	testenv.RequirePrivileged(t)
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	aAddr, bAddr := p.A.Addr.Addr(), p.B.Addr.Addr()
	r, err := tcpPing(a, b, aAddr, bAddr, PingConfig{Count: 500, Size: 32})
	checkResult(t, r, err, 500)
	if r.API != "tcp" || r.Size != 32 {
		t.Errorf("TCPPing: api %q size %d", r.API, r.Size)
	}
	const total = 3<<20 + 100 // not a multiple of the message
	s, err := tcpStream(a, b, aAddr, bAddr, total, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if s.Bytes != total || s.MBPerSec <= 0 || s.Seconds <= 0 {
		t.Errorf("TCPStream: %+v", s)
	}
	u, err := udpBlast(a, b, aAddr, bAddr, total, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if u.Sent != 385 || u.Received < 1 || u.Received > u.Sent || u.Bytes > total || u.MBPerSec <= 0 ||
		u.Loss != 1-float64(u.Received)/float64(u.Sent) {
		t.Errorf("UDPBlast: %+v", u)
	}
	t.Logf("TCP p50 %v; TCP stream %.0f MB/s; UDP blast %.0f MB/s, %.2f%% lost",
		time.Duration(r.RTT.P50), s.MBPerSec, u.MBPerSec, 100*u.Loss)
	// A second TCP ping-pong reuses the port at once.
	r, err = tcpPing(a, b, aAddr, bAddr, PingConfig{Count: 10})
	checkResult(t, r, err, 10)
}
