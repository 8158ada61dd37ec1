package endpoint

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/xam-project/xam/internal/testenv"
)

// The layout of version 2: the receive area after the staging area, the
// event words in the header, RemoteOffset in the descriptor; a memory of
// version 1 is not mapped.
func TestEndpointLayoutV2(t *testing.T) {
	cfg := Config{QueueEntries: 8, StagingSize: 3 * pageSize, TableSize: 4}
	m, v := newTestEndpoint(t, cfg)
	l := v.l
	if l.recvOff%pageSize != 0 || l.recvOff < l.stagingOff+cfg.StagingSize || l.recvSize != 2*8*MaxMedium || l.total != len(v.mem) {
		t.Errorf("layout %+v for %d bytes", l, len(v.mem))
	}
	if hdrIdle/cacheLine == hdrArmed/cacheLine || hdrArmed+4 > hdrSize {
		t.Errorf("idle word at %d and armed word at %d share a cache line", hdrIdle, hdrArmed)
	}
	if got := l.recvSlot(ReplyReceive, 8+3); got != (8+3)*MaxMedium {
		t.Errorf("slot of reply receive entry 11: %d", got)
	}
	d := Descriptor{Class: ClassBulk, NArgs: 1, Dest: 2, Handler: 3, Offset: 4, Length: 5, RemoteOffset: 0xdead_beef, Tag: 6, Args: [8]uint64{7}}
	if err := v.Send(RequestSend, &d); err != nil {
		t.Fatal(err)
	}
	var got Descriptor
	if ok, err := m.Take(RequestSend, &got); !ok || err != nil || got != d {
		t.Errorf("Take = %v, %v, %+v; want %+v", ok, err, got, d)
	}
	binary.LittleEndian.PutUint32(m.mem[hdrVersion:], 1)
	if v1, err := Map(m.FD()); !errors.Is(err, ErrBadEndpoint) {
		if v1 != nil {
			v1.Close()
		}
		t.Errorf("Map of a version 1 memory = %v, want ErrBadEndpoint", err)
	}
}

