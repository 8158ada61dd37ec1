package job

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// Mode says where the firmware engine of a job's endpoints runs.
type Mode string

const (
	// Inline: in the task, which owns its node's device queue (one task
	// per node).
	Inline Mode = "inline"
	// Firmware: in the node's `xam fw` daemon, which every task of the
	// node reaches through its socket.
	Firmware Mode = "firmware"
)

// DefaultSocket is where `xam fw` listens unless told otherwise.
const DefaultSocket = "/run/xam/fw.sock"

// FirstEndpoint is the first endpoint id the opens consider: the first one
// a daemon lets an unprivileged user open (daemon.FirstUserEndpoint).
const FirstEndpoint nicfw.EndpointID = 16

// Errors of the package; match them with errors.Is.
var (
	// ErrConfig: the Config, or the job, cannot give what was asked.
	ErrConfig = errors.New("job: bad configuration")
	// ErrNotSupported: firmware mode on a system without the daemon.
	ErrNotSupported = errors.New("job: not supported on this system")
)

// Config says how a task opens its endpoint. Zero fields take the
// defaults; every task of the job gives the same Mode.
type Config struct {
	// Mode is Inline or Firmware; "" is Firmware when Socket is set,
	// Inline otherwise.
	Mode Mode

	// Device is the network device of this task's node that inline mode
	// opens (default: the job's, from a hostfile). Queue is its queue,
	// XDP the attach mode of xam's program (default loader.ModeAuto).
	// Engine configures the inline engine (its Host is the job's host id).
	Device string
	Queue  int
	XDP    loader.Mode
	Engine nicfw.EngineConfig

	// Socket is the node daemon's socket in firmware mode (default
	// DefaultSocket).
	Socket string

	// Endpoint is the first endpoint id to consider (default
	// FirstEndpoint). Inline, it is the endpoint's id; in firmware mode
	// each task takes a free id at or above it on its node's daemon (a
	// free range of grim.MaxChannels ids for GRIM).
	Endpoint nicfw.EndpointID

	// Tag, if not 0, is the virtual network's tag; by default rank 0 draws
	// one at random and gives it to the others (see the package
	// documentation).
	Tag uint64

	// AMII, GRIM and SSAM configure the endpoint of OpenAMII, OpenGRIM and
	// OpenSSAM. GRIM's Peers, Self and Tag are set from the job.
	AMII amii.Config
	GRIM grim.Config
	SSAM ssam.Config

	// SetupAMII, SetupGRIM and SetupSSAM, if set, run on the endpoint
	// once it is open, before the fence that ends the open: register the
	// handlers there (Register, Handle, HandleNamed, OnReturn), so that
	// they are in place on every rank before any rank sends. A daemon
	// checks a request's handler as it arrives: one not yet registered
	// sends it back (ReasonNoHandler). A setup runs again, on a new
	// endpoint, when the open goes round again (see round.go); its error
	// fails the open on every rank.
	SetupAMII func(*AMII) error
	SetupGRIM func(*GRIM) error
	SetupSSAM func(*SSAM) error
}

// mode returns the configuration's mode, filled in.
func (c *Config) mode() (Mode, error) {
	switch c.Mode {
	case Inline, Firmware:
		return c.Mode, nil
	case "":
		if c.Socket != "" {
			return Firmware, nil
		}
		return Inline, nil
	}
	return "", fmt.Errorf("%w: mode %q: want %q or %q", ErrConfig, c.Mode, Inline, Firmware)
}

// device returns the device inline mode opens.
func (c *Config) device(j *cluster.Job) (string, error) {
	switch {
	case c.Device != "":
		return c.Device, nil
	case j.Device != "":
		return j.Device, nil
	}
	return "", fmt.Errorf("%w: inline mode needs the node's network device (Config.Device), or firmware mode its daemon's socket (Config.Socket)", ErrConfig)
}

func (c *Config) socket() string {
	if c.Socket == "" {
		return DefaultSocket
	}
	return c.Socket
}

func (c *Config) first() nicfw.EndpointID {
	if c.Endpoint == 0 {
		return FirstEndpoint
	}
	return c.Endpoint
}

// node is what a task of an inline job opened on its node: the data path,
// or nothing yet (the MAC for its card).
type node struct {
	dev  string
	mac  net.HardwareAddr
	path *datapath.Endpoint
}

// lookDevice finds the device inline mode opens and its MAC, for the card.
func lookDevice(c *Config, j *cluster.Job) (*node, error) {
	dev, err := c.device(j)
	if err != nil {
		return nil, err
	}
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, fmt.Errorf("job: device %s: %w", dev, err)
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("%w: device %s has no Ethernet address", ErrConfig, dev)
	}
	return &node{dev: dev, mac: ifc.HardwareAddr}, nil
}

