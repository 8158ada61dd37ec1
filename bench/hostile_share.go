package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// The share scenario: another user (uid 65534, the attacker's executable
// again, told by shareOrders) opens a virtual network of its own, a sink
// on host B and as many endpoints on host A as its quota allows, of the
// greatest weight, and keeps every one's send queue full of requests to
// the sink, refilling them and draining the sink every 500 µs, while
// root's pings run from A to B. A's engine shares its sends among users first, then among
// a user's endpoints (nicfw's scheduler), and bounds each user's resident
// endpoints, so the pings keep their pace beside the flood: the row
// reports their round trips beside those of the baseline row, and
// runHostile checks the flood's p99 against the baseline's.

// shareOrders tells the attacker to flood.
type shareOrders struct {
	Senders    string       `json:"senders"`     // the senders' daemon (host A)
	Sink       string       `json:"sink"`        // the sink's daemon (host B)
	SinkHost   nicfw.HostID `json:"sink_host"`   // B's host id, as A's tables name it
	SenderHost nicfw.HostID `json:"sender_host"` // A's host id
	Endpoints  int          `json:"endpoints"`   // sending endpoints to open on A
}

// floodTally is what the flood did.
type floodTally struct {
	Endpoints int    `json:"endpoints"` // sending endpoints opened
	Sent      uint64 `json:"sent"`      // requests queued
	Delivered uint64 `json:"delivered"` // requests the sink received
}

// shareEndpoints is the flood's endpoints: a user's quota of them.
const shareEndpoints = daemon.DefaultMaxPerUser

// flood carries out o until in ends (its parent closes it), writing
// "attacking" to out once every endpoint is open and the flood runs.
func flood(o shareOrders, in io.Reader, out io.Writer) (*floodTally, error) {
	t := &floodTally{}
	sc, err := daemon.Dial(o.Sink)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	sink, err := sc.Open(daemon.OpenRequest{QueueEntries: 4096, Table: []nicfw.Name{{Host: o.SenderHost, Endpoint: daemon.FirstUserEndpoint}}})
	if err != nil {
		return nil, fmt.Errorf("the sink: %w", err)
	}
	defer sink.Close()
	ac, err := daemon.Dial(o.Senders)
	if err != nil {
		return nil, err
	}
	defer ac.Close()
	var senders []*daemon.Endpoint
	defer func() {
		for _, ep := range senders {
			ep.Close()
		}
	}()
	for range o.Endpoints {
		ep, err := ac.Open(daemon.OpenRequest{Tag: sink.Tag, Weight: nicfw.MaxWeight, Table: []nicfw.Name{{Host: o.SinkHost, Endpoint: sink.ID}}})
		if errors.Is(err, daemon.ErrQuota) {
			break // its quota of endpoints
		}
		if err != nil {
			return nil, fmt.Errorf("a sender: %w", err)
		}
		senders = append(senders, ep)
	}
	t.Endpoints = len(senders)
	var done atomic.Bool
	go func() {
		io.Copy(io.Discard, in) //nolint:errcheck // any end stops the flood
		done.Store(true)
	}()
	req := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: 1, Handler: 1}
	var got endpoint.Descriptor
	for round := 0; !done.Load(); round++ {
		for _, ep := range senders {
			for ep.Send(endpoint.RequestSend, &req) == nil {
				t.Sent++
			}
		}
		for {
			ok, err := sink.Receive(endpoint.RequestReceive, &got)
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			t.Delivered++
		}
		if round == 0 {
			if _, err := fmt.Fprintln(out, "attacking"); err != nil {
				return nil, err
			}
		}
		// Every queue is full: the engine has thousands of requests to
		// take. Leave the CPUs to it for a while, so that what the row
		// measures is the engine's sharing, not this process's spinning
		// on a machine with few cores (that is the kernel scheduler's to
		// share).
		time.Sleep(500 * time.Microsecond)
	}
	return t, nil
}

// hostileBaseline is the pings alone, the reference for the other rows'
// round trips.
func hostileBaseline(ha, hb *firmwareHost, _, _ datapath.Place, cfg hostileConfig) (hostileRow, error) {
	row := hostileRow{Scenario: "none (baseline)", Attack: "the pings alone", ExactlyOnce: true}
	pings, err := pingDuring(ha, hb, cfg.Pings, func(*atomic.Bool) error { return nil })
	if err != nil {
		return row, err
	}
	row.set(pings)
	return row, nil
}

// hostileShare runs the share scenario; the attacker's executable is in
// dir (hostileOtherUser put it there).
func hostileShare(ha, hb *firmwareHost, _, _ datapath.Place, cfg hostileConfig, dir string) (hostileRow, error) {
	row := hostileRow{Scenario: "share", Attack: fmt.Sprintf("uid 65534: %d endpoints of the greatest weight, every send queue kept full", shareEndpoints)}
	orders, err := json.Marshal(attackerOrders{Share: &shareOrders{Senders: ha.sock, Sink: hb.sock, SinkHost: amiiHostB, SenderHost: amiiHostA, Endpoints: shareEndpoints}})
	if err != nil {
		return row, err
	}
	before, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	var t floodTally
	pings, err := pingWhile(ha, hb, cfg.Pings, func(stop *atomic.Bool, start func()) error {
		return runAttacker(dir, orders, &t, func() error {
			start()
			for !stop.Load() {
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	})
	if err != nil {
		return row, err
	}
	after, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	row.Sent = int(t.Sent)
	row.set(pings)
	row.Counted = map[string]uint64{
		"its endpoints opened":              uint64(t.Endpoints),
		"its requests delivered":            t.Delivered,
		"residency faults bounded per user": after.Residency.Bounded - before.Residency.Bounded,
	}
	if t.Endpoints < shareEndpoints/2 || t.Delivered == 0 {
		row.ExactlyOnce = false
		row.Note += fmt.Sprintf("; the flood did not flow: %d endpoints, %d delivered", t.Endpoints, t.Delivered)
	}
	return row, nil
}
