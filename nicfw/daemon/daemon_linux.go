//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/mapper"
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

// The engine loop's waiting (Config.Sleep).
const (
	// DefaultSleep is how long an engine without work polls, yielding
	// the processor between polls, before it blocks in poll(2): longer
	// than a round trip between two hosts' daemons, so that a
	// conversation never waits for a wake-up, and short enough that an
	// idle daemon takes no measurable processor time.
	DefaultSleep = 200 * time.Microsecond
	// BusyPoll, as Config.Sleep, keeps the engine polling without
	// yielding or blocking: the lowest latency on a core of its own, a
	// whole core always.
	BusyPoll time.Duration = -1
	// DefaultAckDelay is the daemon engine's transport.Config.AckDelay
	// where the configuration leaves it zero: how long the acknowledgement
	// of a request to an endpoint that answers every request (AM-II's,
	// endpoint.View.SetAnswers) waits for the reply to carry it. An inline
	// engine runs in the application's thread, between its handlers, so
	// "the next Poll" comes after the reply; a daemon polls on its own,
	// many times while the application answers, and without a delay sends
	// each such acknowledgement in a frame of its own. Other messages are
	// acknowledged at the next Poll (the engine calls AckNow for them),
	// but replies (DefaultReplyAckDelay).
	DefaultAckDelay = 50 * time.Microsecond
	// DefaultReplyAckDelay is the daemon engine's
	// transport.Config.AckSoonDelay where the configuration leaves it
	// zero: how long the acknowledgement of a reply waits for the
	// application's next request to the replier's host to carry it. The
	// application takes the reply and sends its next request through two
	// hand-offs with the daemon, a microsecond or so, while the daemon
	// polls many times; without the delay the reply's acknowledgement
	// leaves in a frame of its own just before that request, a system
	// call of the engine's that the request waits behind. Short, because
	// the replier's window to the application's endpoint (EngineConfig.Window)
	// stays taken meanwhile: where the replier has more replies for
	// that endpoint than the window lets fly and the application sends
	// nothing to its host (its requests carry the acknowledgements),
	// each further window of replies leaves up to that much later.
	// Negative: at the next Poll.
	DefaultReplyAckDelay = 5 * time.Microsecond
)

// Config configures a Daemon.
type Config struct {
	// Engine configures the engine.
	Engine nicfw.EngineConfig
	// CopyWhy, when the link is an AF_XDP socket in copy mode, says why,
	// as whoever opened it knows (Stats.Link; e.g. the driver offers no
	// zero-copy). Empty: the socket's Info says what it can.
	CopyWhy string
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
	// Sleep is how long the engine polls without work before it blocks:
	// 0 means DefaultSleep, BusyPoll that it never blocks. While it polls
	// without work it yields the processor between polls (endpoint.Yield),
	// except with BusyPoll, which keeps its core (give it one of its own).
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

// userUse is what one user holds of the daemon.
type userUse struct {
	conns, endpoints int
	memory           int64
}

// Daemon is the engine in firmware mode. See the package documentation.
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
	notify  map[nicfw.EndpointID]int // endpoint -> its notification eventfd
	hosts   map[nicfw.HostID]net.HardwareAddr
	epoch   uint64
	mapper  *mapper.Module // the engine's mapper module; nil: static host table
	nextID  nicfw.EndpointID
	connSeq atomic.Uint64 // connections accepted: each one's number (daemonConn.group)
	sleeps  uint64
	wg      sync.WaitGroup
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
	if cfg.Sleep == 0 {
		cfg.Sleep = DefaultSleep
	}
	if cfg.Engine.Transport.AckDelay == 0 {
		cfg.Engine.Transport.AckDelay = DefaultAckDelay
	}
	switch {
	case cfg.Engine.Transport.AckSoonDelay == 0:
		cfg.Engine.Transport.AckSoonDelay = DefaultReplyAckDelay
	case cfg.Engine.Transport.AckSoonDelay < 0:
		cfg.Engine.Transport.AckSoonDelay = 0 // AckSoon is AckNow
	}
	if cfg.MaxPerUser < 0 || cfg.MaxConnsPerUser < 0 || cfg.MaxConns < 0 || cfg.UserMemory < 0 || cfg.Sleep < 0 && cfg.Sleep != BusyPoll {
		return nil, fmt.Errorf("%w: MaxPerUser %d, MaxConnsPerUser %d, MaxConns %d, UserMemory %d, Sleep %v",
			nicfw.ErrConfig, cfg.MaxPerUser, cfg.MaxConnsPerUser, cfg.MaxConns, cfg.UserMemory, cfg.Sleep)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	var allowed unix.CPUSet
	if len(cfg.Cores) > 0 {
		if err := unix.SchedGetaffinity(0, &allowed); err != nil {
			return nil, fmt.Errorf("nicfw: the CPUs this process may use: %w", err)
		}
	}
	for _, c := range cfg.Cores {
		if c < 0 || c >= 1024 || !allowed.IsSet(c) {
			return nil, fmt.Errorf("%w: CPU %d is not one this process may run on (it has %d)", nicfw.ErrConfig, c, allowed.Count())
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

// closeAll releases what New made.
func (d *Daemon) closeAll() {
	for _, fd := range d.notify {
		unix.Close(fd)
	}
	d.eng.Close()
	d.releases.Wait() // the engine has let go of every memory
	unix.Close(d.wake)
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
