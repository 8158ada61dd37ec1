package transport

import (
	"crypto/aes"
	"crypto/cipher"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/nicfw/internal/fwerr"
)

// Specification constants.
const (
	// MaxChannels is the most logical channels per peer: the channel field
	// of the header is one byte.
	MaxChannels = 256
)

// Implementation defaults, used for the zero fields of a Config.
const (
	DefaultChannels        = 8
	DefaultRetransmitAfter = 5 * time.Millisecond
	DefaultGiveUpAfter     = 3 * time.Second
	DefaultVCI             = 32 // the first VCI that I.361 leaves to users
	// DefaultMaxPayload is the largest payload by default on links whose
	// frames carry less: an engine's medium message of 8 KB
	// (endpoint.MaxMedium) with room for its header and arguments. On a
	// link whose one frame carries more (an MTU past about 9 KB, a
	// multi-buffer link), the default is MaxPayloadLimit: a 64 KB message
	// then crosses in two frames, not eight.
	DefaultMaxPayload = 8192 + 512
)

// Errors. Test for them with errors.Is.
var (
	// ErrBusy: every channel to the destination has a message in flight.
	// Try again after Poll has taken acknowledgements in.
	ErrBusy = errors.New("nicfw: all channels to the destination are busy")
	// ErrUnreachable: the reason Returned gives for a message that was not
	// acknowledged within Config.GiveUpAfter.
	ErrUnreachable = errors.New("nicfw: destination unreachable")
	// ErrRestarted: the reason Returned gives for a message sent to a
	// peer under a pair of incarnations that changed before it was
	// acknowledged (epochs.go): the peer restarted, or started a new
	// incarnation toward this host. The new pair did not take it; the
	// old one may have.
	ErrRestarted = errors.New("nicfw: destination restarted")
	// ErrUnknownHost: the destination is not in the host table.
	ErrUnknownHost = errors.New("nicfw: unknown host")
	// ErrTooLarge: the payload does not fit in one frame (MaxPayload).
	ErrTooLarge = errors.New("nicfw: payload too large")
	// ErrConfig: New or AddPeer was given invalid settings. It is the
	// firmware's one configuration error (nicfw.ErrConfig).
	ErrConfig = fwerr.ErrConfig
)

