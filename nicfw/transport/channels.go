package transport

import (
	"net"
	"time"

	"github.com/xam-project/xam/cells"
)

// The channel tables. Everything here is owned by the engine thread (the
// goroutine that calls Send and Poll); nothing is locked.
//
// A peer is one row of both tables: its C send channels and C receive
// channels. Transport.peers indexes rows by HostID, Transport.byMAC by the
// source address of received frames. Transport.active lists the peers with
// unacked > 0, each knowing its own position (activeIdx), so that the timer
// scan visits only them and a peer joins or leaves the list in O(1).

// HostID names a peer host in the transport's host table (AddPeer).
type HostID uint16

// Peer is a row of the host table: a destination host and a source of
// frames. Its fields are the transport's; Transport.Peer hands it out as a
// handle (SendTo, Busy).
type Peer struct {
	id   HostID
	mac  net.HardwareAddr
	gone bool // left the host table (SetPeers); kept by references only
	// eth is the Ethernet and frame headers of frames to the peer, its
	// flags and cell count to fill in (putHeaders).
	eth  [ethHeaders]byte
	send []sendChannel
	recv []recvChannel

	// epoch is the peer's incarnation as its frames name it (0: not heard
	// yet), prevEpoch the one before (epochs.go); incarnation numbers it
	// (Incarnation).
	epoch, prevEpoch uint32
	incarnation      uint8
	// believed counts the epochs of the peer believed: the challenge
	// depends on it, so that a frame of (or replayed from) an incarnation
	// believed before does not answer it again (epochs.go, auth.go).
	believed uint32
	// confirmed: a frame from epoch has named dstIn (the peer holds the
	// same pair of incarnations, epochs.go).
	confirmed bool
	// dstIn is the destination epoch the peer's frames must carry: this
	// transport's epoch at first, a fresh random number once renewed
	// (epochs.go). dstHeard is the last one a frame of the peer named: a
	// RESET naming it is still taken while the peer learns a renewed one.
	// dstOut is the destination epoch this transport writes in its frames
	// to the peer: the peer's epoch, or what the peer's last RESET asked
	// for.
	dstIn, dstHeard, dstOut uint32
	// dstOK: dstOut was told by the peer for the current incarnations
	// of both sides (a RESET of the peer's current epoch taken in, or
	// the peer's first frame), so DATA frames may name it; until then
	// messages wait (sendChannel.sent) and a RESET asks the peer for one
	// (hello, epochs.go).
	dstOK bool
	// waiting counts the send channels in use whose message waits for
	// dstOK (not sent under the current incarnations).
	waiting int
	// srcOut is the epoch this transport names itself with in its frames
	// to the peer (their src): the transport's own at first, a fresh
	// random number for a row made again for an address that had one, or
	// after a give-up (reincarnate, epochs.go).
	srcOut uint32
	// heard: the peer's epoch on record was confirmed once (a frame from
	// it named dstIn). A new incarnation toward the peer clears
	// confirmed, not heard, so that believing a new epoch of the peer
	// after it is still a restart (believe).
	heard bool
	// resetAt is when the last RESET went to the peer, and resetWant
	// what it asked for: RESETs are rate-limited (reset, epochs.go).
	resetAt   time.Time
	resetWant uint32

	unacked   int // send channels in use
	activeIdx int // position in Transport.active, or -1
	next      int // send channel to try first (round robin)

	// reasm reassembles the PDUs of this peer, which may span frames.
	reasm *cells.Reassembler

	// Acknowledgements owed to the peer and not yet sent (acks.go): per
	// channel whether one is owed and for which transmission, the channels
	// in the order they were queued, and when the oldest was queued.
	ackOn    []bool
	ackSeq   []uint16
	ackStamp []uint32
	ackList  []uint8
	// ackUrgent: one of the acknowledgements owed is for a message
	// whose receiver said AckNow, or for a duplicate: no AckDelay.
	ackUrgent bool
	// ackSoon: one of them is for a message whose receiver said AckSoon,
	// the first of which was queued at ackSoonAt (AckSoonDelay).
	ackSoon   bool
	ackSoonAt time.Time
	ackPoll   uint64
	ackAt     time.Time
	ackIdx    int    // position in Transport.acking, or -1
	stalled   bool   // a message was retransmitted since the last acknowledgement (Stalled)
	ackFrame  []byte // the frame of a standalone ACK

	stats PeerStats // the peer's counters (PeerStats); InFlight is unacked
}

