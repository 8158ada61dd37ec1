package job

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/nicfw"
)

// Endpoint ids in firmware mode. A daemon serves every task of its node,
// of every job: each task takes ids no other endpoint of the daemon has.
// It reads the ids in use (the daemon's stats) and takes the free ones
// of rank LocalRank among those at or above Config.Endpoint, so that the
// tasks of one node, which read at about the same time, take different
// ones. Another job's task may take one between the reading and the open
// (its open then fails with nicfw.ErrEndpointInUse, and a GRIM range may
// hold reserved ids the stats do not show): the open protocol then goes
// round again, and this time each job starts at a place drawn from its
// own tag, so that two jobs that took each other's ids part ways.

// spreadSlots is how many places a retry may start at, width ids apart.
const spreadSlots = 1024

// pickID returns the first id of the free range of width ids (ids none of
// which is in used) of rank local among those at or above first; from
// attempt 1 on, the search starts at a place drawn from tag and attempt.
func pickID(used map[nicfw.EndpointID]bool, first nicfw.EndpointID, width, local, attempt int, tag uint64) (nicfw.EndpointID, error) {
	const top = 1 << 16 // ids are 16 bits
	span := top - int(first)
	if width < 1 || local < 0 || span < width {
		return 0, fmt.Errorf("%w: no range of %d endpoint ids at or above %d", ErrConfig, width, first)
	}
	slots := span / width
	start := 0
	if attempt > 0 {
		h := fnv.New64a()
		h.Write([]byte(strconv.FormatUint(tag, 16) + "/" + strconv.Itoa(attempt)))
		start = int(h.Sum64() % uint64(min(spreadSlots, slots)))
	}
	seen := 0
	for i := range slots {
		id := int(first) + ((start+i)%slots)*width
		free := true
		for k := range width {
			if used[nicfw.EndpointID(id+k)] {
				free = false
				break
			}
		}
		if !free {
			continue
		}
		if seen == local {
			return nicfw.EndpointID(id), nil
		}
		seen++
	}
	return 0, fmt.Errorf("%w: the daemon has fewer than %d free ranges of %d endpoint ids at or above %d",
		ErrConfig, local+1, width, first)
}

// firmwareCard is a firmware task's card: its daemon's socket, the MAC the
// daemon's host table gives its host, and the endpoint id it takes.
func firmwareCard(j *cluster.Job, socket string, v *daemonView, id nicfw.EndpointID) cluster.Card {
	return cluster.Card{MAC: v.hosts[nicfw.HostID(j.HostID)], Socket: socket, Endpoints: []uint32{uint32(id)}}
}

// checkDaemon checks that the daemon opened the endpoint on the job's host
// id, and that its host table names every host of the job.
func checkDaemon(j *cluster.Job, socket string, got nicfw.HostID, v *daemonView, cards []cluster.Card) error {
	if got != nicfw.HostID(j.HostID) {
		return fmt.Errorf("%w: the daemon at %s is host %d, and the job numbers this node (%s) %d: start it with --id %d (or as a step of the job: xam fw --job)",
			ErrConfig, socket, got, j.Node, j.HostID, j.HostID)
	}
	for _, c := range cards {
		if _, ok := v.hosts[nicfw.HostID(c.HostID)]; !ok && c.HostID != j.HostID {
			return fmt.Errorf("%w: the daemon at %s does not know host %d (node %s, rank %d): give it --host %d=MAC (or run it as a step of the job: xam fw --job)",
				ErrConfig, socket, c.HostID, c.Node, c.Rank, c.HostID)
		}
	}
	return nil
}
