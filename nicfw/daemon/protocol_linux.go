//go:build linux

package daemon

import (
	"errors"
	"fmt"

	"github.com/xam-project/xam/nicfw"
)

// What crosses the daemon's socket: the open and close requests and the
// reply to every request, as JSON messages (GrantRequest is with the
// virtual networks, in vnet_linux.go), and the refusals that reach a
// client typed.

// OpenRequest asks the daemon for an endpoint.
type OpenRequest struct {
	Op string `json:"op"` // "open"
	// Endpoint is the id wanted; 0 lets the daemon choose one at or above
	// FirstUserEndpoint.
	Endpoint nicfw.EndpointID `json:"endpoint,omitempty"`
	// Tag is the endpoint's virtual network: 0 asks for a new one, whose
	// tag the daemon draws at random (NewTag) and the reply carries
	// (Endpoint.Tag); any other tag joins that network if the peer may
	// (its creator's uid and groups, and those it granted: GrantRequest),
	// or makes it with the peer as its creator if this daemon has no
	// endpoint of it. Only root and the daemon's user may make a network
	// with a weak tag (WeakTag; ErrWeakTag).
	Tag uint64 `json:"tag"`
	// Table is the endpoint's translation table.
	Table []nicfw.Name `json:"table"`
	// QueueEntries and StagingSize size the endpoint (0: defaults).
	QueueEntries int `json:"queue_entries,omitempty"`
	StagingSize  int `json:"staging_size,omitempty"`
	// Weight is the endpoint's share of the engine's sends (nicfw.VNet;
	// 0: 1).
	Weight int `json:"weight,omitempty"`
	// Ordered asks for the endpoint's messages to be delivered in the
	// order sent (nicfw.VNet).
	Ordered bool `json:"ordered,omitempty"`
	// Key, if set (16 or 32 bytes; nicfw.NewKey), authenticates the
	// network's messages between hosts (nicfw.VNet.Key). The network's
	// first endpoint on this daemon sets it; every later open of the tag
	// must give the same key (ErrPermission otherwise). Stats never show
	// it.
	Key []byte `json:"key,omitempty"`
	// Reserve, with Endpoint, also reserves the ids after it, up to
	// Endpoint+Reserve-1 (at most MaxReserve), for this connection: no
	// other connection may open them (ErrEndpointInUse) until this
	// endpoint closes, and the daemon chooses none of them. A GRIM
	// endpoint reserves its range of channel ids, each of which its
	// peers' tables name as one of its channels: another user let into
	// the network (a grant) cannot take an unused one and speak as it.
	// The open is refused if another connection holds one of them.
	Reserve int `json:"reserve,omitempty"`
}

// MaxReserve bounds OpenRequest.Reserve.
const MaxReserve = 256

// CloseRequest closes an endpoint of the connection.
type CloseRequest struct {
	Op       string           `json:"op"` // "close"
	Endpoint nicfw.EndpointID `json:"endpoint"`
}

// Reply answers a request.
type Reply struct {
	Error string `json:"error,omitempty"`
	// Code names the kind of a refusal, for Dial's side to turn back into
	// the sentinel error: "permission", "quota", "config", "in_use",
	// "closed"; empty for others.
	Code     string           `json:"code,omitempty"`
	Host     nicfw.HostID     `json:"host"`
	Endpoint nicfw.EndpointID `json:"endpoint,omitempty"`
	// Tag is an opened endpoint's virtual network ("open").
	Tag uint64 `json:"tag,omitempty"`
	// Stats of the engine ("stats").
	Stats *Stats `json:"stats,omitempty"`
}

// Errors of the daemon.
var (
	// ErrPermission: the peer's credentials do not allow the request.
	ErrPermission = errors.New("nicfw: permission denied")
	// ErrClosed: the daemon has stopped.
	ErrClosed = errors.New("nicfw: daemon stopped")
	// ErrSocketInUse: another daemon answers on the socket's path, or the
	// path is something other than a socket; New leaves it alone.
	ErrSocketInUse = errors.New("nicfw: daemon socket in use")
	// ErrQuota: the request would take the user past one of its quotas
	// (endpoints, connections, endpoint memory), or the daemon past its
	// bound on connections.
	ErrQuota = errors.New("nicfw: user quota exceeded")
	// ErrWeakTag: a user other than root and the daemon's asked for a new
	// virtual network with a weak tag (WeakTag). It is an ErrPermission.
	ErrWeakTag = fmt.Errorf("%w: a weak tag", ErrPermission)
	// ErrNoNetwork: a grant names a virtual network with no endpoint on
	// this daemon (told to root and the daemon's user only; others get
	// ErrPermission).
	ErrNoNetwork = errors.New("nicfw: no such virtual network")
)

// errorCodes are the refusals that cross the daemon socket typed.
var errorCodes = []struct {
	code string
	err  error
}{
	{"weak_tag", ErrWeakTag}, {"permission", ErrPermission}, {"quota", ErrQuota}, {"in_use", nicfw.ErrEndpointInUse},
	{"no_network", ErrNoNetwork},
	{"config", nicfw.ErrConfig}, {"closed", ErrClosed},
}

// codeOf returns the code of err's kind, "" for none of errorCodes.
func codeOf(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

// errorOf returns the sentinel of code, nil for none.
func errorOf(code string) error {
	for _, c := range errorCodes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}
