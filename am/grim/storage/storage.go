package storage

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/grim"
)

// Statuses in the answers.
const (
	statusOK uint32 = iota
	statusRange
	statusShape
	statusIO
	statusBusy
)

// Errors of the package. Test for them with errors.Is.
var (
	ErrConfig = errors.New("storage: invalid configuration")
	ErrRange  = errors.New("storage: blocks outside the store")
	ErrShape  = errors.New("storage: not whole blocks, or more than a message carries")
	ErrIO     = errors.New("storage: the store's file failed")
	ErrBusy   = errors.New("storage: the store has too many reads queued")
)

func statusErr(s uint32) error {
	switch s {
	case statusOK:
		return nil
	case statusRange:
		return ErrRange
	case statusShape:
		return ErrShape
	case statusIO:
		return ErrIO
	case statusBusy:
		return ErrBusy
	}
	return fmt.Errorf("storage: unknown status %d", s)
}

// Config configures a Store.
type Config struct {
	// Name is the store's name in the registry (default "storage"): its
	// handlers are Name+".read" and Name+".write".
	Name string
	// Handler is the read handler's id (default grim.FirstUserHandler+24);
	// the write handler's is the next.
	Handler grim.HandlerID
	// BlockSize (default 4096) and Blocks (default: the file's size in
	// blocks, at least 1) shape the store; the file is grown to hold them.
	BlockSize, Blocks int
	// MaxReads bounds the reads queued and not yet answered (default
	// 256): a read past it is answered ErrBusy at once.
	MaxReads int
}

func (c *Config) fill(f *os.File) error {
	if c.Name == "" {
		c.Name = "storage"
	}
	if c.Handler == 0 {
		c.Handler = grim.FirstUserHandler + 24
	}
	if c.BlockSize == 0 {
		c.BlockSize = 4096
	}
	if c.MaxReads == 0 {
		c.MaxReads = 256
	}
	if c.BlockSize < 1 || c.BlockSize > grim.MaxBulk {
		return fmt.Errorf("%w: block size %d, want 1..%d", ErrConfig, c.BlockSize, grim.MaxBulk)
	}
	if c.Blocks == 0 {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		c.Blocks = max(1, int(fi.Size()/int64(c.BlockSize)))
	}
	if c.Blocks < 0 || c.Handler < grim.FirstUserHandler || c.MaxReads < 0 {
		return fmt.Errorf("%w: %d blocks, handler %d, %d reads", ErrConfig, c.Blocks, c.Handler, c.MaxReads)
	}
	return nil
}

// Stats counts what a store served.
type Stats struct {
	Reads, Writes    uint64 // requests served
	Refused          uint64 // requests answered with an error status (ErrBusy included)
	Unanswered       uint64 // reads whose answer could not be sent (the requester's channel or peer failed); the store went on
	BytesRead        uint64
	BytesWritten     uint64
	ReadsOutstanding int // reads queued, not yet answered
}

// Store is a block store on a file served by a GRIM endpoint.
type Store struct {
	ep    *grim.Endpoint
	f     *os.File
	cfg   Config
	reads []read
	buf   []byte
	stats Stats
}

type read struct {
	peer         int
	block, count uint32
	handler      grim.HandlerID
	tag          uint32
}

// New makes ep a store of blocks in f, registers its handlers and publishes
// them with the cluster's registry. ep belongs to the store from now on:
// Serve runs it.
func New(ep *grim.Endpoint, f *os.File, cfg Config) (*Store, error) {
	if err := cfg.fill(f); err != nil {
		return nil, err
	}
	size := int64(cfg.Blocks) * int64(cfg.BlockSize)
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if fi.Size() < size {
		if err := f.Truncate(size); err != nil {
			return nil, err
		}
	}
	s := &Store{ep: ep, f: f, cfg: cfg, buf: make([]byte, grim.MaxBulk)}
	if err := ep.HandleNamed(cfg.Name+".read", cfg.Handler, s.read); err != nil {
		return nil, err
	}
	if err := ep.HandleNamed(cfg.Name+".write", cfg.Handler+1, s.write); err != nil {
		return nil, err
	}
	if err := ep.Publish(); err != nil {
		return nil, err
	}
	return s, nil
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	st := s.stats
	st.ReadsOutstanding = len(s.reads)
	return st
}

