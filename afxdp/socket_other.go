//go:build !linux

package afxdp

import (
	"fmt"
	"net"
	"time"
)

// Socket is an AF_XDP socket; on this system Open always fails.
type Socket struct{}

var errNotLinux = fmt.Errorf("afxdp: %w: AF_XDP sockets need Linux", ErrNotSupported)

// Open fails: AF_XDP sockets need Linux. It still validates opts first.
func Open(ifindex int, opts Options) (*Socket, error) {
	if _, err := opts.withDefaults(); err != nil {
		return nil, err
	}
	return nil, errNotLinux
}

func (s *Socket) Info() Info                       { return Info{} }
func (s *Socket) BatchSize() int                   { return 0 }
func (s *Socket) MTU() int                         { return 0 }
func (s *Socket) HardwareAddr() net.HardwareAddr   { return nil }
func (s *Socket) FD() int                          { return -1 }
func (s *Socket) Send([][]byte) (int, error)       { return 0, net.ErrClosed }
func (s *Socket) Recv([][]byte) (int, error)       { return 0, net.ErrClosed }
func (s *Socket) Wait(time.Duration) (bool, error) { return false, net.ErrClosed }
func (s *Socket) Wake() error                      { return net.ErrClosed }
func (s *Socket) Stats() (Stats, error)            { return Stats{}, net.ErrClosed }
func (s *Socket) Close() error                     { return net.ErrClosed }

// UMEM is packet memory shared by several sockets; on this system NewUMEM
// always fails.
type UMEM struct{}

// NewUMEM fails: AF_XDP sockets need Linux. It still validates opts first.
func NewUMEM(opts UMEMOptions) (*UMEM, error) {
	if _, err := opts.withDefaults(); err != nil {
		return nil, err
	}
	return nil, errNotLinux
}

// OpenShared fails: AF_XDP sockets need Linux. It still validates opts
// first.
func OpenShared(ifindex int, queues []int, opts Options) ([]*Socket, error) {
	if _, err := sharedOptions(queues, opts); err != nil {
		return nil, err
	}
	return nil, errNotLinux
}

func (u *UMEM) Options() UMEMOptions                            { return UMEMOptions{} }
func (u *UMEM) Chunks() (total, free int)                       { return 0, 0 }
func (u *UMEM) Open(ifindex int, opts Options) (*Socket, error) { return nil, errNotLinux }
func (u *UMEM) Close() error                                    { return net.ErrClosed }
func (s *Socket) Metadata(frame []byte, n int) []byte           { return nil }