// Config configures a Transport. Zero fields take the defaults.
type Config struct {
	// Channels is C, the number of stop-and-wait channels per peer
	// (1..MaxChannels; default DefaultChannels).
	Channels int
	// RetransmitAfter is how long a message waits for its ACK before it is
	// sent again (default DefaultRetransmitAfter).
	RetransmitAfter time.Duration
	// NackDelay is how long after a NACK the message is sent again
	// (default RetransmitAfter).
	NackDelay time.Duration
	// GiveUpAfter is how long a message is retried without any answer
	// before its destination counts as unreachable and the message is
	// returned (default DefaultGiveUpAfter).
	GiveUpAfter time.Duration
	// ScanInterval is the period of the timer scan (default
	// RetransmitAfter/4).
	ScanInterval time.Duration
	// AckDelay is how long an acknowledgement may wait for a DATA frame to
	// the same peer to carry it (piggy-backing) before it is sent in an ACK
	// frame of its own. An acknowledgement always waits at least until the
	// end of the Poll after the one that received the DATA frame, so that
	// a reply the application makes in between carries it; 0 means just
	// that. With a delay, half the channels of a peer owed an
	// acknowledgement send them at once (a one-way stream is not held up
	// by it). Negative: every DATA frame is acknowledged at the end of the
	// Poll that received it, nothing is piggy-backed.
	AckDelay time.Duration
	// AckSoonDelay is how long, at most, the acknowledgement of a message
	// whose receiver said AckSoon waits for a DATA frame to carry it: a
	// message that its receiver will likely follow with one of its own to
	// the sender (an AM-II reply, which its application follows with its
	// next request). The engine's application takes a while to answer a
	// message (a daemon's: a hand-off each way), more than the Poll that
	// AckNow waits, so without it the acknowledgement leaves in an ACK
	// frame of its own just before the request that could have carried
	// it. 0 or with no AckDelay: AckSoon is AckNow. Above AckDelay: AckDelay.
	// Negative is refused. (A daemon's configuration, nicfw/daemon, reads
	// 0 as daemon.DefaultReplyAckDelay and negative as 0 here; xam fw's
	// --reply-ack-delay 0 is negative there.)
	AckSoonDelay time.Duration
	// Unreliable turns reliability off, for measuring what it costs (the
	// LogP baseline of AM-II): Send transmits at once with no channel, no
	// copy kept and no retransmission, never reports ErrBusy, and the
	// receiver delivers what arrives, acknowledges nothing and drops what
	// Deliver refuses. A message is done once it has left: the next Poll
	// calls Acked for it. Both ends must agree.
	Unreliable bool
	// NoCompact sends every message as an AAL5 PDU, compact ones included
	// (compact.go), for measuring what compact cells change. Receivers
	// take both kinds whatever it says.
	NoCompact bool
	// MaxPayload is the largest payload Send accepts (at most
	// MaxPayloadLimit(Channels)). The default follows the link's MTU:
	// DefaultMaxPayload, or MaxPayloadLimit where one frame carries more
	// than DefaultMaxPayload. A message spans as many frames as it needs;
	// losing any of them loses the message. Hosts that talk must agree:
	// a receiver drops a message larger than its own MaxPayload.
	MaxPayload int
	// Clock is the time source of the timers (default the system clock).
	Clock clock.Clock
	// Epoch names this incarnation of the transport on the wire (epochs.go;
	// default a random non-zero number). Tests that restart a transport
	// set it to tell incarnations apart on purpose.
	Epoch uint32
	// Key, when set (16 or 32 bytes: AES-128 or AES-256), authenticates
	// every frame: the sender seals each with a trailer cell (a counter
	// and an AES-GMAC tag, auth.go) and the receiver drops a frame whose trailer
	// does not check (Stats.AuthFailed) before any of it takes effect. It
	// is one key for the transport's whole host table (a job's or a
	// cluster's), the same on every host: a keyed and an unkeyed host do
	// not talk. Frames carry a cell fewer, so that the trailer keeps them
	// within the MTU.
	Key []byte
	// EtherType of the frames (default cells.EtherType, 0x88B5).
	EtherType uint16
	// RxStamps reads every received frame's receive metadata (the NIC's
	// stamp that xam's metadata program puts in front of it:
	// loader.Config.RxMetadata) where the link lends it (a link with
	// Metadata, an AF_XDP socket), and counts it in Stats: frames with
	// metadata, those the NIC stamped, and the time from the NIC's stamp
	// to the transport's taking the frame.
	RxStamps bool
	// VPI and VCI of the circuit the transport's PDUs travel on (default
	// 0/DefaultVCI); compact cells (compact.go) travel on VPI/VCI+1.
	VPI, VCI uint16

	// Deliver receives a message from src, in order per channel ch and
	// exactly once. payload is valid only during the call. Returning false
	// refuses the message (the receive queue is full): the sender is sent a
	// NACK and retransmits later. Required.
	Deliver func(src HostID, ch int, payload []byte) (accept bool)
	// Acked learns that the message sent with cookie to dst was
	// acknowledged: delivered exactly once, its channel free again. It may
	// call Send. Optional.
	Acked func(dst HostID, cookie uint64)
	// Returned receives a message the transport gave up on, with the cookie
	// given to Send and the reason (ErrUnreachable, ErrRestarted). The channel is free
	// again when it runs, and it may call Send; payload is valid only
	// during the call and until it calls Send. Optional.
	Returned func(dst HostID, cookie uint64, payload []byte, reason error)
}

