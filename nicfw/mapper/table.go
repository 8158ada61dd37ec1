package mapper

import (
	"bytes"
	"net"
	"slices"
)

// HostID names a host in a Table. A host keeps its id while it stays in
// the table (see the package documentation).
type HostID uint16

// Host is one entry of the host table.
type Host struct {
	ID    HostID
	MAC   net.HardwareAddr
	Queue int // the AF_XDP queue the host receives xam frames on
}

// Table is the host table a leader distributed (or built, on the leader).
// Hosts are in MAC order, with distinct ids. The zero Table (Epoch 0) means
// no table yet.
type Table struct {
	Epoch  uint64           // the leader's version of the table; grows with every change
	Leader net.HardwareAddr // the host that built it
	Hosts  []Host
}

// Lookup returns the host with the given MAC.
func (t Table) Lookup(mac net.HardwareAddr) (Host, bool) {
	i, ok := slices.BinarySearchFunc(t.Hosts, mac, func(h Host, m net.HardwareAddr) int {
		return bytes.Compare(h.MAC, m)
	})
	if !ok {
		return Host{}, false
	}
	return t.Hosts[i], true
}

// SameHosts reports whether t and u list the same hosts (MACs and queues,
// hence ids), whatever their epochs and leaders.
func (t Table) SameHosts(u Table) bool {
	return slices.EqualFunc(t.Hosts, u.Hosts, func(a, b Host) bool {
		return a.ID == b.ID && a.Queue == b.Queue && bytes.Equal(a.MAC, b.MAC)
	})
}

// clone returns a deep copy of t.
func (t Table) clone() Table {
	c := Table{Epoch: t.Epoch, Leader: slices.Clone(t.Leader)}
	if t.Hosts != nil {
		c.Hosts = make([]Host, len(t.Hosts))
		for i, h := range t.Hosts {
			c.Hosts[i] = Host{ID: h.ID, MAC: slices.Clone(h.MAC), Queue: h.Queue}
		}
	}
	return c
}

// tableOf converts a TABLE message.
func tableOf(m *Message) Table {
	t := Table{Epoch: m.Epoch, Leader: net.HardwareAddr(slices.Clone(m.MAC[:])), Hosts: make([]Host, len(m.Entries))}
	for i, e := range m.Entries {
		t.Hosts[i] = Host{ID: e.ID, MAC: net.HardwareAddr(slices.Clone(e.MAC[:])), Queue: int(e.Queue)}
	}
	return t
}
