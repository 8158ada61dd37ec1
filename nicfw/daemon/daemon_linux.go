//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/mapper"
	"github.com/xam-project/xam/nicfw/transport"
)

// FirstUserEndpoint is the lowest endpoint id any user may open; ids below
// it are privileged.
const FirstUserEndpoint = 16

// Daemon defaults.
const (
	DefaultMaxPerUser      = 64
	DefaultMaxConnsPerUser = 64
	// DefaultMaxConns bounds the connections of all users together.
	DefaultMaxConns   = 1024
	DefaultUserMemory = 1 << 30
	// DefaultCallTimeout bounds a client's call to the daemon (Dial, Open,
	// Stats, Close): a daemon that does not answer within it is an error,
	// never a hang.
	DefaultCallTimeout = 10 * time.Second
	maxControlMsg      = 64 << 10
)

// Config configures a Daemon.
type Config struct {
	// Engine configures the engine.
	Engine nicfw.EngineConfig
	// Hosts is the host table: every peer host and its MAC.
	Hosts map[nicfw.HostID]net.HardwareAddr
	// Map, if set, runs the mapper protocol on the link with this
	// configuration, and the mapper's tables replace the host table and
	// this host's id (Hosts must be empty; Engine.Host is this host's id
	// until the first table). Its OnChange, if set, runs after the
	// daemon applied a table, in the engine thread.
	Map *mapper.Config
	// Socket is the path of the unix socket applications connect to
	// (Dial); empty: no socket (the engine then serves no application:
	// only its counters, Stats, are of use).
	Socket string
	// Cores lists the CPUs the engine thread runs on; empty: any.
	Cores []int
	// Sleep is how long the engine polls without work before it sleeps;
	// 0: it never sleeps (busy-polling).
	Sleep time.Duration
	// MaxPerUser bounds the endpoints one user has open (default
	// DefaultMaxPerUser).
	MaxPerUser int
	// MaxConnsPerUser bounds the connections one user has open (default
	// DefaultMaxConnsPerUser).
	MaxConnsPerUser int
	// MaxConns bounds the connections open at once, all users together
	// (default DefaultMaxConns). A connection past either bound is refused
	// in the accepting goroutine, without a goroutine or a buffer of its
	// own.
	MaxConns int
	// UserMemory bounds the bytes of endpoint memory one user's endpoints
	// take, together (default DefaultUserMemory). An endpoint of the
	// default size takes a little over 1 MiB (EndpointMemorySize).
	UserMemory int64
	// Log receives the daemon's events (default: discarded).
	Log *slog.Logger
}

// OpenRequest asks the daemon for an endpoint.
type OpenRequest struct {
	Op string `json:"op"` // "open"
	// Endpoint is the id wanted; 0 lets the daemon choose one at or above
	// FirstUserEndpoint.
	Endpoint nicfw.EndpointID `json:"endpoint,omitempty"`
	// Tag is the endpoint's virtual network: 0 asks for a new one, whose
	// tag the daemon draws at random (NewTag) and the reply carries
	// (Endpoint.Tag); any other tag joins that network if the peer may
	// (its creator's uid and groups, and those it granted: GrantRequest),
	// or makes it with the peer as its creator if this daemon has no
	// endpoint of it. Only root and the daemon's user may make a network
	// with a weak tag (WeakTag; ErrWeakTag).
	Tag uint64 `json:"tag"`
	// Table is the endpoint's translation table.
	Table []nicfw.Name `json:"table"`
	// QueueEntries and StagingSize size the endpoint (0: defaults).
	QueueEntries int `json:"queue_entries,omitempty"`
	StagingSize  int `json:"staging_size,omitempty"`
	// Weight is the endpoint's share of the engine's sends (nicfw.VNet;
	// 0: 1).
	Weight int `json:"weight,omitempty"`
	// Ordered asks for the endpoint's messages to be delivered in the
	// order sent (nicfw.VNet).
	Ordered bool `json:"ordered,omitempty"`
	// Key, if set (16 or 32 bytes; nicfw.NewKey), authenticates the
	// network's messages between hosts (nicfw.VNet.Key). The network's
	// first endpoint on this daemon sets it; every later open of the tag
	// must give the same key (ErrPermission otherwise). Stats never show
	// it.
	Key []byte `json:"key,omitempty"`
	// Reserve, with Endpoint, also reserves the ids after it, up to
	// Endpoint+Reserve-1 (at most MaxReserve), for this connection: no
	// other connection may open them (ErrEndpointInUse) until this
	// endpoint closes, and the daemon chooses none of them. A GRIM
	// endpoint reserves its range of channel ids, each of which its
	// peers' tables name as one of its channels: another user let into
	// the network (a grant) cannot take an unused one and speak as it.
	// The open is refused if another connection holds one of them.
	Reserve int `json:"reserve,omitempty"`
}

