package endpoint

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// The application's side of an endpoint's memory (View): what it sends,
// receives, publishes and arms.

// View is the application's side of an endpoint: a mapping of the
// memfd it received. See the top of endpoint.go for its threading contract.
type View struct {
	mem   []byte
	l     layout
	rings [numQueues]descRing
	hdrWords
	kick  func()
	bells *Bells // the application's page of doorbells (SetBells), or nil
}

func newView(mem []byte) (*View, error) {
	l, err := readHeader(mem)
	if err != nil {
		return nil, err
	}
	v := &View{mem: mem, l: l}
	for q := range numQueues {
		v.rings[q] = newDescRing(mem, l, q, q.isSend())
	}
	v.hdrWords = words(mem)
	return v, nil
}

// Config returns the endpoint's sizes as its header gives them.
func (v *View) Config() Config {
	return Config{QueueEntries: v.l.entries, StagingSize: v.l.staging, TableSize: v.l.table}
}

// SetStoreRegion limits where peers' bulk messages (Stores) may write in
// this endpoint's staging area to its first n bytes; a bulk message whose
// region does not lie inside them is returned to its sender with
// ReasonRange. A new endpoint exposes its whole staging area; n beyond it
// is taken as all of it. The engine reads the limit for every chunk it
// stores, so a smaller one holds for the chunks that arrive after the call.
func (v *View) SetStoreRegion(n uint32) {
	if v.mem != nil {
		v.store.Store(n)
	}
}

// SetPool makes size bytes of the staging area from off the receive pool:
// the engine then stores a pooled bulk message (RemoteOffset PoolOffset)
// in a block of the pool it chooses as the message's first chunk arrives,
// refusing the message for now (NACK: its sender sends it again later)
// while no block is free, and the block is the application's from the
// moment the engine puts the message's descriptor until the application
// releases it. The application must not write the pool itself. Set it
// before peers send pooled messages; the engine takes a change only while
// none of the pool's blocks is in use.
func (v *View) SetPool(off, size uint32) {
	if v.mem != nil {
		v.poolOff.Store(off)
		v.poolLen.Store(size)
	}
}

// AnyHandler is the handler count of an endpoint that has set none
// (SetHandlers): requests may name any handler.
const AnyHandler = ^uint32(0)

// SetHandlers tells the engine how many request handlers the application
// has, numbered from 0: a request that names a handler at or above n is
// returned to its sender with ReasonNoHandler instead of being delivered.
// A new endpoint accepts any handler (AnyHandler); replies are never
// checked.
func (v *View) SetHandlers(n uint32) {
	if v.mem != nil {
		v.handlers.Store(n)
	}
}

// SetAnswers tells the engine that the application answers every request
// the endpoint receives (AM-II's do, with an implicit reply if a handler
// does not): the engine may then hold a request's acknowledgement for its
// reply to carry (transport.Config.AckDelay) instead of sending it in a
// frame of its own. An application that may leave requests unanswered
// does not set it; the acknowledgement then leaves at once.
func (v *View) SetAnswers() {
	if v.mem != nil {
		v.answers.Store(1)
	}
}

// Staging returns the staging area.
func (v *View) Staging() []byte {
	if v.mem == nil {
		return nil
	}
	return v.mem[v.l.stagingOff : v.l.stagingOff+v.l.staging : v.l.stagingOff+v.l.staging]
}

// SetKick sets the function that Send calls after it has published a
// descriptor, when the engine has marked itself idle
// (Memory.SetIdle): the daemon's writes the eventfd the engine
// sleeps on. With none (nil, the default) Send does not look at the idle
// word; with one, Send costs one more atomic load while the engine is
// busy. SetIdle explains why no kick is lost.
func (v *View) SetKick(f func()) { v.kick = f }

// Send puts d into send queue q. It does not check d: the engine does. It
// returns ErrQueueFull when the engine has not caught up.
func (v *View) Send(q Queue, d *Descriptor) error {
	if v.mem == nil {
		return ErrClosed
	}
	if !q.isSend() {
		return ErrWrongQueue
	}
	if err := v.rings[q].produce(d); err != nil {
		return err
	}
	v.wake()
	return nil
}