// Stats counts what a Transport did. The scan counters show its cost:
// ScanVisits grows with the peers that have unacknowledged messages, not
// with the size of the host table.
type Stats struct {
	Sent        uint64 // DATA frames sent for the first time
	Retransmits uint64 // DATA frames sent again (timer or NACK)
	Compact     uint64 // transmissions as compact cells (compact.go), retransmissions included
	LaneCells   uint64 // compact cells received by the compact lane (lane.go)
	LaneSends   uint64 // messages SendNow handed to the link at once, outside a pass (lane.go)
	Acked       uint64 // messages acknowledged: channels freed by an ACK
	Returned    uint64 // messages given up on (Returned called)

	Delivered  uint64 // messages accepted by Deliver
	Refused    uint64 // messages refused by Deliver (NACKs sent)
	Duplicates uint64 // DATA frames of the message delivered last on their channel (its ACK was lost): ACKed again

	NacksReceived uint64 // valid NACKs
	StaleAcks     uint64 // ACKs for no message in flight (duplicates, late)
	StaleNacks    uint64 // NACKs for another transmission, ignored

	Restarts uint64 // peers seen with a new epoch: restarted (epochs.go)
	// StaleEpoch counts frames dropped for their epochs: from a peer's
	// previous incarnation, or naming a destination epoch other than the
	// one asked of the peer (this transport's previous incarnation's, or
	// one renewed since).
	StaleEpoch uint64
	// Unconfirmed counts frames that claimed a new epoch for their peer
	// without answering this transport's challenge for it: dropped, the
	// peer's record unchanged (epochs.go).
	Unconfirmed uint64
	// ZeroEpoch counts frames with destination epoch 0, refused: only the
	// RESETs a peer sends to start the handshake before it has heard
	// this incarnation carry 0 (those are answered, not counted), and an
	// unreliable transport's DATA.
	ZeroEpoch  uint64
	ResetsSent uint64 // RESET frames sent (epochs.go)

	// OutOfWindow counts DATA frames whose sequence number is neither the
	// channel's expected one nor one behind it that a late copy could
	// carry: no frame of the peer can, so the frame is forged. It is
	// dropped whole, and the peer's destination epoch renewed.
	OutOfWindow uint64
	// ForgedAcks counts frames with an acknowledgement (header or entry)
	// of a message that no send channel has in flight or had
	// acknowledged lately: forged, dropped whole, and the peer's
	// destination epoch renewed.
	ForgedAcks uint64
	// Late counts DATA frames behind the receive window: late copies of
	// messages delivered and acknowledged already, dropped unanswered.
	Late uint64
	// Renewals counts the destination epochs renewed (a fresh random
	// number asked of a peer) after a forged frame named the old one.
	Renewals uint64
	// Reincarnations counts the new incarnations started toward a peer
	// (epochs.go): after a give-up, or when a late frame of the peer's
	// previous incarnation shows that the epoch on record may be a dead
	// one's.
	Reincarnations uint64

	Scans      uint64 // timer scans run
	ScanVisits uint64 // peers visited by them

	AcksPiggybacked uint64 // acknowledgements carried by DATA frames
	AckFrames       uint64 // ACK frames sent (each may carry several)
	Batches         uint64 // batches of frames handed to the link at the end of a pass
	BatchFrames     uint64 // frames in them: BatchFrames/Batches frames per system call
	Packed          uint64 // PDUs sent in a frame with others to the same host (pack)
	Abandoned       uint64 // partial messages dropped: a frame of theirs was lost

	NotForUs      uint64 // frames addressed to another MAC
	UnknownSource uint64 // frames from a MAC not in the host table
	BadFrames     uint64 // frames that failed framing, cell, AAL5 or header checks
	// AuthFailed counts frames dropped for authentication (auth.go):
	// without a valid trailer under Config.Key, or, without a key, with a
	// trailer (a keyed host's).
	AuthFailed uint64

	// With Config.RxStamps: RxMeta counts frames that carried xam's
	// receive metadata, RxStamped those of them the NIC stamped, and
	// RxStampLagNs sums, over the stamped ones, the system clock when the
	// transport took the frame less the NIC's stamp (RxStampLagNs /
	// RxStamped: the receive path's mean time, where phc2sys keeps the
	// NIC's clock on the system's).
	RxMeta       uint64
	RxStamped    uint64
	RxStampLagNs uint64
}

