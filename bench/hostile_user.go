package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// The other-user scenario: a process of another user (uid 65534) attacks
// both daemons while root's pings run on virtual network amiiTag, which
// root's endpoints made. It is this executable run again as that user,
// told by hostileAttackerEnv what to attack (HostileChild). On each daemon,
// round after round, it opens an endpoint of the pings' network (it holds
// the tag: it must be refused), reads `stats` (it must not see root's
// tags or networks), grants itself the network (refused), and dials
// connection after connection (hostileConfig.Flood/20 in all), holding
// those the daemon serves (its quota) and counting those refused. The
// pings start after its first round. It reports its tallies as JSON on
// stdout, and the daemons' `refused` must count every refusal.

// hostileAttackerEnv, in a process's environment, makes HostileChild run
// the other-user scenario's attacker with the orders it holds (JSON,
// attackerOrders).
const hostileAttackerEnv = "XAM_HOSTILE_ATTACKER"

// attackerUID is the other user (nobody).
const attackerUID = 65534

// attackerOrders tells the attacker what to attack.
type attackerOrders struct {
	Targets []attackerTarget `json:"targets"`
	Tag     uint64           `json:"tag"`   // root's virtual network
	Conns   int              `json:"conns"` // connections to dial, all daemons together
	// Share or Registry, if set, makes it the share scenario's flooder
	// (hostile_share.go) or the registry scenario's stranger
	// (hostile_registry.go) instead.
	Share    *shareOrders    `json:"share,omitempty"`
	Registry *registryOrders `json:"registry,omitempty"`
}

// attackerTarget is a daemon to attack, and the host its endpoints' tables
// name.
type attackerTarget struct {
	Socket string       `json:"socket"`
	Peer   nicfw.HostID `json:"peer"`
}

// attackerTally is what the attacker did and what came of it.
type attackerTally struct {
	Opens         int      `json:"opens"`
	OpensRefused  int      `json:"opens_refused"` // ErrPermission
	OpensGranted  int      `json:"opens_granted"`
	Grants        int      `json:"grants"`
	GrantsRefused int      `json:"grants_refused"` // ErrPermission
	GrantsTaken   int      `json:"grants_taken"`
	StatsReads    int      `json:"stats_reads"`
	EndpointsSeen int      `json:"endpoints_seen"` // the most endpoints one read listed
	TagsSeen      int      `json:"tags_seen"`      // tags other than 0 in those lists
	NetworksSeen  int      `json:"networks_seen"`  // networks listed
	Conns         int      `json:"conns"`
	ConnsRefused  int      `json:"conns_refused"` // ErrQuota
	ConnsHeld     int      `json:"conns_held"`    // served, held to the end
	Errors        []string `json:"errors,omitempty"`
}

// HostileChild runs the hostile suite's other-user attacker and exits, if
// this process was started as one: runHostile runs its own executable
// again as uid 65534 with XAM_HOSTILE_ATTACKER set. Otherwise it returns
// at once. A program that calls runHostile calls HostileChild first thing
// in main (a test binary, in TestMain).
func HostileChild() {
	orders, ok := os.LookupEnv(hostileAttackerEnv)
	if !ok {
		return
	}
	var o attackerOrders
	if err := json.Unmarshal([]byte(orders), &o); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", hostileAttackerEnv, err)
		os.Exit(2)
	}
	var t any
	var err error
	switch {
	case o.Share != nil:
		t, err = flood(*o.Share, os.Stdin, os.Stdout)
	case o.Registry != nil:
		t, err = attackRegistry(*o.Registry, os.Stdin, os.Stdout)
	default:
		t, err = attack(o, os.Stdout)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "attacker: %v\n", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(t) //nolint:errcheck // the parent reports a missing tally
	os.Exit(0)
}

