package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/loader"
)

// Measuring across a job's nodes (`xam bench all --job`, RunJob). Every
// task of the job runs RunJob, one task per node, each on its node's
// device (inline mode of package am/job: the task owns the device's
// queue). The experiments run in step: rank 0 measures the two-node ones
// against rank 1, every rank takes part in the others (the permutations,
// n clients to one server, incast) and puts its own figure under a key of
// the job; each experiment ends with a fence at which every rank puts how
// it went, so that one rank's failure fails the experiment on all and the
// next experiment still runs. Rank 0 gathers the figures and the hosts'
// facts (device, driver, MTU, XDP and socket modes, kernel) into the
// report. Kernel UDP and TCP run between the addresses of the same
// devices, as the peers of the same runs.

// JobConfig configures RunJob.
type JobConfig struct {
	// Device is the network device of each node (default: the job's,
	// from a hostfile); XDP the attach mode of xam's program.
	Device string
	XDP    loader.Mode
	Quick  bool // fewer iterations, the same experiments
	Runs   int  // of each experiment (at least MinRuns)
	// Progress, if set, is told what runs (at rank 0); Stop, if set and
	// true, ends the run after the experiment in progress.
	Progress func(what string)
	Stop     *atomic.Bool
	// Command is the command line the report names.
	Command string
}

// HostSetup is what the report says of one host of a job: where its task
// ran and what its device offered.
type HostSetup struct {
	Rank    int    `json:"rank"`
	Node    string `json:"node"`
	HostID  int    `json:"host_id"`
	Device  string `json:"device"`
	MAC     string `json:"mac"`
	Addr    string `json:"addr,omitempty"` // the device's address (kernel UDP and TCP)
	Driver  string `json:"driver"`
	MTU     int    `json:"mtu"`
	XDPMode string `json:"xdp_mode"` // native or generic, as xam attaches
	XSKMode string `json:"xsk_mode"` // zero-copy or copy
	// MultiBuffer: the device's frames span several UMEM chunks (an MTU
	// past one chunk's, on a kernel and driver that have multi-buffer).
	MultiBuffer bool   `json:"multi_buffer"`
	Kernel      string `json:"kernel"`
	CPUs        int    `json:"cpus"`
}

// jobExperiment is one experiment of RunJob: every rank runs run, and
// rank 0's result is the run's.
type jobExperiment struct {
	name, title, measured, differs string
	run                            func(x *jobRun) (Reported, error)
}

// jobSection is the report's section of a job's experiments.
var jobSection = Section{Paper: "Across the job's nodes",
	Source:   "the papers' cluster experiments (round trips and bandwidth node to node, permutations, n clients to one server, incast) between the tasks of a job, one per node, with kernel UDP and TCP between the same devices as peers",
	Hardware: "the hosts of the table above"}

// jobRun is one task's state in RunJob.
type jobRun struct {
	ctx   context.Context
	j     *cluster.Job
	cfg   JobConfig
	hosts []HostSetup  // every rank's
	addrs []netip.Addr // every rank's device address (invalid: none)
	run   int          // the run, from 0
	step  int          // numbers the keys the experiments put
}

