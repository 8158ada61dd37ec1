//go:build linux

package grim

import (
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// FuzzGRIMHeaders: a hostile peer, speaking the engine's endpoint
// interface directly rather than through this package, sends a GRIM
// endpoint messages with any header: any handler (the registry's and the
// memory handler's included), any argument count and 64-bit arguments,
// short or bulk, pooled or stored at any offset, with any bytes. The GRIM
// endpoint (the registry's central one) never panics and never fails;
// what it cannot use it counts or answers.
func FuzzGRIMHeaders(f *testing.F) {
	f.Add(uint32(HandlerRegister), uint8(4), uint64(1), uint64(2), false, uint32(endpoint.PoolOffset), []byte{0, 0, 0, 20, 5, 'x'})
	f.Add(uint32(HandlerTable), uint8(4), uint64(1<<40), uint64(0), false, uint32(endpoint.PoolOffset), encodeTable(Table{"a": {ID: 16, Name: "a"}}))
	f.Add(uint32(HandlerMemory), uint8(0), uint64(0), uint64(0), false, uint32(100), []byte("memory"))
	f.Add(uint32(HandlerMemory), uint8(4), uint64(0), uint64(0), false, uint32(1<<20), []byte("far"))
	f.Add(uint32(HandlerNull), uint8(2), uint64(7), uint64(9), true, uint32(0), []byte(nil))
	f.Add(uint32(999), uint8(4), ^uint64(0), ^uint64(0), true, uint32(0), []byte(nil))
	f.Add(uint32(FirstUserHandler), uint8(4), uint64(0), uint64(0), false, uint32(endpoint.PoolOffset), make([]byte, 5000))

	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	engA, err := nicfw.NewEngine(la, engineConfig(1, 1))
	if err != nil {
		f.Fatal(err)
	}
	defer engA.Close()
	engB, err := nicfw.NewEngine(lb, engineConfig(2, 1))
	if err != nil {
		f.Fatal(err)
	}
	defer engB.Close()
	if err := engA.AddHost(2, lb.HardwareAddr()); err != nil {
		f.Fatal(err)
	}
	if err := engB.AddHost(1, la.HardwareAddr()); err != nil {
		f.Fatal(err)
	}
	ep, err := New(engA, Config{Peers: []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}}, Channels: 2})
	if err != nil {
		f.Fatal(err)
	}
	defer ep.Close()
	var ran int
	if err := ep.Handle(FirstUserHandler, func(t *Token, _ [ShortArgs]uint32, _ []byte) { ran++; t.Reply(HandlerNull) }); err != nil { //nolint:errcheck
		f.Fatal(err)
	}
	// The hostile peer: an engine endpoint whose table names A's
	// channels.
	mem, err := engB.CreateEndpoint(16, endpoint.Config{StagingSize: 64 << 10},
		nicfw.VNet{Tag: DefaultTag, Table: []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 1, Endpoint: 17}}})
	if err != nil {
		f.Fatal(err)
	}
	hostile, err := endpoint.Map(mem.FD())
	if err != nil {
		f.Fatal(err)
	}
	defer hostile.Close()

	f.Fuzz(func(t *testing.T, handler uint32, nargs uint8, a0, a1 uint64, short bool, remote uint32, data []byte) {
		d := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: nargs % (endpoint.MaxShortArgs + 1), Dest: uint32(a1 % 2),
			Handler: handler, Args: [endpoint.MaxShortArgs]uint64{a0, a1, a0 ^ a1, ^a0}}
		if !short && len(data) > 0 {
			n := min(len(data), 48<<10)
			copy(hostile.Staging(), data[:n])
			d.Class, d.Length, d.RemoteOffset = endpoint.ClassBulk, uint32(n), remote
		}
		if err := hostile.Send(endpoint.RequestSend, &d); err != nil {
			t.Fatal(err)
		}
		// Run both until the message is answered or returned.
		began := time.Now()
		for i := 0; ; i++ {
			if _, err := engB.Poll(); err != nil {
				t.Fatal(err)
			}
			if _, err := ep.Poll(); err != nil {
				t.Fatalf("GRIM endpoint: %v", err)
			}
			var r endpoint.Descriptor
			ok, err := hostile.Receive(endpoint.ReplyReceive, &r)
			if err != nil {
				t.Fatal(err)
			}
			// Requests the endpoint sends back (a table pushed) are
			// taken and dropped.
			for {
				got, err := hostile.Receive(endpoint.RequestReceive, &endpoint.Descriptor{})
				if err != nil {
					t.Fatal(err)
				}
				if !got {
					break
				}
			}
			if ok {
				break
			}
			if i > 100_000 && time.Since(began) > 30*time.Second {
				t.Fatalf("%+v neither answered nor returned", d)
			}
		}
	})
}
