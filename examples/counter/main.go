// Command counter is a minimal firmware module, the second example of
// docs/modules.md after sender coordination: a counter that every host of
// a cluster adds to and reads, kept by the hosts' engines. Applications
// reach it through their own endpoints with two commands, ADD(delta) and
// GET; each engine tells the others of every ADD in a control message.
//
// It runs three hosts' engines on an in-memory switch (memlink.Hub):
// go run ./examples/counter. The module does not care what link its
// engine has; with AF_XDP sockets on a lab (see examples/remoteread) it
// runs unchanged.
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// counterID is the module's number: the same on every host.
const counterID = 100

// The module's operations (the low 16 bits of a command's Handler).
const (
	opAdd = 1 // ADD(delta): adds delta; result: the counter as this host knows it
	opGet = 2 // GET: result: the counter
)

// counter is the module. It lives in the engine thread, as every module
// does: no locks.
type counter struct {
	bp    *nicfw.Backplane
	total int64
}

func (c *counter) Name() string { return "counter" }
func (c *counter) ID() uint8    { return counterID }

func (c *counter) Init(bp *nicfw.Backplane) error {
	c.bp = bp
	return nil
}

// Command runs an application's command (nicfw.Commander). The engine has
// checked the descriptor; the arguments are a copy.
func (c *counter) Command(_ nicfw.EndpointID, op uint16, args []uint64) ([]uint64, error) {
	switch op {
	case opAdd:
		if len(args) != 1 {
			return nil, errors.New("ADD takes one argument")
		}
		c.total += int64(args[0])
		var body [8]byte
		binary.BigEndian.PutUint64(body[:], args[0])
		for _, h := range c.bp.Hosts() {
			if err := c.bp.SendControl(h, body[:]); err != nil {
				return nil, err
			}
		}
		return []uint64{uint64(c.total)}, nil
	case opGet:
		return []uint64{uint64(c.total)}, nil
	}
	return nil, errors.New("no such operation")
}

// Control takes another host's ADD (nicfw.ControlReceiver).
func (c *counter) Control(_ nicfw.HostID, body []byte) {
	if len(body) == 8 {
		c.total += int64(binary.BigEndian.Uint64(body))
	}
}

func main() {
	totals, err := run(3)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("each host reads the counter:", totals)
}

// run starts n hosts, has host i add i+1, and returns what each host's
// GET reads once every ADD has reached every host.
func run(n int) ([]int64, error) {
	hub, err := memlink.NewHub(memlink.Options{})
	if err != nil {
		return nil, err
	}
	var ports []*memlink.Port
	for range n {
		ports = append(ports, hub.Attach())
	}
	engines := make([]*nicfw.Engine, n)
	views := make([]*endpoint.View, n)
	for i, p := range ports {
		e, err := nicfw.NewEngine(p, nicfw.EngineConfig{Host: nicfw.HostID(i + 1), Modules: []nicfw.Module{&counter{}}})
		if err != nil {
			return nil, err
		}
		defer e.Close()
		for j, q := range ports {
			if j != i {
				if err := e.AddHost(nicfw.HostID(j+1), q.HardwareAddr()); err != nil {
					return nil, err
				}
			}
		}
		self := []nicfw.Name{{Host: nicfw.HostID(i + 1), Endpoint: 1}} // commands need no peers; a table needs an entry
		m, err := e.CreateEndpoint(1, endpoint.Config{}, nicfw.VNet{Tag: 7, Table: self})
		if err != nil {
			return nil, err
		}
		v, err := endpoint.Map(m.FD())
		if err != nil {
			return nil, err
		}
		if err := v.MapBells(e.BellsFD(1)); err != nil {
			return nil, err
		}
		defer v.Close()
		engines[i], views[i] = e, v
	}
	// command issues op through host i's endpoint and returns its result.
	command := func(i int, op uint16, args ...uint64) (int64, error) {
		d := endpoint.Descriptor{Class: endpoint.ClassCommand, Handler: counterID<<16 | uint32(op), NArgs: uint8(len(args))}
		copy(d.Args[:], args)
		if err := views[i].Send(endpoint.RequestSend, &d); err != nil {
			return 0, err
		}
		for range 100_000 {
			for _, e := range engines {
				if _, err := e.Poll(); err != nil {
					return 0, err
				}
			}
			var done endpoint.Descriptor
			if ok, err := views[i].Receive(endpoint.ReplyReceive, &done); err != nil {
				return 0, err
			} else if ok {
				if status := nicfw.CommandStatus(done.Tag); status != nicfw.CommandOK {
					return 0, fmt.Errorf("command %d: status %d", op, status)
				}
				return int64(done.Args[0]), nil
			}
		}
		return 0, fmt.Errorf("command %d: no completion", op)
	}
	for i := range n {
		if _, err := command(i, opAdd, uint64(i+1)); err != nil {
			return nil, err
		}
	}
	want := int64(n * (n + 1) / 2)
	totals := make([]int64, n)
	for round := 0; ; round++ {
		settled := true
		for i := range n {
			if totals[i], err = command(i, opGet); err != nil {
				return nil, err
			}
			settled = settled && totals[i] == want
		}
		if settled {
			return totals, nil
		}
		if round == 1000 {
			return totals, fmt.Errorf("the counter never settled at %d: %v", want, totals)
		}
	}
}
