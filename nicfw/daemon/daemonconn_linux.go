//go:build linux

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// daemonConn is one application's session: its credentials and endpoints.
// Its goroutine reads requests and answers them in order.
type daemonConn struct {
	d    *Daemon
	conn *net.UnixConn
	raw  syscall.RawConn
	peer *peer
	eps  map[nicfw.EndpointID]held // open endpoints
	// group is the connection's number, its endpoints' VNet.Group: they
	// share a page of doorbells.
	group uint64
}

// held is an endpoint a connection holds.
type held struct {
	size     int64              // its memory's size, for the user's quota
	tag      uint64             // its virtual network
	big      *bigMemory         // the daemon's hold on a large one's memory
	reserved []nicfw.EndpointID // the ids its open reserved (OpenRequest.Reserve)
}

// owner is who opened an endpoint, for Stats.
type owner struct {
	conn *daemonConn
	uid  uint32
	tag  uint64
}

// use returns the user's entry, made if need be; d.mu is held.
func (d *Daemon) use(uid uint32) *userUse {
	u := d.users[uid]
	if u == nil {
		u = &userUse{}
		d.users[uid] = u
	}
	return u
}

// releaseUse gives back what a user held; d.mu is held.
func (d *Daemon) releaseUse(uid uint32, conns, endpoints int, memory int64) {
	u := d.use(uid)
	u.conns -= conns
	u.endpoints -= endpoints
	u.memory -= memory
	if u.conns <= 0 && u.endpoints <= 0 {
		delete(d.users, uid)
	}
}

// newConn admits a connection: it reads the peer's credentials and counts
// the connection against the user's and the daemon's bounds. It runs in
// the accepting goroutine; a connection it refuses has taken nothing.
func (d *Daemon) newConn(conn *net.UnixConn) (*daemonConn, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	d.mu.Lock()
	switch u := d.use(cred.Uid); {
	case d.stopped:
		err = ErrClosed
	case u.conns >= d.cfg.MaxConnsPerUser:
		err = fmt.Errorf("%w: uid %d has %d connections open, the most allowed", ErrQuota, cred.Uid, u.conns)
	case len(d.conns) >= d.cfg.MaxConns:
		err = fmt.Errorf("%w: the daemon has %d connections open, the most allowed", ErrQuota, len(d.conns))
	default:
		u.conns++
	}
	if err != nil {
		d.releaseUse(cred.Uid, 0, 0, 0) // forget a user that holds nothing
		d.mu.Unlock()
		return nil, err
	}
	c := &daemonConn{d: d, conn: conn, raw: raw, eps: make(map[nicfw.EndpointID]held), group: d.connSeq.Add(1)}
	d.conns[c] = struct{}{}
	d.mu.Unlock()
	raw.Control(func(fd uintptr) { c.peer = peerOf(int(fd), cred) })
	return c, nil
}

// privileged reports whether the peer is root or the daemon's user.
func (c *daemonConn) privileged() bool { return c.peer.privileged }

