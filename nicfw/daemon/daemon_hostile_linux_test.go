//go:build linux

package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// hostileDaemon runs a daemon with small quotas on a memlink.
func hostileDaemon(t *testing.T, cfg Config) (*Daemon, string, func()) {
	t.Helper()
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	cfg.Engine = nicfw.EngineConfig{Host: 1}
	cfg.Hosts = map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}
	return startDaemon(t, la, cfg)
}

var oneEntry = []nicfw.Name{{Host: 2, Endpoint: 1}}

// served reports whether a new connection to the daemon at path is served.
func served(path string) bool {
	c, err := Dial(path)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Stats()
	return err == nil
}

// TestDaemonBadOpens: every open a daemon cannot grant is refused with a
// typed error to that client, before anything is made, and the daemon
// goes on serving. Before, six of these crashed it (a refusal was
// overwritten with nil and the nil memory dereferenced).
func TestDaemonBadOpens(t *testing.T) {
	_, path, _ := hostileDaemon(t, Config{MaxPerUser: 3, UserMemory: 8 << 20})
	held := dial(t, path, OpenRequest{Endpoint: 40, Table: oneEntry})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		what string
		req  OpenRequest
		want error
	}{
		{"an id another connection holds", OpenRequest{Endpoint: held.ID, Table: oneEntry}, nicfw.ErrEndpointInUse},
		{"3 queue entries", OpenRequest{QueueEntries: 3, Table: oneEntry}, nicfw.ErrConfig},
		{"1048576 queue entries", OpenRequest{QueueEntries: 1 << 20, Table: oneEntry}, nicfw.ErrConfig},
		{"a staging area of 100 bytes", OpenRequest{StagingSize: 100, Table: oneEntry}, nicfw.ErrConfig},
		{"a staging area of 2 GiB", OpenRequest{StagingSize: 2 << 30, Table: oneEntry}, nicfw.ErrConfig},
		{"an empty table", OpenRequest{}, nicfw.ErrConfig},
		{"1 GiB past the user's 8 MiB", OpenRequest{StagingSize: 1 << 30, Table: oneEntry}, ErrQuota},
	} {
		if ep, err := c.Open(tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.what, ep, err, tc.want)
		}
	}
	// Two more endpoints fit the quota of three; the fourth does not.
	for range 2 {
		ep, err := c.Open(OpenRequest{Table: oneEntry})
		if err != nil {
			t.Fatal(err)
		}
		defer ep.Close()
	}
	if _, err := c.Open(OpenRequest{Table: oneEntry}); !errors.Is(err, ErrQuota) {
		t.Errorf("a fourth endpoint: %v, want ErrQuota", err)
	}
	s, err := c.Stats()
	if err != nil || s.Endpoints != 3 || s.Refused != 8 {
		t.Errorf("stats after the refusals: %d endpoints, %d refused, %v", s.Endpoints, s.Refused, err)
	}
}

// TestDaemonConnectionQuota: a user's connections past its quota are
// refused (ErrQuota) and the user recovers a connection as soon as one of
// its others closes. Before, there was no limit: connection floods took the
// daemon to its descriptor limit.
func TestDaemonConnectionQuota(t *testing.T) {
	_, path, _ := hostileDaemon(t, Config{MaxConnsPerUser: 4})
	var conns []*Conn
	for range 4 {
		c, err := Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Stats(); err != nil { // the daemon has counted it
			t.Fatal(err)
		}
	}
	over, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := over.Stats(); !errors.Is(err, ErrQuota) {
		t.Errorf("a fifth connection: %v, want ErrQuota", err)
	}
	over.Close()
	conns[0].Close()
	// The daemon counts the close when it reads it: a later connection is
	// served once it has (the connection refused meanwhile says so).
	waitFor(t, "a connection after one closed", func() bool { return served(path) })
	for _, c := range conns[1:] {
		c.Close()
	}
}

