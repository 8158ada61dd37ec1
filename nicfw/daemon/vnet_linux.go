//go:build linux

package daemon

import (
	"bufio"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/nicfw"
)

// Virtual networks and who may open their endpoints.
//
// A virtual network's tag is a capability: the engine delivers a message
// only to an endpoint of the sender's tag, on any host. On one daemon, a
// tag also has an owner: the user who opened its first endpoint there (its
// creator). Later opens of the tag on that daemon are granted only to the
// users the creator lets in: the creator's uid, the members of the groups
// the creator's process had (its gid and supplementary groups, read from
// the connection: SO_PEERCRED, SO_PEERGROUPS), and the uids and gids it
// granted (GrantRequest, `xam fw grant`); root and the daemon's own user
// may open any. The daemon forgets a network when its last endpoint on
// this daemon closes (and its grants with it).
//
// A tag of 0 in an open asks for a new network: the daemon draws its tag
// (NewTag) and the reply carries it, for the job's other hosts. A tag the
// caller chooses must not be weak (WeakTag) unless the caller is
// privileged: so a user on another host cannot take a tag a job uses
// before the job opens it there, unless it guesses the tag.

// WeakTag reports whether tag is too easy to guess to be a virtual
// network's capability: below 2^32, or with fewer than 16 or more than
// 48 of its 64 bits set (a constant, a pattern, a small counter). A tag
// drawn at random is weak with a probability of about 2.4e-5; NewTag
// never returns one. Only root and the daemon's user may make a virtual
// network with a weak tag (services, labs, the benchmarks' fixed tags).
func WeakTag(tag uint64) bool {
	n := bits.OnesCount64(tag)
	return tag>>32 == 0 || n < 16 || n > 48
}

// NewTag draws a tag for a new virtual network from crypto/rand: 64 bits,
// never weak (WeakTag). A job draws one and gives it to all its hosts
// (an open with Tag 0 has the daemon draw it).
func NewTag() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand)
		if t := binary.LittleEndian.Uint64(b[:]); !WeakTag(t) {
			return t
		}
	}
}

// Network is a virtual network as Stats shows it to its creator and root.
type Network struct {
	Tag     uint64 `json:"tag"`
	Creator uint32 `json:"creator"` // the uid that opened its first endpoint here
	// Groups are the creator's groups when it made the network: their
	// members may open its endpoints.
	Groups []uint32 `json:"groups"`
	// UIDs and GIDs are the users and groups granted (GrantRequest).
	UIDs      []uint32 `json:"uids,omitempty"`
	GIDs      []uint32 `json:"gids,omitempty"`
	Endpoints int      `json:"endpoints"` // open on this daemon
}

// GrantRequest lets a user (UID) or a group (GID) open endpoints of the
// virtual network Tag on this daemon, or, with Revoke, no longer: its
// endpoints already open stay open. Only the network's creator, root and
// the daemon's user may grant.
type GrantRequest struct {
	Op     string  `json:"op"` // "grant"
	Tag    uint64  `json:"tag"`
	UID    *uint32 `json:"uid,omitempty"`
	GID    *uint32 `json:"gid,omitempty"`
	Revoke bool    `json:"revoke,omitempty"`
}

// network is a virtual network that has endpoints on this daemon.
type network struct {
	key        []byte // VNet.Key: what every endpoint of it here gives
	creator    uint32
	groups     []uint32
	uids, gids map[uint32]bool
	endpoints  int // open or being opened
}

// peer is what the daemon knows of a connection's process: its
// credentials when it connected.
type peer struct {
	pid        int32
	uid, gid   uint32
	groups     []uint32 // gid and the supplementary groups
	privileged bool     // root or the daemon's user
}

// allows reports whether p may open n's endpoints.
func (n *network) allows(p *peer) bool {
	if p.privileged || p.uid == n.creator || n.uids[p.uid] {
		return true
	}
	for _, g := range p.groups {
		if n.gids[g] || slices.Contains(n.groups, g) {
			return true
		}
	}
	return false
}

