package nicfw

import (
	"bytes"
	"testing"

	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// msgSamples are encoded messages of every class, returns included.
func msgSamples() [][]byte {
	base := msg{kind: endpoint.ReplySend, nargs: 2, dst: 3, src: 4, handler: 5, index: 6, tag: 7, args: [8]uint64{8, 9}}
	var out [][]byte
	add := func(m msg) {
		b := make([]byte, m.size())
		encodeMsg(b, &m)
		out = append(out, b)
	}
	m := base
	m.class, m.nargs, m.args[2], m.args[3], m.args[4] = endpoint.ClassShort, 5, 10, 11, 12 // five arguments: the full form
	add(m)
	m.reason = endpoint.ReasonBadTag
	add(m)
	m = base
	m.class, m.offset, m.length, m.data = endpoint.ClassMedium, 100, 5, []byte("hello")
	add(m)
	m.reason = endpoint.ReasonClosed // a medium return carries its bytes
	add(m)
	m = base
	m.class, m.offset, m.length, m.remote, m.id, m.chunk, m.data = endpoint.ClassBulk, 10, 1000, 20, 30, 400, []byte("chunk")
	add(m)
	m.reason, m.data = endpoint.ReasonRange, nil // a bulk return carries none
	add(m)
	m = base // two arguments: the compact form, request and reply
	m.class = endpoint.ClassShort
	add(m)
	m.kind, m.nargs, m.handler = endpoint.RequestSend, 0, 65535
	add(m)
	m.nargs, m.args = 4, [8]uint64{8, 9, 10, 11} // four: the compact form of two cells
	add(m)
	m.kind, m.nargs = endpoint.ReplySend, 3
	add(m)
	return out
}

// The codec: what encodeMsg writes decodeMsg reads back, and decodeMsg
// refuses messages whose fields do not agree.
func TestMsgCodec(t *testing.T) {
	for i, b := range msgSamples() {
		m, ok := decodeMsg(b)
		if !ok {
			t.Fatalf("sample %d does not decode: %x", i, b)
		}
		if compact := i >= 6; compact != (b[0]&msgCompact != 0) || compact && (len(b) > transport.CompactMax || m.index != endpoint.NoIndex) {
			t.Errorf("sample %d: %d bytes %x, index %d", i, len(b), b, m.index)
		}
		again := make([]byte, m.size())
		if n := encodeMsg(again, &m); n != len(b) || !bytes.Equal(again, b) {
			t.Errorf("sample %d: re-encoded %x, want %x", i, again[:n], b)
		}
	}
	s := msgSamples()
	bad := map[string][]byte{}
	corrupt := func(name string, sample int, f func(b []byte) []byte) {
		bad[name] = f(bytes.Clone(s[sample]))
	}
	corrupt("short too long", 0, func(b []byte) []byte { return append(b, 0) })
	corrupt("unknown class", 0, func(b []byte) []byte { b[1] = 4; return b })
	corrupt("receive queue", 0, func(b []byte) []byte { b[0] = byte(endpoint.RequestReceive); return b })
	corrupt("nine arguments", 0, func(b []byte) []byte { b[2] = 9; return b })
	corrupt("medium data length", 2, func(b []byte) []byte { return b[:len(b)-1] })
	corrupt("medium length field", 2, func(b []byte) []byte { b[msgHeaderLen+16+7]++; return b })
	corrupt("medium too long", 2, func(b []byte) []byte { b[msgHeaderLen+16+4] = 1; return b })
	corrupt("medium without extension", 2, func(b []byte) []byte { return b[:msgHeaderLen+16+10] })
	corrupt("bulk chunk past its message", 4, func(b []byte) []byte { b[msgHeaderLen+16+16+2] = 0xff; return b })
	corrupt("bulk return with data", 5, func(b []byte) []byte {
		b[msgHeaderLen+16+23] = 1
		return append(b, 'x')
	})
	corrupt("bulk chunk without data", 4, func(b []byte) []byte {
		b[msgHeaderLen+16+23] = 0
		return b[:len(b)-5]
	})
	corrupt("header cut", 0, func(b []byte) []byte { return b[:msgHeaderLen-1] })
	corrupt("compact in the full form", 0, func(b []byte) []byte { b[2] = 4; return b[:len(b)-8] })
	corrupt("compact too long", 6, func(b []byte) []byte { return append(b, 0) })
	corrupt("compact of four, too long", 8, func(b []byte) []byte { return append(b, 0) })
	corrupt("compact of four, cut", 8, func(b []byte) []byte { return b[:len(b)-1] })
	corrupt("compact, seven arguments", 6, func(b []byte) []byte { b[0] |= 5 << 1; return append(b, make([]byte, 40)...) })
	corrupt("compact, bits left over", 7, func(b []byte) []byte { b[0] |= 0x10; return b })
	corrupt("compact header cut", 7, func(b []byte) []byte { return b[:msgCompactLen-1] })
	for name, b := range bad {
		if _, ok := decodeMsg(b); ok {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzDecodeMsg: decodeMsg never panics, and what it accepts encodes back
// to the same bytes.
func FuzzDecodeMsg(f *testing.F) {
	for _, b := range msgSamples() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := decodeMsg(b)
		if !ok {
			return
		}
		again := make([]byte, m.size())
		if n := encodeMsg(again, &m); n != len(b) || !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, want %x", again[:n], b)
		}
	})
}

// FuzzLaneRead: the compact lane (engine_lane.go) reads exactly the
// short messages, not returns, that the general path decodes, in the
// compact form (readCompact) and in the long one (readShort), into the
// descriptor the general path would store.
func FuzzLaneRead(f *testing.F) {
	for _, b := range msgSamples() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 {
			return // offer hands the lane two bytes at least
		}
		var d endpoint.Descriptor
		var kind endpoint.Queue
		var dst, src EndpointID
		var ok bool
		if b[0]&msgCompact != 0 {
			kind, dst, src, ok = readCompact(b, &d)
		} else {
			kind, dst, src, ok = readShort(b, &d)
		}
		var m msg
		mok := decodeMsgInto(b, &m) && m.class == endpoint.ClassShort && m.reason == 0
		if ok != mok {
			t.Fatalf("%x: lane %v, general path %v", b, ok, mok)
		}
		if !ok {
			return
		}
		want := endpoint.Descriptor{Class: m.class, NArgs: m.nargs, Handler: m.handler, Dest: endpoint.NoIndex, Tag: m.tag, Args: m.args}
		if d != want || kind != m.kind || dst != m.dst || src != m.src {
			t.Fatalf("%x: lane %+v %v %d %d, general path %+v %v %d %d", b, d, kind, dst, src, want, m.kind, m.dst, m.src)
		}
	})
}

