//go:build linux

package grim

import (
	"errors"
	"testing"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// grimRig is a GRIM endpoint (the registry's central one, two channels)
// on endpoint memory the test plays the engine of: it puts descriptors
// into the channels' receive queues, as the engine does for what arrives,
// and takes what the endpoint sends.
type grimRig struct {
	ep   *Endpoint
	mems []*endpoint.Memory
}

func newGRIMRig(tb testing.TB) *grimRig {
	tb.Helper()
	r := &grimRig{ep: newEndpoint(Config{Peers: []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}}, Channels: 2})}
	if err := r.ep.cfg.fill(); err != nil {
		tb.Fatal(err)
	}
	err := r.ep.open(func(_ nicfw.EndpointID, ec endpoint.Config, _ nicfw.VNet) (*endpoint.View, func() error, error) {
		mem, err := endpoint.NewMemory(ec)
		if err != nil {
			return nil, nil, err
		}
		v, err := endpoint.Map(mem.FD())
		if err != nil {
			mem.Close()
			return nil, nil, err
		}
		r.mems = append(r.mems, mem)
		return v, func() error { return errors.Join(v.Close(), mem.Close()) }, nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.ep.Close() })
	if err := r.ep.Handle(FirstUserHandler, func(t *Token, _ [ShortArgs]uint32, _ []byte) { t.Reply(HandlerNull) }); err != nil { //nolint:errcheck
		tb.Fatal(err)
	}
	return r
}

// FuzzGRIMHeaders: whatever a peer sends arrives as a descriptor the
// engine checked (a table index or NoIndex, a handler id, 64-bit
// arguments, a bulk message's bytes in the receive pool or the memory
// region) or as one of the endpoint's own messages returned. The GRIM
// endpoint runs it with any header: any handler (the registry's and the
// memory handler's included), argument count and arguments, short or
// bulk with any bytes, request or reply, returned or not. It never panics
// and never fails; what it cannot use it counts, and every request gets
// its reply.
func FuzzGRIMHeaders(f *testing.F) {
	f.Add(uint32(HandlerRegister), uint8(4), uint64(1), uint64(2), uint8(0), uint32(0), []byte{0, 0, 0, 20, 5, 'x'})
	f.Add(uint32(HandlerTable), uint8(4), uint64(1<<40), uint64(0), uint8(1), uint32(3), encodeTable(Table{"a": {ID: 16, Name: "a"}}))
	f.Add(uint32(HandlerMemory), uint8(0), uint64(0), uint64(0), uint8(2), uint32(100), []byte("memory"))
	f.Add(uint32(HandlerMemory), uint8(4), uint64(0), uint64(0), uint8(3), uint32(1<<20), []byte("returned"))
	f.Add(uint32(HandlerNull), uint8(2), uint64(7), uint64(9), uint8(4), uint32(0), []byte(nil))
	f.Add(uint32(999), uint8(4), ^uint64(0), ^uint64(0), uint8(5), uint32(endpoint.NoIndex), []byte(nil))
	f.Add(uint32(FirstUserHandler), uint8(4), uint64(0), uint64(0), uint8(0), uint32(17), make([]byte, 5000))
	r := newGRIMRig(f)
	f.Fuzz(func(t *testing.T, handler uint32, nargs uint8, a0, a1 uint64, kind uint8, index uint32, data []byte) {
		ch := int(a1 & 1)
		mem, c := r.mems[ch], r.ep.chans[ch]
		d := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: nargs % (endpoint.MaxShortArgs + 1), Handler: handler,
			Args: [endpoint.MaxShortArgs]uint64{a0, a1, a0 ^ a1, ^a0, a1 << 32}}
		// The sender's table index: a peer's channel, or outside (NoIndex),
		// as the engine sets it.
		switch {
		case index == endpoint.NoIndex:
			d.Dest = endpoint.NoIndex
		default:
			d.Dest = index % uint32(len(r.ep.cfg.Peers)*MaxChannels)
		}
		if len(data) > 0 && kind&1 == 0 {
			// A bulk message: its bytes where the engine stored them, in
			// the pool or (a memory message) the memory region.
			n := min(len(data), MaxBulk)
			at := uint32(r.ep.cfg.MemorySize) // the pool
			if handler == uint32(HandlerMemory) {
				n = min(n, r.ep.cfg.MemorySize)
				at = 0
			}
			copy(c.view.Staging()[at:], data[:n])
			d.Class, d.Offset, d.Length, d.RemoteOffset = endpoint.ClassBulk, at, uint32(n), endpoint.PoolOffset
		}
		q := endpoint.RequestReceive
		switch kind % 6 {
		case 2, 3:
			q = endpoint.ReplyReceive
		case 4, 5: // one of the endpoint's own messages, returned
			q = endpoint.ReplyReceive
			d.Class |= endpoint.ClassReturned
			d.Tag = uint64(a0&0xff) | uint64(kind&1)<<8 // a reason; sent from the request or the reply queue
		}
		if err := mem.Put(q, &d); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ep.Poll(); err != nil {
			t.Fatalf("%+v: %v", d, err)
		}
		// The engine's side: take what the endpoint sent; a request that
		// is not returned is answered.
		replies := 0
		for _, m := range r.mems {
			for _, sq := range []endpoint.Queue{endpoint.ReplySend, endpoint.RequestSend} {
				var out endpoint.Descriptor
				for {
					ok, err := m.Take(sq, &out)
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						break
					}
					if sq == endpoint.ReplySend {
						replies++
					}
				}
			}
		}
		if q == endpoint.RequestReceive && d.Dest != endpoint.NoIndex && replies != 1 {
			t.Errorf("%+v: %d replies, want 1", d, replies)
		}
		for _, c := range r.ep.chans {
			c.pending, c.live = nil, nil // nobody answers the rig's requests: forget them
		}
	})
}