// Config returns the store's configuration, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// check returns the status of a request for count blocks from block.
func (s *Store) check(block, count uint32) uint32 {
	switch {
	case count == 0 || uint64(count)*uint64(s.cfg.BlockSize) > grim.MaxBulk:
		return statusShape
	case uint64(block)+uint64(count) > uint64(s.cfg.Blocks):
		return statusRange
	}
	return statusOK
}

// write is the write handler: args block, completion handler, tag.
func (s *Store) write(tok *grim.Token, args [grim.ShortArgs]uint32, data []byte) {
	block, done, tag := args[0], grim.HandlerID(args[1]), args[2]
	st := statusShape
	if len(data)%s.cfg.BlockSize == 0 {
		st = s.check(block, uint32(len(data)/s.cfg.BlockSize))
	}
	if st == statusOK {
		if _, err := s.f.WriteAt(data, int64(block)*int64(s.cfg.BlockSize)); err != nil {
			st = statusIO
		}
	}
	if st == statusOK {
		s.stats.Writes++
		s.stats.BytesWritten += uint64(len(data))
	} else {
		s.stats.Refused++
	}
	tok.Reply(done, tag, st) //nolint:errcheck // a lost completion times the requester out
}

// read is the read handler: args block, count, data handler, tag. It
// queues the read for Serve, which answers outside the handlers.
// A read past Config.MaxReads is answered busy at once, in a short reply.
func (s *Store) read(tok *grim.Token, args [grim.ShortArgs]uint32, _ []byte) {
	if len(s.reads) >= s.cfg.MaxReads {
		s.stats.Refused++
		tok.Reply(grim.HandlerID(args[2]), args[3], statusBusy) //nolint:errcheck // lost, the requester times out
		return
	}
	peer, _ := tok.Source()
	s.reads = append(s.reads, read{peer: peer, block: args[0], count: args[1], handler: grim.HandlerID(args[2]), tag: args[3]})
}

// Serve runs the store on the calling goroutine, locked to its OS thread
// (a core of its own, as the device's processor), until stop is set or
// its endpoint fails (closed, say). No request ends it: one that cannot
// be answered is counted (Stats.Unanswered). The store serves the
// endpoints of its endpoint's Config.Peers only: the GRIM layer drops
// messages from any other.
func (s *Store) Serve(stop *atomic.Bool) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for !stop.Load() {
		n, err := s.Poll()
		if err != nil {
			return err
		}
		if n == 0 {
			// Firmware mode: sleep until a request arrives (a
			// millisecond at most, to see stop).
			if _, err := s.ep.Wait(time.Millisecond); err != nil {
				return err
			}
			runtime.Gosched()
		}
	}
	return nil
}

// Poll runs the store's endpoint once and answers the reads queued; it
// returns how much it did.
func (s *Store) Poll() (int, error) {
	n, err := s.ep.Poll()
	if err != nil {
		return n, err
	}
	for len(s.reads) > 0 {
		r := s.reads[0]
		s.reads = s.reads[1:]
		n++
		st := s.check(r.block, r.count)
		var data []byte
		if st == statusOK {
			data = s.buf[:int(r.count)*s.cfg.BlockSize]
			if _, err := s.f.ReadAt(data, int64(r.block)*int64(s.cfg.BlockSize)); err != nil {
				st, data = statusIO, nil
			}
		}
		if st == statusOK {
			s.stats.Reads++
			s.stats.BytesRead += uint64(len(data))
		} else {
			s.stats.Refused++
		}
		ch, err := s.ep.Channel(0)
		if err != nil {
			return n, err
		}
		switch err := ch.Bulk(r.peer, r.handler, data, r.tag, st); {
		case errors.Is(err, grim.ErrClosed):
			return n, err
		case err != nil:
			s.stats.Unanswered++ // the requester's problem: the store goes on
		}
	}
	return n, nil
}

// Client reads and writes blocks of a remote store through a GRIM
// endpoint, which it runs while it waits.
type Client struct {
	ep          *grim.Endpoint
	peer        int
	read, write grim.HandlerID
	data, done  grim.HandlerID
	blockSize   int
	timeout     time.Duration
	tag         uint32
	got         bool
	status      uint32
	dst         []byte
	n           int
}

