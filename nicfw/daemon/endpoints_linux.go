//go:build linux

package daemon

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// Endpoints for connections: an open makes the endpoint's memory in the
// connection's goroutine and adds the endpoint in the engine goroutine; a
// close closes it there, and releases a large one's memory elsewhere; an
// open may reserve the ids after its endpoint.

// makeEndpointMemory makes an open's endpoint memory (a variable for the
// test that holds it up to show the engine does not wait for it).
var makeEndpointMemory = endpoint.NewMemory

// open creates an endpoint for req on virtual network tag: its memory and
// eventfd here, in the connection's goroutine (making a large memory takes
// long, and the engine must not wait for it), then the endpoint in the
// engine goroutine. Permission and quotas are checked by the caller. For
// a large endpoint it returns the daemon's hold on its memory
// (bigMemory), for closeEndpoint.
func (d *Daemon) open(req OpenRequest, tag uint64, size int64, uid uint32, group uint64) (id nicfw.EndpointID, mem *endpoint.Memory, notify, bells int, big *bigMemory, err error) {
	if len(req.Table) == 0 {
		return 0, nil, -1, -1, nil, fmt.Errorf("%w: an empty translation table", nicfw.ErrConfig)
	}
	mem, err = makeEndpointMemory(endpoint.Config{QueueEntries: req.QueueEntries, StagingSize: req.StagingSize, TableSize: len(req.Table)})
	if err != nil {
		return 0, nil, -1, -1, nil, err
	}
	if big, err = holdBig(mem, size); err != nil {
		mem.Close()
		return 0, nil, -1, -1, nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		mem.Close()
		big.close()
		return 0, nil, -1, -1, nil, fmt.Errorf("nicfw: endpoint eventfd: %w", err)
	}
	// Whoever comes first owns mem and efd: the engine goroutine, which
	// adds them (taken), or this one, once do has given up (abandoned).
	var mu sync.Mutex
	var taken, abandoned, added bool
	derr := d.do(func() {
		mu.Lock()
		if abandoned {
			mu.Unlock()
			return
		}
		taken = true
		mu.Unlock()
		id = req.Endpoint
		if id == 0 {
			for range 1 << 16 {
				if d.nextID < FirstUserEndpoint {
					d.nextID = FirstUserEndpoint
				}
				if !d.eng.HasEndpoint(d.nextID) && !d.isReserved(d.nextID) {
					break
				}
				d.nextID++
			}
			id = d.nextID
			d.nextID++
		}
		if err = d.eng.AddEndpoint(id, mem, nicfw.VNet{Tag: tag, Table: req.Table, Weight: req.Weight, Ordered: req.Ordered, Owner: uid, Key: req.Key, Group: group}); err != nil {
			return
		}
		added = true
		// The connection's page of doorbells, a descriptor of its own to
		// send: the engine closes its own with the connection's last
		// endpoint.
		bells = -1
		if fd := d.eng.BellsFD(id); fd >= 0 {
			if bells, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
				bells, err = -1, nil // the endpoint rings its header's doorbell only
			}
		}
		one := [8]byte{1}
		mem.SetNotify(func() { unix.Write(efd, one[:]) })
		d.notify[id] = efd
	})
	mu.Lock()
	mine := !taken
	abandoned = mine
	mu.Unlock()
	switch {
	case mine:
		mem.Close()
		big.close()
		unix.Close(efd)
		return 0, nil, -1, -1, nil, derr
	case derr != nil && added:
		d.release(big) // the engine owns them, and is stopping: it lets go in closeAll
		return 0, nil, -1, -1, nil, derr
	case derr != nil:
		mem.Close()
		big.close()
		unix.Close(efd)
		return 0, nil, -1, -1, nil, derr
	case !added:
		mem.Close()
		big.close()
		unix.Close(efd)
		return 0, nil, -1, -1, nil, err
	}
	return id, mem, efd, bells, big, nil
}

// engineClosed is told, in the engine goroutine, how long the engine took
// to close an endpoint (a variable for the test that checks that a large
// endpoint's memory is released elsewhere).
var engineClosed = func(time.Duration) {}

// closeEndpoint closes endpoint id in the engine goroutine. The memory of
// a large one (big not nil) is released off the engine's path
// (release_linux.go).
func (d *Daemon) closeEndpoint(id nicfw.EndpointID, big *bigMemory) error {
	if big != nil {
		big.dropPages()
		defer d.release(big)
	}
	var err error
	derr := d.do(func() {
		t0 := time.Now()
		err = d.eng.CloseEndpoint(id)
		engineClosed(time.Since(t0))
		if fd, ok := d.notify[id]; ok {
			unix.Close(fd)
			delete(d.notify, id)
		}
	})
	return errors.Join(err, derr)
}

// isReserved reports whether id is reserved by an open (OpenRequest.Reserve).
func (d *Daemon) isReserved(id nicfw.EndpointID) bool {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	return d.reserved[id] != nil
}

// reserve checks that connection c may open req's endpoint and, with
// req.Reserve, reserves the ids after it for c; it returns the ids it
// reserved (none that c held already). d.mu is held.
func (d *Daemon) reserve(c *daemonConn, req OpenRequest) ([]nicfw.EndpointID, error) {
	d.resMu.Lock()
	defer d.resMu.Unlock()
	if r := d.reserved[req.Endpoint]; req.Endpoint != 0 && r != nil && r != c {
		return nil, fmt.Errorf("%w: endpoint %d is reserved by another connection", nicfw.ErrEndpointInUse, req.Endpoint)
	}
	var ids []nicfw.EndpointID
	for i := 1; i < req.Reserve; i++ {
		id := req.Endpoint + nicfw.EndpointID(i)
		r := d.reserved[id]
		o, open := d.owners[id]
		if r != nil && r != c || open && o.conn != c {
			return nil, fmt.Errorf("%w: endpoint %d, in the range %d..%d to reserve, is another connection's",
				nicfw.ErrEndpointInUse, id, req.Endpoint, int(req.Endpoint)+req.Reserve-1)
		}
		if r == nil {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		d.reserved[id] = c
	}
	return ids, nil
}

// unreserve releases ids, reserved by c.
func (d *Daemon) unreserve(c *daemonConn, ids []nicfw.EndpointID) {
	if len(ids) == 0 {
		return
	}
	d.resMu.Lock()
	defer d.resMu.Unlock()
	for _, id := range ids {
		if d.reserved[id] == c {
			delete(d.reserved, id)
		}
	}
}
