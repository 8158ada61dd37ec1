package nicfw

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Tests of the engine's medium and bulk messages, of closing endpoints and
// of its side of blocking wait, over memlink pairs (engine_test.go's
// helpers).

// pattern returns n bytes that differ from those of another seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// receiveData takes the next descriptor of receive queue q of v with Peek,
// copies its bytes (Data) and releases it; ok false when the queue is
// empty.
func receiveData(t *testing.T, v *endpoint.View, q endpoint.Queue) (d endpoint.Descriptor, data []byte, ok bool) {
	t.Helper()
	ok, err := v.Peek(q, &d)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return d, nil, false
	}
	b, err := v.Data(&d)
	if err != nil {
		t.Fatalf("Data(%+v): %v", d, err)
	}
	data = bytes.Clone(b)
	if err := v.Release(q); err != nil {
		t.Fatal(err)
	}
	return d, data, true
}

type received struct {
	d    endpoint.Descriptor
	data []byte
}

// collect appends what receive queue q of v holds to *into.
func collect(t *testing.T, v *endpoint.View, q endpoint.Queue, into *[]received) {
	t.Helper()
	for {
		d, data, ok := receiveData(t, v, q)
		if !ok {
			return
		}
		*into = append(*into, received{d, data})
	}
}

func medium(dest, handler uint32, offset, length int, args ...uint64) endpoint.Descriptor {
	d := endpoint.Descriptor{Class: endpoint.ClassMedium, NArgs: uint8(len(args)), Dest: dest, Handler: handler, Offset: uint32(offset), Length: uint32(length)}
	copy(d.Args[:], args)
	return d
}

func bulk(dest, handler uint32, offset, remote, length int, args ...uint64) endpoint.Descriptor {
	d := endpoint.Descriptor{Class: endpoint.ClassBulk, NArgs: uint8(len(args)), Dest: dest, Handler: handler,
		Offset: uint32(offset), RemoteOffset: uint32(remote), Length: uint32(length)}
	copy(d.Args[:], args)
	return d
}

// maxMediumFits returns the largest medium message with n arguments that
// fits in e's transport.
func maxMediumFits(e *Engine, nargs int) int {
	return min(endpoint.MaxMedium, e.MaxPayload()-msgHeaderLen-8*nargs-msgExtLen)
}

// Medium messages between two hosts and to the sender itself, requests and
// replies, of sizes up to MaxMedium (or what the transport carries): the
// bytes arrive in the receive area, the arguments with them, in order; the
// receiver's slot stays its own until it releases the entry; and the
// engine copies a message's bytes when it takes it, so the sender may
// reuse its staging area at once.
func TestEngineMedium(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{QueueEntries: 4})
	top := maxMediumFits(n.a.eng, 3)
	sizes := []int{1, 7, 100, 1500, 4096, top}
	t.Logf("MaxPayload %d: medium messages of up to %d bytes with 3 arguments", n.a.eng.MaxPayload(), top)
	slot := func(i int) int { return i % 7 * endpoint.MaxMedium }
	for i, size := range sizes {
		copy(a1.Staging()[slot(i):], pattern(size, byte(i)))
		mustSend(t, a1, endpoint.RequestSend, medium(1, uint32(i), slot(i), size, uint64(i), 2, 3))
		if i == 0 {
			// The engine has the bytes once it has taken the message.
			if _, err := n.a.eng.Poll(); err != nil {
				t.Fatal(err)
			}
			copy(a1.Staging()[slot(i):], "overwritten")
		}
	}
	// B1's queue holds 4: the fifth and sixth wait (NACK), and the slot of
	// the head, peeked and not released, is not touched meanwhile.
	for range 100 {
		if n.poll(t) == 0 {
			n.clk.Advance(engStep)
		}
	}
	if n.b.eng.Stats().QueueFull == 0 {
		t.Fatal("B1's receive queue of 4 refused nothing")
	}
	var head endpoint.Descriptor
	if ok, err := b1.Peek(endpoint.RequestReceive, &head); !ok || err != nil {
		t.Fatal(ok, err)
	}
	headData, _ := b1.Data(&head)
	for range 100 {
		if n.poll(t) == 0 {
			n.clk.Advance(engStep)
		}
	}
	if !bytes.Equal(headData, pattern(1, 0)) {
		t.Fatalf("the head's bytes changed while it was held: %x", headData)
	}
	var got []received
	n.run(t, 10000, func() bool {
		collect(t, b1, endpoint.RequestReceive, &got)
		return len(got) == len(sizes)
	})
	for i, r := range got {
		want := medium(0, uint32(i), int(r.d.Offset), sizes[i], uint64(i), 2, 3)
		want.Tag = tagRed
		want.Incarnation = 1 // the first incarnation of the sending host
		if r.d != want || !bytes.Equal(r.data, pattern(sizes[i], byte(i))) {
			t.Fatalf("message %d: %+v with %d bytes, want %+v with %d", i, r.d, len(r.data), want, sizes[i])
		}
	}

	// B1 replies with the bytes reversed; A1 sends one to itself.
	for i, r := range got {
		rev := bytes.Clone(r.data)
		for j, k := 0, len(rev)-1; j < k; j, k = j+1, k-1 {
			rev[j], rev[k] = rev[k], rev[j]
		}
		// B1's queues hold 4: wait until the engine has taken the reply
		// that used this staging slot before.
		d := medium(r.d.Dest, 100+uint32(i), slot(i), len(rev))
		n.run(t, 1000, func() bool {
			_, taken := b1.Progress(endpoint.ReplySend)
			return int(taken) >= i-3
		})
		copy(b1.Staging()[slot(i):], rev)
		mustSend(t, b1, endpoint.ReplySend, d)
	}
	copy(a1.Staging()[slot(6):], "to myself")
	mustSend(t, a1, endpoint.RequestSend, medium(0, 50, slot(6), len("to myself"), 42))
	var replies, self []received
	n.run(t, 10000, func() bool {
		collect(t, a1, endpoint.ReplyReceive, &replies)
		collect(t, a1, endpoint.RequestReceive, &self)
		return len(replies) == len(sizes) && len(self) == 1
	})
	for i, r := range replies {
		if r.d.Class != endpoint.ClassMedium || r.d.Handler != 100+uint32(i) || r.d.Dest != 1 || len(r.data) != sizes[i] ||
			r.data[0] != pattern(sizes[i], byte(i))[sizes[i]-1] {
			t.Fatalf("reply %d: %+v with %d bytes", i, r.d, len(r.data))
		}
	}
	if s := self[0]; string(s.data) != "to myself" || s.d.Args[0] != 42 || s.d.Dest != 0 {
		t.Errorf("to itself: %+v %q", s.d, s.data)
	}
	if sa := n.a.eng.Stats(); sa.Returned != 0 || sa.Dropped != 0 {
		t.Errorf("A stats %+v", sa)
	}
}