// PeerStats counts what the transport did with one peer host: its share
// of Stats' Sent, Retransmits, Delivered, Refused and Returned, the
// payload bytes of the messages sent and delivered, and the messages in
// flight to it now. The counters stay with the host when a new table
// (SetPeers) moves its id.
type PeerStats struct {
	Sent           uint64 `json:"sent"`            // messages sent (DATA), each counted once however often it was sent
	SentBytes      uint64 `json:"sent_bytes"`      // their payload bytes
	Retransmits    uint64 `json:"retransmits"`     // DATA frames sent again (timer or NACK)
	Delivered      uint64 `json:"delivered"`       // messages from the host accepted by Deliver
	DeliveredBytes uint64 `json:"delivered_bytes"` // their payload bytes
	Refused        uint64 `json:"refused"`         // messages from the host refused by Deliver (NACKs sent)
	Returned       uint64 `json:"returned"`        // messages to the host given up on (unreachable, restarted)
	InFlight       int    `json:"in_flight"`       // messages to the host in flight now: send channels in use
}

// PeerStats returns the counters of host id, and whether it is in the
// host table.
func (t *Transport) PeerStats(id HostID) (PeerStats, bool) {
	p := t.Peer(id)
	if p == nil {
		return PeerStats{}, false
	}
	s := p.stats
	s.InFlight = p.unacked
	return s, true
}

// ID returns the host's id in the table it belongs to.
func (p *Peer) ID() HostID { return p.id }

// Epoch returns the incarnation of the host that the transport knows (0:
// none heard yet). The transport delivers messages only to that one
// (epochs.go): while it stays the same, everything acknowledged went to
// the same incarnation.
func (p *Peer) Epoch() uint32 { return p.epoch }

// Incarnation returns a number for the incarnation of the host that the
// transport knows (Epoch), 0 while none is: it changes each time Epoch
// does, to the next of a count the transport keeps over all its peers
// (1 to 255, then 1 again). So a host's number changes when it restarts,
// also across its row of the host table made again, unless the transport
// took in exactly a multiple of 255 new epochs meanwhile.
func (p *Peer) Incarnation() uint8 { return p.incarnation }

// SrcEpoch returns the epoch this transport names itself with to the peer
// (its frames' source epoch): Config.Epoch at first, another after a new
// incarnation toward the peer (epochs.go). The peer's Epoch for this host
// is this number once it has taken it in.
func (p *Peer) SrcEpoch() uint32 { return p.srcOut }

// Busy reports whether every channel to the host holds a message in
// flight, so that Send would return ErrBusy.
func (p *Peer) Busy() bool { return p.unacked == len(p.send) }

// Gone reports whether the host left the host table (SetPeers), so that
// Send would return ErrUnknownHost.
func (p *Peer) Gone() bool { return p.gone }

// Stalled reports whether a message to the host was sent again since the
// host last acknowledged one, or waited a retransmission time for the
// host to answer the handshake: it is slow, unreachable or refusing, and
// what waits to be sent to it may wait long.
func (p *Peer) Stalled() bool { return p.stalled }

