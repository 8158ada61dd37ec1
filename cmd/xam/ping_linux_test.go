package main

import (
	"encoding/json"
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
	"github.com/xam-project/xam/nicfw/mapper"
)

// startMappedDaemons runs a daemon on each link with no host table, as
// `xam fw --map` does, and waits until both hold the same table of both
// hosts. It returns each daemon's socket and id in that table.
func startMappedDaemons(t *testing.T, links ...afxdp.Link) ([]string, []nicfw.HostID) {
	t.Helper()
	dir := t.TempDir()
	var ds []*daemon.Daemon
	var socks []string
	for i, l := range links {
		sock := filepath.Join(dir, string(rune('a'+i))+".sock")
		// The hosts agree within a few probes; a host is taken for
		// vanished only after 10 s of silence, so that a machine loaded
		// by other tests, which may keep a daemon off the processor for
		// longer than a few probes, does not change the table under the
		// pings (a vanished host's messages are returned).
		d, err := daemon.New(l, daemon.Config{Map: &mapper.Config{ProbeInterval: 20 * time.Millisecond, DeadAfter: 10 * time.Second, Privileged: true},
			Socket: sock, Sleep: 50 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		daemontest.Run(t, d)
		ds, socks = append(ds, d), append(socks, sock)
	}
	ids := make([]nicfw.HostID, len(links))
	for bound := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		agreed := true
		var epoch uint64
		for i, d := range ds {
			s, err := d.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Hosts) != len(links) || s.Epoch == 0 || i > 0 && s.Epoch != epoch {
				agreed = false
				break
			}
			epoch = s.Epoch
			for _, h := range s.Hosts {
				if h.MAC == links[i].HardwareAddr().String() {
					ids[i] = h.ID
				}
			}
		}
		if agreed {
			return socks, ids
		}
		if time.Now().After(bound) {
			t.Fatal("the daemons hold no common table of both hosts after 20 s")
		}
	}
}

// TestPingPeerHost: `xam ping --socket S --peer-host N` takes the host
// ids of the daemons' host table, as `xam fw stats` lists them, host 0 of
// the mapper's table included; an id not in the table is "no such host",
// naming the hosts the daemon knows, at once and with exit 1 (not every
// round trip counted lost), when pinging and when serving.
func TestPingPeerHost(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	socks, ids := startMappedDaemons(t, la, lb)
	zero, other := 0, 1
	if ids[1] == 0 {
		zero, other = 1, 0
	}
	if ids[zero] != 0 || ids[other] != 1 {
		t.Fatalf("the mapper's ids %v, want 0 and 1", ids)
	}
	code, out, errs := xam(t, nil, "fw", "stats", "--socket", socks[other])
	if code != 0 || !strings.Contains(out, "\n  0  ") {
		t.Fatalf("fw stats lists no host 0: exit %d: %s %s", code, out, errs)
	}

	// Host 0 serves; the other host pings it by its id, 0.
	var stop atomic.Bool
	served := make(chan error, 1)
	go func() {
		_, err := bench.AMIIDaemonServe(bench.DaemonEndpoint{Socket: socks[zero], Endpoint: daemon.FirstUserEndpoint, PeerHost: ids[other], Tag: bench.DaemonTag}, &stop)
		served <- err
	}()
	for bound := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		code, out, _ := xam(t, nil, "fw", "stats", "--socket", socks[zero], "--json")
		if code == 0 && strings.Contains(out, `"endpoint_list": [`) {
			break
		}
		if time.Now().After(bound) {
			stop.Store(true)
			t.Fatalf("the server's endpoint is not open after 20 s: %s", out)
		}
	}
	code, out, errs = xam(t, nil, "ping", "--api", "amii", "--socket", socks[other], "--peer-host", "0", "--count", "200", "--json")
	stop.Store(true)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	var r bench.AMIIResult
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Done != 200 || r.Lost != 0 {
		for _, s := range socks {
			_, o, _ := xam(t, nil, "fw", "stats", "--socket", s)
			t.Log(o) // the daemons' view: the table's epoch, returns, retransmissions
		}
		t.Fatalf("ping --peer-host 0: exit %d: %s %s", code, out, errs)
	}

	// A host the table does not hold.
	for _, serve := range []bool{false, true} {
		args := []string{"ping", "--api", "amii", "--socket", socks[other], "--peer-host", "7", "--count", "3", "--timeout", "200ms"}
		if serve {
			args = append(args, "--serve")
		}
		// Run in a goroutine: serving a host that is not there would
		// otherwise wait until interrupted, and the test with it.
		type result struct {
			code      int
			out, errs string
		}
		done := make(chan result, 1)
		go func() {
			var r result
			r.code, r.out, r.errs = xam(t, nil, args...)
			done <- r
		}()
		select {
		case r := <-done:
			if r.code != 1 || !strings.Contains(r.errs, "--peer-host 7: no such host: the daemon at "+socks[other]+" knows hosts 0, 1 (mapper epoch ") ||
				strings.Contains(r.out+r.errs, "lost") {
				t.Errorf("xam %v: exit %d: %s %s; want no such host, naming hosts 0 and 1", args, r.code, r.out, r.errs)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("xam %v has not refused the unknown host after 10 s", args)
		}
	}

	// Ids outside 0..65535, or none, are usage errors.
	for _, args := range [][]string{
		{"ping", "--api", "amii", "--socket", socks[other], "--peer-host", "65536"},
		{"ping", "--api", "amii", "--socket", socks[other], "--peer-host", "-1"},
		{"ping", "--api", "amii", "--socket", socks[other]},
	} {
		if code, _, errs := xam(t, nil, args...); code != 2 || !strings.Contains(errs, "peer-host") {
			t.Errorf("xam %v: exit %d, %s; want 2 naming --peer-host", args, code, errs)
		}
	}
	// A tag: a number other than 0, or new when serving.
	for _, args := range [][]string{
		{"ping", "--api", "amii", "--socket", socks[other], "--peer-host", "0", "--tag", "new"},
		{"ping", "--api", "amii", "--socket", socks[other], "--peer-host", "0", "--tag", "0"},
		{"ping", "--api", "amii", "--socket", socks[other], "--peer-host", "0", "--tag", "green"},
	} {
		if code, _, errs := xam(t, nil, args...); code != 2 || !strings.Contains(errs, "--tag") {
			t.Errorf("xam %v: exit %d, %s; want 2 naming --tag", args, code, errs)
		}
	}
}

// TestPingPeerHostStatic: with a static host table (hosts 1 and 2, as
// `xam fw --id 1 --host 2=MAC` builds), host 0 is no such host, and the
// error names the table's hosts.
func TestPingPeerHostStatic(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	socks := daemontest.Start(t, []afxdp.Link{la, lb}, func(nicfw.HostID) nicfw.EngineConfig { return nicfw.EngineConfig{} })
	code, out, errs := xam(t, nil, "ping", "--api", "amii", "--socket", socks[0], "--peer-host", "0", "--count", "3", "--timeout", "200ms")
	if code != 1 || !strings.Contains(errs, "--peer-host 0: no such host: the daemon at "+socks[0]+" knows hosts 1, 2 (static table;") {
		t.Errorf("ping --peer-host 0: exit %d: %s %s", code, out, errs)
	}
	code, _, errs = xam(t, nil, "ping", "--api", "amii", "--socket", filepath.Join(t.TempDir(), "none"), "--peer-host", "2")
	if code != 1 || !strings.Contains(errs, "is `xam fw` running") {
		t.Errorf("ping without a daemon: exit %d, %s", code, errs)
	}
}