// A medium message larger than the transport's payload, and a bulk
// message whose header leaves no room for data, come back with
// ReasonTooLarge; the medium one with its bytes.
func TestEngineTooLarge(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, _, _, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	n.a.eng.maxPL = msgHeaderLen + 8*endpoint.MaxShortArgs + msgExtLen // room for a bulk chunk without arguments only
	copy(a1.Staging()[10:], pattern(2000, 9))
	mustSend(t, a1, endpoint.RequestSend, medium(1, 1, 10, 2000))
	mustSend(t, a1, endpoint.RequestSend, bulk(1, 2, 10, 0, 100, 1, 2, 3, 4, 5, 6, 7, 8))
	mustSend(t, a1, endpoint.RequestSend, short(1, 3, 1, 2, 3, 4, 5, 6, 7, 8)) // a short message always fits
	var ret []received
	n.run(t, 1000, func() bool {
		collect(t, a1, endpoint.ReplyReceive, &ret)
		return len(ret) == 2
	})
	for i, r := range ret {
		reason, _, ok := r.d.ReturnInfo()
		if !ok || reason != endpoint.ReasonTooLarge || r.d.Handler != uint32(i+1) {
			t.Errorf("returned %d: %+v, %v", i, r.d, reason)
		}
	}
	if !bytes.Equal(ret[0].data, pattern(2000, 9)) {
		t.Errorf("the returned medium message carries %d bytes, not its own", len(ret[0].data))
	}
	if r := ret[1].d; r.Offset != 10 || r.Length != 100 || r.RemoteOffset != 0 || r.Class != endpoint.ClassBulk|endpoint.ClassReturned {
		t.Errorf("the returned bulk message: %+v", r)
	}
}

// Bulk messages of several chunks, to another host and to the sender
// itself, with and without faults, one chunk in flight at a time and
// several: the data lands at RemoteOffset in the receiver's staging area
// and one descriptor announces it, after which a short message sent
// behind it arrives; two bulk messages sent back to back both arrive whole.
func TestEngineBulk(t *testing.T) {
	for _, window := range []int{1, 8} {
		for _, faults := range []memlink.Options{{}, {Loss: 0.1, Duplicate: 0.02, Reorder: 0.05}} {
			t.Run(fmt.Sprintf("window=%d/loss=%v", window, faults.Loss), func(t *testing.T) {
				faults.Seed = 5
				testEngineBulk(t, newEngNet(t, faults, EngineConfig{Window: window}), window, faults.Loss > 0)
			})
		}
	}
}

