package job

import (
	"context"
	"errors"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/datapath"
)

// GRIM is a task's GRIM endpoint in its job: Config.Peers[r] is rank r's
// endpoint, so that a destination is a rank, and the registry's central
// endpoint (Peers[0]) is rank 0's. The embedded endpoint is used as
// package grim says; Close closes what OpenGRIM opened.
type GRIM struct {
	*grim.Endpoint
	Job   *cluster.Job
	Mode  Mode
	Tag   uint64         // the job's virtual network (grim.Config.Tag)
	Cards []cluster.Card // every rank's card, as exchanged
	// DataPath, in inline mode, is the node's data path that this task
	// opened; nil in firmware mode.
	DataPath *datapath.Endpoint
	node     *node
}

// OpenGRIM opens this task's GRIM endpoint of the job, as OpenAMII opens
// an AM-II one: cfg.GRIM configures it, and its Peers, Self and Tag come
// from the job (every rank's endpoint, this task's rank, the job's tag).
// In firmware mode each task takes a free range of grim.MaxChannels ids on
// its daemon, which its endpoint reserves.
func OpenGRIM(ctx context.Context, j *cluster.Job, cfg Config) (*GRIM, error) {
	mode, err := cfg.mode()
	if err != nil {
		return nil, err
	}
	g := &GRIM{Job: j, Mode: mode}
	var view *daemonView
	socket := cfg.socket()
	o := round{api: "GRIM", tag: cfg.Tag}
	o.prepare = func(attempt int, tag uint64) (cluster.Card, error) {
		if mode == Inline {
			if g.node == nil {
				n, err := lookDevice(&cfg, j)
				if err != nil {
					return cluster.Card{}, err
				}
				g.node = n
			}
			return inlineCard(g.node, &cfg, cfg.first()), nil
		}
		v, err := viewDaemon(socket)
		if err != nil {
			return cluster.Card{Socket: socket}, err
		}
		view = v
		id, err := pickID(v.used, cfg.first(), grim.MaxChannels, j.LocalRank, attempt, tag)
		return firmwareCard(j, socket, v, id), err
	}
	o.open = func(cards []cluster.Card, tag uint64) (func() error, error) {
		peers, err := checkIDs(cards)
		if err != nil {
			return nil, err
		}
		gc := cfg.GRIM
		gc.Peers, gc.Self, gc.Tag = peers, j.Rank, tag
		g.Tag, g.Cards = tag, cards
		if mode == Firmware {
			ep, err := dialGRIM(socket, gc)
			if err != nil {
				return nil, err
			}
			g.Endpoint = ep
			if err := checkDaemon(j, socket, ep.Name().Host, view, cards); err != nil {
				return g.Close, err
			}
		} else {
			hosts, err := checkInline(j, cards)
			if err != nil {
				return nil, err
			}
			if err := g.node.open(&cfg); err != nil {
				return nil, err
			}
			ep, err := grim.Open(g.node.path.Sock, grim.Inline{Hosts: hosts, Engine: cfg.Engine}, gc)
			if err != nil {
				return g.node.close, err
			}
			g.Endpoint, g.DataPath = ep, g.node.path
		}
		return g.Close, setup(cfg.SetupGRIM, g)
	}
	if err := o.run(ctx, j); err != nil {
		g.Close() //nolint:errcheck // what it opened, if anything
		return nil, err
	}
	return g, nil
}

// Barrier fences the job while it keeps the endpoint served, as
// AMII.Barrier does (rank 0 goes on answering the registry meanwhile).
func (g *GRIM) Barrier(ctx context.Context) error { return barrier(ctx, g.Job, g.Endpoint.Poll) }

// Lost returns a *Lost for a returned message whose reason says its
// destination rank is gone, nil for other returns.
func (g *GRIM) Lost(r grim.Returned) error { return lost(g.Cards, r.Dest, r.Reason) }

// Close closes the endpoint and, in inline mode, the data path.
func (g *GRIM) Close() error {
	var errs []error
	if g.Endpoint != nil {
		errs = append(errs, g.Endpoint.Close())
	}
	errs = append(errs, g.node.close())
	g.DataPath = nil
	return errors.Join(errs...)
}
