package bench

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
)

// The pool scenario's GRIM endpoints: a sink on A, and on B an attacker
// with every channel and a sender with one.
const (
	poolSinkID     = 64
	poolAttackerID = 96
	poolSenderID   = 128
	poolHandler    = grim.FirstUserHandler
	poolMessages   = 40 // the sender's bulk messages
)

// hostilePool holds a GRIM receive pool: an endpoint on B opens a
// cut-through stream on each of its sixteen channels into a sink on A,
// publishes the first 32 bytes of each and stops, while another endpoint
// on B sends bulk messages of grim.MaxBulk bytes to the same sink. Every
// one of those must arrive once, intact: the attacker's share of the pool
// is bounded while the sender waits, and its stalled blocks are taken
// back after the engine's PoolHold.
func hostilePool(ha, hb *firmwareHost, _, _ datapath.Place, cfg hostileConfig) (hostileRow, error) {
	row := hostileRow{Scenario: "pool", Attack: "16 cut-through streams that publish 32 bytes and stop, into one GRIM pool"}
	before, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	ps := &poolScenario{got: map[uint32]int{}}
	defer ps.close()
	if err := ps.open(ha, hb); err != nil {
		return row, err
	}
	pings, err := pingDuring(ha, hb, cfg.Pings, func(*atomic.Bool) error { return ps.attack() })
	if err != nil {
		return row, err
	}
	after, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	e0, e1 := before.Engine, after.Engine
	row.Sent = ps.sent
	row.Counted = map[string]uint64{
		"pool full (NACK)":             e1.PoolFull - e0.PoolFull,
		"refused: the sender's share":  e1.PoolShare - e0.PoolShare,
		"stalled blocks taken back":    e1.PoolExpired - e0.PoolExpired,
		"bulk messages past the flood": uint64(ps.handled()),
	}
	row.set(pings)
	ps.judge(&row)
	return row, nil
}

// poolScenario is the pool scenario's endpoints, what the attacker sent,
// and what the sink handled of the sender's messages.
type poolScenario struct {
	sink, attacker, sender *grim.Endpoint
	stopSink               atomic.Bool
	sinkDone               func() // waits for the sink's goroutine to end
	sent                   int    // the attacker's streams

	mu  sync.Mutex
	got map[uint32]int // times each of the sender's messages was handled
	bad int            // the sender's messages handled with other bytes
}

// open dials the sink on ha's daemon, the attacker (every channel) and the
// sender on hb's, and serves the sink in a goroutine of its own.
func (ps *poolScenario) open(ha, hb *firmwareHost) error {
	peers := []nicfw.Name{{Host: amiiHostA, Endpoint: poolSinkID}, {Host: amiiHostB, Endpoint: poolAttackerID}, {Host: amiiHostB, Endpoint: poolSenderID}}
	dial := func(sock string, self, channels int) (*grim.Endpoint, error) {
		return grim.Dial(sock, grim.Config{Peers: peers, Self: self, Channels: channels, GiveUp: time.Minute})
	}
	var err error
	if ps.sink, err = dial(ha.sock, 0, 1); err != nil {
		ps.sink = nil
		return err
	}
	if ps.attacker, err = dial(hb.sock, 1, grim.MaxChannels); err != nil {
		ps.attacker = nil
		return err
	}
	if ps.sender, err = dial(hb.sock, 2, 1); err != nil {
		ps.sender = nil
		return err
	}
	if err := ps.sink.Handle(poolHandler, func(t *grim.Token, args [grim.ShortArgs]uint32, data []byte) {
		if peer, _ := t.Source(); peer != 2 {
			return // the attacker's, if its streams ever end
		}
		ps.mu.Lock()
		ps.got[args[0]]++
		if !bytes.Equal(data, poolPattern(args[0])) {
			ps.bad++
		}
		ps.mu.Unlock()
	}); err != nil {
		return err
	}
	ps.sinkDone = serveGRIMUntil(ps.sink, &ps.stopSink)
	return nil
}

