package main

import (
	"fmt"
	"io"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/nicfw/daemon"
)

// tuneDevice applies the daemon's device settings at here for as long as
// it runs: the NAPI settings for busy polling (--tune-napi) and the
// n-tuple rule that steers xam's frames to its queue (--steer). undo puts
// the device back as it was, saying on e's stderr what it could not undo.
func (c *fwConfig) tuneDevice(e *env, here datapath.Place) (undo func(), err error) {
	var undos []func()
	undo = func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
	if c.tuneNAPI {
		var restore func() error
		if err := here.Do(func() (err error) { restore, err = netdev.TuneNAPI(c.dev); return err }); err != nil {
			return undo, fmt.Errorf("--tune-napi: %w", err)
		}
		undos = append(undos, func() {
			if err := here.Do(restore); err != nil {
				fmt.Fprintf(e.stderr, "xam fw: restoring %s's NAPI settings: %v\n", c.dev, err)
			}
		})
		fmt.Fprintf(e.stderr, "xam fw: %s: napi_defer_hard_irqs %d, gro_flush_timeout %d ns while the daemon runs\n", c.dev, netdev.TunedDeferHardIRQs, netdev.TunedGROFlushTimeout.Nanoseconds())
	}
	if c.steer {
		var port uint16
		if c.encap.UDP {
			port = c.encap.Port
		}
		var rule *netdev.SteerRule
		if err := here.Do(func() (err error) {
			rule, err = netdev.Steer(c.dev, cells.EtherType, port, c.encap.IPv6, c.queue)
			return err
		}); err != nil {
			undo()
			return func() {}, fmt.Errorf("--steer: %w", err)
		}
		undos = append(undos, func() {
			if err := here.Do(rule.Remove); err != nil {
				fmt.Fprintf(e.stderr, "xam fw: %v\n", err)
			}
		})
		fmt.Fprintf(e.stderr, "xam fw: %s: n-tuple rule %d, %s, while the daemon runs\n", c.dev, rule.Location, rule.What)
	}
	return undo, nil
}

// printLink says what the daemon's link is: device, queues, AF_XDP mode,
// busy polling and, in the UDP form, its counters and peers' next hops.
func printLink(w io.Writer, l *daemon.LinkInfo) {
	mb := ""
	if l.MultiBuffer {
		mb = ", multi-buffer frames"
	}
	queues := fmt.Sprintf("queue %d", l.Queue)
	if len(l.Queues) > 0 {
		queues = fmt.Sprintf("queues %v", l.Queues)
	}
	fmt.Fprintf(w, "link: %s %s, MTU %d%s, AF_XDP in %s mode%s\n", l.Device, queues, l.MTU, mb, l.XSKMode, whyText(l.XSKWhy))
	switch {
	case l.BusyPoll:
		fmt.Fprintf(w, "      preferred busy polling on NAPI %d\n", l.NAPIID)
	case l.BusyPollWhy != "":
		fmt.Fprintf(w, "      no busy polling: %s\n", l.BusyPollWhy)
	}
	if u := l.Encap; u != nil {
		st := u.Stats
		fmt.Fprintf(w, "      xam's UDP form (%s) from %s, %d bytes after IP and UDP; sent %d, received %d, dropped: %d unresolved, %d no peer, %d malformed\n",
			u.Form, u.Local, u.MTU, st.Sent, st.Received, st.Unresolved, st.NoPeer, st.Malformed)
		for _, p := range u.Peers {
			switch {
			case p.MAC == "":
				fmt.Fprintf(w, "      peer %s: next hop not resolved yet\n", p.Peer)
			case p.Via != "":
				fmt.Fprintf(w, "      peer %s: via %s (%s)\n", p.Peer, p.Via, p.MAC)
			default:
				fmt.Fprintf(w, "      peer %s: on the link (%s)\n", p.Peer, p.MAC)
			}
		}
	}
}
