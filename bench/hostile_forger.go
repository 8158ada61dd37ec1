package bench

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"sync/atomic"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/nicfw/transport"
)

// The on-path forger: a host on the segment that learnt both transports'
// epochs (as one does that takes a member's MAC on a bridge for a while;
// here runHostile sets the daemons' epochs and hands them over) sends B,
// under A's address, frames full of forged transport PDUs while the pings
// run: DATA with both epochs right sweeping the sequence numbers of every
// channel (the pings' requests arrive on them), DATA with destination
// epoch 0, ACKs whose entries sweep every channel's numbers (B's replies
// wait on them), and restart claims (DATA and RESET from a made-up epoch
// of A's that name B's). The frames are made after docs/wire.md, not with
// xam's encoders. The transport must deliver none of it, believe no
// restart, and count each kind; the forger's first sequence number out of
// the window renews the epoch B asks of A, after which the forger's
// epochs are stale.
//
// It forges toward B because B asks A to name B's own epoch, which the
// forger knows. A, since the wire scenario, asks B for a challenge
// instead: the wire scenario's made-up epochs for B reached A before B's
// first frame, so B's real epoch had to answer a challenge, which then
// became the destination epoch A asks of B (docs/wire.md) and which the
// forger would have to read off B's frames.

// Kinds of the forger's PDUs.
const (
	forgeData  = iota // DATA, both epochs right
	forgeZero         // DATA, destination epoch 0
	forgeAck          // ACK with entries, both epochs right
	forgeClaim        // DATA from a new epoch of B's, naming A's
	forgeReset        // RESET from a new epoch of B's, naming A's
	forgeKinds
)

// forgeChannels is the transport's channels per peer (its default), as
// the forger sees them on the wire.
const forgeChannels = 8

// onPathForger makes the forger's frames to dst under src's address.
type onPathForger struct {
	framer             cells.Framer
	dstEpoch, srcEpoch uint32
	rng                *rand.Rand
	seq                [forgeKinds][forgeChannels]uint16 // each kind's sweep, per channel
	i                  int                               // PDUs made
	pending            []byte                            // a PDU made that the last frame had no room for
}

func newOnPathForger(dst, src net.HardwareAddr, dstEpoch, srcEpoch uint32, seed uint64) *onPathForger {
	f := &onPathForger{framer: cells.Framer{Dst: dst, Src: src}, dstEpoch: dstEpoch, srcEpoch: srcEpoch,
		rng: rand.New(rand.NewPCG(seed, 0x0a7))}
	for k := range f.seq {
		for ch := range f.seq[k] {
			f.seq[k][ch] = uint16(f.rng.Uint32())
		}
	}
	return f
}

// forgedSDU returns a transport SDU after docs/wire.md: a 20-byte header (type,
// channel, sequence number, stamp, payload length, acknowledgement
// entries, source and destination epochs), the entries (channel, 0,
// sequence number), then the payload.
func forgedSDU(typ, ch uint8, seq uint16, stamp uint32, srcEpoch, dstEpoch uint32, acks [][2]uint16, payload []byte) []byte {
	sdu := make([]byte, 20+4*len(acks)+len(payload))
	sdu[0], sdu[1] = typ, ch
	binary.BigEndian.PutUint16(sdu[2:], seq)
	binary.BigEndian.PutUint32(sdu[4:], stamp)
	binary.BigEndian.PutUint16(sdu[8:], uint16(len(payload)))
	binary.BigEndian.PutUint16(sdu[10:], uint16(len(acks)))
	binary.BigEndian.PutUint32(sdu[12:], srcEpoch)
	binary.BigEndian.PutUint32(sdu[16:], dstEpoch)
	for i, a := range acks {
		sdu[20+4*i] = uint8(a[0])
		binary.BigEndian.PutUint16(sdu[22+4*i:], a[1])
	}
	copy(sdu[20+4*len(acks):], payload)
	return sdu
}

// frame appends a frame of forged PDUs, as many whole ones as it holds,
// to buf: half of them DATA with both epochs right, the others of the
// other kinds in turn.
func (f *onPathForger) frame(buf []byte) ([]byte, error) {
	room := f.framer.CellsPerFrame() * cells.CellSize
	cs := f.pending
	for {
		pdu, err := f.pdu()
		if err != nil {
			return nil, err
		}
		if len(cs)+len(pdu) > room {
			f.pending = pdu
			break
		}
		cs = append(cs, pdu...)
	}
	return f.framer.Append(buf, cs)
}

