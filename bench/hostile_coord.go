package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/coord"
	"github.com/xam-project/xam/nicfw/daemon"
)

// The coordination scenario: both daemons run the coordination module
// (xam fw --module coord), and host B's lies. While A streams 16 KB Stores
// to B (coordinated: above the module's threshold) and the pings run, B's
// module sends A control messages a member host could send, made from
// docs/wire.md ("Sender coordination"), as a compromised host would:
// requests for B's link naming B itself as the requester (before, A
// passed the token to B, whose module dropped it, and the token was lost
// for good: both senders stalled), a GRANT_LINK for the token A holds
// (before, two holders), a REDIRECT and a recovery's QUERY from the
// link's destination, messages for A's own link and for a link the table
// does not know, and ones that do not parse. Every one must be refused
// and counted by A's module (bad, refused, stale), the token never taken
// for lost, and every Store delivered once.

// coordForger is host B's coordination module: the real one, which also
// sends A forged control messages on each of its ticks while on is set.
type coordForger struct {
	*coord.Module
	bp     *nicfw.Backplane
	victim nicfw.HostID
	on     atomic.Bool
	sent   atomic.Uint64
	seq    uint32
}

// Init keeps the module's handle on the engine.
func (f *coordForger) Init(bp *nicfw.Backplane) error {
	f.bp = bp
	return f.Module.Init(bp)
}

// Tick sends a round of forgeries, then runs the real module's tick, and
// asks to tick again within a millisecond while on.
func (f *coordForger) Tick(now time.Time) time.Time {
	next := f.Module.Tick(now)
	if !f.on.Load() {
		return next
	}
	for _, body := range f.forgeries() {
		if f.bp.SendControl(f.victim, body) == nil {
			f.sent.Add(1)
		}
	}
	if soon := now.Add(time.Millisecond); next.IsZero() || soon.Before(next) {
		next = soon
	}
	return next
}

// Control messages (docs/wire.md, "Sender coordination").
const (
	coordGrant    = 1
	coordUniReq   = 2
	coordBcastReq = 3
	coordHint     = 4
	coordQuery    = 5
	coordRedirect = 8
)

// forgeries is one round of forged control messages from B (the link's
// destination) about B's link, and about links A must not take from B.
func (f *coordForger) forgeries() [][]byte {
	self, link := uint16(amiiHostB), uint16(amiiHostB)
	head := func(typ uint8, link uint16, gen uint32) []byte {
		b := binary.BigEndian.AppendUint16([]byte{typ}, link)
		return binary.BigEndian.AppendUint32(b, gen)
	}
	req := func(typ uint8, link uint16, requester uint16) []byte {
		f.seq++
		b := binary.BigEndian.AppendUint16(head(typ, link, 0), requester)
		return binary.BigEndian.AppendUint32(b, f.seq)
	}
	sender := func(typ uint8, gen uint32) []byte {
		return binary.BigEndian.AppendUint16(head(typ, link, gen), self)
	}
	grant := append(head(coordGrant, link, 0), 1)
	grant = binary.BigEndian.AppendUint16(grant, uint16(amiiHostA))
	grant = binary.BigEndian.AppendUint32(grant, f.seq)
	grant = append(grant, 0)
	return [][]byte{
		req(coordUniReq, link, self),              // the destination as requester
		req(coordBcastReq, link, self),            // the same, broadcast
		req(coordBcastReq, link, 999),             // a requester the table does not know
		grant,                                     // a token from the link's destination
		sender(coordRedirect, 0),                  // the destination says the token moved
		sender(coordQuery, 1<<16|uint32(self)),    // a recovery proposed by the destination
		sender(coordHint, 0x0005_0002),            // a holder's hint of a made-up generation
		req(coordUniReq, uint16(amiiHostA), self), // A's own link
		req(coordUniReq, 77, self),                // a link the table does not know
		{99, 0, 2, 0, 0, 0, 0},                    // a type that does not exist
		head(coordGrant, link, 0)[:5],             // cut short
	}
}

// coordCounters returns what A's coordination module refused, and the
// tokens it took for lost, from its daemon's stats.
func coordCounters(s daemon.Stats) (refused, lost uint64) {
	for _, m := range s.Modules {
		if m.Name != "coord" {
			continue
		}
		for _, c := range m.Counters {
			switch c.Name {
			case "bad", "refused", "stale", "dropped":
				refused += uint64(c.Value)
			case "lost", "regenerated":
				lost += uint64(c.Value)
			}
		}
	}
	return refused, lost
}

// coordStores is the Stores A sends B in the coordination scenario, each
// coordStoreSize bytes.
const (
	coordStores    = 200
	coordStoreSize = 16 << 10
	coordWindow    = 4
	coordEndpoint  = 40
)