// testEngineBulk is TestEngineBulk's body on n, whose engines have window;
// lossy: n's link loses frames.
func testEngineBulk(t *testing.T, n *engNet, window int, lossy bool) {
	cfg := endpoint.Config{StagingSize: 256 << 10}
	a1, _, b1, _ := twoNets(t, n, cfg, cfg)
	const length, from, remote, self, second = 100_000, 1000, 150_000, 120_000, 20_000
	data := pattern(length, 0x5a)
	copy(a1.Staging()[from:], data)
	mustSend(t, a1, endpoint.RequestSend, bulk(1, 77, from, remote, length, 1, 2))
	mustSend(t, a1, endpoint.RequestSend, short(1, 78))
	mustSend(t, a1, endpoint.RequestSend, bulk(0, 79, from, self, length)) // into its own staging area
	mustSend(t, a1, endpoint.RequestSend, bulk(1, 80, from, 0, second))
	var atB, atA []received
	most := 0 // the most chunks of A1 in flight at once
	n.run(t, 1_000_000, func() bool {
		if s := n.a.eng.eps[1]; s.chunksOut > most {
			most = s.chunksOut
		}
		collect(t, b1, endpoint.RequestReceive, &atB)
		collect(t, a1, endpoint.RequestReceive, &atA)
		return len(atB) == 3 && len(atA) == 1
	})
	// With a window of one the messages arrive in order. With a larger
	// one they are in order per channel only: the short message and the
	// second bulk message leave once the first's chunks have all left, and
	// overtake it when one of its chunks is lost and sent again.
	if window > 1 {
		slices.SortFunc(atB, func(x, y received) int { return int(x.d.Handler) - int(y.d.Handler) })
	}
	want := bulk(0, 77, remote, 0, length, 1, 2)
	want.Tag = tagRed
	want.Incarnation = 1 // the first incarnation of the sending host
	if atB[0].d != want || !bytes.Equal(atB[0].data, data) {
		t.Errorf("B1 received %+v with %d bytes, want %+v", atB[0].d, len(atB[0].data), want)
	}
	if atB[1].d.Handler != 78 || atB[1].d.Class != endpoint.ClassShort {
		t.Errorf("then %+v, want the short message", atB[1].d)
	}
	if d := atB[2].d; d.Handler != 80 || d.Length != second || !bytes.Equal(atB[2].data, data[:second]) {
		t.Errorf("then %+v, want the second bulk message", d)
	}
	if !bytes.Equal(b1.Staging()[remote:remote+length], data) {
		t.Error("B1's staging area does not hold the first message")
	}
	if d := atA[0].d; d.Class != endpoint.ClassBulk || d.Handler != 79 || d.Offset != self || d.Length != length || !bytes.Equal(atA[0].data, data) {
		t.Errorf("A1 to itself: %+v", d)
	}
	room := int(n.a.eng.bulkRoom(n.a.eng.MaxPayload(), 2))
	chunks := (length+room-1)/room + (second+int(n.a.eng.bulkRoom(n.a.eng.MaxPayload(), 0))-1)/int(n.a.eng.bulkRoom(n.a.eng.MaxPayload(), 0))
	if sb := n.b.eng.Stats(); sb.Chunks != uint64(chunks-2) || sb.Delivered != 3 {
		t.Errorf("B stats %+v, want %d chunks before the last ones", sb, chunks-2)
	}
	switch {
	case most > window:
		t.Errorf("%d chunks in flight at once, window %d", most, window)
	case window > 1 && !lossy && most < 2:
		t.Errorf("at most %d chunk in flight at once, window %d", most, window)
	}
	t.Logf("%d+%d bytes in %d chunks, at most %d in flight; transport A %+v", length, second, chunks, most, n.a.eng.TransportStats())
}

// A bulk message that cannot complete comes back once, whole, with its
// reason: its region is outside the receiver's staging area; its receiver
// is closed while it is under way; its receiver is closed and replaced
// while it is under way. The sender's next message goes through.
func TestEngineBulkReturned(t *testing.T) {
	for _, window := range []int{1, 8} {
		t.Run(fmt.Sprintf("window=%d", window), func(t *testing.T) { testEngineBulkReturned(t, window) })
	}
}