// TestDaemonAcceptsAfterDescriptorsRunOut: when the daemon's process runs
// out of file descriptors, accept fails (EMFILE); once some are free the
// daemon accepts again at once. Before, the first failed accept ended the
// accept loop, and no connection was ever served again.
func TestDaemonAcceptsAfterDescriptorsRunOut(t *testing.T) {
	_, path, _ := hostileDaemon(t, Config{MaxConnsPerUser: 1 << 20})
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	// Room for a few more descriptors than are open now.
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(len(open) + 8)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	// Connect until the process (client and daemon share it) is out of
	// descriptors: each connection takes two, the client's and the
	// accepted one.
	var conns []net.Conn
	for {
		c, err := net.Dial("unixpacket", path)
		if err != nil {
			break
		}
		conns = append(conns, c)
		if len(conns) > 64 {
			t.Fatal("the descriptor limit did not bite")
		}
	}
	for _, c := range conns {
		c.Close()
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a connection served after the descriptors came back", func() bool { return served(path) })
}

// TestWaitDaemonGone: an application blocked on its endpoint gets
// ErrClosed when its daemon stops, instead of sleeping forever.
func TestWaitDaemonGone(t *testing.T) {
	_, path, stop := hostileDaemon(t, Config{})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ep, err := c.Open(OpenRequest{Table: oneEntry})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.View.Close()
	done := make(chan error, 1)
	go func() {
		ep.Arm(endpoint.EventRequest | endpoint.EventReply)
		done <- ep.Block(-1)
	}()
	stop()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Block after the daemon stopped: %v, want ErrClosed", err)
	}
	unix.Close(ep.notify)
	unix.Close(ep.kick)
}

// TestDaemonBigOpenDoesNotStall: while an open's endpoint memory is being
// made (held up here until the test lets it go, as a large endpoint's
// zeroing and populating holds it up), the engine goes on serving: a call
// that runs in the engine loop (Stats) returns, and sees no endpoint yet.
// Before, the memory was made in the engine's thread, and everything else,
// other users' messages included, waited for it.
func TestDaemonBigOpenDoesNotStall(t *testing.T) {
	d, path, _ := hostileDaemon(t, Config{})
	making, release := make(chan struct{}), make(chan struct{})
	makeEndpointMemory = func(cfg endpoint.Config) (*endpoint.Memory, error) {
		close(making)
		<-release
		return endpoint.NewMemory(cfg)
	}
	t.Cleanup(func() { makeEndpointMemory = endpoint.NewMemory })
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetTimeout(time.Minute)
	opened := make(chan error, 1)
	var ep *Endpoint
	go func() {
		var err error
		ep, err = c.Open(OpenRequest{Table: oneEntry})
		opened <- err
	}()
	<-making
	stats := make(chan Stats, 1)
	go func() { s, _ := d.Stats(); stats <- s }()
	select {
	case s := <-stats:
		if s.Endpoints != 0 {
			t.Errorf("%d endpoints while the first one's memory is being made", s.Endpoints)
		}
	case <-time.After(20 * time.Second):
		t.Error("the engine did not answer while an endpoint's memory was being made")
	}
	close(release)
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	ep.Close()
}

// TestDaemonReserve: an open with Reserve holds the ids after its
// endpoint for its connection (as a GRIM endpoint holds its range of
// channel ids): another connection cannot open one, nor reserve over
// one, the daemon chooses none of them, and the connection itself opens
// them; they are free again once the endpoint closes. Before, another
// user let into a GRIM network opened an unused channel id of a member
// (its peers' tables name every id of the range as that member's) and
// its messages ran the member's handlers as the member's.
func TestDaemonReserve(t *testing.T) {
	_, path, _ := hostileDaemon(t, Config{})
	owner, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	other, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	first, err := owner.Open(OpenRequest{Endpoint: 100, Reserve: 16, Table: oneEntry})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		req  OpenRequest
		want error
	}{
		{"an id of the range", OpenRequest{Endpoint: 103, Table: oneEntry}, nicfw.ErrEndpointInUse},
		{"the range's last id", OpenRequest{Endpoint: 115, Table: oneEntry}, nicfw.ErrEndpointInUse},
		{"a range over it", OpenRequest{Endpoint: 90, Reserve: 16, Table: oneEntry}, nicfw.ErrEndpointInUse},
		{"a reserve past the most", OpenRequest{Endpoint: 200, Reserve: MaxReserve + 1, Table: oneEntry}, nicfw.ErrConfig},
		{"a reserve with no endpoint", OpenRequest{Reserve: 4, Table: oneEntry}, nicfw.ErrConfig},
		{"a reserve past the last id", OpenRequest{Endpoint: 65530, Reserve: 16, Table: oneEntry}, nicfw.ErrConfig},
	} {
		if ep, err := other.Open(tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.what, ep, err, tc.want)
		}
	}
	if ep, err := other.Open(OpenRequest{Endpoint: 116, Table: oneEntry}); err != nil {
		t.Errorf("the id after the range: %v", err)
	} else {
		ep.Close()
	}
	// The daemon chooses no reserved id.
	low, err := owner.Open(OpenRequest{Endpoint: FirstUserEndpoint, Reserve: 8, Table: oneEntry})
	if err != nil {
		t.Fatal(err)
	}
	defer low.Close()
	for range 4 {
		ep, err := other.Open(OpenRequest{Table: oneEntry})
		if err != nil {
			t.Fatal(err)
		}
		if ep.ID < FirstUserEndpoint+8 || ep.ID >= 100 && ep.ID < 116 {
			t.Errorf("the daemon chose reserved id %d", ep.ID)
		}
		defer ep.Close()
	}
	second, err := owner.Open(OpenRequest{Endpoint: 101, Table: oneEntry})
	if err != nil {
		t.Fatalf("the reserving connection's own id: %v", err)
	}
	second.Close()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	ep, err := other.Open(OpenRequest{Endpoint: 103, Table: oneEntry})
	if err != nil {
		t.Fatalf("an id of the range once its endpoint closed: %v", err)
	}
	ep.Close()
}

