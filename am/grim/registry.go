package grim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xam-project/xam/nicfw"
)

// Entry is a handler of the cluster's registry: its id and name, and the
// endpoints that registered it.
type Entry struct {
	ID     HandlerID
	Name   string
	Owners []Name
}

// Table is the cluster's handler registry, by name.
type Table map[string]Entry

// maxName is the longest handler name.
const maxName = 255

// errTable: a table or handler list that does not parse.
var errTable = errors.New("grim: malformed handler table")

// encodeTable writes entries, sorted by name: per entry the id (4 bytes),
// the name's length (1) and bytes, the number of owners (2) and each
// owner's host and endpoint (2 and 2), big-endian.
func encodeTable(t Table) []byte {
	var b []byte
	for _, name := range slices.Sorted(maps.Keys(t)) {
		e := t[name]
		b = binary.BigEndian.AppendUint32(b, uint32(e.ID))
		b = append(b, byte(len(name)))
		b = append(b, name...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.Owners)))
		for _, o := range e.Owners {
			b = binary.BigEndian.AppendUint16(b, uint16(o.Host))
			b = binary.BigEndian.AppendUint16(b, uint16(o.Endpoint))
		}
	}
	return b
}

// decodeTable parses what encodeTable wrote. A name twice, an empty name
// or bytes left over are errors.
func decodeTable(b []byte) (Table, error) {
	t := Table{}
	for len(b) > 0 {
		if len(b) < 5 {
			return nil, fmt.Errorf("%w: %d bytes left of an entry", errTable, len(b))
		}
		id := HandlerID(binary.BigEndian.Uint32(b))
		n := int(b[4])
		b = b[5:]
		if n == 0 || len(b) < n+2 {
			return nil, fmt.Errorf("%w: a name of %d bytes, %d left", errTable, n, len(b))
		}
		name := string(b[:n])
		owners := int(binary.BigEndian.Uint16(b[n:]))
		b = b[n+2:]
		if len(b) < 4*owners {
			return nil, fmt.Errorf("%w: %d owners, %d bytes left", errTable, owners, len(b))
		}
		e := Entry{ID: id, Name: name}
		for range owners {
			e.Owners = append(e.Owners, nicfw.Name{Host: nicfw.HostID(binary.BigEndian.Uint16(b)), Endpoint: nicfw.EndpointID(binary.BigEndian.Uint16(b[2:]))})
			b = b[4:]
		}
		if _, dup := t[name]; dup {
			return nil, fmt.Errorf("%w: %q twice", errTable, name)
		}
		t[name] = e
	}
	return t, nil
}

// registry is the central endpoint's merged table and the endpoints to
// tell when it changes.
type registry struct {
	table Table
	byID  map[HandlerID]string
	gen   uint32
	subs  []int // peers that published, in Config.Peers
}

func newRegistry() *registry { return &registry{table: Table{}, byID: map[HandlerID]string{}} }

// add merges the handlers of owner, peer index peer, into the table; it
// returns the names that conflict (a name under another id, an id under
// another name, a name bound to another peer), and merges nothing then.
func (r *registry) add(owner nicfw.Name, peer int, bind map[string]int, list Table) (conflicts []string) {
	for name, e := range list {
		if old, ok := r.table[name]; ok && old.ID != e.ID {
			conflicts = append(conflicts, name)
		}
		if b, ok := boundTo(bind, name); ok && b != peer {
			conflicts = append(conflicts, name)
		}
		if other, ok := r.byID[e.ID]; ok && other != name {
			conflicts = append(conflicts, name)
		}
	}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		return slices.Compact(conflicts)
	}
	changed := false
	for name, e := range list {
		old := r.table[name]
		if !slices.Contains(old.Owners, owner) {
			old.ID, old.Name, old.Owners = e.ID, name, append(old.Owners, owner)
			r.table[name], r.byID[e.ID] = old, name
			changed = true
		}
	}
	if changed {
		r.gen++
	}
	return nil
}

// subscribe adds peer to the endpoints told of changes.
func (r *registry) subscribe(peer int) {
	if !slices.Contains(r.subs, peer) {
		r.subs = append(r.subs, peer)
	}
}

