//go:build linux

package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// runDaemon starts a daemon on link in a goroutine of its own and stops it
// in t's cleanup. The socket lives in a directory others may traverse.
func runDaemon(t *testing.T, link afxdp.Link, cfg Config) (*Daemon, string) {
	t.Helper()
	d, path, _ := startDaemon(t, link, cfg)
	return d, path
}

// startDaemon is runDaemon that also returns a function that stops the
// daemon before the test ends.
func startDaemon(t *testing.T, link afxdp.Link, cfg Config) (*Daemon, string, func()) {
	t.Helper()
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(openDir(t), "fw.sock")
	}
	d, err := New(link, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("daemon: %v", err)
		}
	})
	t.Cleanup(stop)
	return d, cfg.Socket, stop
}

// openDir returns a new directory that every user may traverse (t.TempDir's
// parent is private), removed in t's cleanup.
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "xam-fw-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dial connects to the daemon at path and opens an endpoint.
func dial(t *testing.T, path string, req OpenRequest) *Endpoint {
	t.Helper()
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ep, err := c.Open(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 5 s", what)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func daemonPair(t *testing.T, sleep time.Duration, giveUp time.Duration) (da, db *Daemon, sa, sb string) {
	return daemonPairWith(t, sleep, giveUp, false)
}

// daemonPairWith is daemonPair; with group the two daemons run in one
// engine thread (RunGroup), as a lab's hosts on a machine of few cores.
func daemonPairWith(t *testing.T, sleep time.Duration, giveUp time.Duration, group bool) (da, db *Daemon, sa, sb string) {
	return daemonPairConfig(t, sleep, transport.Config{GiveUpAfter: giveUp}, group)
}

// daemonPairConfig is daemonPairWith with the engines' transport
// configuration tc.
func daemonPairConfig(t *testing.T, sleep time.Duration, tc transport.Config, group bool) (da, db *Daemon, sa, sb string) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	ca := Config{Engine: nicfw.EngineConfig{Host: 1, Transport: tc}, Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}, Sleep: sleep}
	cb := Config{Engine: nicfw.EngineConfig{Host: 2, Transport: tc}, Hosts: map[nicfw.HostID]net.HardwareAddr{1: la.HardwareAddr()}, Sleep: sleep}
	if !group {
		da, sa = runDaemon(t, la, ca)
		db, sb = runDaemon(t, lb, cb)
		return da, db, sa, sb
	}
	dir := openDir(t)
	ca.Socket, cb.Socket = filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	if da, err = New(la, ca); err != nil {
		t.Fatal(err)
	}
	if db, err = New(lb, cb); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunGroup(ctx, da, db) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("daemons: %v", err)
		}
	})
	return da, db, ca.Socket, cb.Socket
}

// Applications reach the engines through the daemons' sockets; a thread
// blocked in Wait wakes when a message arrives, with the engines sleeping
// on their eventfds when idle (and woken by the applications' kicks); the
// same with both daemons' engines in one thread (RunGroup).
func TestDaemonBlockingWait(t *testing.T) {
	for _, c := range []struct {
		sleep time.Duration
		group bool
	}{{0, false}, {50 * time.Microsecond, false}, {0, true}, {50 * time.Microsecond, true}} {
		sleep := c.sleep
		t.Run(fmt.Sprintf("sleep=%v,group=%v", c.sleep, c.group), func(t *testing.T) {
			da, _, sa, sb := daemonPairWith(t, sleep, 0, c.group)
			client := dial(t, sa, OpenRequest{Tag: 9, Table: []nicfw.Name{{Host: 2, Endpoint: 20}}})
			server := dial(t, sb, OpenRequest{Endpoint: 20, Tag: 9, Table: []nicfw.Name{{Host: 1, Endpoint: client.ID}}})
			if client.ID < FirstUserEndpoint || client.Host != 1 || server.ID != 20 || server.Host != 2 {
				t.Fatalf("endpoints %d@%d, %d@%d", client.ID, client.Host, server.ID, server.Host)
			}
			pingPong(t, client, server, 300, 50, nil)
			if sleep > 0 {
				// Idle, the engine sleeps: at once on a quiet machine (the
				// pauses above are 2 ms), later on a loaded one, where the
				// engine thread may get no processor for a whole pause.
				// Then messages wake it: the application's kick.
				waitFor(t, "the engine to sleep", func() bool { s, err := da.Stats(); return err == nil && s.Sleeps > 0 })
				pingPong(t, client, server, 20, 5, nil)
			}
			s, err := da.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("daemon A: sleeps %d, engine %+v", s.Sleeps, s.Engine)
		})
	}
}