// Transport is the reliable transport of one host on one link. See the
// package documentation for the protocol and the threading contract.
type Transport struct {
	link afxdp.Link
	meta interface {
		Metadata(frame []byte, n int) []byte
	} // the link's, with Config.RxStamps
	cfg Config
	clk clock.Clock
	mac [6]byte
	seg *cells.Segmenter
	vc  cells.VC
	eth [ethHeaders]byte // template: dst filled per peer (Peer.eth)

	compactHdr [cells.HeaderSize]byte // the ATM header of compact cells (compact.go)
	compactKey uint32                 // its GFC, VPI and VCI bits, as receive tells compact cells apart
	maxPL      int
	frameRoom  int // the payload one DATA frame carries (FrameRoom)
	// incarnations counts the peers' epochs taken in (Peer.Incarnation).
	incarnations uint8
	// pairBuf holds the payload of a compact message of two cells while
	// Deliver has it (compact.go).
	pairBuf [CompactMax]byte

	perFrame  int  // cells per frame
	maxAcks   int  // acknowledgements one DATA frame may carry
	ackOneMax int  // acknowledgements one ACK frame (one frame) may carry
	ackEarly  int  // acknowledgements owed to a peer that go at once, AckDelay or not: half its channels
	ackNow    bool // Deliver called AckNow for the message it was given
	ackSoon   bool // Deliver called AckSoon for the message it was given
	// hadRow holds the addresses rows of the host table were made for
	// (up to maxHadRow): a row made again for one starts a new
	// incarnation (newPeer).
	hadRow map[[6]byte]struct{}

	ackCompactMax int // acknowledgements the frame of a compact cell may carry

	peers  []*Peer // by HostID (nil: not in the table)
	byMAC  map[[6]byte]*Peer
	active []*Peer // peers with unacknowledged messages (channels.go)
	acking []*Peer // peers owed acknowledgements (acks.go)

	epoch     uint32 // this incarnation's (epochs.go)
	lastStamp uint32
	nextScan  time.Time
	polls     uint64
	sysClock  bool    // the clock is the system's (receive.go, "The clock")
	idle      int     // Polls since the timer scan was last checked
	pass      int     // depth of BeginPass
	tailDst   [6]byte // the destination of the pass's last whole-PDU frame
	tailCells int     // cells of the frame that pack fills for tailDst (0: none)
	tnow      time.Time
	nowOK     bool  // tnow is this pass's time
	last      *Peer // the source of the last frame received
	rxPeer    *Peer // the source of the frame being received (onPDU)
	bad       bool  // the frame being received held a bad PDU or cell

	// prf computes the challenge a peer's new epoch must answer
	// (challenge, epochs.go): AES under a key drawn at New, prfBuf its
	// block.
	prf    cipher.Block
	prfBuf [aes.BlockSize]byte

	// Frame authentication under Config.Key (auth.go); aead nil without.
	aead   cipher.AEAD
	trail  int            // bytes of trailer per frame: trailerLen with a key, else 0
	sealed uint64         // the counter of the last frame sealed
	nonce  [nonceLen]byte // the end of this host's address, then the counter (seal)
	rnonce [nonceLen]byte // the same for the frame being received (open)
	// trailerHdr is the ATM header of trailer cells, trailerWord its
	// first four bytes, as receive tells them (auth.go).
	trailerHdr  [cells.HeaderSize]byte
	trailerWord uint32

	uc      sendChannel // the frames of unreliable sends
	scratch []byte      // an SDU with acknowledgements, being built
	cellBuf []byte      // the cells of a message that spans frames

	out       []outFrame // frames sent in this pass, for the link in one batch (output)
	left      []sentMsg  // unreliable messages sent since the last Poll, for Acked
	leftSpare []sentMsg
	sendList  [][]byte    // the batch as handed to the link (pack)
	packs     []packFrame // the frames being packed
	packBufs  [][]byte    // their buffers
	rx        [][]byte    // receive batch
	tx        [][]byte    // control frames (ACK, NACK, RESET) waiting to be sent
	ctl       [][]byte    // their buffers
	ctlHeld   int         // the first ctlHeld of ctl are in the pass's batch (flush)
	stats     Stats
}

