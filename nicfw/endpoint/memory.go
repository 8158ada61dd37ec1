package endpoint

import (
	"encoding/binary"
	"errors"
)

// The engine's side of an endpoint's memory (Memory): what it takes from
// the send queues, puts into the receive queues, and reads and writes of
// the header's words.

// Stats counts what the engine did with an endpoint's queues.
type Stats struct {
	Taken    uint64              // descriptors taken from send queues and accepted
	Refused  [NumRefusals]uint64 // refusals by reason; RefusedRing counts calls that found a corrupt index
	Put      uint64              // descriptors put into receive queues
	PutFull  uint64              // Put calls that found the receive queue full
	Notified uint64              // Puts that found their queue's event armed (SetNotify)
}

// Memory is the engine's side of an endpoint: the memfd and its
// mapping. It belongs to the engine thread.
type Memory struct {
	fd    int
	mem   []byte
	l     layout
	rings [numQueues]descRing
	hdrWords
	notify     func()
	stats      Stats
	arrivals   *Bells // the page whose arrival bit Put sets (SetBell), or nil
	arrivalBit int
}

// Config returns the memory's sizes.
func (m *Memory) Config() Config {
	return Config{QueueEntries: m.l.entries, StagingSize: m.l.staging, TableSize: m.l.table}
}

// FD returns the memfd, for handing to the application (SCM_RIGHTS, or
// exec.Cmd.ExtraFiles after a dup). The memory owns it; Close closes it.
func (m *Memory) FD() int { return m.fd }

// Staging returns the engine's view of the staging area. The application
// may change its bytes at any time.
func (m *Memory) Staging() []byte {
	if m.mem == nil {
		return nil
	}
	return m.mem[m.l.stagingOff : m.l.stagingOff+m.l.staging : m.l.stagingOff+m.l.staging]
}

// Stats returns the memory's counters.
func (m *Memory) Stats() Stats { return m.stats }

// StoreRegion returns how many bytes at the start of the staging area
// peers' Stores may write (View.SetStoreRegion), at most the staging area.
func (m *Memory) StoreRegion() uint64 {
	return min(uint64(m.store.Load()), uint64(m.l.staging))
}

// Pool returns the receive pool the application set (View.SetPool): its
// offset in the staging area and its size, clipped to the staging area;
// size 0: none.
func (m *Memory) Pool() (off, size uint32) {
	off, size = m.poolOff.Load(), m.poolLen.Load()
	if uint64(off) >= uint64(m.l.staging) {
		return 0, 0
	}
	return off, uint32(min(uint64(size), uint64(m.l.staging)-uint64(off)))
}

// Produced returns the ring position the next descriptor Put into receive
// queue q takes.
func (m *Memory) Produced(q Queue) uint32 { return m.rings[q].own }

// Released returns the ring position up to which the application has
// released receive queue q's entries (its consumer index): an entry at a
// position p with Released(q)-p in 1..entries is the engine's again.
func (m *Memory) Released(q Queue) uint32 { return m.rings[q].peerIdx.Load() }

// Queued returns the descriptors in queue q: in a send queue, those the
// application produced and the engine has not taken; in a receive queue,
// those the engine put and the application has not released. The
// application's index is untrusted: a count past the ring's size (a
// corrupt index) is reported as the size.
func (m *Memory) Queued(q Queue) uint32 {
	if m.mem == nil || q >= numQueues {
		return 0
	}
	r := &m.rings[q]
	n := r.peerIdx.Load() - r.own // a send queue: the application produces
	if !q.isSend() {
		n = r.own - r.peerIdx.Load()
	}
	return min(n, r.size)
}

// AcceptsHandler reports whether a request may name handler h
// (View.SetHandlers).
func (m *Memory) AcceptsHandler(h uint32) bool { return h < m.handlers.Load() }

// Answers reports whether the application answers every request
// (View.SetAnswers).
func (m *Memory) Answers() bool { return m.answers != nil && m.answers.Load() != 0 }

// SetNotify sets the function that Put calls after it has put a
// descriptor into a receive queue whose event the application armed
// (View.Arm): the daemon's writes the eventfd the application
// blocks on. It runs in the engine thread, at most once per arming, and
// must not block. With none (nil, the default) nobody is notified, but the
// armed word is cleared all the same.
func (m *Memory) SetNotify(f func()) { m.notify = f }

// SetIdle writes the engine's idle word, which the application's Send
// reads to decide whether to kick the engine (View.SetKick). An
// engine going to sleep first sets it on every endpoint, then looks at
// every send queue once more (Pending) and sleeps only if all are empty;
// on waking it clears it. Looking again after setting the word is what
// makes a kick impossible to lose: Send publishes its descriptor before it
// loads the word, the engine sets the word before it loads the indices,
// all four sequentially consistent atomic operations, so either the engine
// sees the descriptor or Send sees the word and kicks (see signal for the
// same argument in the other direction).
func (m *Memory) SetIdle(idle bool) {
	if m.mem == nil {
		return
	}
	if idle {
		m.idle.Or(wordIdle)
	} else {
		m.idle.And(^uint32(wordIdle))
	}
}

