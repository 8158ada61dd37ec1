package bench

import (
	"testing"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/internal/netnstest"
)

// BenchmarkSerialRoundTrip is SSAM's and AM-II's round trip over AF_XDP
// with one cell each way (SSAM 16 bytes, AM-II two arguments, inline), each
// on a veth pair of its own, with both hosts polled in turn by the
// benchmark's goroutine: no thread waits for another, so the figure is
// the two system calls and the two paths' processing, cache-cold after
// them, without the spinning hosts' hand-offs that `xam bench engine`'s
// threaded pings include. The two alternate in ten rounds of b.N/10 round
// trips each; it reports each one's time per round trip and AM-II's over
// SSAM's.
func BenchmarkSerialRoundTrip(b *testing.B) {
	ps, pm := netnstest.NewVethPair(b, netnstest.WithQueues(1)), netnstest.NewVethPair(b, netnstest.WithQueues(1))
	sa, sb := places(ps)
	ma, mb := places(pm)
	ea, err := OpenSSAM(sa, sb.MAC, 0, ssam.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer ea.Close()
	eb, err := OpenSSAM(sb, sa.MAC, 0, ssam.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer eb.Close()
	var replyH ssam.HandlerID
	echo := eb.AM.Register(func(t *ssam.Token, data []byte) {
		if err := t.Reply(replyH, data); err != nil {
			b.Error(err)
		}
	})
	sAnswered := 0
	replyH = ea.AM.Register(func(*ssam.Token, []byte) { sAnswered++ })

	ha, hb, err := openAMIIPair(ma, mb, 0, 0, 1, amii.Config{}, amii.Config{}, amiiKeys{})
	if err != nil {
		b.Fatal(err)
	}
	defer ha.close()
	defer hb.close()
	hb.am.Register(func(t *amii.Token, args []uint64) {
		if err := t.Reply(0, args...); err != nil {
			b.Error(err)
		}
	})
	aAnswered := 0
	ha.am.Register(func(*amii.Token, []uint64) { aAnswered++ })

	msg := make([]byte, 16)
	ssamTrips := func(n int) {
		for range n {
			want := sAnswered + 1
			if err := ea.AM.Request(0, echo, msg); err != nil {
				b.Fatal(err)
			}
			for sAnswered < want {
				for _, e := range []*ssam.Endpoint{eb.AM, ea.AM} {
					if _, err := e.Poll(); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	amiiTrips := func(n int) {
		for range n {
			want := aAnswered + 1
			if err := ha.am.Request(0, 0, 1, 2); err != nil {
				b.Fatal(err)
			}
			for aAnswered < want {
				for _, e := range []*amii.Endpoint{hb.am, ha.am} {
					if _, err := e.Poll(); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	ssamTrips(1000) // warm up both
	amiiTrips(1000)
	const rounds = 10
	per := max(b.N/rounds, 1)
	var ts, tm time.Duration
	b.ResetTimer()
	for range rounds {
		start := time.Now()
		ssamTrips(per)
		ts += time.Since(start)
		start = time.Now()
		amiiTrips(per)
		tm += time.Since(start)
	}
	b.StopTimer() // the hosts' closing is not the round trips'
	n := float64(rounds * per)
	b.ReportMetric(float64(ts.Nanoseconds())/n, "ssam-ns/rt")
	b.ReportMetric(float64(tm.Nanoseconds())/n, "amii-ns/rt")
	b.ReportMetric(float64(tm)/float64(ts), "amii/ssam")
}
