package ssam

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/xam-project/xam/cells"
)

// forgedCells returns the cells of one forged frame: n cells of the kinds a
// blind forger on the wire can make up for a connection whose circuits it
// sees (testVCI, testVCI+1) without knowing its state:
//
//   - cells of random bytes under a good header, on either circuit, with
//     or without the end-of-message bit;
//   - SSAM single-cell messages of random flow control, handler and data
//     with a good CRC-10: requests, replies, acks and syncs of any
//     sequence number, naming handlers that exist (0..3) or not;
//   - the first cells of AAL5 PDUs that never end (partial PDUs), of zero
//     SDUs (whose first cell reads as a request of sequence number 0 to
//     handler 0 with a good CRC-10) or of random ones, on either circuit;
//   - whole PDUs of random SSAM messages with a good CRC-32 on the bulk
//     circuit.
func forgedCells(rng *rand.Rand, n int) ([]byte, error) {
	var out []byte
	handler := func() uint32 {
		if rng.IntN(2) == 0 {
			return uint32(rng.IntN(4))
		}
		return rng.Uint32()
	}
	random := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	for len(out) < n*cells.CellSize {
		left := n - len(out)/cells.CellSize
		c := cells.Cell(make([]byte, cells.CellSize))
		var err error
		switch rng.IntN(4) {
		case 0: // random bytes under a good header
			random(c)
			err = c.Encode(cells.UNI, cells.Fields{VCI: testVCI + uint16(rng.IntN(2)), PTI: uint8(rng.IntN(2))})
			out = append(out, c...)
		case 1: // a random SSAM message with a good CRC-10
			data := make([]byte, rng.IntN(MaxShort+1))
			random(data)
			err = errors.Join(c.Encode(cells.UNI, cells.Fields{VCI: testVCI, PTI: 1}),
				cells.EncodeSSAM(c.Payload(), uint16(rng.Uint32()), handler(), data))
			out = append(out, c...)
		case 2: // the first cells of a PDU that never ends
			sdu := make([]byte, 500)
			if rng.IntN(2) == 0 {
				random(sdu)
			}
			var cs []byte
			if cs, err = cells.Segment(cells.SAR{VCI: testVCI + uint16(rng.IntN(2))}, sdu); err == nil {
				out = append(out, cs[:min(1+rng.IntN(3), left)*cells.CellSize]...)
			}
		case 3: // a whole random SSAM message as a PDU with a good CRC-32
			sdu := make([]byte, cells.SSAMHeaderSize+MaxShort+1+rng.IntN(100))
			random(sdu)
			binary.BigEndian.PutUint32(sdu[2:], handler())
			binary.BigEndian.PutUint16(sdu[6:], 0)
			var cs []byte
			if cs, err = cells.Segment(cells.SAR{VCI: testVCI + 1}, sdu); len(cs) <= left*cells.CellSize {
				out = append(out, cs...)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// forge sends forged frames onto p's wire, in both directions, each from
// the MAC of the endpoint the receiver is connected to, until stop is
// closed, burst frames at a time; it returns the number of frames sent and
// the first error.
func forge(p *pair, seed uint64, burst int, stop <-chan struct{}) (int, error) {
	rng := rand.New(rand.NewPCG(seed, 0xf0))
	toB := cells.Framer{Dst: p.macB, Src: p.macA}
	toA := cells.Framer{Dst: p.macA, Src: p.macB}
	per := toB.CellsPerFrame()
	frames := 0
	for {
		select {
		case <-stop:
			return frames, nil
		default:
		}
		towardsB := rng.IntN(2) == 0
		f := &toA
		if towardsB {
			f = &toB
		}
		batch := make([][]byte, burst)
		for i := range batch {
			cs, err := forgedCells(rng, 1+rng.IntN(per))
			if err != nil {
				return frames, err
			}
			if batch[i], err = f.Append(nil, cs); err != nil {
				return frames, err
			}
		}
		if err := p.inject(towardsB, batch); err != nil {
			return frames, err
		}
		frames += len(batch)
		runtime.Gosched() // leave the real traffic its share of the processors
	}
}

// TestForgedCells runs real requests, single-cell and bulk, while a forger
// sends random cells, random SSAM messages with good checksums and partial
// AAL5 PDUs from each endpoint's peer's MAC on the connection's circuits:
// every request handler and every reply handler must run exactly once, in
// order, with its own data, and the forgeries must be counted. Before
// forged messages were refused, a forged request carrying the next
// sequence number took the place of the real one: the real request was
// then answered with the forged one's saved answer ("no such handler"),
// and a forged answer could stand for a real one.
func TestForgedCells(t *testing.T) {
	for _, lp := range linkPairs {
		t.Run(lp.name, func(t *testing.T) {
			p := lp.new(t, Config{Timeout: time.Millisecond, MaxMessage: 2000})
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var forged int
			var forgeErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				forged, forgeErr = forge(p, 1, 8, stop)
			}()
			rng := rand.New(rand.NewPCG(5, 6))
			sizes := make([]int, 5000)
			for i := range sizes {
				if rng.IntN(8) == 0 {
					sizes[i] = MaxShort + 1 + rng.IntN(1500)
				} else {
					sizes[i] = rng.IntN(MaxShort + 1)
				}
			}
			func() {
				defer func() { close(stop); wg.Wait() }()
				exchange(t, p, len(sizes), func(i int) int {
					if i >= len(sizes) { // a handler ran too often
						return 0
					}
					return sizes[i]
				})
			}()
			if forgeErr != nil {
				t.Fatalf("forging: %v", forgeErr)
			}
			sa, sb := p.a.Stats(), p.b.Stats()
			t.Logf("%d forged frames; requester %+v; responder %+v", forged, sa, sb)
			if sa.Returned != 0 || sb.HandlerErrors != 0 || sa.HandlerErrors != 0 {
				t.Errorf("forgeries ran as messages: requester %+v; responder %+v", sa, sb)
			}
			if sa.Forged+sb.Forged == 0 {
				t.Errorf("no forgery counted: requester %+v; responder %+v", sa, sb)
			}
		})
	}
}

// TestForgedPartialPDU: the first cells of a PDU that never ends, sent on a
// bulk circuit from the peer's MAC just before a real bulk message, cost
// the real message nothing: it is delivered the first time, with no
// retransmission (the timeout is an hour), in both directions. Before, the
// forged cells ran together with the real PDU's and both were dropped for
// their length (an ErrLength from reassembly), so every such cell cost a
// real PDU its delivery, and a stream of them every real PDU.
func TestForgedPartialPDU(t *testing.T) {
	for _, lp := range linkPairs {
		t.Run(lp.name, func(t *testing.T) {
			p := lp.new(t, Config{Timeout: time.Hour})
			partial := func(towardsB bool) {
				t.Helper()
				f := cells.Framer{Dst: p.macA, Src: p.macB}
				if towardsB {
					f = cells.Framer{Dst: p.macB, Src: p.macA}
				}
				cs, err := cells.Segment(cells.SAR{VCI: testVCI + 1}, make([]byte, 500))
				if err != nil {
					t.Fatal(err)
				}
				frame, err := f.Append(nil, cs[:3*cells.CellSize])
				if err != nil {
					t.Fatal(err)
				}
				if err := p.inject(towardsB, [][]byte{frame}); err != nil {
					t.Fatal(err)
				}
			}
			request := bytes.Repeat([]byte("request "), 100)
			reply := bytes.Repeat([]byte("reply "), 100)
			var gotReq, gotReply []byte
			var replyH HandlerID
			reqH := p.b.Register(func(tk *Token, data []byte) {
				gotReq = bytes.Clone(data)
				partial(false) // just before the reply
				if err := tk.Reply(replyH, reply); err != nil {
					t.Error(err)
				}
			})
			replyH = p.a.Register(func(tk *Token, data []byte) { gotReply = bytes.Clone(data) })
			if err := p.a.Sync(0); err != nil {
				t.Fatal(err)
			}
			pollBoth(t, p, func() bool { return p.a.Synced(0) })
			partial(true) // just before the request
			if err := p.a.Request(0, reqH, request); err != nil {
				t.Fatal(err)
			}
			pollBoth(t, p, func() bool { return gotReply != nil })
			if !bytes.Equal(gotReq, request) || !bytes.Equal(gotReply, reply) {
				t.Errorf("request %.20q..., reply %.20q...", gotReq, gotReply)
			}
			if sa, sb := p.a.Stats(), p.b.Stats(); sa.Retransmits != 0 || sb.Resent != 0 || sa.BadPDUs+sb.BadPDUs != 0 {
				t.Errorf("requester %+v; responder %+v", sa, sb)
			}
		})
	}
}

// pollBoth polls p's endpoints until done reports true, for at most 5 s.
func pollBoth(t *testing.T, p *pair, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not done after 5 s: requester %+v; responder %+v", p.a.Stats(), p.b.Stats())
		}
		for _, e := range []*Endpoint{p.b, p.a} {
			if _, err := e.Poll(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