// merge is HandlerRegister at the central endpoint: the requester's list,
// merged; the reply says whether it conflicted and the table's generation;
// the table goes to every endpoint that published once the handlers are
// done (push).
func (r *registry) merge(ep *Endpoint, tok *Token, data []byte) {
	peer, _ := tok.Source()
	list, err := decodeTable(data)
	status := uint32(0)
	switch {
	case err != nil:
		status = 2
	case peer >= len(ep.cfg.Peers):
		status = 2
	default:
		if r.add(ep.cfg.Peers[peer], peer, ep.cfg.Bind, list) != nil {
			status = 1
		}
		r.subscribe(peer)
	}
	tok.Reply(HandlerRegister, status, r.gen) //nolint:errcheck // lost, the requester times out
	ep.push = true
}

// HandleNamed is Handle with a name: it makes h the handler of id on this
// endpoint and names it for the cluster's registry, which holds the name
// once Publish has merged it at the central endpoint. A name already bound
// there to another id, or an id to another name, makes Publish fail with
// ErrConflict; here, the same checks against this endpoint's own handlers
// (a name named here already, under any id, is ErrConflict too) and the
// last table it received.
func (ep *Endpoint) HandleNamed(name string, id HandlerID, h Handler) error {
	switch {
	case name == "" || len(name) > maxName:
		return fmt.Errorf("%w: name %q: want 1..%d bytes", ErrConfig, name, maxName)
	case id < FirstUserHandler:
		return fmt.Errorf("%w: handler %d is predefined", ErrConflict, id)
	case h == nil:
		return fmt.Errorf("%w: no handler", ErrConfig)
	}
	if ep.closed {
		return ErrClosed
	}
	if b, ok := boundTo(ep.cfg.Bind, name); ok && b != ep.cfg.Self {
		return fmt.Errorf("%w: %q is bound to peer %d (Config.Bind)", ErrConflict, name, b)
	}
	if old, ok := ep.names[name]; ok {
		return fmt.Errorf("%w: %q is handler %d here already", ErrConflict, name, old)
	}
	for other, oid := range ep.names {
		if oid == id && other != name {
			return fmt.Errorf("%w: handler %d is %q here already", ErrConflict, id, other)
		}
	}
	if ep.handlers[id] != nil {
		return fmt.Errorf("%w: handler %d has a handler here already (Handle)", ErrConflict, id)
	}
	if e, ok := ep.table[name]; ok && e.ID != id {
		return fmt.Errorf("%w: %q is handler %d in the cluster", ErrConflict, name, e.ID)
	}
	ep.names[name] = id
	ep.setHandler(id, h)
	return nil
}

// Publish sends this endpoint's named handlers (HandleNamed) to the
// central endpoint, which merges them into the cluster's table, and waits
// until this endpoint has the merged table (Lookup), for at most
// Config.GiveUp. It returns ErrConflict naming the handlers the central
// refused. It may not be called from a handler.
func (ep *Endpoint) Publish() error {
	if err := ep.usable(); err != nil {
		return err
	}
	if ep.depth > 0 {
		return fmt.Errorf("%w: a handler may not publish", ErrDiscipline)
	}
	list := Table{}
	for name, id := range ep.names {
		list[name] = Entry{ID: id, Name: name}
	}
	if ep.registry != nil {
		// The central endpoint merges its own at once.
		conflicts := ep.registry.add(ep.name, ep.cfg.Self, ep.cfg.Bind, list)
		ep.registry.subscribe(ep.cfg.Self)
		ep.table, ep.tableGen = cloneTable(ep.registry.table), ep.registry.gen
		ep.push = true
		if err := ep.pushTable(); err != nil {
			return err
		}
		if conflicts != nil {
			return fmt.Errorf("%w: %q", ErrConflict, conflicts)
		}
		return nil
	}
	ep.publishing, ep.publishStatus, ep.publishGen = true, 0, 0
	if err := ep.chans[0].Bulk(0, HandlerRegister, encodeTable(list)); err != nil {
		return err
	}
	if err := ep.runUntil(func() bool { return !ep.publishing && ep.tableGen >= ep.publishGen }, func() string {
		return fmt.Sprintf("no answer from the central endpoint %v", ep.cfg.Peers[0])
	}); err != nil {
		return err
	}
	switch ep.publishStatus {
	case 0:
		return nil
	case 1:
		var conflicts []string
		for name, id := range ep.names {
			if e, ok := ep.table[name]; !ok || e.ID != id || !slices.Contains(e.Owners, ep.name) {
				conflicts = append(conflicts, name)
			}
		}
		slices.Sort(conflicts)
		return fmt.Errorf("%w: %q", ErrConflict, conflicts)
	default:
		return fmt.Errorf("%w: the central endpoint could not read the list", errTable)
	}
}

