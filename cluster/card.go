package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
)

// Card is what a task tells the others about itself so that they can reach
// it: published by Exchange, one per rank.
type Card struct {
	Rank      int      `json:"rank"`                // filled in by Exchange
	Node      string   `json:"node"`                // filled in by Exchange
	HostID    int      `json:"host_id"`             // filled in by Exchange: the node's, shared by its tasks
	MAC       string   `json:"mac,omitempty"`       // the node's device MAC, "02:00:00:00:00:01"
	Device    string   `json:"dev,omitempty"`       // the node's network device
	Queue     int      `json:"queue"`               // the device queue this task (or its daemon) uses
	Socket    string   `json:"socket,omitempty"`    // the node daemon's socket (firmware mode)
	Endpoints []uint32 `json:"endpoints,omitempty"` // the task's endpoint ids
}

// Exchange publishes local as this task's card, fences, and returns every
// task's card, indexed by rank. It fills in local's Rank, Node and HostID
// from the job. The cards must agree: the tasks of a node share a host id,
// different nodes have different ones, and MACs parse. Every task calls
// Exchange the same number of times (each call is a fence).
func (j *Job) Exchange(ctx context.Context, local Card) ([]Card, error) {
	local.Rank, local.Node, local.HostID = j.Rank, j.Node, j.HostID
	if local.MAC != "" {
		if _, err := net.ParseMAC(local.MAC); err != nil {
			return nil, fmt.Errorf("cluster: this task's card: %w", err)
		}
	}
	b, err := json.Marshal(local)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	j.mu.Lock()
	key := "xam.card." + strconv.Itoa(j.exchanges)
	j.exchanges++
	j.mu.Unlock()
	if err := j.Put(key, b); err != nil {
		return nil, err
	}
	if err := j.Fence(ctx); err != nil {
		return nil, err
	}
	cards := make([]Card, j.Size)
	hostOf := map[string]int{}
	nodeOf := map[int]string{}
	for r := range cards {
		b, err := j.Get(r, key)
		if err != nil {
			return nil, err
		}
		c := &cards[r]
		if err := json.Unmarshal(b, c); err != nil {
			return nil, fmt.Errorf("cluster: rank %d's card: %w", r, err)
		}
		if c.Rank != r {
			return nil, fmt.Errorf("cluster: rank %d's card says rank %d", r, c.Rank)
		}
		if h, ok := hostOf[c.Node]; ok && h != c.HostID {
			return nil, fmt.Errorf("cluster: node %s has host ids %d and %d (ranks disagree)", c.Node, h, c.HostID)
		}
		if n, ok := nodeOf[c.HostID]; ok && n != c.Node {
			return nil, fmt.Errorf("cluster: host id %d names nodes %s and %s", c.HostID, n, c.Node)
		}
		hostOf[c.Node], nodeOf[c.HostID] = c.HostID, c.Node
	}
	return cards, nil
}
