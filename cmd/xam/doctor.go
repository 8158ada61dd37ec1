package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// doctorReport is what `xam doctor --json` prints.
type doctorReport struct {
	System *netdev.System `json:"system"`
	Device *netdev.Device `json:"device,omitempty"`
	OK     bool           `json:"ok"`
	Why    []string       `json:"problems,omitempty"`
	// Advice is what would make xam run better here, one line each; none
	// of it keeps xam from running.
	Advice []string `json:"advice,omitempty"`
	// Queues are the device's receive queues on which xam's frames have
	// landed, and how many found no socket, while xam's program runs on
	// it (none otherwise).
	Queues []loader.QueueCount `json:"queues,omitempty"`
}

func runDoctor(e *env, args []string) error {
	fs := newFlags(e, "doctor", "doctor [--dev IF] [--netns NS] [--json]")
	dev := fs.String("dev", "", "also examine this network device")
	ns := fs.String("netns", "", "the named network namespace the device is in")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r := doctorReport{System: netdev.Probe()}
	r.Why = append(r.Why, r.System.Problems...)
	if *dev != "" {
		describe := func() (err error) {
			r.Device, err = netdev.Describe(*dev)
			return err
		}
		var err error
		if *ns != "" {
			var n *lab.Namespace
			if n, err = lab.OpenNamespace(*ns); err == nil {
				err = n.Do(describe)
				n.Close()
			}
		} else {
			err = describe()
		}
		if err != nil {
			r.Why = append(r.Why, err.Error())
		} else if !r.Device.Usable {
			r.Why = append(r.Why, r.Device.UnusableBy)
		}
		if d := r.Device; d != nil {
			// Where xam's frames land, if xam's program runs there now.
			var qs []loader.QueueCount
			where := func() (err error) { qs, err = loader.QueueCountersOn(d.Index); return err }
			if *ns != "" {
				if n, err := lab.OpenNamespace(*ns); err == nil {
					n.Do(where) //nolint:errcheck // no program: nothing to say
					n.Close()
				}
			} else {
				where() //nolint:errcheck // no program: nothing to say
			}
			r.Queues = qs
			if advice := queueAdvice(d.Name, qs); advice != "" {
				r.Advice = append(r.Advice, advice)
			}
			d.MaxMTU = datapath.MaxMTU(d.MultiBuffer)
			if ok, advice := d.NAPITuned(); !ok {
				r.Advice = append(r.Advice, advice)
			}
			if d.MTU > d.MaxMTU {
				r.Why = append(r.Why, fmt.Sprintf("device %s: MTU %d exceeds the largest frame xam carries here, %d (%s): lower it with ip link set %s mtu %d", d.Name, d.MTU, d.MaxMTU, d.MultiBufferWhy, d.Name, d.MaxMTU))
			}
		}
	}
	r.OK = len(r.Why) == 0
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		printDoctor(e, &r)
	}
	if !r.OK {
		return errors.New("xam cannot run here: " + strings.Join(r.Why, "; "))
	}
	return nil
}

func printDoctor(e *env, r *doctorReport) {
	w := e.stdout
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "NO"
	}
	s := r.System
	fmt.Fprintf(w, "kernel           %s\n", s.Kernel)
	fmt.Fprintf(w, "AF_XDP sockets   %s\n", yes(s.XDPSockets))
	fmt.Fprintf(w, "BPF JIT          %s\n", map[string]string{"0": "off", "1": "on", "2": "on (debug)", "": "unknown"}[s.BPFJIT])
	fmt.Fprintf(w, "kernel BTF       %s\n", yes(s.BTF))
	for _, c := range []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN"} {
		fmt.Fprintf(w, "%-16s %s\n", c, yes(s.Caps[c]))
	}
	fmt.Fprintf(w, "memlock limit    %s\n", s.Memlock)
	fmt.Fprintf(w, "busy_poll/read   %s/%s us (system-wide socket defaults)\n", s.BusyPoll, s.BusyRead)
	if d := r.Device; d != nil {
		fmt.Fprintf(w, "\ndevice           %s (ifindex %d)\n", d.Name, d.Index)
		fmt.Fprintf(w, "driver           %s\n", d.Driver)
		fmt.Fprintf(w, "queues           %d rx, %d tx\n", d.RxQueues, d.TxQueues)
		fmt.Fprintf(w, "MTU              %d\n", d.MTU)
		if d.FeaturesKnown {
			fmt.Fprintf(w, "XDP features     %s\n", strings.Join(d.XDPFeatures, " "))
		} else {
			fmt.Fprintf(w, "XDP features     unknown (the kernel has no netdev netlink family)\n")
		}
		if d.NapiDeferHardIRQs != "" {
			fmt.Fprintf(w, "busy polling     napi_defer_hard_irqs %s, gro_flush_timeout %s ns\n", d.NapiDeferHardIRQs, d.GROFlushTimeout)
		}
		if d.FeaturesKnown {
			fmt.Fprintf(w, "XDP rx metadata  %s (what the driver gives XDP programs: kfuncs)\n", orNone(d.RxMetadata))
			fmt.Fprintf(w, "AF_XDP tx meta   %s\n", orNone(d.XSKFeatures))
		}
		fmt.Fprintf(w, "XDP mode         %s: %s\n", d.XDPMode, d.XDPWhy)
		fmt.Fprintf(w, "AF_XDP mode      %s: %s\n", d.XSKMode, d.XSKWhy)
		fmt.Fprintf(w, "multi-buffer     %s: %s; frames up to MTU %d\n", yes(d.MultiBuffer), d.MultiBufferWhy, d.MaxMTU)
		for _, q := range r.Queues {
			fmt.Fprintf(w, "xam on queue %-3d %d frames, %d with no socket\n", q.Queue, q.Frames, q.NoSocket)
		}
	}
	fmt.Fprintln(w)
	for _, a := range r.Advice {
		fmt.Fprintln(w, "advice: "+a)
	}
	if r.OK {
		fmt.Fprintln(w, "ok: xam can run here")
	}
}

// orNone joins names, or says none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, " ")
}
