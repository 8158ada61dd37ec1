package datapath

import (
	"errors"
	"fmt"

	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// Duplicators are loader's duplicators on the ports of a lab's switch.
type Duplicators []*loader.Duplicator

// Duplicate has the switch of lab l deliver the fraction rate of the xam
// frames each host sends twice: a loader.Duplicator on the ingress of
// every port (the port's side towards its host; AF_XDP transmit bypasses
// the sending device's own tc hooks, and the receiving host's XDP runs
// before its tc, so the bridge is where a frame can be copied). seed,
// when not 0, seeds the decisions (port i uses seed+i). The lab must have
// a switch.
func Duplicate(l *lab.Lab, rate float64, seed uint64) (Duplicators, error) {
	if l.Switch == nil {
		return nil, errors.New("datapath: duplication needs a lab with a switch")
	}
	var ds Duplicators
	for i, port := range l.Switch.Ports {
		err := l.Switch.Do(func() error {
			link, err := l.Switch.Netlink.LinkByName(port)
			if err != nil {
				return err
			}
			s := seed
			if s != 0 {
				s += uint64(i)
			}
			d, err := loader.AttachDuplicator(link.Attrs().Index, loader.Duplicate{Rate: rate, Seed: s})
			if err != nil {
				return err
			}
			ds = append(ds, d)
			return nil
		})
		if err != nil {
			ds.Close()
			return nil, fmt.Errorf("datapath: duplicator on %s: %w", port, err)
		}
	}
	return ds, nil
}

// Counters sums the duplicators' counters.
func (ds Duplicators) Counters() (loader.DupCounters, error) {
	var sum loader.DupCounters
	for _, d := range ds {
		c, err := d.Counters()
		if err != nil {
			return sum, err
		}
		sum.Seen += c.Seen
		sum.Duplicated += c.Duplicated
		sum.CloneErrors += c.CloneErrors
	}
	return sum, nil
}

// Close detaches the duplicators.
func (ds Duplicators) Close() error {
	var errs []error
	for _, d := range ds {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}
