//go:build linux

package nicfw

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// daemonConn is one application's session: its credentials and endpoints.
// Its goroutine reads requests and answers them in order.
type daemonConn struct {
	d    *Daemon
	conn *net.UnixConn
	cred *unix.Ucred
	eps  map[EndpointID]bool
}

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
	c := &daemonConn{d: d, conn: conn, cred: cred, eps: make(map[EndpointID]bool)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return nil, ErrDaemonClosed
	}
	d.conns[c] = struct{}{}
	return c, nil
}

// privileged reports whether the peer is root or the daemon's user.
func (c *daemonConn) privileged() bool {
	return c.cred.Uid == 0 || int(c.cred.Uid) == os.Geteuid()
}

// serve answers the connection's requests until it closes, then closes its
// endpoints.
func (c *daemonConn) serve() {
	d := c.d
	log := d.log.With("pid", c.cred.Pid, "uid", c.cred.Uid)
	log.Info("application connected")
	defer func() {
		for id := range c.eps {
			if err := d.closeEndpoint(id); err != nil && !errors.Is(err, ErrDaemonClosed) {
				log.Warn("closing endpoint", "endpoint", id, "err", err)
			}
		}
		d.mu.Lock()
		d.perUser[c.cred.Uid] -= len(c.eps)
		if d.perUser[c.cred.Uid] <= 0 {
			delete(d.perUser, c.cred.Uid)
		}
		delete(d.conns, c)
		d.mu.Unlock()
		c.conn.Close()
		log.Info("application gone", "endpoints closed", len(c.eps))
	}()
	buf := make([]byte, maxControlMsg)
	for {
		n, err := c.conn.Read(buf)
		if err != nil || n == 0 {
			return // closed, exited or died
		}
		var op struct {
			Op string `json:"op"`
		}
		if err := json.Unmarshal(buf[:n], &op); err != nil {
			c.reply(DaemonReply{Error: fmt.Sprintf("bad request: %v", err)})
			continue
		}
		switch op.Op {
		case "open":
			var req OpenRequest
			if err := json.Unmarshal(buf[:n], &req); err != nil {
				c.reply(DaemonReply{Error: fmt.Sprintf("bad open request: %v", err)})
				continue
			}
			c.open(req, log)
		case "close":
			var req CloseRequest
			if err := json.Unmarshal(buf[:n], &req); err != nil || !c.eps[req.Endpoint] {
				c.reply(DaemonReply{Error: fmt.Sprintf("close: endpoint %d is not this connection's", req.Endpoint)})
				continue
			}
			err := d.closeEndpoint(req.Endpoint)
			delete(c.eps, req.Endpoint)
			d.mu.Lock()
			d.perUser[c.cred.Uid]--
			d.mu.Unlock()
			c.replyErr(DaemonReply{Endpoint: req.Endpoint}, err)
		case "stats":
			s, err := d.Stats()
			c.replyErr(DaemonReply{Stats: &s}, err)
		default:
			c.reply(DaemonReply{Error: fmt.Sprintf("unknown request %q", op.Op)})
		}
	}
}

// open handles an open request.
func (c *daemonConn) open(req OpenRequest, log interface{ Info(string, ...any) }) {
	d := c.d
	refuse := func(err error) {
		d.mu.Lock()
		d.refused++
		d.mu.Unlock()
		c.reply(DaemonReply{Error: err.Error()})
	}
	if req.Endpoint != 0 && req.Endpoint < FirstUserEndpoint && !c.privileged() {
		refuse(fmt.Errorf("%w: endpoint %d is privileged (below %d): uid %d may not open it", ErrPermission, req.Endpoint, FirstUserEndpoint, c.cred.Uid))
		return
	}
	d.mu.Lock()
	if d.perUser[c.cred.Uid] >= d.cfg.MaxPerUser {
		d.mu.Unlock()
		refuse(fmt.Errorf("%w: uid %d has %d endpoints open, the most allowed", ErrPermission, c.cred.Uid, d.cfg.MaxPerUser))
		return
	}
	d.perUser[c.cred.Uid]++
	d.mu.Unlock()
	id, mem, notify, err := d.open(req)
	if err != nil {
		d.mu.Lock()
		d.perUser[c.cred.Uid]--
		d.mu.Unlock()
		refuse(err)
		return
	}
	c.eps[id] = true
	log.Info("endpoint opened", "endpoint", id, "tag", req.Tag, "table", len(req.Table))
	c.send(DaemonReply{Endpoint: id}, mem.FD(), notify, d.wake)
}

func (c *daemonConn) replyErr(r DaemonReply, err error) {
	if err != nil {
		r.Error = err.Error()
	}
	c.reply(r)
}

func (c *daemonConn) reply(r DaemonReply) { c.send(r) }

