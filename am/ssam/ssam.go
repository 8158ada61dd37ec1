package ssam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/internal/clock"
)

// SSAM's Active Messages over a driver.Device (von Eicken et al., section
// 3; docs/wire.md).
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
// responder's: it ran nothing, and the requester counts it rejected
// (OnReject) instead of taking it for done.
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
//
// Sessions. A requester's sequence numbers mean something only to the
// responder that has followed them from the start, so before its first
// request on a connection an endpoint syncs: it sends a sync (ack field 0)
// carrying the sequence number of its next request and, in the handler
// field, a session number drawn at random when the endpoint was made.
// Requests made meanwhile wait in the window, unsent, until the
// responder's sync answer (ack field 1, the same session number) comes
// back, and then leave together; the timers send the sync again every
// timeout, and a full window gives up as always. A responder that sees a
// session number other than the one it follows answers it and notes it as
// announced, with its sequence number; it starts over when the first request
// of that session arrives (its tag, that sequence number): it follows the
// new session, expects that sequence number next and forgets its saved
// answers. So a responder serves one requester after another (a ping
// client, then the next), and never answers a new requester's request with
// an answer saved for an earlier one's; and a made-up sync alone changes
// nothing but the announced session. Until a requester's first answer has
// come, each retransmission of its requests is preceded by its sync again,
// so that its session is announced again when a made-up sync took its place.
// A sync with the session it already follows is answered again and changes
// nothing (its answer was lost).
//
// Reliability, as SSAM did it. Each side may have up to W requests
// outstanding per connection (W <= 63). The responder delivers requests in
// order (go-back-N: it drops a request that is not the next one), answers
// each with the reply its handler sent or, when the handler sent none, an
// explicit ack, and keeps that answer in one of W reply buffers. A duplicate
// request (one it has already delivered) means the answer was lost: it
// sends the saved answer again and does not run the handler. The requester
// keeps each request in one of W request buffers until its answer arrives,
// accepts answers in order only (a later answer, or one already handled,
// is dropped), and when the oldest request has waited longer than the
// timeout it sends every outstanding request again. Hence the 2W buffers
// per connection, preallocated in the device's pinned send area.
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

// Errors.
var (
	// ErrDiscipline: a handler broke the request/reply discipline (a
	// request handler sends at most one reply and no request; a reply
	// handler sends nothing).
	ErrDiscipline = errors.New("ssam: request/reply discipline violated")
	ErrTooLong    = errors.New("ssam: message too long")
	ErrBadConn    = errors.New("ssam: no such connection")
	// ErrNoHandler: a message names a handler index of MaxHandlers or
	// more, which no endpoint has.
	ErrNoHandler = errors.New("ssam: no such handler")
	// ErrTimeout: a request found no room in the window for the
	// configured give-up time (the peer does not answer).
	ErrTimeout = errors.New("ssam: peer does not answer")
)

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

// Conn returns the connection the message came from.
func (t *Token) Conn() int { return t.conn }

// IsRequest reports whether the handler runs for a request.
func (t *Token) IsRequest() bool { return t.request }

// Reply sends the reply to the request the handler runs for, naming the
// requester's handler. It may be called once, in a request handler only.
func (t *Token) Reply(handler uint32, data []byte) error {
	switch {
	case !t.request:
		return fmt.Errorf("%w: a reply handler may not send", ErrDiscipline)
	case t.replied:
		return fmt.Errorf("%w: a request handler sends at most one reply", ErrDiscipline)
	}
	if err := t.s.checkLen(len(data)); err != nil {
		return err
	}
	if err := checkHandler(handler); err != nil {
		return err
	}
	t.replied = true
	return t.s.answer(t.conn, t.seq, kindReply, handler, data)
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
		return fmt.Errorf("ssam: window %d out of range [1, %d]", c.Window, MaxWindow)
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
		return fmt.Errorf("ssam: MaxMessage %d out of range [%d, %d]", c.MaxMessage, MaxShort, MaxBulk)
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Batch < 0 || c.Batch > c.Window {
		return fmt.Errorf("ssam: batch %d out of range [0, window %d]", c.Batch, c.Window)
	}
	return nil
}

// SlotsPerMessage returns the 48-byte send slots a message of up to max
// data bytes occupies (its whole CPCS-PDU).
func SlotsPerMessage(max int) int { return cells.CellCount(cells.SSAMHeaderSize + max) }

