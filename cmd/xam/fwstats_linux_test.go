package main

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/daemon/daemontest"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// TestFwStats asks a running daemon, from the command line, for its host
// table, its endpoints and its counters.
func TestFwStats(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	sock := filepath.Join(t.TempDir(), "fw.sock")
	d, err := daemon.New(la, daemon.Config{Engine: nicfw.EngineConfig{Host: 1},
		Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}, Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	daemontest.Run(t, d)
	c, err := daemon.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ep, err := c.Open(daemon.OpenRequest{Endpoint: daemon.FirstUserEndpoint, Tag: 0x7ed, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()

	// Garbage descriptors from the application are refused by the engine,
	// and the refusals show, by reason and endpoint. Before, firmware mode
	// showed none of them.
	for _, d := range []endpoint.Descriptor{{Class: 9}, {Class: endpoint.ClassShort, Dest: 7}, {Class: endpoint.ClassShort, Dest: 8}} {
		if err := ep.Send(endpoint.RequestSend, &d); err != nil {
			t.Fatal(err)
		}
	}
	var s daemon.Stats
	var code int
	var out, errs string
	for bound := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		code, out, errs = xam(t, nil, "fw", "stats", "--socket", sock, "--json")
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
			t.Fatalf("fw stats --json: exit %d: %s %s", code, out, errs)
		}
		if len(s.List) == 1 && s.List[0].Queues.Refused[endpoint.RefusedDestination] == 2 || time.Now().After(bound) {
			break
		}
	}
	if r := s.List[0].Queues.Refused; r[endpoint.RefusedClass] != 1 || r[endpoint.RefusedDestination] != 2 {
		t.Errorf("refusals %v, want 1 of class and 2 of destination", r)
	}
	if len(s.Hosts) != 2 || len(s.List) != 1 || s.List[0].ID != daemon.FirstUserEndpoint || s.List[0].Tag != 0x7ed || s.List[0].Table != 1 {
		t.Errorf("stats: hosts %v, endpoints %+v", s.Hosts, s.List)
	}
	code, out, errs = xam(t, nil, "fw", "stats", "--socket", sock)
	if code != 0 || !strings.Contains(out, "tag 0x7ed, 1 table entries") || !strings.Contains(out, "2  "+lb.HardwareAddr().String()) ||
		!strings.Contains(out, "2 descriptors refused: destination index out of range") || !strings.Contains(out, "1 descriptors refused: unknown class") {
		t.Errorf("fw stats: exit %d: %s %s", code, out, errs)
	}
	if code, _, errs := xam(t, nil, "fw", "stats", "--socket", filepath.Join(t.TempDir(), "none")); code != 1 || !strings.Contains(errs, "is `xam fw` running") {
		t.Errorf("fw stats without a daemon: exit %d, %s", code, errs)
	}
}

// TestPingDaemons pings from the command line through two firmware
// daemons that already run, as on two machines running `xam fw`: the
// server side answers through its daemon (bench.AMIIDaemonServe, which
// `xam ping --api amii --socket S --serve` runs), the client is the
// command. Every round trip is answered, and each daemon has one endpoint.
func TestPingDaemons(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	socks := daemontest.Start(t, []afxdp.Link{la, lb}, func(nicfw.HostID) nicfw.EngineConfig { return nicfw.EngineConfig{} })
	sa, sb := socks[0], socks[1]
	var stop atomic.Bool
	served := make(chan error, 1)
	var handled int
	go func() {
		var err error
		handled, err = bench.AMIIDaemonServe(bench.DaemonEndpoint{Socket: sb, Endpoint: daemon.FirstUserEndpoint, PeerHost: 1, Tag: bench.DaemonTag}, &stop)
		served <- err
	}()
	// The server's endpoint is open once its daemon lists it.
	for bound := time.Now().Add(20 * time.Second); ; {
		code, out, _ := xam(t, nil, "fw", "stats", "--socket", sb, "--json")
		if code == 0 && strings.Contains(out, `"endpoint_list": [`) {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("the server's endpoint is not open after 20 s: %s", out)
		}
		time.Sleep(time.Millisecond)
	}
	code, out, errs := xam(t, nil, "ping", "--api", "amii", "--socket", sa, "--peer-host", "2", "--count", "300", "--json")
	stop.Store(true)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	var r bench.AMIIResult
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Done != 300 || r.Lost != 0 || r.Config.EngineMode != "firmware" {
		t.Fatalf("ping through the daemons: exit %d: %s %s", code, out, errs)
	}
	if handled != 300+r.Warmup {
		t.Errorf("the server handled %d requests, want %d", handled, 300+r.Warmup)
	}
	for _, args := range [][]string{
		{"ping", "--api", "raw", "--socket", sa},
		{"ping", "--api", "amii", "--socket", sa},
		{"ping", "--api", "amii", "--socket", sa, "--peer-host", "2", "--dev", "eth0"},
	} {
		if code, _, _ := xam(t, nil, args...); code != 2 {
			t.Errorf("xam %v: exit %d, want 2", args, code)
		}
	}
}
