//go:build linux

package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// xdpObjects are the kernel objects of a Program: the XDP program and the
// maps it uses (the duplicator's are loaded only by AttachDuplicator).
type xdpObjects struct {
	Prog     *ebpf.Program `ebpf:"xam_xdp"`
	Xsks     *ebpf.Map     `ebpf:"xsks"`
	Stats    *ebpf.Map     `ebpf:"stats"`
	FaultCfg *ebpf.Map     `ebpf:"fault_cfg"`
	Rng      *ebpf.Map     `ebpf:"rng"`
	Circuits *ebpf.Map     `ebpf:"circuits"`
	// QueueStats counts per receive queue (QueueCounters).
	QueueStats *ebpf.Map `ebpf:"queue_stats"`
}

func (o *xdpObjects) close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{o.Prog, o.Xsks, o.Stats, o.FaultCfg, o.Rng, o.Circuits, o.QueueStats} {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Program is xam's XDP program and its maps, loaded into the kernel but not
// attached to any device. Its methods may be called concurrently.
type Program struct {
	cfg  Config // with defaults filled in
	objs xdpObjects

	mu       sync.Mutex
	closed   bool
	attached map[*Attachment]struct{} // open attachments, closed by Close
}

// Load loads the XDP program configured by cfg, with its maps, into the
// kernel. The caller needs CAP_BPF (or CAP_SYS_ADMIN). A verifier rejection
// is returned as a wrapped *ebpf.VerifierError; print it with %+v for the
// whole log.
func Load(cfg Config) (*Program, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	spec, err := loadXam()
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	spec.Maps[xamMapXsks].MaxEntries = uint32(cfg.MaxQueues)
	spec.Maps[xamMapQueueStats].MaxEntries = uint32(cfg.MaxQueues)
	spec.Maps[xamMapCircuits].MaxEntries = uint32(cfg.MaxCircuits)
	var mac [6]byte
	copy(mac[:], cfg.DstMAC)
	var ip4 uint32
	var ip6 [16]byte
	if a := cfg.UDPLocal.Unmap(); a.Is4() {
		b := a.As4()
		ip4 = binary.NativeEndian.Uint32(b[:]) // the bytes as they are in the header
	} else if a.IsValid() {
		ip6 = a.As16()
	}
	for name, v := range map[string]any{
		xamVarXamEthertype: cfg.EtherType,
		xamVarXamDstMac:    mac,
		xamVarXamFlags:     cfg.flags(),
		xamVarXamHecCells:  uint32(cfg.HECCells),
		xamVarXamUdpPort:   cfg.UDPPort,
		xamVarXamUdpIp4:    ip4,
		xamVarXamUdpIp6:    ip6,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("loader: setting %s: %w", name, err)
		}
	}
	if cfg.Frags {
		// The frags-aware twin takes xam_xdp's place (its kernel name,
		// xam_xdp_frags, tells them apart).
		spec.Programs[xamProgXamXdp] = spec.Programs[xamProgXamXdpFrags]
	}
	if cfg.RxMetadata {
		// The metadata program too, bound to its device: the kfunc it
		// calls is the driver's.
		ps := spec.Programs[xamProgXamXdpMeta].Copy()
		ps.Ifindex = uint32(cfg.Ifindex)
		ps.Flags |= unix.BPF_F_XDP_DEV_BOUND_ONLY
		spec.Programs[xamProgXamXdp] = ps
	}
	p := &Program{cfg: cfg, attached: make(map[*Attachment]struct{})}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("loader: loading the XDP program: %w", err)
	}
	return p, nil
}

// Config returns the program's configuration, with defaults filled in.
func (p *Program) Config() Config { return p.cfg }

// XDP returns the loaded program, for callers that attach or test it
// themselves. It stays owned by p.
func (p *Program) XDP() *ebpf.Program { return p.objs.Prog }

// Close detaches the program from every device it was attached to through
// p and releases the program and its maps. Sockets registered with it stay
// open (they belong to their owner). Close is idempotent.
func (p *Program) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	atts := make([]*Attachment, 0, len(p.attached))
	for a := range p.attached {
		atts = append(atts, a)
	}
	p.mu.Unlock()

	var errs []error
	for _, a := range atts {
		if err := a.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := p.objs.close(); err != nil {
		errs = append(errs, fmt.Errorf("loader: closing the program: %w", err))
	}
	return errors.Join(errs...)
}

// usable returns ErrClosed once p is closed. The kernel objects stay valid
// while a method runs, since Close may race with it only through misuse.
func (p *Program) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	return nil
}