func testEngineBulkReturned(t *testing.T, window int) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: window})
	cfg := endpoint.Config{StagingSize: 256 << 10}
	a1, _, _, _ := twoNets(t, n, cfg, cfg)
	const length = 200_000 // more chunks than a window holds
	room := int(n.a.eng.bulkRoom(n.a.eng.MaxPayload(), 0))
	if length/room < 4 {
		t.Fatalf("a chunk carries %d bytes: the test wants a message of at least 4 chunks", room)
	}
	copy(a1.Staging(), pattern(length, 1))
	// returnedOnce checks that d comes back once with reason want, then
	// that the next message from A1 reaches B1, reopened first by reopen
	// if it is not nil.
	returnedOnce := func(t *testing.T, want endpoint.Reason, d endpoint.Descriptor, reopen func()) {
		t.Helper()
		var ret []received
		n.run(t, 100000, func() bool {
			collect(t, a1, endpoint.ReplyReceive, &ret)
			return len(ret) > 0
		})
		for range 100 { // nothing more comes
			if n.poll(t) == 0 {
				n.clk.Advance(engStep)
			}
		}
		collect(t, a1, endpoint.ReplyReceive, &ret)
		if reopen != nil {
			reopen()
		}
		if len(ret) != 1 {
			t.Fatalf("returned %d times", len(ret))
		}
		r := ret[0].d
		reason, from, ok := r.ReturnInfo()
		r.Class &^= endpoint.ClassReturned
		r.Tag = 0
		if r.Incarnation != 1 { // returned by B, in its first incarnation
			t.Errorf("returned with incarnation %d", r.Incarnation)
		}
		r.Incarnation = 0
		if !ok || reason != want || from != endpoint.RequestSend || r != d {
			t.Errorf("returned %+v (%v), want %+v (%v)", r, reason, d, want)
		}
		// The next message goes through.
		b1 := n.b.views[1]
		mustSend(t, a1, endpoint.RequestSend, short(1, 5))
		var got []endpoint.Descriptor
		n.run(t, 10000, func() bool {
			drain(t, b1, endpoint.RequestReceive, &got)
			return len(got) > 0
		})
		if len(got) != 1 || got[0].Handler != 5 {
			t.Errorf("B1 then received %+v", got)
		}
	}

	t.Run("range", func(t *testing.T) {
		d := bulk(1, 1, 0, 256<<10-length+1, length, 9)
		mustSend(t, a1, endpoint.RequestSend, d)
		returnedOnce(t, endpoint.ReasonRange, d, nil)
		// B returned the first chunk (and dropped any that A sent before
		// the return reached it), which made A stop.
		if st := n.b.eng.Stats(); st.Chunks != 0 || st.ReturnsSent != 1 {
			t.Errorf("B stats %+v", st)
		}
		if st := n.a.eng.Stats(); st.Sent >= uint64(length/room+1) {
			t.Errorf("A sent every chunk of a returned message: %+v", st)
		}
	})
	// mid sends d and runs the engines until B has stored two of its
	// chunks, then calls between.
	mid := func(t *testing.T, d endpoint.Descriptor, between func()) {
		before := n.b.eng.Stats().Chunks
		mustSend(t, a1, endpoint.RequestSend, d)
		n.run(t, 10000, func() bool { return n.b.eng.Stats().Chunks >= before+2 })
		between()
	}
	t.Run("closed", func(t *testing.T) {
		d := bulk(1, 2, 0, 0, length)
		mid(t, d, func() {
			if err := n.b.eng.CloseEndpoint(1); err != nil {
				t.Fatal(err)
			}
		})
		returnedOnce(t, endpoint.ReasonClosed, d, func() {
			n.b.endpoint(t, 1, cfg, VNet{Tag: tagRed, Table: []Name{{hostA, 1}, {hostB, 1}}})
		})
	})
	t.Run("replaced", func(t *testing.T) {
		d := bulk(1, 3, 0, 0, length)
		mid(t, d, func() {
			if err := n.b.eng.CloseEndpoint(1); err != nil {
				t.Fatal(err)
			}
			n.b.endpoint(t, 1, cfg, VNet{Tag: tagRed, Table: []Name{{hostA, 1}, {hostB, 1}}})
		})
		returnedOnce(t, endpoint.ReasonIncomplete, d, nil)
	})
	if st := n.a.eng.Stats(); st.Returned != 3 {
		t.Errorf("A stats %+v, want 3 returned", st)
	}
}