// serve answers the connection's requests until it closes, then closes its
// endpoints.
func (c *daemonConn) serve() {
	d := c.d
	log := d.log.With("pid", c.peer.pid, "uid", c.peer.uid)
	log.Info("application connected")
	defer func() {
		var memory int64
		for id, h := range c.eps {
			if err := d.closeEndpoint(id, h.big); err != nil && !errors.Is(err, ErrClosed) {
				log.Warn("closing endpoint", "endpoint", id, "err", err)
			}
			d.forget(c, id, h.tag)
			d.unreserve(c, h.reserved)
			memory += h.size
		}
		d.mu.Lock()
		d.releaseUse(c.peer.uid, 1, len(c.eps), memory)
		delete(d.conns, c)
		d.mu.Unlock()
		c.conn.Close()
		log.Info("application gone", "endpoints closed", len(c.eps))
	}()
	for {
		msg, err := c.request()
		if err != nil {
			return // closed, exited or died
		}
		var op struct {
			Op string `json:"op"`
		}
		if err := json.Unmarshal(msg, &op); err != nil {
			c.reply(Reply{Error: fmt.Sprintf("bad request: %v", err)})
			continue
		}
		switch op.Op {
		case "open":
			var req OpenRequest
			if err := json.Unmarshal(msg, &req); err != nil {
				c.reply(Reply{Error: fmt.Sprintf("bad open request: %v", err)})
				continue
			}
			c.open(req, log)
		case "close":
			var req CloseRequest
			err := json.Unmarshal(msg, &req)
			h, ok := c.eps[req.Endpoint]
			if err != nil || !ok {
				c.replyErr(Reply{}, fmt.Errorf("%w: close: endpoint %d is not this connection's", ErrPermission, req.Endpoint))
				continue
			}
			err = d.closeEndpoint(req.Endpoint, h.big)
			delete(c.eps, req.Endpoint)
			d.forget(c, req.Endpoint, h.tag)
			d.unreserve(c, h.reserved)
			d.mu.Lock()
			d.releaseUse(c.peer.uid, 0, 1, h.size)
			d.mu.Unlock()
			c.replyErr(Reply{Endpoint: req.Endpoint}, err)
		case "grant":
			var req GrantRequest
			if err := json.Unmarshal(msg, &req); err != nil {
				c.reply(Reply{Error: fmt.Sprintf("bad grant request: %v", err)})
				continue
			}
			err := d.grant(c.peer, req)
			if err != nil {
				d.mu.Lock()
				d.refused++
				d.mu.Unlock()
			} else {
				log.Info("grant", "tag", req.Tag, "uid", req.UID, "gid", req.GID, "revoke", req.Revoke)
			}
			c.replyErr(Reply{}, err)
		case "stats":
			s, err := d.Stats()
			if err == nil {
				d.redact(&s, c.peer)
			}
			c.replyErr(Reply{Stats: &s}, err)
		default:
			c.reply(Reply{Error: fmt.Sprintf("unknown request %q", op.Op)})
		}
	}
}