// send writes r with fds attached.
func (c *daemonConn) send(r DaemonReply, fds ...int) {
	r.Host = HostID(c.d.host.Load())
	b, _ := json.Marshal(r)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.conn.WriteMsgUnix(b, oob, nil); err != nil {
		c.conn.Close() // serve's Read fails and cleans up
	}
}

// Conn is an application's session with a daemon (firmware mode).
type Conn struct {
	conn *net.UnixConn
}

// Endpoint is an endpoint opened through a daemon: its memory, mapped, and
// the descriptors of its notification and of the engine's wake-up.
type Endpoint struct {
	*EndpointView
	ID     EndpointID
	Host   HostID
	notify int
	kick   int
	conn   *Conn
}

// Dial connects to the daemon at the unix socket path.
func Dial(path string) (*Conn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("nicfw: connecting to the daemon: %w", err)
	}
	return &Conn{conn: c}, nil
}

// Close closes the session; the daemon closes its endpoints.
func (c *Conn) Close() error { return c.conn.Close() }

// roundTrip sends a request and reads the reply and its descriptors.
func (c *Conn) roundTrip(req any) (DaemonReply, []int, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return DaemonReply{}, nil, err
	}
	if _, err := c.conn.Write(b); err != nil {
		return DaemonReply{}, nil, fmt.Errorf("nicfw: daemon request: %w", err)
	}
	buf := make([]byte, maxControlMsg)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := c.conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return DaemonReply{}, nil, fmt.Errorf("nicfw: daemon reply: %w", err)
	}
	if n == 0 {
		return DaemonReply{}, nil, fmt.Errorf("nicfw: daemon reply: %w", ErrDaemonClosed)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return DaemonReply{}, nil, fmt.Errorf("nicfw: daemon reply: %w", err)
		}
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	var r DaemonReply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		closeFDs(fds)
		return DaemonReply{}, nil, fmt.Errorf("nicfw: daemon reply: %w", err)
	}
	if r.Error != "" {
		closeFDs(fds)
		return r, nil, fmt.Errorf("nicfw: daemon: %s", r.Error)
	}
	return r, fds, nil
}

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
	if len(fds) != 3 {
		closeFDs(fds)
		return nil, fmt.Errorf("nicfw: daemon sent %d descriptors with the endpoint, want 3", len(fds))
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
	v, err := MapEndpoint(fds[0])
	unix.Close(fds[0])
	if err != nil {
		closeFDs(fds[1:])
		return nil, err
	}
	ep := &Endpoint{EndpointView: v, ID: r.Endpoint, Host: r.Host, notify: fds[1], kick: fds[2], conn: c}
	one := [8]byte{1}
	kick := ep.kick
	v.SetKick(func() { unix.Write(kick, one[:]) })
	return ep, nil
}

// Stats asks the daemon for its counters.
func (c *Conn) Stats() (DaemonStats, error) {
	r, _, err := c.roundTrip(struct {
		Op string `json:"op"`
	}{"stats"})
	if err != nil {
		return DaemonStats{}, err
	}
	if r.Stats == nil {
		return DaemonStats{}, errors.New("nicfw: daemon sent no stats")
	}
	return *r.Stats, nil
}

// Wait blocks until a receive queue in ev is non-empty or the timeout
// passes (negative: no limit), without spinning: it arms the endpoint's
// event mask and sleeps on its notification eventfd (Block). It reports
// whether an event is ready; a true may be spurious (a notification left
// from an earlier arming), so callers receive and wait again.
func (e *Endpoint) Wait(ev Events, timeout time.Duration) (bool, error) {
	if e.Arm(ev) != 0 {
		return true, nil
	}
	if err := e.Block(timeout); err != nil {
		e.Arm(0)
		return false, err
	}
	if e.Ready()&ev != 0 {
		e.Arm(0)
		return true, nil
	}
	e.Arm(0)
	return false, nil
}

// Block sleeps on the endpoint's notification eventfd until the engine
// writes it or timeout passes (negative: no limit), without arming: the
// caller has armed (EndpointView.Arm) and found nothing ready. This is
// am.AMIIConfig.Block in firmware mode.
func (e *Endpoint) Block(timeout time.Duration) error {
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	fds := []unix.PollFd{{Fd: int32(e.notify), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("nicfw: endpoint wait: %w", err)
		}
		var b [8]byte
		unix.Read(e.notify, b[:])
		return nil
	}
}

// Close unmaps the endpoint and asks the daemon to close it.
func (e *Endpoint) Close() error {
	_, _, err := e.conn.roundTrip(CloseRequest{Op: "close", Endpoint: e.ID})
	unix.Close(e.notify)
	unix.Close(e.kick)
	return errors.Join(err, e.EndpointView.Close())
}
