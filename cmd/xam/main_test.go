package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/internal/units"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// xam runs the command in-process and returns its exit status and output.
func xam(t *testing.T, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(&env{stdin: bytes.NewReader(stdin), stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestSegmentReassembleRoundTrip(t *testing.T) {
	for _, n := range []int{1, 40, 41, 1000, 65535} {
		sdu := make([]byte, n)
		for i := range sdu {
			sdu[i] = byte(i * 13)
		}
		code, cells, errs := xam(t, sdu, "cells", "segment", "--vpi", "5", "--vci", "300")
		if code != 0 || len(cells)%53 != 0 {
			t.Fatalf("segment %d bytes: exit %d, %d bytes out, %s", n, code, len(cells), errs)
		}
		code, got, errs := xam(t, []byte(cells), "cells", "reassemble")
		if code != 0 || got != string(sdu) {
			t.Fatalf("reassemble %d bytes: exit %d, %d bytes out, %s", n, code, len(got), errs)
		}
	}
}

func TestSegmentHex(t *testing.T) {
	code, out, errs := xam(t, []byte("hello xam"), "cells", "segment", "--vpi", "1", "--vci", "42", "--hex")
	want := "001002a2ba68656c6c6f2078616d" + strings.Repeat("00", 31) + "00000009a917da06\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d, stderr %q\n got %q\nwant %q", code, errs, out, want)
	}
	code, got, _ := xam(t, []byte(out), "cells", "reassemble", "--hex")
	if code != 0 || got != "hello xam" {
		t.Fatalf("reassemble --hex: exit %d, %q", code, got)
	}
}

func TestReassembleErrors(t *testing.T) {
	_, good, _ := xam(t, bytes.Repeat([]byte("abc"), 40), "cells", "segment", "--vpi", "1", "--vci", "42", "--hex")
	lines := strings.Split(strings.TrimSpace(good), "\n") // 3 cells
	flip := func(line string, byteIdx int, mask byte) string {
		b, _ := hex.DecodeString(line)
		b[byteIdx] ^= mask
		return hex.EncodeToString(b)
	}
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }
	for _, tc := range []struct {
		name   string
		in     []byte
		code   int
		stderr string
		out    string
	}{
		{"single-bit header error is corrected", join(flip(lines[0], 2, 0x10), lines[1], lines[2]), 0,
			"cell 1: corrected a single-bit header error (HEC)", strings.Repeat("abc", 40)},
		{"two-bit header error", join(flip(lines[0], 0, 0x81), lines[1], lines[2]), 1, "HEC error", ""},
		{"payload damage", join(lines[0], flip(lines[1], 30, 1), lines[2]), 1, "AAL5 CRC mismatch", ""},
		{"lost cell", join(lines[0], lines[2]), 1, "AAL5 lost cells", ""},
		{"no end of message", join(lines[0], lines[1]), 1, "input ended inside a PDU on VC 1/42", ""},
		{"bad length field", join(lines[0], lines[1], flip(lines[2], 48, 0x40)), 1, "AAL5 length mismatch: 3 cells received, length 56 needs 2", ""},
		{"not hex", []byte(strings.Repeat("zz", 53) + "\n"), 1, "line 1: not hex", ""},
		{"short line", []byte("0011\n"), 1, "line 1: cells: short cell: 4 hex digits, want 106", ""},
		{"empty input", nil, 1, "no cells on input", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := xam(t, tc.in, "cells", "reassemble", "--hex")
			if code != tc.code || !strings.Contains(errs, tc.stderr) || out != tc.out {
				t.Errorf("exit %d (want %d), stdout %q (want %q), stderr %q (want it to say %q)",
					code, tc.code, out, tc.out, errs, tc.stderr)
			}
		})
	}
	// Binary input that stops mid-cell.
	_, bin, _ := xam(t, []byte("x"), "cells", "segment", "--vpi", "1", "--vci", "1")
	if code, _, errs := xam(t, []byte(bin[:50]), "cells", "reassemble"); code != 1 || !strings.Contains(errs, "input ends after 50 of 53 bytes") {
		t.Errorf("truncated binary cell: exit %d, %q", code, errs)
	}
}

func TestSegmentUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		in     []byte
		code   int
		stderr string
	}{
		{[]string{"cells", "segment", "--vci", "1"}, []byte("x"), 2, "--vpi and --vci are required"},
		{[]string{"cells", "segment", "--vpi", "256", "--vci", "1"}, []byte("x"), 2, "VPI 256 exceeds 255"},
		{[]string{"cells", "segment", "--vpi", "256", "--vci", "1", "--nni"}, []byte("x"), 0, ""},
		{[]string{"cells", "segment", "--vpi", "1", "--vci", "70000"}, []byte("x"), 2, "out of range"},
		{[]string{"cells", "segment", "--vpi", "1", "--vci", "1"}, nil, 1, "SDU length out of range"},
		{[]string{"cells", "segment", "--vpi", "1", "--vci", "1"}, make([]byte, 65536), 1, "SDU length out of range"},
		{[]string{"cells", "segment", "--bogus"}, nil, 2, "flag provided but not defined"},
		{[]string{"cells", "frobnicate"}, nil, 2, "unknown subcommand"},
		{[]string{"nonesuch"}, nil, 2, "unknown command"},
	} {
		code, _, errs := xam(t, tc.in, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.stderr) {
			t.Errorf("xam %v: exit %d (want %d), stderr %q (want %q)", tc.args, code, tc.code, errs, tc.stderr)
		}
	}
}

func TestSegmentERF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.pcap")
	code, _, errs := xam(t, make([]byte, 100), "cells", "segment", "--vpi", "1", "--vci", "2", "--erf", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// pcap header (24) + 3 cell records (16+16+52 each) + 1 AAL5 record (16+16+4+144).
	if want := 24 + 3*(16+16+52) + (16 + 16 + 4 + 144); len(b) != want {
		t.Errorf("capture is %d bytes, want %d", len(b), want)
	}
}

