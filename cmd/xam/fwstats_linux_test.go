package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
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
	d, err := nicfw.NewDaemon(la, nicfw.DaemonConfig{Engine: nicfw.EngineConfig{Host: 1},
		Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}, Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	})
	c, err := nicfw.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ep, err := c.Open(nicfw.OpenRequest{Endpoint: nicfw.FirstUserEndpoint, Tag: 0x7ed, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()

	code, out, errs := xam(t, nil, "fw", "stats", "--socket", sock, "--json")
	var s nicfw.DaemonStats
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("fw stats --json: exit %d: %s %s", code, out, errs)
	}
	if len(s.Hosts) != 2 || len(s.List) != 1 || s.List[0].ID != nicfw.FirstUserEndpoint || s.List[0].Tag != 0x7ed || s.List[0].Table != 1 {
		t.Errorf("stats: hosts %v, endpoints %+v", s.Hosts, s.List)
	}
	code, out, errs = xam(t, nil, "fw", "stats", "--socket", sock)
	if code != 0 || !strings.Contains(out, "tag 0x7ed, 1 table entries") || !strings.Contains(out, "2  "+lb.HardwareAddr().String()) {
		t.Errorf("fw stats: exit %d: %s %s", code, out, errs)
	}
	if code, _, errs := xam(t, nil, "fw", "stats", "--socket", filepath.Join(t.TempDir(), "none")); code != 1 || !strings.Contains(errs, "is `xam fw` running") {
		t.Errorf("fw stats without a daemon: exit %d, %s", code, errs)
	}
}