// Register makes the program redirect frames arriving on rx queue queue to
// the AF_XDP socket xskFD, which must be bound to that queue of the device
// the program is attached to (the kernel drops frames redirected to a socket
// of another device or queue). It replaces an earlier registration. The
// kernel removes the entry when the socket is closed.
func (p *Program) Register(queue int, xskFD int) error {
	if err := p.checkQueue(queue); err != nil {
		return err
	}
	if xskFD < 0 {
		return fmt.Errorf("loader: register queue %d: invalid socket fd %d", queue, xskFD)
	}
	if err := p.objs.Xsks.Put(uint32(queue), uint32(xskFD)); err != nil {
		return fmt.Errorf("loader: register socket %d for queue %d: %w", xskFD, queue, err)
	}
	return nil
}

// Unregister removes the socket of queue, if any: frames arriving on it pass
// to the kernel again (counted in RedirectMiss).
func (p *Program) Unregister(queue int) error {
	if err := p.checkQueue(queue); err != nil {
		return err
	}
	err := p.objs.Xsks.Delete(uint32(queue))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("loader: unregister queue %d: %w", queue, err)
	}
	return nil
}

func (p *Program) checkQueue(queue int) error {
	if err := p.usable(); err != nil {
		return err
	}
	if queue < 0 || queue >= p.cfg.MaxQueues {
		return fmt.Errorf("loader: queue %d out of range [0, %d) (Config.MaxQueues)", queue, p.cfg.MaxQueues)
	}
	return nil
}

// Counters returns the program's counters summed over all CPUs.
func (p *Program) Counters() (Counters, error) {
	if err := p.usable(); err != nil {
		return Counters{}, err
	}
	return readCounters(p.objs.Stats)
}

// QueueCounters returns, for each receive queue on which frames of xam's
// reached the program's redirect, how many, and how many of them found no
// socket registered for their queue (Counters.RedirectMiss, per queue).
func (p *Program) QueueCounters() ([]QueueCount, error) {
	if err := p.usable(); err != nil {
		return nil, err
	}
	return readQueueCounters(p.objs.QueueStats)
}

// readQueueCounters sums the per-CPU counters of every queue in the
// program's queue_stats map, and lists the queues that saw frames.
func readQueueCounters(m *ebpf.Map) ([]QueueCount, error) {
	var qs []QueueCount
	var per []xamQueueCounters
	for q := uint32(0); q < m.MaxEntries(); q++ {
		if err := m.Lookup(q, &per); err != nil {
			return nil, fmt.Errorf("loader: reading queue %d's counters: %w", q, err)
		}
		c := QueueCount{Queue: int(q)}
		for _, v := range per {
			c.Frames += v.Frames
			c.NoSocket += v.NoSocket
		}
		if c.Frames > 0 {
			qs = append(qs, c)
		}
	}
	return qs, nil
}

// readCounters sums the per-CPU counters in the program's stats map.
func readCounters(stats *ebpf.Map) (Counters, error) {
	var per []xamCounters
	if err := stats.Lookup(uint32(0), &per); err != nil {
		return Counters{}, fmt.Errorf("loader: reading counters: %w", err)
	}
	var c Counters
	for _, v := range per {
		c.Received += v.Received
		c.Redirected += v.Redirected
		c.RedirectMiss += v.RedirectMiss
		c.Passed += v.Passed
		c.OtherDst += v.OtherDst
		c.Malformed += v.Malformed
		c.FaultDropped += v.FaultDropped
		c.FaultCorrupted += v.FaultCorrupted
		c.HECErrors += v.HecErrors
		c.HECDropped += v.HecDropped
		c.NotAdmitted += v.NotAdmitted
	}
	return c, nil
}

// SetFaults sets the fault injection rates; the zero Faults turns it off.
func (p *Program) SetFaults(f Faults) error {
	if err := p.usable(); err != nil {
		return err
	}
	drop, err := threshold("drop rate", f.DropRate)
	if err != nil {
		return err
	}
	corrupt, err := threshold("corrupt rate", f.CorruptRate)
	if err != nil {
		return err
	}
	seeded, err := seed(p.objs.Rng, f.Seed)
	if err != nil {
		return fmt.Errorf("loader: seeding fault injection: %w", err)
	}
	if err := p.objs.FaultCfg.Put(uint32(0), xamFaults{Drop: drop, Corrupt: corrupt, Seeded: seeded}); err != nil {
		return fmt.Errorf("loader: setting faults: %w", err)
	}
	return nil
}