// Closing endpoints: at once when idle, after its message in flight
// otherwise; what arrives afterwards is returned as "endpoint closed",
// locally and from another host; the id can be reused.
func TestEngineCloseEndpoint(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, a2, b1, b2 := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	a3 := n.a.endpoint(t, 3, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	ea, eb := n.a.eng, n.b.eng
	if ea.Endpoints() != 3 || eb.Endpoints() != 2 {
		t.Fatalf("endpoints %d and %d", ea.Endpoints(), eb.Endpoints())
	}
	// B1 and A1 are idle: closed at once.
	mustSend(t, a1, endpoint.RequestSend, short(1, 1))
	n.run(t, 1000, func() bool { return eb.Stats().Delivered == 1 })
	for range 10 {
		n.poll(t) // the acknowledgement
	}
	memB1, memA1 := eb.eps[1].mem, ea.eps[1].mem
	if err := eb.CloseEndpoint(1); err != nil {
		t.Fatal(err)
	}
	if err := ea.CloseEndpoint(1); err != nil {
		t.Fatal(err)
	}
	if memB1.FD() != -1 || memA1.FD() != -1 || eb.Endpoints() != 1 || ea.Endpoints() != 2 || eb.sched.Remove(1) {
		t.Fatalf("after closing: fds %d %d, endpoints %d %d", memB1.FD(), memA1.FD(), ea.Endpoints(), eb.Endpoints())
	}
	if _, ok := eb.res.Resident(1); ok {
		t.Error("closed B1 is still resident")
	}
	for _, err := range []error{eb.CloseEndpoint(1), eb.CloseEndpoint(77)} {
		if !errors.Is(err, ErrNoEndpoint) {
			t.Errorf("closing a closed or unknown endpoint: %v", err)
		}
	}
	// A3 sends to closed A1, locally.
	mustSend(t, a3, endpoint.RequestSend, short(0, 2, 33))
	var ret []endpoint.Descriptor
	n.run(t, 1000, func() bool {
		drain(t, a3, endpoint.ReplyReceive, &ret)
		return len(ret) == 1
	})
	if reason, _, _ := ret[0].ReturnInfo(); reason != endpoint.ReasonClosed || ret[0].Args[0] != 33 || reason.String() != "endpoint closed" {
		t.Errorf("A3's message to closed A1: %+v (%v)", ret[0], reason)
	}

	// A2 has a message in flight (B is not polled, so no ACK) and more
	// queued: its memory stays open until the ACK, the rest is dropped.
	for i := range uint64(5) {
		mustSend(t, a2, endpoint.RequestSend, short(1, 3, i))
	}
	for range 3 {
		if _, err := ea.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	memA2 := ea.eps[2].mem
	if ea.eps[2].flying != 1 {
		t.Fatalf("A2 has %d messages in flight, want 1", ea.eps[2].flying)
	}
	if err := ea.CloseEndpoint(2); err != nil {
		t.Fatal(err)
	}
	if memA2.FD() == -1 || ea.res.Outstanding(2) != 1 {
		t.Fatal("A2's memory closed, or unpinned, with its message in flight")
	}
	var atB2 []endpoint.Descriptor
	for range 50 {
		if n.poll(t) == 0 {
			n.clk.Advance(engStep)
		}
		drain(t, b2, endpoint.RequestReceive, &atB2)
	}
	if memA2.FD() != -1 || ea.pinned != 0 || len(atB2) != 1 || atB2[0].Args[0] != 0 {
		t.Fatalf("after the ACK: fd %d, pinned %d; B2 received %+v", memA2.FD(), ea.pinned, atB2)
	}
	if _, ok := ea.res.Resident(2); ok {
		t.Error("closed A2 is still resident")
	}
	// B2 answers A2 (closed) remotely: returned to B2 as closed.
	mustSend(t, b2, endpoint.RequestSend, short(0, 4, 44))
	ret = ret[:0]
	n.run(t, 1000, func() bool {
		drain(t, b2, endpoint.ReplyReceive, &ret)
		return len(ret) == 1
	})
	if reason, _, _ := ret[0].ReturnInfo(); reason != endpoint.ReasonClosed || ret[0].Args[0] != 44 {
		t.Errorf("B2's message to closed A2: %+v (%v)", ret[0], reason)
	}

	// The ids are reused: a new A1 sends to a new B1.
	b1 = n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	a1 = n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}, {hostB, 1}}})
	mustSend(t, a1, endpoint.RequestSend, short(1, 6, 66))
	var got []endpoint.Descriptor
	n.run(t, 1000, func() bool {
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 1
	})
	if got[0].Args[0] != 66 || ea.Endpoints() != 2 || eb.Endpoints() != 2 {
		t.Errorf("the reopened B1 received %+v; endpoints %d, %d", got, ea.Endpoints(), eb.Endpoints())
	}
}

// The engine's side of blocking wait: a Put into an armed queue notifies
// once per arming; an idle engine is kicked by Send.
func TestEngineNotify(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	notified := 0
	n.b.eng.eps[1].mem.SetNotify(func() { notified++ })
	if b1.Arm(endpoint.EventRequest) != 0 {
		t.Fatal("B1 ready with nothing sent")
	}
	for i := range uint64(3) {
		mustSend(t, a1, endpoint.RequestSend, short(1, 1, i))
	}
	var got []endpoint.Descriptor
	n.run(t, 1000, func() bool { return n.b.eng.Stats().Delivered == 3 })
	if notified != 1 || b1.Arm(endpoint.EventRequest) != endpoint.EventRequest {
		t.Fatalf("%d notifications for one arming, or B1 not ready", notified)
	}
	drain(t, b1, endpoint.RequestReceive, &got)
	if b1.Arm(endpoint.EventRequest|endpoint.EventReply) != 0 {
		t.Fatal("B1 ready after draining")
	}
	mustSend(t, a1, endpoint.RequestSend, short(1, 1, 3))
	n.run(t, 1000, func() bool { return notified == 2 })

	kicks := 0
	a1.SetKick(func() { kicks++ })
	n.a.eng.SetIdle(true)
	mustSend(t, a1, endpoint.RequestSend, short(1, 1, 4))
	n.a.eng.SetIdle(false)
	mustSend(t, a1, endpoint.RequestSend, short(1, 1, 5))
	if kicks != 1 {
		t.Errorf("%d kicks, want 1", kicks)
	}
	n.run(t, 1000, func() bool { return !n.a.eng.Busy() && n.b.eng.Stats().Delivered == 6 })
	if n.a.eng.Busy() {
		t.Error("A busy with nothing to do")
	}
}

// The short-message path allocates nothing: a request from A1 to B1,
// delivered and acknowledged, and the application's side.
func TestEngineShortAllocs(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	ea, eb := n.a.eng, n.b.eng
	d := short(1, 1, 1, 2, 3, 4, 5, 6, 7, 8)
	var got endpoint.Descriptor
	failed := ""
	round := func() {
		if err := a1.Send(endpoint.RequestSend, &d); err != nil {
			failed = err.Error()
			return
		}
		delivered := false
		for i := 0; !delivered || ea.inFlight() > 0; i++ {
			if i == 1000 {
				failed = "no delivery"
				return
			}
			wa, _ := ea.Poll()
			wb, _ := eb.Poll()
			if ok, _ := b1.Receive(endpoint.RequestReceive, &got); ok {
				delivered = true
			}
			if wa+wb == 0 {
				n.clk.Advance(engStep)
			}
		}
	}
	for range 100 {
		round()
	}
	allocs := testing.AllocsPerRun(1000, round)
	if failed != "" {
		t.Fatal(failed)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per short message", allocs)
	}
}

