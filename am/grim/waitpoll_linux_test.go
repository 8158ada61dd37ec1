package grim

import (
	"testing"
	"time"

	"github.com/xam-project/xam/nicfw"
)

// A server that waits for a request (Wait runs its engine, which takes
// the request in) and then polls answers it with no ACK frame: Poll runs
// the handler first and the engine after it, so the reply carries the
// acknowledgement of the request. Every short message and reply is one
// compact cell (four integers in two engine arguments).
func TestWaitThenPollAnswersWithoutAckFrame(t *testing.T) {
	eps, engs := inlinePair(t, 1, func(ec *nicfw.EngineConfig) {
		ec.Transport.RetransmitAfter, ec.Transport.GiveUpAfter = time.Minute, time.Hour // no copies on a loaded machine: the counts are exact
	})
	answered := -1
	if err := eps[0].Handle(FirstUserHandler+1, func(_ *Token, args [ShortArgs]uint32, _ []byte) { answered = int(args[3]) }); err != nil {
		t.Fatal(err)
	}
	if err := eps[1].Handle(FirstUserHandler, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
		if err := tok.Reply(FirstUserHandler+1, args[:]...); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	c, err := eps[0].Channel(0)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 100
	for i := range rounds {
		if err := c.Short(1, FirstUserHandler, 1, 2, 3, uint32(i)); err != nil {
			t.Fatal(err)
		}
		for answered < i {
			if _, err := eps[0].Poll(); err != nil {
				t.Fatal(err)
			}
			if ready, err := eps[1].Wait(time.Millisecond); err != nil {
				t.Fatal(err)
			} else if ready {
				if _, err := eps[1].Poll(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	a, b := engs[0].TransportStats(), engs[1].TransportStats()
	if b.AckFrames != 0 || b.AcksPiggybacked != rounds || a.Compact != rounds || b.Compact != rounds {
		t.Errorf("server: %d ACK frames, %d acknowledgements piggy-backed, want 0 and %d; compact cells %d and %d, want %d each",
			b.AckFrames, b.AcksPiggybacked, rounds, a.Compact, b.Compact, rounds)
	}
}
