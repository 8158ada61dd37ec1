package cluster

// The hostfile's rendezvous: rank 0 runs a small TCP server on the
// rendezvous port and every rank, rank 0 included, is its client. Messages
// are JSON, one per line:
//
//	hello   {rank, size, digest}  -> welcome, or error {msg} and the connection closes
//	fence   {kv: the puts since the last fence}
//	        <- fenced {kv: every rank's puts of this fence}, once all ranks have fenced
//	abort   {msg}                 -> abort {rank, msg} to every other rank
//	bye                           <- bye; a rank whose connection ends without bye is
//	                                 announced to the others as lost {rank}
//
// The server ends when every rank has said bye or was lost; rank 0's Close
// waits for that. The rendezvous trusts its network: the digest only keeps
// tasks of different hostfiles apart.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// rvIOTimeout bounds one message's write, and the handshake's answer.
const rvIOTimeout = 10 * time.Second

// rvMsg is one message of the rendezvous.
type rvMsg struct {
	Op     string            `json:"op"`
	Rank   int               `json:"rank,omitempty"`
	Size   int               `json:"size,omitempty"`
	Digest string            `json:"digest,omitempty"`
	KV     map[string]string `json:"kv,omitempty"`
	Msg    string            `json:"msg,omitempty"`
}

// rvClient is one rank's connection to the rendezvous: the kvBackend of a
// hostfile job.
type rvClient struct {
	conn   net.Conn
	server *rvServer // rank 0 only

	wmu     sync.Mutex // serialises writes
	mu      sync.Mutex // guards the fields below
	pending map[string]string
	kv      map[string]string
	failed  error         // abort or lost: every later call fails
	broken  error         // a fence that timed out
	fenced  chan rvMsg    // the reader's fenced messages
	dead    chan struct{} // closed when failed is set or the connection ends
	bye     chan struct{} // closed when the server said bye
	closing bool
}

// joinRendezvous connects rank to the rendezvous at addr (rank 0 starts
// the server first).
func joinRendezvous(ctx context.Context, addr, digest string, rank, size int) (*rvClient, error) {
	c := &rvClient{pending: map[string]string{}, kv: map[string]string{},
		fenced: make(chan rvMsg, 1), dead: make(chan struct{}), bye: make(chan struct{})}
	dialAddr := addr
	if rank == 0 {
		_, port, _ := net.SplitHostPort(addr)
		s, err := listenRendezvous(port, digest, size)
		if err != nil {
			return nil, err
		}
		c.server = s
		dialAddr = net.JoinHostPort("127.0.0.1", port)
	}
	conn, err := dialRetry(ctx, dialAddr)
	if err == nil {
		err = c.hello(conn, rvMsg{Op: "hello", Rank: rank, Size: size, Digest: digest})
	}
	if err != nil {
		if c.server != nil {
			c.server.shutdown()
		}
		return nil, fmt.Errorf("cluster: rank %d joining the rendezvous at %s: %w", rank, addr, err)
	}
	go c.read(bufio.NewReader(conn))
	return c, nil
}

// dialRetry connects to addr, retrying while nobody listens, until ctx ends.
func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	wait := 20 * time.Millisecond
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (is rank 0 running?): %w", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// hello sends the greeting and reads the answer.
func (c *rvClient) hello(conn net.Conn, m rvMsg) error {
	c.conn = conn
	conn.SetDeadline(time.Now().Add(rvIOTimeout))
	defer conn.SetDeadline(time.Time{})
	if err := json.NewEncoder(conn).Encode(m); err != nil {
		conn.Close()
		return err
	}
	var ans rvMsg
	// One line only: read it byte by byte, so nothing after it is consumed.
	line, err := readJSONLine(conn)
	if err == nil {
		err = json.Unmarshal(line, &ans)
	}
	switch {
	case err != nil:
		err = fmt.Errorf("no answer from rank 0: %w", err)
	case ans.Op == "error":
		err = errors.New(ans.Msg)
	case ans.Op != "welcome":
		err = fmt.Errorf("unexpected answer %q", ans.Op)
	}
	if err != nil {
		conn.Close()
	}
	return err
}