// pdu returns the next forged PDU's cells.
func (f *onPathForger) pdu() ([]byte, error) {
	k := forgeData
	if f.i%2 == 1 {
		k = 1 + f.i/2%(forgeKinds-1)
	}
	ch := uint8(f.i / 2 % forgeChannels)
	next := func(k int, ch uint8) uint16 { s := f.seq[k][ch]; f.seq[k][ch]++; return s }
	body := make([]byte, 28)
	for j := range body {
		body[j] = byte(f.rng.Uint32())
	}
	var sdu []byte
	switch k {
	case forgeData:
		sdu = forgedSDU(1, ch, next(k, ch), f.rng.Uint32(), f.srcEpoch, f.dstEpoch, nil, body)
	case forgeZero:
		sdu = forgedSDU(1, ch, next(k, ch), f.rng.Uint32(), f.srcEpoch, 0, nil, body)
	case forgeAck:
		acks := make([][2]uint16, 7)
		for j := range acks {
			c := (ch + 1 + uint8(j)) % forgeChannels
			acks[j] = [2]uint16{uint16(c), next(k, c)}
		}
		sdu = forgedSDU(2, ch, next(k, ch), f.rng.Uint32(), f.srcEpoch, f.dstEpoch, acks, nil)
	case forgeClaim:
		sdu = forgedSDU(1, ch, 0, f.rng.Uint32(), f.newEpoch(), f.dstEpoch, nil, body)
	case forgeReset:
		claimed := f.newEpoch()
		var want [4]byte
		binary.BigEndian.PutUint32(want[:], claimed)
		sdu = forgedSDU(4, 0, 0, f.rng.Uint32(), claimed, f.dstEpoch, nil, want[:])
	}
	f.i++
	return cells.Segment(cells.SAR{VCI: transport.DefaultVCI}, sdu)
}

// newEpoch returns a made-up epoch for the forger's restart claims.
func (f *onPathForger) newEpoch() uint32 {
	for {
		if e := f.rng.Uint32(); e != 0 && e != f.srcEpoch {
			return e
		}
	}
}

// hostileForger runs the on-path forger from A's side of the link, with
// epochs[0] and epochs[1] the transports' epochs of A and B.
func hostileForger(ha, hb *firmwareHost, a, b datapath.Place, cfg hostileConfig, epochs [2]uint32) (hostileRow, error) {
	row := hostileRow{Scenario: "on-path forger", Attack: "both epochs known: DATA and ACKs sweeping sequence numbers, destination epoch 0, restart claims"}
	inj, err := injector(a)
	if err != nil {
		return row, err
	}
	defer inj.Close()
	before, err := hb.d.Stats()
	if err != nil {
		return row, err
	}
	f := newOnPathForger(b.MAC, a.MAC, epochs[1], epochs[0], rand.Uint64())
	sent := 0
	var buf []byte
	pings, err := pingWhile(ha, hb, cfg.Pings, func(stop *atomic.Bool, start func()) error {
		for sent < cfg.Flood && !stop.Load() {
			frame, err := f.frame(buf[:0])
			if err != nil {
				return err
			}
			buf = frame
			if err := inj.Send(frame); err != nil && !errors.Is(err, netdev.ErrNoBuffers) {
				return err
			}
			sent++
			if sent == 16 {
				start() // the pings start with the forgeries under way
			}
		}
		return nil
	})
	if err != nil {
		return row, err
	}
	after, err := hb.d.Stats()
	if err != nil {
		return row, err
	}
	t0, t1 := before.Transport, after.Transport
	row.Sent = sent
	row.set(pings)
	row.Counted = map[string]uint64{
		"out of window":      t1.OutOfWindow - t0.OutOfWindow,
		"forged ACKs":        t1.ForgedAcks - t0.ForgedAcks,
		"destination 0":      t1.ZeroEpoch - t0.ZeroEpoch,
		"stale epochs":       t1.StaleEpoch - t0.StaleEpoch,
		"unconfirmed claims": t1.Unconfirmed - t0.Unconfirmed,
		"renewals":           t1.Renewals - t0.Renewals,
		"restarts believed":  t1.Restarts - t0.Restarts,
	}
	row.noRestart(t0, t1)
	return row, nil
}