// attack carries out o, round after round until it has dialled o.Conns
// connections; it writes "attacking" to out after its first round.
func attack(o attackerOrders, out io.Writer) (*attackerTally, error) {
	t := &attackerTally{}
	unexpected := func(what string, err error) {
		if len(t.Errors) < 8 {
			t.Errors = append(t.Errors, fmt.Sprintf("%s: %v", what, err))
		}
	}
	conns := make([]*daemon.Conn, len(o.Targets))
	var held []*daemon.Conn
	defer func() {
		for _, c := range append(conns, held...) {
			if c != nil {
				c.Close()
			}
		}
	}()
	me := uint32(os.Getuid())
	for i, tg := range o.Targets {
		c, err := daemon.Dial(tg.Socket)
		if err != nil {
			return nil, err
		}
		conns[i] = c
	}
	for round := 0; t.Conns < o.Conns; round++ {
		for i, tg := range o.Targets {
			c := conns[i]
			// An endpoint of root's network, with its tag.
			t.Opens++
			ep, err := c.Open(daemon.OpenRequest{Tag: o.Tag, Table: []nicfw.Name{{Host: tg.Peer, Endpoint: daemon.FirstUserEndpoint + 1}}})
			switch {
			case err == nil:
				t.OpensGranted++
				ep.Close()
			case errors.Is(err, daemon.ErrPermission):
				t.OpensRefused++
			default:
				unexpected("open", err)
			}
			// What stats show it.
			s, err := c.Stats()
			if err != nil {
				return nil, err
			}
			t.StatsReads++
			t.EndpointsSeen = max(t.EndpointsSeen, len(s.List))
			for _, e := range s.List {
				if e.Tag != 0 {
					t.TagsSeen++
				}
			}
			t.NetworksSeen += len(s.Networks)
			// A grant to itself.
			t.Grants++
			switch err := c.Grant(daemon.GrantRequest{Tag: o.Tag, UID: &me}); {
			case err == nil:
				t.GrantsTaken++
			case errors.Is(err, daemon.ErrPermission):
				t.GrantsRefused++
			default:
				unexpected("grant", err)
			}
			// Connections.
			for range 16 {
				t.Conns++
				cc, err := daemon.Dial(tg.Socket)
				if err != nil {
					unexpected("dial", err)
					continue
				}
				switch _, err := cc.Stats(); {
				case err == nil:
					t.ConnsHeld++
					held = append(held, cc)
					continue
				case errors.Is(err, daemon.ErrQuota):
					t.ConnsRefused++
				default:
					unexpected("a connection", err)
				}
				cc.Close()
			}
		}
		if round == 0 {
			if _, err := fmt.Fprintln(out, "attacking"); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// copyAttacker puts a copy of this executable in dir, which the other user
// may run, as the attacker of the other-user and share scenarios.
func copyAttacker(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	exe, err := os.ReadFile(self)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "attacker"), exe, 0o755)
}

// hostileOtherUser runs the attacker as uid 65534 (copyAttacker's copy of
// this executable in dir) against both daemons while root's pings run.
func hostileOtherUser(ha, hb *firmwareHost, _, _ datapath.Place, cfg hostileConfig, dir string) (hostileRow, error) {
	row := hostileRow{Scenario: "other user", Attack: "uid 65534 with the pings' tag: opens, stats, self-grants, a connection flood"}
	orders, err := json.Marshal(attackerOrders{Targets: []attackerTarget{{ha.sock, amiiHostB}, {hb.sock, amiiHostA}}, Tag: amiiTag, Conns: max(cfg.Flood/20, 100)})
	if err != nil {
		return row, err
	}
	var before [2]daemon.Stats
	for i, h := range []*firmwareHost{ha, hb} {
		if before[i], err = h.d.Stats(); err != nil {
			return row, err
		}
	}
	var t attackerTally
	pings, err := pingWhile(ha, hb, cfg.Pings, func(_ *atomic.Bool, start func()) error {
		// The pings start after its first round; it ends by itself.
		return runAttacker(dir, orders, &t, func() error { start(); return nil })
	})
	if err != nil {
		return row, err
	}
	var refused uint64
	for i, h := range []*firmwareHost{ha, hb} {
		after, err := h.d.Stats()
		if err != nil {
			return row, err
		}
		refused += after.Refused - before[i].Refused
	}
	row.Sent = t.Opens + t.StatsReads + t.Grants + t.Conns
	row.set(pings)
	row.Counted = map[string]uint64{
		"opens refused: permission":      uint64(t.OpensRefused),
		"grants refused: permission":     uint64(t.GrantsRefused),
		"connections refused: quota":     uint64(t.ConnsRefused),
		"connections served (its quota)": uint64(t.ConnsHeld + 2), // and one for its probes on each daemon
		"refused by the daemons":         refused,
		"root's tags and networks shown": uint64(t.TagsSeen + t.NetworksSeen),
	}
	var wrong []string
	if t.OpensGranted > 0 || t.GrantsTaken > 0 {
		wrong = append(wrong, fmt.Sprintf("%d opens and %d grants granted", t.OpensGranted, t.GrantsTaken))
	}
	if t.TagsSeen+t.NetworksSeen > 0 {
		wrong = append(wrong, fmt.Sprintf("%d tags and %d networks shown", t.TagsSeen, t.NetworksSeen))
	}
	if len(t.Errors) > 0 {
		wrong = append(wrong, fmt.Sprintf("unexpected answers %q", t.Errors))
	}
	if want := uint64(t.OpensRefused + t.GrantsRefused + t.ConnsRefused); refused != want {
		wrong = append(wrong, fmt.Sprintf("the daemons counted %d refusals, the attacker %d", refused, want))
	}
	if len(wrong) > 0 {
		row.ExactlyOnce = false
		for _, w := range wrong {
			row.Note += "; " + w
		}
	}
	return row, nil
}