// The send area of a connection holds the 2W buffers, in four regions of R
// each (R, the window rounded up to a power of two; see bufferRing):
// single-cell requests (one slot each), single-cell answers, then bulk
// requests and bulk answers (SlotsPerMessage slots each), and last one slot
// for syncs. A message's buffer is chosen by its sequence number modulo R,
// so consecutive single-cell messages sit in consecutive slots and a batch
// of them is one SendBatch trap.
func layoutSlots(window, per int) int {
	return syncSlot(window, per) + 1
}

// syncSlot is the send slot of the syncs and their answers, sent at once
// each time, so one slot serves both.
func syncSlot(window, per int) int {
	r := bufferRing(window)
	return 2*r + 2*r*per
}

// bufferRing is the number of buffers per region: the window rounded up to
// a power of two, which divides the 128 sequence numbers, so that
// consecutive sequence numbers always have consecutive buffers (modulo the
// ring), also across the wrap from 127 to 0.
func bufferRing(window int) int {
	r := 1
	for r < window {
		r <<= 1
	}
	return r
}

// SendSlots returns the send area (in slots) a device needs per connection
// for an SSAM endpoint with this window and message size.
func SendSlots(window, maxMessage int) int {
	n := layoutSlots(window, SlotsPerMessage(maxMessage))
	p := 1
	for p < n {
		p <<= 1
	}
	return p
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
	Rejected      uint64 // own requests the responder answered "no such handler"
	// Forged counts messages refused for not being of the connection's
	// session: a request or answer with another session's tag, an answer
	// whose acknowledgement is not its sequence number plus one, an ack of
	// another handler index (Session tags). A forger's, or a late one of
	// an earlier session.
	Forged uint64
}

// outstanding is a request in the window.
type outstanding struct {
	off    int  // first send slot
	slots  int  // send slots it occupies (cells)
	bulk   bool // sent on the bulk VC
	sentAt time.Time
}

