package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/coord"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/daemon/daemontest"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/xdptest"
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
		!strings.Contains(out, "2 descriptors refused: destination index out of range") || !strings.Contains(out, "1 descriptors refused: unknown class") ||
		!strings.Contains(out, "peer host 2") {
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
	// Nobody serves endpoint 40 on host 2: every request comes back to
	// the pinger, and the ping says why.
	code, out, errs = xam(t, nil, "ping", "--api", "amii", "--socket", sa, "--peer-host", "2", "--endpoint", "40", "--count", "5", "--warmup", "0")
	if !strings.Contains(out, "returned to sender: ") || !strings.Contains(out, " 5\n") {
		t.Errorf("ping to an endpoint nobody serves: exit %d: %s %s", code, out, errs)
	}
	t.Logf("%s", out)
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

// counter returns the value of module name's counter c in s, and whether
// the module reports it.
func counter(s daemon.Stats, name, c string) (int64, bool) {
	for _, m := range s.Modules {
		if m.Name != name {
			continue
		}
		for _, v := range m.Counters {
			if v.Name == c {
				return v.Value, true
			}
		}
	}
	return 0, false
}

// TestFwStatsModules: `xam fw stats` shows the engine's modules and their
// counters, so that a user sees that sender coordination is on and what
// it does. Three daemons run the coordination module with every message
// coordinated; host 2 sends to host 3, whose link's token starts at host
// 1: host 2 asks for it and gets it, and its stats say so. Before, the
// stats showed no module at all.
func TestFwStatsModules(t *testing.T) {
	links := xdptest.Hub(t, 3, memlink.Options{})
	socks := daemontest.Start(t, links, func(nicfw.HostID) nicfw.EngineConfig {
		return nicfw.EngineConfig{Modules: []nicfw.Module{coord.New(coord.Config{Threshold: -1})}}
	})
	var eps []*daemon.Endpoint
	for _, sock := range socks[1:] {
		c, err := daemon.Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ep, err := c.Open(daemon.OpenRequest{Endpoint: daemon.FirstUserEndpoint, Tag: 0xc00d, Table: []nicfw.Name{{Host: 3, Endpoint: daemon.FirstUserEndpoint}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
		eps = append(eps, ep)
	}
	d := endpoint.Descriptor{Class: endpoint.ClassShort, Handler: 1, NArgs: 1}
	if err := eps[0].Send(endpoint.RequestSend, &d); err != nil {
		t.Fatal(err)
	}
	var s daemon.Stats
	for bound := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		code, out, errs := xam(t, nil, "fw", "stats", "--socket", socks[1], "--json")
		if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
			t.Fatalf("fw stats --json: exit %d: %s %s", code, out, errs)
		}
		if n, _ := counter(s, "coord", "grants_received"); n == 1 || time.Now().After(bound) {
			break
		}
	}
	for c, want := range map[string]int64{"threshold_bytes": -1, "link_rate_bps": 0, "grants_received": 1, "holding": 1, "bypassed": 0} {
		if got, ok := counter(s, "coord", c); !ok || got != want {
			t.Errorf("coord's %s: %d (reported: %v), want %d; modules %+v", c, got, ok, want, s.Modules)
		}
	}
	if n, _ := counter(s, "coord", "requests"); n < 1 { // a slow grant is asked for again
		t.Errorf("coord's requests: %d, want at least 1", n)
	}
	if len(s.Modules) != 1 || s.Modules[0].ID != coord.ModuleID || s.Backplane == nil || s.Backplane.ControlRecv == 0 {
		t.Errorf("modules %+v, backplane %+v: want coord (id %d) and the control messages it received", s.Modules, s.Backplane, coord.ModuleID)
	}
	code, out, errs := xam(t, nil, "fw", "stats", "--socket", socks[1])
	// Tables a person reads: a title per part, counters by name in words,
	// those at 0 summed up; no Go struct dumps.
	if code != 0 || !regexp.MustCompile(`module coord \(id 2\):\n\s+threshold_bytes\s+-1\s`).MatchString(out) ||
		!regexp.MustCompile(`grants_received\s+1\s`).MatchString(out) || !strings.Contains(out, "modules' engine work:\n") ||
		!regexp.MustCompile(`transport:\n\s+sent\s+\d+`).MatchString(out) || !strings.Contains(out, "more at 0)") || strings.Contains(out, "{") {
		t.Errorf("fw stats: exit %d: %s %s", code, out, errs)
	}
	t.Logf("xam fw stats:\n%s", out)
	// Host 1 passed the token on.
	if _, out, _ := xam(t, nil, "fw", "stats", "--socket", socks[0]); !regexp.MustCompile(`grants_sent\s+1\s`).MatchString(out) {
		t.Errorf("host 1's stats: %s", out)
	}
}

// TestFwCoordDaemon runs `xam fw --module coord` with pacing on a lab
// host, as a user does, and finds the settings its flags gave in `xam fw
// stats`: the flags reach the module that runs in the daemon.
func TestFwCoordDaemon(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("fwcoord%d", os.Getpid()), Hosts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	h, peer := l.Hosts[0], l.Hosts[1]
	sock := filepath.Join(t.TempDir(), "fw.sock")
	cmd, _, stderr := xamProcess(t, "fw", "--dev", h.Link, "--netns", h.NS, "--id", "1", "--host", "2="+peer.MAC.String(),
		"--socket", sock, "--sleep", "1ms", "--retransmit", "20ms",
		"--module", "coord", "--coord-early", "2000", "--coord-link-rate", "100mbit", "--coord-port-buffer", "16k")
	waitLine(t, stderr, "xam fw: module coord: messages above 4096 bytes wait for the token, released with 2000 bytes left; paced to 100000000 bit/s and a 16384-byte port buffer")
	go func() {
		for stderr.Scan() {
		}
	}()
	var s daemon.Stats
	for bound := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, out, _ := xam(t, nil, "fw", "stats", "--socket", sock, "--json")
		if code == 0 && json.Unmarshal([]byte(out), &s) == nil {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("fw stats: exit %d: %s", code, out)
		}
	}
	for c, want := range map[string]int64{"threshold_bytes": 4096, "early_release_bytes": 2000, "link_rate_bps": 100_000_000, "port_buffer_bytes": 16 << 10} {
		if got, ok := counter(s, "coord", c); !ok || got != want {
			t.Errorf("coord's %s: %d (reported: %v), want %d", c, got, ok, want)
		}
	}
	code, out, errs := xam(t, nil, "fw", "stats", "--socket", sock)
	if code != 0 || !regexp.MustCompile(`module coord \(id 2\):\n\s+threshold_bytes\s+4096\s+early_release_bytes\s+2000\s+link_rate_bps\s+100000000\s*\n\s+port_buffer_bytes\s+16384\s`).MatchString(out) {
		t.Errorf("fw stats: exit %d: %s %s", code, out, errs)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("xam fw after SIGTERM: %v, want exit 0", err)
	}
}

// TestFwGrant: `xam fw grant` lets another user into a virtual network its
// creator (root here) made, and `--revoke` takes it back; run by that other
// user (uid 65534), `xam fw stats` shows root's endpoint but not its tag,
// and `xam fw grant` on root's network is refused. Before, every user read
// every tag in `xam fw stats`, and there was nothing to grant: any user
// opened any tag.
func TestFwGrant(t *testing.T) {
	testenv.RequirePrivileged(t)
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "fw.sock")
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
	ep, err := c.Open(daemon.OpenRequest{Table: []nicfw.Name{{Host: 2, Endpoint: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	tag := fmt.Sprintf("%#x", ep.Tag)

	bin := filepath.Join(dir, "xam.test")
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	nobody := func(args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "XAM_TEST_AS_XAM=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	code, out := nobody("fw", "stats", "--socket", sock)
	t.Logf("xam fw stats as uid 65534:\n%s", out)
	if code != 0 || strings.Contains(out, tag) || !strings.Contains(out, fmt.Sprintf("%d  tag hidden", ep.ID)) {
		t.Errorf("fw stats as uid 65534: exit %d:\n%s", code, out)
	}
	if code, out := nobody("fw", "grant", "--socket", sock, "--tag", tag, "--uid", "65534"); code != 1 || !strings.Contains(out, "permission denied") {
		t.Errorf("fw grant on root's network as uid 65534: exit %d: %s", code, out)
	}

	if code, _, errs := xam(t, nil, "fw", "grant", "--socket", sock, "--tag", tag, "--uid", "65534"); code != 0 {
		t.Fatalf("fw grant: exit %d: %s", code, errs)
	}
	if code, _, errs := xam(t, nil, "fw", "grant", "--socket", sock, "--tag", tag, "--gid", "65533"); code != 0 {
		t.Fatalf("fw grant --gid: exit %d: %s", code, errs)
	}
	code, out, errs := xam(t, nil, "fw", "stats", "--socket", sock)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d  tag %s", ep.ID, tag)) ||
		!strings.Contains(out, fmt.Sprintf("tag %s: 1 endpoints, made by uid 0; open to its groups [0], uids [65534], gids [65533]", tag)) {
		t.Errorf("fw stats after the grants: exit %d: %s %s", code, out, errs)
	}
	if code, _, errs := xam(t, nil, "fw", "grant", "--socket", sock, "--tag", tag, "--uid", "65534", "--revoke"); code != 0 {
		t.Fatalf("fw grant --revoke: exit %d: %s", code, errs)
	}
	if _, out, _ := xam(t, nil, "fw", "stats", "--socket", sock); strings.Contains(out, "uids [65534]") {
		t.Errorf("fw stats after the revoke:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--tag", tag}, 2, "give --uid or --gid"},
		{[]string{"--tag", "x", "--uid", "1"}, 2, `--tag "x"`},
		{[]string{"--tag", tag, "--uid", "1", "--gid", "1"}, 2, "give --uid or --gid"},
		{[]string{"--tag", "0x9e3779b97f4a7c15", "--uid", "1"}, 1, "no such virtual network"},
	} {
		args := append([]string{"fw", "grant", "--socket", sock}, tc.args...)
		if code, _, errs := xam(t, nil, args...); code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("xam %v: exit %d, %q; want %d and %q", args, code, errs, tc.code, tc.want)
		}
	}
}

// TestFwNewNetworkAMII: an AM-II application asks one daemon for a new
// virtual network (amii.DialNew: tag 0 in the open request), gets the tag
// the daemon drew, and its peer joins the network on the other host with
// that tag (amii.Dial); requests and replies flow between them.
func TestFwNewNetworkAMII(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	socks := daemontest.Start(t, []afxdp.Link{la, lb}, func(nicfw.HostID) nicfw.EngineConfig { return nicfw.EngineConfig{} })
	server, tag, err := amii.DialNew(socks[1], amii.VNet{ID: 20, Table: []amii.Name{{Host: 1, Endpoint: 21}}}, amii.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if tag == 0 || daemon.WeakTag(tag) {
		t.Fatalf("a new network's tag %#x", tag)
	}
	client, err := amii.Dial(socks[0], amii.VNet{ID: 21, Tag: tag, Table: []amii.Name{{Host: 2, Endpoint: 20}}}, amii.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var got atomic.Uint64
	reply := client.Register(func(_ *amii.Token, args []uint64) { got.Add(args[0]) })
	echo := server.Register(func(tok *amii.Token, args []uint64) {
		if err := tok.Reply(reply, args[0]+1); err != nil {
			t.Error(err)
		}
	})
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			server.Wait(10 * time.Millisecond)
			server.Poll()
		}
	}()
	for i := range uint64(50) {
		if err := client.Request(0, echo, i); err != nil {
			t.Fatal(err)
		}
	}
	err = client.Drain(10 * time.Second)
	stop.Store(true)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(50*49/2 + 50); got.Load() != want {
		t.Errorf("replies sum to %d, want %d", got.Load(), want)
	}
}