// The receiver's side of bulk messages, chunk by chunk through accept: a
// message is returned once and its later chunks are dropped; chunks are
// stored in any order, the first to arrive beginning the record, and the
// one that completes the message puts one descriptor; a message that
// never completes puts none.
func TestEngineBulkReceiver(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	_, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	e := n.b.eng
	staging := len(b1.Staging())
	chunk := func(id, remote, length, at int, data string) []byte {
		m := msg{kind: endpoint.RequestSend, class: endpoint.ClassBulk, dst: 1, src: 1, handler: 9, tag: tagRed,
			length: uint32(length), remote: uint32(remote), id: uint32(id), chunk: uint32(at), data: []byte(data)}
		b := make([]byte, m.size())
		encodeMsg(b, &m)
		return b
	}
	steps := []struct {
		p      []byte
		reason endpoint.Reason
	}{
		{chunk(1, staging-5, 10, 0, "01234"), endpoint.ReasonRange},
		{chunk(1, staging-5, 10, 5, "56789"), 0}, // dropped: its message was returned
		{chunk(2, 300, 10, 0, "vwxyz"), 0},       // message 2 never completes
		{chunk(3, 100, 12, 5, "fghij"), 0},       // message 3 begins with a later chunk
		{chunk(3, 100, 12, 10, "kl"), 0},
		{chunk(3, 100, 12, 0, "abcde"), 0}, // complete: a descriptor
		{chunk(4, 200, 15, 0, "ABCDE"), 0},
		{chunk(4, 200, 15, 10, "KLMNO"), 0},
		{chunk(4, 200, 15, 5, "FGHIJ"), 0}, // the last to arrive: a descriptor
	}
	for i, s := range steps {
		ok, reason := e.accept(hostA, s.p, true, false)
		if !ok || reason != s.reason {
			t.Errorf("step %d: accept = %v, %v; want true, %v", i, ok, reason, s.reason)
		}
	}
	// With no room for a return, the chunk is refused (NACK) and nothing
	// is recorded: offered again with room, it is returned.
	if ok, reason := e.accept(hostA, chunk(4, staging, 1, 0, "x"), false, false); ok || reason != 0 {
		t.Errorf("a chunk to return with the return queue full: %v, %v", ok, reason)
	}
	if ok, reason := e.accept(hostA, chunk(4, staging, 1, 0, "x"), true, false); !ok || reason != endpoint.ReasonRange {
		t.Errorf("offered again: %v, %v", ok, reason)
	}
	var got []received
	collect(t, b1, endpoint.RequestReceive, &got)
	if len(got) != 2 || string(got[0].data) != "abcdefghijkl" || got[0].d.Offset != 100 ||
		string(got[1].data) != "ABCDEFGHIJKLMNO" || got[1].d.Offset != 200 || got[1].d.Handler != 9 {
		t.Fatalf("received %+v", got)
	}
	if string(b1.Staging()[300:305]) != "vwxyz" {
		t.Errorf("the first chunk of the incomplete message was not stored")
	}
	if st := e.Stats(); st.ChunksDropped != 1 || st.Chunks != 5 || st.Delivered != 2 || st.ReturnsFull != 1 {
		t.Errorf("stats %+v", st)
	}
}

// An id closed with a message in flight, reused at once and closed again:
// the old endpoint's message finishes, both memories are closed, and the
// id's residency frame is freed once nothing pins it.
func TestEngineCloseReused(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	ea := n.a.eng
	mustSend(t, a1, endpoint.RequestSend, short(1, 1, 7))
	if _, err := ea.Poll(); err != nil { // in flight: B is not polled
		t.Fatal(err)
	}
	old := ea.eps[1]
	if old.flying != 1 {
		t.Fatalf("%d messages in flight, want 1", old.flying)
	}
	if err := ea.CloseEndpoint(1); err != nil {
		t.Fatal(err)
	}
	again := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	if len(ea.closing) != 1 || ea.Endpoints() != 2 {
		t.Fatalf("closing %d, endpoints %d", len(ea.closing), ea.Endpoints())
	}
	newMem := ea.eps[1].mem
	if err := ea.CloseEndpoint(1); err != nil { // its frame is pinned by the old one's message
		t.Fatal(err)
	}
	if newMem.FD() != -1 || old.mem.FD() == -1 {
		t.Fatal("the new memory is open, or the old one closed, with the old message in flight")
	}
	var got []endpoint.Descriptor
	n.run(t, 1000, func() bool {
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 1 && len(ea.closing) == 0
	})
	if old.mem.FD() != -1 || ea.pinned != 0 || ea.res.Outstanding(1) != 0 || got[0].Args[0] != 7 {
		t.Errorf("after the ACK: fd %d, pinned %d, received %+v", old.mem.FD(), ea.pinned, got)
	}
	var d endpoint.Descriptor
	if ok, _ := again.Receive(endpoint.ReplyReceive, &d); ok {
		t.Errorf("the reused endpoint received %+v", d)
	}
}