// An application's endpoints live as long as its connection: closing it
// (or the process dying) closes them, and messages sent to them afterwards
// return to their senders as "endpoint closed".
func TestDaemonConnectionClosed(t *testing.T) {
	da, db, sa, sb := daemonPair(t, 0, 0)
	client := dial(t, sa, OpenRequest{Tag: 9, Table: []nicfw.Name{{Host: 2, Endpoint: 30}}})
	c, err := Dial(sb)
	if err != nil {
		t.Fatal(err)
	}
	server, err := c.Open(OpenRequest{Endpoint: 30, Tag: 9, Table: []nicfw.Name{{Host: 1, Endpoint: client.ID}}})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close() // the descriptors and the mapping; the daemon closed the endpoint already
	if s, _ := db.Stats(); s.Endpoints != 1 || s.Connections != 1 {
		t.Fatalf("B: %+v", s)
	}
	c.Close()
	waitFor(t, "endpoint closed", func() bool { s, _ := db.Stats(); return s.Endpoints == 0 && s.Connections == 0 })
	req := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: 1, Args: [endpoint.MaxShortArgs]uint64{42}}
	if err := client.Send(endpoint.RequestSend, &req); err != nil {
		t.Fatal(err)
	}
	var d endpoint.Descriptor
	waitFor(t, "return", func() bool { ok, _ := client.Receive(endpoint.ReplyReceive, &d); return ok })
	if reason, _, ok := d.ReturnInfo(); !ok || reason != endpoint.ReasonClosed || d.Args[0] != 42 {
		t.Fatalf("got %+v (reason %v), want the request returned as endpoint closed", d, reason)
	}
	if s, _ := da.Stats(); s.Endpoints != 1 {
		t.Fatalf("A: %+v", s)
	}
}

// SO_PEERCRED decides what an application may open: a user that is not
// root may not open a privileged endpoint id, and a process that dies
// loses its endpoints.
func TestDaemonCredentials(t *testing.T) {
	testenv.RequirePrivileged(t)
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	d, path := runDaemon(t, la, Config{Engine: nicfw.EngineConfig{Host: 1}, Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}, MaxPerUser: 2})

	// A copy of the test binary that the other user may run.
	dir := openDir(t)
	bin := filepath.Join(dir, "nicfw.test")
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	child := func(uid uint32, endpoint int, n int) *exec.Cmd {
		cmd := exec.Command(bin, "-test.run=^TestDaemonChild$", "-test.v")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "XAM_TEST_FW_SOCKET="+path, "XAM_TEST_FW_ENDPOINT="+strconv.Itoa(endpoint), "XAM_TEST_FW_COUNT="+strconv.Itoa(n))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return cmd
	}
	out, err := child(65534, 3, 1).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "permission denied") || !strings.Contains(string(out), "kind: permission") {
		t.Fatalf("nobody opening endpoint 3: %v\n%s", err, out)
	}
	out, err = child(65534, 0, 3).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "opened 2") || !strings.Contains(string(out), "the most allowed") || !strings.Contains(string(out), "kind: quota") {
		t.Fatalf("nobody opening 3 endpoints with a limit of 2: %v\n%s", err, out)
	}
	// Bad open requests from uid 65534: each refused with its kind, to that
	// client only; the daemon lives on (before, most of them crashed it).
	bad := child(65534, 0, 0)
	bad.Env = append(bad.Env, "XAM_TEST_FW_BAD=1")
	out, err = bad.CombinedOutput()
	for _, want := range []string{"queue entries 3: config", "queue entries 1048576: config", "staging 100: config",
		"staging 2 GiB: config", "empty table: config", "endpoint held: in_use", "privileged endpoint: permission"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("bad opens as uid 65534: no %q in\n%s", want, out)
		}
	}
	if err != nil {
		t.Fatalf("bad opens: %v\n%s", err, out)
	}
	if _, err := d.Stats(); err != nil {
		t.Fatalf("the daemon after the bad opens: %v", err)
	}
	// A child that opens endpoints and is killed.
	cmd := child(0, 5, 1)
	cmd.Env = append(cmd.Env, "XAM_TEST_FW_HANG=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.Contains(sc.Text(), "opened 1") {
	}
	waitFor(t, "endpoint open", func() bool { s, _ := d.Stats(); return s.Endpoints == 1 })
	cmd.Process.Kill()
	cmd.Wait()
	waitFor(t, "endpoint of the dead process closed", func() bool { s, _ := d.Stats(); return s.Endpoints == 0 && s.Connections == 0 })
	if s, _ := d.Stats(); s.Refused != 9 {
		t.Errorf("refused %d open requests, want 9", s.Refused)
	}
}