// Bells returns the page of doorbells the view mapped (MapBells), or nil,
// and the endpoint's bit in it (0: none): for an application that looks
// at its endpoints' arrival bits (Bells.Arrivals).
func (v *View) Bells() (*Bells, int) {
	if v.bells == nil {
		return nil, 0
	}
	return v.bells, int(v.bellBit.Load())
}

// wake rings the doorbells of a parked or evicted endpoint and kicks an
// engine that sleeps, after the application published something the
// engine must see.
//
// The doorbells ring before the word is read again for the kick: an engine
// going to sleep sets its idle word and then reads the doorbells, so
// either it sees the ring or this second load sees the word and kicks
// (the argument of Memory.SetIdle). An engine that is awake is not kicked:
// it reads the doorbells every Poll.
func (v *View) wake() {
	w := v.idle.Load()
	if w == 0 {
		return
	}
	if w&wordEvicted != 0 {
		v.bell.Store(1)
		v.bells.Ring(int(v.bellBit.Load()))
		w = v.idle.Load()
	}
	if w&wordIdle != 0 && v.kick != nil {
		v.kick()
	}
}

// Publish writes the status register of a cut-through bulk message whose
// bytes start at off in the staging area: n of them are written, and the
// engine may send them. off is the message's Offset (a multiple of 4, at
// least 4); n only grows while the message is being sent.
func (v *View) Publish(off, n uint32) error {
	if v.mem == nil {
		return ErrClosed
	}
	if off < 4 || off%4 != 0 || uint64(off) > uint64(v.l.staging) {
		return fmt.Errorf("%w: status register of offset %d", ErrOutOfRange, off)
	}
	statusWord(v.Staging(), off).Store(n)
	v.wake()
	return nil
}

// statusWord returns the status register of a cut-through message at off
// in staging (checked: 4 <= off <= len, off%4 == 0).
func statusWord(staging []byte, off uint32) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&staging[off-4]))
}

// Done returns how many messages of the request send queue the engine is
// done with, counting from 0 in the order they were sent (a free-running
// uint32): the bytes of the p-th are the application's again once
// int32(Done()-p) > 0. The engine serves a queue's messages one after the
// other, so they are done in order. Messages handed to an inline engine
// directly (nicfw.Engine.Express) never were in the queue and are not
// counted.
func (v *View) Done() uint32 {
	if v.mem == nil {
		return 0
	}
	return v.done.Load()
}

// Progress returns the two counters of queue q: for a send queue, the
// descriptors the application has sent and those the engine has taken;
// for a receive queue, those the engine has put and those the application
// has taken. They are free-running uint32s: the descriptor that was the
// p-th put into q (counting from 0) has been taken once int32(taken-p) > 0.
// The engine copies a medium message's bytes when it takes its descriptor,
// so the application may reuse them from then on (a bulk message's bytes it
// reads until the message is done).
func (v *View) Progress(q Queue) (put, taken uint32) {
	if v.mem == nil || q >= numQueues {
		return 0, 0
	}
	r := &v.rings[q]
	if q.isSend() {
		return r.own, r.peerIdx.Load()
	}
	return r.peerIdx.Load(), r.own
}

// Waiting returns how many descriptors queue q holds, put and not yet
// taken (Progress's difference): for a receive queue, what the
// application has to look at. 0 for a closed view. A count above the
// queue's size is an invalid producer index, which Peek reports.
func (v *View) Waiting(q Queue) uint32 {
	put, taken := v.Progress(q)
	return put - taken
}

// Receive takes the next descriptor from receive queue q into d; ok is
// false when the queue is empty. The entry and, for a medium message, its
// receive-area slot go back to the engine at once, which may reuse them:
// take medium messages with Peek and Release instead.
func (v *View) Receive(q Queue, d *Descriptor) (ok bool, err error) {
	if err := v.checkReceive(q); err != nil {
		return false, err
	}
	return v.rings[q].consume(d)
}