// RunJob runs the report's experiments between the tasks of job j, which
// every task calls, one per node. Rank 0 returns the report (its
// experiments failed or not, each saying why); the others return nil. The
// error is one that ends the run on every rank (the hosts' exchange).
func RunJob(ctx context.Context, j *cluster.Job, cfg JobConfig) (*Report, error) {
	if j.Size < 2 {
		return nil, fmt.Errorf("bench: a job of %d task: the experiments need two nodes at least", j.Size)
	}
	if len(j.Nodes) != j.Size {
		return nil, fmt.Errorf("bench: %d tasks on %d nodes: run one task per node (srun --ntasks-per-node=1): each owns its node's device", j.Size, len(j.Nodes))
	}
	if cfg.Runs < 1 {
		cfg.Runs = MinRuns
	}
	x := &jobRun{ctx: ctx, j: j, cfg: cfg}
	hosts, err := x.exchangeHosts()
	if err != nil {
		return nil, err
	}
	var rep *Report
	var entries []*Experiment
	exps := jobExperiments()
	if j.Rank == 0 {
		rep = &Report{Command: cfg.Command, Started: time.Now(), Quick: cfg.Quick, Runs: cfg.Runs,
			Setup: Setup{Kernel: hosts[0].Kernel, CPUs: hosts[0].CPUs, Lab: fmt.Sprintf("%d hosts of job %s", len(hosts), j.JobID), Hosts: hosts}}
		s := NewSection(jobSection)
		rep.Sections = append(rep.Sections, s)
		for _, e := range exps {
			ex := s.Add(NewExperiment(e.name))
			ex.Title, ex.Measured, ex.Differs, ex.Command = e.title, e.measured, e.differs, "xam bench all --job"
			entries = append(entries, ex)
		}
	}
	results := make([][]Reported, len(exps))
	errs := make([]error, len(exps))
	took := make([]time.Duration, len(exps))
	for x.run = 0; x.run < cfg.Runs; x.run++ {
		for i, e := range exps {
			if x.stopped() {
				break
			}
			if errs[i] != nil {
				continue // failed in an earlier run: said once
			}
			x.say(fmt.Sprintf("%s, run %d of %d", e.title, x.run+1, cfg.Runs))
			t0 := time.Now()
			r, err := e.run(x)
			err = x.settle(e.name, err)
			took[i] += time.Since(t0)
			if err != nil {
				errs[i] = err
				continue
			}
			if r != nil {
				results[i] = append(results[i], r)
			}
		}
	}
	if rep == nil {
		return nil, nil
	}
	for i, ex := range entries {
		if err := ex.Record(results[i], "", true); err != nil && errs[i] == nil {
			errs[i] = err
		}
		ex.Finish(took[i], x.stopped(), errs[i])
	}
	rep.Seconds = time.Since(rep.Started).Round(time.Second).Seconds()
	xsk := datapath.XSKInUse()
	rep.Setup.XSK = &xsk
	rep.Interrupted = x.stopped()
	return rep, nil
}

func (x *jobRun) stopped() bool { return x.cfg.Stop != nil && x.cfg.Stop.Load() }

func (x *jobRun) say(what string) {
	if x.j.Rank == 0 && x.cfg.Progress != nil {
		x.cfg.Progress(what)
	}
}

// key returns a key for this step of the run, unique in the job.
func (x *jobRun) key(what string) string {
	x.step++
	return "xam.bench." + strconv.Itoa(x.step) + "." + what
}

// settle ends an experiment on every rank: each puts how it went, fences,
// and reads everyone's; the first failure, naming its rank, is the
// experiment's on all. Every rank comes here, whatever happened.
func (x *jobRun) settle(name string, mine error) error {
	key := x.key("status." + name)
	status := "ok"
	if mine != nil {
		status = "error " + mine.Error()
	}
	if err := x.j.Put(key, []byte(status)); err != nil {
		return errors.Join(mine, err)
	}
	if err := x.j.Fence(x.ctx); err != nil {
		return fmt.Errorf("the fence after the experiment: %w", err)
	}
	for r := range x.j.Size {
		b, err := x.j.Get(r, key)
		if err != nil {
			return fmt.Errorf("rank %d's status: %w", r, err)
		}
		if s := string(b); s != "ok" {
			return fmt.Errorf("rank %d (node %s): %s", r, x.hosts[r].Node, strings.TrimPrefix(s, "error "))
		}
	}
	return nil
}

// gather puts this rank's value under a new key, fences, and returns
// every rank's (rank 0's use; the others' slice is theirs only).
func (x *jobRun) gather(what string, v float64) ([]float64, error) {
	return x.gatherWith(what, v, func() error { return x.j.Fence(x.ctx) })
}

