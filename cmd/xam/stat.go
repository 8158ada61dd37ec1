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
	read := func() error {
		link, err := netlink.LinkByName(*dev)
		if err != nil {
			return fmt.Errorf("device %s: %w", *dev, err)
		}
		c, err = loader.CountersOn(link.Attrs().Index)
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
			Device string          `json:"device"`
			XDP    loader.Counters `json:"xdp"`
		}{*dev, c})
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
	return tw.Flush()
}
