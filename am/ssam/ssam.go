package ssam

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/internal/clock"
)

// SSAM's Active Messages over a driver.Device (von Eicken et al., section
// 3; docs/wire.md): the messages and their tags here; Sessions, how a
// requester's session begins, at the top of session.go; Reliability, the
// window and its retransmission, at the top of reliability.go.
//
// Messages. Every message starts with SSAM's 8-byte header: 16 bits of flow
// control, the 32-bit handler index, and (in a single cell) the data length
// and CRC-10. A message with at most 40 data bytes is one cell on the
// connection's short VC; a longer one is an AAL5 PDU on its bulk VC whose
// SDU is the same header (length and CRC-10 zero: AAL5's own length and
// CRC-32 cover it) followed by the data.
//
// Flow control, 16 bits:
//
//	 15 14 13        7 6         0
//	+-----+-----------+-----------+
//	|kind |    seq    |    ack    |
//	+-----+-----------+-----------+
//
// kind is request (0), reply (1), ack (2) or sync (3). A request carries its
// sequence number and, in ack, the low 7 bits of its session's tag (see
// Session tags); a reply or an ack carries the sequence number of the
// request it answers and, in ack, the responder's cumulative
// acknowledgement (the next request sequence number it expects, seq+1).
// Sequence numbers count modulo 128.
//
// The handler field of a request, a reply and an ack is two halves: the
// top 16 bits are the high bits of the session's tag, the low 16 bits the
// handler index (so an endpoint has at most MaxHandlers handlers). An ack's
// index is 0, or rejectIndex when the request named no handler of the
// responder's: it ran nothing, and the requester hands it to its error
// handler (OnReturn, Stats.Returned) instead of taking it for done.
//
// Session tags. Every request and answer of a requester's session carries
// a 23-bit tag derived from the session number (sessionTag), and a message
// whose tag is not the session's is refused (Stats.Forged), as is an answer
// whose acknowledgement is not seq+1 or an ack of another index. A forger
// on the wire who sends cells from the peer's MAC on the connection's
// circuits without knowing the session (random cells, made-up messages
// with good checksums, the first cells of PDUs that never end) so passes
// for a real message with a chance of about 2^-32 per cell, where before a
// made-up request carrying the next sequence number (one cell in 512 with
// a good CRC-10) ran in place of the real one: the real request was then
// taken for its duplicate and answered with the forgery's saved answer, "no
// such handler". Likewise an answer of the right sequence number no longer
// stands for the real one, and a late message of an earlier session is not
// taken for one of the current session. The tag keeps out blind forgeries;
// it authenticates nothing against a forger who reads the wire.
const (
	kindRequest = 0
	kindReply   = 1
	kindAck     = 2
	kindSync    = 3

	// The ack field of a sync: asking, or answering.
	syncAsk    = 0
	syncAnswer = 1

	seqBits = 7
	seqMod  = 1 << seqBits
	seqMask = seqMod - 1

	// MaxWindow is the largest window the 7-bit sequence numbers allow
	// (the sender's and receiver's windows must not overlap).
	MaxWindow = seqMod/2 - 1

	// DefaultGiveUp is how long Request waits, by default, for room in a
	// full window before it reports the peer unresponsive.
	DefaultGiveUp = 5 * time.Second

	// MaxShort is the data a single-cell message carries.
	MaxShort = cells.SSAMDataSize
	// MaxBulk is the most data a message carries: an AAL5 SDU less the
	// 8-byte SSAM header.
	MaxBulk = cells.MaxSDU - cells.SSAMHeaderSize

	// MaxHandlers is the most handlers an endpoint registers: indices run
	// from 0 to MaxHandlers-1, the low 16 bits of the handler field (the
	// top 16 carry the session's tag; 0xFFFF is an ack's rejectIndex).
	MaxHandlers = 1<<16 - 1

	// rejectIndex is the handler index of an ack that answers a request
	// naming no handler of the responder's: the request ran nothing.
	rejectIndex = 0xffff

	// tagLoBits of a session's tag go in a request's ack field, the rest
	// in the top of the handler field.
	tagLoBits = seqBits
	tagLoMask = 1<<tagLoBits - 1
	indexBits = 16
	indexMask = 1<<indexBits - 1
)