// close stops the sink's goroutine and closes what open opened, the last
// first.
func (ps *poolScenario) close() {
	if ps.sinkDone != nil {
		ps.stopSink.Store(true)
		ps.sinkDone()
	}
	for _, ep := range []*grim.Endpoint{ps.sender, ps.attacker, ps.sink} {
		if ep != nil {
			ep.Close()
		}
	}
}

// handled is the sender's messages the sink has handled, each counted
// once.
func (ps *poolScenario) handled() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.got)
}

// attack is the scenario's attack, made while the pings run: the attacker
// holds the pool with its stalled streams while the sender's messages must
// get past them, then the streams go on: each arrives, or comes back
// incomplete.
func (ps *poolScenario) attack() error {
	streams, err := ps.holdPool()
	if err != nil {
		return err
	}
	if err := ps.sendPast(); err != nil {
		return err
	}
	var errs []error
	for _, st := range streams {
		if _, err := st.Write(make([]byte, grim.MaxBulk-grim.Segment)); err != nil && !errors.Is(err, grim.ErrTimeout) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// holdPool opens a cut-through stream of grim.MaxBulk bytes to the sink
// on each of the attacker's channels, and writes one segment of each.
func (ps *poolScenario) holdPool() ([]*grim.Stream, error) {
	var streams []*grim.Stream
	for i := range grim.MaxChannels {
		ch, err := ps.attacker.Channel(i)
		if err != nil {
			return nil, err
		}
		st, err := ch.Stream(0, poolHandler, grim.MaxBulk, uint32(i))
		if err != nil {
			return nil, err
		}
		if _, err := st.Write(make([]byte, grim.Segment)); err != nil {
			return nil, err
		}
		streams = append(streams, st)
		ps.sent++
	}
	return streams, nil
}

// sendPast sends the sender's poolMessages bulk messages to the sink, and
// waits (up to a minute) until the sink has handled them all.
func (ps *poolScenario) sendPast() error {
	ch, err := ps.sender.Channel(0)
	if err != nil {
		return err
	}
	for k := range uint32(poolMessages) {
		if err := ch.Bulk(0, poolHandler, poolPattern(k), k); err != nil {
			return fmt.Errorf("the sender's message %d: %w", k, err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ps.handled() < poolMessages; {
		if _, err := ps.sender.Poll(); err != nil {
			return err
		}
		if _, err := ps.sender.Wait(time.Millisecond); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d bulk messages past the held pool after a minute", ps.handled(), poolMessages)
		}
	}
	return nil
}

// judge fails row unless the sink handled each of the sender's messages
// exactly once, with its bytes.
func (ps *poolScenario) judge(row *hostileRow) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for k, n := range ps.got {
		if n != 1 {
			row.ExactlyOnce = false
			row.Note += fmt.Sprintf("; bulk message %d handled %d times", k, n)
		}
	}
	if ps.bad > 0 || len(ps.got) != poolMessages {
		row.ExactlyOnce = false
		row.Note += fmt.Sprintf("; %d of %d bulk messages, %d with other bytes", len(ps.got), poolMessages, ps.bad)
	}
}

// poolPattern is the bytes of the pool scenario's bulk message k.
func poolPattern(k uint32) []byte {
	b := make([]byte, grim.MaxBulk)
	for i := range b {
		b[i] = byte(uint32(i)*7 + k)
	}
	return b
}

// serveGRIMUntil runs ep's handlers in a goroutine until stop is set; the
// returned function waits for it to end.
func serveGRIMUntil(ep *grim.Endpoint, stop *atomic.Bool) func() {
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if n, err := ep.Poll(); err != nil {
				return
			} else if n == 0 {
				ep.Wait(time.Millisecond) //nolint:errcheck // the next Poll reports
			}
		}
	})
	return wg.Wait
}