// TestDaemonChild is the child process of TestDaemonCredentials: it opens
// endpoints and reports, or hangs until killed.
func TestDaemonChild(t *testing.T) {
	path := os.Getenv("XAM_TEST_FW_SOCKET")
	if path == "" {
		t.Skip("the child process of TestDaemonCredentials")
	}
	ep, _ := strconv.Atoi(os.Getenv("XAM_TEST_FW_ENDPOINT"))
	n, _ := strconv.Atoi(os.Getenv("XAM_TEST_FW_COUNT"))
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if os.Getenv("XAM_TEST_FW_BAD") != "" {
		// The first endpoint is held for the in-use case.
		held, err := c.Open(OpenRequest{Tag: NewTag(), Table: []nicfw.Name{{Host: 2, Endpoint: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		for _, b := range []struct {
			name string
			req  OpenRequest
		}{
			{"queue entries 3", OpenRequest{QueueEntries: 3, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}}},
			{"queue entries 1048576", OpenRequest{QueueEntries: 1 << 20, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}}},
			{"staging 100", OpenRequest{StagingSize: 100, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}}},
			{"staging 2 GiB", OpenRequest{StagingSize: 2 << 30, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}}},
			{"empty table", OpenRequest{}},
			{"endpoint held", OpenRequest{Endpoint: held.ID, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}}},
			{"privileged endpoint", OpenRequest{Endpoint: 2, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}}},
		} {
			_, err := c.Open(b.req)
			fmt.Printf("%s: %s\n", b.name, errorKind(err))
		}
		return
	}
	opened := 0
	tag := uint64(1) // weak: root's alone
	if os.Getuid() != 0 {
		tag = NewTag()
	}
	for i := range n {
		id := nicfw.EndpointID(0)
		if ep != 0 {
			id = nicfw.EndpointID(ep + i)
		}
		e, err := c.Open(OpenRequest{Endpoint: id, Tag: tag, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}})
		if err != nil {
			fmt.Println("error:", err, "kind:", errorKind(err))
			break
		}
		defer e.Close()
		opened++
	}
	fmt.Println("opened", opened)
	if os.Getenv("XAM_TEST_FW_HANG") != "" {
		select {}
	}
}

// errorKind names the kind of a daemon's refusal, as errors.Is sees it
// across the socket.
func errorKind(err error) string {
	for _, k := range errorCodes {
		if errors.Is(err, k.err) {
			return k.code
		}
	}
	return fmt.Sprintf("none (%v)", err)
}

