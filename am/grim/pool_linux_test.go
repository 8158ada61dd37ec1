//go:build linux

package grim

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
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
				poolManyChannels(t, xdptest.Hub(t, 4, memlink.Options{Loss: loss, Seed: 21}), clusterConfig{channels: 4, window: 8, firmware: firmware, deployed: true})
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
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			hosts[i].do(func(ep *Endpoint) {
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
	eventually(t, &mu, fmt.Sprintf("%d bulk messages into the default pool", want), func() bool { return len(got) == want })
	mu.Lock()
	defer mu.Unlock()
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
				poolManyChannels(t, xdptest.Star(t, "gpool", 4, loss), clusterConfig{channels: 4, window: 8, firmware: firmware, deployed: true})
			})
		}
	}
}
