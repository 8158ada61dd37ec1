//go:build linux

package grim

import (
	"testing"
)

// BenchmarkGRIMRoundTrip: a short request and its reply between two
// inline endpoints on a memlink pair, one goroutine running both; the
// processor cost of GRIM and the engines, no wire: the request leaves at
// once (the express path), then two Polls, each with work (B answers, A
// takes the reply), as BenchmarkAMIIRoundTrip runs its hosts.
func BenchmarkGRIMRoundTrip(b *testing.B) {
	benchRoundTrip(b, func(c *Channel, i int) error { return c.Short(1, FirstUserHandler, uint32(i)) })
}

// BenchmarkGRIMRoundTrip16: the same between endpoints of MaxChannels
// (16) logical channels each, on the last of them: what the idle
// channels cost a Poll.
func BenchmarkGRIMRoundTrip16(b *testing.B) {
	benchRoundTripOn(b, MaxChannels, func(c *Channel, i int) error { return c.Short(1, FirstUserHandler, uint32(i)) })
}

// BenchmarkGRIMBulkCutThrough: the same with a 4 KB bulk request sent
// cut-through.
func BenchmarkGRIMBulkCutThrough(b *testing.B) {
	data := make([]byte, 4096)
	benchRoundTrip(b, func(c *Channel, i int) error { return c.Bulk(1, FirstUserHandler, data, uint32(i)) })
}

func benchRoundTrip(b *testing.B, send func(*Channel, int) error) {
	benchRoundTripOn(b, 1, send)
}

// benchRoundTripOn runs the round trips between endpoints of channels
// logical channels, on the last.
func benchRoundTripOn(b *testing.B, channels int, send func(*Channel, int) error) {
	eps, _ := inlinePair(b, channels, nil)
	answered := -1
	eps[0].Handle(FirstUserHandler+1, func(_ *Token, args [ShortArgs]uint32, _ []byte) { answered = int(args[0]) })            //nolint:errcheck
	eps[1].Handle(FirstUserHandler, func(t *Token, args [ShortArgs]uint32, _ []byte) { t.Reply(FirstUserHandler+1, args[0]) }) //nolint:errcheck
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := send(eps[0].ch(channels-1), i); err != nil {
			b.Fatal(err)
		}
		// The request left already (a short one by the express path,
		// as AM-II's Request sends at once): B's Poll receives it and
		// replies, A's takes the reply, as AM-II's benchmark polls. A
		// bulk request's Polls send it too.
		for answered < i {
			if _, err := eps[1].Poll(); err != nil {
				b.Fatal(err)
			}
			if _, err := eps[0].Poll(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