// sendChannel is one entry of the send channel table.
type sendChannel struct {
	inUse bool
	// sent: the message in use was transmitted under the current
	// incarnations of both sides (epochs.go); in use and not sent, it
	// waits for them to be confirmed and nothing of it has left.
	sent    bool
	seq     uint16    // sequence number of the message in flight, or of the next one
	cookie  uint64    // the sender's cookie, given back by Returned
	stamp   uint32    // stamp of the current transmission, echoed by NACKs
	timed   bool      // heard and due are set (setTimers, send.go)
	heard   time.Time // first transmission or last valid NACK: GiveUpAfter counts from here
	due     time.Time // next retransmission
	retries int

	// hdr is the transport header of the message in flight, without
	// acknowledgements, and buf holds its payload after room for them
	// (load, send.go): the copy of the unacknowledged packet. frames are
	// the frames built from them for the current transmission, in the
	// backing buffer frameBuf. All are reused by the channel's next
	// message.
	hdr      [headerLen]byte
	compact  bool // the message goes as a compact cell (compact.go)
	buf      []byte
	frames   [][]byte
	frameBuf []byte
}

// recvChannel is one entry of the receive channel table.
type recvChannel struct {
	expect uint16 // sequence number of the next message to deliver
}

// newPeer returns a fresh row of the host table for id at mac: nothing
// heard from it yet, its frames to name this transport by its epoch (by
// a fresh one for a row made again), no message to leave before the
// handshake (epochs.go).
// maxHadRow bounds Transport.hadRow: a host table is at most MaxHosts
// rows, so only a stream of tables of made-up addresses (a mapper's
// messages are not authenticated) reaches it; every row made after that
// starts a new incarnation, as one made again does.
const maxHadRow = 1 << 16

func (t *Transport) newPeer(id HostID, mac net.HardwareAddr) *Peer {
	channels := t.cfg.Channels
	src := t.epoch
	_, again := t.hadRow[[6]byte(mac)]
	if len(t.hadRow) >= maxHadRow {
		again = true // not remembered: taken for a row made again, which costs a round trip, never a message
	} else {
		t.hadRow[[6]byte(mac)] = struct{}{}
	}
	if again {
		// The peer may hold the channels of the row this one replaces:
		// a new incarnation toward it makes both sides start again.
		src = t.freshEpoch(0)
	}
	p := &Peer{
		id:        id,
		srcOut:    src,
		dstIn:     src,
		mac:       append(net.HardwareAddr(nil), mac...),
		send:      make([]sendChannel, channels),
		recv:      make([]recvChannel, channels),
		activeIdx: -1,
		reasm:     cells.NewReassembler(cells.ReassemblerConfig{MaxSDU: headerLen + ackEntryLen*t.maxAcks + t.maxPL, MaxVCs: 4}),
		ackOn:     make([]bool, channels),
		ackSeq:    make([]uint16, channels),
		ackStamp:  make([]uint32, channels),
		ackList:   make([]uint8, 0, channels),
		ackIdx:    -1,
	}
	p.eth = t.eth
	copy(p.eth[:6], mac)
	if again {
		t.fresh(p)
	}
	return p
}

// occupy marks channel c of p in use and keeps the active list.
func (t *Transport) occupy(p *Peer, c *sendChannel) {
	c.inUse = true
	p.unacked++
	if p.unacked == 1 {
		p.activeIdx = len(t.active)
		t.active = append(t.active, p)
	}
}

// release frees channel c of p: the next message on it takes the next
// sequence number. A peer left with nothing unacknowledged leaves the
// active list.
func (t *Transport) release(p *Peer, c *sendChannel) {
	if !c.sent {
		p.waiting--
	}
	c.inUse, c.sent = false, false
	c.seq++
	if c.seq == 0 && t.aead != nil {
		t.renewWrapped(p)
	}
	c.retries = 0
	p.unacked--
	if p.unacked == 0 {
		i := p.activeIdx
		last := len(t.active) - 1
		t.active[i] = t.active[last]
		t.active[i].activeIdx = i
		t.active[last] = nil
		t.active = t.active[:last]
		p.activeIdx = -1
	}
}