// seed sets every CPU's generator state in the per-CPU map m to s and
// returns the program's "seeded" flag for s.
func seed(m *ebpf.Map, s uint64) (uint64, error) {
	if s == 0 {
		return 0, nil
	}
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, err
	}
	states := make([]uint64, n)
	for i := range states {
		states[i] = s
	}
	if err := m.Put(uint32(0), states); err != nil {
		return 0, err
	}
	return 1, nil
}

// Admit adds the circuit vpi/vci to the admission map (Config.Admission).
// The VPI has 8 bits (UNI) or 12 bits (Config.NNI).
func (p *Program) Admit(vpi, vci uint16) error {
	key, err := p.circuitKey(vpi, vci)
	if err != nil {
		return err
	}
	if err := p.objs.Circuits.Put(key, uint8(1)); err != nil {
		return fmt.Errorf("loader: admit VPI/VCI %d/%d: %w", vpi, vci, err)
	}
	return nil
}

// Revoke removes the circuit vpi/vci from the admission map; revoking a
// circuit that is not admitted does nothing.
func (p *Program) Revoke(vpi, vci uint16) error {
	key, err := p.circuitKey(vpi, vci)
	if err != nil {
		return err
	}
	err = p.objs.Circuits.Delete(key)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("loader: revoke VPI/VCI %d/%d: %w", vpi, vci, err)
	}
	return nil
}

func (p *Program) circuitKey(vpi, vci uint16) (uint32, error) {
	if err := p.usable(); err != nil {
		return 0, err
	}
	if !p.cfg.Admission {
		return 0, ErrAdmissionOff
	}
	maxVPI := uint16(0xff)
	if p.cfg.NNI {
		maxVPI = 0xfff
	}
	if vpi > maxVPI {
		return 0, fmt.Errorf("loader: VPI %d does not fit the cell header (at most %d)", vpi, maxVPI)
	}
	return uint32(vpi)<<16 | uint32(vci), nil
}

// Run runs the program once on frame in the kernel (BPF_PROG_TEST_RUN), with
// no device, and returns its verdict; the counters and faults apply as for a
// received frame, on rx queue 0. The frame must hold at least 14 bytes.
func (p *Program) Run(frame []byte) (Action, error) {
	if err := p.usable(); err != nil {
		return 0, err
	}
	ret, err := p.objs.Prog.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		return 0, fmt.Errorf("loader: test run: %w", err)
	}
	return Action(ret), nil
}

// forget drops a from p's attachments.
func (p *Program) forget(a *Attachment) {
	p.mu.Lock()
	delete(p.attached, a)
	p.mu.Unlock()
}

// live holds every open Attachment and Duplicator of the process, so that
// the garbage collector never takes one whose owner kept no reference:
// cilium/ebpf closes the descriptor of an object it finds unreachable, and
// closing a bpf_link detaches its program, which would break the promise
// of attachment until Close or the end of the process. An Attachment holds
// its Program, so the Program's program and maps stay loaded with it.
var live = struct {
	sync.Mutex
	set map[any]struct{}
}{set: make(map[any]struct{})}

// hold keeps x (an *Attachment or a *Duplicator) reachable until release.
func hold(x any) {
	live.Lock()
	live.set[x] = struct{}{}
	live.Unlock()
}

// release lets the garbage collector have x again.
func release(x any) {
	live.Lock()
	delete(live.set, x)
	live.Unlock()
}

// Attachment is a Program attached to a device through a bpf_link: it stays
// attached while the Attachment is open and goes away when it is closed or
// its process dies, whatever way. It stays open whether or not its owner
// keeps a reference to it or to its Program: the package holds every open
// Attachment (and so its Program) until Close, so a program that drops both
// keeps receiving. Its methods may be called concurrently.
type Attachment struct {
	prog    *Program
	ifindex int
	mode    Mode
	reason  string

	mu   sync.Mutex
	link link.Link // nil once closed
}

// Ifindex returns the index of the device the program is attached to.
func (a *Attachment) Ifindex() int { return a.ifindex }

// Mode returns the mode the program was attached in: ModeGeneric or
// ModeNative, never ModeAuto.
func (a *Attachment) Mode() Mode { return a.mode }

// Reason says why this mode was chosen.
func (a *Attachment) Reason() string { return a.reason }

// Close detaches the program. It is idempotent.
func (a *Attachment) Close() error {
	a.mu.Lock()
	l := a.link
	a.link = nil
	a.mu.Unlock()
	if l == nil {
		return nil
	}
	release(a)
	a.prog.forget(a)
	if err := l.Close(); err != nil {
		return fmt.Errorf("loader: detaching from ifindex %d: %w", a.ifindex, err)
	}
	return nil
}