// TestDaemonCoresRefused: a daemon given a CPU this process may not run on
// is refused when it is made, before it claims its socket, so that no
// socket file is left behind. Before, New took it, Run failed to pin the
// engine, and the socket file stayed.
func TestDaemonCoresRefused(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	path := filepath.Join(t.TempDir(), "fw.sock")
	d, err := New(la, Config{Socket: path, Cores: []int{1023}, Engine: nicfw.EngineConfig{Host: 1},
		Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}})
	if !errors.Is(err, nicfw.ErrConfig) || !strings.Contains(err.Error(), "CPU 1023") {
		t.Fatalf("New with CPU 1023: %v, %v; want ErrConfig", d, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket file after a refused daemon: %v", err)
	}
}

// TestDaemonCoresRestored: the engine thread, pinned to Config.Cores while
// the daemon runs, goes back to Go's scheduler with the mask it had.
// Before, it kept the daemon's cores, and whatever ran on it next was held
// to them: a second daemon's New, which checks its cores against the
// calling thread's mask, refused a CPU the process may run on.
func TestDaemonCoresRestored(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	if before.Count() < 2 {
		t.Skip("one CPU: no mask narrower than the process's")
	}
	last := -1
	for c := range 1024 {
		if before.IsSet(c) {
			last = c
		}
	}
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	d, err := New(la, Config{Socket: filepath.Join(openDir(t), "fw.sock"), Cores: []int{last}, Engine: nicfw.EngineConfig{Host: 1},
		Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		during, after unix.CPUSet
		err           error
	}
	done := make(chan result, 1)
	go func() {
		// Locked here too, so that the thread Run ran on is still this
		// goroutine's when it returns.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var r result
		unix.SchedGetaffinity(0, &r.during) // before Run: the process's
		r.err = d.Run(ctx)
		unix.SchedGetaffinity(0, &r.after)
		done <- r
	}()
	waitFor(t, "the daemon's engine loop", func() bool { _, err := d.Stats(); return err == nil })
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Run: %v", r.err)
	}
	if r.after != r.during {
		t.Fatalf("the engine thread's mask after Run: %d CPUs, want the %d it had", r.after.Count(), r.during.Count())
	}
}

// TestDaemonIdleOnMemlink: an idle daemon on a link with no descriptor to
// sleep on (a memlink) naps, and after each nap it sleeps again at its
// first turn without work. Before, it polled for Config.Sleep after every
// nap: about a fifth of a core for a daemon doing nothing.
func TestDaemonIdleOnMemlink(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() }) // after the daemon stops
	d, _ := runDaemon(t, la, Config{Engine: nicfw.EngineConfig{Host: 1}, Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}})
	stats := func() (sleeps, polls uint64) {
		s, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s.Sleeps, s.Engine.Polls
	}
	// Left alone for a while (each Stats call wakes it): the ratio of its
	// turns to its sleeps, not the time, is what is checked.
	s0, p0 := stats()
	time.Sleep(200 * time.Millisecond)
	s1, p1 := stats()
	if s1-s0 < 5 {
		t.Fatalf("%d sleeps in 200 ms, want its naps (1 ms each)", s1-s0)
	}
	// About ten turns per nap here; a poll for Sleep after each was a
	// thousand.
	if per := float64(p1-p0) / float64(s1-s0); per > 100 {
		t.Errorf("%d polls in %d sleeps (%.0f per sleep), want a few", p1-p0, s1-s0, per)
	}
}