// publishAnswered is HandlerRegister's reply: the status and the table's
// generation then.
func (ep *Endpoint) publishAnswered(args [ShortArgs]uint32) {
	ep.publishing, ep.publishStatus, ep.publishGen = false, args[0], args[1]
}

// maxGenJump bounds how far a table's generation may lie ahead of the one
// held: the central endpoint counts changes one by one, so a table that
// jumps further (0xFFFFFFFF, say, to pin itself) is refused.
const maxGenJump = 1 << 16

// tableArrived is HandlerTable: a table of generation args[0] from the
// central endpoint; one older than held, one that jumps too far ahead or
// one that gives a bound name (Config.Bind) to another peer is refused.
func (ep *Endpoint) tableArrived(args [ShortArgs]uint32, data []byte) {
	if gen := args[0] - ep.tableGen; gen >= maxGenJump {
		ep.stats.Refused++ // older, or too far ahead
		return
	}
	t, err := decodeTable(data)
	if err == nil {
		err = ep.checkBound(t)
	}
	if err != nil {
		ep.stats.BadTables++
		return
	}
	ep.table, ep.tableGen = t, args[0]
}

// checkBound reports a bound name (Config.Bind) that t gives to another
// peer than its own.
func (ep *Endpoint) checkBound(t Table) error {
	if len(ep.cfg.Bind) == 0 {
		return nil
	}
	for name, e := range t {
		b, ok := boundTo(ep.cfg.Bind, name)
		if !ok {
			continue
		}
		for _, o := range e.Owners {
			if o != ep.cfg.Peers[b] {
				return fmt.Errorf("%w: %q owned by %v, bound to peer %d", errTable, name, o, b)
			}
		}
	}
	return nil
}

// boundTo returns the peer that bind binds name to: its own key, else the
// longest key ending in "." that it starts with.
func boundTo(bind map[string]int, name string) (int, bool) {
	if p, ok := bind[name]; ok {
		return p, true
	}
	best, peer := -1, 0
	for k, p := range bind {
		if strings.HasSuffix(k, ".") && strings.HasPrefix(name, k) && len(k) > best {
			best, peer = len(k), p
		}
	}
	return peer, best >= 0
}

// pushTable sends the registry's table to every endpoint that published
// (the central endpoint, outside handlers).
func (ep *Endpoint) pushTable() error {
	if !ep.push || ep.registry == nil {
		return nil
	}
	ep.push = false
	ep.table, ep.tableGen = cloneTable(ep.registry.table), ep.registry.gen
	b := encodeTable(ep.registry.table)
	for _, p := range ep.registry.subs {
		if p == ep.cfg.Self {
			continue
		}
		// From the last channel: channel 0 carries the endpoint's
		// replies, which the engine takes first, so that under a steady
		// stream of requests a push from it could wait for good.
		if err := ep.chans[len(ep.chans)-1].Bulk(p, HandlerTable, b, ep.registry.gen); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns the handler named name in the cluster, as of the last
// table this endpoint received (Publish).
func (ep *Endpoint) Lookup(name string) (Entry, bool) {
	e, ok := ep.table[name]
	return e, ok
}

// Owner returns the index in Config.Peers of the first endpoint that
// named name, for sending to it by name, and the handler's id:
// ErrNoHandler for a name the table does not hold.
func (ep *Endpoint) Owner(name string) (peer int, id HandlerID, err error) {
	e, ok := ep.table[name]
	if !ok || len(e.Owners) == 0 {
		return 0, 0, fmt.Errorf("%w: %q", ErrNoHandler, name)
	}
	i := slices.Index(ep.cfg.Peers, e.Owners[0])
	if i < 0 {
		return 0, 0, fmt.Errorf("%w: %q is at %v, not a peer", ErrBadDest, name, e.Owners[0])
	}
	return i, e.ID, nil
}

func cloneTable(t Table) Table {
	c := make(Table, len(t))
	for k, e := range t {
		e.Owners = slices.Clone(e.Owners)
		c[k] = e
	}
	return c
}