// saved is an answer kept for duplicate requests.
type saved struct {
	valid bool
	seq   uint8
	off   int
	slots int
	bulk  bool
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

// SSAM is an Active Messages endpoint on a device: one per process, with a
// connection per peer as the device was opened. It is not safe for
// concurrent use: like SSAM it is driven by one thread that sends and
// polls.
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
	onReject func(conn int, seq uint8)
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
			return nil, fmt.Errorf("ssam: connection %d's send area is %d bytes; window %d of %d-byte messages needs %d (driver.Config.SendSlots >= %d)",
				i, got, cfg.Window, cfg.MaxMessage, need, SendSlots(cfg.Window, cfg.MaxMessage))
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

// Register adds a handler and returns its index, the number that names it
// on the wire. An endpoint holds at most MaxHandlers handlers: past them,
// Register adds nothing and returns MaxHandlers, an index that every send
// refuses with ErrNoHandler.
func (s *Endpoint) Register(h Handler) uint32 {
	if len(s.handlers) >= MaxHandlers {
		return MaxHandlers
	}
	s.handlers = append(s.handlers, h)
	return uint32(len(s.handlers) - 1)
}

// checkHandler refuses a handler index that the handler field cannot
// carry.
func checkHandler(h uint32) error {
	if h >= MaxHandlers {
		return fmt.Errorf("%w: index %d (indices run to %d)", ErrNoHandler, h, MaxHandlers-1)
	}
	return nil
}

// Stats returns the endpoint's counters.
func (s *Endpoint) Stats() Stats { return s.stats }

// Config returns the endpoint's configuration, defaults filled in.
func (s *Endpoint) Config() Config { return s.cfg }

func (s *Endpoint) checkLen(n int) error {
	if n > s.cfg.MaxMessage {
		return fmt.Errorf("%w: %d bytes, this endpoint carries at most %d", ErrTooLong, n, s.cfg.MaxMessage)
	}
	return nil
}

// requestOffset and answerOffset are the first send slot of the buffer of
// sequence number seq for a message of n data bytes (see layoutSlots).
func (s *Endpoint) requestOffset(seq uint8, n int) int {
	r := s.ring
	if n <= MaxShort {
		return s.buf(seq)
	}
	return 2*r + s.buf(seq)*s.per
}

// buf is the buffer index of sequence number seq within a region.
func (s *Endpoint) buf(seq uint8) int { return int(seq) & (s.ring - 1) }

func (s *Endpoint) answerOffset(seq uint8, n int) int {
	r := s.ring
	if n <= MaxShort {
		return r + s.buf(seq)
	}
	return 2*r + r*s.per + s.buf(seq)*s.per
}

// dataAt returns the data part of the buffer at send slot off.
func (s *Endpoint) dataAt(c, off, n int) []byte {
	start := off*cells.PayloadSize + cells.SSAMHeaderSize
	return s.dev.SendArea(c)[start : start+n]
}

// Buffer returns where the data of connection c's next request goes: the
// application may write up to MaxMessage bytes there and send them with
// RequestBuffered, without a copy (SSAM's exported next send buffer). It is
// nil while the window is full.
func (s *Endpoint) Buffer(c int) []byte {
	if c < 0 || c >= len(s.conns) || s.windowFull(&s.conns[c]) {
		return nil
	}
	return s.dataAt(c, s.requestOffset(s.conns[c].next, s.cfg.MaxMessage), s.cfg.MaxMessage)
}

func (s *Endpoint) windowFull(cn *conn) bool {
	return int((cn.next-cn.base)&seqMask) >= s.cfg.Window
}

// Request sends a request with data to handler on connection c, then polls.
// While the window is full it polls until there is room, for at most the
// configured give-up time. It may not be called from a handler.
func (s *Endpoint) Request(c int, handler uint32, data []byte) error {
	if err := s.makeRoom(c); err != nil {
		return err
	}
	if err := s.checkLen(len(data)); err != nil {
		return err
	}
	if err := checkHandler(handler); err != nil {
		return err
	}
	copy(s.dataAt(c, s.requestOffset(s.conns[c].next, len(data)), len(data)), data)
	return s.send(c, handler, len(data))
}

// RequestBuffered sends a request whose n data bytes the application has
// already written into Buffer(c).
func (s *Endpoint) RequestBuffered(c int, handler uint32, n int) error {
	if err := s.makeRoom(c); err != nil {
		return err
	}
	if err := s.checkLen(n); err != nil {
		return err
	}
	if err := checkHandler(handler); err != nil {
		return err
	}
	if n <= MaxShort { // Buffer handed out the bulk buffer: move the data
		seq := s.conns[c].next
		copy(s.dataAt(c, s.requestOffset(seq, n), n), s.dataAt(c, s.requestOffset(seq, s.cfg.MaxMessage), n))
	}
	return s.send(c, handler, n)
}

// makeRoom checks the call and polls until the window has room.
func (s *Endpoint) makeRoom(c int) error {
	if s.depth > 0 {
		return fmt.Errorf("%w: a handler may not send a request", ErrDiscipline)
	}
	if c < 0 || c >= len(s.conns) {
		return fmt.Errorf("%w: %d (there are %d)", ErrBadConn, c, len(s.conns))
	}
	cn := &s.conns[c]
	if err := s.startSync(c); err != nil {
		return err
	}
	if !s.windowFull(cn) {
		return nil
	}
	if err := s.Flush(); err != nil {
		return err
	}
	start := s.cfg.Clock.Now()
	for s.windowFull(cn) {
		if _, err := s.Poll(); err != nil {
			return err
		}
		if s.windowFull(cn) && s.cfg.Clock.Now().Sub(start) > s.cfg.GiveUp {
			return fmt.Errorf("%w: connection %d: window of %d full for %v", ErrTimeout, c, s.cfg.Window, s.cfg.GiveUp)
		}
	}
	return nil
}

// Sync begins this endpoint's session on connection c (see Sessions at the
// top of ssam.go) ahead of its first request, which does it otherwise. It
// sends the sync and returns; Synced reports when the responder's answer
// has come (Poll takes it). An endpoint that must not wait for the sync on
// its first requests, as a benchmark that times them, syncs first.
func (s *Endpoint) Sync(c int) error {
	if c < 0 || c >= len(s.conns) {
		return fmt.Errorf("%w: %d (there are %d)", ErrBadConn, c, len(s.conns))
	}
	return s.startSync(c)
}

// Synced reports whether the responder on connection c follows this
// endpoint's session.
func (s *Endpoint) Synced(c int) bool { return c >= 0 && c < len(s.conns) && s.conns[c].synced }

// startSync sends connection c's sync unless it is synced or syncing.
func (s *Endpoint) startSync(c int) error {
	cn := &s.conns[c]
	if cn.synced || cn.syncing {
		return nil
	}
	cn.syncing, cn.syncAt = true, time.Time{}
	return s.sendSync(c, cn.next, syncAsk, s.session)
}

// sendSync sends a sync (ask) or its answer on connection c, from the
// connection's sync slot.
func (s *Endpoint) sendSync(c int, seq, ask uint8, session uint32) error {
	off := syncSlot(s.cfg.Window, s.per)
	if _, _, err := s.build(c, off, flowWord(kindSync, seq, ask), session, 0); err != nil {
		return err
	}
	if ask == syncAsk {
		s.stats.Syncs++
	}
	return s.dev.Send(c, off, driver.EOM)
}

// send transmits request seq next of connection c, whose data is in place.
func (s *Endpoint) send(c int, handler uint32, n int) error {
	cn := &s.conns[c]
	seq := cn.next
	off := s.requestOffset(seq, n)
	slots, bulk, err := s.build(c, off, flowWord(kindRequest, seq, uint8(s.tag&tagLoMask)), handlerField(s.tag, handler), n)
	if err != nil {
		return err
	}
	// The timer stamps the request the first time it sees it (a clock
	// read costs more than a single-cell send on some machines).
	cn.window[s.buf(seq)] = outstanding{off: off, slots: slots, bulk: bulk}
	cn.next = (seq + 1) & seqMask
	s.stats.Requests++
	if !cn.synced {
		// It waits in the window for the sync's answer (Sessions).
		_, err = s.Poll()
		return err
	}
	switch {
	case bulk:
		if err := s.flushRequests(c); err != nil { // keep the order on the wire
			return err
		}
		if err := s.dev.SendBatch(c, off, slots, driver.Bulk|driver.EOM); err != nil {
			return err
		}
		_, err = s.Poll()
		return err
	case s.cfg.Batch > 1:
		if cn.pending == 0 {
			cn.pendFrom = seq
		}
		if cn.pending++; cn.pending >= s.cfg.Batch {
			return s.flushRequests(c)
		}
		return nil
	}
	// SSAM's write-read trap: send, and receive what is waiting.
	k, err := s.dev.SendRecv(c, off, driver.EOM, s.dev.RecvBatch())
	if err != nil {
		return err
	}
	if k > 0 {
		s.dispatchAll()
	}
	return nil
}

// Flush sends the single-cell messages a batching endpoint holds back.
func (s *Endpoint) Flush() error {
	for c := range s.conns {
		if err := s.flushRequests(c); err != nil {
			return err
		}
		if err := s.flushAnswers(c); err != nil {
			return err
		}
	}
	return nil
}

// flushRequests sends connection c's pending single-cell requests, which
// sit in consecutive slots (two runs when they wrap around the region).
func (s *Endpoint) flushRequests(c int) error {
	cn := &s.conns[c]
	for cn.pending > 0 {
		first := s.buf(cn.pendFrom)
		k := min(cn.pending, s.ring-first)
		if err := s.dev.SendBatch(c, first, k, driver.EOM); err != nil {
			return err
		}
		cn.pending -= k
		cn.pendFrom = (cn.pendFrom + uint8(k)) & seqMask
	}
	return nil
}

// flushAnswers sends connection c's queued single-cell answers, runs of
// consecutive sequence numbers in one trap each.
func (s *Endpoint) flushAnswers(c int) error {
	cn := &s.conns[c]
	q := cn.answerQ
	for i := 0; i < len(q); {
		j := i + 1
		for j < len(q) && q[j] == (q[j-1]+1)&seqMask && s.buf(q[j]) != 0 {
			j++
		}
		if err := s.dev.SendBatch(c, s.answerOffset(q[i], 0), j-i, driver.EOM); err != nil {
			cn.answerQ = q[:0]
			return err
		}
		i = j
	}
	cn.answerQ = q[:0]
	return nil
}

// build writes the header (and, for bulk, the AAL5 pad and trailer) of a
// message whose n data bytes sit after the header at send slot off, and
// returns how many slots it occupies and whether it goes on the bulk VC.
func (s *Endpoint) build(c, off int, flow uint16, handler uint32, n int) (slots int, bulk bool, err error) {
	area := s.dev.SendArea(c)[off*cells.PayloadSize:]
	if n <= MaxShort {
		p := area[:cells.PayloadSize]
		// EncodeSSAM copies the data onto itself (it is already in
		// place) and clears the unused tail.
		if err := cells.EncodeSSAM(p, flow, handler, p[cells.SSAMHeaderSize:cells.SSAMHeaderSize+n]); err != nil {
			return 0, false, err
		}
		return 1, false, nil
	}
	sdu := cells.SSAMHeaderSize + n
	pdu := area[:cells.PDULen(sdu)]
	binary.BigEndian.PutUint16(pdu[0:], flow)
	binary.BigEndian.PutUint32(pdu[2:], handler)
	binary.BigEndian.PutUint16(pdu[6:], 0)
	clear(pdu[sdu : len(pdu)-cells.TrailerSize])
	tr := pdu[len(pdu)-cells.TrailerSize:]
	tr[0], tr[1] = 0, 0
	binary.BigEndian.PutUint16(tr[2:], uint16(sdu))
	binary.BigEndian.PutUint32(tr[4:], cells.CRC32(pdu[:len(pdu)-4]))
	return len(pdu) / cells.PayloadSize, true, nil
}

// answer sends and saves the reply or ack to request seq on connection c,
// naming handler index handler (an ack: 0 or rejectIndex), tagged with the
// session the responder follows.
func (s *Endpoint) answer(c int, seq, kind uint8, handler uint32, data []byte) error {
	cn := &s.conns[c]
	off := s.answerOffset(seq, len(data))
	copy(s.dataAt(c, off, len(data)), data)
	slots, bulk, err := s.build(c, off, flowWord(kind, seq, cn.expected), handlerField(cn.tag, handler), len(data))
	if err != nil {
		return err
	}
	cn.answers[s.buf(seq)] = saved{valid: true, seq: seq, off: off, slots: slots, bulk: bulk}
	if kind == kindReply {
		s.stats.Replies++
	} else {
		s.stats.Acks++
	}
	if s.cfg.Batch > 1 {
		if !bulk {
			cn.answerQ = append(cn.answerQ, seq) // sent at the end of the poll
			return nil
		}
		if err := s.flushAnswers(c); err != nil { // answers leave in order
			return err
		}
	}
	return s.transmit(c, off, slots, bulk)
}

func (s *Endpoint) transmit(c, off, slots int, bulk bool) error {
	if bulk {
		return s.dev.SendBatch(c, off, slots, driver.Bulk|driver.EOM)
	}
	return s.dev.Send(c, off, driver.EOM)
}

// Poll receives what has arrived, runs its handlers, and retransmits what
// has timed out. It returns the number of handlers run.
func (s *Endpoint) Poll() (int, error) {
	if s.depth > 0 {
		return 0, fmt.Errorf("%w: a handler may not poll", ErrDiscipline)
	}
	before := s.stats.Handled + s.stats.ReplyHandled
	if s.cfg.Batch > 1 {
		for c := range s.conns {
			if err := s.flushRequests(c); err != nil {
				return 0, err
			}
		}
	}
	if _, err := s.dev.Recv(s.dev.RecvBatch()); err != nil {
		return 0, err
	}
	s.dispatchAll()
	if s.cfg.Batch > 1 {
		for c := range s.conns {
			if err := s.flushAnswers(c); err != nil {
				return 0, err
			}
		}
	}
	if s.polls++; s.polls%timerPolls == 0 {
		if err := s.timers(); err != nil {
			return 0, err
		}
	}
	return int(s.stats.Handled + s.stats.ReplyHandled - before), nil
}

// dispatchAll processes every cell waiting in the connections' receive
// rings.
func (s *Endpoint) dispatchAll() {
	for c := range s.conns {
		for {
			cell, ok := s.dev.Take(c)
			if !ok {
				break
			}
			s.cell(c, cell)
		}
	}
}

// cell processes one received cell of connection c.
func (s *Endpoint) cell(c int, cell cells.Cell) {
	if s.dev.IsBulk(c, cell) {
		pdu, ok, err := s.conns[c].reasm.Push(cell)
		if err != nil {
			s.stats.BadPDUs++
		}
		if !ok {
			return
		}
		sdu := pdu.SDU
		if len(sdu) < cells.SSAMHeaderSize || binary.BigEndian.Uint16(sdu[6:]) != 0 {
			s.stats.BadPDUs++
			return
		}
		s.message(c, binary.BigEndian.Uint16(sdu), binary.BigEndian.Uint32(sdu[2:]), sdu[cells.SSAMHeaderSize:])
		return
	}
	p := cells.SSAMCell(cell.Payload())
	if p.Check() != nil {
		s.stats.BadCells++
		return
	}
	s.message(c, p.FlowControl(), p.Handler(), p.Data())
}

// message handles one received message.
func (s *Endpoint) message(c int, flow uint16, handler uint32, data []byte) {
	kind, seq, ack := splitFlow(flow)
	cn := &s.conns[c]
	switch kind {
	case kindSync:
		switch {
		case ack == syncAnswer:
			if handler == s.session && !cn.synced {
				// The requests that waited for it leave now.
				cn.synced, cn.syncing = true, false
				s.sendOutstanding(c, time.Time{}, false)
			}
		case ack == syncAsk && handler != 0:
			switch tag := sessionTag(handler); {
			case handler == cn.session:
				// Its answer was lost: answer again.
			case tag == cn.tag:
				// Tags alike (one chance in 2^23): its requests could not
				// be told from the last session's, so start over now.
				s.begin(cn, handler, seq)
			default:
				// Followed from its first request (Sessions).
				cn.announced, cn.annTag, cn.annSeq = handler, tag, seq
			}
			s.sendSync(c, seq, syncAnswer, handler)
		default:
			s.stats.BadCells++
		}
	case kindRequest:
		if tag := fieldTag(handler, ack); !s.follows(cn, tag, seq) {
			if cn.announced != 0 && tag == cn.annTag {
				s.stats.OutOfOrder++ // the announced session's, not its first
			} else {
				s.stats.Forged++
			}
			return
		}
		switch d := (cn.expected - seq) & seqMask; {
		case d == 0:
			s.tok = Token{s: s, conn: c, seq: seq, request: true}
			cn.expected = (seq + 1) & seqMask
			if !s.run(handler&indexMask, &s.tok, data) {
				// No such handler: the ack says so, so that the requester
				// learns its request did nothing (never a plain ack).
				s.answer(c, seq, kindAck, rejectIndex, nil)
				break
			}
			s.stats.Handled++
			if !s.tok.replied {
				s.answer(c, seq, kindAck, 0, nil)
			}
		case int(d) <= s.cfg.Window:
			// Delivered already: its answer was lost. Send it again.
			s.stats.DupRequests++
			if a := cn.answers[s.buf(seq)]; a.valid && a.seq == seq {
				s.stats.Resent++
				s.transmit(c, a.off, a.slots, a.bulk)
			}
		default:
			s.stats.OutOfOrder++ // ahead of the next expected: go-back-N
		}
	case kindReply, kindAck:
		index := handler & indexMask
		if handler>>indexBits != s.tag>>tagLoBits || ack != (seq+1)&seqMask ||
			kind == kindAck && (index != 0 && index != rejectIndex || len(data) != 0) {
			s.stats.Forged++ // not an answer of this endpoint's session
			return
		}
		if cn.next == cn.base || seq != cn.base {
			s.stats.DupAnswers++ // handled already, or not the oldest outstanding
			return
		}
		cn.base = (cn.base + 1) & seqMask
		cn.answered = true
		if kind == kindAck && index == rejectIndex {
			s.stats.Rejected++
			if s.onReject != nil {
				s.onReject(c, seq)
			}
		}
		if kind == kindReply {
			s.tok = Token{s: s, conn: c, seq: seq}
			s.stats.ReplyHandled++
			s.run(index, &s.tok, data)
		}
	}
}

// follows reports whether a request tagged tag with sequence number seq
// belongs to the session the responder follows on cn; the first request of
// the announced session (its tag and first sequence number) begins it.
func (s *Endpoint) follows(cn *conn, tag uint32, seq uint8) bool {
	switch {
	case cn.session != 0 && tag == cn.tag:
		return true
	case cn.announced != 0 && tag == cn.annTag && seq == cn.annSeq:
		s.begin(cn, cn.announced, seq)
		return true
	}
	return false
}

// begin makes the responder on cn follow requester session session from
// sequence number seq: it starts over, so that no answer saved for the
// last session answers this one's requests.
func (s *Endpoint) begin(cn *conn, session uint32, seq uint8) {
	cn.session, cn.tag, cn.expected = session, sessionTag(session), seq
	cn.announced, cn.annTag = 0, 0
	clear(cn.answers)
	s.stats.Sessions++
}

// run calls handler h with the discipline flag raised; false when there is
// no such handler.
func (s *Endpoint) run(h uint32, t *Token, data []byte) bool {
	if int(h) >= len(s.handlers) || s.handlers[h] == nil {
		s.stats.HandlerErrors++
		return false
	}
	s.depth++
	defer s.leave()
	s.handlers[h](t, data)
	return true
}

// OnReject sets a function that Poll calls for each request the responder
// answered with "no such handler" (counted in Stats.Rejected too): the
// request's connection and sequence number. It runs as a reply handler
// does.
func (s *Endpoint) OnReject(f func(conn int, seq uint8)) { s.onReject = f }

func (s *Endpoint) leave() { s.depth-- }

// timerPolls is how often Poll looks at the retransmission timers: every
// so many calls, because reading the clock costs more than an empty poll.
// A request's timer starts when the timers first see it, so a timeout is
// late by at most timerPolls polls.
const timerPolls = 16

// timers retransmits, on every connection whose oldest request has waited
// longer than the timeout, all its outstanding requests; and sends again
// the syncs that have waited as long.
func (s *Endpoint) timers() error {
	var now time.Time
	for c := range s.conns {
		cn := &s.conns[c]
		if cn.syncing {
			if now.IsZero() {
				now = s.cfg.Clock.Now()
			}
			if cn.syncAt.IsZero() {
				cn.syncAt = now
			} else if now.Sub(cn.syncAt) > s.cfg.Timeout {
				cn.syncAt = now
				if err := s.sendSync(c, cn.base, syncAsk, s.session); err != nil {
					return err
				}
			}
			continue
		}
		if cn.next == cn.base {
			continue
		}
		if now.IsZero() {
			now = s.cfg.Clock.Now()
		}
		for seq := cn.base; seq != cn.next; seq = (seq + 1) & seqMask {
			if o := &cn.window[s.buf(seq)]; o.sentAt.IsZero() {
				o.sentAt = now
			}
		}
		if now.Sub(cn.window[s.buf(cn.base)].sentAt) <= s.cfg.Timeout {
			continue
		}
		if !cn.answered {
			// The responder may not follow this session yet: a made-up
			// sync may have taken its place as announced (Sessions).
			if err := s.sendSync(c, cn.base, syncAsk, s.session); err != nil {
				return err
			}
		}
		if err := s.sendOutstanding(c, now, true); err != nil {
			return err
		}
	}
	return nil
}

// sendOutstanding sends every outstanding request of connection c (go back
// N), single-cell requests in runs of consecutive slots, one trap per run;
// their timers start at now (zero: when the timers next see them). retrans
// counts them as retransmissions.
func (s *Endpoint) sendOutstanding(c int, now time.Time, retrans bool) error {
	cn := &s.conns[c]
	run, runFrom := 0, 0
	for seq := cn.base; ; seq = (seq + 1) & seqMask {
		var o *outstanding
		if seq != cn.next {
			o = &cn.window[s.buf(seq)]
		}
		if run > 0 && (o == nil || o.bulk || s.buf(seq) == 0) {
			if err := s.dev.SendBatch(c, runFrom, run, driver.EOM); err != nil {
				return err
			}
			run = 0
		}
		if o == nil {
			return nil
		}
		o.sentAt = now
		if retrans {
			s.stats.Retransmits++
		}
		if o.bulk {
			if err := s.transmit(c, o.off, o.slots, true); err != nil {
				return err
			}
			continue
		}
		if run == 0 {
			runFrom = o.off
		}
		run++
	}
}

// Outstanding returns the number of unanswered requests on connection c.
func (s *Endpoint) Outstanding(c int) int {
	cn := &s.conns[c]
	return int((cn.next - cn.base) & seqMask)
}

// Drain polls until every request on every connection has been answered, or
// until timeout.
func (s *Endpoint) Drain(timeout time.Duration) error {
	start := s.cfg.Clock.Now()
	for {
		busy := false
		for c := range s.conns {
			busy = busy || s.Outstanding(c) > 0
		}
		if !busy {
			return nil
		}
		if s.cfg.Clock.Now().Sub(start) > timeout {
			return fmt.Errorf("%w: requests still unanswered after %v", ErrTimeout, timeout)
		}
		if _, err := s.Poll(); err != nil {
			return err
		}
	}
}