// The bits of the engine's word (hdrIdle).
const (
	wordIdle    = 1 // the engine sleeps: Send kicks it
	wordEvicted = 2 // the endpoint is not resident, or parked: Send rings its doorbells
)

// SetEvicted marks the endpoint resident (false) or not (true) in the
// engine's word; the engine also marks a resident endpoint it parked
// (idle for a while, out of its polling). While it is marked, the
// application's Send rings the endpoint's doorbells: its bit in the
// application's page (Bells, View.MapBells) and the header's own word
// (Doorbell), and kicks the engine if the engine sleeps: a marked
// endpoint's queues are not polled, and the doorbell is how its work
// reaches the engine. An engine that marks an endpoint then looks at its
// send queues once more (Pending), as SetIdle's caller does, so that no
// send is missed.
func (m *Memory) SetEvicted(evicted bool) {
	if m.mem == nil {
		return
	}
	if evicted {
		m.idle.Or(wordEvicted)
	} else {
		m.idle.And(^uint32(wordEvicted))
	}
}

// SetBell writes the endpoint's bit in its application's page of
// doorbells (Bells.Alloc) into its header, where the application's Send
// finds it (View.SetBells); 0: none, the header's doorbell only.
//
// With a page (not nil), Put sets the endpoint's arrival bit in it after
// each descriptor it puts (Bells.Arrive).
func (m *Memory) SetBell(page *Bells, bit int) {
	if m.mem != nil {
		m.bellBit.Store(uint32(bit))
		m.arrivals, m.arrivalBit = page, bit
	}
}

// RingsBells reports whether the application said it rings its page of
// doorbells (View.MapBells). Untrusted: an application that says so and
// does not ring only delays its own sends.
func (m *Memory) RingsBells() bool { return m.mem != nil && m.ringsPage.Load() != 0 }

// Doorbell reports whether the application rang the endpoint's doorbell
// since the last call, and clears it.
func (m *Memory) Doorbell() bool {
	if m.mem == nil || m.bell.Load() == 0 {
		return false
	}
	return m.bell.Swap(0) != 0
}

// PeekHead returns the Dest and Class of the descriptor at the head of
// send queue q without taking it: untrusted (Take checks them), for a
// scheduler that asks whether the message could leave now. ok false: the
// queue is empty; a corrupt ring peeks as a descriptor, so that Take gets
// to refuse it.
func (m *Memory) PeekHead(q Queue) (dest uint32, class Class, ok bool) {
	if m.mem == nil || !q.isSend() {
		return 0, 0, false
	}
	r := &m.rings[q]
	n, err := r.available()
	if err != nil {
		return NoIndex, 0, true
	}
	if n == 0 {
		return 0, 0, false
	}
	b := r.slot(r.own)
	return binary.LittleEndian.Uint32(b[4:]), Class(b[0]), true // Descriptor.Dest, Class
}

// Pending reports whether either send queue holds a descriptor (a corrupt
// ring counts as pending, so that Take gets to refuse it).
func (m *Memory) Pending() bool {
	if m.mem == nil {
		return false
	}
	// A producer's index other than the consumer's own is a descriptor,
	// or a corrupt ring: no count is needed, nor the error available
	// would make of it.
	rq, rp := &m.rings[RequestSend], &m.rings[ReplySend]
	return rq.peer != rq.own || rp.peer != rp.own || rq.peerIdx.Load() != rq.own || rp.peerIdx.Load() != rp.own
}

// Take takes the next descriptor from send queue q and checks it. It
// returns ok false and a nil error when the queue is empty; ok true and a
// nil error for a descriptor that passed; and a Refusal for one that did
// not, which is counted. A refused descriptor has still been taken off the
// queue and d holds it (to return to its sender), except for RefusedRing,
// where nothing was taken and the queue stays refused until the
// application repairs its index.
//
// Take gives the entry back to the application at once. The engine, which
// must copy a medium message's bytes before the application may reuse
// them (View.Progress), uses Next and Commit instead.
func (m *Memory) Take(q Queue, d *Descriptor) (ok bool, err error) {
	ok, err = m.Next(q, d)
	if ok {
		m.Commit(q)
	}
	return ok, err
}

// Next is Take except that a descriptor that passed stays in its entry:
// the application sees it taken (Progress) only once Commit gives the
// entry back, so the bytes it names stay the application's to leave alone
// until then. A refused descriptor is given back at once.
func (m *Memory) Next(q Queue, d *Descriptor) (ok bool, err error) {
	if m.mem == nil {
		return false, ErrClosed
	}
	if !q.isSend() {
		return false, ErrWrongQueue
	}
	ok, err = m.rings[q].peek(d)
	if err == nil && ok {
		if err = m.check(d); err != nil {
			m.rings[q].release()
		}
	}
	if err != nil {
		if r, isRefusal := err.(Refusal); isRefusal && r < NumRefusals {
			m.stats.Refused[r]++
		}
		return false, err
	}
	if ok {
		m.stats.Taken++
	}
	return ok, nil
}