// Open returns a client of the store registered as name, which ep finds in
// its copy of the registry (ep.Publish first). handler and handler+1 are
// local handler ids (grim.Endpoint.Handle) the answers come to; blockSize
// is the store's.
func Open(ep *grim.Endpoint, name string, handler grim.HandlerID, blockSize int, timeout time.Duration) (*Client, error) {
	peer, rd, err := ep.Owner(name + ".read")
	if err != nil {
		return nil, err
	}
	wpeer, wr, err := ep.Owner(name + ".write")
	if err != nil {
		return nil, err
	}
	if wpeer != peer || blockSize < 1 || blockSize > grim.MaxBulk {
		return nil, fmt.Errorf("%w: store %q at peers %d and %d, block size %d", ErrConfig, name, peer, wpeer, blockSize)
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	c := &Client{ep: ep, peer: peer, read: rd, write: wr, data: handler, done: handler + 1, blockSize: blockSize, timeout: timeout}
	if err := ep.Handle(c.data, c.arrived); err != nil {
		return nil, err
	}
	if err := ep.Handle(c.done, c.arrived); err != nil {
		return nil, err
	}
	return c, nil
}

// arrived is the answers' handler: args tag, status; a read's blocks.
// Only the store's answers count.
func (c *Client) arrived(tok *grim.Token, args [grim.ShortArgs]uint32, data []byte) {
	if peer, _ := tok.Source(); peer != c.peer {
		return // not from the store
	}
	if args[0] != c.tag || c.got {
		return // an answer to a request given up on
	}
	c.got, c.status = true, args[1]
	if c.dst != nil {
		c.n = copy(c.dst, data)
	}
}

// shape checks a request for n bytes from block: ErrRange for a negative
// block, ErrShape for a length that is not whole blocks, up to what one
// message carries.
func (c *Client) shape(block, n int) error {
	switch {
	case block < 0:
		return fmt.Errorf("%w: block %d", ErrRange, block)
	case n == 0 || n%c.blockSize != 0 || n > grim.MaxBulk:
		return fmt.Errorf("%w: %d bytes, want whole %d-byte blocks up to %d bytes", ErrShape, n, c.blockSize, grim.MaxBulk)
	}
	return nil
}

// Read reads len(buf)/blockSize whole blocks from block into buf.
func (c *Client) Read(block int, buf []byte) error {
	if err := c.shape(block, len(buf)); err != nil {
		return err
	}
	ch, err := c.ep.Channel(0)
	if err != nil {
		return err
	}
	c.begin(buf)
	if err := ch.Short(c.peer, c.read, uint32(block), uint32(len(buf)/c.blockSize), uint32(c.data), c.tag); err != nil {
		return err
	}
	if err := c.wait(); err != nil {
		return err
	}
	if c.n != len(buf) {
		return fmt.Errorf("%w: %d bytes read, want %d", ErrShape, c.n, len(buf))
	}
	return nil
}

// Write writes data, whole blocks, from block.
func (c *Client) Write(block int, data []byte) error {
	if err := c.shape(block, len(data)); err != nil {
		return err
	}
	ch, err := c.ep.Channel(0)
	if err != nil {
		return err
	}
	c.begin(nil)
	if err := ch.Bulk(c.peer, c.write, data, uint32(block), uint32(c.done), c.tag); err != nil {
		return err
	}
	return c.wait()
}

func (c *Client) begin(dst []byte) {
	c.tag++
	c.got, c.status, c.dst, c.n = false, 0, dst, 0
}

// wait runs the endpoint until the answer to the current request is in.
func (c *Client) wait() error {
	deadline := time.Now().Add(c.timeout)
	for !c.got {
		n, err := c.ep.Poll()
		if err != nil {
			return err
		}
		if n == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("%w: no answer from the store in %v", grim.ErrTimeout, c.timeout)
			}
			if _, err := c.ep.Wait(10 * time.Millisecond); err != nil { // firmware mode: sleep
				return err
			}
		}
	}
	c.dst = nil
	return statusErr(c.status)
}
