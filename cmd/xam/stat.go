package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// runStat prints the counters of the xam XDP program on a device, whichever
// process attached it. (A socket's XDP_STATISTICS and an engine's counters
// belong to their process; the programs that own them report them.)
func runStat(e *env, args []string) error {
	fs := newFlags(e, "stat", "stat --dev IF [--netns NS] [--json]")
	dev := fs.String("dev", "", "the device whose xam XDP program to read")
	ns := fs.String("netns", "", "the named network namespace the device is in")
	asJSON := fs.Bool("json", false, "print the counters as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dev == "" {
		return usageError("--dev is required")
	}
	if err := needPrivileges("xam stat"); err != nil {
		return err
	}
	var c loader.Counters
	var qs []loader.QueueCount
	read := func() error {
		link, err := netlink.LinkByName(*dev)
		if err != nil {
			return fmt.Errorf("device %s: %w", *dev, err)
		}
		if c, err = loader.CountersOn(link.Attrs().Index); err != nil {
			return err
		}
		qs, err = loader.QueueCountersOn(link.Attrs().Index)
		return err
	}
	var err error
	if *ns != "" {
		var n *lab.Namespace
		if n, err = lab.OpenNamespace(*ns); err == nil {
			err = n.Do(read)
			n.Close()
		}
	} else {
		err = read()
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(struct {
			Device string              `json:"device"`
			XDP    loader.Counters     `json:"xdp"`
			Queues []loader.QueueCount `json:"queues"`
		}{*dev, c, qs})
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	for _, row := range []struct {
		name string
		v    uint64
	}{
		{"received (xam frames)", c.Received}, {"redirected to AF_XDP", c.Redirected},
		{"redirect misses (no socket)", c.RedirectMiss}, {"passed to the kernel", c.Passed},
		{"  of which xam's EtherType, other MAC", c.OtherDst}, {"malformed, dropped", c.Malformed},
		{"dropped by fault injection", c.FaultDropped}, {"corrupted by fault injection", c.FaultCorrupted},
		{"cells with a bad HEC", c.HECErrors}, {"dropped for a bad HEC", c.HECDropped},
		{"not admitted (VPI/VCI), dropped", c.NotAdmitted},
	} {
		fmt.Fprintf(tw, "%s\t%d\t\n", row.name, row.v)
	}
	for _, q := range qs {
		fmt.Fprintf(tw, "queue %d: xam frames\t%d\t", q.Queue, q.Frames)
		if q.NoSocket > 0 {
			fmt.Fprintf(tw, " %d with no socket on the queue", q.NoSocket)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if advice := queueAdvice(*dev, qs); advice != "" {
		fmt.Fprintln(e.stdout, "advice: "+advice)
	}
	return nil
}

// queueAdvice says what to do about frames of xam's that land on queues
// of dev without a socket ("" if none did).
func queueAdvice(dev string, qs []loader.QueueCount) string {
	var missed []int
	for _, q := range qs {
		if q.NoSocket > 0 {
			missed = append(missed, q.Queue)
		}
	}
	if len(missed) == 0 {
		return ""
	}
	return fmt.Sprintf("xam frames land on queues %v of %s, which have no socket, and are lost: give xam fw --queues with them all, "+
		"or steer xam's EtherType to one queue (ethtool -N %s flow-type ether proto 0x88b5 action 0) where the driver can (docs/nics.md)", missed, dev, dev)
}
