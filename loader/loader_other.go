//go:build !linux

package loader

import "github.com/cilium/ebpf"

// Program is xam's XDP program; on this platform it cannot be loaded.
type Program struct{}

// Load returns ErrNotSupported: XDP needs Linux.
func Load(cfg Config) (*Program, error) {
	if _, err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	return nil, ErrNotSupported
}

func (p *Program) Config() Config                                     { return Config{} }
func (p *Program) XDP() *ebpf.Program                                 { return nil }
func (p *Program) Close() error                                       { return nil }
func (p *Program) Register(queue int, xskFD int) error                { return ErrNotSupported }
func (p *Program) Unregister(queue int) error                         { return ErrNotSupported }
func (p *Program) Counters() (Counters, error)                        { return Counters{}, ErrNotSupported }
func (p *Program) QueueCounters() ([]QueueCount, error)               { return nil, ErrNotSupported }
func (p *Program) SetFaults(f Faults) error                           { return ErrNotSupported }
func (p *Program) Admit(vpi, vci uint16) error                        { return ErrNotSupported }
func (p *Program) Revoke(vpi, vci uint16) error                       { return ErrNotSupported }
func (p *Program) Run(frame []byte) (Action, error)                   { return 0, ErrNotSupported }
func (p *Program) Attach(ifindex int, mode Mode) (*Attachment, error) { return nil, ErrNotSupported }

// Attachment is a Program attached to a device; there are none here.
type Attachment struct{}

func (a *Attachment) Ifindex() int   { return 0 }
func (a *Attachment) Mode() Mode     { return ModeAuto }
func (a *Attachment) Reason() string { return "" }
func (a *Attachment) Close() error   { return nil }

// RecommendMode returns ErrNotSupported: XDP needs Linux.
func RecommendMode(ifindex int) (Mode, string, error) { return ModeAuto, "", ErrNotSupported }

// Duplicator is the tcx duplicator; there are none here.
type Duplicator struct{}

// AttachDuplicator returns ErrNotSupported: tcx needs Linux.
func AttachDuplicator(ifindex int, d Duplicate) (*Duplicator, error) { return nil, ErrNotSupported }

func (d *Duplicator) SetRate(rate float64, seed uint64) error { return ErrNotSupported }
func (d *Duplicator) Counters() (DupCounters, error)          { return DupCounters{}, ErrNotSupported }
func (d *Duplicator) Close() error                            { return nil }

// CountersOn returns ErrNotSupported: XDP needs Linux.
func CountersOn(ifindex int) (Counters, error) { return Counters{}, ErrNotSupported }

// QueueCountersOn returns ErrNotSupported: XDP needs Linux.
func QueueCountersOn(ifindex int) ([]QueueCount, error) { return nil, ErrNotSupported }