// Peek copies the next descriptor of receive queue q into d without taking
// it off the queue; ok is false when the queue is empty. The entry, and the
// receive-area slot of the medium message it names, stay the
// application's until Release: a medium message is read in place (Data)
// between the two. Peek again returns the same descriptor.
func (v *View) Peek(q Queue, d *Descriptor) (ok bool, err error) {
	if err := v.checkReceive(q); err != nil {
		return false, err
	}
	return v.rings[q].peek(d)
}

// Release takes the descriptor that Peek returned off receive queue q and
// gives its entry and receive-area slot back to the engine. It returns
// ErrQueueEmpty when there is none.
func (v *View) Release(q Queue) error {
	if err := v.checkReceive(q); err != nil {
		return err
	}
	r := &v.rings[q]
	if n, err := r.available(); err != nil || n == 0 {
		if err == nil {
			err = ErrQueueEmpty
		}
		return err
	}
	r.release()
	return nil
}

func (v *View) checkReceive(q Queue) error {
	if v.mem == nil {
		return ErrClosed
	}
	if q.isSend() || q >= numQueues {
		return ErrWrongQueue
	}
	return nil
}

// Data returns the bytes that d, taken from a receive queue, names: for a
// medium message its bytes in the receive area, valid until the descriptor
// is released (take it with Peek); for a bulk message the region of the
// staging area the engine stored it in; for a short message nil. A returned
// medium message's bytes are in the receive area too (the engine carries
// them back); a returned bulk message names the region of the staging area
// it was sent from. The slice aliases the shared memory. d is checked, not
// trusted: Data returns ErrOutOfRange when it names bytes outside the area.
func (v *View) Data(d *Descriptor) ([]byte, error) {
	if v.mem == nil {
		return nil, ErrClosed
	}
	var area []byte
	switch d.Class &^ ClassReturned {
	case ClassShort:
		return nil, nil
	case ClassMedium:
		if d.Length > MaxMedium {
			return nil, fmt.Errorf("%w: a medium message of %d bytes", ErrOutOfRange, d.Length)
		}
		area = v.mem[v.l.recvOff : v.l.recvOff+v.l.recvSize]
	case ClassBulk:
		area = v.Staging()
	default:
		return nil, fmt.Errorf("%w: class %d carries no bytes", ErrOutOfRange, d.Class)
	}
	end := uint64(d.Offset) + uint64(d.Length)
	if end > uint64(len(area)) {
		return nil, fmt.Errorf("%w: %d bytes at offset %d of an area of %d", ErrOutOfRange, d.Length, d.Offset, len(area))
	}
	return area[d.Offset:end:end], nil
}

// Ready reports which receive queues hold a descriptor. A corrupt producer
// index counts as one, so that Receive gets to report it.
func (v *View) Ready() Events {
	if v.mem == nil {
		return 0
	}
	var ev Events
	for _, q := range [...]Queue{RequestReceive, ReplyReceive} {
		if n, err := v.rings[q].available(); n > 0 || err != nil {
			ev |= q.event()
		}
	}
	return ev
}

// Arm prepares to block until a receive queue of ev is not empty. It
// stores ev into the armed word, then looks at those queues: if one holds
// a descriptor, Arm clears the word and returns their events, and the
// caller must not block (it has work); otherwise it returns 0, and the
// caller may block on its notification (the eventfd that the daemon's
// notify function writes: Memory.SetNotify), which comes once the
// engine puts a descriptor into one of them. The engine clears the word
// when it notifies, so every block needs an Arm before it. A notification
// may be spurious (nothing new is there): the caller arms again. Arm(0)
// disarms. On a closed view Arm returns ev, so that the caller goes on to
// Receive and its ErrClosed. Memory.signal explains why no
// wake-up is lost.
func (v *View) Arm(ev Events) (ready Events) {
	ev &= allEvents
	if v.mem == nil {
		return ev
	}
	v.armed.Store(uint32(ev))
	if ev == 0 {
		return 0
	}
	if ready = v.Ready() & ev; ready != 0 {
		v.armed.Store(0)
	}
	return ready
}
