package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// The hostile suite: what anyone on the segment and any local user can do
// to xam's firmware mode, with real traffic running, and what xam refused
// and counted. Two firmware daemons on a lab's two hosts, AM-II pings from
// host A to an echo on host B throughout: first alone (the baseline row),
// then while
//
//   - wire: host B's side of the link sends A a flood of forged frames as
//     fast as it can (hostileConfig.Flood of them): cells opening PDUs on
//     made-up circuits, transport ACK, DATA and RESET frames with made-up
//     epochs, from B's MAC, random cells on the transport's circuit, and
//     frames from a stranger's MAC. They are made from docs/wire.md, as an
//     attacker would make them, not with xam's encoders.
//   - local: a local user sends A's daemon the open requests it cannot
//     grant (bad sizes, an empty table, a held or privileged id, more
//     memory than the quota), more connections than its quota, and
//     garbage descriptors through an endpoint of its own, opens a 128 MB
//     endpoint and touches every page; then closes its connection with
//     its endpoints open, as a killed process does.
//   - pool: streams of one GRIM endpoint hold another host's receive pool
//     (hostilepool.go).
//   - other user: uid 65534, holding the pings' tag, opens endpoints of
//     their network, reads stats, grants itself the network and floods
//     both daemons with connections (hostile_user.go).
//   - share: uid 65534 keeps the send queues of as many endpoints as its
//     quota allows full, on a network of its own (hostile_share.go).
//   - registry: uid 65534, granted root's GRIM network but not one of its
//     members, forges registry tables and registrations and writes and
//     reads at root's block store (hostile_registry.go).
//   - coordination: on a pair of daemons of its own, both with the
//     coordination module, host B's module sends A forged control
//     messages while A streams Stores to B (hostile_coord.go).
//   - on-path forger: a host that learnt both transports' epochs forges
//     DATA and ACKs sweeping sequence numbers, frames with destination
//     epoch 0 and restart claims (hostile_forger.go).
//
// Each scenario reports what was sent and what was refused and counted,
// and whether the pings' requests were each handled exactly once, none
// lost and none returned.

// hostileConfig configures the suite. Zero fields take defaults.
type hostileConfig struct {
	Pings int // AM-II round trips per scenario (default 2000)
	// Flood is the forged frames of the wire and on-path forger scenarios
	// (default 100000); the other user dials Flood/20 connections.
	Flood int
}

// hostileRow is one scenario's outcome.
type hostileRow struct {
	Scenario string            `json:"scenario"`
	Attack   string            `json:"attack"`
	Sent     int               `json:"sent"`    // hostile frames or requests sent
	Counted  map[string]uint64 `json:"counted"` // what the target refused and counted, by counter
	Pings    int               `json:"pings"`   // real round trips during the scenario
	// ExactlyOnce: every ping's request was handled exactly once at the
	// echo, none lost, none returned.
	ExactlyOnce bool   `json:"exactly_once"`
	Note        string `json:"note,omitempty"`
	// RTT is the pings' round trips during the scenario.
	RTT RTT `json:"rtt_ns"`
}

// pinged is what the pings of a scenario came to.
type pinged struct {
	done int
	once bool
	note string
	rtt  RTT
}

// set records p in the row.
func (row *hostileRow) set(p pinged) {
	row.Pings, row.ExactlyOnce, row.RTT = p.done, p.once, p.rtt
	row.Note = strings.TrimPrefix(row.Note+"; "+p.note, "; ")
	row.Note = strings.TrimSuffix(row.Note, "; ")
}

// hostileResult is the suite's outcome (the JSON of `xam bench hostile`).
type hostileResult struct {
	// Dup is the fraction of xam frames the lab's switch delivered twice
	// throughout (xam bench hostile --dup).
	Dup        float64      `json:"injected_dup,omitempty"`
	Duplicated uint64       `json:"duplicated,omitempty"` // the frames the switch delivered twice
	Rows       []hostileRow `json:"rows"`
}