// request waits for the connection's next request and returns it. An idle
// connection holds no buffer: it waits for the request to be there, asks
// its size (MSG_PEEK|MSG_TRUNC) and reads it into a buffer of that size.
// A request larger than maxControlMsg is read and dropped, and answered
// with an error.
func (c *daemonConn) request() ([]byte, error) {
	for {
		var size int
		var perr error
		if err := c.raw.Read(func(fd uintptr) bool {
			size, _, perr = unix.Recvfrom(int(fd), nil, unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
			return perr != unix.EAGAIN
		}); err != nil {
			return nil, err
		}
		if perr != nil {
			return nil, perr
		}
		if size == 0 {
			return nil, errors.New("closed") // end of file (a request is never empty)
		}
		buf := make([]byte, min(size, maxControlMsg))
		n, err := c.conn.Read(buf)
		if err != nil {
			return nil, err
		}
		if size <= maxControlMsg {
			return buf[:n], nil
		}
		c.reply(Reply{Error: fmt.Sprintf("bad request: %d bytes, the most is %d", size, maxControlMsg)})
	}
}

// forget removes endpoint id of c from the daemon's records: its owner and
// its place in virtual network tag.
func (d *Daemon) forget(c *daemonConn, id nicfw.EndpointID, tag uint64) {
	d.mu.Lock()
	if d.owners[id].conn == c {
		delete(d.owners, id)
	}
	d.mu.Unlock()
	d.leave(tag)
}

// open handles an open request: it checks it whole, the user's quotas and
// its right to the virtual network, before anything is made.
func (c *daemonConn) open(req OpenRequest, log interface{ Info(string, ...any) }) {
	d := c.d
	refuse := func(err error) {
		d.mu.Lock()
		d.refused++
		d.mu.Unlock()
		c.replyErr(Reply{}, err)
	}
	if req.Endpoint != 0 && req.Endpoint < FirstUserEndpoint && !c.privileged() {
		refuse(fmt.Errorf("%w: endpoint %d is privileged (below %d): uid %d may not open it", ErrPermission, req.Endpoint, FirstUserEndpoint, c.peer.uid))
		return
	}
	size, err := endpoint.MemorySize(endpoint.Config{QueueEntries: req.QueueEntries, StagingSize: req.StagingSize, TableSize: len(req.Table)})
	switch {
	case err != nil:
	case len(req.Table) == 0:
		err = fmt.Errorf("%w: an empty translation table", nicfw.ErrConfig)
	case req.Reserve < 0 || req.Reserve > MaxReserve || req.Reserve > 0 && req.Endpoint == 0 ||
		int(req.Endpoint)+req.Reserve-1 > int(^nicfw.EndpointID(0)):
		err = fmt.Errorf("%w: reserve %d ids from endpoint %d (at most %d, from an endpoint given, up to %d)",
			nicfw.ErrConfig, req.Reserve, req.Endpoint, MaxReserve, ^nicfw.EndpointID(0))
	}
	if err != nil {
		refuse(err)
		return
	}
	uid := c.peer.uid
	d.mu.Lock()
	u := d.use(uid)
	switch {
	case u.endpoints >= d.cfg.MaxPerUser:
		err = fmt.Errorf("%w: uid %d has %d endpoints open, the most allowed", ErrQuota, uid, u.endpoints)
	case u.memory+size > d.cfg.UserMemory:
		err = fmt.Errorf("%w: an endpoint of %d bytes would take uid %d's endpoint memory to %d, past its %d (xam fw --user-memory)",
			ErrQuota, size, uid, u.memory+size, d.cfg.UserMemory)
	default:
		u.endpoints++
		u.memory += size
	}
	d.mu.Unlock()
	if err != nil {
		refuse(err)
		return
	}
	tag, err := d.join(c.peer, req.Tag, req.Key)
	var reserved []nicfw.EndpointID
	if err == nil {
		d.mu.Lock()
		reserved, err = d.reserve(c, req)
		d.mu.Unlock()
		if err != nil {
			d.leave(tag)
		}
	}
	if err != nil {
		d.mu.Lock()
		d.releaseUse(uid, 0, 1, size)
		d.mu.Unlock()
		refuse(err)
		return
	}
	id, mem, notify, bells, big, err := d.open(req, tag, size, uid, c.group)
	if err != nil {
		d.unreserve(c, reserved)
		d.leave(tag)
		d.mu.Lock()
		d.releaseUse(uid, 0, 1, size)
		d.mu.Unlock()
		refuse(err)
		return
	}
	c.eps[id] = held{size: size, tag: tag, big: big, reserved: reserved}
	d.mu.Lock()
	d.owners[id] = owner{conn: c, uid: uid, tag: tag}
	d.mu.Unlock()
	log.Info("endpoint opened", "endpoint", id, "tag", tag, "table", len(req.Table))
	if bells < 0 {
		c.send(Reply{Endpoint: id, Tag: tag}, mem.FD(), notify, d.wake)
		return
	}
	c.send(Reply{Endpoint: id, Tag: tag}, mem.FD(), notify, d.wake, bells)
	unix.Close(bells)
}

func (c *daemonConn) replyErr(r Reply, err error) {
	if err != nil {
		r.Error, r.Code = err.Error(), codeOf(err)
	}
	c.reply(r)
}

func (c *daemonConn) reply(r Reply) { c.send(r) }

// send writes r with fds attached.
func (c *daemonConn) send(r Reply, fds ...int) {
	r.Host = nicfw.HostID(c.d.host.Load())
	b, _ := json.Marshal(r)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.conn.WriteMsgUnix(b, oob, nil); err != nil {
		c.conn.Close() // serve's Read fails and cleans up
	}
}

// Conn is an application's session with a daemon (firmware mode). Every
// call has a deadline (SetTimeout; DefaultCallTimeout): a daemon that does
// not answer makes the call fail, never hang.
type Conn struct {
	conn    *net.UnixConn
	fd      int // the socket, polled by Endpoint.Block for the daemon's end
	timeout time.Duration
}

// Endpoint is an endpoint opened through a daemon: its memory, mapped, and
// the descriptors of its notification and of the engine's wake-up.
type Endpoint struct {
	*endpoint.View
	ID   nicfw.EndpointID
	Host nicfw.HostID
	// Tag is the endpoint's virtual network: the one asked for, or the
	// one the daemon drew for an open with tag 0 (to give to the job's
	// other hosts, and to grant on: Conn.Grant).
	Tag    uint64
	notify int
	kick   int
	conn   *Conn
}

// Dial connects to the daemon at the unix socket path, waiting at most
// DefaultCallTimeout.
func Dial(path string) (*Conn, error) {
	nc, err := net.DialTimeout("unixpacket", path, DefaultCallTimeout)
	if err != nil {
		return nil, fmt.Errorf("nicfw: connecting to the daemon: %w", err)
	}
	c := &Conn{conn: nc.(*net.UnixConn), fd: -1, timeout: DefaultCallTimeout}
	if raw, err := c.conn.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) { c.fd = int(fd) })
	}
	return c, nil
}

