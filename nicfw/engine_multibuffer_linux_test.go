//go:build linux

package nicfw

import (
	"bytes"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// TestEngineMultiBufferFaults: two engines on a veth pair of the largest
// MTU, whose frames span up to 17 UMEM chunks, in generic and native XDP
// mode, with xam's XDP program dropping 10% of the frames and corrupting a
// byte (in any of a frame's buffers) of 10% more at both hosts. A 64 KB
// bulk message crosses in two frames; a lost or corrupted frame loses that
// frame's chunk only, which the transport sends again. Every message
// arrives once, every byte intact.
func TestEngineMultiBufferFaults(t *testing.T) {
	for _, mode := range []loader.Mode{loader.ModeGeneric, loader.ModeNative} {
		t.Run(mode.String(), func(t *testing.T) { testEngineMultiBufferFaults(t, mode) })
	}
}

func testEngineMultiBufferFaults(t *testing.T, mode loader.Mode) {
	mtu := datapath.MaxMTU(true)
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1), netnstest.WithMTU(mtu))
	var progs []*loader.Program
	cfg := EngineConfig{Window: 8, Transport: transport.Config{RetransmitAfter: 5 * time.Millisecond, GiveUpAfter: time.Minute}}
	n := newEngNetOn(t, v, cfg, nil, func(i int, h *netnstest.Host) afxdp.Link {
		e, err := datapath.Open(datapath.Place{Ifindex: h.Index, MAC: h.MAC, Do: h.Do}, mode, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		if info := e.Sock.Info(); !info.MultiBuffer || info.MTU != mtu {
			t.Fatalf("socket MTU %d, multi-buffer %v; want %d, true", info.MTU, info.MultiBuffer, mtu)
		}
		if err := e.Prog.SetFaults(loader.Faults{DropRate: 0.10, CorruptRate: 0.10, Seed: uint64(21 + i)}); err != nil {
			t.Fatal(err)
		}
		progs = append(progs, e.Prog)
		return e.Sock
	})
	if got, want := n.a.eng.MaxPayload(), transport.MaxPayloadLimit(transport.DefaultChannels); got != want {
		t.Fatalf("MaxPayload %d on MTU %d, want %d", got, mtu, want)
	}
	ecfg := endpoint.Config{StagingSize: 1 << 20}
	a1, _, b1, _ := twoNets(t, n, ecfg, ecfg)
	const length, messages = 64 << 10, 40
	var got []received
	for i := range messages {
		from, remote := i%8*length, (i+3)%8*length
		data := pattern(length, byte(i))
		copy(a1.Staging()[from:], data)
		mustSend(t, a1, endpoint.RequestSend, bulk(1, 90, from, remote, length, uint64(i)))
		n.run(t, 60, func() bool {
			collect(t, b1, endpoint.RequestReceive, &got)
			return len(got) > i
		})
		if d := got[i].d; len(got) != i+1 || d.Args[0] != uint64(i) || d.Length != length || !bytes.Equal(got[i].data, data) {
			t.Fatalf("message %d: received %d messages, the last %+v with %d bytes (intact: %v)", i, len(got), d, len(got[i].data), bytes.Equal(got[i].data, data))
		}
	}
	var faults [2]uint64
	for _, p := range progs {
		c, err := p.Counters()
		if err != nil {
			t.Fatal(err)
		}
		faults[0] += c.FaultDropped
		faults[1] += c.FaultCorrupted
	}
	st := n.a.eng.TransportStats()
	if faults[0] == 0 || faults[1] == 0 || st.Retransmits == 0 {
		t.Errorf("faults dropped %d, corrupted %d, retransmits %d: want each", faults[0], faults[1], st.Retransmits)
	}
	if sb := n.b.eng.Stats(); sb.Delivered != messages {
		t.Errorf("B delivered %d, want %d", sb.Delivered, messages)
	}
	t.Logf("%d messages of %d bytes; faults: %d dropped, %d corrupted; A transport %+v", messages, length, faults[0], faults[1], st)
}
