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
func hostilePool(ha, hb *firmwareHost, _, _ datapath.Place, cfg HostileConfig) (HostileRow, error) {
	row := HostileRow{Scenario: "pool", Attack: "16 cut-through streams that publish 32 bytes and stop, into one GRIM pool"}
	before, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	peers := []nicfw.Name{{Host: amiiHostA, Endpoint: poolSinkID}, {Host: amiiHostB, Endpoint: poolAttackerID}, {Host: amiiHostB, Endpoint: poolSenderID}}
	dial := func(sock string, self, channels int) (*grim.Endpoint, error) {
		return grim.Dial(sock, grim.Config{Peers: peers, Self: self, Channels: channels, GiveUp: time.Minute})
	}
	sink, err := dial(ha.sock, 0, 1)
	if err != nil {
		return row, err
	}
	defer sink.Close()
	attacker, err := dial(hb.sock, 1, grim.MaxChannels)
	if err != nil {
		return row, err
	}
	defer attacker.Close()
	sender, err := dial(hb.sock, 2, 1)
	if err != nil {
		return row, err
	}
	defer sender.Close()

	var mu sync.Mutex
	got := map[uint32]int{}
	bad := 0
	if err := sink.Handle(poolHandler, func(t *grim.Token, args [grim.ShortArgs]uint32, data []byte) {
		if peer, _ := t.Source(); peer != 2 {
			return // the attacker's, if its streams ever end
		}
		mu.Lock()
		got[args[0]]++
		if !bytes.Equal(data, poolPattern(args[0])) {
			bad++
		}
		mu.Unlock()
	}); err != nil {
		return row, err
	}
	var stopSink atomic.Bool
	sinkDone := serveGRIMUntil(sink, &stopSink)
	defer func() { stopSink.Store(true); sinkDone() }()

	handled := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	sent := 0
	pings, err := pingDuring(ha, hb, cfg.Pings, func(*atomic.Bool) error {
		var streams []*grim.Stream
		for i := range grim.MaxChannels {
			ch, err := attacker.Channel(i)
			if err != nil {
				return err
			}
			st, err := ch.Stream(0, poolHandler, grim.MaxBulk, uint32(i))
			if err != nil {
				return err
			}
			if _, err := st.Write(make([]byte, grim.Segment)); err != nil {
				return err
			}
			streams = append(streams, st)
			sent++
		}
		ch, err := sender.Channel(0)
		if err != nil {
			return err
		}
		for k := range uint32(poolMessages) {
			if err := ch.Bulk(0, poolHandler, poolPattern(k), k); err != nil {
				return fmt.Errorf("the sender's message %d: %w", k, err)
			}
		}
		for deadline := time.Now().Add(time.Minute); handled() < poolMessages; {
			if _, err := sender.Poll(); err != nil {
				return err
			}
			if _, err := sender.Wait(time.Millisecond); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d bulk messages past the held pool after a minute", handled(), poolMessages)
			}
		}
		// The streams go on: each arrives, or comes back incomplete.
		var errs []error
		for _, st := range streams {
			if _, err := st.Write(make([]byte, grim.MaxBulk-grim.Segment)); err != nil && !errors.Is(err, grim.ErrTimeout) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return row, err
	}
	after, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	e0, e1 := before.Engine, after.Engine
	row.Sent = sent
	row.Counted = map[string]uint64{
		"pool full (NACK)":             e1.PoolFull - e0.PoolFull,
		"refused: the sender's share":  e1.PoolShare - e0.PoolShare,
		"stalled blocks taken back":    e1.PoolExpired - e0.PoolExpired,
		"bulk messages past the flood": uint64(handled()),
	}
	mu.Lock()
	defer mu.Unlock()
	row.set(pings)
	for k, n := range got {
		if n != 1 {
			row.ExactlyOnce = false
			row.Note += fmt.Sprintf("; bulk message %d handled %d times", k, n)
		}
	}
	if bad > 0 || len(got) != poolMessages {
		row.ExactlyOnce = false
		row.Note += fmt.Sprintf("; %d of %d bulk messages, %d with other bytes", len(got), poolMessages, bad)
	}
	return row, nil
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
