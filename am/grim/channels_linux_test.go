package grim

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// Two hosts send at once on all 16 channels each to a third, over a hub
// that loses 5% of the frames: every message arrives once, and each
// (sender, channel)'s in the order sent, though the receiver looks at its
// channels' arrival bits and the engines park idle channels behind their
// doorbells. Then the receiver closes its endpoint: a request on every
// channel comes back to its sender with a reason, none lost.
func TestGRIMSixteenChannels(t *testing.T) {
	for _, firmware := range []bool{false, true} {
		t.Run(fmt.Sprintf("firmware=%v", firmware), func(t *testing.T) {
			hosts := cluster(t, xdptest.Hub(t, 3, memlink.Options{Loss: 0.05, Seed: 61}),
				clusterConfig{channels: MaxChannels, window: 8, firmware: firmware})
			recv := hosts[2]
			var mu sync.Mutex
			seen := map[[2]int][]uint32{} // (peer, channel) -> sequence numbers
			var returned []Returned
			if err := recv.ep.Handle(FirstUserHandler, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
				p, c := tok.Source()
				mu.Lock()
				seen[[2]int{p, c}] = append(seen[[2]int{p, c}], args[0])
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
			hosts[0].ep.OnReturn(func(r Returned) { mu.Lock(); returned = append(returned, r); mu.Unlock() })
			for _, h := range hosts {
				h.start()
			}
			const each = 30
			var senders sync.WaitGroup
			errs := make([]error, 2)
			for i := range 2 {
				senders.Go(func() {
					hosts[i].do(func(ep *Endpoint) {
						for k := range MaxChannels * each {
							if errs[i] = ep.ch(k%MaxChannels).Short(2, FirstUserHandler, uint32(k/MaxChannels)); errs[i] != nil {
								return
							}
						}
					})
				})
			}
			senders.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			eventually(t, &mu, "every message", func() bool {
				n := 0
				for _, s := range seen {
					n += len(s)
				}
				return n == 2*MaxChannels*each
			})
			mu.Lock()
			if len(seen) != 2*MaxChannels {
				t.Errorf("%d (sender, channel) pairs, want %d", len(seen), 2*MaxChannels)
			}
			for src, s := range seen {
				for k, v := range s {
					if v != uint32(k) {
						t.Fatalf("peer %d channel %d: message %d is %d", src[0], src[1], k, v)
					}
				}
			}
			mu.Unlock()

			// The receiver goes: its endpoint closes, its engine stays (a
			// daemon's; inline, its host keeps running it).
			recv.halt()
			if err := recv.ep.Close(); err != nil {
				t.Fatal(err)
			}
			defer recv.engineOnly(t)()
			var err error
			hosts[0].do(func(ep *Endpoint) {
				for c := range MaxChannels {
					if err = ep.ch(c).Short(2, FirstUserHandler, 1000+uint32(c)); err != nil {
						return
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, &mu, "a return on every channel", func() bool { return len(returned) == MaxChannels })
			mu.Lock()
			defer mu.Unlock()
			channels := map[int]bool{}
			for _, r := range returned {
				if r.Reason == 0 || !r.Request || r.Dest != 2 || r.Args[0] != 1000+uint32(r.Channel) {
					t.Errorf("returned: %+v", r)
				}
				channels[r.Channel] = true
			}
			if len(channels) != MaxChannels {
				t.Errorf("returns on %d channels, want %d", len(channels), MaxChannels)
			}
		})
	}
}
