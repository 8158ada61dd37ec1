package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/nicfw"
)

// `xam fw --job` and `xam fw --hostfile FILE --rank N`: the daemon as a
// task of a job, one per node, learning its peers from the job instead of
// --id and --host. It joins the job (cluster.Join: Slurm's environment and
// PMI-2; or cluster.FromHostfile), opens its device, publishes a card with
// the device's MAC, its host id (the node's index in the job's allocation),
// queue and socket, and builds the host table from every daemon's card.
// Then it runs as any daemon, until SIGTERM (scancel, the job's end).
//
// The socket defaults to the job's (cluster.Job.DaemonSocket,
// /run/xam/job-JOBID.sock): Slurm gives each step a PMI-2 key space of its
// own, so an application's step cannot read the daemons' cards; it
// computes the same path from the job id.

// inJob reports whether the daemon learns its hosts from a job.
func (c *fwConfig) inJob() bool { return c.job || c.given["hostfile"] || c.given["rank"] }

// checkJob checks the flags of a daemon in a job: the job gives this host's
// id and the peers, so --id, --host and --map have no place.
func (c *fwConfig) checkJob() error {
	how := "--job"
	if !c.job {
		how = "--hostfile"
	}
	switch {
	case c.job && (c.given["hostfile"] || c.given["rank"]):
		return usageError("--job learns the job from Slurm: no --hostfile or --rank")
	case !c.job && c.hostfile == "":
		return usageError("--rank needs --hostfile FILE")
	case !c.job && !c.given["rank"]:
		return usageError("--hostfile needs --rank N: this daemon's rank in the file")
	case !c.job && c.rank < 0:
		return usageError("--rank %d: want 0 or more", c.rank)
	case c.given["id"]:
		return usageError("%s: this host's id comes from the job (its node's index in the job's nodes): no --id", how)
	case len(c.hosts) > 0:
		return usageError("%s: the peers come from the job: no --host", how)
	case c.useMap || c.follow:
		return usageError("%s: the peers come from the job, not from the mapper: no --map", how)
	case c.job && c.dev == "":
		return usageError("--dev is required")
	}
	return nil
}

// joinJob joins the daemons' job: the Slurm step this process is a task
// of, or the hostfile's. It fills in what the job decides: the socket
// (unless given), and with a hostfile the device (unless given, which
// must then agree).
func (c *fwConfig) joinJob(ctx context.Context) (*cluster.Job, error) {
	var j *cluster.Job
	var err error
	if c.job {
		j, err = cluster.Join(ctx)
	} else {
		jctx, cancel := context.WithTimeout(ctx, cluster.DefaultFenceTimeout)
		j, err = cluster.FromHostfile(jctx, c.hostfile, c.rank)
		cancel()
	}
	if errors.Is(err, cluster.ErrNoLauncher) {
		return nil, usageError("--job: %v (without Slurm: xam fw --hostfile FILE --rank N)", err)
	}
	if err != nil {
		return nil, err
	}
	if !c.job {
		switch {
		case c.dev == "":
			c.dev = j.Device
		case c.dev != j.Device:
			err = fmt.Errorf("--dev %s, but %s gives rank %d device %s", c.dev, c.hostfile, j.Rank, j.Device)
		}
	}
	if !c.given["socket"] {
		c.socket = j.DaemonSocket()
	}
	if err != nil {
		return nil, c.failJob(j, err)
	}
	return j, nil
}

// failJob ends the job of a daemon that cannot serve (nil: not in a job)
// and returns err: the other daemons, who would wait for its card until
// the fence's timeout, end at once with its reason (under Slurm the step's
// tasks are killed, this one too).
func (c *fwConfig) failJob(j *cluster.Job, err error) error {
	if j != nil {
		j.Abort(fmt.Sprintf("xam fw on %s: %v", j.Node, err))
	}
	return err
}

// exchangeHosts publishes this daemon's card and makes its host id and
// host table from every daemon's; then it leaves the job's key space
// (PMI-2's finalize), which the daemon needs no more.
func (c *fwConfig) exchangeHosts(ctx context.Context, e *env, j *cluster.Job, mac net.HardwareAddr) error {
	if j.MAC != nil && !bytes.Equal(j.MAC, mac) {
		return c.failJob(j, fmt.Errorf("device %s has MAC %s, but %s gives rank %d MAC %s", c.dev, mac, c.hostfile, j.Rank, j.MAC))
	}
	cards, err := j.Exchange(ctx, cluster.Card{MAC: mac.String(), Device: c.dev, Queue: c.queue, Socket: c.socket})
	if err != nil {
		return fmt.Errorf("exchanging cards with the job's other daemons: %w", err)
	}
	hosts, err := jobHosts(cards, j.Rank)
	if err != nil {
		return err
	}
	if err := j.Close(); err != nil {
		fmt.Fprintf(e.stderr, "xam fw: leaving the job's key space: %v (the host table is made; serving on)\n", err)
	}
	c.id, c.hosts = j.HostID, hosts
	return nil
}

// jobHosts makes the host table (every other daemon's host id and MAC)
// from the daemons' cards, me being this daemon's rank. One daemon per
// node: two cards of one host id are two daemons on one node, which would
// fight over its device.
func jobHosts(cards []cluster.Card, me int) (hostFlags, error) {
	hosts := hostFlags{}
	byHost := map[int]int{}   // host id -> rank
	byMAC := map[string]int{} // MAC -> rank
	for r, card := range cards {
		if o, dup := byHost[card.HostID]; dup {
			return nil, fmt.Errorf("ranks %d and %d are both daemons of node %s: run one per node (srun --ntasks-per-node=1)", o, r, card.Node)
		}
		byHost[card.HostID] = r
		if card.HostID < 0 || card.HostID > 65535 {
			return nil, fmt.Errorf("rank %d (node %s) has host id %d: want 0..65535", r, card.Node, card.HostID)
		}
		mac, err := net.ParseMAC(card.MAC)
		if err != nil {
			return nil, fmt.Errorf("rank %d (node %s) published no usable MAC (%q)", r, card.Node, card.MAC)
		}
		if o, dup := byMAC[mac.String()]; dup {
			return nil, fmt.Errorf("nodes %s and %s (ranks %d and %d) have the same MAC %s", cards[o].Node, card.Node, o, r, mac)
		}
		byMAC[mac.String()] = r
		if r != me {
			hosts[nicfw.HostID(card.HostID)] = mac
		}
	}
	return hosts, nil
}

// announceJob says which job the daemon serves and its host table.
func (c *fwConfig) announceJob(e *env, j *cluster.Job) {
	ids := make([]int, 0, len(c.hosts))
	for id := range c.hosts {
		ids = append(ids, int(id))
	}
	slices.Sort(ids)
	peers := make([]string, len(ids))
	for i, id := range ids {
		peers[i] = fmt.Sprintf("%d=%s", id, c.hosts[nicfw.HostID(id)])
	}
	fmt.Fprintf(e.stderr, "xam fw: %s job %s, rank %d of %d on node %s; peers %s\n",
		j.Launcher, j.JobID, j.Rank, j.Size, j.Node, strings.Join(peers, " "))
}