// MaxReserve bounds OpenRequest.Reserve.
const MaxReserve = 256

// CloseRequest closes an endpoint of the connection.
type CloseRequest struct {
	Op       string           `json:"op"` // "close"
	Endpoint nicfw.EndpointID `json:"endpoint"`
}

// Reply answers a request.
type Reply struct {
	Error string `json:"error,omitempty"`
	// Code names the kind of a refusal, for Dial's side to turn back into
	// the sentinel error: "permission", "quota", "config", "in_use",
	// "closed"; empty for others.
	Code     string           `json:"code,omitempty"`
	Host     nicfw.HostID     `json:"host"`
	Endpoint nicfw.EndpointID `json:"endpoint,omitempty"`
	// Tag is an opened endpoint's virtual network ("open").
	Tag uint64 `json:"tag,omitempty"`
	// Stats of the engine ("stats").
	Stats *Stats `json:"stats,omitempty"`
}

// Stats is a snapshot of the daemon's counters.
type Stats struct {
	Endpoints int `json:"endpoints"`
	// List is the open endpoints. Through the socket, a user other than
	// root and the daemon's sees the tag only of its own endpoints and of
	// the networks it made: the others' are 0.
	List []nicfw.EndpointInfo `json:"endpoint_list"`
	// Networks are the virtual networks with endpoints here, with their
	// creators and grants: all of them for root and the daemon's user
	// (and Daemon.Stats), the peer's own for others.
	Networks    []Network `json:"networks,omitempty"`
	Connections int       `json:"connections"`
	// Refused counts the open requests, grants and connections refused.
	Refused uint64 `json:"refused"`
	Sleeps  uint64 `json:"sleeps"` // times the engine slept
	// BigReleased counts the large endpoints (16 MB and up) whose memory
	// was released off the engine's path once they closed.
	BigReleased uint64               `json:"big_released"`
	Engine      nicfw.EngineStats    `json:"engine"`
	Transport   transport.Stats      `json:"transport"`
	Residency   nicfw.ResidencyStats `json:"residency"`
	// Hosts is the host table, this host included; Epoch the mapper's
	// version of it (0: static, or no table yet).
	Hosts []Host `json:"hosts"`
	Epoch uint64 `json:"epoch,omitempty"`
	// Mapper counts the mapper's work (with Config.Map).
	Mapper *mapper.Stats `json:"mapper,omitempty"`
	// Modules lists the engine's modules (Config.Engine.Modules, and the
	// mapper's with Config.Map), with what those that count their work
	// report (nicfw.StatsReporter); Backplane counts what the engine did
	// for them. Both are absent without modules.
	Modules   []ModuleReport     `json:"modules,omitempty"`
	Backplane *nicfw.ModuleStats `json:"backplane,omitempty"`
}

// ModuleReport is a module of the daemon's engine and what it reports.
type ModuleReport struct {
	Name string `json:"name"`
	ID   uint8  `json:"id"`
	// Counters are the module's settings and counters, in its order
	// (nicfw.StatsReporter); absent for a module that reports none.
	Counters []nicfw.ModuleCounter `json:"counters,omitempty"`
}

// Host is an entry of the daemon's host table.
type Host struct {
	ID  nicfw.HostID `json:"id"`
	MAC string       `json:"mac"`
}

