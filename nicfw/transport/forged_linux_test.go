package transport

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestForgerWithEpochsOverAFXDP is TestForgerWithEpochs over AF_XDP on a
// veth pair (2% of frames dropped at each host), on the system clock:
// once each host has taken messages from the other, a forger in each
// host's namespace, knowing both hosts' epochs, sends the other host under
// its address frames of forged PDUs (DATA with destination epoch 0, DATA
// and compact cells with both epochs right sweeping the sequence numbers,
// ACKs sweeping acknowledgements, NACKs, restart claims) as fast as a raw
// socket takes them, while 10,000 real messages go each way. No forged
// message is delivered, every real one exactly once and in order, and the
// refusals are counted. As over memlink, the forger's one chance is that
// its first frame with both epochs right and a DATA or ACK number falls in
// its channel's window: the test fails with probability under 2*6/2^16.
func TestForgerWithEpochsOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, sockA := xdptest.OpenHost(t, v.A, 0.02, 31)
	_, sockB := xdptest.OpenHost(t, v.B, 0.02, 32)
	forgeOver(t, v, sockA, sockB, func(fr []byte, _, _ *netnstest.Host) []byte { return fr })
}

// TestForgerWithEpochsOverUDP is TestForgerWithEpochsOverAFXDP in xam's
// UDP form (datapath/encap): the forgers send UDP datagrams to the xam
// port from the other host's IP address, with the frames of forged PDUs
// in them.
func TestForgerWithEpochsOverUDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, la := xdptest.OpenUDP(t, v.A, 0.02, 33)
	_, lb := xdptest.OpenUDP(t, v.B, 0.02, 34)
	forgeOver(t, v, la, lb, func(fr []byte, from, to *netnstest.Host) []byte {
		h := &cells.UDPHeader{DstMAC: to.MAC, SrcMAC: from.MAC,
			Src: netip.AddrPortFrom(from.Addr.Addr(), cells.DefaultUDPPort), Dst: netip.AddrPortFrom(to.Addr.Addr(), cells.DefaultUDPPort)}
		payload := fr[afxdp.EthernetHeaderLen:]
		out := make([]byte, h.Len()+len(payload))
		copy(out[h.Len():], payload)
		if _, err := cells.PutUDP(out, h, len(payload)); err != nil {
			panic(err)
		}
		return out
	})
}

// forgeOver runs the forgers' test between hosts v.A and v.B on links la
// and lb; wrap puts a forged frame (addressed as the links address) in
// the form the wire carries, from one host's namespace to the other.
func forgeOver(t *testing.T, v *netnstest.Pair, la, lb afxdp.Link, wrap func(fr []byte, from, to *netnstest.Host) []byte) {
	const channels = 4
	// A host starved of the CPU for seconds (CI's two cores, other
	// packages' tests beside) must not give a message up: every real one
	// is to arrive.
	p := pairOn(t, la, lb, nil, Config{Channels: channels, RetransmitAfter: time.Millisecond, GiveUpAfter: time.Minute})
	mtu := la.MTU()

	var (
		stop atomic.Bool
		wg   sync.WaitGroup
		errs [2]error
		sent [2]atomic.Int64
	)
	// forge sends frames of f from host from's namespace to the address
	// to until stop.
	forge := func(i int, from, to *netnstest.Host, f *forger) {
		wg.Go(func() {
			errs[i] = from.Do(func() error {
				fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				sa := &unix.SockaddrLinklayer{Ifindex: from.Index, Halen: 6}
				copy(sa.Addr[:], to.MAC)
				for !stop.Load() {
					fr, err := f.frame(mtu)
					if err != nil {
						return err
					}
					if err := unix.Sendto(fd, wrap(fr, from, to), 0, sa); err != nil && err != unix.ENOBUFS {
						return err
					}
					sent[i].Add(1)
				}
				return nil
			})
		})
	}
	started := false
	p.between = func() {
		if started || deliveredFrom(p.a, hostB) < 8 || deliveredFrom(p.b, hostA) < 8 {
			return
		}
		started = true
		a, b := la.HardwareAddr(), lb.HardwareAddr()
		forge(0, v.B, v.A, newForger(a, b, p.a.tr.epoch, p.b.tr.epoch, channels, 3))
		forge(1, v.A, v.B, newForger(b, a, p.b.tr.epoch, p.a.tr.epoch, channels, 4))
	}
	const count = 10_000
	p.transfer(t, count, 64, 0, p.a, p.b)
	stop.Store(true)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkForgeries(t, p, count)
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	t.Logf("forged frames sent: %d to A, %d to B", sent[0].Load(), sent[1].Load())
	t.Logf("A: zero epoch %d, stale epoch %d, unconfirmed %d, out of window %d, forged acks %d, renewals %d, RESETs %d, delivered %d",
		sa.ZeroEpoch, sa.StaleEpoch, sa.Unconfirmed, sa.OutOfWindow, sa.ForgedAcks, sa.Renewals, sa.ResetsSent, sa.Delivered)
	t.Logf("B: zero epoch %d, stale epoch %d, unconfirmed %d, out of window %d, forged acks %d, renewals %d, RESETs %d, delivered %d",
		sb.ZeroEpoch, sb.StaleEpoch, sb.Unconfirmed, sb.OutOfWindow, sb.ForgedAcks, sb.Renewals, sb.ResetsSent, sb.Delivered)
}
