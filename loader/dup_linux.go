//go:build linux

package loader

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// dupObjects are the kernel objects of a Duplicator.
type dupObjects struct {
	Prog  *ebpf.Program `ebpf:"xam_dup"`
	Cfg   *ebpf.Map     `ebpf:"dup_cfg"`
	Stats *ebpf.Map     `ebpf:"dup_stats"`
	Rng   *ebpf.Map     `ebpf:"dup_rng"`
}

func (o *dupObjects) close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{o.Prog, o.Cfg, o.Stats, o.Rng} {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Duplicator is a tcx ingress program on one device that makes a fraction
// of the xam frames arriving there arrive twice. Put it on a port of a
// bridge (the "switch"), on the port towards the sender: AF_XDP transmit
// bypasses the sending device's own tc hooks, so there it would see
// nothing. A chosen frame is cloned into the port's ingress again
// (bpf_clone_redirect), marked with DupMark so that it is not cloned again,
// and the bridge forwards both. Not the egress towards the receiver: a clone
// sent to an egress keeps the kernel's "redirected" flag across the veth,
// and generic XDP on the receiver skips such skbs, so the clone would miss
// the AF_XDP socket; a clone that goes through a device's receive path
// loses the flag. Like an Attachment, the Duplicator stays attached until
// Close or the end of its process, whether or not its owner keeps a
// reference to it (the package holds it meanwhile), and goes away with its
// process. Its methods may be called concurrently.
type Duplicator struct {
	ifindex int
	objs    dupObjects

	mu   sync.Mutex
	link link.Link // nil once closed
}

// AttachDuplicator loads the duplicator and attaches it to the ingress of
// the device ifindex (resolved in the calling thread's network namespace,
// as for Program.Attach) with the tcx hook (kernel 6.6 or later).
func AttachDuplicator(ifindex int, d Duplicate) (*Duplicator, error) {
	if ifindex < 1 {
		return nil, fmt.Errorf("loader: invalid ifindex %d", ifindex)
	}
	if d.EtherType == 0 {
		d.EtherType = DefaultEtherType
	}
	if d.EtherType < 0x0600 {
		return nil, fmt.Errorf("loader: EtherType %#04x is an 802.3 length, not an EtherType", d.EtherType)
	}
	if d.DstMAC != nil && len(d.DstMAC) != 6 {
		return nil, fmt.Errorf("loader: destination MAC %v is not 6 bytes", d.DstMAC)
	}
	thr, err := threshold("duplicate rate", d.Rate)
	if err != nil {
		return nil, err
	}
	spec, err := loadXam()
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	var mac [6]byte
	var flags uint32
	if d.DstMAC != nil {
		copy(mac[:], d.DstMAC)
		flags = flagDstMAC
	}
	for name, v := range map[string]any{
		xamVarXamEthertype: d.EtherType,
		xamVarXamDstMac:    mac,
		xamVarXamFlags:     flags,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("loader: setting %s: %w", name, err)
		}
	}
	dup := &Duplicator{ifindex: ifindex}
	if err := spec.LoadAndAssign(&dup.objs, nil); err != nil {
		return nil, fmt.Errorf("loader: loading the duplicator: %w", err)
	}
	if err := dup.set(thr, d.Seed); err != nil {
		dup.objs.close()
		return nil, err
	}
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   dup.objs.Prog,
		Attach:    ebpf.AttachTCXIngress,
	})
	if err != nil {
		dup.objs.close()
		return nil, fmt.Errorf("loader: attaching the duplicator to the ingress of %s: %w", devName(ifindex), err)
	}
	dup.link = l
	hold(dup)
	return dup, nil
}

func (d *Duplicator) set(thr, seedValue uint64) error {
	seeded, err := seed(d.objs.Rng, seedValue)
	if err != nil {
		return fmt.Errorf("loader: seeding the duplicator: %w", err)
	}
	if err := d.objs.Cfg.Put(uint32(0), xamDupConfig{Threshold: thr, Seeded: seeded}); err != nil {
		return fmt.Errorf("loader: setting the duplicate rate: %w", err)
	}
	return nil
}

// SetRate changes the fraction of frames duplicated, 0..1, and restarts a
// seeded generator at seed (0: the kernel's generator).
func (d *Duplicator) SetRate(rate float64, seed uint64) error {
	thr, err := threshold("duplicate rate", rate)
	if err != nil {
		return err
	}
	if err := d.usable(); err != nil {
		return err
	}
	return d.set(thr, seed)
}

// Counters returns the duplicator's counters summed over all CPUs.
func (d *Duplicator) Counters() (DupCounters, error) {
	if err := d.usable(); err != nil {
		return DupCounters{}, err
	}
	var per []xamDupCounters
	if err := d.objs.Stats.Lookup(uint32(0), &per); err != nil {
		return DupCounters{}, fmt.Errorf("loader: reading duplicator counters: %w", err)
	}
	var c DupCounters
	for _, v := range per {
		c.Seen += v.Seen
		c.Duplicated += v.Duplicated
		c.CloneErrors += v.CloneErrors
	}
	return c, nil
}

func (d *Duplicator) usable() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.link == nil {
		return ErrClosed
	}
	return nil
}

// Close detaches and releases the duplicator. It is idempotent.
func (d *Duplicator) Close() error {
	d.mu.Lock()
	l := d.link
	d.link = nil
	d.mu.Unlock()
	if l == nil {
		return nil
	}
	release(d)
	var errs []error
	if err := l.Close(); err != nil {
		errs = append(errs, fmt.Errorf("loader: detaching the duplicator from ifindex %d: %w", d.ifindex, err))
	}
	if err := d.objs.close(); err != nil {
		errs = append(errs, fmt.Errorf("loader: closing the duplicator: %w", err))
	}
	return errors.Join(errs...)
}