// join reserves an endpoint of virtual network tag for p: it makes the
// network (drawing its tag if tag is 0) or checks that p may join it. It
// returns the network's tag; leave gives the reservation back.
func (d *Daemon) join(p *peer, tag uint64, key []byte) (uint64, error) {
	if key != nil && len(key) != 16 && len(key) != 32 {
		return 0, fmt.Errorf("%w: a key of %d bytes, want 16 or 32", nicfw.ErrConfig, len(key))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if tag == 0 {
		for tag = NewTag(); d.nets[tag] != nil; tag = NewTag() {
		}
	}
	n := d.nets[tag]
	switch {
	case n == nil && WeakTag(tag) && !p.privileged:
		return 0, fmt.Errorf("%w: tag %#x: uid %d may make a virtual network only with tag 0 (the daemon draws one) or a tag drawn at random (daemon.NewTag)",
			ErrWeakTag, tag, p.uid)
	case n == nil:
		n = &network{creator: p.uid, groups: slices.Clone(p.groups), key: slices.Clone(key)}
		d.nets[tag] = n
	case !n.allows(p):
		return 0, fmt.Errorf("%w: virtual network %#x is another user's: uid %d may open its endpoints only if its creator grants it (xam fw grant)",
			ErrPermission, tag, p.uid)
	case len(n.key) != len(key) || subtle.ConstantTimeCompare(n.key, key) != 1:
		return 0, fmt.Errorf("%w: virtual network %#x: not its key", ErrPermission, tag)
	}
	n.endpoints++
	return tag, nil
}

// leave gives back an endpoint of tag (join); the network is forgotten
// with its last endpoint.
func (d *Daemon) leave(tag uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := d.nets[tag]; n != nil {
		if n.endpoints--; n.endpoints <= 0 {
			delete(d.nets, tag)
		}
	}
}

// grant applies a GrantRequest from p.
func (d *Daemon) grant(p *peer, req GrantRequest) error {
	if (req.UID == nil) == (req.GID == nil) {
		return fmt.Errorf("%w: a grant names a uid or a gid", nicfw.ErrConfig)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.nets[req.Tag]
	if n == nil || p.uid != n.creator && !p.privileged {
		// The same answer for a network that does not exist and one that
		// is not p's: no oracle for others' tags.
		if p.privileged {
			return fmt.Errorf("%w: tag %#x", ErrNoNetwork, req.Tag)
		}
		return fmt.Errorf("%w: uid %d made no virtual network %#x on this daemon: only its creator and root grant", ErrPermission, p.uid, req.Tag)
	}
	set, id := &n.uids, req.UID
	if req.GID != nil {
		set, id = &n.gids, req.GID
	}
	if req.Revoke {
		delete(*set, *id)
		return nil
	}
	if *set == nil {
		*set = map[uint32]bool{}
	}
	if len(*set) >= maxGrants {
		return fmt.Errorf("%w: virtual network %#x has %d grants of that kind, the most allowed", ErrQuota, req.Tag, maxGrants)
	}
	(*set)[*id] = true
	return nil
}

// maxGrants bounds the uids, and the gids, granted on one network.
const maxGrants = 256

// networksFor returns the networks p may see (root: all; others: those it
// made), by tag; d.mu is held.
func (d *Daemon) networksFor(p *peer) []Network {
	var l []Network
	for tag, n := range d.nets {
		if !p.privileged && p.uid != n.creator {
			continue
		}
		nw := Network{Tag: tag, Creator: n.creator, Groups: slices.Clone(n.groups), Endpoints: n.endpoints}
		for u := range n.uids {
			nw.UIDs = append(nw.UIDs, u)
		}
		for g := range n.gids {
			nw.GIDs = append(nw.GIDs, g)
		}
		slices.Sort(nw.UIDs)
		slices.Sort(nw.GIDs)
		l = append(l, nw)
	}
	slices.SortFunc(l, func(a, b Network) int {
		if a.Tag < b.Tag {
			return -1
		}
		if a.Tag > b.Tag {
			return 1
		}
		return 0
	})
	return l
}

// redact makes s what p may see: the tags of endpoints that are neither
// p's nor of a network p made are 0, and only p's networks are listed
// (root and the daemon's user see everything).
func (d *Daemon) redact(s *Stats, p *peer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s.Networks = d.networksFor(p)
	if p.privileged {
		return
	}
	for i := range s.List {
		ep := &s.List[i]
		o, ok := d.owners[ep.ID]
		if ok && o.tag == ep.Tag && (o.uid == p.uid || d.nets[o.tag] != nil && d.nets[o.tag].creator == p.uid) {
			continue
		}
		ep.Tag = 0
	}
}

// peerOf reads the credentials of the process at the other end of the
// socket fd, as they were when it connected: SO_PEERCRED, and its groups
// from SO_PEERGROUPS (or, on kernels without it, /proc/PID/status).
func peerOf(fd int, cred *unix.Ucred) *peer {
	p := &peer{pid: cred.Pid, uid: cred.Uid, gid: cred.Gid, groups: []uint32{cred.Gid},
		privileged: cred.Uid == 0 || int(cred.Uid) == os.Geteuid()}
	groups, err := peerGroups(fd)
	if err != nil {
		groups, _ = procGroups(cred.Pid) // none: the gid alone
	}
	for _, g := range groups {
		if !slices.Contains(p.groups, g) {
			p.groups = append(p.groups, g)
		}
	}
	return p
}

// peerGroups returns the supplementary groups of the socket's peer
// (SO_PEERGROUPS, Linux 4.13).
func peerGroups(fd int) ([]uint32, error) {
	n := 32
	for {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case e == unix.ERANGE && int(size/4) > n && size/4 <= 1<<16:
			n = int(size / 4) // the kernel said how many
		case e != 0:
			return nil, e
		default:
			return buf[:size/4], nil
		}
	}
}

// procGroups reads the supplementary groups of process pid from
// /proc/PID/status.
func procGroups(pid int32) ([]uint32, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var gs []uint32
		for _, f := range strings.Fields(line) {
			g, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil, err
			}
			gs = append(gs, uint32(g))
		}
		return gs, nil
	}
	return nil, errors.Join(sc.Err(), errors.New("no Groups line"))
}
