package transport

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
)

// TestPackedFrames: messages sent in one pass to one host travel together,
// their cells in as few frames as the MTU allows, with the
// acknowledgements owed to that host; the receiver takes each exactly
// once, in order per channel, and its answers come back packed too.
func TestPackedFrames(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 16})
	before := p.a.tr.Stats()
	lsBefore, err := p.a.link.Stats()
	if err != nil {
		t.Fatal(err)
	}
	p.a.tr.BeginPass()
	ncells := 0
	for i := range uint32(16) {
		m := payload(i, 40)
		ncells += cells.CellCount(headerLen + len(m))
		if err := p.a.tr.Send(hostB, m, uint64(i)+1); err != nil {
			t.Fatal(err)
		}
	}
	per := cells.CellsPerFrame(p.a.link.MTU())
	frames := uint64((ncells + per - 1) / per)
	if err := p.a.tr.EndPass(); err != nil {
		t.Fatal(err)
	}
	st := p.a.tr.Stats()
	if st.Sent != 16 || st.Batches != before.Batches+1 || st.BatchFrames != before.BatchFrames+frames || st.Packed != 16 {
		t.Fatalf("16 messages (%d cells) in one pass: %d sent, %d batches, %d frames, %d packed; want 16, 1, %d, 16", ncells, st.Sent, st.Batches, st.BatchFrames, st.Packed, frames)
	}
	if ls, err := p.a.link.Stats(); err != nil || ls.TxFrames-lsBefore.TxFrames != frames {
		t.Fatalf("the link carried %d frames (%v), want %d", ls.TxFrames-lsBefore.TxFrames, err, frames)
	}
	for !(p.a.tr.Unacked(hostB) == 0 && deliveredFrom(p.b, hostA) == 16) {
		p.poll(t)
		p.clk.Advance(DefaultRetransmitAfter / 4)
	}
	checkExactlyOnce(t, p.b, hostA, 16)
	if st := p.b.tr.Stats(); st.Duplicates != 0 || st.BadFrames != 0 {
		t.Errorf("receiver: %+v", st)
	}
}

// TestPackedFramesUnderLoss is lossBody's traffic with every pass
// packing: exactly once, in order per channel, under loss, duplication and
// reordering of the packed frames.
func TestPackedFramesUnderLoss(t *testing.T) {
	p := newPair(t, memlink.Options{Loss: 0.10, Duplicate: 0.05, Reorder: 0.05, Seed: 17}, Config{Channels: 8})
	const count = 2000
	sent := 0
	for !(sent == count && p.a.tr.Unacked(hostB) == 0 && deliveredFrom(p.b, hostA) == count) {
		p.a.tr.BeginPass()
		for ; sent < count; sent++ {
			if err := p.a.tr.Send(hostB, payload(uint32(sent), 60), uint64(sent)+1); err != nil {
				break // ErrBusy: the rest in a later pass
			}
		}
		if err := p.a.tr.EndPass(); err != nil {
			t.Fatal(err)
		}
		p.poll(t)
		p.clk.Advance(DefaultRetransmitAfter / 4)
	}
	checkExactlyOnce(t, p.b, hostA, count)
	if st := p.a.tr.Stats(); st.Packed == 0 || st.Retransmits == 0 {
		t.Errorf("sender: %+v", st)
	}
}

// compactCell returns a compact cell (compact.go) on the default circuit
// that stands for a DATA PDU with header h and payload.
func compactCell(h *header, payload []byte) []byte {
	c := cells.Cell(make([]byte, cells.CellSize))
	if err := c.Encode(cells.UNI, cells.Fields{VCI: DefaultVCI + 1, PTI: cells.PTIEndOfMessage}); err != nil {
		panic(err)
	}
	putCompact(c.Payload(), h, payload)
	return c
}

