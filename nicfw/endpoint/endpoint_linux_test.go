package endpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/internal/testenv"
)

// noEndpointLeaks fails t if, when it and its cleanups are done, an
// endpoint memfd is still open or still mapped. (TestMain's leak check
// looks for sockets and rings, not for memfds.)
func noEndpointLeaks(t *testing.T) {
	t.Helper()
	testenv.NoMemfdLeaks(t, endpointName)
}

func newTestEndpoint(t *testing.T, cfg Config) (*Memory, *View) {
	t.Helper()
	noEndpointLeaks(t)
	m, err := NewMemory(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	v, err := Map(m.FD())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	return m, v
}

func TestEndpointConfig(t *testing.T) {
	noEndpointLeaks(t)
	for _, c := range []Config{
		{QueueEntries: 3}, {QueueEntries: 1}, {QueueEntries: maxQueueEntries * 2},
		{StagingSize: MaxMedium - 1}, {StagingSize: maxStagingSize + 1},
		{TableSize: -1}, {TableSize: maxTableSize + 1},
	} {
		if m, err := NewMemory(c); !errors.Is(err, ErrConfig) {
			if m != nil {
				m.Close()
			}
			t.Errorf("NewMemory(%+v) = %v, want ErrConfig", c, err)
		}
	}
	m, v := newTestEndpoint(t, Config{})
	want := Config{DefaultQueueEntries, DefaultStagingSize, DefaultTableSize}
	if m.Config() != want || v.Config() != want {
		t.Errorf("configs %+v and %+v, want %+v", m.Config(), v.Config(), want)
	}
	if len(m.Staging()) != DefaultStagingSize || len(v.Staging()) != DefaultStagingSize {
		t.Errorf("staging areas of %d and %d bytes", len(m.Staging()), len(v.Staging()))
	}
	// The memfd is sealed: nobody can shrink it under the engine's mapping.
	if err := unix.Ftruncate(m.FD(), 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("ftruncate of the endpoint memfd: %v, want EPERM", err)
	}
}

func TestEndpointQueuesRoundTrip(t *testing.T) {
	m, v := newTestEndpoint(t, Config{QueueEntries: 4})
	d := Descriptor{Class: ClassShort, NArgs: 2, Dest: 7, Handler: 3, Tag: 0xfeed, Args: [8]uint64{1, 2}}
	for i := range 4 {
		d.Args[7] = uint64(i)
		if err := v.Send(RequestSend, &d); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := v.Send(RequestSend, &d); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("send into a full queue: %v, want ErrQueueFull", err)
	}
	if !m.Pending() {
		t.Fatal("Pending() = false with four descriptors queued")
	}
	var got Descriptor
	for i := range 4 {
		ok, err := m.Take(RequestSend, &got)
		d.Args[7] = uint64(i)
		if !ok || err != nil || got != d {
			t.Fatalf("take %d = %v, %v, %+v; want %+v", i, ok, err, got, d)
		}
	}
	if ok, err := m.Take(RequestSend, &got); ok || err != nil {
		t.Fatalf("take from an empty queue = %v, %v", ok, err)
	}
	if m.Pending() {
		t.Fatal("Pending() = true with empty send queues")
	}
	// The receive direction, through the reply receive queue.
	for i := range 5 {
		d.Handler = uint32(i)
		err := m.Put(ReplyReceive, &d)
		if i < 4 && err != nil || i == 4 && !errors.Is(err, ErrQueueFull) {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	for i := range 4 {
		if ok, err := v.Receive(ReplyReceive, &got); !ok || err != nil || got.Handler != uint32(i) {
			t.Fatalf("receive %d = %v, %v, handler %d", i, ok, err, got.Handler)
		}
	}
	if ok, err := v.Receive(RequestReceive, &got); ok || err != nil {
		t.Fatalf("receive from an empty queue = %v, %v", ok, err)
	}
	// Each side may use only its own ends.
	if _, err := m.Take(RequestReceive, &got); !errors.Is(err, ErrWrongQueue) {
		t.Errorf("Take(RequestReceive): %v", err)
	}
	if err := m.Put(ReplySend, &d); !errors.Is(err, ErrWrongQueue) {
		t.Errorf("Put(ReplySend): %v", err)
	}
	if err := v.Send(ReplyReceive, &d); !errors.Is(err, ErrWrongQueue) {
		t.Errorf("Send(ReplyReceive): %v", err)
	}
	if _, err := v.Receive(ReplySend, &got); !errors.Is(err, ErrWrongQueue) {
		t.Errorf("Receive(ReplySend): %v", err)
	}
	st := m.Stats()
	if st.Taken != 4 || st.Put != 4 || st.PutFull != 1 || st.Refused != [NumRefusals]uint64{} {
		t.Errorf("stats %+v", st)
	}
}

// forged returns the i-th descriptor the tests send, and the refusal the
// engine must answer it with (nil: accepted). Handler carries i; accepted
// medium and bulk messages have 64 bytes of byte(i) at Offset, in a slot of
// their own for 1024 consecutive messages.
func forged(i int, cfg Config) (Descriptor, error) {
	slot := uint32(i*64) % uint32(cfg.StagingSize)
	d := Descriptor{Class: ClassMedium, Dest: uint32(i % cfg.TableSize), Handler: uint32(i), Tag: 42, Offset: slot, Length: 64}
	switch i % 10 {
	case 0:
		d = Descriptor{Class: ClassShort, NArgs: 8, Dest: 1, Handler: uint32(i)}
		for j := range d.Args {
			d.Args[j] = uint64(i + j)
		}
		return d, nil
	case 1: // offset+length wraps around 32 bits
		d.Offset, d.Length = 0xffff_fff0, 0x20
		return d, RefusedRange
	case 2:
		return d, nil
	case 3: // runs past the end of the staging area
		d.Offset = uint32(cfg.StagingSize - 10)
		return d, RefusedRange
	case 4:
		d.Class = ClassBulk
		return d, nil
	case 5:
		d = Descriptor{Class: ClassShort, Dest: uint32(cfg.TableSize), Handler: uint32(i)}
		return d, RefusedDestination
	case 6:
		d.Class = 9
		return d, RefusedClass
	case 7: // a medium message larger than MaxMedium
		d.Offset, d.Length = 0, MaxMedium+1
		return d, RefusedLength
	case 8:
		d = Descriptor{Class: ClassShort, NArgs: MaxShortArgs + 1, Handler: uint32(i)}
		return d, RefusedArgs
	default:
		d.Dest = uint32(cfg.TableSize - 1)
		return d, nil
	}
}

func TestEndpointRefusals(t *testing.T) {
	cfg := Config{QueueEntries: 16, StagingSize: 16 << 10, TableSize: 4}
	m, v := newTestEndpoint(t, cfg)
	var want Stats
	for i := range 40 {
		d, wantErr := forged(i, cfg)
		if err := v.Send(ReplySend, &d); err != nil {
			t.Fatal(err)
		}
		var got Descriptor
		ok, err := m.Take(ReplySend, &got)
		if err != wantErr || ok != (wantErr == nil) || got != d {
			t.Errorf("descriptor %d %+v: Take = %v, %v, want %v", i, d, ok, err, wantErr)
		}
		if wantErr != nil {
			if !errors.Is(err, ErrRefused) {
				t.Errorf("%v does not match ErrRefused", err)
			}
			want.Refused[wantErr.(Refusal)]++
		} else {
			want.Taken++
		}
	}
	if got := m.Stats(); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
}

// ringIndex returns the shared producer or consumer index of queue q in an
// endpoint's memory, for tests that play a corrupt application.
func ringIndex(mem []byte, l layout, q Queue, producer bool) *atomic.Uint32 {
	off := hdrSize + int(q)*l.ringSize + ringCons
	if producer {
		off = hdrSize + int(q)*l.ringSize + ringProd
	}
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

func TestEndpointCorruptIndices(t *testing.T) {
	m, v := newTestEndpoint(t, Config{QueueEntries: 8})
	d := Descriptor{Class: ClassShort}
	// A producer index claiming more entries than the ring holds.
	ringIndex(v.mem, v.l, RequestSend, true).Store(9)
	if !m.Pending() {
		t.Error("a corrupt send queue is not pending")
	}
	for range 2 {
		if ok, err := m.Take(RequestSend, &d); ok || err != RefusedRing {
			t.Fatalf("Take from a corrupt ring = %v, %v, want RefusedRing", ok, err)
		}
	}
	// Repaired by the application, the queue works again.
	ringIndex(v.mem, v.l, RequestSend, true).Store(0)
	if err := v.Send(RequestSend, &d); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.Take(RequestSend, &d); !ok || err != nil {
		t.Fatalf("Take after repair = %v, %v", ok, err)
	}
	// A consumer index ahead of the engine's producer index.
	// The engine reads it only when its cached copy says the ring is full:
	// the first 8 Puts go in (the application loses nothing but its own
	// entries), the ninth finds the corruption.
	ringIndex(v.mem, v.l, RequestReceive, false).Store(0x8000_0000)
	for i := range 10 {
		if err := m.Put(RequestReceive, &d); (i < 8) != (err == nil) || i >= 8 && err != RefusedRing {
			t.Fatalf("Put %d with a corrupt consumer index = %v", i, err)
		}
	}
	// Scribbling on the engine's own index changes nothing for the engine.
	ringIndex(v.mem, v.l, ReplyReceive, true).Store(12345)
	if err := m.Put(ReplyReceive, &d); err != nil {
		t.Fatalf("Put after the engine's index was overwritten: %v", err)
	}
	if got := m.Stats().Refused[RefusedRing]; got != 4 {
		t.Errorf("RefusedRing counted %d times, want 4", got)
	}
}

func TestMapEndpointRejects(t *testing.T) {
	noEndpointLeaks(t)
	regular := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(regular, make([]byte, 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(regular)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if v, err := Map(int(f.Fd())); !errors.Is(err, ErrBadEndpoint) {
		if v != nil {
			v.Close()
		}
		t.Errorf("Map(regular file) = %v, want ErrBadEndpoint", err)
	}
	unsealed, err := unix.MemfdCreate("xam-endpoint-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(unsealed)
	if err := unix.Ftruncate(unsealed, 1<<16); err != nil {
		t.Fatal(err)
	}
	if v, err := Map(unsealed); !errors.Is(err, ErrBadEndpoint) {
		if v != nil {
			v.Close()
		}
		t.Errorf("Map(unsealed memfd) = %v, want ErrBadEndpoint", err)
	}
	// A sealed memfd whose header is corrupt: a queue size that is not a
	// power of two, then one whose layout is larger than the file.
	m, err := NewMemory(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, entries := range []uint32{3, maxQueueEntries} {
		*(*uint32)(unsafe.Pointer(&m.mem[hdrEntries])) = entries
		if v, err := Map(m.FD()); !errors.Is(err, ErrBadEndpoint) {
			if v != nil {
				v.Close()
			}
			t.Errorf("Map with %d queue entries in the header = %v, want ErrBadEndpoint", entries, err)
		}
	}
}

// TestEndpointGoroutines runs the application and the engine in two
// goroutines: the application sends on both send queues and the engine
// answers each accepted descriptor on the matching receive queue. Run it
// with -race.
func TestEndpointGoroutines(t *testing.T) {
	cfg := Config{QueueEntries: 16, StagingSize: 64 << 10, TableSize: 16}
	m, v := newTestEndpoint(t, cfg)
	const n = 20000
	deadline := time.Now().Add(30 * time.Second)
	appErr := make(chan error, 1)
	go func() { appErr <- runApplication(v, cfg, n, deadline) }()

	var d Descriptor
	seen := [2]int{0, 1} // next i expected on RequestSend (even) and ReplySend (odd)
	for seen[0] < 2*n || seen[1] < 2*n {
		if time.Now().After(deadline) {
			t.Fatalf("engine: timed out at %v", seen)
		}
		progress := false
		for s, q := range [2]Queue{RequestSend, ReplySend} {
			ok, err := m.Take(q, &d)
			if !ok && err == nil {
				continue
			}
			progress = true
			i := seen[s]
			seen[s] += 2
			want, wantErr := forged(i, cfg)
			if err != wantErr || d != want {
				t.Fatalf("engine: %v descriptor %d = %+v, %v; want %+v, %v", q, i, d, err, want, wantErr)
			}
			if err != nil {
				continue
			}
			if d.Class != ClassShort {
				if b := m.Staging()[d.Offset : d.Offset+d.Length]; !allBytes(b, byte(i)) {
					t.Fatalf("engine: staging bytes of descriptor %d are %x", i, b[:8])
				}
			}
			// Answer on the receive queue, waiting for room.
			rq := map[Queue]Queue{RequestSend: RequestReceive, ReplySend: ReplyReceive}[q]
			for {
				err := m.Put(rq, &d)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrQueueFull) || time.Now().After(deadline) {
					t.Fatalf("engine: put %d: %v", i, err)
				}
				runtime.Gosched()
			}
		}
		if !progress {
			runtime.Gosched()
		}
	}
	if err := <-appErr; err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	if st.Taken != 2*n*4/10 || st.Put != st.Taken || st.Refused[RefusedRange] != 2*n*2/10 {
		t.Errorf("stats %+v", st)
	}
}

func allBytes(b []byte, c byte) bool {
	for _, x := range b {
		if x != c {
			return false
		}
	}
	return true
}

// runApplication is the application side of the endpoint tests: it sends
// descriptors 0..2n-1 from forged (even i on RequestSend, odd on ReplySend),
// writing the staging bytes of each first, and receives the answers to the
// accepted ones from the receive queues, checking their order.
func runApplication(v *View, cfg Config, n int, deadline time.Time) error {
	next := 0
	expect := [2]int{-2, -1} // next accepted i expected on RequestReceive, ReplyReceive
	advance := func(s int) {
		for expect[s] += 2; expect[s] < 2*n; expect[s] += 2 {
			if _, err := forged(expect[s], cfg); err == nil {
				return
			}
		}
	}
	advance(0)
	advance(1)
	var d Descriptor
	for next < 2*n || expect[0] < 2*n || expect[1] < 2*n {
		if time.Now().After(deadline) {
			return fmt.Errorf("application: timed out sending %d, expecting %v", next, expect)
		}
		progress := false
		if next < 2*n {
			d, _ = forged(next, cfg)
			if d.Length == 64 && int(d.Offset)+64 <= cfg.StagingSize {
				for j := range 64 {
					v.Staging()[int(d.Offset)+j] = byte(next)
				}
			}
			q := [2]Queue{RequestSend, ReplySend}[next%2]
			switch err := v.Send(q, &d); {
			case err == nil:
				next++
				progress = true
			case !errors.Is(err, ErrQueueFull):
				return fmt.Errorf("application: send %d: %w", next, err)
			}
		}
		for s, q := range [2]Queue{RequestReceive, ReplyReceive} {
			ok, err := v.Receive(q, &d)
			if err != nil {
				return fmt.Errorf("application: receive: %w", err)
			}
			if !ok {
				continue
			}
			progress = true
			if want, _ := forged(expect[s], cfg); d != want {
				return fmt.Errorf("application: %v got %+v, want %+v", q, d, want)
			}
			advance(s)
		}
		if !progress {
			runtime.Gosched()
		}
	}
	return nil
}

// childEnv, when set, makes TestEndpointChild the application side of
// TestEndpointProcesses: it maps the endpoint memfd it finds at fd 3.
const childEnv = "XAM_NICFW_ENDPOINT_CHILD"

// childConfig sizes the endpoint of TestEndpointProcesses; the child reads
// the same sizes from the header.
var childConfig = Config{QueueEntries: 32, StagingSize: 64 << 10, TableSize: 8}

const childMessages = 5000 // per send queue

// TestEndpointProcesses runs the application in a child process (this test
// binary again, running TestEndpointChild) that receives the endpoint's
// memfd as fd 3, maps it, and runs runApplication against this process's
// engine: good descriptors are accepted and answered, forged ones refused
// and counted.
func TestEndpointProcesses(t *testing.T) {
	m, err := NewMemory(childConfig)
	if err != nil {
		t.Fatal(err)
	}
	noEndpointLeaks(t)
	defer m.Close()
	// ExtraFiles hands over a descriptor of our own, closed after Start.
	dup, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "endpoint")
	cmd := exec.Command(os.Args[0], "-test.run=^TestEndpointChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.ExtraFiles = []*os.File{f}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.Now().Add(60 * time.Second)
	var d Descriptor
	seen := [2]int{0, 1}
	var childErr error
	childDone := false
	for seen[0] < 2*childMessages || seen[1] < 2*childMessages {
		progress := false
		for s, q := range [2]Queue{RequestSend, ReplySend} {
			ok, err := m.Take(q, &d)
			if !ok && err == nil {
				continue
			}
			progress = true
			i := seen[s]
			seen[s] += 2
			want, wantErr := forged(i, childConfig)
			if err != wantErr || d != want {
				t.Fatalf("%v descriptor %d = %+v, %v; want %+v, %v", q, i, d, err, want, wantErr)
			}
			if err != nil {
				continue
			}
			if d.Class != ClassShort && !allBytes(m.Staging()[d.Offset:d.Offset+d.Length], byte(i)) {
				t.Fatalf("staging bytes of descriptor %d are not %#x", i, byte(i))
			}
			rq := map[Queue]Queue{RequestSend: RequestReceive, ReplySend: ReplyReceive}[q]
			for err := m.Put(rq, &d); err != nil; err = m.Put(rq, &d) {
				if !errors.Is(err, ErrQueueFull) || time.Now().After(deadline) {
					t.Fatalf("put %d: %v", i, err)
				}
				runtime.Gosched()
			}
		}
		if progress {
			continue
		}
		if childDone {
			t.Fatalf("child exited (%v) with the engine at %v:\n%s", childErr, seen, out.String())
		}
		select {
		case childErr = <-exited:
			childDone = true // drain what it left, then complain
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			t.Fatalf("timed out with the engine at %v:\n%s", seen, out.String())
		}
		runtime.Gosched()
	}
	if !childDone {
		childErr = <-exited
	}
	if childErr != nil || !strings.Contains(out.String(), "--- PASS: TestEndpointChild") {
		t.Fatalf("child: %v\n%s", childErr, out.String())
	}
	st := m.Stats()
	want := Stats{Taken: 2 * childMessages * 4 / 10, Put: 2 * childMessages * 4 / 10}
	for _, r := range []Refusal{RefusedRange, RefusedRange, RefusedDestination, RefusedClass, RefusedLength, RefusedArgs} {
		want.Refused[r] += 2 * childMessages / 10
	}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

// TestEndpointChild is the application of TestEndpointProcesses; run
// directly, without childEnv, it has nothing to do.
func TestEndpointChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		return
	}
	const fd = 3
	if err := unix.Ftruncate(fd, 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("the application could truncate its endpoint: %v", err)
	}
	v, err := Map(fd)
	unix.Close(fd) // the mapping outlives the descriptor
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Config() != childConfig {
		t.Fatalf("header gives %+v, want %+v", v.Config(), childConfig)
	}
	if err := runApplication(v, childConfig, childMessages, time.Now().Add(50*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestEndpointQueued: Queued counts the descriptors waiting in each queue,
// from the engine's side, and a corrupt index of the application's counts
// as a full ring, never more.
func TestEndpointQueued(t *testing.T) {
	m, v := newTestEndpoint(t, Config{QueueEntries: 8})
	d := Descriptor{Class: ClassShort}
	for range 3 {
		if err := v.Send(RequestSend, &d); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Send(ReplySend, &d); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.Take(RequestSend, &d); !ok || err != nil {
		t.Fatalf("Take = %v, %v", ok, err)
	}
	for range 5 {
		if err := m.Put(ReplyReceive, &d); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := v.Receive(ReplyReceive, &d); !ok || err != nil {
		t.Fatalf("Receive = %v, %v", ok, err)
	}
	want := [numQueues]uint32{RequestSend: 2, ReplySend: 1, ReplyReceive: 4}
	for q := range numQueues {
		if got := m.Queued(q); got != want[q] {
			t.Errorf("Queued(%v) = %d, want %d", q, got, want[q])
		}
	}
	ringIndex(v.mem, v.l, RequestSend, true).Store(1000)
	ringIndex(v.mem, v.l, ReplyReceive, false).Store(0x8000_0000)
	if s, r := m.Queued(RequestSend), m.Queued(ReplyReceive); s != 8 || r != 8 {
		t.Errorf("Queued with corrupt indices: %d and %d, want the ring's size, 8", s, r)
	}
}