// Errors of the daemon.
var (
	// ErrPermission: the peer's credentials do not allow the request.
	ErrPermission = errors.New("nicfw: permission denied")
	// ErrClosed: the daemon has stopped.
	ErrClosed = errors.New("nicfw: daemon stopped")
	// ErrSocketInUse: another daemon answers on the socket's path, or the
	// path is something other than a socket; New leaves it alone.
	ErrSocketInUse = errors.New("nicfw: daemon socket in use")
	// ErrQuota: the request would take the user past one of its quotas
	// (endpoints, connections, endpoint memory), or the daemon past its
	// bound on connections.
	ErrQuota = errors.New("nicfw: user quota exceeded")
	// ErrWeakTag: a user other than root and the daemon's asked for a new
	// virtual network with a weak tag (WeakTag). It is an ErrPermission.
	ErrWeakTag = fmt.Errorf("%w: a weak tag", ErrPermission)
	// ErrNoNetwork: a grant names a virtual network with no endpoint on
	// this daemon (told to root and the daemon's user only; others get
	// ErrPermission).
	ErrNoNetwork = errors.New("nicfw: no such virtual network")
)

// errorCodes are the refusals that cross the daemon socket typed.
var errorCodes = []struct {
	code string
	err  error
}{
	{"weak_tag", ErrWeakTag}, {"permission", ErrPermission}, {"quota", ErrQuota}, {"in_use", nicfw.ErrEndpointInUse},
	{"no_network", ErrNoNetwork},
	{"config", nicfw.ErrConfig}, {"closed", ErrClosed},
}