// Express checks d, a descriptor handed to the engine directly rather than
// through a send queue (the inline engine's express path), as Next checks
// a queued one, and counts it taken if it passes. A descriptor that does
// not pass is not counted: the caller queues it, and Next refuses it
// there.
func (m *Memory) Express(d *Descriptor) bool {
	if m.mem == nil || m.check(d) != nil {
		return false
	}
	m.stats.Taken++
	return true
}

// Commit gives back the entry of the descriptor Next returned from send
// queue q.
func (m *Memory) Commit(q Queue) { m.rings[q].release() }

// check validates a descriptor copied out of a send queue.
func (m *Memory) check(d *Descriptor) error {
	if d.Flags != 0 && (d.Flags != CutThrough || d.Class != ClassBulk || d.Offset < 4 || d.Offset%4 != 0) {
		return RefusedFlags
	}
	switch d.Class {
	case ClassShort:
		if d.NArgs > MaxShortArgs {
			return RefusedArgs
		}
		if d.Offset != 0 || d.Length != 0 {
			return RefusedLength
		}
	case ClassMedium, ClassBulk:
		if d.NArgs > MaxShortArgs {
			return RefusedArgs
		}
		if d.Length == 0 || d.Class == ClassMedium && d.Length > MaxMedium {
			return RefusedLength
		}
		// In 64 bits, so that offset+length cannot wrap around.
		if uint64(d.Offset)+uint64(d.Length) > uint64(m.l.staging) {
			return RefusedRange
		}
	case ClassCommand:
		if d.NArgs > MaxShortArgs {
			return RefusedArgs
		}
		if d.Offset != 0 || d.Length != 0 || d.RemoteOffset != 0 {
			return RefusedLength
		}
		return nil // Dest is not used
	default:
		return RefusedClass
	}
	if uint64(d.Dest) >= uint64(m.l.table) {
		return RefusedDestination
	}
	return nil
}

// Put puts d into receive queue q. It returns ErrQueueFull when the
// application has not made room (the engine then NACKs), and RefusedRing
// when the application's consumer index is corrupt. If the application
// armed q's event, Put notifies it (SetNotify).
func (m *Memory) Put(q Queue, d *Descriptor) error { return m.put(q, d, nil) }

// PutData puts d into receive queue q with the bytes of a medium message,
// which it first copies into the receive-area slot of the entry d goes
// into, and sets d's Offset and Length to name them there. len(data) is at
// most MaxMedium (the engine checked).
func (m *Memory) PutData(q Queue, d *Descriptor, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	return m.put(q, d, data)
}

func (m *Memory) put(q Queue, d *Descriptor, data []byte) error {
	if m.mem == nil {
		return ErrClosed
	}
	if q.isSend() || q >= numQueues {
		return ErrWrongQueue
	}
	r := &m.rings[q]
	var err error
	if data != nil {
		if err = r.room(); err == nil {
			// The entry at r.own is free, so is its slot: the application
			// gave both back when it released the entry before.
			off := m.l.recvSlot(q, r.own)
			slot := m.mem[m.l.recvOff+off : m.l.recvOff+off+MaxMedium]
			d.Offset, d.Length = uint32(off), uint32(copy(slot, data))
		}
	}
	if err == nil {
		err = r.produce(d) // (room again: the same answer, from the cached index)
	}
	switch {
	case err == nil:
		m.stats.Put++
		m.arrivals.Arrive(m.arrivalBit)
		if m.armed.Load()&uint32(q.event()) != 0 {
			m.signal(q)
		}
	case errors.Is(err, ErrQueueFull):
		m.stats.PutFull++
	default:
		m.stats.Refused[RefusedRing]++
	}
	return err
}

// signal notifies the application, after a Put into receive queue q, if
// it armed q's event.
//
// No wake-up is lost. The application (View.Arm) stores the armed
// mask, then loads the producer indices of the receive queues; Put has
// stored the producer index, then loads the armed mask here. All four are
// sequentially consistent atomic operations (sync/atomic), so they fall in
// one total order in which either the application's load of the index
// comes after Put's store, and Arm sees the entry and the application does
// not block, or Put's load of the mask comes after Arm's store, and Put
// sees the bit and notifies. Both may happen: the notification is then
// spurious, and the application, finding nothing new, arms again. The mask
// is cleared with a compare-and-swap of exactly the value seen, so one
// arming is answered by at most one notification, and a mask that the
// application changed in between is looked at again, not lost.
func (m *Memory) signal(q Queue) {
	bit := uint32(q.event())
	for {
		old := m.armed.Load()
		if old&bit == 0 {
			return
		}
		if m.armed.CompareAndSwap(old, 0) {
			m.stats.Notified++
			if m.notify != nil {
				m.notify()
			}
			return
		}
	}
}

// CountDone counts a message of the request send queue done with: the
// engine reads nothing of it any more (a short or medium message sent, a
// bulk message acknowledged whole or returned). View.Done reads the count.
func (m *Memory) CountDone() { m.done.Add(1) }

// Published returns how many bytes of the cut-through bulk message d (taken
// and checked) its application has written: its status register, at most
// d.Length.
func (m *Memory) Published(d *Descriptor) uint32 {
	return min(statusWord(m.Staging(), d.Offset).Load(), d.Length)
}
