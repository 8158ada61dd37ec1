package grim

import (
	"errors"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// Handlers by id either side of denseHandlers (the ids Endpoint.handler
// finds by index, the rest in the map) all run, a second Handle of an id
// is a conflict on either side, and a request for an id nobody handles is
// answered with HandlerNoHandler, whose reply the requester's error
// handler hears of.
func TestGRIMHandlerIDs(t *testing.T) {
	eps := expressHosts(t, xdptest.Hub(t, 2, memlink.Options{}), 1)
	a, b := eps[0], eps[1]
	ids := []HandlerID{FirstUserHandler, denseHandlers - 1, denseHandlers, denseHandlers + 1, 60000}
	ran := map[HandlerID]int{}
	replies := map[uint32]int{}
	const reply = FirstUserHandler + 1
	if err := a.Handle(reply, func(_ *Token, args [ShortArgs]uint32, _ []byte) { replies[args[0]]++ }); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := b.Handle(id, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
			ran[id]++
			if err := tok.Reply(reply, args[0]); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatalf("Handle(%d): %v", id, err)
		}
		if err := b.Handle(id, func(*Token, [ShortArgs]uint32, []byte) {}); !errors.Is(err, ErrConflict) {
			t.Fatalf("a second Handle(%d): %v, want ErrConflict", id, err)
		}
	}
	returned := 0
	a.OnReturn(func(r Returned) {
		if r.Reason == ReasonNoHandler && r.Handler == denseHandlers+2 {
			returned++
		}
	})
	poll := func(until func() bool) {
		t.Helper()
		for range 100000 {
			if until() {
				return
			}
			for _, e := range []*Endpoint{a, b} {
				if _, err := e.Poll(); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Fatalf("not done: ran %v, replies %v, returned %d", ran, replies, returned)
	}
	for _, id := range ids {
		if err := a.ch(0).Short(1, id, uint32(id)); err != nil {
			t.Fatal(err)
		}
		poll(func() bool { return replies[uint32(id)] == 1 })
		if ran[id] != 1 {
			t.Fatalf("handler %d ran %d times", id, ran[id])
		}
	}
	if err := a.ch(0).Short(1, denseHandlers+2, 7); err != nil {
		t.Fatal(err)
	}
	poll(func() bool { return returned == 1 })
	if b.Stats().HandlerErrors != 1 {
		t.Fatalf("b's HandlerErrors %d, want 1", b.Stats().HandlerErrors)
	}
}