// New returns a Transport on link. The transport does not own the link:
// closing it is the caller's business.
func New(link afxdp.Link, cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(link); err != nil {
		return nil, err
	}
	seg, err := cells.NewSegmenter(cells.SAR{VPI: cfg.VPI, VCI: cfg.VCI})
	if err != nil {
		return nil, fmt.Errorf("%w: circuit %d/%d: %w", ErrConfig, cfg.VPI, cfg.VCI, err)
	}
	if cfg.VCI == math.MaxUint16 {
		return nil, fmt.Errorf("%w: VCI %d leaves no VCI+1 for compact cells", ErrConfig, cfg.VCI)
	}
	var aead cipher.AEAD
	trail := 0
	if cfg.Key != nil {
		var err error
		if aead, err = newFrameAEAD(cfg.Key); err != nil {
			return nil, err
		}
		cfg.Key = append([]byte(nil), cfg.Key...)
		trail = trailerLen
	}
	perFrame := cells.CellsPerFrame(link.MTU())
	if trail > 0 {
		perFrame-- // the trailer cell's room (auth.go)
	}
	oneFrame := perFrame*cells.PayloadSize - cells.TrailerSize - headerLen // an ACK's room for entries
	if oneFrame < ackEntryLen {
		return nil, fmt.Errorf("%w: link MTU %d carries no transport frame", ErrConfig, link.MTU())
	}
	frameRoom := oneFrame - ackEntryLen*cfg.Channels // a DATA frame's room with every acknowledgement
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
		if frameRoom > DefaultMaxPayload {
			cfg.MaxPayload = MaxPayloadLimit(cfg.Channels)
		}
	}
	prf, err := newChallengePRF()
	if err != nil {
		return nil, err
	}
	t := &Transport{
		aead:      aead,
		trail:     trail,
		sealed:    rand.Uint64(), // a fresh start per transport (auth.go)
		prf:       prf,
		lastStamp: rand.Uint32(), // stamps a forger cannot count from 0
		link:      link,
		cfg:       cfg,
		clk:       cfg.Clock,
		seg:       seg,
		vc:        cells.VC{VPI: cfg.VPI, VCI: cfg.VCI},
		maxPL:     cfg.MaxPayload,
		frameRoom: max(frameRoom, 1),
		perFrame:  perFrame,
		maxAcks:   cfg.Channels,
		ackOneMax: min(oneFrame/ackEntryLen, cfg.Channels),
		ackEarly:  max(cfg.Channels/2, 1),
		byMAC:     make(map[[6]byte]*Peer),
		hadRow:    make(map[[6]byte]struct{}),
		epoch:     cfg.Epoch,
	}
	// A compact message's frame: its cells (two at most), and an ACK PDU
	// in the cells left.
	if room := (perFrame-compactCells)*cells.PayloadSize - cells.TrailerSize - headerLen; room >= 0 {
		t.ackCompactMax = min(room/ackEntryLen+1, cfg.Channels)
	}
	if err := t.makeHeaders(); err != nil {
		return nil, err
	}
	if m, ok := link.(interface {
		Metadata(frame []byte, n int) []byte
	}); ok && cfg.RxStamps {
		t.meta = m
	}
	t.makeBuffers(max(link.BatchSize(), 1))
	return t, nil
}

// withDefaults returns c with its zero fields set to their defaults, and
// an epoch drawn at random if it has none.
func (c Config) withDefaults() Config {
	if c.Channels == 0 {
		c.Channels = DefaultChannels
	}
	if c.RetransmitAfter == 0 {
		c.RetransmitAfter = DefaultRetransmitAfter
	}
	if c.NackDelay == 0 {
		c.NackDelay = c.RetransmitAfter
	}
	if c.GiveUpAfter == 0 {
		c.GiveUpAfter = DefaultGiveUpAfter
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = c.RetransmitAfter / 4
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.EtherType == 0 {
		c.EtherType = cells.EtherType
	}
	if c.VPI == 0 && c.VCI == 0 {
		c.VCI = DefaultVCI
	}
	for c.Epoch == 0 {
		c.Epoch = rand.Uint32()
	}
	return c
}

// check refuses a configuration, defaults filled in, that New cannot run
// on link, with an ErrConfig. What only building the transport tells (the
// circuit, the key, the room in a frame) New checks as it builds.
func (c Config) check(link afxdp.Link) error {
	switch {
	case link == nil:
		return fmt.Errorf("%w: no link", ErrConfig)
	case c.Channels < 1 || c.Channels > MaxChannels:
		return fmt.Errorf("%w: %d channels, want 1..%d", ErrConfig, c.Channels, MaxChannels)
	case c.RetransmitAfter < 0 || c.NackDelay < 0 || c.GiveUpAfter < 0 || c.ScanInterval < 0 || c.AckSoonDelay < 0:
		return fmt.Errorf("%w: negative duration", ErrConfig)
	case c.MaxPayload < 0 || c.MaxPayload > MaxPayloadLimit(c.Channels):
		return fmt.Errorf("%w: MaxPayload %d, want 1..%d", ErrConfig, c.MaxPayload, MaxPayloadLimit(c.Channels))
	case c.Deliver == nil:
		return fmt.Errorf("%w: no Deliver callback", ErrConfig)
	case len(link.HardwareAddr()) != 6:
		return fmt.Errorf("%w: link address %v is not a MAC", ErrConfig, link.HardwareAddr())
	}
	return nil
}

// newChallengePRF returns the block cipher under which the transport
// computes the challenges a peer's new epoch must answer (challenge,
// epochs.go), under a key drawn here that never leaves the transport.
func newChallengePRF() (cipher.Block, error) {
	var key [16]byte
	if _, err := crand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("nicfw: transport: challenge key: %w", err)
	}
	prf, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("nicfw: transport: challenge key: %w", err)
	}
	return prf, nil
}

