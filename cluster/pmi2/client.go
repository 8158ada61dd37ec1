package pmi2

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTimeout bounds a request other than a fence when its context has
// no deadline: the server answers those from its own memory, at once.
const DefaultTimeout = 30 * time.Second

// ErrClosed is returned by a Client's methods after Finalize, Abort or Close.
var ErrClosed = errors.New("pmi2: client closed")

// ErrBroken wraps the error that left a client unusable: a request whose
// answer did not come in time (it could still arrive, out of turn), or a
// broken connection.
var ErrBroken = errors.New("pmi2: connection unusable")

// Init is what fullinit told the task.
type Init struct {
	Rank, Size   int
	AppNum       int    // -1 unless the launcher numbers applications
	SpawnerJobID string // the job that spawned this one; "" when not spawned
	JobID        string // the PMI job id (Slurm: "JOBID.STEPID"), from job-getid
}

// Client is a connection to the launcher's PMI-2 server.
type Client struct {
	Init

	mu     sync.Mutex // serialises requests; guards the fields below
	conn   net.Conn
	r      *bufio.Reader
	broken error // set once the connection is out of step or gone
	// wmu serialises the writes to conn: a request's (under mu) and an
	// abort's, which does not wait for mu: a fence may hold it for as
	// long as the other tasks take (Abort).
	wmu    sync.Mutex
	closed atomic.Bool
}

// Open connects to the PMI-2 server on descriptor fd (PMI_FD), which it
// takes over (the client closes it), and runs the handshake: the version
// line, fullinit with pmiJobID (PMI_JOBID) and rank (PMI_RANK), then
// job-getid.
func Open(ctx context.Context, fd int, pmiJobID string, rank int) (*Client, error) {
	f := os.NewFile(uintptr(fd), "PMI_FD")
	if f == nil {
		return nil, fmt.Errorf("pmi2: descriptor %d is not valid", fd)
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("pmi2: descriptor %d is not a socket: %w", fd, err)
	}
	return NewClient(ctx, conn, pmiJobID, rank)
}

// NewClient runs the handshake on conn, as Open does.
func NewClient(ctx context.Context, conn net.Conn, pmiJobID string, rank int) (*Client, error) {
	c := &Client{conn: conn, r: bufio.NewReader(conn)}
	if err := c.handshake(ctx, pmiJobID, rank); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) handshake(ctx context.Context, pmiJobID string, rank int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	stop := c.deadline(ctx, DefaultTimeout)
	defer stop()
	if _, err := c.conn.Write([]byte(initLine)); err != nil {
		return fmt.Errorf("pmi2: sending init: %w", err)
	}
	line, err := readLine(c.r)
	if err != nil {
		return fmt.Errorf("pmi2: %w", err)
	}
	if err := parseInitAnswer(line); err != nil {
		return fmt.Errorf("pmi2: %w", err)
	}
	resp, err := c.roundTrip(Message{Cmd: "fullinit", Pairs: []Pair{
		{"pmijobid", pmiJobID}, {"pmirank", strconv.Itoa(rank)}, {"threaded", "FALSE"},
	}}, "fullinit-response")
	if err != nil {
		return err
	}
	if c.Rank, err = intPair(resp, "rank"); err != nil {
		return err
	}
	if c.Size, err = intPair(resp, "size"); err != nil {
		return err
	}
	if c.Rank < 0 || c.Size <= 0 || c.Rank >= c.Size {
		return fmt.Errorf("pmi2: fullinit gave rank %d of size %d", c.Rank, c.Size)
	}
	c.AppNum = -1
	if s, ok := resp.Get("appnum"); ok {
		c.AppNum, _ = strconv.Atoi(s)
	}
	c.SpawnerJobID, _ = resp.Get("spawner-jobid")
	resp, err = c.roundTrip(Message{Cmd: "job-getid"}, "job-getid-response")
	if err != nil {
		return err
	}
	c.JobID, _ = resp.Get("jobid")
	return nil
}

// deadline makes the connection's reads and writes end with ctx, or after
// timeout when ctx has no deadline; call the returned stop when done.
func (c *Client) deadline(ctx context.Context, timeout time.Duration) (stop func()) {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(timeout)
	}
	c.conn.SetDeadline(d)
	cancel := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		cancel()
		c.conn.SetDeadline(time.Time{})
	}
}

// roundTrip sends m and reads the answer, which must be want with rc=0.
// The caller holds mu and has set the deadline. An error of I/O leaves the
// client broken.
func (c *Client) roundTrip(m Message, want string) (Message, error) {
	if err := c.send(m); err != nil {
		return Message{}, err
	}
	resp, err := ReadMessage(c.r)
	if err != nil {
		c.broken = err
		return Message{}, fmt.Errorf("pmi2: %s: %w", m.Cmd, err)
	}
	if resp.Cmd != want {
		c.broken = fmt.Errorf("%w: answer %q to %s", ErrMalformed, clip(resp.String()), m.Cmd)
		return Message{}, fmt.Errorf("pmi2: %s: expected %s, got %q", m.Cmd, want, clip(resp.String()))
	}
	if rc, _ := resp.Get("rc"); rc != "0" && rc != "" {
		msg, _ := resp.Get("errmsg")
		return resp, fmt.Errorf("pmi2: %s failed: rc=%s %s", m.Cmd, rc, msg)
	}
	return resp, nil
}

