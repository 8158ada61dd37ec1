package job

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/driver"
)

// SSAM is a task's SSAM endpoint in its job: one device on the node's
// data path with a connection to every other rank. SSAM's destinations
// are connection indices, which skip the task's own rank: Conn and Rank
// translate. The embedded endpoint is used as package ssam says; Close
// closes what OpenSSAM opened.
type SSAM struct {
	*ssam.Endpoint
	Job      *cluster.Job
	Cards    []cluster.Card // every rank's card, as exchanged
	DataPath *datapath.Endpoint
	dev      *driver.Device
	node     *node
}

// vciOf is the VCI on which rank receives from rank from (and from+1 its
// bulk cells): a pair of VCIs per sender, so that every connection of a
// device receives on circuits of its own.
func vciOf(from int) uint16 { return uint16(ssam.VCI + 2*from) }

// OpenSSAM opens this task's SSAM endpoint of the job, in inline mode only
// (SSAM has no daemon: its device is the process's own): it opens the
// data path on the node's device and a driver.Device with a connection to
// every other rank, rank p's on VCIs ssam.VCI+2p and +2p+1 at both ends.
// cfg.SSAM configures the endpoint. Every task of the job calls it, one
// task per node; it returns once every rank's device exists.
func OpenSSAM(ctx context.Context, j *cluster.Job, cfg Config) (*SSAM, error) {
	mode, err := cfg.mode()
	if err != nil {
		return nil, err
	}
	if mode != Inline {
		return nil, fmt.Errorf("%w: SSAM has no daemon (its device is the process's own): inline mode only", ErrConfig)
	}
	if int(vciOf(j.Size))+1 >= cells.MaxVCI || j.Size > driver.MaxConns {
		return nil, fmt.Errorf("%w: SSAM connects %d ranks pairwise: at most %d", ErrConfig, j.Size, (cells.MaxVCI-ssam.VCI)/2-1)
	}
	sc, err := cfg.SSAM.Filled()
	if err != nil {
		return nil, err
	}
	s := &SSAM{Job: j}
	// SSAM has no virtual network: a fixed tag spares the draw.
	o := round{api: "SSAM", tag: 1}
	o.prepare = func(int, uint64) (cluster.Card, error) {
		if s.node == nil {
			n, err := lookDevice(&cfg, j)
			if err != nil {
				return cluster.Card{}, err
			}
			s.node = n
		}
		return inlineCard(s.node, &cfg, 0), nil
	}
	o.open = func(cards []cluster.Card, _ uint64) (func() error, error) {
		if _, err := checkInline(j, cards); err != nil {
			return nil, err
		}
		var conns []driver.ConnSpec
		for p, c := range cards {
			if p != j.Rank {
				mac, _ := net.ParseMAC(c.MAC) // checked by checkInline
				conns = append(conns, driver.ConnSpec{Peer: mac, SendVCI: vciOf(j.Rank), RecvVCI: vciOf(p)})
			}
		}
		if err := s.node.open(&cfg); err != nil {
			return nil, err
		}
		dev, err := driver.Open(s.node.path.Sock, driver.Config{Conns: conns, SendSlots: ssam.SendSlots(sc.Window, sc.MaxMessage)})
		if err != nil {
			return s.node.close, err
		}
		s.dev, s.DataPath = dev, s.node.path
		ep, err := ssam.New(dev, sc)
		if err != nil {
			return s.Close, err
		}
		s.Endpoint, s.Cards = ep, cards
		return s.Close, setup(cfg.SetupSSAM, s)
	}
	if err := o.run(ctx, j); err != nil {
		s.Close() //nolint:errcheck // what it opened, if anything
		return nil, err
	}
	return s, nil
}

// Conn returns the connection index of rank, -1 for this task's own rank
// or one out of range.
func (s *SSAM) Conn(rank int) int {
	switch {
	case rank < 0 || rank >= s.Job.Size || rank == s.Job.Rank:
		return -1
	case rank > s.Job.Rank:
		return rank - 1
	}
	return rank
}

// Rank returns the rank of connection conn, -1 for one out of range.
func (s *SSAM) Rank(conn int) int {
	switch {
	case conn < 0 || conn >= s.Job.Size-1:
		return -1
	case conn >= s.Job.Rank:
		return conn + 1
	}
	return conn
}

// Barrier fences the job while it keeps the endpoint served, as
// AMII.Barrier does.
func (s *SSAM) Barrier(ctx context.Context) error { return barrier(ctx, s.Job, s.Endpoint.Poll) }

// Close closes the endpoint, its device and the data path.
func (s *SSAM) Close() error {
	var errs []error
	if s.Endpoint != nil {
		errs = append(errs, s.Endpoint.Close())
	}
	if s.dev != nil {
		errs = append(errs, s.dev.Close())
		s.dev = nil
	}
	errs = append(errs, s.node.close())
	s.DataPath = nil
	return errors.Join(errs...)
}