// Peek leaves the entry (and its medium slot) to the application until
// Release; the engine's PutData writes a slot only when it may produce
// into the entry that owns it.
func TestEndpointPeekRelease(t *testing.T) {
	m, v := newTestEndpoint(t, Config{QueueEntries: 2})
	msg := func(i int) []byte {
		b := make([]byte, 100+i)
		for j := range b {
			b[j] = byte(i)
		}
		return b
	}
	for i := range 2 {
		d := Descriptor{Class: ClassMedium, Handler: uint32(i)}
		if err := m.PutData(RequestReceive, &d, msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	d := Descriptor{Class: ClassMedium, Handler: 2}
	if err := m.PutData(RequestReceive, &d, msg(2)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("putData into a full queue: %v", err)
	}
	check := func(i int) {
		t.Helper()
		var got Descriptor
		for range 2 { // Peek twice: the same descriptor
			if ok, err := v.Peek(RequestReceive, &got); !ok || err != nil || got.Handler != uint32(i) {
				t.Fatalf("Peek = %v, %v, %+v; want message %d", ok, err, got, i)
			}
		}
		b, err := v.Data(&got)
		if err != nil || string(b) != string(msg(i)) || got.Offset != uint32(v.l.recvSlot(RequestReceive, uint32(i))) {
			t.Fatalf("message %d: Data = %d bytes at %d, %v", i, len(b), got.Offset, err)
		}
		if err := v.Release(RequestReceive); err != nil {
			t.Fatal(err)
		}
	}
	check(0)
	// Entry 0 is free again, and message 2 goes into its slot; message 1,
	// still held, is untouched.
	if err := m.PutData(RequestReceive, &d, msg(2)); err != nil {
		t.Fatal(err)
	}
	check(1)
	check(2)
	if err := v.Release(RequestReceive); !errors.Is(err, ErrQueueEmpty) {
		t.Errorf("Release of an empty queue: %v", err)
	}
	if _, err := v.Peek(RequestSend, &d); !errors.Is(err, ErrWrongQueue) {
		t.Errorf("Peek(RequestSend): %v", err)
	}
	if err := v.Release(ReplySend); !errors.Is(err, ErrWrongQueue) {
		t.Errorf("Release(ReplySend): %v", err)
	}
	if put, taken := v.Progress(RequestReceive); put != 3 || taken != 3 {
		t.Errorf("Progress(RequestReceive) = %d, %d, want 3, 3", put, taken)
	}
}

// Data checks what a descriptor names against the areas.
func TestEndpointData(t *testing.T) {
	cfg := Config{QueueEntries: 4, StagingSize: 16 << 10}
	_, v := newTestEndpoint(t, cfg)
	recv := 2 * 4 * MaxMedium
	for _, c := range []struct {
		d    Descriptor
		want int // length, or -1 for ErrOutOfRange
		area string
	}{
		{Descriptor{Class: ClassShort}, 0, ""},
		{Descriptor{Class: ClassMedium, Offset: uint32(recv - 10), Length: 10}, 10, "receive"},
		{Descriptor{Class: ClassMedium | ClassReturned, Offset: 0, Length: MaxMedium}, MaxMedium, "receive"},
		{Descriptor{Class: ClassMedium, Offset: uint32(recv - 10), Length: 11}, -1, ""},
		{Descriptor{Class: ClassMedium, Offset: 0, Length: MaxMedium + 1}, -1, ""},
		{Descriptor{Class: ClassMedium, Offset: 0xffff_ffff, Length: 2}, -1, ""},
		{Descriptor{Class: ClassBulk, Offset: 1 << 10, Length: 15 << 10}, 15 << 10, "staging"},
		{Descriptor{Class: ClassBulk | ClassReturned, Offset: 0, Length: 16 << 10}, 16 << 10, "staging"},
		{Descriptor{Class: ClassBulk, Offset: 1, Length: 16 << 10}, -1, ""},
		{Descriptor{Class: 9, Length: 1}, -1, ""},
	} {
		b, err := v.Data(&c.d)
		switch {
		case c.want < 0:
			if !errors.Is(err, ErrOutOfRange) {
				t.Errorf("Data(%+v) = %d bytes, %v; want ErrOutOfRange", c.d, len(b), err)
			}
		case err != nil || len(b) != c.want:
			t.Errorf("Data(%+v) = %d bytes, %v; want %d", c.d, len(b), err, c.want)
		case c.area == "staging" && &b[0] != &v.Staging()[c.d.Offset]:
			t.Errorf("Data(%+v) is not in the staging area", c.d)
		case c.area == "receive" && uintptr(unsafe.Pointer(&b[0])) != uintptr(unsafe.Pointer(&v.mem[v.l.recvOff+int(c.d.Offset)])):
			t.Errorf("Data(%+v) is not in the receive area", c.d)
		}
	}
}

// Arm and the engine's notification, one step at a time.
func TestEndpointArm(t *testing.T) {
	m, v := newTestEndpoint(t, Config{QueueEntries: 4})
	notified := 0
	m.SetNotify(func() { notified++ })
	d := Descriptor{Class: ClassShort}
	if ready := v.Arm(EventRequest | EventReply); ready != 0 {
		t.Fatalf("Arm with empty queues = %v", ready)
	}
	if err := m.Put(ReplyReceive, &d); err != nil {
		t.Fatal(err)
	}
	if notified != 1 || v.armed.Load() != 0 {
		t.Fatalf("after a Put into an armed queue: %d notifications, armed %#x", notified, v.armed.Load())
	}
	if err := m.Put(ReplyReceive, &d); err != nil { // not armed any more
		t.Fatal(err)
	}
	if notified != 1 {
		t.Fatalf("%d notifications without arming again", notified)
	}
	// A queue with entries: Arm says so and leaves nothing armed.
	if ready := v.Arm(EventRequest | EventReply); ready != EventReply || v.armed.Load() != 0 {
		t.Fatalf("Arm with two replies queued = %v, armed %#x", ready, v.armed.Load())
	}
	// Armed for requests only, a reply does not notify.
	if ready := v.Arm(EventRequest); ready != 0 {
		t.Fatalf("Arm(EventRequest) = %v", ready)
	}
	if err := m.Put(ReplyReceive, &d); err != nil {
		t.Fatal(err)
	}
	if notified != 1 || v.armed.Load() != uint32(EventRequest) {
		t.Fatalf("a reply notified a wait for requests (%d, armed %#x)", notified, v.armed.Load())
	}
	if err := m.Put(RequestReceive, &d); err != nil {
		t.Fatal(err)
	}
	if notified != 2 {
		t.Fatalf("%d notifications, want 2", notified)
	}
	v.Arm(0)
	if err := m.Put(RequestReceive, &d); err != nil || notified != 2 {
		t.Fatalf("disarmed: %v, %d notifications", err, notified)
	}
	if st := m.Stats(); st.Notified != 2 {
		t.Errorf("stats %+v", st)
	}
	if ready := (&View{}).Arm(EventReply); ready != EventReply {
		t.Errorf("Arm on a closed view = %v, want the events (go and Receive)", ready)
	}
}

// The kick: Send calls it only while the engine is idle.
func TestEndpointKick(t *testing.T) {
	m, v := newTestEndpoint(t, Config{QueueEntries: 8})
	kicks := 0
	d := Descriptor{Class: ClassShort}
	send := func() {
		t.Helper()
		if err := v.Send(RequestSend, &d); err != nil {
			t.Fatal(err)
		}
	}
	send() // no kick function: nothing
	m.SetIdle(true)
	send()
	v.SetKick(func() { kicks++ })
	send()
	send()
	m.SetIdle(false)
	send()
	if kicks != 2 {
		t.Errorf("%d kicks, want 2 (the sends while the engine was idle)", kicks)
	}
	var e Memory
	e.SetIdle(true) // a closed memory: nothing
}

// TestEndpointWakeups runs the application and the engine in two
// goroutines over the shared memory: the application drains the request
// receive queue and, when it finds it empty, arms and blocks on an eventfd
// that the engine's notify function writes; the engine puts 10^4
// descriptors, pausing at random. A lost wake-up leaves the application
// blocked for good, which the test reports. Run it with -race.
func TestEndpointWakeups(t *testing.T) {
	m, v := newTestEndpoint(t, Config{QueueEntries: 4})
	efd := testenv.NewEventFD(t)
	m.SetNotify(efd.Signal)
	const n = 10000
	engineErr := make(chan error, 1)
	go func() { engineErr <- produce(n, 1, func(d *Descriptor) error { return m.Put(RequestReceive, d) }) }()
	blocked, spurious := 0, 0
	var d Descriptor
	for next := 0; next < n; {
		ok, err := v.Receive(RequestReceive, &d)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if d.Handler != uint32(next) {
				t.Fatalf("got %d, want %d", d.Handler, next)
			}
			next++
			continue
		}
		if v.Arm(EventRequest) != 0 {
			continue // it came meanwhile: no blocking
		}
		blocked++
		if !efd.Wait(10 * time.Second) {
			t.Fatalf("lost wake-up: blocked 10 s waiting for message %d (queue holds %v)", next, v.Ready())
		}
		if v.Ready() == 0 {
			spurious++
		}
	}
	if err := <-engineErr; err != nil {
		t.Fatal(err)
	}
	if blocked == 0 {
		t.Error("the application never blocked: the test tested nothing")
	}
	t.Logf("%d messages, blocked %d times, %d spurious wake-ups, %d notifications", n, blocked, spurious, m.Stats().Notified)
}

// TestEndpointKicks is TestEndpointWakeups the other way: the engine
// drains the send queue and, when it finds it empty, marks itself idle,
// looks once more and sleeps on an eventfd that the application's kick
// writes; the application sends 10^4 descriptors, pausing at random.
func TestEndpointKicks(t *testing.T) {
	m, v := newTestEndpoint(t, Config{QueueEntries: 4})
	efd := testenv.NewEventFD(t)
	v.SetKick(efd.Signal)
	const n = 10000
	appErr := make(chan error, 1)
	go func() { appErr <- produce(n, 3, func(d *Descriptor) error { return v.Send(RequestSend, d) }) }()
	slept := 0
	var d Descriptor
	for next := 0; next < n; {
		ok, err := m.Take(RequestSend, &d)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if d.Handler != uint32(next) {
				t.Fatalf("took %d, want %d", d.Handler, next)
			}
			next++
			continue
		}
		m.SetIdle(true)
		if m.Pending() {
			m.SetIdle(false)
			continue
		}
		slept++
		if !efd.Wait(10 * time.Second) {
			t.Fatalf("lost kick: slept 10 s waiting for descriptor %d", next)
		}
		m.SetIdle(false)
	}
	if err := <-appErr; err != nil {
		t.Fatal(err)
	}
	if slept == 0 {
		t.Error("the engine never slept: the test tested nothing")
	}
	t.Logf("%d descriptors, the engine slept %d times", n, slept)
}

// produce puts n short descriptors (Handler 0..n-1) with put, retrying
// while the queue is full, and pauses at random between them (seeded by
// seed): a sleep, a yield or nothing.
func produce(n int, seed uint64, put func(*Descriptor) error) error {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	deadline := time.Now().Add(60 * time.Second)
	for i := range n {
		d := Descriptor{Class: ClassShort, Handler: uint32(i)}
		for {
			err := put(&d)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) || time.Now().After(deadline) {
				return err
			}
			runtime.Gosched()
		}
		switch rng.IntN(4) {
		case 0:
			time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond)
		case 1:
			runtime.Gosched()
		}
	}
	return nil
}