// gatherWith is gather with fence for the fence.
func (x *jobRun) gatherWith(what string, v float64, fence func() error) ([]float64, error) {
	key := x.key(what)
	if err := x.j.Put(key, []byte(strconv.FormatFloat(v, 'g', -1, 64))); err != nil {
		return nil, err
	}
	if err := fence(); err != nil {
		return nil, err
	}
	vs := make([]float64, x.j.Size)
	if x.j.Rank != 0 {
		return vs, nil
	}
	for r := range x.j.Size {
		b, err := x.j.Get(r, key)
		if err == nil {
			vs[r], err = strconv.ParseFloat(string(b), 64)
		}
		if err != nil {
			return nil, fmt.Errorf("rank %d's %s: %w", r, what, err)
		}
	}
	return vs, nil
}

// exchangeHosts describes this task's host, exchanges the descriptions,
// and returns every rank's.
func (x *jobRun) exchangeHosts() ([]HostSetup, error) {
	h, err := describeHost(x.j, x.cfg)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if err := x.j.Put("xam.bench.host", b); err != nil {
		return nil, err
	}
	if err := x.j.Fence(x.ctx); err != nil {
		return nil, fmt.Errorf("bench: exchanging the hosts' descriptions: %w", err)
	}
	x.hosts = make([]HostSetup, x.j.Size)
	x.addrs = make([]netip.Addr, x.j.Size)
	for r := range x.j.Size {
		b, err := x.j.Get(r, "xam.bench.host")
		if err == nil {
			err = json.Unmarshal(b, &x.hosts[r])
		}
		if err != nil {
			return nil, fmt.Errorf("bench: rank %d's description: %w", r, err)
		}
		x.addrs[r], _ = netip.ParseAddr(x.hosts[r].Addr)
	}
	return x.hosts, nil
}

// describeHost says what this task's node and device are.
func describeHost(j *cluster.Job, cfg JobConfig) (HostSetup, error) {
	dev := cfg.Device
	if dev == "" {
		dev = j.Device
	}
	if dev == "" {
		return HostSetup{}, errors.New("bench: the job's device: give --dev (every node's), or a hostfile that names each node's")
	}
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return HostSetup{}, fmt.Errorf("bench: device %s on node %s: %w", dev, j.Node, err)
	}
	h := HostSetup{Rank: j.Rank, Node: j.Node, HostID: j.HostID, Device: dev, MAC: ifc.HardwareAddr.String(), MTU: ifc.MTU, CPUs: runtime.NumCPU()}
	if addrs, err := ifc.Addrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				h.Addr = p.Addr().String()
				break
			}
		}
	}
	h.Kernel = netdev.Probe().Kernel
	if d, err := netdev.Describe(dev); err == nil {
		h.Driver, h.XDPMode, h.XSKMode = d.Driver, d.XDPMode, d.XSKMode
		h.MultiBuffer = d.MultiBuffer && ifc.MTU > datapath.MaxMTU(false)
	}
	switch datapath.XSKInUse().Policy {
	case "off":
		h.XSKMode = "copy"
	case "require":
		h.XSKMode = "zero-copy"
	}
	if cfg.XDP != loader.ModeAuto {
		h.XDPMode = cfg.XDP.String()
	}
	return h, nil
}

// hostsMarkdown writes the table of a job's hosts.
func hostsMarkdown(w io.Writer, hosts []HostSetup) {
	fmt.Fprintf(w, "| rank | node | host id | device | driver | MAC | address | MTU | XDP | AF_XDP socket | kernel | CPUs |\n|--:|---|--:|---|---|---|---|--:|---|---|---|--:|\n")
	for _, h := range hosts {
		mtu := fmt.Sprint(h.MTU)
		if h.MultiBuffer {
			mtu += " (multi-buffer)"
		}
		fmt.Fprintf(w, "| %d | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", h.Rank, h.Node, h.HostID, h.Device,
			orDash(h.Driver), h.MAC, orDash(h.Addr), mtu, orDash(h.XDPMode), orDash(h.XSKMode), h.Kernel, h.CPUs)
	}
	fmt.Fprintln(w)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