// The peer's daemon is killed: the messages outstanding to it come back to
// their senders as unreachable within the give-up time, later ones at
// once, and the surviving daemon neither leaks goroutines nor grows.
func TestDaemonPeerKilled(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, sock := xdptest.OpenHost(t, v.A, 0, 1)
	const giveUp = 300 * time.Millisecond
	_, sa := runDaemon(t, sock, Config{Engine: nicfw.EngineConfig{Host: 1, Transport: transport.Config{GiveUpAfter: giveUp}},
		Hosts: map[nicfw.HostID]net.HardwareAddr{2: v.B.MAC}})
	client := dial(t, sa, OpenRequest{Tag: 5, Table: []nicfw.Name{{Host: 2, Endpoint: 40}}})

	// Host B: a daemon and an echo application in a child process.
	dir := t.TempDir()
	sb := filepath.Join(dir, "b.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestDaemonPeerChild$", "-test.v")
	cmd.Env = append(os.Environ(), "XAM_TEST_PEER_NS="+v.B.NS, "XAM_TEST_PEER_DEV="+v.B.Link, "XAM_TEST_PEER_SOCKET="+sb, "XAM_TEST_PEER_MAC="+v.A.MAC.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready" {
	}

	send := func(i uint64) {
		t.Helper()
		req := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: 1, Args: [endpoint.MaxShortArgs]uint64{i}}
		for {
			err := client.Send(endpoint.RequestSend, &req)
			if !errors.Is(err, endpoint.ErrQueueFull) {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	var d endpoint.Descriptor
	// Echoes work.
	for i := range uint64(100) {
		send(i)
		waitFor(t, "echo", func() bool { ok, _ := client.Receive(endpoint.ReplyReceive, &d); return ok })
		if _, _, ret := d.ReturnInfo(); ret || d.Args[0] != i+1 {
			t.Fatalf("echo %d: %+v", i, d)
		}
	}
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	cmd.Process.Kill()
	cmd.Wait()
	killed := time.Now()
	const outstanding = 20
	for i := range uint64(outstanding) {
		send(1000 + i)
	}
	returned := 0
	for returned < outstanding {
		if time.Since(killed) > giveUp+2*time.Second {
			t.Fatalf("%d of %d messages returned %v after the kill", returned, outstanding, time.Since(killed))
		}
		if ok, err := client.Receive(endpoint.ReplyReceive, &d); err != nil {
			t.Fatal(err)
		} else if !ok {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if reason, _, ok := d.ReturnInfo(); !ok || reason != endpoint.ReasonUnreachable {
			t.Fatalf("after the kill: %+v (reason %v), want returned as unreachable", d, reason)
		}
		returned++
	}
	t.Logf("%d messages returned %v after the kill (give-up %v)", outstanding, time.Since(killed), giveUp)
	// More traffic to the dead host: returned at once, nothing grows.
	for i := range uint64(2000) {
		send(i)
		waitFor(t, "return", func() bool { ok, _ := client.Receive(endpoint.ReplyReceive, &d); return ok })
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if g := runtime.NumGoroutine(); g > goroutines {
		t.Errorf("goroutines %d -> %d", goroutines, g)
	}
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 1<<20 {
		t.Errorf("heap in use grew by %d bytes over 2000 returned messages", grow)
	}
}

// TestDaemonPeerChild is host B of TestDaemonPeerKilled: a daemon on the
// veth end in the given namespace and an echo application on endpoint 40.
func TestDaemonPeerChild(t *testing.T) {
	ns := os.Getenv("XAM_TEST_PEER_NS")
	if ns == "" {
		t.Skip("the child process of TestDaemonPeerKilled")
	}
	n, err := lab.OpenNamespace(ns)
	if err != nil {
		t.Fatal(err)
	}
	var prog *loader.Program
	var sock *afxdp.Socket
	var mac net.HardwareAddr
	err = n.Do(func() error {
		l, err := net.InterfaceByName(os.Getenv("XAM_TEST_PEER_DEV"))
		if err != nil {
			return err
		}
		mac = l.HardwareAddr
		if prog, err = loader.Load(loader.Config{DstMAC: mac}); err != nil {
			return err
		}
		if _, err = prog.Attach(l.Index, loader.ModeAuto); err != nil {
			return err
		}
		if sock, err = afxdp.Open(l.Index, afxdp.Options{}); err != nil {
			return err
		}
		return prog.Register(0, sock.FD())
	})
	if err != nil {
		t.Fatal(err)
	}
	peer, err := net.ParseMAC(os.Getenv("XAM_TEST_PEER_MAC"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(sock, Config{Engine: nicfw.EngineConfig{Host: 2}, Hosts: map[nicfw.HostID]net.HardwareAddr{1: peer}, Socket: os.Getenv("XAM_TEST_PEER_SOCKET")})
	if err != nil {
		t.Fatal(err)
	}
	go d.Run(context.Background())
	c, err := Dial(os.Getenv("XAM_TEST_PEER_SOCKET"))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := c.Open(OpenRequest{Endpoint: 40, Tag: 5, Table: []nicfw.Name{{Host: 1, Endpoint: FirstUserEndpoint}}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	var dd endpoint.Descriptor
	for {
		if ok, err := ep.Receive(endpoint.RequestReceive, &dd); err != nil {
			t.Fatal(err)
		} else if !ok {
			ep.Wait(endpoint.EventRequest, 100*time.Millisecond)
			continue
		}
		dd.Args[0]++
		for ep.Send(endpoint.ReplySend, &dd) != nil {
		}
	}
}

// TestDaemonSocketInUse: a second daemon on the socket of a live one is
// refused with ErrSocketInUse and the first stays reachable; a socket left
// by a daemon that died is taken over; a path that is not a socket is
// refused and left as it was. Before, the second daemon removed the first
// one's socket and took the path, and the first became unreachable.
func TestDaemonSocketInUse(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	_, path := runDaemon(t, la, Config{Engine: nicfw.EngineConfig{Host: 1}})
	if _, err := New(lb, Config{Engine: nicfw.EngineConfig{Host: 2}, Socket: path}); !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("a second daemon on a live daemon's socket: %v, want ErrSocketInUse", err)
	}
	dial(t, path, OpenRequest{Endpoint: FirstUserEndpoint, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}})

	dir := openDir(t)
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: stale, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // as a daemon that died leaves it
	_, got, stop := startDaemon(t, lb, Config{Engine: nicfw.EngineConfig{Host: 2}, Socket: stale})
	dial(t, got, OpenRequest{Endpoint: FirstUserEndpoint, Table: []nicfw.Name{{Host: 1, Endpoint: 1}}})
	stop()
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a stopped daemon left its socket: %v", err)
	}

	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(lb, Config{Engine: nicfw.EngineConfig{Host: 2}, Socket: file}); !errors.Is(err, ErrSocketInUse) {
		t.Errorf("a daemon on a regular file's path: %v, want ErrSocketInUse", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("the file is now %q, %v", b, err)
	}
}

// TestDaemonRefusedOpen: an open the engine refuses (here an empty
// translation table) is answered with the error, and the daemon goes on
// serving. Before, the refusal was overwritten with nil and the daemon
// crashed on the nil endpoint memory.
func TestDaemonRefusedOpen(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	_, path := runDaemon(t, la, Config{Engine: nicfw.EngineConfig{Host: 1}})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ep, err := c.Open(OpenRequest{Endpoint: FirstUserEndpoint}); err == nil || !strings.Contains(err.Error(), "translation table") {
		t.Fatalf("open with an empty table: %v, %v", ep, err)
	}
	dial(t, path, OpenRequest{Endpoint: FirstUserEndpoint, Table: []nicfw.Name{{Host: 2, Endpoint: 1}}})
}

// pingPong runs rounds request/reply round trips from client to server,
// each answered with its argument plus one; with pause > 0 the client
// sleeps 2 ms every pause rounds, to let the server block. The server
// calls beforeReply (if not nil) before each reply.
func pingPong(t *testing.T, client, server *Endpoint, rounds, pause int, beforeReply func()) {
	t.Helper()
	var wg sync.WaitGroup
	var serr error
	wg.Go(func() {
		var d endpoint.Descriptor
		for n := 0; n < rounds; {
			if ok, err := server.Receive(endpoint.RequestReceive, &d); err != nil {
				serr = err
				return
			} else if !ok {
				if _, err := server.Wait(endpoint.EventRequest, 5*time.Second); err != nil {
					serr = err
					return
				}
				continue
			}
			d.Args[0]++
			if beforeReply != nil {
				beforeReply()
			}
			if err := server.Send(endpoint.ReplySend, &d); err != nil {
				serr = err
				return
			}
			n++
		}
	})
	defer func() {
		wg.Wait()
		if serr != nil {
			t.Fatal(serr)
		}
	}()
	var d endpoint.Descriptor
	for i := range uint64(rounds) {
		if pause > 0 && i%uint64(pause) == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		req := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: 1, Args: [endpoint.MaxShortArgs]uint64{i}}
		if err := client.Send(endpoint.RequestSend, &req); err != nil {
			t.Fatal(err)
		}
		for {
			if ok, err := client.Receive(endpoint.ReplyReceive, &d); err != nil {
				t.Fatal(err)
			} else if ok {
				break
			}
			if ready, err := client.Wait(endpoint.EventReply, 5*time.Second); err != nil {
				t.Fatal(err)
			} else if !ready {
				t.Fatalf("round %d: no reply in 5 s", i)
			}
		}
		if d.Args[0] != i+1 {
			t.Fatalf("round %d: reply %d", i, d.Args[0])
		}
	}
}

// A daemon's engine polls many times while an application answers: the
// acknowledgement of a request to an endpoint whose application answers
// every request (View.SetAnswers, as AM-II's do) waits
// (transport.Config.AckDelay, DefaultAckDelay unless set) for the reply to
// carry it, and the server's daemon sends no ACK frame of its own. Before
// the daemons had a delay it sent one a round trip; an endpoint that does
// not promise answers (GRIM's) still has its requests acknowledged at
// once.
func TestDaemonAcksRideOnMessages(t *testing.T) {
	ld, lo, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ld.Close(); lo.Close() })
	if d, err := New(ld, Config{Engine: nicfw.EngineConfig{Host: 1}, Socket: filepath.Join(openDir(t), "x.sock")}); err != nil {
		t.Fatal(err)
	} else if tc := d.cfg.Engine.Transport; tc.AckDelay != DefaultAckDelay || tc.AckSoonDelay != DefaultReplyAckDelay {
		t.Fatalf("AckDelay %v, AckSoonDelay %v by default, want DefaultAckDelay and DefaultReplyAckDelay", tc.AckDelay, tc.AckSoonDelay)
	} else {
		d.shutdown()
	}
	// Busy-polling, so that no engine flushes its acknowledgements to
	// sleep; a delay far longer than any round trip, so that a test
	// slowed down by others still sees none leave alone.
	da, db, sa, sb := daemonPairConfig(t, BusyPoll, transport.Config{AckDelay: time.Minute, AckSoonDelay: time.Minute}, true)
	client := dial(t, sa, OpenRequest{Tag: 9, Table: []nicfw.Name{{Host: 2, Endpoint: 20}}})
	server := dial(t, sb, OpenRequest{Endpoint: 20, Tag: 9, Table: []nicfw.Name{{Host: 1, Endpoint: client.ID}}})
	statsOf := func(d *Daemon) transport.Stats {
		s, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s.Transport
	}
	stats := func() transport.Stats { return statsOf(db) }
	acks := func() uint64 { return stats().AckFrames }
	// No answers promised: each request's acknowledgement leaves alone
	// while the server holds its reply back.
	const rounds = 20
	var round uint64
	pingPong(t, client, server, rounds, 0, func() {
		round++
		waitFor(t, "the request's acknowledgement", func() bool { return acks() >= round })
	})
	server.SetAnswers()
	before, cbefore := stats(), statsOf(da)
	pingPong(t, client, server, 300, 0, nil)
	// A request the client sent again (a reply late on a loaded machine)
	// is acknowledged at once, in a frame of its own: that one is owed.
	after, cafter := stats(), statsOf(da)
	if n, dups := after.AckFrames-before.AckFrames, after.Duplicates-before.Duplicates; n > dups {
		t.Errorf("answers promised: the server's daemon sent %d ACK frames in 300 round trips (%d requests came twice), want none but those", n, dups)
	}
	// Each reply's acknowledgement waits (AckSoonDelay) for the client's
	// next request, which carries it: the client's daemon sends none alone.
	if n, dups := cafter.AckFrames-cbefore.AckFrames, cafter.Duplicates-cbefore.Duplicates; n > dups {
		t.Errorf("the client's daemon sent %d ACK frames in 300 round trips (%d replies came twice), want none but those", n, dups)
	}
}

// A reply's acknowledgement that no request carries leaves alone once the
// daemon's AckSoonDelay has passed: the server's next reply to the client
// is not held up for the AckDelay.
func TestDaemonReplyAckLeavesAlone(t *testing.T) {
	da, _, sa, sb := daemonPairConfig(t, BusyPoll, transport.Config{AckDelay: time.Minute, AckSoonDelay: time.Millisecond}, true)
	client := dial(t, sa, OpenRequest{Tag: 9, Table: []nicfw.Name{{Host: 2, Endpoint: 20}}})
	server := dial(t, sb, OpenRequest{Endpoint: 20, Tag: 9, Table: []nicfw.Name{{Host: 1, Endpoint: client.ID}}})
	server.SetAnswers()
	acks := func() uint64 {
		s, err := da.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s.Transport.AckFrames
	}
	before := acks()
	pingPong(t, client, server, 1, 0, nil)
	waitFor(t, "the last reply's acknowledgement", func() bool { return acks() > before })
}