// sessionTag returns the 23-bit tag of session number session that every
// request and answer of the session carries (Session tags): a hash of it,
// never 0, so that a cell of zeros never carries a session's tag.
func sessionTag(session uint32) uint32 {
	t := (session * 0x9e3779b1) >> (32 - tagLoBits - indexBits)
	if t == 0 {
		t = 1
	}
	return t
}

// handlerField returns the handler field of a request or answer of the
// session tagged tag naming handler index index.
func handlerField(tag, index uint32) uint32 {
	return tag>>tagLoBits<<indexBits | index&indexMask
}

// fieldTag returns the tag a request's handler and ack fields carry.
func fieldTag(handler uint32, ack uint8) uint32 {
	return handler>>indexBits<<tagLoBits | uint32(ack)&tagLoMask
}

func flowWord(kind, seq, ack uint8) uint16 {
	return uint16(kind)<<14 | uint16(seq&seqMask)<<7 | uint16(ack&seqMask)
}

func splitFlow(f uint16) (kind, seq, ack uint8) {
	return uint8(f >> 14), uint8(f>>7) & seqMask, uint8(f) & seqMask
}

// Errors of the package. Test for them with errors.Is.
var (
	// ErrDiscipline: a handler broke the request/reply discipline (a
	// request handler sends at most one reply and no request; a reply
	// handler sends nothing; no handler polls, waits or closes).
	ErrDiscipline = errors.New("ssam: request/reply discipline violated")
	// ErrTooLarge: a message with more data than the endpoint carries
	// (Config.MaxMessage).
	ErrTooLarge = errors.New("ssam: message too large")
	// ErrBadDest: a connection index the device does not have.
	ErrBadDest = errors.New("ssam: no such destination")
	// ErrNoHandler: a message names a handler index of MaxHandlers or
	// more, which no endpoint has.
	ErrNoHandler = errors.New("ssam: no such handler")
	// ErrTimeout: a request found no room in the window for the
	// configured give-up time (the peer does not answer), or Drain's
	// requests were not answered in time.
	ErrTimeout = errors.New("ssam: peer does not answer")
	// ErrConfig: a configuration out of range, or a device whose send
	// areas do not hold it.
	ErrConfig = errors.New("ssam: invalid configuration")
	// ErrConflict: Handle at an index that has a handler already.
	ErrConflict = errors.New("ssam: conflicting handler registration")
	// ErrClosed: the endpoint was closed (Endpoint.Close).
	ErrClosed = errors.New("ssam: endpoint closed")
)

// HandlerID names a handler of an endpoint: the index that a message
// carries in the low 16 bits of its handler field.
type HandlerID uint32

// Handler is an Active Message handler. data aliases the receive buffer and
// is valid only until the handler returns. A request handler may send one
// reply with t.Reply; a reply handler sends nothing.
type Handler func(t *Token, data []byte)

// Token identifies the message a handler runs for. It is valid only while
// the handler runs.
type Token struct {
	s       *Endpoint
	conn    int
	seq     uint8
	request bool
	replied bool
}

// Source returns the connection the message came from: the index that
// Request takes as its destination to answer it with a request of its
// own.
func (t *Token) Source() int { return t.conn }

// IsRequest reports whether the handler runs for a request.
func (t *Token) IsRequest() bool { return t.request }

// Reply sends the reply to the request the handler runs for, naming the
// requester's handler h. It may be called once, in a request handler only.
func (t *Token) Reply(h HandlerID, data []byte) error {
	switch {
	case !t.request:
		return fmt.Errorf("%w: a reply handler may not send", ErrDiscipline)
	case t.replied:
		return fmt.Errorf("%w: a request handler sends at most one reply", ErrDiscipline)
	}
	if err := t.s.checkLen(len(data)); err != nil {
		return err
	}
	if err := checkHandler(h); err != nil {
		return err
	}
	t.replied = true
	return t.s.answer(t.conn, t.seq, kindReply, uint32(h), data)
}

