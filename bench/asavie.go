package bench

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asavie/xdp"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
)

// The Go-library peer: github.com/asavie/xdp, the AF_XDP library a Go
// user would otherwise pick, which xam's own afxdp outgrew (batching,
// need_wakeup, lent frames, busy polling, statistics, shared UMEM). Its
// socket sends and receives the same frames as afxdp's in RawPing and
// rawFrameRate, behind xam's XDP program (the library's own program takes
// every frame of the queue, which would break the host's traffic), so
// the two differ only in the socket's library.

// asavieSocket is an asavie/xdp socket on queue 0 of the device at p,
// registered with xam's XDP program there.
type asavieSocket struct {
	xsk  *xdp.Socket
	prog *loader.Program
}

// openAsavie loads and attaches xam's program at p, opens asavie's socket
// and fills its fill ring with half its frames (the other half send).
func openAsavie(p datapath.Place, mode loader.Mode) (*asavieSocket, error) {
	s := &asavieSocket{}
	err := p.Do(func() (err error) {
		if s.prog, err = loader.Load(loader.Config{DstMAC: p.MAC}); err != nil {
			return err
		}
		if _, err = s.prog.Attach(p.Ifindex, mode); err != nil {
			return err
		}
		// A socket closed just before (the previous path's) leaves the
		// queue within a few milliseconds: asavie's NewSocket does not
		// wait for it, as afxdp.Open does.
		for deadline := time.Now().Add(500 * time.Millisecond); ; time.Sleep(5 * time.Millisecond) {
			s.xsk, err = xdp.NewSocket(p.Ifindex, 0, nil)
			// (It formats its errors with %v: only the text says EBUSY.)
			if err == nil || !strings.Contains(err.Error(), "resource busy") || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			return err
		}
		return s.prog.Register(0, s.xsk.FD())
	})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("asavie/xdp: %w", err)
	}
	s.xsk.Fill(s.xsk.GetDescs(s.xsk.NumFreeFillSlots() / 2))
	return s, nil
}

func (s *asavieSocket) close() {
	if s.xsk != nil {
		afxdp.UnmapForeign(s.xsk.FD()) // its Close leaves them mapped, the queue bound
		s.xsk.Close()
	}
	if s.prog != nil {
		s.prog.Close()
	}
}

// send transmits frame from a free UMEM frame, taking back the frames
// the kernel completed first; it reports whether one was free.
func (s *asavieSocket) send(frame []byte) bool {
	if n := s.xsk.NumCompleted(); n > 0 {
		s.xsk.Complete(n)
	}
	descs := s.xsk.GetDescs(1)
	if len(descs) == 0 {
		return false
	}
	d := descs[0]
	d.Len = uint32(copy(s.xsk.GetFrame(d), frame))
	return s.xsk.Transmit([]xdp.Desc{d}) == 1
}

// asaviePing is RawPing with asavie/xdp's socket at a in place of afxdp's;
// b echoes with afxdp.
func asaviePing(a, b datapath.Place, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	sa, err := openAsavie(a, cfg.Mode)
	if err != nil {
		return nil, err
	}
	defer sa.close()
	eb, err := datapath.Open(b, cfg.Mode, 0)
	if err != nil {
		return nil, fmt.Errorf("raw endpoint B: %w", err)
	}
	defer eb.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var echoErr error
	wg.Go(func() { echoErr = eb.Echo(&stop) })
	r, err := asaviePingLoop(sa, a, b, cfg)
	stop.Store(true)
	wg.Wait()
	return r, errors.Join(err, echoErr)
}

// asaviePingLoop is RawPingFrom's loop on asavie's socket.
func asaviePingLoop(s *asavieSocket, a, b datapath.Place, cfg PingConfig) (*PingResult, error) {
	frame, err := rawFrame(b.MAC, a.MAC, cfg.Size)
	if err != nil {
		return nil, err
	}
	send := func() error {
		if !s.send(frame) {
			return errors.New("asavie/xdp: no free frame to send")
		}
		return nil
	}
	answered := func(seq uint64) (bool, error) {
		n := s.xsk.NumReceived()
		if n == 0 {
			return false, nil
		}
		descs := s.xsk.Receive(n)
		got := false
		for _, d := range descs {
			got = got || isAnswer(s.xsk.GetFrame(d), seq)
		}
		s.xsk.Fill(descs)
		return got, nil
	}
	return pingFrames(cfg, "asavie/xdp", frame, 1024, send, answered)
}

// asavieFrameRate is rawFrameRate with asavie/xdp's socket sending at a
// (one Transmit, one sendto, per batch); b counts with afxdp.
func asavieFrameRate(a, b datapath.Place, n, batch int, mode loader.Mode) (*rateResult, error) {
	sa, err := openAsavie(a, mode)
	if err != nil {
		return nil, err
	}
	defer sa.close()
	eb, err := datapath.Open(b, mode, 0)
	if err != nil {
		return nil, err
	}
	defer eb.Close()
	frame, err := rawFrame(b.MAC, a.MAC, 16)
	if err != nil {
		return nil, err
	}
	wait := countFrames(eb)
	start := time.Now()
	for sent := 0; sent < n; {
		if c := sa.xsk.NumCompleted(); c > 0 {
			sa.xsk.Complete(c)
		}
		descs := sa.xsk.GetDescs(min(batch, n-sent, sa.xsk.NumFreeTxSlots()))
		for i := range descs {
			descs[i].Len = uint32(copy(sa.xsk.GetFrame(descs[i]), frame))
		}
		sent += sa.xsk.Transmit(descs)
	}
	got, elapsed, err := wait(n, start)
	if err != nil {
		return nil, err
	}
	return &rateResult{API: "raw frames, asavie/xdp", Messages: got, Seconds: elapsed.Seconds(),
		PerSec: float64(got) / elapsed.Seconds(), Frames: uint64(n)}, nil
}