// A bulk message with several chunks in flight when its receiver goes
// silent: every chunk is given up on, the message comes back once, and
// nothing of it stays pinned or recorded. Then, with chunks in flight
// again, the sending endpoint is closed: its memory goes when the last
// of them lands.
func TestEngineBulkChunksInFlight(t *testing.T) {
	const window, length = 8, 200_000
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: window})
	cfg := endpoint.Config{StagingSize: 256 << 10}
	a1, _, _, _ := twoNets(t, n, cfg, cfg)
	ea := n.a.eng
	pollA := func() {
		t.Helper()
		if _, err := ea.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	// inFlight sends d and polls until a window of its chunks is out,
	// B answering only the first.
	inFlight := func(d endpoint.Descriptor) {
		t.Helper()
		mustSend(t, a1, endpoint.RequestSend, d)
		n.run(t, 1000, func() bool { s := ea.eps[1]; return s.d.Handler == d.Handler && s.started })
		for range 100 {
			if ea.eps[1].chunksOut == window {
				return
			}
			pollA()
		}
		s := ea.eps[1]
		t.Fatalf("%d chunks in flight, want %d (state %v, sent %d, flying %d, stats %+v, tr %+v)", s.chunksOut, window, s.state, s.sent, s.flying, ea.Stats(), ea.TransportStats())
	}
	d := bulk(1, 4, 0, 0, length)
	inFlight(d)
	n.clk.Advance(engGiveUp + engStep)
	var ret []endpoint.Descriptor
	for range 100 {
		pollA()
		drain(t, a1, endpoint.ReplyReceive, &ret)
		n.clk.Advance(engStep)
	}
	if len(ret) != 1 {
		t.Fatalf("returned %d times: %+v", len(ret), ret)
	}
	if reason, _, _ := ret[0].ReturnInfo(); reason != endpoint.ReasonUnreachable || ret[0].Handler != 4 || ret[0].Length != length {
		t.Errorf("returned %+v (%v)", ret[0], reason)
	}
	if s := ea.eps[1]; s.state != slotEmpty || s.chunksOut != 0 || s.flying != 0 || ea.pinned != 0 || ea.inFlight() != 0 {
		t.Fatalf("after the return: state %v, chunks %d, flying %d, pinned %d, records %d", s.state, s.chunksOut, s.flying, ea.pinned, ea.inFlight())
	}

	// B is heard again once the mark expires; then A1 closes mid-message.
	n.clk.Advance(engGiveUp)
	inFlight(bulk(1, 5, 0, 0, length))
	mem := ea.eps[1].mem
	if err := ea.CloseEndpoint(1); err != nil {
		t.Fatal(err)
	}
	if mem.FD() == -1 {
		t.Fatal("closed with chunks in flight: its memory went at once")
	}
	n.run(t, 10000, func() bool { return mem.FD() == -1 })
	if ea.pinned != 0 || ea.inFlight() != 0 {
		t.Errorf("after the close: pinned %d, records %d", ea.pinned, ea.inFlight())
	}
	if st := n.b.eng.Stats(); st.Delivered != 0 || st.ChunksDropped != 0 {
		t.Errorf("B stats %+v: delivered a message that never completed", st)
	}
}