// Config configures an SSAM endpoint.
type Config struct {
	Window  int           // outstanding requests per connection (W); default 8, at most MaxWindow
	Timeout time.Duration // retransmission timeout; default 2 ms
	// Batch, above 1, coalesces single-cell messages: requests wait in
	// their slots until Batch are pending, the window fills, or the
	// endpoint polls or flushes, and go out packed in frames by one
	// SendBatch trap; answers to the requests one poll delivers go out the
	// same way. 0 or 1 sends each message at once (SSAM's write-read trap).
	Batch      int
	GiveUp     time.Duration // how long Request waits for room in the window; default 5 s
	MaxMessage int           // longest message data in bytes; default 8192, at most MaxBulk
	Clock      clock.Clock   // default the system clock
}

// Filled returns the configuration with its defaults filled in, or an
// error if it is out of range.
func (c Config) Filled() (Config, error) {
	err := c.fill()
	return c, err
}

func (c *Config) fill() error {
	if c.Window == 0 {
		c.Window = 8
	}
	if c.Window < 1 || c.Window > MaxWindow {
		return fmt.Errorf("%w: window %d out of range [1, %d]", ErrConfig, c.Window, MaxWindow)
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Millisecond
	}
	if c.GiveUp == 0 {
		c.GiveUp = DefaultGiveUp
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = 8192
	}
	if c.MaxMessage < MaxShort || c.MaxMessage > MaxBulk {
		return fmt.Errorf("%w: MaxMessage %d out of range [%d, %d]", ErrConfig, c.MaxMessage, MaxShort, MaxBulk)
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Batch < 0 || c.Batch > c.Window {
		return fmt.Errorf("%w: batch %d out of range [0, window %d]", ErrConfig, c.Batch, c.Window)
	}
	return nil
}

// Stats counts what an SSAM endpoint did.
type Stats struct {
	Requests      uint64 // requests sent (first transmissions)
	Replies       uint64 // replies sent
	Acks          uint64 // explicit acks sent
	Retransmits   uint64 // requests sent again after a timeout
	Resent        uint64 // saved answers sent again for duplicate requests
	Handled       uint64 // request handlers run
	ReplyHandled  uint64 // reply handlers run
	DupRequests   uint64 // duplicate requests recognised (handler not run)
	DupAnswers    uint64 // answers dropped: already handled, or not the oldest outstanding
	OutOfOrder    uint64 // requests dropped for arriving ahead of the next expected
	BadCells      uint64 // cells dropped: CRC-10 or length
	Syncs         uint64 // syncs sent before a connection's first request or its first answer (sent again included)
	Sessions      uint64 // requester sessions begun by a peer's sync and first request (as responder)
	BadPDUs       uint64 // bulk PDUs dropped by reassembly (CRC-32, lost cells, ...), or too short for the header
	HandlerErrors uint64 // messages for a handler index with no handler
	Returned      uint64 // own requests the responder answered "no such handler" (OnReturn)
	// Forged counts messages refused for not being of the connection's
	// session: a request or answer with another session's tag, an answer
	// whose acknowledgement is not its sequence number plus one, an ack of
	// another handler index (Session tags). A forger's, or a late one of
	// an earlier session.
	Forged uint64
}

// conn is the per-connection protocol state.
type conn struct {
	// Requester.
	next, base uint8 // next sequence number to use; oldest unanswered
	window     []outstanding
	synced     bool      // the responder follows this endpoint's session
	syncing    bool      // a sync is out, unanswered
	syncAt     time.Time // when the timers first saw it unanswered, or sent it again
	answered   bool      // an answer of this session has come: no more syncs
	// Responder.
	expected  uint8  // next request sequence number to deliver
	session   uint32 // the requester session it follows; 0: none yet
	tag       uint32 // sessionTag(session); 0: none yet
	announced uint32 // a session announced by a sync, followed from its first request; 0: none
	annTag    uint32 // sessionTag(announced)
	annSeq    uint8  // the sequence number of the announced session's first request
	answers   []saved
	reasm     *cells.Reassembler
	// Batching: single-cell requests written but not sent, from sequence
	// number pendFrom; single-cell answers to send at the end of the poll.
	pending  int
	pendFrom uint8
	answerQ  []uint8
}

// Endpoint is an SSAM Active Messages endpoint on a device: one per
// process, with a connection per peer as the device was opened. It is not
// safe for concurrent use: like SSAM it is driven by one thread that sends
// and polls.
type Endpoint struct {
	dev      *driver.Device
	cfg      Config
	per      int // send slots per message buffer
	ring     int // buffers per region (bufferRing of the window)
	handlers []Handler
	conns    []conn
	depth    int    // handlers running (0 or 1: handlers do not poll)
	tok      Token  // the running handler's token (handlers do not nest)
	polls    uint   // Poll calls, for running the timers every timerPolls
	session  uint32 // this endpoint's session number as requester, never 0
	tag      uint32 // sessionTag(session), carried by its requests
	onReturn func(Returned)
	stats    Stats
	ownDev   bool // Open made dev: Close closes it
	closed   bool
}

// New returns an endpoint on dev. The device's send areas must hold
// SendSlots(cfg.Window, cfg.MaxMessage) slots.
func New(dev *driver.Device, cfg Config) (*Endpoint, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Endpoint{dev: dev, cfg: cfg, per: SlotsPerMessage(cfg.MaxMessage), ring: bufferRing(cfg.Window),
		conns: make([]conn, dev.NumConns()), session: rand.Uint32() | 1}
	s.tag = sessionTag(s.session)
	need := layoutSlots(cfg.Window, s.per) * cells.PayloadSize
	for i := range s.conns {
		if got := len(dev.SendArea(i)); got < need {
			return nil, fmt.Errorf("%w: connection %d's send area is %d bytes; window %d of %d-byte messages needs %d (driver.Config.SendSlots >= %d)",
				ErrConfig, i, got, cfg.Window, cfg.MaxMessage, need, SendSlots(cfg.Window, cfg.MaxMessage))
		}
		s.conns[i] = conn{
			window:  make([]outstanding, s.ring),
			answers: make([]saved, s.ring),
			reasm:   cells.NewReassembler(cells.ReassemblerConfig{MaxSDU: cells.SSAMHeaderSize + cfg.MaxMessage, MaxVCs: 2, Resync: true}),
			answerQ: make([]uint8, 0, s.ring),
		}
	}
	return s, nil
}

// Register adds a handler at the lowest index above every index in use
// and returns it, the number that names it on the wire. Senders must then
// know the order of registration; Handle, with indices the application
// chooses, spares them that. An endpoint holds at most MaxHandlers
// handlers: past them, Register adds nothing and returns MaxHandlers, an
// index that every send refuses with ErrNoHandler.
func (ep *Endpoint) Register(h Handler) HandlerID {
	if len(ep.handlers) >= MaxHandlers {
		return MaxHandlers
	}
	ep.handlers = append(ep.handlers, h)
	return HandlerID(len(ep.handlers) - 1)
}

// Handle makes h the handler of index id, which senders name in their
// messages: an index the application chooses, so that senders need not
// know the order in which it registers its handlers. An id of MaxHandlers
// or more is ErrNoHandler, one that has a handler already ErrConflict, a
// nil h ErrConfig.
func (ep *Endpoint) Handle(id HandlerID, h Handler) error {
	switch {
	case ep.closed:
		return ErrClosed
	case h == nil:
		return fmt.Errorf("%w: no handler", ErrConfig)
	}
	if err := checkHandler(id); err != nil {
		return err
	}
	if int(id) < len(ep.handlers) && ep.handlers[id] != nil {
		return fmt.Errorf("%w: handler %d is taken", ErrConflict, id)
	}
	if int(id) >= len(ep.handlers) {
		ep.handlers = append(ep.handlers, make([]Handler, int(id)+1-len(ep.handlers))...)
	}
	ep.handlers[id] = h
	return nil
}

// checkHandler refuses a handler index that the handler field cannot
// carry.
func checkHandler(h HandlerID) error {
	if h >= MaxHandlers {
		return fmt.Errorf("%w: index %d (indices run to %d)", ErrNoHandler, h, MaxHandlers-1)
	}
	return nil
}

// Stats returns the endpoint's counters.
func (ep *Endpoint) Stats() Stats { return ep.stats }

// Config returns the endpoint's configuration, defaults filled in.
func (ep *Endpoint) Config() Config { return ep.cfg }

func (ep *Endpoint) checkLen(n int) error {
	if n > ep.cfg.MaxMessage {
		return fmt.Errorf("%w: %d bytes, this endpoint carries at most %d", ErrTooLarge, n, ep.cfg.MaxMessage)
	}
	return nil
}