func TestCellsDemo(t *testing.T) {
	code, out, errs := xam(t, nil, "cells", "demo", "--duration", "5ms")
	if code != 0 {
		t.Fatalf("demo: exit %d: %s", code, errs)
	}
	for _, want := range []string{"HEC corrected 1 header; 1 PDU delivered intact", "AAL5 CRC mismatch",
		"AAL5 lost cells", "AAL5 length mismatch", "reassemble"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WRONG") {
		t.Errorf("demo delivered wrong data:\n%s", out)
	}
}

func TestLabUpDown(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("cli%d", os.Getpid())
	t.Cleanup(func() { lab.Down(name) })
	code, out, errs := xam(t, nil, "lab", "up", "--name", name, "--hosts", "3", "--port-rate", "1gbit", "--port-buffer", "64k", "--json")
	if code != 0 {
		t.Fatalf("lab up: exit %d: %s", code, errs)
	}
	var desc struct {
		Name  string
		Hosts []struct {
			NS   string `json:"netns"`
			MAC  string `json:"mac"`
			IPv4 string `json:"ipv4"`
		}
		Switch struct {
			NS       string `json:"netns"`
			PortRate uint64 `json:"port_rate_bps"`
		}
	}
	if err := json.Unmarshal([]byte(out), &desc); err != nil {
		t.Fatalf("lab up --json: %v\n%s", err, out)
	}
	if desc.Name != name || len(desc.Hosts) != 3 || desc.Hosts[2].IPv4 != "10.0.0.3/24" ||
		desc.Switch.NS != "xam-"+name+"-sw" || desc.Switch.PortRate != 1_000_000_000 || len(desc.Hosts[0].MAC) != 17 {
		t.Errorf("lab description %+v", desc)
	}
	if code, _, errs := xam(t, nil, "lab", "up", "--name", name); code != 1 || !strings.Contains(errs, "exists") {
		t.Errorf("second lab up: exit %d, %s", code, errs)
	}
	if code, out, _ := xam(t, nil, "lab", "list"); code != 0 || !strings.Contains(out, name) {
		t.Errorf("lab list: exit %d, %q", code, out)
	}
	if code, _, errs := xam(t, nil, "lab", "down", "--name", name); code != 0 {
		t.Fatalf("lab down: exit %d: %s", code, errs)
	}
	if left, _ := lab.Namespaces("xam-" + name + "-"); len(left) != 0 {
		t.Errorf("namespaces left after lab down: %v", left)
	}
}

// TestHelpCommand: `xam help CMD` is CMD's own help, not the general one.
func TestHelpCommand(t *testing.T) {
	if code, out, _ := xam(t, nil, "help", "ping"); code != 0 || !strings.HasPrefix(out, "usage: xam ping") {
		t.Errorf("help ping: exit %d, %q", code, out)
	}
	if code, _, errs := xam(t, nil, "help", "nosuch"); code != 2 || !strings.Contains(errs, `unknown command "nosuch"`) {
		t.Errorf("help nosuch: exit %d, %q", code, errs)
	}
}

// TestLabDownMissing: removing a lab that is not there is an error, not a
// silent success.
func TestLabDownMissing(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("nosuch%d", os.Getpid())
	if code, out, errs := xam(t, nil, "lab", "down", "--name", name); code != 1 || out != "" || !strings.Contains(errs, "no lab "+name) {
		t.Errorf("lab down --name %s: exit %d, %q, %q", name, code, out, errs)
	}
}

func TestLabUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"lab", "down"}, "give one of --name X, --stale or --all"},
		{[]string{"lab", "down", "--all", "--name", "x"}, "give one of --name X, --stale or --all"},
		{[]string{"lab", "down", "--stale", "--all"}, "give one of --name X, --stale or --all"},
		{[]string{"lab", "up", "--port-rate", "fast"}, "want a rate"},
		{[]string{"lab", "up", "--port-buffer", "lots"}, "want a size"},
		{[]string{"lab"}, "want a subcommand"},
		{[]string{"lab", "down", "--name", "bad!"}, `--name: lab name "bad!"`},
	} {
		if code, _, errs := xam(t, nil, tc.args...); code != 2 || !strings.Contains(errs, tc.stderr) {
			t.Errorf("xam %v: exit %d, %q; want 2 and %q", tc.args, code, errs, tc.stderr)
		}
	}
	if code, out, _ := xam(t, nil, "lab", "-h"); code != 0 || !strings.Contains(out, "usage: xam lab up|down|list") {
		t.Errorf("lab -h: exit %d, %q", code, out)
	}
	for s, want := range map[string]uint64{"100mbit": 100_000_000, "1gbit": 1_000_000_000, "2500": 2500, "10kbps": 10_000} {
		if got, err := units.ParseRate(s); err != nil || got != want {
			t.Errorf("units.ParseRate(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for s, want := range map[string]uint64{"64k": 65536, "1m": 1 << 20, "1500": 1500} {
		if got, err := units.ParseSize(s); err != nil || got != want {
			t.Errorf("units.ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
}

func TestDoctor(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("doc%d", os.Getpid())
	l, err := lab.Up(lab.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	code, out, errs := xam(t, nil, "doctor", "--dev", "eth0", "--netns", l.Hosts[0].NS, "--json")
	if code != 0 {
		t.Fatalf("doctor: exit %d: %s\n%s", code, errs, out)
	}
	var r struct {
		OK     bool
		Device struct {
			Driver      string   `json:"driver"`
			XDPMode     string   `json:"xdp_mode"`
			XSKMode     string   `json:"xsk_mode"`
			MultiBuffer bool     `json:"multi_buffer"`
			MaxMTU      int      `json:"max_mtu"`
			RxMetadata  []string `json:"xdp_rx_metadata"`
			XSKFeatures []string `json:"xsk_features"`
		}
		System struct {
			Kernel      string `json:"kernel"`
			MultiBuffer bool   `json:"multi_buffer"`
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !r.OK || r.Device.Driver != "veth" || r.Device.XDPMode != "generic" || r.Device.XSKMode != "copy" {
		t.Errorf("doctor report %+v", r)
	}
	// veth gives XDP programs a timestamp (none from hardware) and a hash
	// (Linux 6.3 and later), and takes no AF_XDP transmit metadata.
	if !slices.Contains(r.Device.RxMetadata, "timestamp") || !slices.Contains(r.Device.RxMetadata, "hash") || r.Device.XSKFeatures == nil || len(r.Device.XSKFeatures) != 0 {
		t.Errorf("doctor: rx metadata %q, AF_XDP tx metadata %q", r.Device.RxMetadata, r.Device.XSKFeatures)
	}
	// veth in generic mode carries multi-buffer frames wherever the kernel has them.
	mb := netdev.KernelAtLeast(r.System.Kernel, netdev.MultiBufferKernel[0], netdev.MultiBufferKernel[1])
	if r.System.MultiBuffer != mb || r.Device.MultiBuffer != mb || r.Device.MaxMTU != datapath.MaxMTU(mb) {
		t.Errorf("doctor on kernel %s: multi-buffer %v/%v, max MTU %d", r.System.Kernel, r.System.MultiBuffer, r.Device.MultiBuffer, r.Device.MaxMTU)
	}
	// An MTU past what the device's frames may be is a problem with its fix.
	ns, err := lab.OpenNamespace(l.Hosts[0].NS)
	if err != nil {
		t.Fatal(err)
	}
	err = ns.Do(func() error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.LinkSetMTU(link, datapath.MaxMTU(false)+1)
	})
	ns.Close()
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := xam(t, nil, "doctor", "--dev", "eth0", "--netns", l.Hosts[0].NS); mb == (code != 0) || !mb && !strings.Contains(errs, "ip link set eth0 mtu") {
		t.Errorf("doctor at MTU %d (multi-buffer %v): exit %d, %q", datapath.MaxMTU(false)+1, mb, code, errs)
	}
	code, out, _ = xam(t, nil, "doctor")
	if code != 0 || !strings.Contains(out, "ok: xam can run here") {
		t.Errorf("doctor: exit %d\n%s", code, out)
	}
	code, _, errs = xam(t, nil, "doctor", "--dev", "nonesuch0")
	if code != 1 || !strings.Contains(errs, "xam cannot run here") || !strings.Contains(errs, "nonesuch0") {
		t.Errorf("doctor on a missing device: exit %d, %q", code, errs)
	}
}

func TestPingJSON(t *testing.T) {
	testenv.RequirePrivileged(t)
	for _, api := range []string{"raw", "udp", "packet"} {
		code, out, errs := xam(t, nil, "ping", "--api", api, "--count", "300", "--size", "100", "--json")
		if code != 0 {
			t.Fatalf("ping --api %s: exit %d: %s", api, code, errs)
		}
		var r struct {
			API   string           `json:"api"`
			Count int              `json:"count"`
			Size  int              `json:"size"`
			Lost  int              `json:"lost"`
			RTT   map[string]int64 `json:"rtt_ns"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if r.API != api || r.Count != 300 || r.Size != 100 || r.Lost != 0 {
			t.Errorf("ping --api %s: %+v", api, r)
		}
		for _, k := range []string{"p50", "p90", "p99", "p999", "mean", "max"} {
			if r.RTT[k] <= 0 {
				t.Errorf("ping --api %s: rtt_ns.%s = %d", api, k, r.RTT[k])
			}
		}
	}
	// The lab built for the run is gone.
	if left, _ := lab.Namespaces(fmt.Sprintf("xam-ping%d-", os.Getpid())); len(left) != 0 {
		t.Errorf("ping left %v behind", left)
	}
}

// TestPingDevice pings, as a user on real NICs would, from one host of a
// lab with --dev and --peer, while the other host echoes.
func TestPingDevice(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("pdev%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	a, b := l.Hosts[0], l.Hosts[1]
	echo, err := datapath.Open(datapath.OnHost(b), loader.ModeAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() { done <- echo.Echo(&stop) }()
	t.Cleanup(func() {
		stop.Store(true)
		if err := <-done; err != nil {
			t.Errorf("echo: %v", err)
		}
		echo.Close()
	})
	var code int
	var out, errs string
	err = a.Do(func() error {
		code, out, errs = xam(t, nil, "ping", "--dev", "eth0", "--peer", b.MAC.String(), "--count", "200", "--json")
		return nil
	})
	if err != nil || code != 0 || !strings.Contains(out, `"api":"raw"`) || !strings.Contains(out, `"lost":0`) {
		t.Fatalf("ping --dev: %v, exit %d, %s %s", err, code, out, errs)
	}
	for _, args := range [][]string{
		{"ping", "--dev", "eth0"},
		{"ping", "--peer", "02:00:00:00:00:01"},
		{"ping", "--api", "grim", "--size", "60000"},
		{"ping", "--api", "grim", "--socket", "/tmp/x"},
		{"ping", "--api", "raw", "--loss", "0.1"},
		{"ping", "--mode", "sideways"},
		{"ping", "--count", "0"},
	} {
		if code, _, _ := xam(t, nil, args...); code != 2 {
			t.Errorf("xam %v: exit %d, want 2", args, code)
		}
	}
}

func TestDemo(t *testing.T) {
	testenv.RequirePrivileged(t)
	code, out, errs := xam(t, nil, "demo", "--count", "500", "--bulk", "4000000")
	if code != 0 {
		t.Fatalf("demo: exit %d: %s\n%s", code, errs, out)
	}
	for _, want := range []string{"raw", "ssam", "packet", "udp", "1.00×", "0 duplicates", "SSAM bulk write", "MB/s", "The lab is removed"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if left, _ := lab.Namespaces(fmt.Sprintf("xam-demo%d-", os.Getpid())); len(left) != 0 {
		t.Errorf("demo left %v behind", left)
	}
}

func TestBenchSSAM(t *testing.T) {
	testenv.RequirePrivileged(t)
	dir := t.TempDir()
	code, out, errs := xam(t, nil, "bench", "ssam", "--count", "300", "--bulk", "2000000", "--json", "--out", dir)
	if code != 0 {
		t.Fatalf("bench ssam: exit %d: %s\n%s", code, errs, out)
	}
	if left, _ := lab.Namespaces(fmt.Sprintf("xam-bench%d-", os.Getpid())); len(left) != 0 {
		t.Errorf("bench left %v behind", left)
	}
	type cost struct {
		Op        string  `json:"op"`
		Calls     int     `json:"calls"`
		NsPerCall float64 `json:"ns_per_call"`
	}
	var r struct {
		Traps    []cost `json:"traps"`
		Syscalls []cost `json:"syscalls"`
		AM       []cost `json:"am"`
		RTT      []struct {
			Path  string           `json:"path"`
			Count int              `json:"count"`
			RTT   map[string]int64 `json:"rtt_ns"`
			P50R  float64          `json:"p50_vs_raw"`
			P99R  float64          `json:"p99_vs_raw"`
			P50S  float64          `json:"p50_vs_ssam"`
			P99S  float64          `json:"p99_vs_ssam"`
		} `json:"rtt"`
		Bandwidth []struct {
			Path     string  `json:"path"`
			Bytes    int64   `json:"bytes"`
			MBPerSec float64 `json:"mb_per_s"`
			VsSSAM   float64 `json:"vs_ssam"`
		} `json:"bandwidth"`
		Memory map[string]int `json:"memory"`
		Paper  struct {
			RTT  float64 `json:"rtt_us"`
			Bulk float64 `json:"bulk_mb_per_s"`
		} `json:"paper"`
	}
	// One document, with a member per benchmark run and one of the
	// sockets' AF_XDP mode.
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc) != 2 || doc["xsk"] == nil {
		t.Fatalf("%v: %d members\n%s", err, len(doc), out)
	}
	if err := json.Unmarshal(doc["ssam"], &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, table := range []struct {
		name string
		rows []cost
		ops  []string
	}{
		{"traps", r.Traps, []string{"null_syscall", "send", "send16", "recv1", "recv16", "sendrecv"}},
		{"syscalls", r.Syscalls, []string{"null_syscall", "send", "send16", "recv1", "recv16", "sendrecv"}},
		{"am", r.AM, []string{"send_request", "handle_request", "reply", "handle_request_reply", "handle_reply", "explicit_ack", "handle_ack"}},
	} {
		var ops []string
		for _, c := range table.rows {
			ops = append(ops, c.Op)
			if c.Calls < 300 || !(c.NsPerCall > 0) {
				t.Errorf("%s: %+v", table.name, c)
			}
		}
		if strings.Join(ops, " ") != strings.Join(table.ops, " ") {
			t.Errorf("%s: operations %v, want %v", table.name, ops, table.ops)
		}
	}
	var paths []string
	for _, row := range r.RTT {
		paths = append(paths, row.Path)
		if row.Count != 300 || row.RTT["p50"] <= 0 || row.RTT["p99"] < row.RTT["p50"] ||
			!(row.P50R > 0 && row.P99R > 0 && row.P50S > 0 && row.P99S > 0) {
			t.Errorf("rtt: %+v", row)
		}
	}
	if strings.Join(paths, " ") != "raw ssam udp tcp" || r.RTT[0].P50R != 1 || r.RTT[1].P50S != 1 {
		t.Errorf("rtt rows %v (%+v)", paths, r.RTT)
	}
	paths = nil
	for _, row := range r.Bandwidth {
		paths = append(paths, row.Path)
		if row.Bytes <= 0 || row.Bytes > 2000000 || !(row.MBPerSec > 0) || !(row.VsSSAM > 0) {
			t.Errorf("bandwidth: %+v", row)
		}
	}
	if strings.Join(paths, " ") != "ssam tcp udp" || r.Bandwidth[0].Bytes != 2000000 || r.Bandwidth[1].Bytes != 2000000 {
		t.Errorf("bandwidth rows %v (%+v)", paths, r.Bandwidth)
	}
	for _, k := range []string{"window", "max_message", "send_slots", "recv_slots", "pinned_bytes", "per_peer_bytes"} {
		if r.Memory[k] <= 0 {
			t.Errorf("memory.%s = %d", k, r.Memory[k])
		}
	}
	if r.Memory["per_peer_bytes"] >= r.Memory["pinned_bytes"] {
		t.Errorf("memory %v: a further peer pins no less than the first", r.Memory)
	}
	if r.Paper.RTT != 20 || r.Paper.Bulk != 5.5 {
		t.Errorf("paper %+v", r.Paper)
	}
	for _, name := range []string{"ssam-rtt.png", "ssam-rtt.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestBenchEngine runs `xam bench engine` small: every table has its rows,
// each ratio is positive, both labs are gone afterwards, and the text
// output has the three tables.
func TestBenchEngine(t *testing.T) {
	testenv.RequirePrivileged(t)
	code, out, errs := xam(t, nil, "bench", "engine", "--count", "200", "--bulk", "2000000", "--json")
	if code != 0 {
		t.Fatalf("bench engine: exit %d: %s\n%s", code, errs, out)
	}
	for _, prefix := range []string{"xam-bench", "xam-bulk"} {
		if left, _ := lab.Namespaces(fmt.Sprintf("%s%d-", prefix, os.Getpid())); len(left) != 0 {
			t.Errorf("bench left %v behind", left)
		}
	}
	var doc struct {
		Engine struct {
			Rates []struct {
				API      string  `json:"api"`
				PerSec   float64 `json:"per_second"`
				PerFrame float64 `json:"messages_per_frame"`
				Ratio    float64 `json:"ratio_to_raw"`
			} `json:"rates"`
			Pings []struct {
				Name  string  `json:"name"`
				P50   float64 `json:"p50_us"`
				Ratio float64 `json:"p50_ratio"`
			} `json:"pings"`
			Bulk []struct {
				API         string  `json:"api"`
				MBPerSec    float64 `json:"mb_per_s"`
				Ratio       float64 `json:"ratio_to_tcp"`
				MTU         int     `json:"mtu"`
				MultiBuffer bool    `json:"multi_buffer"`
			} `json:"bulk"`
			BulkMTUs      []int   `json:"bulk_mtus"`
			AuthRateRatio float64 `json:"auth_rate_ratio"`
			AuthPingRatio float64 `json:"auth_ping_ratio"`

			TransportAuthRateRatio float64 `json:"transport_auth_rate_ratio"`
			TransportAuthPingRatio float64 `json:"transport_auth_ping_ratio"`
		} `json:"engine"`
		XSK struct {
			Policy string `json:"zerocopy"`
			Mode   string `json:"xsk_mode"`
			Why    string `json:"xsk_mode_why"`
		} `json:"xsk"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if x := doc.XSK; x.Policy != "auto" || x.Mode != "copy" || !strings.Contains(x.Why, "has no AF_XDP zero-copy") {
		t.Errorf("the run's AF_XDP mode: %+v, want copy mode, with why", x)
	}
	r := doc.Engine
	const perMTU = 6 // raw, tcp, ssam, amii, grim cut-through and store-and-forward
	if len(r.Rates) != 8 || len(r.Pings) != 10 || len(r.Bulk) != 3*perMTU || !slices.Equal(r.BulkMTUs, []int{1500, 9000, datapath.MaxMTU(true)}) ||
		r.AuthRateRatio <= 0 || r.AuthPingRatio <= 0 || r.TransportAuthRateRatio <= 0 || r.TransportAuthPingRatio <= 0 {
		t.Fatalf("rows: %d rates, %d pings, %d bulk, MTUs %v\n%s", len(r.Rates), len(r.Pings), len(r.Bulk), r.BulkMTUs, out)
	}
	if r.Rates[0].Ratio != 1 || r.Pings[1].Ratio != 1 {
		t.Errorf("the reference rows' ratios are not 1:\n%s", out)
	}
	for i, x := range r.Bulk {
		mtu := r.BulkMTUs[i/perMTU]
		if x.MTU != mtu || x.MultiBuffer != datapath.MultiBuffer(mtu) || x.MBPerSec <= 0 || (i%perMTU == 1) != (x.API == "tcp") || x.API == "tcp" && x.Ratio != 1 {
			t.Errorf("bulk row %d: %+v at MTU %d", i, x, mtu)
		}
	}
	// One-cell short messages, AM-II's and GRIM's, over SSAM's round
	// trip.
	for i, name := range []string{"amii inline, 16 bytes (one cell)", "grim inline, 16 bytes (one cell)"} {
		if p := r.Pings[6+i]; p.Name != name || p.Ratio != p.P50/r.Pings[1].P50 {
			t.Errorf("ping row %d: %+v, want %q over SSAM's p50 %v", 6+i, p, name, r.Pings[1].P50)
		}
	}
	// Firmware mode as deployed (an xam fw process per host) and in one
	// thread, each over AM-II inline's round trip.
	for i, name := range []string{"amii firmware, daemons", "amii firmware, group"} {
		if p := r.Pings[8+i]; p.Name != name || p.Ratio != p.P50/r.Pings[2].P50 {
			t.Errorf("ping row %d: %+v, want %q over AM-II inline's p50 %v", 8+i, p, name, r.Pings[2].P50)
		}
	}
	for _, x := range r.Rates {
		if x.PerSec <= 0 || x.Ratio <= 0 || x.PerFrame < 1 {
			t.Errorf("rate %+v", x)
		}
	}
	for _, x := range r.Pings {
		if x.P50 <= 0 || x.Ratio <= 0 {
			t.Errorf("ping %+v", x)
		}
	}
	for _, x := range r.Bulk {
		if x.MBPerSec <= 0 || x.Ratio <= 0 {
			t.Errorf("bulk %+v", x)
		}
	}
}

// TestBenchIncast runs `xam bench incast` small on a star lab: a point per
// configuration and number of senders, the plots written, the lab gone.
func TestBenchIncast(t *testing.T) {
	testenv.RequirePrivileged(t)
	dir := t.TempDir()
	code, out, errs := xam(t, nil, "bench", "incast", "--senders", "1,2", "--sizes", "8k", "--bulk", "300000", "--runs", "1", "--json", "--out", dir)
	if code != 0 {
		t.Fatalf("bench incast: exit %d: %s\n%s", code, errs, out)
	}
	if left, _ := lab.Namespaces(fmt.Sprintf("xam-incast%d-", os.Getpid())); len(left) != 0 {
		t.Errorf("bench left %v behind", left)
	}
	var doc struct {
		Incast struct {
			Points []struct {
				Config  string  `json:"config"`
				Senders int     `json:"senders"`
				Mbps    float64 `json:"goodput_mbps"`
				Ratio   float64 `json:"ratio_to_one_sender"`
				Runs    int     `json:"runs"`
			} `json:"points"`
			Latency []struct {
				Case string  `json:"case"`
				P50  float64 `json:"p50_us"`
			} `json:"latency"`
		} `json:"incast"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seen := map[string]bool{}
	best := 0.0 // the best single sender's ratio: 1
	for _, p := range doc.Incast.Points {
		seen[fmt.Sprint(p.Config, p.Senders)] = true
		if p.Mbps <= 0 || p.Ratio <= 0 || p.Senders == 1 && p.Ratio > 1 || p.Runs != 1 {
			t.Errorf("point %+v", p)
		}
		if p.Senders == 1 {
			best = max(best, p.Ratio)
		}
	}
	if best != 1 {
		t.Errorf("the best single sender's ratio is %v, want 1", best)
	}
	if l := doc.Incast.Latency; len(l) != 3 || l[0].P50 <= 0 || l[2].P50 <= 0 {
		t.Errorf("latency without contention: %+v", l)
	}
	if len(doc.Incast.Points) != 8 || len(seen) != 8 {
		t.Errorf("%d points (%v), want off, on, on+etr and tcp with 1 and 2 senders", len(doc.Incast.Points), seen)
	}
	for _, f := range []string{"incast.png", "incast.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestBenchUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"bench"}, "name a benchmark: ssam, logp, amii, permutations, overcommit, incast, grim, engine, hostile or all"},
		{[]string{"bench", "--json"}, "name a benchmark"},
		{[]string{"bench", "nonesuch"}, `unknown benchmark "nonesuch"`},
		{[]string{"bench", "ssam", "--dup", "0.1"}, "--dup: only with hostile"},
		{[]string{"bench", "hostile", "--dup", "1"}, "--dup 1: want a fraction in [0, 1)"},
		{[]string{"bench", "ssam", "--count", "0"}, "--count 0: want at least 1"},
		{[]string{"bench", "ssam", "--bulk", "-1"}, "--bulk -1: want at least 1 byte"},
		{[]string{"bench", "engine", "--out", "somewhere"}, "--out: engine and hostile draw no plots"},
		{[]string{"bench", "all", "ssam"}, "all runs every experiment: name no other benchmark beside it"},
		{[]string{"bench", "all", "--count", "5"}, "--count: not with all"},
		{[]string{"bench", "all", "--mode", "sideways"}, "--mode"},
		{[]string{"bench", "all", "--runs", "2"}, "--runs 2: a report takes 3..20 runs of each experiment"},
		{[]string{"bench", "all", "--runs", "21"}, "--runs 21: a report takes 3..20 runs"},
		{[]string{"bench", "ssam", "--quick"}, "--quick: only with all"},
		{[]string{"bench", "ssam", "--job"}, "--job, --dev, --hostfile and --rank: only with all"},
		{[]string{"bench", "all", "--dev", "eth0"}, "--dev: with --job only"},
		{[]string{"bench", "all", "--job", "--hostfile", "hosts"}, "--hostfile and --rank go together"},
		{[]string{"bench", "ssam", "--mode", "sideways"}, "--mode"},
		{[]string{"bench", "ssam", "--bogus"}, "flag provided but not defined"},
		{[]string{"bench", "incast", "--senders", "0"}, "--senders"},
		{[]string{"bench", "incast", "--sizes", "1x"}, "--sizes"},
		{[]string{"bench", "incast", "--port-rate", "fast"}, "--port-rate"},
		{[]string{"bench", "incast", "--port-buffer", "1"}, "--port-buffer"},
		{[]string{"bench", "incast", "--runs", "0"}, "--runs 0: want 1..100"},
		{[]string{"bench", "--count", "5", "ssam", "extra"}, `unknown benchmark "extra"`},
	} {
		if code, out, errs := xam(t, nil, tc.args...); code != 2 || !strings.Contains(errs, tc.stderr) || out != "" {
			t.Errorf("xam %v: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errs, tc.stderr)
		}
	}
	if code, out, _ := xam(t, nil, "bench", "ssam", "-h"); code != 0 || !strings.Contains(out, "usage: xam bench ssam|logp|amii|permutations|overcommit|incast|grim|engine|hostile|all") {
		t.Errorf("bench -h: exit %d, %q", code, out)
	}
	// A bad flag is one line, not the usage around the error twice.
	if code, out, errs := xam(t, nil, "ping", "--bogus"); code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "see xam ping -h") {
		t.Errorf("ping --bogus: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestBenchSSAMLabExists checks that bench fails clearly, and leaves alone a
// lab it did not build, when its lab's name is taken.
func TestBenchSSAMLabExists(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("bench%d", os.Getpid())
	l, err := lab.Up(lab.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	code, out, errs := xam(t, nil, "bench", "ssam", "--count", "10")
	if code != 1 || out != "" || !strings.Contains(errs, fmt.Sprintf("xam bench: lab %q exists", name)) {
		t.Errorf("bench over an existing lab: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if left, _ := lab.Namespaces("xam-" + name + "-"); len(left) != 2 {
		t.Errorf("the existing lab's namespaces: %v", left)
	}
}

// TestPingSSAMDevice runs the SSAM ping as on two real machines: one host of
// a lab serves with --serve --peer, the other pings with --peer.
func TestPingSSAMDevice(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("sdev%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	a, b := l.Hosts[0], l.Hosts[1]
	server, err := bench.OpenSSAM(datapath.OnHost(b), a.MAC, loader.ModeAuto, ssam.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var counts bench.EchoCounts
	if err := server.Echo(&counts); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() { done <- server.PollUntil(&stop) }()
	t.Cleanup(func() {
		stop.Store(true)
		<-done
		server.Close()
	})
	// One client after another, as users run them: each is answered.
	for client := range 3 {
		var code int
		var out, errs string
		a.Do(func() error {
			code, out, errs = xam(t, nil, "ping", "--api", "ssam", "--dev", "eth0", "--peer", b.MAC.String(), "--count", "300", "--json")
			return nil
		})
		if code != 0 || !strings.Contains(out, `"api":"ssam"`) || !strings.Contains(out, `"lost":0`) {
			t.Fatalf("client %d: ping --api ssam --dev: exit %d, %s %s", client, code, out, errs)
		}
	}
	if got := counts.Delivered(); got != 3*330 || counts.Duplicates() != 0 {
		t.Errorf("server handled %d requests (%d duplicates), want 990 (3 clients of 300 + 30 warm-up), 0", got, counts.Duplicates())
	}
	if code, _, errs := xam(t, nil, "ping", "--api", "ssam", "--dev", "eth0"); code != 2 || !strings.Contains(errs, "--peer") {
		t.Errorf("ssam --dev without --peer: exit %d, %s", code, errs)
	}
}

// TestCapture records an SSAM bulk transfer on a switch port of a lab and
// checks that the capture holds the cells and the reassembled AAL5 PDUs.
func TestCapture(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("cap%d", os.Getpid()), Switch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	a, b := l.Hosts[0], l.Hosts[1]
	path := filepath.Join(t.TempDir(), "ssam.pcap")
	done := make(chan struct{})
	var code int
	var errs string
	go func() {
		defer close(done)
		code, _, errs = xam(t, nil, "capture", "--dev", "p1", "--netns", l.Switch.NS, "--out", path, "--duration", "3s", "--count", "40")
	}()
	time.Sleep(200 * time.Millisecond) // the capture socket is open
	pa := datapath.OnHost(a)
	pb := datapath.OnHost(b)
	if _, err := bench.SSAMBulk(pa, pb, 200_000, 4000, loader.ModeAuto, ssam.Config{}); err != nil {
		t.Fatal(err)
	}
	<-done
	if code != 0 || !strings.Contains(errs, "40 frames") {
		t.Fatalf("capture: exit %d: %s", code, errs)
	}
	var pdus int
	if _, err := fmt.Sscanf(errs[strings.Index(errs, "cells, ")+len("cells, "):], "%d PDUs", &pdus); err != nil || pdus == 0 {
		t.Fatalf("capture reassembled no PDU: %s", errs)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < 40*(16+52) {
		t.Fatalf("capture file: %v, %v", st, err)
	}
	// Wireshark reads it: the bulk PDUs' AAL5 CRCs are correct.
	tshark := testenv.RequireCommand(t, "tshark")
	out, err := exec.Command(tshark, "-r", path, "-o", "erf.aal5_type:Unspecified", "-V").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if good, bad := strings.Count(string(out), "(correct)"), strings.Count(string(out), "(incorrect)"); good != pdus || bad != 0 {
		t.Errorf("tshark: %d correct and %d incorrect AAL5 CRCs, want %d and 0", good, bad, pdus)
	}
	for _, args := range [][]string{{"capture", "--dev", "p1"}, {"capture", "--dev", "p1", "--out", "x", "--duration", "0"}} {
		if code, _, _ := xam(t, nil, args...); code != 2 {
			t.Errorf("xam %v: exit %d, want 2", args, code)
		}
	}
}

// TestStat reads, from the command line, the counters of an XDP program
// another part of the process attached, after a raw ping through it.
func TestStat(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("stat%d", os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	a, b := l.Hosts[0], l.Hosts[1]
	ea, err := datapath.Open(datapath.OnHost(a), loader.ModeAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	eb, err := datapath.Open(datapath.OnHost(b), loader.ModeAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	var stop atomic.Bool
	done := make(chan error, 1)
	go func() { done <- eb.Echo(&stop) }()
	_, err = bench.RawPingFrom(ea, b.MAC, bench.PingConfig{Count: 100})
	stop.Store(true)
	if err := errors.Join(err, <-done); err != nil {
		t.Fatal(err)
	}
	code, out, errs := xam(t, nil, "stat", "--dev", "eth0", "--netns", b.NS, "--json")
	if code != 0 {
		t.Fatalf("stat: exit %d: %s", code, errs)
	}
	var r struct {
		XDP struct {
			Received   uint64 `json:"received"`
			Redirected uint64 `json:"redirected"`
		} `json:"xdp"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.XDP.Received != 110 || r.XDP.Redirected != 110 { // 100 pings and 10 warm-up
		t.Errorf("B's counters %+v, want 110 received and redirected", r.XDP)
	}
	if code, _, errs := xam(t, nil, "stat", "--dev", "lo", "--netns", b.NS); code != 1 || !strings.Contains(errs, "no xam XDP program") {
		t.Errorf("stat on lo: exit %d, %s", code, errs)
	}
}

func TestPingAMII(t *testing.T) {
	testenv.RequirePrivileged(t)
	code, out, errs := xam(t, nil, "ping", "--api", "amii", "--mode", "inline", "--count", "300", "--loss", "0.05", "--json")
	if code != 0 {
		t.Fatalf("ping --api amii: exit %d: %s", code, errs)
	}
	type result struct {
		API        string `json:"api"`
		Lost       int    `json:"lost"`
		Sent       int    `json:"sent"`
		Delivered  int    `json:"delivered"`
		Duplicates int    `json:"duplicates"`
	}
	var r result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.API != "amii" || r.Lost != 0 || r.Duplicates != 0 || r.Delivered != r.Sent || r.Sent != 330 {
		t.Errorf("ping --api amii: %+v", r)
	}
	// The same through two firmware daemons in this process (--loss
	// chooses the group layout: the ping sets their XDP programs' drops),
	// lossy links included.
	code, out, errs = xam(t, nil, "ping", "--api", "amii", "--mode", "firmware", "--count", "300", "--loss", "0.05", "--json")
	r = result{}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Lost != 0 || r.Duplicates != 0 || r.Delivered != r.Sent || r.Sent != 330 ||
		!strings.Contains(out, `"engine_mode":"firmware"`) || !strings.Contains(out, `"fw_layout":"group"`) {
		t.Errorf("ping --api amii --mode firmware: exit %d, %+v: %s %s", code, r, out, errs)
	}
	if code, _, errs := xam(t, nil, "ping", "--api", "amii", "--mode", "firmware", "--fw-layout", "daemons", "--loss", "0.05"); code != 2 ||
		!strings.Contains(errs, "--fw-layout group or threads") {
		t.Errorf("--loss with --fw-layout daemons: exit %d, %s", code, errs)
	}
	if code, _, errs := xam(t, nil, "ping", "--api", "amii", "--mode", "firmware", "--fw-layout", "nic"); code != 2 ||
		!strings.Contains(errs, "want daemons, group or threads") {
		t.Errorf("--fw-layout nic: exit %d, %s", code, errs)
	}
	// Above 64 bytes a ping is a medium message, each way, over lossy
	// links too.
	for _, mode := range []string{"inline", "firmware"} {
		code, out, errs = xam(t, nil, "ping", "--api", "amii", "--mode", mode, "--size", "3000", "--count", "100", "--loss", "0.05", "--json")
		var m struct {
			result
			Size int `json:"size"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &m) != nil || m.Lost != 0 || m.Duplicates != 0 || m.Delivered != m.Sent || m.Sent != 110 || m.Size != 3000 {
			t.Errorf("ping --api amii --mode %s --size 3000: exit %d, %+v: %s %s", mode, code, m, out, errs)
		}
	}
	if code, _, errs := xam(t, nil, "ping", "--api", "raw", "--mode", "firmware"); code != 2 || !strings.Contains(errs, "works with --api amii") {
		t.Errorf("--mode firmware with --api raw: exit %d, %s", code, errs)
	}
	// Duplicated frames (the lab's switch copies a fifth of them) and
	// lost ones: every request handled once, each answered.
	code, out, errs = xam(t, nil, "ping", "--api", "amii", "--count", "300", "--loss", "0.05", "--dup", "0.2", "--json")
	var d struct {
		result
		Retransmits uint64 `json:"retransmits"`
		Config      struct {
			Dup float64 `json:"injected_dup"`
		} `json:"config"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Lost != 0 || d.Duplicates != 0 || d.Delivered != d.Sent || d.Sent != 330 || d.Config.Dup != 0.2 {
		t.Errorf("ping --api amii --dup 0.2: exit %d, %+v: %s %s", code, d, out, errs)
	}
}

// TestPingGRIM: xam ping --api grim, short messages inline and bulk
// messages in firmware mode, over lossy links: every request delivered
// once and answered.
func TestPingGRIM(t *testing.T) {
	testenv.RequirePrivileged(t)
	for _, args := range [][]string{
		{"--mode", "inline"},
		{"--mode", "firmware", "--size", "5000"},
	} {
		args = append([]string{"ping", "--api", "grim", "--count", "300", "--loss", "0.05", "--json"}, args...)
		code, out, errs := xam(t, nil, args...)
		var r struct {
			API        string `json:"api"`
			Message    string `json:"message"`
			Lost       int    `json:"lost"`
			Sent       int    `json:"sent"`
			Delivered  int    `json:"delivered"`
			Duplicates int    `json:"duplicates"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.API != "grim" || r.Lost != 0 || r.Duplicates != 0 ||
			r.Delivered != r.Sent || r.Sent != 330 {
			t.Errorf("xam %v: exit %d, %+v: %s %s", args, code, r, out, errs)
		}
		if want := map[bool]string{false: "short", true: "bulk"}[len(args) > 10]; r.Message != want {
			t.Errorf("xam %v: %s messages, want %s", args, r.Message, want)
		}
	}
}

func TestFwUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"fw"}, "--dev is required"},
		{[]string{"fw", "--dev", "x"}, "--id N (0..65535) is required, or --map"},
		{[]string{"fw", "--dev", "x", "--id", "65536"}, "--id N (0..65535) is required, or --map"},
		{[]string{"fw", "--dev", "x", "--id", "0"}, "give the peers with --host ID=MAC, or --map"},
		{[]string{"fw", "--dev", "x", "--map", "--id", "0"}, "--map assigns this host's id: no --id"},
		{[]string{"fw", "--dev", "x", "--id", "1"}, "--host ID=MAC, or --map"},
		{[]string{"fw", "--dev", "x", "--map", "--host", "2=02:00:00:00:00:02"}, "no --host"},
		{[]string{"fw", "--dev", "x", "--id", "1", "--host", "2=02:00:00:00:00:02", "--map-follow"}, "needs --map"},
		{[]string{"fw", "--dev", "x", "--map", "--probe", "0s"}, "--probe must be positive"},
		{[]string{"fw", "--dev", "x", "--map", "--module", "nonesuch"}, `--module "nonesuch": unknown module`},
		{[]string{"fw", "--dev", "x", "--map", "--module", "coord", "--coord-early", "-1"}, "--coord-early -1"},
	} {
		if code, _, errs := xam(t, nil, tc.args...); code != 2 || !strings.Contains(errs, tc.stderr) {
			t.Errorf("xam %v: exit %d, %q; want 2 and %q", tc.args, code, errs, tc.stderr)
		}
	}
}

// TestBenchAllFailure: in `xam bench all`, an experiment that fails (its
// lab's name is taken) says why in its section, the others run, the
// report is sound, and the exit status says that something failed.
func TestBenchAllFailure(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("perm%d", os.Getpid())
	l, err := lab.Up(lab.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	dir := t.TempDir()
	code, out, errs := xam(t, nil, "bench", "all", "--quick", "--out", dir)
	if code != 1 || !strings.Contains(errs, "1 experiment(s) failed (permutations)") || !strings.Contains(out, "report.md") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	r, _ := readReport(t, dir)
	for _, s := range r.Sections {
		for _, e := range s.Experiments {
			switch {
			case e.Name == "permutations" && (e.Status != "failed" || !strings.Contains(e.Error, "exists")):
				t.Errorf("permutations: %s %q, want failed: lab exists", e.Status, e.Error)
			case e.Name != "permutations" && e.Status != "ok":
				t.Errorf("%s: %s %s", e.Name, e.Status, e.Error)
			}
		}
	}
	if r.Failed != 1 {
		t.Errorf("failed %d", r.Failed)
	}
	if err := bench.CheckReport(dir); err != nil {
		t.Error(err)
	}
}

// readReport reads the report.json of `xam bench all --out dir`, and
// each experiment's status by name.
func readReport(t *testing.T, dir string) (bench.Report, map[string]string) {
	t.Helper()
	var r bench.Report
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	for _, s := range r.Sections {
		for _, e := range s.Experiments {
			status[e.Name] = e.Status
		}
	}
	return r, status
}
