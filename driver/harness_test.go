package driver_test

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/loader"
)

// pair is two devices, A and B, joined by a link, with connections bound
// to each other's circuits (see conns).
type pair struct {
	a, b  *driver.Device
	progB *loader.Program // B's XDP program (AF_XDP), nil elsewhere
	macA  net.HardwareAddr
	macB  net.HardwareAddr
}

// harness builds pairs over one kind of link: the idea of wireguard-go's
// genTestPair, so one test body runs over memlink, AF_XDP and AF_PACKET.
type harness struct {
	name string
	// new opens A and B with cfgA and cfgB, whose Conns have no Peer yet:
	// the harness fills in the other side's MAC (and, over AF_XDP, admits
	// each side's receive circuits in its XDP program).
	new func(tb testing.TB, cfgA, cfgB driver.Config) *pair
}

// harnesses are the links every test body runs over; the Linux tests add
// AF_XDP and AF_PACKET.
var harnesses = []harness{{"memlink", newMemPair}}

// conns returns the connections of side 'a' or 'b': A's connection i talks
// to B's connection i. Connection 2 reuses connection 0's VCIs on another
// virtual path.
func conns(side byte) []driver.ConnSpec {
	specs := []driver.ConnSpec{
		{VPI: 1, SendVCI: 100, RecvVCI: 200},
		{VPI: 1, SendVCI: 102, RecvVCI: 202},
		{VPI: 2, SendVCI: 100, RecvVCI: 200},
	}
	if side == 'b' { // the other way round
		for i := range specs {
			specs[i].SendVCI, specs[i].RecvVCI = specs[i].RecvVCI, specs[i].SendVCI
		}
	}
	return specs
}

// configs returns the usual configurations of A and B.
func configs() (a, b driver.Config) {
	return driver.Config{Conns: conns('a'), NoLock: true}, driver.Config{Conns: conns('b'), NoLock: true}
}

// withPeers returns cfg with its connections' Peer set to peer.
func withPeers(cfg driver.Config, peer net.HardwareAddr) driver.Config {
	cfg.Conns = append([]driver.ConnSpec(nil), cfg.Conns...)
	for i := range cfg.Conns {
		cfg.Conns[i].Peer = peer
	}
	return cfg
}

// openOn opens a device on l and closes it at cleanup.
func openOn(tb testing.TB, l afxdp.Link, cfg driver.Config) *driver.Device {
	tb.Helper()
	d, err := driver.Open(l, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}

func newMemPair(tb testing.TB, cfgA, cfgB driver.Config) *pair {
	la, lb, err := memlink.NewPair(memlink.Options{Depth: 4096})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { la.Close(); lb.Close() })
	return &pair{
		a:    openOn(tb, la, withPeers(cfgA, lb.HardwareAddr())),
		b:    openOn(tb, lb, withPeers(cfgB, la.HardwareAddr())),
		macA: la.HardwareAddr(), macB: lb.HardwareAddr(),
	}
}

// fill writes a payload that identifies (tag, i) into slot of d's
// connection c.
func fill(d *driver.Device, c, slot int, tag byte, i int) {
	p := d.SendArea(c)[slot*cells.PayloadSize:][:cells.PayloadSize]
	for j := range p {
		p[j] = tag ^ byte(j)
	}
	binary.BigEndian.PutUint32(p, uint32(i))
}

// ident returns the (tag, i) a payload written by fill carries, and
// whether it is intact.
func ident(p []byte) (tag byte, i int, ok bool) {
	tag = p[cells.PayloadSize-1] ^ byte(cells.PayloadSize-1)
	for j := 4; j < len(p); j++ {
		if p[j] != tag^byte(j) {
			return tag, 0, false
		}
	}
	return tag, int(binary.BigEndian.Uint32(p)), true
}

// collect receives until want cells have been delivered into d's rings (or
// timeout passes) and returns how many were.
func collect(tb testing.TB, d *driver.Device, want int, timeout time.Duration) int {
	tb.Helper()
	got := 0
	deadline := time.Now().Add(timeout)
	for got < want && time.Now().Before(deadline) {
		n, err := d.Recv(64)
		if err != nil {
			tb.Fatal(err)
		}
		got += n
		if n == 0 {
			if _, err := d.Wait(5 * time.Millisecond); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return got
}

// settle receives for a while and returns the cells delivered: for
// checking that nothing (more) arrives.
func settle(tb testing.TB, d *driver.Device) int {
	tb.Helper()
	return collect(tb, d, 1<<30, 50*time.Millisecond)
}

// takeAll empties connection c's ring.
func takeAll(d *driver.Device, c int) []cells.Cell {
	var out []cells.Cell
	for {
		cell, ok := d.Take(c)
		if !ok {
			return out
		}
		out = append(out, append(cells.Cell(nil), cell...))
	}
}

// rawFrame builds a frame from src to dst carrying the given cells.
func rawFrame(tb testing.TB, dst, src net.HardwareAddr, cs ...cells.Cell) []byte {
	tb.Helper()
	f := cells.Framer{Dst: dst, Src: src}
	var body []byte
	for _, c := range cs {
		body = append(body, c...)
	}
	frame, err := f.Append(nil, body)
	if err != nil {
		tb.Fatal(err)
	}
	return frame
}

// rawCell builds a good cell on vpi/vci whose payload fill would write for
// (tag, i).
func rawCell(vpi, vci uint16, tag byte, i int) cells.Cell {
	c := cells.Cell(make([]byte, cells.CellSize))
	c.Encode(cells.UNI, cells.Fields{VPI: vpi, VCI: vci})
	p := c.Payload()
	for j := range p {
		p[j] = tag ^ byte(j)
	}
	binary.BigEndian.PutUint32(p, uint32(i))
	return c
}

// inject sends raw frames from A's link, beside A's device.
func inject(tb testing.TB, p *pair, frames ...[]byte) {
	tb.Helper()
	if _, err := driver.LinkOf(p.a).Send(frames); err != nil {
		tb.Fatal(err)
	}
}
