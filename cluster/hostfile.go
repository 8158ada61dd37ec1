package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// MaxRanks bounds the ranks of a hostfile.
const MaxRanks = 1 << 16

// errHostfile is wrapped by every hostfile syntax error.
var errHostfile = errors.New("cluster: bad hostfile")

// Hostfile is a static job for machines without a launcher: one line per
// rank, and where the tasks meet.
//
//	# xam hostfile: blank lines and text after '#' are ignored
//	rendezvous alpha:7170                # rank 0 listens on this port; the others connect to HOST:PORT
//	0  alpha  enp1s0  02:00:00:00:00:01  # rank node device [mac]
//	1  beta   enp1s0  02:00:00:00:00:02
//
// Every rank from 0 to n-1 has exactly one line, in any order; several
// ranks may share a node. A node's host id is the order in which its name
// first appears in rank order. The device is the network interface the
// rank uses, the MAC (optional) its address.
type Hostfile struct {
	Rendezvous string // HOST:PORT of rank 0's rendezvous
	Ranks      []HostfileRank
	Digest     string // of the parsed contents: every task's file must agree
}

// HostfileRank is one rank's line.
type HostfileRank struct {
	Node   string
	Device string
	MAC    net.HardwareAddr // nil when not given
}

// ParseHostfile reads a hostfile. Errors name the line.
func ParseHostfile(r io.Reader) (*Hostfile, error) {
	h := &Hostfile{}
	byRank := map[int]HostfileRank{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if err := h.parseLine(f, byRank); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", errHostfile, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", errHostfile, err)
	}
	if h.Rendezvous == "" {
		return nil, fmt.Errorf("%w: no rendezvous line (rendezvous HOST:PORT, where rank 0 listens)", errHostfile)
	}
	if len(byRank) == 0 {
		return nil, fmt.Errorf("%w: no ranks (lines RANK NODE DEVICE [MAC])", errHostfile)
	}
	for r := range len(byRank) {
		hr, ok := byRank[r]
		if !ok {
			return nil, fmt.Errorf("%w: %d ranks but no line for rank %d (ranks run from 0 to n-1)", errHostfile, len(byRank), r)
		}
		h.Ranks = append(h.Ranks, hr)
	}
	sum := sha256.New()
	fmt.Fprintf(sum, "rendezvous %s\n", h.Rendezvous)
	for r, hr := range h.Ranks {
		fmt.Fprintf(sum, "%d %s %s %s\n", r, hr.Node, hr.Device, hr.MAC)
	}
	h.Digest = hex.EncodeToString(sum.Sum(nil)[:8])
	return h, nil
}

// parseLine reads one non-empty line's fields.
func (h *Hostfile) parseLine(f []string, byRank map[int]HostfileRank) error {
	if f[0] == "rendezvous" {
		if len(f) != 2 {
			return errors.New("want: rendezvous HOST:PORT")
		}
		if h.Rendezvous != "" {
			return errors.New("a second rendezvous line")
		}
		host, port, err := net.SplitHostPort(f[1])
		if err != nil {
			return fmt.Errorf("rendezvous %q: %w", f[1], err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("rendezvous %q: port %q is not 1 to 65535", f[1], port)
		}
		if host == "" {
			return fmt.Errorf("rendezvous %q: no host (rank 0's address, as the others reach it)", f[1])
		}
		h.Rendezvous = f[1]
		return nil
	}
	if len(f) < 3 || len(f) > 4 {
		return fmt.Errorf("%d fields: want RANK NODE DEVICE [MAC], or rendezvous HOST:PORT", len(f))
	}
	rank, err := strconv.Atoi(f[0])
	if err != nil || rank < 0 || rank >= MaxRanks || (len(f[0]) > 1 && f[0][0] == '0') {
		return fmt.Errorf("rank %q: want a number from 0 to %d", f[0], MaxRanks-1)
	}
	if _, dup := byRank[rank]; dup {
		return fmt.Errorf("rank %d appears twice", rank)
	}
	hr := HostfileRank{Node: f[1], Device: f[2]}
	if err := checkText(hr.Node); err != nil || len(hr.Node) > 253 {
		return fmt.Errorf("node %q: want a host name of letters, digits and -_.", hr.Node)
	}
	if len(hr.Device) > 15 || strings.ContainsAny(hr.Device, "/:") {
		return fmt.Errorf("device %q: want a network interface name (at most 15 bytes, no '/' or ':')", hr.Device)
	}
	if len(f) == 4 {
		mac, err := net.ParseMAC(f[3])
		if err != nil || len(mac) != 6 {
			return fmt.Errorf("MAC %q: want an Ethernet address like 02:00:00:00:00:01", f[3])
		}
		hr.MAC = mac
	}
	byRank[rank] = hr
	return nil
}

// FromHostfile joins the job of the hostfile at path as rank: it reads the
// file and meets the other ranks at the rendezvous (rank 0 listens there,
// the others connect, retrying until ctx ends). Every task must read the
// same file. It gives the same Job as Join: Put, Fence, Get, Exchange.
func FromHostfile(ctx context.Context, path string, rank int) (*Job, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	h, err := ParseHostfile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return h.Join(ctx, rank)
}

// Join joins the hostfile's job as rank, as FromHostfile does.
func (h *Hostfile) Join(ctx context.Context, rank int) (*Job, error) {
	if rank < 0 || rank >= len(h.Ranks) {
		return nil, fmt.Errorf("cluster: rank %d: the hostfile has ranks 0 to %d", rank, len(h.Ranks)-1)
	}
	j := &Job{Launcher: "hostfile", Rank: rank, Size: len(h.Ranks), JobID: h.Digest}
	me := h.Ranks[rank]
	for r, hr := range h.Ranks {
		if !slices.Contains(j.Nodes, hr.Node) {
			j.Nodes = append(j.Nodes, hr.Node)
		}
		if hr.Node == me.Node && r < rank {
			j.LocalRank++
		}
	}
	j.Node, j.Device, j.MAC = me.Node, me.Device, me.MAC
	j.NodeID = slices.Index(j.Nodes, me.Node)
	j.HostID = j.NodeID
	kv, err := joinRendezvous(ctx, h.Rendezvous, h.Digest, rank, len(h.Ranks))
	if err != nil {
		return nil, err
	}
	j.kv = kv
	return j, nil
}