// makeHeaders makes the headers the transport stamps on what it sends,
// and receive compares with what comes: the ATM headers of compact cells
// (compact.go) and trailer cells (auth.go), the Ethernet and frame header
// template, and the start of the nonce.
func (t *Transport) makeHeaders() error {
	cfg := &t.cfg
	hdr := cells.Cell(make([]byte, cells.CellSize))
	if err := hdr.Encode(cells.UNI, cells.Fields{VPI: cfg.VPI, VCI: cfg.VCI + 1, PTI: cells.PTIEndOfMessage}); err != nil {
		return fmt.Errorf("%w: circuit %d/%d: %w", ErrConfig, cfg.VPI, cfg.VCI+1, err)
	}
	copy(t.compactHdr[:], hdr)
	t.compactKey = binary.BigEndian.Uint32(hdr) >> 4
	if err := hdr.Encode(cells.UNI, cells.Fields{VPI: cfg.VPI, VCI: cfg.VCI, PTI: trailerPTI}); err != nil {
		return fmt.Errorf("%w: circuit %d/%d: %w", ErrConfig, cfg.VPI, cfg.VCI, err)
	}
	copy(t.trailerHdr[:], hdr)
	t.trailerWord = binary.BigEndian.Uint32(hdr)
	_, t.sysClock = cfg.Clock.(clock.System)
	copy(t.mac[:], t.link.HardwareAddr())
	copy(t.eth[6:12], t.mac[:])
	copy(t.nonce[:macTail], t.mac[6-macTail:])
	t.eth[12], t.eth[13] = byte(cfg.EtherType>>8), byte(cfg.EtherType)
	t.eth[14] = cells.FrameVersion
	return nil
}

// makeBuffers makes the batches of batch frames that Poll receives and
// the control frames (ACK, NACK, RESET) it sends, so that neither
// allocates.
func (t *Transport) makeBuffers(batch int) {
	t.rx = make([][]byte, batch)
	t.ctl = make([][]byte, batch)
	ctlLen := frameLen(resetLen) + t.trail
	for i := range t.ctl {
		t.ctl[i] = make([]byte, ctlLen)
	}
	t.tx = make([][]byte, 0, batch)
}

// frameLen is the length of a frame that carries a PDU of n bytes whole.
func frameLen(n int) int { return cells.FrameLen(cells.CellCount(headerLen + n)) }

// AddPeer enters a host in the host table: messages to id go to mac, and
// frames from mac come from id. Neither may be in the table already.
func (t *Transport) AddPeer(id HostID, mac net.HardwareAddr) error {
	if len(mac) != 6 {
		return fmt.Errorf("%w: host %d: address %v is not a MAC", ErrConfig, id, mac)
	}
	key := [6]byte(mac)
	if t.Peer(id) != nil {
		return fmt.Errorf("%w: host %d is in the table already", ErrConfig, id)
	}
	if _, ok := t.byMAC[key]; ok {
		return fmt.Errorf("%w: address %v is in the table already", ErrConfig, mac)
	}
	p := t.newPeer(id, mac)
	if int(id) >= len(t.peers) {
		t.peers = append(t.peers, make([]*Peer, int(id)+1-len(t.peers))...)
	}
	t.peers[id] = p
	t.byMAC[key] = p
	t.hello(p) // the handshake starts now (epochs.go); a lost one is asked again by the first message
	return nil
}