// A bulk message whose receiver restarts while its chunks are under way
// (a new engine, a new epoch, on the same link): it comes back once with
// ReasonRestarted, the new incarnation delivers no part of it, and the
// sender's next messages reach the new incarnation.
func TestEngineBulkReceiverRestarts(t *testing.T) {
	const window, length = 8, 200_000
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: window})
	cfg := endpoint.Config{StagingSize: 256 << 10}
	a1, _, _, _ := twoNets(t, n, cfg, cfg)
	copy(a1.Staging(), pattern(length, 3))
	d := bulk(1, 4, 0, 0, length)
	mustSend(t, a1, endpoint.RequestSend, d)
	// A has heard from B (chunks acknowledged), and more are to come.
	n.run(t, 10000, func() bool { return n.a.eng.Stats().Acked >= 2 })
	if s := n.a.eng.eps[1]; s.sent >= length {
		t.Fatalf("all %d bytes sent already", s.sent)
	}

	// B restarts: a new engine on B's link, its endpoint 1 created again.
	eb, b1 := n.restartB(t, window, cfg)

	var ret []received
	for i := 0; len(ret) == 0; i++ {
		if i == 100000 {
			s := n.a.eng.eps[1]
			t.Fatalf("not returned: A %+v %+v; slot %v out %d sent %d epoch %d/%d; B %+v %+v", n.a.eng.Stats(), n.a.eng.TransportStats(),
				s.state, s.chunksOut, s.sent, s.bulkEpoch, s.bulkPeer.Epoch(), eb.Stats(), eb.TransportStats())
		}
		collect(t, a1, endpoint.ReplyReceive, &ret)
		if n.poll(t) == 0 {
			n.clk.Advance(engStep)
		}
	}
	for range 100 { // nothing more comes back
		if n.poll(t) == 0 {
			n.clk.Advance(engStep)
		}
	}
	collect(t, a1, endpoint.ReplyReceive, &ret)
	if len(ret) != 1 {
		t.Fatalf("returned %d times: %+v", len(ret), ret)
	}
	if reason, _, _ := ret[0].d.ReturnInfo(); reason != endpoint.ReasonRestarted || ret[0].d.Handler != 4 {
		t.Errorf("returned %+v (%v), want ReasonRestarted", ret[0].d, reason)
	}
	var got []endpoint.Descriptor
	drain(t, b1, endpoint.RequestReceive, &got)
	if len(got) != 0 || eb.Stats().Delivered != 0 {
		t.Fatalf("the new incarnation delivered %+v (stats %+v)", got, eb.Stats())
	}
	// The next messages, bulk and short, reach it.
	mustSend(t, a1, endpoint.RequestSend, bulk(1, 5, 0, 0, 30_000))
	mustSend(t, a1, endpoint.RequestSend, short(1, 6))
	n.run(t, 100000, func() bool {
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 2
	})
	if got[0].Handler != 5 || got[0].Length != 30_000 || got[1].Handler != 6 {
		t.Errorf("then %+v", got)
	}
}

// A bulk message whose sender learns of its receiver's restart between two
// chunks, with none in flight (so the transport has nothing to return):
// the sender's next chunk would go to the new incarnation, which has none
// of the earlier ones; the message comes back with ReasonRestarted
// instead, and the new incarnation delivers no part of it.
func TestEngineBulkRestartBetweenChunks(t *testing.T) {
	const window, length = 8, 200_000
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: window})
	cfg := endpoint.Config{StagingSize: 256 << 10}
	a1, _, _, _ := twoNets(t, n, cfg, cfg)
	copy(a1.Staging(), pattern(length, 3))
	mustSend(t, a1, endpoint.RequestSend, bulk(1, 4, 0, 0, length))
	poll := func(e *Engine) {
		t.Helper()
		if _, err := e.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	ea := n.a.eng
	poll(ea)      // a window of chunks
	poll(n.b.eng) // stored
	poll(n.b.eng) // acknowledged
	poll(ea)      // the window is full: nothing sent; the acknowledgements come in
	s, peer := ea.eps[1], ea.tr.Peer(hostB)
	old := peer.Epoch()
	if !s.started || s.chunksOut != 0 || s.sent >= length || old == 0 {
		t.Fatalf("started %v, %d chunks in flight, %d bytes sent, epoch %d", s.started, s.chunksOut, s.sent, old)
	}

	// B restarts and sends A a message; A's transport alone takes it in
	// (A's engine sends nothing meanwhile) and learns the new epoch.
	eb, b1 := n.restartB(t, window, cfg)
	mustSend(t, b1, endpoint.RequestSend, short(0, 9))
	for i := 0; peer.Epoch() == old; i++ {
		if i == 1000 {
			t.Fatal("A never learned B's new epoch")
		}
		poll(eb)
		if _, err := ea.tr.Poll(); err != nil {
			t.Fatal(err)
		}
		n.clk.Advance(engStep)
	}
	if s.chunksOut != 0 || s.state != slotPending {
		t.Fatalf("%d chunks in flight, slot %v", s.chunksOut, s.state)
	}

	var ret []received
	n.run(t, 10000, func() bool {
		collect(t, a1, endpoint.ReplyReceive, &ret)
		return len(ret) > 0
	})
	if reason, _, _ := ret[0].d.ReturnInfo(); reason != endpoint.ReasonRestarted || ret[0].d.Handler != 4 {
		t.Errorf("returned %+v (%v), want ReasonRestarted", ret[0].d, reason)
	}
	if st := eb.Stats(); st.Delivered != 0 || st.Chunks != 0 {
		t.Errorf("the new incarnation took chunks of the message: %+v", st)
	}
}

// restartB restarts host B: a new engine (a new epoch) with window on B's
// link, which takes the old one's place in n, and B's endpoint 1 created
// again with cfg, as twoNets made it.
func (n *engNet) restartB(t *testing.T, window int, cfg endpoint.Config) (*Engine, *endpoint.View) {
	t.Helper()
	eb, err := NewEngine(n.b.link, EngineConfig{Host: hostB, Window: window, Transport: transport.Config{
		Clock: n.clk, RetransmitAfter: engStep, GiveUpAfter: engGiveUp}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eb.Close() })
	if err := eb.AddHost(hostA, n.a.link.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	n.b.eng = eb
	return eb, n.b.endpoint(t, 1, cfg, VNet{Tag: tagRed, Table: []Name{{hostA, 1}, {hostB, 1}}})
}