// readJSONLine reads one line from conn without reading past it.
func readJSONLine(conn net.Conn) ([]byte, error) {
	var line []byte
	var b [1]byte
	for len(line) < 1<<16 {
		if _, err := conn.Read(b[:]); err != nil {
			return nil, err
		}
		if b[0] == '\n' {
			return line, nil
		}
		line = append(line, b[0])
	}
	return nil, errors.New("answer too long")
}

// read dispatches the server's messages until the connection ends.
func (c *rvClient) read(r *bufio.Reader) {
	dec := json.NewDecoder(r)
	for {
		var m rvMsg
		if err := dec.Decode(&m); err != nil {
			c.fail(fmt.Errorf("%w: the connection to rank 0's rendezvous ended: %w", ErrTaskLost, err))
			return
		}
		switch m.Op {
		case "fenced":
			c.fenced <- m
		case "abort":
			c.fail(fmt.Errorf("%w by rank %d: %s", ErrAborted, m.Rank, m.Msg))
		case "lost":
			c.fail(fmt.Errorf("%w: rank %d's connection ended before it closed the job (did it die?)", ErrTaskLost, m.Rank))
		case "bye":
			close(c.bye)
			return
		}
	}
}

// fail records the first failure and wakes every waiter.
func (c *rvClient) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		if c.closing {
			err = ErrClosed
		}
		c.failed = err
		close(c.dead)
	}
}

// usable reports why no request can be made.
func (c *rvClient) usable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closing:
		return ErrClosed
	case c.failed != nil:
		return c.failed
	case c.broken != nil:
		return c.broken
	}
	return nil
}

// send writes one message.
func (c *rvClient) send(m rvMsg) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(rvIOTimeout))
	if err := json.NewEncoder(c.conn).Encode(m); err != nil {
		return fmt.Errorf("cluster: writing to the rendezvous: %w", err)
	}
	return nil
}

func (c *rvClient) put(_ context.Context, key, value string) error {
	if err := c.usable(); err != nil {
		return err
	}
	c.mu.Lock()
	c.pending[key] = value
	c.mu.Unlock()
	return nil
}

func (c *rvClient) fence(ctx context.Context) error {
	if err := c.usable(); err != nil {
		return err
	}
	c.mu.Lock()
	puts := c.pending
	c.pending = map[string]string{}
	c.mu.Unlock()
	if err := c.send(rvMsg{Op: "fence", KV: puts}); err != nil {
		return err
	}
	select {
	case m := <-c.fenced:
		c.mu.Lock()
		for k, v := range m.KV {
			c.kv[k] = v
		}
		c.mu.Unlock()
		return nil
	case <-c.dead:
		return c.usable()
	case <-ctx.Done():
		c.mu.Lock()
		c.broken = fmt.Errorf("cluster: an earlier fence did not complete: %w", ctx.Err())
		c.mu.Unlock()
		return ctx.Err()
	}
}

func (c *rvClient) get(_ context.Context, _ int, key string) (string, bool, error) {
	if err := c.usable(); err != nil {
		return "", false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.kv[key]
	return v, ok, nil
}

func (c *rvClient) abort(msg string) error {
	if err := c.send(rvMsg{Op: "abort", Msg: msg}); err != nil {
		return err
	}
	c.fail(fmt.Errorf("%w by this rank: %s", ErrAborted, msg))
	return nil
}

func (c *rvClient) close(ctx context.Context) error {
	c.mu.Lock()
	already := c.closing
	c.closing = true
	c.mu.Unlock()
	if already {
		return ErrClosed
	}
	err := c.send(rvMsg{Op: "bye"})
	if err == nil {
		select {
		case <-c.bye:
		case <-c.dead:
		case <-ctx.Done():
			err = fmt.Errorf("cluster: rank 0's rendezvous did not answer bye: %w", ctx.Err())
		}
	}
	c.conn.Close()
	if c.server != nil {
		if werr := c.server.wait(ctx); err == nil {
			err = werr
		}
	}
	return err
}