// FuzzPackedFrame feeds a transport frames of several PDUs and compact
// cells built from the fuzzer's bytes (each piece a DATA message with its
// channel and sequence number, a compact ACK cell, or an invalid SDU or
// cell), each frame
// twice: the transport never panics, counts what is bad, and delivers no
// message twice.
func FuzzPackedFrame(f *testing.F) {
	f.Add([]byte{0, 0, 10, 1, 0, 20, 0, 1, 30})
	f.Add([]byte{1, 5, 10, 1, 6, 20})
	f.Add([]byte{9, 0, 0, 0, 0, 0, 0, 0, 200, 0, 1, 1})
	f.Add([]byte{100, 0, 10, 100, 1, 5, 1, 0, 20, 101, 0, 10}) // compact cells, one corrupt, and a PDU
	f.Add([]byte{100, 0, 40, 100, 0, 40, 150, 1, 3})
	f.Add([]byte{100, 0, 10, 50, 0, 2, 51, 1, 3, 52, 2, 11, 0, 1, 20})   // compact ACK cells: good, corrupt, bad channel and count
	f.Add([]byte{30, 0, 10, 31, 1, 12, 32, 0, 35, 30, 2, 31, 100, 1, 5}) // compact cells with an acknowledgement: good, corrupt, too long, bad channel
	f.Add([]byte{20, 0, 10, 21, 1, 40, 28, 0, 3, 22, 1, 31, 100, 0, 5})  // compact messages of two cells: good, corrupt, without its continuation
	f.Fuzz(func(t *testing.T, spec []byte) {
		if len(spec) > 300 {
			return
		}
		la, lb, err := memlink.NewPair(memlink.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer la.Close()
		defer lb.Close()
		seen := map[string]bool{}
		a, err := New(la, Config{Channels: 2,
			Deliver: func(_ HostID, ch int, p []byte) bool {
				k := fmt.Sprint(ch, p)
				if seen[k] {
					t.Fatalf("delivered twice: channel %d, %x", ch, p)
				}
				seen[k] = true
				return true
			},
			Returned: func(HostID, uint64, []byte, error) {}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.AddPeer(hostB, lb.HardwareAddr()); err != nil {
			t.Fatal(err)
		}
		var cs []byte
		for i := 0; i+3 <= len(spec); i += 3 {
			typ, ch, n := spec[i], int(spec[i+1]), int(spec[i+2])
			body := make([]byte, 8+n%64)
			binary.BigEndian.PutUint64(body, uint64(i))
			sdu := make([]byte, headerLen+len(body))
			(*header)(sdu).put(typ%5, ch%3, uint16(spec[i+1]>>4), 1, len(body), 9, 0)
			copy(sdu[headerLen:], body)
			if typ >= 100 && typ < 200 {
				// A compact cell: typ odd, one of its bytes flipped.
				c := compactCell((*header)(sdu), body[:min(len(body), CompactPayload)])
				if typ%2 == 1 {
					c[cells.HeaderSize+n%cells.PayloadSize] ^= 1 << (typ % 8)
				}
				cs = append(cs, c...)
				continue
			}
			if typ >= 20 && typ < 30 {
				// A compact message of two cells (CompactPayload+1 to
				// CompactMax bytes): typ odd, one byte of either cell
				// flipped; typ 28 or more, the continuation left out.
				b := make([]byte, CompactPayload+1+n%(CompactMax-CompactPayload))
				copy(b, body)
				(*header)(sdu).put(typeData, ch%3, uint16(spec[i+1]>>4), 1, len(b), 9, 0)
				c := compactCell((*header)(sdu), b)
				if typ < 28 {
					m := compactCell((*header)(sdu), nil)
					putCompactMore(cells.Cell(m).Payload(), (*header)(sdu), b)
					c = append(c, m...)
				}
				if typ%2 == 1 {
					c[cells.HeaderSize+n%(len(c)-cells.HeaderSize)] ^= 1 << (typ % 8)
				}
				cs = append(cs, c...)
				continue
			}
			if typ >= 30 && typ < 50 {
				// A compact DATA cell with an acknowledgement (channel
				// i%3, more than 2 is invalid) of n%40 bytes (more than
				// CompactPayload is invalid): typ odd, one of its bytes
				// flipped.
				c := compactAckedCell((*header)(sdu), body[:min(len(body), n%40)], uint8(i%3), uint16(n))
				if typ%2 == 1 {
					c[cells.HeaderSize+n%cells.PayloadSize] ^= 1 << (typ % 8)
				}
				cs = append(cs, c...)
				continue
			}
			if typ >= 50 && typ < 100 {
				// A compact ACK cell of n%12 entries (more than 10 is
				// invalid): typ odd, one of its bytes flipped.
				c := compactAckCell(ch%3, uint16(spec[i+1]>>4), n%12, i)
				if typ%2 == 1 {
					c[cells.HeaderSize+n%cells.PayloadSize] ^= 1 << (typ % 8)
				}
				cs = append(cs, c...)
				continue
			}
			if typ >= 200 {
				sdu = sdu[:len(sdu)-1] // a length that does not match
			}
			c, err := cells.Segment(cells.SAR{VCI: DefaultVCI}, sdu)
			if err != nil {
				return
			}
			cs = append(cs, c...)
		}
		if len(cs) == 0 || len(cs)/cells.CellSize > cells.CellsPerFrame(la.MTU()) {
			return
		}
		fr := cells.Framer{Dst: la.HardwareAddr(), Src: lb.HardwareAddr()}
		frame, err := fr.Append(nil, cs)
		if err != nil {
			return
		}
		for range 2 {
			if _, err := lb.Send([][]byte{frame}); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Poll(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// deliveredFrom returns the number of messages e took from src.
func deliveredFrom(e *end, src HostID) int {
	n := 0
	for _, l := range e.got[src] {
		n += len(l)
	}
	return n
}

// Unreliable messages sent in one pass all leave, each with its own bytes
// (they share one frame buffer), and each is acknowledged to its sender
// by the next Poll: an unreliable message is done once it has left.
func TestUnreliableInPass(t *testing.T) {
	var acked []uint64
	p := newPair(t, memlink.Options{}, Config{Unreliable: true, Acked: func(_ HostID, cookie uint64) { acked = append(acked, cookie) }})
	p.a.tr.BeginPass()
	for n := range uint32(10) {
		if err := p.a.tr.Send(hostB, payload(n, 100), uint64(n)+1); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.a.tr.EndPass(); err != nil {
		t.Fatal(err)
	}
	p.poll(t)
	checkExactlyOnce(t, p.b, hostA, 10)
	if len(acked) != 10 || acked[0] != 1 || acked[9] != 10 {
		t.Errorf("Acked for %v, want 1..10", acked)
	}
}

// compactAckedCell returns a compact DATA cell with an acknowledgement
// (compact.go) on the default circuit: the DATA PDU with header h and
// payload (its length cut to 6 bits) with the acknowledgement of message
// seq on channel ch, its CRC right whatever the length.
func compactAckedCell(h *header, payload []byte, ch uint8, seq uint16) []byte {
	c := cells.Cell(make([]byte, cells.CellSize))
	if err := c.Encode(cells.UNI, cells.Fields{VCI: DefaultVCI + 1, PTI: cells.PTIEndOfMessage}); err != nil {
		panic(err)
	}
	b := c.Payload()
	putCompactAcked(b, h, payload, ch, seq)
	if n := uint8(len(payload)) & 63; len(payload) > CompactMax {
		// A length no sender writes, with a CRC that covers it.
		binary.BigEndian.PutUint16(b[compactOffCRC:], uint16(n)<<10|cells.CRC10Trailer(b[:compactOffCRC], n))
	}
	return c
}

// compactAckCell returns a compact ACK cell (compact.go) on the default
// circuit that answers message seq on channel ch and carries n entries
// (channel (k+j)%3, sequence number j), its CRC right whatever n is.
func compactAckCell(ch int, seq uint16, n, k int) []byte {
	c := cells.Cell(make([]byte, cells.CellSize))
	if err := c.Encode(cells.UNI, cells.Fields{VCI: DefaultVCI + 1, PTI: cells.PTIEndOfMessage}); err != nil {
		panic(err)
	}
	b := c.Payload()
	b[0], b[1] = typeCompactAck, uint8(ch)
	binary.BigEndian.PutUint16(b[2:], seq)
	binary.BigEndian.PutUint32(b[6:], 9)
	b[compactOffLength] = uint8(n)
	for j := range min(n, compactAckEntries) {
		b[compactHeaderLen+j*compactAckEntryLen] = uint8((k + j) % 3)
		binary.BigEndian.PutUint16(b[compactHeaderLen+j*compactAckEntryLen+1:], uint16(j))
	}
	binary.BigEndian.PutUint16(b[compactOffCRC:], cells.CRC10(b[:compactOffCRC]))
	return c
}