// codeOf returns the code of err's kind, "" for none of errorCodes.
func codeOf(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

// errorOf returns the sentinel of code, nil for none.
func errorOf(code string) error {
	for _, c := range errorCodes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

// userUse is what one user holds of the daemon.
type userUse struct {
	conns, endpoints int
	memory           int64
}

// Daemon is the engine in firmware mode. See the top of daemon_linux.go.
type Daemon struct {
	cfg  Config
	log  *slog.Logger
	eng  *nicfw.Engine
	link afxdp.Link
	wake int // eventfd: control requests and kicks wake a sleeping engine
	ln   *net.UnixListener

	work chan func()
	done chan struct{} // closed when the engine loop has stopped

	mu     sync.Mutex
	conns  map[*daemonConn]struct{}
	users  map[uint32]*userUse
	nets   map[uint64]*network        // virtual networks with endpoints here, by tag
	owners map[nicfw.EndpointID]owner // who opened each endpoint
	// reserved holds the ids reserved by opens (OpenRequest.Reserve), by
	// the connection that holds them; resMu guards it (taken inside mu,
	// and alone by the engine goroutine when it chooses an id).
	resMu    sync.Mutex
	reserved map[nicfw.EndpointID]*daemonConn
	refused  uint64
	stopped  bool
	// refusedLogged and refusedQuiet limit the log of refused
	// connections to one line a second under a flood.
	refusedLogged time.Time
	refusedQuiet  uint64

	releases    sync.WaitGroup // goroutines releasing large endpoints
	bigReleased atomic.Uint64  // large endpoints released off the engine's path

	host atomic.Uint32 // this host's id, for the connections' replies

	// Owned by the engine goroutine.
	notify map[nicfw.EndpointID]int // endpoint -> its notification eventfd
	hosts  map[nicfw.HostID]net.HardwareAddr
	epoch  uint64
	mapper *mapper.Module // the engine's mapper module; nil: static host table
	nextID nicfw.EndpointID
	sleeps uint64
	wg     sync.WaitGroup
}

// New returns a daemon on link with a new engine; Run starts it. The
// daemon does not own the link.
func New(link afxdp.Link, cfg Config) (*Daemon, error) {
	if cfg.MaxPerUser == 0 {
		cfg.MaxPerUser = DefaultMaxPerUser
	}
	if cfg.MaxConnsPerUser == 0 {
		cfg.MaxConnsPerUser = DefaultMaxConnsPerUser
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.UserMemory == 0 {
		cfg.UserMemory = DefaultUserMemory
	}
	if cfg.MaxPerUser < 0 || cfg.MaxConnsPerUser < 0 || cfg.MaxConns < 0 || cfg.UserMemory < 0 || cfg.Sleep < 0 {
		return nil, fmt.Errorf("%w: MaxPerUser %d, MaxConnsPerUser %d, MaxConns %d, UserMemory %d, Sleep %v",
			nicfw.ErrConfig, cfg.MaxPerUser, cfg.MaxConnsPerUser, cfg.MaxConns, cfg.UserMemory, cfg.Sleep)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	for _, c := range cfg.Cores {
		if c < 0 || c >= 1024 {
			return nil, fmt.Errorf("%w: CPU %d", nicfw.ErrConfig, c)
		}
	}
	if cfg.Map != nil && len(cfg.Hosts) > 0 {
		return nil, fmt.Errorf("%w: a static host table and a mapper", nicfw.ErrConfig)
	}
	// The mapper is the engine's module: it takes its frames from the
	// engine's link and gives the engine its tables (Backplane.SetHosts);
	// the daemon keeps what the table says for its replies and stats.
	d := &Daemon{}
	if cfg.Map != nil {
		mc := *cfg.Map
		user := mc.OnChange
		mc.OnChange = func(t mapper.Table) {
			d.tableApplied(t)
			if user != nil {
				user(t)
			}
		}
		d.mapper = mapper.NewModule(mc)
		cfg.Engine.Modules = append(slices.Clip(cfg.Engine.Modules), d.mapper)
	}
	eng, err := nicfw.NewEngine(link, cfg.Engine)
	if err != nil {
		return nil, err
	}
	hosts := map[nicfw.HostID]net.HardwareAddr{cfg.Engine.Host: link.HardwareAddr()}
	for id, mac := range cfg.Hosts {
		if err := eng.AddHost(id, mac); err != nil {
			eng.Close()
			return nil, err
		}
		hosts[id] = mac
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		eng.Close()
		return nil, fmt.Errorf("nicfw: daemon eventfd: %w", err)
	}
	*d = Daemon{
		cfg: cfg, log: cfg.Log, eng: eng, link: link, wake: wake,
		work:     make(chan func(), 64),
		done:     make(chan struct{}),
		conns:    make(map[*daemonConn]struct{}),
		users:    make(map[uint32]*userUse),
		nets:     make(map[uint64]*network),
		owners:   make(map[nicfw.EndpointID]owner),
		notify:   make(map[nicfw.EndpointID]int),
		reserved: make(map[nicfw.EndpointID]*daemonConn),
		nextID:   FirstUserEndpoint,
		hosts:    hosts,
		mapper:   d.mapper,
	}
	d.host.Store(uint32(cfg.Engine.Host))
	if cfg.Socket != "" {
		if err := claimSocket(cfg.Socket); err != nil {
			d.closeAll()
			return nil, err
		}
		ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
		if err != nil {
			d.closeAll()
			if errors.Is(err, unix.EADDRINUSE) {
				// Another daemon bound it between claimSocket and here.
				return nil, fmt.Errorf("%w: %s: %w", ErrSocketInUse, cfg.Socket, err)
			}
			return nil, fmt.Errorf("nicfw: daemon socket: %w", err)
		}
		// Anybody may connect; SO_PEERCRED decides what they may open.
		if err := os.Chmod(cfg.Socket, 0o666); err != nil {
			ln.Close()
			d.closeAll()
			return nil, fmt.Errorf("nicfw: daemon socket: %w", err)
		}
		d.ln = ln
	}
	return d, nil
}

// claimSocket makes path free for a new daemon's socket: nothing there, or
// a socket left by a daemon that died (nobody accepts on it), which it
// removes. A socket on which a daemon answers, or anything that is not a
// socket, is ErrSocketInUse: a second daemon never takes over the path of
// a live one (which would leave it unreachable), nor removes a file that
// is not its to remove.
func claimSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nicfw: daemon socket: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%w: %s exists and is not a socket", ErrSocketInUse, path)
	}
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: a daemon is serving on %s (stop it, or give another --socket)", ErrSocketInUse, path)
	}
	if !errors.Is(err, unix.ECONNREFUSED) {
		return fmt.Errorf("%w: %s: %w", ErrSocketInUse, path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("nicfw: removing the stale daemon socket: %w", err)
	}
	return nil
}

// closeAll releases what New made.
func (d *Daemon) closeAll() {
	for _, fd := range d.notify {
		unix.Close(fd)
	}
	d.eng.Close()
	d.releases.Wait() // the engine has let go of every memory
	unix.Close(d.wake)
}

// Run runs the engine loop in the calling goroutine, locked to its thread
// and pinned to the configured cores, and serves the socket, until ctx is
// done. It then closes every connection and endpoint and returns ctx's
// error, or the link's error that stopped it.
func (d *Daemon) Run(ctx context.Context) error { return RunGroup(ctx, d) }

// RunGroup runs the engines of several daemons in one thread, as one NIC
// processor serves several ports: each daemon keeps its own link, engine,
// socket and endpoints, and the thread runs their engines in turns and
// sleeps on all of them at once. On a machine with few cores it saves the
// hand-offs between engine threads (a lab of several hosts on one
// machine); the thread is pinned to the first daemon's Config.Cores. It
// returns when ctx is done (ctx.Err()) or an engine fails, and the
// daemons are then stopped, as Run stops one.
func RunGroup(ctx context.Context, ds ...*Daemon) error {
	if len(ds) == 0 {
		return fmt.Errorf("%w: no daemons", nicfw.ErrConfig)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cores := ds[0].cfg.Cores; len(cores) > 0 {
		var set unix.CPUSet
		for _, c := range cores {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("nicfw: pinning the engine to CPUs %v: %w", cores, err)
		}
	}
	for _, d := range ds {
		if d.ln != nil {
			d.wg.Go(d.accept)
		}
		stop := context.AfterFunc(ctx, func() { d.kick() })
		defer stop()
		d.log.Info("engine running", "cores", ds[0].cfg.Cores, "sleep", d.cfg.Sleep, "socket", d.cfg.Socket, "group", len(ds))
	}
	err := loopAll(ctx, ds)
	for _, d := range ds {
		d.shutdown()
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// loop is the engine loop.
func (d *Daemon) loop(ctx context.Context) error {
	return loopAll(ctx, []*Daemon{d})
}

// loopAll runs the engines of ds in turns in this thread until ctx is done:
// each turn runs each daemon's queued work and its engine once; after
// Config.Sleep (the shortest of ds's) without work in any, it sleeps
// (sleepAll).
func loopAll(ctx context.Context, ds []*Daemon) error {
	nap := ds[0].cfg.Sleep
	for _, d := range ds[1:] {
		nap = min(nap, d.cfg.Sleep)
	}
	var idleSince time.Time
	for iter := 0; ; iter++ {
		work := 0
		for _, d := range ds {
			d.runWork()
			n, err := d.eng.Poll()
			if err != nil {
				return err
			}
			work += n
		}
		if work > 0 {
			idleSince = time.Time{}
			continue
		}
		if iter&255 == 0 && ctx.Err() != nil {
			return nil
		}
		if nap <= 0 {
			continue
		}
		now := time.Now()
		if idleSince.IsZero() {
			idleSince = now
			continue
		}
		if now.Sub(idleSince) < nap {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := sleepAll(ds); err != nil {
			return err
		}
		idleSince = time.Time{}
	}
}

// sleep marks the endpoints idle, checks once more for work and sleeps in
// poll(2) until a frame, a kick or the timer scan.
func (d *Daemon) sleep() error {
	return sleepAll([]*Daemon{d})
}

// sleepAll marks every endpoint of ds's engines idle, looks once more for
// work and sleeps in poll(2) on all their wake eventfds and links until a
// frame, a kick, a control request or the first timer.
func sleepAll(ds []*Daemon) error {
	for _, d := range ds {
		if err := d.eng.SetIdle(true); err != nil {
			return err
		}
		defer d.eng.SetIdle(false)
	}
	// A descriptor published before the idle mark was visible did not
	// kick: look once more now that it is.
	for _, d := range ds {
		if n, err := d.eng.Poll(); err != nil || n > 0 || len(d.work) > 0 {
			return err
		}
	}
	timeout := -1
	earlier := func(ms int) {
		if timeout < 0 || ms < timeout {
			timeout = ms
		}
	}
	var fds []unix.PollFd
	for _, d := range ds {
		if d.eng.Busy() {
			earlier(max(int(d.eng.TimerPeriod()/time.Millisecond), 1))
		}
		if at, ok := d.eng.NextTimer(); ok {
			// Wake for the modules' timers (the mapper's next probe; its
			// frames wake us anyway).
			earlier(max(int(time.Until(at)/time.Millisecond), 1))
		}
		d.sleeps++
		fds = append(fds, unix.PollFd{Fd: int32(d.wake), Events: unix.POLLIN})
		if f, ok := d.link.(afxdp.FDer); ok {
			fds = append(fds, unix.PollFd{Fd: int32(f.FD()), Events: unix.POLLIN})
		} else {
			earlier(1) // a link without a descriptor: nap briefly
		}
	}
	if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
		return fmt.Errorf("nicfw: daemon poll: %w", err)
	}
	var b [8]byte
	for _, d := range ds {
		unix.Read(d.wake, b[:]) // reset the counter; EAGAIN when it was not written
	}
	return nil
}

// tableApplied records the table the mapper module gave the engine: this
// host's id and the hosts, for replies and stats.
func (d *Daemon) tableApplied(t mapper.Table) {
	if err := d.mapper.LastError(); err != nil {
		d.log.Warn("host table refused", "epoch", t.Epoch, "err", err)
		return
	}
	self := d.eng.Host()
	hosts := make(map[nicfw.HostID]net.HardwareAddr, len(t.Hosts)+1)
	for _, h := range t.Hosts {
		hosts[nicfw.HostID(h.ID)] = h.MAC
	}
	hosts[self] = d.link.HardwareAddr()
	d.mu.Lock()
	d.hosts, d.epoch = hosts, t.Epoch
	d.mu.Unlock()
	d.host.Store(uint32(self))
	d.log.Info("host table", "epoch", t.Epoch, "leader", t.Leader.String(), "hosts", len(t.Hosts), "self", self)
}

// kick wakes the engine if it sleeps.
func (d *Daemon) kick() {
	one := [8]byte{1}
	unix.Write(d.wake, one[:])
}

// do runs f in the engine goroutine and waits for it.
func (d *Daemon) do(f func()) error {
	ran := make(chan struct{})
	select {
	case d.work <- func() { f(); close(ran) }:
	case <-d.done:
		return ErrClosed
	}
	d.kick()
	select {
	case <-ran:
		return nil
	case <-d.done:
		return ErrClosed
	}
}

// runWork runs the functions queued by connections.
func (d *Daemon) runWork() {
	for {
		select {
		case f := <-d.work:
			f()
		default:
			return
		}
	}
}

// shutdown stops the socket and the connections, closes the endpoints.
func (d *Daemon) shutdown() {
	d.mu.Lock()
	d.stopped = true
	conns := make([]*daemonConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	if d.ln != nil {
		d.ln.Close() // and unlinks the path (net.UnixListener)
	}
	for _, c := range conns {
		c.conn.Close()
	}
	close(d.done)
	d.wg.Wait()
	d.runWork() // nothing is queued any more: do gives up on done
	d.closeAll()
}

// Stats returns the daemon's counters. It may be called from any
// goroutine while Run runs.
func (d *Daemon) Stats() (Stats, error) {
	var s Stats
	err := d.do(func() { s = d.statsNow() })
	return s, err
}

func (d *Daemon) statsNow() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{
		Endpoints: d.eng.Endpoints(), Connections: len(d.conns), Refused: d.refused, Sleeps: d.sleeps, BigReleased: d.bigReleased.Load(),
		Engine: d.eng.Stats(), Transport: d.eng.TransportStats(), Residency: d.eng.ResidencyStats(),
		Epoch: d.epoch, List: d.eng.EndpointList(), Networks: d.networksFor(&peer{privileged: true}),
	}
	for id, mac := range d.hosts {
		s.Hosts = append(s.Hosts, Host{ID: id, MAC: mac.String()})
	}
	slices.SortFunc(s.Hosts, func(a, b Host) int { return int(a.ID) - int(b.ID) })
	if d.mapper != nil {
		ms := d.mapper.Stats()
		s.Mapper = &ms
	}
	if mods := d.cfg.Engine.Modules; len(mods) > 0 {
		bp := d.eng.ModuleStats()
		s.Backplane = &bp
		for _, m := range mods {
			r := ModuleReport{Name: m.Name(), ID: m.ID()}
			if sr, ok := m.(nicfw.StatsReporter); ok {
				r.Counters = sr.ReportStats()
			}
			s.Modules = append(s.Modules, r)
		}
	}
	return s
}

// makeEndpointMemory makes an open's endpoint memory (a variable for the
// test that holds it up to show the engine does not wait for it).
var makeEndpointMemory = endpoint.NewMemory

// open creates an endpoint for req on virtual network tag: its memory and
// eventfd here, in the connection's goroutine (making a large memory takes
// long, and the engine must not wait for it), then the endpoint in the
// engine goroutine. Permission and quotas are checked by the caller. For
// a large endpoint it returns the daemon's hold on its memory
// (bigMemory), for closeEndpoint.
func (d *Daemon) open(req OpenRequest, tag uint64, size int64, uid uint32) (id nicfw.EndpointID, mem *endpoint.Memory, notify int, big *bigMemory, err error) {
	if len(req.Table) == 0 {
		return 0, nil, -1, nil, fmt.Errorf("%w: an empty translation table", nicfw.ErrConfig)
	}
	mem, err = makeEndpointMemory(endpoint.Config{QueueEntries: req.QueueEntries, StagingSize: req.StagingSize, TableSize: len(req.Table)})
	if err != nil {
		return 0, nil, -1, nil, err
	}
	if big, err = holdBig(mem, size); err != nil {
		mem.Close()
		return 0, nil, -1, nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		mem.Close()
		big.close()
		return 0, nil, -1, nil, fmt.Errorf("nicfw: endpoint eventfd: %w", err)
	}
	// Whoever comes first owns mem and efd: the engine goroutine, which
	// adds them (taken), or this one, once do has given up (abandoned).
	var mu sync.Mutex
	var taken, abandoned, added bool
	derr := d.do(func() {
		mu.Lock()
		if abandoned {
			mu.Unlock()
			return
		}
		taken = true
		mu.Unlock()
		id = req.Endpoint
		if id == 0 {
			for range 1 << 16 {
				if d.nextID < FirstUserEndpoint {
					d.nextID = FirstUserEndpoint
				}
				if !d.eng.HasEndpoint(d.nextID) && !d.isReserved(d.nextID) {
					break
				}
				d.nextID++
			}
			id = d.nextID
			d.nextID++
		}
		if err = d.eng.AddEndpoint(id, mem, nicfw.VNet{Tag: tag, Table: req.Table, Weight: req.Weight, Ordered: req.Ordered, Owner: uid, Key: req.Key}); err != nil {
			return
		}
		added = true
		one := [8]byte{1}
		mem.SetNotify(func() { unix.Write(efd, one[:]) })
		d.notify[id] = efd
	})
	mu.Lock()
	mine := !taken
	abandoned = mine
	mu.Unlock()
	switch {
	case mine:
		mem.Close()
		big.close()
		unix.Close(efd)
		return 0, nil, -1, nil, derr
	case derr != nil && added:
		d.release(big) // the engine owns them, and is stopping: it lets go in closeAll
		return 0, nil, -1, nil, derr
	case derr != nil:
		mem.Close()
		big.close()
		unix.Close(efd)
		return 0, nil, -1, nil, derr
	case !added:
		mem.Close()
		big.close()
		unix.Close(efd)
		return 0, nil, -1, nil, err
	}
	return id, mem, efd, big, nil
}

// engineClosed is told, in the engine goroutine, how long the engine took
// to close an endpoint (a variable for the test that checks that a large
// endpoint's memory is released elsewhere).
var engineClosed = func(time.Duration) {}

// closeEndpoint closes endpoint id in the engine goroutine. The memory of
// a large one (big not nil) is released off the engine's path
// (release_linux.go).
func (d *Daemon) closeEndpoint(id nicfw.EndpointID, big *bigMemory) error {
	if big != nil {
		big.dropPages()
		defer d.release(big)
	}
	var err error
	derr := d.do(func() {
		t0 := time.Now()
		err = d.eng.CloseEndpoint(id)
		engineClosed(time.Since(t0))
		if fd, ok := d.notify[id]; ok {
			unix.Close(fd)
			delete(d.notify, id)
		}
	})
	return errors.Join(err, derr)
}

// isReserved reports whether id is reserved by an open (OpenRequest.Reserve).
func (d *Daemon) isReserved(id nicfw.EndpointID) bool {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	return d.reserved[id] != nil
}

// reserve checks that connection c may open req's endpoint and, with
// req.Reserve, reserves the ids after it for c; it returns the ids it
// reserved (none that c held already). d.mu is held.
func (d *Daemon) reserve(c *daemonConn, req OpenRequest) ([]nicfw.EndpointID, error) {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if r := d.reserved[req.Endpoint]; req.Endpoint != 0 && r != nil && r != c {
		return nil, fmt.Errorf("%w: endpoint %d is reserved by another connection", nicfw.ErrEndpointInUse, req.Endpoint)
	}
	var ids []nicfw.EndpointID
	for i := 1; i < req.Reserve; i++ {
		id := req.Endpoint + nicfw.EndpointID(i)
		r := d.reserved[id]
		o, open := d.owners[id]
		if r != nil && r != c || open && o.conn != c {
			return nil, fmt.Errorf("%w: endpoint %d, in the range %d..%d to reserve, is another connection's",
				nicfw.ErrEndpointInUse, id, req.Endpoint, int(req.Endpoint)+req.Reserve-1)
		}
		if r == nil {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		d.reserved[id] = c
	}
	return ids, nil
}

// unreserve releases ids, reserved by c.
func (d *Daemon) unreserve(c *daemonConn, ids []nicfw.EndpointID) {
	if len(ids) == 0 {
		return
	}
	d.resMu.Lock()
	defer d.resMu.Unlock()
	for _, id := range ids {
		if d.reserved[id] == c {
			delete(d.reserved, id)
		}
	}
}

// accept serves the socket.
func (d *Daemon) accept() {
	pause := time.Millisecond
	for {
		conn, err := d.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return // closed by shutdown
		}
		if err != nil {
			// Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS):
			// connections that close free them, so accept again soon,
			// never give up.
			d.log.Warn("accept", "err", err)
			time.Sleep(pause)
			pause = min(2*pause, 100*time.Millisecond)
			continue
		}
		pause = time.Millisecond
		c, err := d.newConn(conn)
		if err != nil {
			d.refuseConn(conn, err)
			continue
		}
		d.wg.Go(c.serve)
	}
}

// refuseConn answers a refused connection with why, and closes it, here in
// the accepting goroutine: no goroutine, no buffer and no wait per refused
// connection, so that a flood of them costs the daemon nothing that stays.
// The reason is written before anything was asked (a new socket's buffer
// is empty: the write does not block) and the client's first request, if
// it is there, is read (truncated to a byte) so that the close does not
// reset the connection. A client that sends later finds the reason
// waiting (Conn's calls read it after the write or read fails).
func (d *Daemon) refuseConn(conn *net.UnixConn, err error) {
	d.mu.Lock()
	d.refused++
	now := time.Now()
	logIt, quiet := now.Sub(d.refusedLogged) >= time.Second, d.refusedQuiet
	if logIt {
		d.refusedLogged, d.refusedQuiet = now, 0
	} else {
		d.refusedQuiet++
	}
	d.mu.Unlock()
	if logIt {
		d.log.Warn("connection refused", "err", err, "refused and not logged since", quiet)
	}
	b, _ := json.Marshal(Reply{Error: err.Error(), Code: codeOf(err), Host: nicfw.HostID(d.host.Load())})
	if raw, rerr := conn.SyscallConn(); rerr == nil {
		raw.Control(func(fd uintptr) {
			unix.Sendmsg(int(fd), b, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			var one [1]byte
			unix.Recvfrom(int(fd), one[:], unix.MSG_DONTWAIT)
		})
	}
	conn.Close()
}