// send writes m; the caller holds mu.
func (c *Client) send(m Message) error {
	b, err := Encode(m)
	if err != nil {
		return fmt.Errorf("pmi2: %s: %w", m.Cmd, err)
	}
	c.wmu.Lock()
	_, err = c.conn.Write(b)
	c.wmu.Unlock()
	if err != nil {
		c.broken = err
		return fmt.Errorf("pmi2: sending %s: %w", m.Cmd, err)
	}
	return nil
}

// usable reports why the client cannot send a request; the caller holds mu.
func (c *Client) usable() error {
	switch {
	case c.closed.Load():
		return ErrClosed
	case c.broken != nil:
		return fmt.Errorf("%w: %w", ErrBroken, c.broken)
	}
	return nil
}

// request runs one request with its deadline.
func (c *Client) request(ctx context.Context, timeout time.Duration, m Message, want string) (Message, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usable(); err != nil {
		return Message{}, err
	}
	stop := c.deadline(ctx, timeout)
	defer stop()
	resp, err := c.roundTrip(m, want)
	if err != nil && c.broken != nil && ctx.Err() != nil {
		return resp, fmt.Errorf("%w (%w)", err, ctx.Err())
	}
	return resp, err
}

// Put publishes key=value for the next fence. Slurm's server cuts a value
// at its first ';' (see the package documentation): Put refuses one.
func (c *Client) Put(ctx context.Context, key, value string) error {
	if strings.IndexByte(value, ';') >= 0 {
		return fmt.Errorf("pmi2: value of %q holds ';', which Slurm's PMI-2 server does not unescape", key)
	}
	_, err := c.request(ctx, DefaultTimeout, Message{Cmd: "kvs-put", Pairs: []Pair{{"key", key}, {"value", value}}}, "kvs-put-response")
	return err
}

// Fence waits until every task of the job has fenced, after which the
// values put before it are visible to all. It waits until ctx ends; with no
// deadline in ctx, for ever. A fence that ends without its answer leaves
// the client broken.
func (c *Client) Fence(ctx context.Context) error {
	_, err := c.request(ctx, 100*365*24*time.Hour, Message{Cmd: "kvs-fence"}, "kvs-fence-response")
	return err
}

// Get returns the value of key, and whether any task put it before the
// last fence.
func (c *Client) Get(ctx context.Context, key string) (string, bool, error) {
	resp, err := c.request(ctx, DefaultTimeout, Message{Cmd: "kvs-get", Pairs: []Pair{
		{"jobid", c.JobID}, {"srcid", "-1"}, {"key", key},
	}}, "kvs-get-response")
	if err != nil {
		return "", false, err
	}
	found, _ := resp.Get("found")
	value, _ := resp.Get("value")
	return value, strings.EqualFold(found, "TRUE"), nil
}

// Abort asks the launcher to end the whole job (isworld=TRUE); Slurm kills
// every task of the step, this one too, and shows no message: print it
// before. The server does not answer; the client is closed. Abort does not
// wait for a request under way in another goroutine (a fence waits for
// every task, and a task that aborts because one is gone would otherwise
// wait for the fence's timeout): it writes between requests' writes.
func (c *Client) Abort(msg string) error {
	msg = strings.NewReplacer(";", ",", "\n", " ", "\x00", "").Replace(msg)
	if len(msg) > MaxValLen {
		msg = msg[:MaxValLen]
	}
	b, err := Encode(Message{Cmd: "abort", Pairs: []Pair{{"isworld", "TRUE"}, {"msg", msg}}})
	if err != nil {
		return fmt.Errorf("pmi2: abort: %w", err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Swap(true) {
		return ErrClosed
	}
	c.conn.SetWriteDeadline(time.Now().Add(DefaultTimeout))
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("pmi2: sending abort: %w", err)
	}
	return nil
}

// Finalize tells the server that this task is done with PMI and closes the
// connection.
func (c *Client) Finalize(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	var err error
	if c.broken == nil {
		stop := c.deadline(ctx, DefaultTimeout)
		_, err = c.roundTrip(Message{Cmd: "finalize"}, "finalize-response")
		stop()
	}
	c.closed.Store(true)
	if cerr := c.conn.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close closes the connection without finalizing (after Abort or
// Finalize, it only releases what is left).
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed.Store(true)
	return c.conn.Close()
}

// intPair reads an integer pair of an answer.
func intPair(m Message, key string) (int, error) {
	s, ok := m.Get(key)
	if !ok {
		return 0, fmt.Errorf("pmi2: %s has no %s", m.Cmd, key)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("pmi2: %s: %s=%q is not a number", m.Cmd, key, s)
	}
	return n, nil
}
