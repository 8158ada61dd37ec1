//go:build linux

package grim

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestGRIMPoolManyChannels: three senders with four logical channels each
// stream MaxBulk messages into one receiver's default pool, which holds
// five of them: a full pool delays the messages, it never wedges them.
// Every message arrives once, intact, inline and in firmware mode, with
// and without loss.
func TestGRIMPoolManyChannels(t *testing.T) {
	for _, firmware := range []bool{false, true} {
		for _, loss := range []float64{0, 0.05} {
			t.Run(fmt.Sprintf("firmware=%v/loss=%v", firmware, loss), func(t *testing.T) {
				poolManyChannels(t, xdptest.Hub(t, 4, memlink.Options{Loss: loss, Seed: 21}), clusterConfig{channels: 4, window: 8, firmware: firmware, deployed: true, giveUp: time.Minute, replyTimeout: 2 * time.Minute})
			})
		}
	}
}

// poolManyChannels is TestGRIMPoolManyChannels' body on links (four
// hosts: three senders, one receiver).
func poolManyChannels(t *testing.T, links []afxdp.Link, cc clusterConfig) {
	hosts := cluster(t, links, cc)
	for _, h := range hosts {
		h.start()
	}
	const per = 25 // messages per channel
	var mu sync.Mutex
	got := map[[3]uint32]int{}
	var bad int
	hosts[3].do(func(ep *Endpoint) {
		ep.Handle(40, func(_ *Token, args [ShortArgs]uint32, data []byte) { //nolint:errcheck
			mu.Lock()
			got[[3]uint32{args[0], args[1], args[2]}]++
			if !bytes.Equal(data, pattern(MaxBulk, byte(args[0]*31+args[1]*7+args[2]))) {
				bad++
			}
			mu.Unlock()
		})
	})
	var returned []Returned // none is expected: each would never arrive
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			hosts[i].do(func(ep *Endpoint) {
				ep.OnReturn(func(r Returned) { mu.Lock(); returned = append(returned, r); mu.Unlock() })
				for k := range per {
					for c := range ep.Channels() {
						ch := ep.ch(c)
						if err := ch.Bulk(3, 40, pattern(MaxBulk, byte(i*31+c*7+k)), uint32(i), uint32(c), uint32(k)); err != nil {
							errs[i] = fmt.Errorf("host %d channel %d message %d: %w", i+1, c, k, err)
							return
						}
					}
				}
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, h := range hosts {
			if h.eng != nil {
				h.halt()
				t.Logf("host %d: %+v\n%+v\nep %+v", h.index+1, h.eng.Stats(), h.eng.TransportStats(), h.ep.Stats())
			}
		}
		t.Fatal(err)
	}
	want := 3 * cc.channels * per
	eventually(t, &mu, fmt.Sprintf("%d bulk messages into the default pool", want), func() bool { return len(got) == want || len(returned) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(returned) > 0 {
		t.Errorf("%d messages came back (the first: %v); %d of %d arrived", len(returned), returned[0], len(got), want)
	}
	for k, n := range got {
		if n != 1 {
			t.Errorf("message %v handled %d times", k, n)
		}
	}
	if bad > 0 {
		t.Errorf("%d messages arrived with other bytes", bad)
	}
}

// TestGRIMPoolManyChannelsOverAFXDP is TestGRIMPoolManyChannels' body over
// real AF_XDP sockets on a four-host star, inline and in firmware mode,
// without and with 5% of the frames dropped by xam's XDP program.
func TestGRIMPoolManyChannelsOverAFXDP(t *testing.T) {
	for _, firmware := range []bool{false, true} {
		for _, loss := range []float64{0, 0.05} {
			t.Run(fmt.Sprintf("firmware=%v/loss=%v", firmware, loss), func(t *testing.T) {
				poolManyChannels(t, xdptest.Star(t, "gpool", 4, loss), clusterConfig{channels: 4, window: 8, firmware: firmware, deployed: true, giveUp: time.Minute, replyTimeout: 2 * time.Minute})
			})
		}
	}
}

// TestGRIMPoolHeld: one host opens sixteen cut-through streams into a
// receiver's default pool, publishes their first 32 bytes and stops; a
// second host's bulk messages still all arrive, once and intact: a sender
// holds at most half the pool while another waits, and blocks that make
// no progress for PoolHold are taken back (their streams come back
// ReasonIncomplete when they go on). Inline and in firmware mode.
func TestGRIMPoolHeld(t *testing.T) {
	for _, firmware := range []bool{false, true} {
		t.Run(fmt.Sprintf("firmware=%v", firmware), func(t *testing.T) {
			hosts := cluster(t, xdptest.Hub(t, 3, memlink.Options{Seed: 23}),
				clusterConfig{channels: MaxChannels, window: 8, firmware: firmware, poolHold: 200 * time.Millisecond})
			for _, h := range hosts {
				h.start()
			}
			var mu sync.Mutex
			got := map[uint32]int{}
			var bad int
			hosts[2].do(func(ep *Endpoint) {
				ep.Handle(40, func(t *Token, args [ShortArgs]uint32, data []byte) { //nolint:errcheck
					if peer, _ := t.Source(); peer != 1 {
						return // the streams, if they ever finish
					}
					mu.Lock()
					got[args[0]]++
					if !bytes.Equal(data, pattern(MaxBulk, byte(args[0]))) {
						bad++
					}
					mu.Unlock()
				})
			})
			var returned []Returned
			hosts[0].ep.OnReturn(func(r Returned) { mu.Lock(); returned = append(returned, r); mu.Unlock() })
			streams := make([]*Stream, MaxChannels)
			var err error
			hosts[0].do(func(ep *Endpoint) {
				for i := range streams {
					if streams[i], err = ep.ch(i).Stream(2, 40, MaxBulk, uint32(i)); err != nil {
						return
					}
					if _, err = streams[i].Write(make([]byte, Segment)); err != nil {
						return
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			const n = 20
			hosts[1].do(func(ep *Endpoint) {
				for k := range n {
					if err = ep.ch(0).Bulk(2, 40, pattern(MaxBulk, byte(k)), uint32(k)); err != nil {
						return
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, &mu, "the second host's messages past the held streams", func() bool { return len(got) == n })
			mu.Lock()
			for k, c := range got {
				if c != 1 {
					t.Errorf("message %d handled %d times", k, c)
				}
			}
			if bad > 0 {
				t.Errorf("%d messages arrived with other bytes", bad)
			}
			mu.Unlock()
			// The streams go on: those whose blocks were taken back come
			// back as incomplete, the others arrive.
			hosts[0].do(func(ep *Endpoint) {
				for _, st := range streams {
					if _, err = st.Write(make([]byte, MaxBulk-Segment)); err != nil {
						return
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if !firmware {
				var st nicfw.EngineStats
				hosts[2].do(func(*Endpoint) { st = hosts[2].eng.Stats() })
				if st.PoolExpired == 0 && st.PoolShare == 0 {
					t.Errorf("the streams' blocks were neither bounded nor taken back: %+v", st)
				}
				settle(t, hosts[0], "every stream answered or returned", func(ep *Endpoint) bool {
					pending := 0
					for i := range ep.Channels() {
						pending += ep.ch(i).Outstanding()
					}
					return pending == 0
				})
				mu.Lock()
				for _, r := range returned {
					if r.Reason != ReasonIncomplete || r.Length != MaxBulk {
						t.Errorf("a stream came back as %v", r)
					}
				}
				mu.Unlock()
			}
		})
	}
}