// SetPeers replaces the host table with hosts (id -> MAC; this host's own
// MAC, if listed, is skipped), as when a mapper distributes a new table. A
// host that stays, known by its MAC, keeps its channels, sequence numbers
// and messages in flight, under its new id if its id moved. A host that
// left has its messages in flight given up at once (Returned with
// ErrUnreachable, under its old id), and its acknowledgements owed are
// dropped; frames from it are then from an unknown source.
func (t *Transport) SetPeers(hosts map[HostID]net.HardwareAddr) error {
	byMAC := make(map[[6]byte]*Peer, len(hosts)) // nil until the second pass
	top := -1
	for id, mac := range hosts {
		if len(mac) != 6 {
			return fmt.Errorf("%w: host %d: address %v is not a MAC", ErrConfig, id, mac)
		}
		key := [6]byte(mac)
		if key == t.mac {
			continue
		}
		if _, dup := byMAC[key]; dup {
			return fmt.Errorf("%w: address %v is in the table twice", ErrConfig, mac)
		}
		byMAC[key] = nil
		top = max(top, int(id))
	}
	peers := make([]*Peer, top+1)
	var fresh []*Peer // rows made now: their handshakes start
	for id, mac := range hosts {
		key := [6]byte(mac)
		if key == t.mac {
			continue
		}
		p := t.byMAC[key]
		if p == nil {
			p = t.newPeer(id, mac)
			fresh = append(fresh, p)
		}
		p.id = id
		peers[id], byMAC[key] = p, p
	}
	var left []*Peer
	for key, p := range t.byMAC {
		if _, stays := byMAC[key]; !stays {
			left = append(left, p)
		}
	}
	t.peers, t.byMAC, t.last = peers, byMAC, nil
	for _, p := range left {
		p.gone = true
		if len(p.ackList) > 0 {
			for _, ch := range p.ackList {
				p.ackOn[ch] = false
			}
			t.dropAcks(p, len(p.ackList))
		}
		for i := range p.send {
			if p.send[i].inUse {
				t.giveUp(p, &p.send[i])
			}
		}
	}
	for _, p := range fresh {
		t.hello(p)
	}
	return nil
}

// Peer returns host id's row of the host table, or nil.
func (t *Transport) Peer(id HostID) *Peer {
	if int(id) < len(t.peers) {
		return t.peers[id]
	}
	return nil
}

// MaxPayload returns the largest payload Send accepts.
func (t *Transport) MaxPayload() int { return t.maxPL }

// FrameRoom returns the largest payload that travels in one frame whatever
// acknowledgements ride with it: a sender that cuts a stream into
// payloads of multiples of it fills every frame.
func (t *Transport) FrameRoom() int { return t.frameRoom }

// MaxPayloadLimit returns the largest MaxPayload a transport of channels
// channels per peer takes: an AAL5 SDU (cells.MaxSDU) less the header and
// an acknowledgement for every channel.
func MaxPayloadLimit(channels int) int {
	return cells.MaxSDU - headerLen - ackEntryLen*max(channels, 1)
}

// Unacked returns the number of messages to dst in flight.
func (t *Transport) Unacked(dst HostID) int {
	if p := t.Peer(dst); p != nil {
		return p.unacked
	}
	return 0
}

// Hosts returns the ids of the hosts in the table.
func (t *Transport) Hosts() []HostID {
	var ids []HostID
	for id, p := range t.peers {
		if p != nil {
			ids = append(ids, HostID(id))
		}
	}
	return ids
}

// Config returns the transport's configuration, defaults filled in.
func (t *Transport) Config() Config { return t.cfg }

// HardwareAddr returns the MAC address of the transport's link.
func (t *Transport) HardwareAddr() net.HardwareAddr { return net.HardwareAddr(t.mac[:]) }

// InFlight reports whether any message waits for its acknowledgement:
// work that only time moves on (retransmission, giving up).
func (t *Transport) InFlight() bool { return len(t.active) > 0 }

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats { return t.stats }

// nextStamp returns the stamp of a transmission: a number no earlier
// transmission of this transport had (a counter; NACKs echo it).
func (t *Transport) nextStamp() uint32 {
	t.lastStamp++
	return t.lastStamp
}