// open opens the data path on the node's device.
func (n *node) open(c *Config) error {
	ifc, err := net.InterfaceByName(n.dev)
	if err != nil {
		return fmt.Errorf("job: device %s: %w", n.dev, err)
	}
	n.path, err = datapath.Open(datapath.Here(ifc.Index, n.mac), c.XDP, c.Queue)
	if err != nil {
		return fmt.Errorf("job: opening the data path on %s: %w", n.dev, err)
	}
	return nil
}

func (n *node) close() error {
	if n == nil || n.path == nil {
		return nil
	}
	p := n.path
	n.path = nil
	return p.Close()
}

// inlineCard is an inline task's card: its node's device and MAC.
func inlineCard(n *node, c *Config, id nicfw.EndpointID) cluster.Card {
	return cluster.Card{MAC: n.mac.String(), Device: n.dev, Queue: c.Queue, Endpoints: []uint32{uint32(id)}}
}

// checkInline checks that every node of an inline job runs one task, and
// returns the host table: every other node's MAC by host id.
func checkInline(j *cluster.Job, cards []cluster.Card) (map[nicfw.HostID]net.HardwareAddr, error) {
	hosts := map[nicfw.HostID]net.HardwareAddr{}
	rankOf := map[int]int{}
	for r, c := range cards {
		if o, ok := rankOf[c.HostID]; ok {
			return nil, cardError{fmt.Errorf("%w: inline mode, and node %s runs ranks %d and %d: the task that owns a node's device queue is its only one (one task per node, or firmware mode through the node's xam fw)",
				ErrConfig, c.Node, o, r)}
		}
		rankOf[c.HostID] = r
		mac, err := net.ParseMAC(c.MAC)
		if err != nil || len(mac) != 6 {
			return nil, cardError{fmt.Errorf("%w: rank %d's card has no MAC (%q)", ErrConfig, r, c.MAC)}
		}
		if c.HostID != j.HostID {
			hosts[nicfw.HostID(c.HostID)] = mac
		}
	}
	return hosts, nil
}

// checkIDs checks that every card names an endpoint id (the first of
// want) and returns each rank's endpoint name.
func checkIDs(cards []cluster.Card) ([]nicfw.Name, error) {
	names := make([]nicfw.Name, len(cards))
	for r, c := range cards {
		if len(c.Endpoints) == 0 || c.Endpoints[0] == 0 || c.Endpoints[0] > 0xffff {
			return nil, cardError{fmt.Errorf("%w: rank %d's card names no endpoint id (%v)", ErrConfig, r, c.Endpoints)}
		}
		names[r] = nicfw.Name{Host: nicfw.HostID(c.HostID), Endpoint: nicfw.EndpointID(c.Endpoints[0])}
	}
	return names, nil
}

// Lost is a rank that is gone: its messages came back for a reason that
// says so. Every endpoint type of the package has a Lost method that turns
// a returned message into one.
type Lost struct {
	Rank   int
	Node   string
	Reason endpoint.Reason
}

func (e *Lost) Error() string {
	return fmt.Sprintf("rank %d (node %s) is gone: its messages came back (%v)", e.Rank, e.Node, e.Reason)
}

// gone reports whether reason says the destination is gone: its host
// stopped answering, its endpoint closed or is no more, its daemon
// restarted, or it took a request and never answered.
func gone(reason endpoint.Reason) bool {
	switch reason {
	case amii.ReasonUnreachable, amii.ReasonNoEndpoint, amii.ReasonClosed, amii.ReasonRestarted,
		amii.ReasonNoReply, amii.ReasonNoHost:
		return true
	}
	return false
}

// lost returns a *Lost for a message returned to rank dest with reason if
// reason says it is gone, else nil.
func lost(cards []cluster.Card, dest int, reason endpoint.Reason) error {
	if !gone(reason) || dest < 0 || dest >= len(cards) {
		return nil
	}
	return &Lost{Rank: dest, Node: cards[dest].Node, Reason: reason}
}

// setup runs an open's setup function, if any, on the endpoint.
func setup[E any](f func(E) error, ep E) error {
	if f == nil {
		return nil
	}
	if err := f(ep); err != nil {
		return fmt.Errorf("job: setting up the endpoint: %w", err)
	}
	return nil
}

// barrierIdle is how long Barrier sleeps after a poll that found nothing,
// so that a node's tasks leave the processor to each other.
const barrierIdle = 50 * time.Microsecond

// barrier fences the job while poll keeps the endpoint served: messages
// still in flight (the last acknowledgements, replies to the requests of
// ranks still at work) are handled until every rank has reached the
// fence, so that no rank stops serving one that still needs it.
func barrier(ctx context.Context, j *cluster.Job, poll func() (int, error)) error {
	done := make(chan error, 1)
	go func() { done <- j.Fence(ctx) }()
	for {
		select {
		case err := <-done:
			return err
		default:
		}
		n, err := poll()
		if err != nil {
			<-done
			return err
		}
		if n == 0 {
			time.Sleep(barrierIdle)
		}
	}
}
