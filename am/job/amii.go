package job

import (
	"context"
	"errors"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
)

// AMII is a task's AM-II endpoint in its job: index r of its translation
// table is rank r's endpoint, so that a request's destination is a rank,
// and Token.Source a sender's rank. Every rank's endpoint is in one
// virtual network of its own (Tag). The embedded endpoint is used as
// package amii says; Close closes what OpenAMII opened.
type AMII struct {
	*amii.Endpoint
	Job   *cluster.Job
	Mode  Mode
	Tag   uint64         // the job's virtual network
	Table []amii.Name    // Table[r]: rank r's endpoint (host id, endpoint id)
	Cards []cluster.Card // every rank's card, as exchanged
	// DataPath, in inline mode, is the node's data path that this task
	// opened (its XDP program: DataPath.Prog); nil in firmware mode.
	DataPath *datapath.Endpoint
	node     *node
}

// OpenAMII opens this task's AM-II endpoint of the job: in inline mode on
// the node's device, with an engine of its own whose host table holds
// every other node's MAC; in firmware mode through the node's daemon. Every
// task of the job calls it, with the same mode; it returns once every
// rank's endpoint exists (see the package documentation), or with the
// same *OpenError on every rank when one could not open.
func OpenAMII(ctx context.Context, j *cluster.Job, cfg Config) (*AMII, error) {
	mode, err := cfg.mode()
	if err != nil {
		return nil, err
	}
	a := &AMII{Job: j, Mode: mode}
	var view *daemonView
	socket := cfg.socket()
	o := round{api: "AM-II", tag: cfg.Tag}
	o.prepare = func(attempt int, tag uint64) (cluster.Card, error) {
		if mode == Inline {
			if a.node == nil {
				n, err := lookDevice(&cfg, j)
				if err != nil {
					return cluster.Card{}, err
				}
				a.node = n
			}
			return inlineCard(a.node, &cfg, cfg.first()), nil
		}
		v, err := viewDaemon(socket)
		if err != nil {
			return cluster.Card{Socket: socket}, err
		}
		view = v
		id, err := pickID(v.used, cfg.first(), 1, j.LocalRank, attempt, tag)
		return firmwareCard(j, socket, v, id), err
	}
	o.open = func(cards []cluster.Card, tag uint64) (func() error, error) {
		table, err := checkIDs(cards)
		if err != nil {
			return nil, err
		}
		vn := amii.VNet{ID: table[j.Rank].Endpoint, Tag: tag, Table: table}
		a.Tag, a.Cards, a.Table = tag, cards, table
		if mode == Firmware {
			ep, err := dialAMII(socket, vn, cfg.AMII)
			if err != nil {
				return nil, err
			}
			a.Endpoint = ep
			if err := checkDaemon(j, socket, ep.Name().Host, view, cards); err != nil {
				return a.Close, err
			}
		} else {
			hosts, err := checkInline(j, cards)
			if err != nil {
				return nil, err
			}
			if err := a.node.open(&cfg); err != nil {
				return nil, err
			}
			ep, err := amii.Open(a.node.path.Sock, amii.Inline{Host: nicfw.HostID(j.HostID), Hosts: hosts, Engine: cfg.Engine}, vn, cfg.AMII)
			if err != nil {
				return a.node.close, err
			}
			a.Endpoint, a.DataPath = ep, a.node.path
		}
		return a.Close, setup(cfg.SetupAMII, a)
	}
	if err := o.run(ctx, j); err != nil {
		a.Close() //nolint:errcheck // what it opened, if anything
		return nil, err
	}
	return a, nil
}

// Barrier fences the job while it keeps the endpoint served (Poll), so
// that a rank done with its work still answers those that are not: it
// returns once every rank has called it. Call it before Close.
func (a *AMII) Barrier(ctx context.Context) error { return barrier(ctx, a.Job, a.Endpoint.Poll) }

// Lost returns a *Lost for a returned message whose reason says its
// destination rank is gone (its host unreachable, its endpoint closed or
// no more, its daemon restarted, no reply), nil for other returns.
func (a *AMII) Lost(r amii.Returned) error { return lost(a.Cards, r.Dest, r.Reason) }

// Close closes the endpoint and, in inline mode, the data path.
func (a *AMII) Close() error {
	var errs []error
	if a.Endpoint != nil {
		errs = append(errs, a.Endpoint.Close())
	}
	errs = append(errs, a.node.close())
	a.DataPath = nil
	return errors.Join(errs...)
}