// The compact lane's send writes a short message that does not fit the
// compact form as encodeMsg writes it (putMsgHeader), and a receiver's
// lane reads it back (readShort).
func TestPutShortMsg(t *testing.T) {
	for nargs := range uint8(endpoint.MaxShortArgs + 1) {
		for _, handler := range []uint32{7, 1 << 20} {
			d := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: nargs, Dest: 3, Handler: handler}
			for i := range d.Args[:nargs] {
				d.Args[i] = uint64(i+1) << 40
			}
			kind := endpoint.Queue(int(nargs) % 2)
			if compactable(kind, nargs, handler) {
				continue
			}
			m := msg{kind: kind, class: endpoint.ClassShort, nargs: nargs, dst: 9, src: 4, handler: handler, index: 3, tag: 0xfeed, args: d.Args}
			want := make([]byte, m.size())
			encodeMsg(want, &m)
			got := make([]byte, msgMaxLen)
			got = got[:putMsgHeader(got, kind, endpoint.ClassShort, 0, 9, 4, handler, 3, 0xfeed, d.Args[:nargs])]
			if !bytes.Equal(got, want) {
				t.Fatalf("%d arguments, handler %d: %x, want %x", nargs, handler, got, want)
			}
			var r endpoint.Descriptor
			if k, dst, src, ok := readShort(got, &r); !ok || k != kind || dst != 9 || src != 4 || r.Handler != handler || r.NArgs != nargs || r.Args != d.Args || r.Tag != 0xfeed {
				t.Fatalf("%d arguments, handler %d: read back %+v %v %d %d %v", nargs, handler, r, k, dst, src, ok)
			}
		}
	}
}
