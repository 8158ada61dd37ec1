package grim

import (
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// Logical channels: what an application sends on one (short, bulk and
// memory messages; cut-through streams), the payload region its bulk
// bytes are staged in, and the wait for room in its send queues.

// Channel is an outbound logical channel: an engine endpoint of its own
// (a header ring, a payload region, the rings' indices as its status
// registers), which one goroutine injects into without a lock.
type Channel struct {
	ep      *Endpoint
	id      nicfw.EndpointID
	n       int
	view    *endpoint.View
	close   func() error
	payload int // offset of the payload region in the staging area
	next    int // the payload region's next free byte (a ring)
	// writes: memory messages sent and not yet completed; pending: the
	// requests sent whose reply (or return) has not come back, oldest
	// first (a channel's requests to one peer are answered in order),
	// expired of them past their reply timeout (pendingRequest).
	writes  int
	pending []pendingRequest
	expired int
	// replies: replies handlers sent while the reply queue was full, in
	// order, for the next Poll to send.
	replies []endpoint.Descriptor
	// live: the payload regions of requests in flight, oldest first.
	live []region
	// bit: the channel's bit in the page of doorbells its endpoint shares
	// with the engine, whose arrival bits say which channels have
	// something to take (Endpoint.arrivals).
	bit int
}

// flushReplies sends the replies deferred while the reply queue was full
// (c has some), as far as it has room.
func (c *Channel) flushReplies() error {
	for len(c.replies) > 0 {
		err := c.view.Send(endpoint.ReplySend, &c.replies[0])
		if errors.Is(err, endpoint.ErrQueueFull) {
			return nil
		}
		if err != nil {
			return err
		}
		c.replies = c.replies[1:]
	}
	c.replies = nil
	c.ep.deferred--
	return nil
}

// Short sends a short message on c: handler h of peer dest runs with args
// (at most ShortArgs; more is ErrTooLarge). It returns once the message is in
// c's send queue: while the queue is full it runs the engine and the
// handlers (inline) or waits for the daemon's engine (firmware mode), for
// at most Config.GiveUp (then ErrTimeout); from inside a handler, which
// may not run the engine, a full queue is ErrBusy. The message is a
// request: its handler's reply, or the layer's, answers it; if it comes
// back undelivered, or unanswered within Config.ReplyTimeout, the error
// handler (OnReturn) hears of it.
func (c *Channel) Short(dest int, h HandlerID, args ...uint32) error {
	if err := c.short(dest, h, args); err != nil {
		return err
	}
	c.ep.stats.Requests++
	c.ep.stats.Shorts++
	return nil
}

func (c *Channel) short(dest int, h HandlerID, args []uint32) error {
	if err := c.ep.usable(); err != nil {
		return err
	}
	idx, err := c.ep.index(dest)
	if err != nil {
		return err
	}
	var d endpoint.Descriptor
	if len(args) > ShortArgs {
		return shortDesc(&d, idx, h, args) // the error
	}
	putShort(&d, idx, h, args) // (header without shortDesc's call)
	return c.send(endpoint.RequestSend, &d)
}

// header fills d, zero, with the descriptor of a message to dest's
// handler h.
func (c *Channel) header(d *endpoint.Descriptor, dest int, h HandlerID, args []uint32) error {
	idx, err := c.ep.index(dest)
	if err != nil {
		return err
	}
	return shortDesc(d, idx, h, args)
}

// shortDesc fills d, zero, with the descriptor of a short message to
// table index idx, handler h, with args.
func shortDesc(d *endpoint.Descriptor, idx uint32, h HandlerID, args []uint32) error {
	if len(args) > ShortArgs {
		return fmt.Errorf("%w: %d integers, at most %d", ErrTooLarge, len(args), ShortArgs)
	}
	putShort(d, idx, h, args)
	return nil
}

// putShort is shortDesc for at most ShortArgs integers, small enough to
// be inlined where it is called.
func putShort(d *endpoint.Descriptor, idx uint32, h HandlerID, args []uint32) {
	var a [ShortArgs]uint32
	for i := 0; i < len(args) && i < ShortArgs; i++ { // a copy is a call
		a[i] = args[i]
	}
	d.Class, d.Dest, d.Handler, d.NArgs = endpoint.ClassShort, idx, uint32(h), engineArgs
	d.Args[0], d.Args[1] = uint64(a[0])|uint64(a[1])<<32, uint64(a[2])|uint64(a[3])<<32
}

// engineArgs is the number of the engine's 64-bit arguments that carry a
// message's ShortArgs 32-bit integers, two to each (low half first): two,
// so that a short message travels in one compact cell (docs/wire.md).
const engineArgs = 2

// unpackArgs returns the ShortArgs integers that d's arguments carry.
func unpackArgs(d *endpoint.Descriptor) [ShortArgs]uint32 {
	return [ShortArgs]uint32{uint32(d.Args[0]), uint32(d.Args[0] >> 32), uint32(d.Args[1]), uint32(d.Args[1] >> 32)}
}

// Bulk sends data (up to MaxBulk bytes) on c to handler h of peer dest,
// which runs with the bytes once all have arrived: the engine fragments
// the message, and the receiving engine reassembles it in a block of the
// receiver's pool that it finds as the first fragment arrives (or refuses
// the message for now: optimistic flow control). The bytes are copied into
// c's payload region first (cut-through: while the engine sends them;
// Config.CutThrough); data may be reused at once. It waits for room as
// Short does, and for the bytes of the payload region it needs (those of
// earlier messages the engine is done with), and like Short's its message
// is answered or comes back to the error handler (OnReturn).
func (c *Channel) Bulk(dest int, h HandlerID, data []byte, args ...uint32) error {
	var err error
	if len(data) == 0 { // no bytes: a short message
		err = c.short(dest, h, args)
	} else {
		err = c.inject(dest, h, endpoint.PoolOffset, data, args)
	}
	if err != nil {
		return err
	}
	c.ep.stats.Requests++
	c.ep.stats.Bulks++
	return nil
}

// Write sends a memory message: data copied into peer dest's memory
// region (Endpoint.Memory) at offset at. No handler runs; Stats.Completed
// counts it once the receiver has it (Drain waits for all requests, memory
// messages included).
func (c *Channel) Write(dest int, at uint32, data []byte) error {
	if at == endpoint.PoolOffset {
		return fmt.Errorf("%w: offset %#x", ErrTooLarge, at)
	}
	if err := c.inject(dest, HandlerMemory, at, data, nil); err != nil {
		return err
	}
	c.writes++
	c.ep.stats.Requests++
	c.ep.stats.Writes++
	return nil
}

// inject sends a bulk message of data to handler h of dest, stored at
// remote (PoolOffset: in the receiver's pool), store-and-forward or
// cut-through as configured.
func (c *Channel) inject(dest int, h HandlerID, remote uint32, data []byte, args []uint32) error {
	if err := c.ep.usable(); err != nil {
		return err
	}
	if !c.ep.cfg.CutThrough {
		if len(data) == 0 || len(data) > MaxBulk {
			return fmt.Errorf("%w: %d bytes, want 1..%d", ErrTooLarge, len(data), MaxBulk)
		}
		var d endpoint.Descriptor
		if err := c.header(&d, dest, h, args); err != nil {
			return err
		}
		off, err := c.reserve(len(data))
		if err != nil {
			return err
		}
		copy(c.view.Staging()[off:], data)
		d.Class, d.Offset, d.Length, d.RemoteOffset = endpoint.ClassBulk, off, uint32(len(data)), remote
		if err := c.send(endpoint.RequestSend, &d); err != nil {
			return err
		}
		c.sentLive()
		return nil
	}
	var st Stream
	if err := c.stream(&st, dest, h, remote, len(data), args); err != nil {
		return err
	}
	for seg := Segment; len(data) > 0; seg = min(2*seg, maxSegment) {
		n := min(seg, len(data))
		if _, err := st.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Stream is a cut-through bulk message being written: the engine sends
// its bytes as Write publishes them.
type Stream struct {
	c       *Channel
	d       endpoint.Descriptor
	written uint32
	sent    bool // the descriptor is in the send queue
}

// Stream begins a cut-through bulk message of n bytes (1..MaxBulk) on c to
// handler h of peer dest, and returns it to be written: the descriptor
// leaves with the first Segment bytes written, and the engine sends each
// further Write's bytes as they are published, while the application
// writes the next. Every byte must be written (Close fills what was not
// with zeros, and says so); the channel sends nothing else before the
// message is whole.
func (c *Channel) Stream(dest int, h HandlerID, n int, args ...uint32) (*Stream, error) {
	st := new(Stream)
	if err := c.stream(st, dest, h, endpoint.PoolOffset, n, args); err != nil {
		return nil, err
	}
	c.ep.stats.Requests++
	c.ep.stats.Bulks++
	return st, nil
}

// stream begins st, a cut-through message of n bytes to handler h of
// dest, stored at remote.
func (c *Channel) stream(st *Stream, dest int, h HandlerID, remote uint32, n int, args []uint32) error {
	if err := c.ep.usable(); err != nil {
		return err
	}
	if n <= 0 || n > MaxBulk {
		return fmt.Errorf("%w: %d bytes, want 1..%d", ErrTooLarge, n, MaxBulk)
	}
	var d endpoint.Descriptor
	if err := c.header(&d, dest, h, args); err != nil {
		return err
	}
	off, err := c.reserve(n)
	if err != nil {
		return err
	}
	if err := c.view.Publish(off, 0); err != nil {
		return err
	}
	d.Class, d.Flags, d.Offset, d.Length, d.RemoteOffset = endpoint.ClassBulk, endpoint.CutThrough, off, uint32(n), remote
	*st = Stream{c: c, d: d}
	return nil
}

// Write appends p to the message and publishes it to the engine, which
// runs once (in inline mode) to send what it can.
func (st *Stream) Write(p []byte) (int, error) {
	if err := st.c.ep.usable(); err != nil {
		return 0, err
	}
	if len(p) > int(st.d.Length-st.written) {
		return 0, fmt.Errorf("%w: %d bytes more than the %d-byte message holds", ErrTooLarge, len(p)-int(st.d.Length-st.written), st.d.Length)
	}
	c := st.c
	at := st.d.Offset + st.written
	copy(c.view.Staging()[at:at+uint32(len(p))], p)
	st.written += uint32(len(p))
	if !st.sent && st.written < min(Segment, st.d.Length) {
		return len(p), nil // the first segment is not complete yet
	}
	if err := c.view.Publish(st.d.Offset, st.written); err != nil {
		return 0, err
	}
	if !st.sent {
		if err := c.send(endpoint.RequestSend, &st.d); err != nil {
			return 0, err
		}
		c.sentLive()
		st.sent = true
	}
	if c.ep.eng != nil && c.ep.depth == 0 && st.written < st.d.Length {
		if _, err := c.ep.Poll(); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// Close ends the message. One not written whole is completed with zeros,
// so that the channel moves on, and Close says how much was missing.
func (st *Stream) Close() error {
	missing := int(st.d.Length - st.written)
	if missing == 0 {
		return nil
	}
	if _, err := st.Write(make([]byte, missing)); err != nil {
		return err
	}
	return fmt.Errorf("%w: stream closed with %d of %d bytes not written (sent as zeros)", ErrShort, missing, st.d.Length)
}

// Outstanding returns c's requests not yet answered or returned (memory
// messages not yet completed included).
func (c *Channel) Outstanding() int { return len(c.pending) - c.expired }

// Writes returns c's memory messages not yet completed.
func (c *Channel) Writes() int { return c.writes }

// reserve returns the offset in the staging area of n bytes of the
// payload region, the word before them free for a cut-through message's
// status register. The region is a ring of the bytes of requests in
// flight (live): a request's bytes are free again once the engine is done
// with it (endpoint.View.Done: sent whole and acknowledged, or returned),
// whether or not it is answered; reserve runs the engine until the bytes
// it hands out are free.
func (c *Channel) reserve(n int) (uint32, error) {
	at := (c.next + 4 + 7) &^ 7
	if at+n > c.ep.cfg.PayloadSize {
		at = 8
	}
	lo, hi := at-4, at+n
	if err := c.ep.runUntil(func() bool { return !c.overlaps(lo, hi) }, func() string {
		return fmt.Sprintf("channel %d: payload region still in use", c.n)
	}); err != nil {
		return 0, err
	}
	c.next = hi
	c.live = append(c.live, region{start: lo, end: hi})
	return uint32(c.payload + at), nil
}

// region is the bytes of a request in the payload region, and the
// request's index in the request send queue once sent.
type region struct {
	start, end int
	seq        uint32
	sent       bool
}

// overlaps drops the live regions the engine is done with and reports
// whether [lo, hi) overlaps one still live.
func (c *Channel) overlaps(lo, hi int) bool {
	done := c.view.Done()
	k := 0
	for k < len(c.live) && c.live[k].sent && int32(done-c.live[k].seq) > 0 {
		k++
	}
	if k > 0 { // keep one backing array: the ring's regions are few
		c.live = c.live[:copy(c.live, c.live[k:])]
	}
	for _, r := range c.live {
		if r.start < hi && lo < r.end {
			return true
		}
	}
	return false
}

// sentLive notes that the request just queued is the one whose bytes the
// last live region holds.
func (c *Channel) sentLive() {
	if n := len(c.live); n > 0 && !c.live[n-1].sent {
		put, _ := c.view.Progress(endpoint.RequestSend)
		c.live[n-1].seq, c.live[n-1].sent = put-1, true
	}
}

// expressible reports whether short message d may try the express path
// (nicfw.Engine.Express) from queue q of c, inline and with nothing queued
// since the engine last ran: the reply to a Poll's only request; or a
// request on a channel with no request outstanding, sent by the
// application (not a handler). The engine still declines whenever the
// queued path could order things otherwise. Requests sent while others
// are outstanding (a window of them, a burst to many peers) are queued, to
// leave together in the engine's next run.
func (c *Channel) expressible(q endpoint.Queue, d *endpoint.Descriptor) bool {
	if c.ep.eng == nil || c.ep.queued || d.Class != endpoint.ClassShort {
		return false
	}
	if q == endpoint.ReplySend {
		return c.ep.expressReply
	}
	return q == endpoint.RequestSend && c.ep.depth == 0 && len(c.pending) == c.expired // none outstanding
}

// send queues d on queue q of c, running the engine while the queue is
// full; inline, a short message may leave at once instead, taken by the
// engine directly (expressible).
func (c *Channel) send(q endpoint.Queue, d *endpoint.Descriptor) error {
	if q == endpoint.ReplySend && len(c.replies) > 0 {
		c.replies = append(c.replies, *d) // after those waiting
		return nil
	}
	if err := c.ep.usable(); err != nil {
		return err
	}
	if c.expressible(q, d) {
		if q == endpoint.ReplySend {
			c.ep.expressReply = false // one per Poll
		}
		ok, err := c.ep.eng.Express(c.id, q, d)
		if ok && q == endpoint.RequestSend {
			c.sentRequest(d) // no place in the queue: sent already, for the reply timer
		}
		if ok {
			c.ep.stats.Express++
		}
		if ok || err != nil {
			return err
		}
	}
	var deadline time.Time // read once the queue is found full: a send that finds room reads no clock
	var pause endpoint.Backoff
	for {
		err := c.view.Send(q, d)
		if err == nil {
			c.ep.queued = true
		}
		if err == nil && q == endpoint.RequestSend {
			c.sentRequest(d)
		}
		if !errors.Is(err, endpoint.ErrQueueFull) {
			return err
		}
		if c.ep.depth > 0 {
			if q == endpoint.ReplySend {
				// A handler must not run the engine, and a reply must
				// not be lost: it waits for the next Poll.
				if len(c.replies) == 0 {
					c.ep.deferred++
				}
				c.replies = append(c.replies, *d)
				c.ep.stats.RepliesDeferred++
				return nil
			}
			return ErrBusy
		}
		// Run the engine and the handlers: replies that fill the receive
		// queues would otherwise hold up the peer's engine.
		n, err := c.ep.Poll()
		if err != nil {
			return err
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(c.ep.cfg.GiveUp)
		} else if now.After(deadline) {
			return fmt.Errorf("%w: channel %d full", ErrTimeout, c.n)
		}
		if err := c.ep.alive(); err != nil {
			return err
		}
		// Firmware mode: room comes when the daemon takes a descriptor,
		// which an ordered channel blocked on a slow peer can hold up for
		// long; the wait sleeps as runFor's do.
		if err := c.ep.rest(n, &pause, deadline.Sub(now)); err != nil {
			return err
		}
	}
}