// SetTimeout sets how long each later call waits for the daemon (a large
// endpoint's open takes longer); 0 or less: no limit.
func (c *Conn) SetTimeout(d time.Duration) { c.timeout = d }

// Close closes the session; the daemon closes its endpoints.
func (c *Conn) Close() error { return c.conn.Close() }

// roundTrip sends a request and reads the reply and its descriptors.
func (c *Conn) roundTrip(req any) (Reply, []int, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return Reply{}, nil, err
	}
	var deadline time.Time
	if c.timeout > 0 {
		deadline = time.Now().Add(c.timeout)
	}
	c.conn.SetDeadline(deadline)
	_, werr := c.conn.Write(b)
	buf := make([]byte, maxControlMsg)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := c.conn.ReadMsgUnix(buf, oob)
	if errors.Is(err, unix.ECONNRESET) {
		// A daemon that refused the connection answered and closed it
		// with the request unread: the reset comes first, the answer
		// after it.
		n, oobn, _, _, err = c.conn.ReadMsgUnix(buf, oob)
	}
	if n == 0 && (err == nil || errors.Is(err, io.EOF)) {
		// The end of the connection can overtake its last message: a
		// non-blocking receive on a SOCK_SEQPACKET socket that finds the
		// queue empty and then the peer gone reports the end, even when
		// the peer's last message arrived in between (the daemon
		// answers a refused connection and closes it at once; on a busy
		// machine 1 refusal in about 5,000 read as a bare end). Once the
		// end is reported, every message sent before it is queued: a
		// second read finds the answer, or the end again.
		n, oobn, _, _, err = c.conn.ReadMsgUnix(buf, oob)
	}
	switch {
	case werr != nil && (err != nil || n == 0):
		// A daemon that refused the connection and closed it before the
		// request came left its answer, if any, to read (read above).
		return Reply{}, nil, fmt.Errorf("nicfw: daemon request: %w", werr)
	case err != nil:
		return Reply{}, nil, fmt.Errorf("nicfw: daemon reply: %w", err)
	}
	if n == 0 {
		return Reply{}, nil, fmt.Errorf("nicfw: daemon reply: %w", ErrClosed)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return Reply{}, nil, fmt.Errorf("nicfw: daemon reply: %w", err)
		}
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	var r Reply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		closeFDs(fds)
		return Reply{}, nil, fmt.Errorf("nicfw: daemon reply: %w", err)
	}
	if r.Error != "" {
		closeFDs(fds)
		if sentinel := errorOf(r.Code); sentinel != nil {
			return r, nil, &Error{Msg: r.Error, Kind: sentinel}
		}
		return r, nil, &Error{Msg: r.Error}
	}
	return r, fds, nil
}

// Error is a daemon's refusal as the client sees it: the daemon's
// message, and its kind (ErrPermission, ErrWeakTag, ErrQuota, ErrConfig,
// ErrEndpointInUse, ErrNoNetwork, ErrClosed), which errors.Is matches.
type Error struct {
	Msg  string
	Kind error // nil: none of the kinds
}

// Error reads "the daemon refused: " and the daemon's message, without
// the package prefix its kind's text carries ("nicfw: "): what a person
// who ran a command reads.
func (e *Error) Error() string { return "the daemon refused: " + strings.TrimPrefix(e.Msg, "nicfw: ") }