// Markdown writes the suite's table.
func (r *hostileResult) Markdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("## Hostile input and faults (firmware mode, AM-II pings running)\n\n")
	if r.Dup > 0 {
		fmt.Fprintf(&b, "The lab's switch delivered %.0f%% of xam frames twice throughout (%d frames).\n\n", 100*r.Dup, r.Duplicated)
	}
	b.WriteString("| scenario | attack | sent | refused and counted | pings | round trip p50 / p99 | exactly once |\n|---|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		var counted []string
		for _, k := range slices.Sorted(maps.Keys(row.Counted)) {
			counted = append(counted, fmt.Sprintf("%s %d", k, row.Counted[k]))
		}
		once := "yes"
		if !row.ExactlyOnce {
			once = "**no**: " + row.Note
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %s / %s | %s |\n", row.Scenario, row.Attack, row.Sent, strings.Join(counted, ", "), row.Pings,
			time.Duration(row.RTT.P50), time.Duration(row.RTT.P99), once)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// hostileBig is the staging area of the local scenario's large endpoint.
const hostileBig = 128 << 20

// runHostile runs the suite between a and b (two lab hosts).
func runHostile(a, b datapath.Place, cfg hostileConfig) (*hostileResult, error) {
	if cfg.Pings == 0 {
		cfg.Pings = 2000
	}
	if cfg.Flood == 0 {
		cfg.Flood = 100_000
	}
	dir, err := os.MkdirTemp("", "xam-hostile-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The other user reaches the daemons' sockets, and runs its copy of
	// this executable, from dir.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	// The transports' epochs, which the on-path forger knows as if it had
	// read them off the wire.
	var epochs [2]uint32
	for i := range epochs {
		epochs[i] = rand.Uint32() | 1
	}
	hosts, closeHosts, err := startFirmwareHosts(a, b, dir, 0, 0, false, func(i int, _ *datapath.Endpoint, c *daemon.Config) error {
		c.Engine.Transport.Epoch = epochs[i]
		c.Engine.Transport.RetransmitAfter = time.Millisecond
		c.Sleep, c.MaxConnsPerUser, c.UserMemory = 20*time.Microsecond, 16, 256<<20
		c.Engine.PoolHold = 200 * time.Millisecond // the pool scenario's stalled blocks come back within the run
		c.Engine.Resident = 32                     // the pool scenario's 18 GRIM channels and the pings, each resident
		return nil
	})
	if err != nil {
		return nil, err
	}
	closeOnce := sync.OnceFunc(closeHosts)
	defer closeOnce()
	res := &hostileResult{}
	forger := func(ha, hb *firmwareHost, a, b datapath.Place, cfg hostileConfig) (hostileRow, error) {
		return hostileForger(ha, hb, a, b, cfg, epochs)
	}
	if err := copyAttacker(dir); err != nil {
		return nil, err
	}
	user := func(ha, hb *firmwareHost, a, b datapath.Place, cfg hostileConfig) (hostileRow, error) {
		return hostileOtherUser(ha, hb, a, b, cfg, dir)
	}
	share := func(ha, hb *firmwareHost, a, b datapath.Place, cfg hostileConfig) (hostileRow, error) {
		return hostileShare(ha, hb, a, b, cfg, dir)
	}
	registry := func(ha, hb *firmwareHost, a, b datapath.Place, cfg hostileConfig) (hostileRow, error) {
		return hostileRegistry(ha, hb, a, b, cfg, dir)
	}
	for _, sc := range []func(*firmwareHost, *firmwareHost, datapath.Place, datapath.Place, hostileConfig) (hostileRow, error){hostileBaseline, hostileWire, hostileLocal, hostilePool, user, share, registry, forger} {
		row, err := sc(hosts[0], hosts[1], a, b, cfg)
		if err != nil {
			return res, fmt.Errorf("hostile scenario %q: %w", row.Scenario, err)
		}
		res.Rows = append(res.Rows, row)
	}
	// The coordination scenario needs the module on both daemons: a pair
	// of its own.
	closeOnce()
	row, err := hostileCoord(a, b, cfg)
	if err != nil {
		return res, err
	}
	res.Rows = append(res.Rows, row)
	return res, nil
}

// pingDuring runs the AM-II pings from A's daemon to B's echo while attack
// runs, and reports how many were made and whether each request was
// handled exactly once with nothing returned.
func pingDuring(ha, hb *firmwareHost, n int, attack func(stop *atomic.Bool) error) (pinged, error) {
	return pingWhile(ha, hb, n, func(stop *atomic.Bool, start func()) error {
		start()
		return attack(stop)
	})
}

// pingWhile is pingDuring for an attack that takes a while to get going:
// the pings' endpoints are open (the virtual network exists on both
// daemons) when attack is called, and the pings start once it calls start
// (or returns). stop is set when the pings are done.
func pingWhile(ha, hb *firmwareHost, n int, attack func(stop *atomic.Bool, start func()) error) (pinged, error) {
	d := DaemonEndpoint{Socket: hb.sock, Endpoint: daemon.FirstUserEndpoint + 1, PeerHost: amiiHostA, Tag: amiiTag}
	server, err := d.open()
	if err != nil {
		return pinged{}, err
	}
	defer server.Close()
	var counts EchoCounts
	echoErr := echoAMII(server, &counts)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var serveErr, attackErr error
	wg.Go(func() { serveErr = serveAMII(server, &stop) })
	client, err := DaemonEndpoint{Socket: ha.sock, Endpoint: daemon.FirstUserEndpoint + 1, PeerHost: amiiHostB, Tag: amiiTag}.open()
	var attackStop atomic.Bool
	started := make(chan struct{})
	start := sync.OnceFunc(func() { close(started) })
	if err == nil {
		wg.Go(func() {
			defer start()
			attackErr = attack(&attackStop, start)
		})
		<-started
	}
	var r *AMIIResult
	if err == nil {
		// A round trip is timed, never lost by a deadline: a request the
		// daemons lose comes back to its sender (its reply timeout) and
		// fails the exactly-once check with its reason. The generous
		// limit only ends a run whose daemons stopped altogether.
		r, err = pingAMII(client, PingConfig{Count: n, NoWarmup: true, Timeout: 30 * time.Second}, amiiPingMessage{nargs: 1})
		if err != nil {
			err = fmt.Errorf("%w (client: %+v; echo: %d handled, %d duplicates)", err, client.Stats(), counts.Delivered(), counts.Duplicates())
		}
		client.Close()
	}
	attackStop.Store(true)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(err, serveErr, *echoErr, attackErr); err != nil {
		return pinged{}, err
	}
	once := r.Lost == 0 && counts.Delivered() == n && counts.Duplicates() == 0 && client.Stats().Returned == 0
	note := ""
	if !once {
		note = fmt.Sprintf("%d lost, %d handled, %d duplicates, %d returned", r.Lost, counts.Delivered(), counts.Duplicates(), client.Stats().Returned)
	}
	return pinged{done: r.Done, once: once, note: note, rtt: r.RTT}, nil
}

// hostileWire floods A with forged frames from B's side of the link.
func hostileWire(ha, hb *firmwareHost, a, b datapath.Place, cfg hostileConfig) (hostileRow, error) {
	row := hostileRow{Scenario: "wire", Attack: "forged circuits, epochs, ACKs, RESETs, random cells, a stranger's frames"}
	frames, err := forgedFrames(a.MAC, b.MAC, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		return row, err
	}
	inj, err := injector(b)
	if err != nil {
		return row, err
	}
	defer inj.Close()
	before, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	sent := 0
	pings, err := pingDuring(ha, hb, cfg.Pings, func(stop *atomic.Bool) error {
		for sent < cfg.Flood && !stop.Load() {
			if err := inj.Send(frames[sent%len(frames)]); err != nil && !errors.Is(err, netdev.ErrNoBuffers) {
				return err
			}
			sent++
		}
		return nil
	})
	if err != nil {
		return row, err
	}
	after, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	t0, t1 := before.Transport, after.Transport
	row.Sent = sent
	row.set(pings)
	row.Counted = map[string]uint64{
		"unconfirmed epochs": t1.Unconfirmed - t0.Unconfirmed,
		"bad frames":         t1.BadFrames - t0.BadFrames,
		"unknown sources":    t1.UnknownSource - t0.UnknownSource,
		"stale epochs":       t1.StaleEpoch - t0.StaleEpoch,
		"restarts believed":  t1.Restarts - t0.Restarts,
	}
	row.noRestart(t0, t1)
	return row, nil
}

// injector opens a raw socket at p that sends frames, as a host on the
// segment would.
func injector(p datapath.Place) (*netdev.Packet, error) {
	var s *netdev.Packet
	err := p.Do(func() (err error) {
		s, err = netdev.OpenSender(p.Ifindex)
		return err
	})
	return s, err
}

// noRestart fails the row if the target's transport believed a forged
// restart between t0 and t1.
func (row *hostileRow) noRestart(t0, t1 transport.Stats) {
	if t1.Restarts != t0.Restarts {
		row.ExactlyOnce = false
		row.Note += "; a forged restart was believed"
	}
}

// forgedFrames makes the wire scenario's frames for dst, from src (its
// peer) and from a stranger, after docs/wire.md.
func forgedFrames(dst, src net.HardwareAddr, rng *rand.Rand) ([][]byte, error) {
	stranger := net.HardwareAddr{0x02, 0xbd, 0, 0, 0, 9}
	frame := func(from net.HardwareAddr, cs []byte) ([]byte, error) {
		return (&cells.Framer{Dst: dst, Src: from}).Append(nil, cs)
	}
	// transport is an SDU of the transport's header (docs/wire.md): type,
	// channel, sequence, stamp, payload length, acknowledgement entries,
	// source and destination epochs; then the payload.
	tframe := func(typ, ch uint8, payload []byte, srcEpoch, dstEpoch uint32) ([]byte, error) {
		sdu := make([]byte, 20+len(payload))
		sdu[0], sdu[1] = typ, ch
		binary.BigEndian.PutUint16(sdu[2:], uint16(rng.Uint32()))
		binary.BigEndian.PutUint32(sdu[4:], rng.Uint32())
		binary.BigEndian.PutUint16(sdu[8:], uint16(len(payload)))
		binary.BigEndian.PutUint32(sdu[12:], srcEpoch)
		binary.BigEndian.PutUint32(sdu[16:], dstEpoch)
		copy(sdu[20:], payload)
		cs, err := cells.Segment(cells.SAR{VCI: transport.DefaultVCI}, sdu)
		if err != nil {
			return nil, err
		}
		return frame(src, cs)
	}
	var out [][]byte
	add := func(f []byte, err error) error {
		out = append(out, f)
		return err
	}
	for range 64 {
		var open []byte
		for range 4 {
			pdu, err := cells.Segment(cells.SAR{VCI: 100 + uint16(rng.IntN(100))}, make([]byte, 500))
			if err != nil {
				return nil, err
			}
			open = append(open, pdu[:cells.CellSize]...)
		}
		junk := make([]byte, cells.CellSize*(1+rng.IntN(4)))
		for o := 0; o < len(junk); o += cells.CellSize {
			c := junk[o : o+cells.CellSize]
			for i := range c {
				c[i] = byte(rng.Uint32())
			}
			if err := cells.Cell(c).Encode(cells.UNI, cells.Fields{VCI: transport.DefaultVCI, PTI: uint8(rng.IntN(2))}); err != nil {
				return nil, err
			}
		}
		payload := make([]byte, 40)
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		if err := errors.Join(
			add(frame(src, open)),
			add(tframe(2, uint8(rng.IntN(8)), nil, rng.Uint32()|1, 0)),
			add(tframe(1, uint8(rng.IntN(8)), payload, rng.Uint32()|1, rng.Uint32())),
			add(tframe(4, uint8(rng.IntN(8)), nil, rng.Uint32()|1, rng.Uint32())),
			add(frame(src, junk)),
			add(frame(stranger, junk)),
		); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hostileLocal is a local user's attack on A's daemon.
func hostileLocal(ha, hb *firmwareHost, a, b datapath.Place, cfg hostileConfig) (hostileRow, error) {
	row := hostileRow{Scenario: "local", Attack: "bad opens, a connection flood, garbage descriptors, a 128 MB endpoint, endpoints left open by a closed connection"}
	before, err := ha.d.Stats()
	if err != nil {
		return row, err
	}
	la := &localAttack{kinds: map[string]uint64{}}
	pings, err := pingDuring(ha, hb, cfg.Pings, func(*atomic.Bool) error { return la.run(ha.sock) })
	if err != nil {
		return row, err
	}
	after, err := localAftermath(ha, before)
	if err != nil {
		return row, err
	}
	row.Sent = la.sent
	row.set(pings)
	row.Counted = la.kinds
	row.Counted["refused by the daemon"] = after.Refused - before.Refused
	row.Counted["garbage descriptors refused"] = la.refused
	row.Counted["endpoints left open"] = uint64(after.Endpoints)
	row.Counted["large endpoints released off the engine"] = after.BigReleased - before.BigReleased
	if la.refused != la.garbage || after.Endpoints != 0 || after.BigReleased == before.BigReleased {
		row.ExactlyOnce = false
		row.Note += fmt.Sprintf("; %d of %d garbage descriptors refused, %d endpoints left", la.refused, la.garbage, after.Endpoints)
	}
	return row, nil
}

// localAttack is what the local user of hostileLocal sent, and what the
// daemon refused.
type localAttack struct {
	kinds   map[string]uint64 // refusals by kind
	sent    int               // requests, connections and descriptors sent
	garbage uint64            // garbage descriptors the endpoint's queue took
	refused uint64            // of those, the ones the engine refused
}

// run is the local user's attack on the daemon at sock, made while the
// pings run: from a connection that holds one endpoint, bad opens, a flood
// of connections, garbage descriptors and a large endpoint; then the
// connection closes with its endpoints open.
func (la *localAttack) run(sock string) error {
	c, err := daemon.Dial(sock)
	if err != nil {
		return err
	}
	table := []nicfw.Name{{Host: amiiHostB, Endpoint: 1}}
	held, err := c.Open(daemon.OpenRequest{Table: table})
	if err != nil {
		c.Close()
		return err
	}
	if err := la.badOpens(c, held, table); err != nil {
		return err
	}
	if err := la.connFlood(sock); err != nil {
		return err
	}
	if err := la.garbageDescriptors(c, held); err != nil {
		return err
	}
	// A large endpoint, its every page touched: its memory goes off
	// the engine's path when it closes, and the pings do not wait
	// for it.
	big, err := c.Open(daemon.OpenRequest{StagingSize: hostileBig, Table: table})
	if err != nil {
		return err
	}
	st := big.Staging()
	for i := 0; i < len(st); i += os.Getpagesize() {
		st[i] = 1
	}
	// Gone with its endpoints open, as a killed process is; then
	// this process lets go of its side of them (their requests to
	// close find the connection closed).
	err = c.Close()
	held.Close()
	big.Close()
	return err
}

// badOpens sends c's daemon the open requests it cannot grant: queues too
// short and too long, staging areas too small and too large, an empty
// table, the id held already, more memory than the quota. Each must be
// refused, and is counted by its error.
func (la *localAttack) badOpens(c *daemon.Conn, held *daemon.Endpoint, table []nicfw.Name) error {
	for _, req := range []daemon.OpenRequest{
		{QueueEntries: 3, Table: table}, {QueueEntries: 1 << 20, Table: table},
		{StagingSize: 100, Table: table}, {StagingSize: 2 << 30, Table: table},
		{}, {Endpoint: held.ID, Table: table}, {StagingSize: 1 << 30, Table: table},
	} {
		la.sent++
		_, err := c.Open(req)
		switch {
		case errors.Is(err, daemon.ErrQuota):
			la.kinds["opens refused: quota"]++
		case errors.Is(err, nicfw.ErrEndpointInUse):
			la.kinds["opens refused: in use"]++
		case errors.Is(err, nicfw.ErrConfig):
			la.kinds["opens refused: config"]++
		case err == nil:
			return fmt.Errorf("the daemon granted a bad open %+v", req)
		default:
			return err
		}
	}
	return nil
}

// connFlood dials the daemon at sock more times than the quota (16 here)
// allows, counting the connections refused, and closes them all.
func (la *localAttack) connFlood(sock string) error {
	var conns []*daemon.Conn
	for range 24 {
		la.sent++
		cc, err := daemon.Dial(sock)
		if err != nil {
			return err
		}
		conns = append(conns, cc)
		if _, err := cc.Stats(); errors.Is(err, daemon.ErrQuota) {
			la.kinds["connections refused: quota"]++
		}
	}
	for _, cc := range conns {
		cc.Close()
	}
	return nil
}

// garbageDescriptors posts random descriptors on held's request queue, one
// at a time, each taken by the engine before the next, then waits (up to
// 10 s) for the engine to have refused them all, as c's stats count.
func (la *localAttack) garbageDescriptors(c *daemon.Conn, held *daemon.Endpoint) error {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		// Never a real message: the table has one entry.
		d := endpoint.Descriptor{Class: endpoint.Class(rng.IntN(5)), NArgs: uint8(rng.IntN(12)), Dest: 1 + rng.Uint32()%4,
			Offset: rng.Uint32(), Length: rng.Uint32() % 100000, Handler: rng.Uint32()}
		if err := held.Send(endpoint.RequestSend, &d); err == nil {
			la.sent++
			la.garbage++
		}
		for range 100 {
			if _, taken := held.Progress(endpoint.RequestSend); taken == uint32(la.garbage) {
				break
			}
			time.Sleep(10 * time.Microsecond)
		}
	}
	// The engine refuses them all, counting each by reason.
	for bound := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s, err := c.Stats()
		if err != nil {
			return err
		}
		la.refused = 0
		for _, ep := range s.List {
			if ep.ID == held.ID {
				for _, n := range ep.Queues.Refused {
					la.refused += n
				}
			}
		}
		if la.refused >= la.garbage || time.Now().After(bound) {
			return nil
		}
	}
}

// localAftermath waits (up to 10 s) for the endpoints of the local user's
// closed connection to have gone with it, the large one released off the
// engine's path since before, and returns A's daemon's stats then.
func localAftermath(ha *firmwareHost, before daemon.Stats) (daemon.Stats, error) {
	for bound := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		after, err := ha.d.Stats()
		if err != nil {
			return after, err
		}
		if after.Endpoints == 0 && after.BigReleased > before.BigReleased || time.Now().After(bound) {
			return after, nil
		}
	}
}