// hostileCoord runs the coordination scenario on a pair of daemons of its
// own (with the module), between a and b.
func hostileCoord(a, b datapath.Place, cfg hostileConfig) (hostileRow, error) {
	row := hostileRow{Scenario: "coordination", Attack: "a member host's module: requests naming the link's destination, its grants, REDIRECT, QUERY, other links, garbage"}
	dir, err := os.MkdirTemp("", "xam-hostile-coord-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	forger := &coordForger{Module: coord.New(coord.Config{}), victim: amiiHostA}
	hosts, closeHosts, err := startFirmwareHosts(a, b, dir, 0, 0, false, func(i int, _ *datapath.Endpoint, c *daemon.Config) error {
		c.Sleep = 20 * time.Microsecond
		if i == 0 {
			c.Engine.Modules = []nicfw.Module{coord.New(coord.Config{})}
		} else {
			c.Engine.Modules = []nicfw.Module{forger}
		}
		return nil
	})
	if err != nil {
		return row, err
	}
	defer closeHosts()
	ha, hb := hosts[0], hosts[1]
	sink, err := openCoordSink(hb)
	if err != nil {
		return row, err
	}
	defer sink.close()
	client, err := amii.Dial(ha.sock, amii.VNet{ID: coordEndpoint, Tag: amiiTag, Table: []amii.Name{{Host: amiiHostB, Endpoint: coordEndpoint}}},
		amii.Config{Credits: coordWindow, StagingSize: 2 * coordWindow * coordStoreSize, MediumSlots: -1})
	if err != nil {
		return row, err
	}
	defer client.Close()
	before, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	pings, err := pingDuring(ha, hb, cfg.Pings, func(stop *atomic.Bool) error {
		return coordStream(client, sink, forger, stop)
	})
	if err != nil {
		return row, errors.Join(err, sink.close())
	}
	sent := forger.sent.Load()
	refused, lost, err := coordRefusals(ha, before, sent)
	if err != nil {
		return row, err
	}
	row.Sent = int(sent)
	row.set(pings)
	row.Counted = map[string]uint64{
		"refused by A's module (bad, refused, stale)": refused,
		"tokens taken for lost":                       lost,
		"Stores delivered":                            uint64(sink.delivered()),
	}
	var bad []string
	if refused != sent || sent == 0 {
		bad = append(bad, fmt.Sprintf("%d forged, %d refused", sent, refused))
	}
	if lost != 0 {
		bad = append(bad, fmt.Sprintf("%d tokens taken for lost", lost))
	}
	bad = append(bad, sink.duplicates()...)
	if len(bad) > 0 {
		row.ExactlyOnce = false
		row.Note += fmt.Sprintf("; %q", bad)
	}
	return row, nil
}

// coordSink is host B's endpoint of the coordination scenario, served by
// a goroutine of its own, and the Stores it has handled, by number.
type coordSink struct {
	server   *amii.Endpoint
	mu       sync.Mutex
	got      map[uint64]int // times each Store was handled
	stop     atomic.Bool
	wg       sync.WaitGroup
	serveErr error
}

// openCoordSink opens the sink on hb's daemon and starts serving it.
func openCoordSink(hb *firmwareHost) (*coordSink, error) {
	server, err := amii.Dial(hb.sock, amii.VNet{ID: coordEndpoint, Tag: amiiTag, Table: []amii.Name{{Host: amiiHostA, Endpoint: coordEndpoint}}},
		amii.Config{StagingSize: 2 * coordWindow * coordStoreSize, MediumSlots: -1})
	if err != nil {
		return nil, err
	}
	s := &coordSink{server: server, got: map[uint64]int{}}
	if err := server.HandleMedium(1, func(_ *amii.Token, args []uint64, data []byte) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(args) > 0 && len(data) == coordStoreSize {
			s.got[args[0]]++
		}
	}); err != nil {
		server.Close()
		return nil, err
	}
	s.wg.Go(func() { s.serveErr = serveAMII(server, &s.stop) })
	return s, nil
}

// close stops serving the sink, closes its endpoint and returns what
// ended its serving, if anything did; a second call does nothing.
func (s *coordSink) close() error {
	if s.stop.Swap(true) {
		return nil
	}
	s.wg.Wait()
	s.server.Close()
	return s.serveErr
}

// delivered is the Stores the sink has handled, each counted once.
func (s *coordSink) delivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// duplicates describes each Store the sink handled more than once.
func (s *coordSink) duplicates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var bad []string
	for k, n := range s.got {
		if n != 1 {
			bad = append(bad, fmt.Sprintf("Store %d delivered %d times", k, n))
		}
	}
	return bad
}

// coordStream is the scenario's attack, made while the pings run: with
// B's forger on, client streams coordStores Stores to the sink, at most
// coordWindow in flight, until the sink has had them all, and then waits
// for at least one round of forgeries.
func coordStream(client *amii.Endpoint, sink *coordSink, forger *coordForger, stop *atomic.Bool) error {
	forger.on.Store(true)
	defer forger.on.Store(false)
	deadline := time.Now().Add(time.Minute)
	for k := 0; sink.delivered() < coordStores; {
		for k < coordStores && client.Outstanding() < coordWindow {
			slot := uint32(k%(2*coordWindow)) * coordStoreSize
			if err := client.Store(amii.Bulk{Dest: 0, Local: slot, Remote: slot, Length: coordStoreSize, Handler: 1, Args: []uint64{uint64(k)}}); err != nil {
				return err
			}
			k++
		}
		if _, err := client.Poll(); err != nil {
			return err
		}
		if _, err := client.Wait(time.Millisecond); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Stores delivered after a minute", sink.delivered(), coordStores)
		}
	}
	// At least one round of forgeries, even when the pings are done
	// first: the module ticks every Retry/2, and 200 Stores and the
	// pings can take less.
	for forger.sent.Load() == 0 {
		if time.Now().After(deadline) {
			return errors.New("the forging module sent nothing in a minute")
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// coordRefusals returns what A's module refused and took for lost since
// before. Every forgery reaches A (the transport is reliable), so it waits
// (up to 10 s) for the module to have counted all sent of them.
func coordRefusals(ha *firmwareHost, before daemon.Stats, sent uint64) (refused, lost uint64, err error) {
	r0, l0 := coordCounters(before)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		after, err := ha.d.Stats()
		if err != nil {
			return 0, 0, err
		}
		r1, l1 := coordCounters(after)
		refused, lost = r1-r0, l1-l0
		if refused >= sent || time.Now().After(deadline) {
			return refused, lost, nil
		}
	}
}