// Unwrap returns the refusal's kind.
func (e *Error) Unwrap() error { return e.Kind }

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Open opens an endpoint. The request's Op is set.
func (c *Conn) Open(req OpenRequest) (*Endpoint, error) {
	req.Op = "open"
	r, fds, err := c.roundTrip(req)
	if err != nil {
		return nil, err
	}
	if len(fds) != 3 && len(fds) != 4 {
		closeFDs(fds)
		return nil, fmt.Errorf("nicfw: daemon sent %d descriptors with the endpoint, want 3 or 4", len(fds))
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
	// The memory, the notification, the engine's wake-up, and the page of
	// doorbells unless the daemon had none to give.
	v, err := endpoint.Map(fds[0])
	if err == nil && len(fds) == 4 {
		if err = v.MapBells(fds[3]); err != nil {
			v.Close()
		}
	}
	unix.Close(fds[0])
	if len(fds) == 4 {
		unix.Close(fds[3])
	}
	if err != nil {
		closeFDs(fds[1:3])
		return nil, err
	}
	ep := &Endpoint{View: v, ID: r.Endpoint, Host: r.Host, Tag: r.Tag, notify: fds[1], kick: fds[2], conn: c}
	one := [8]byte{1}
	kick := ep.kick
	v.SetKick(func() { unix.Write(kick, one[:]) })
	return ep, nil
}

// Grant lets a user or group open endpoints of a virtual network this
// connection's user made on the daemon, or with Revoke no longer
// (GrantRequest). The request's Op is set. Only the network's creator,
// root and the daemon's user may grant: others get ErrPermission.
func (c *Conn) Grant(req GrantRequest) error {
	req.Op = "grant"
	_, fds, err := c.roundTrip(req)
	closeFDs(fds)
	return err
}

// Stats asks the daemon for its counters.
func (c *Conn) Stats() (Stats, error) {
	r, _, err := c.roundTrip(struct {
		Op string `json:"op"`
	}{"stats"})
	if err != nil {
		return Stats{}, err
	}
	if r.Stats == nil {
		return Stats{}, errors.New("nicfw: daemon sent no stats")
	}
	return *r.Stats, nil
}

// Wait blocks until a receive queue in ev is non-empty or the timeout
// passes (negative: no limit), without spinning: it arms the endpoint's
// event mask and sleeps on its notification eventfd (Block). It reports
// whether an event is ready; a true may be spurious (a notification left
// from an earlier arming), so callers receive and wait again. A false is
// the timeout: a leftover notification that finds nothing ready sends it
// back to sleep for the time left.
func (e *Endpoint) Wait(ev endpoint.Events, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		if e.Arm(ev) != 0 {
			return true, nil
		}
		left := time.Until(deadline)
		if timeout < 0 {
			left = -1
		} else if left <= 0 {
			e.Arm(0)
			return false, nil
		}
		if err := e.Block(left); err != nil {
			e.Arm(0)
			return false, err
		}
		if e.Ready()&ev != 0 {
			e.Arm(0)
			return true, nil
		}
	}
}

// Block sleeps on the endpoint's notification eventfd until the engine
// writes it or timeout passes (negative: no limit), without arming: the
// caller has armed (endpoint.View.Arm) and found nothing ready. This is
// amii.Endpoint's blocking wait in firmware mode (amii.Dial). It watches the connection too: a
// daemon that died (its end of the socket hung up) is ErrClosed,
// never a sleep that nothing will end.
func (e *Endpoint) Block(timeout time.Duration) error {
	return BlockAny([]*Endpoint{e}, timeout)
}

// BlockAny is Block for several endpoints of one connection: it sleeps
// until the engine notifies any of them or timeout passes (negative: no
// limit), or the daemon hangs up (ErrClosed). The caller has armed each
// and found nothing ready.
func BlockAny(eps []*Endpoint, timeout time.Duration) error {
	if len(eps) == 0 {
		return nil
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	fds := make([]unix.PollFd, 0, len(eps)+1)
	for _, e := range eps {
		fds = append(fds, unix.PollFd{Fd: int32(e.notify), Events: unix.POLLIN})
	}
	conn := eps[0].conn
	if conn.fd >= 0 {
		fds = append(fds, unix.PollFd{Fd: int32(conn.fd), Events: unix.POLLRDHUP})
	}
	for {
		_, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("nicfw: endpoint wait: %w", err)
		}
		if conn.fd >= 0 && fds[len(eps)].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0 {
			return fmt.Errorf("nicfw: endpoint wait: %w", ErrClosed)
		}
		var b [8]byte
		for i, e := range eps {
			if fds[i].Revents&unix.POLLIN != 0 {
				unix.Read(e.notify, b[:])
			}
		}
		return nil
	}
}

// Close unmaps the endpoint and asks the daemon to close it.
func (e *Endpoint) Close() error {
	_, _, err := e.conn.roundTrip(CloseRequest{Op: "close", Endpoint: e.ID})
	unix.Close(e.notify)
	unix.Close(e.kick)
	return errors.Join(err, e.View.Close())
}
