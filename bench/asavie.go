package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asavie/xdp"
	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
)

// The Go-library peer: github.com/asavie/xdp, the AF_XDP library a Go
// user would otherwise pick, which xam's own afxdp outgrew (batching,
// need_wakeup, lent frames, busy polling, statistics, shared UMEM). Its
// socket sends and receives the same frames as afxdp's in RawPing and
// RawFrameRate, behind xam's XDP program (the library's own program takes
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
		if s.xsk, err = xdp.NewSocket(p.Ifindex, 0, nil); err != nil {
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
		unmapRings(s.xsk.FD())
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

// AsaviePing is RawPing with asavie/xdp's socket at a in place of afxdp's;
// b echoes with afxdp.
func AsaviePing(a, b datapath.Place, cfg PingConfig) (*PingResult, error) {
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
	r := cfg.newResult("asavie/xdp", cfg.Size)
	r.FrameBytes = len(frame)
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		seq := uint64(i)
		binary.BigEndian.PutUint64(frame[seqOffset:], seq)
		start := time.Now()
		if !s.send(frame) {
			return nil, errors.New("asavie/xdp: no free frame to send")
		}
		got := false
		for spins := 0; !got; spins++ {
			if n := s.xsk.NumReceived(); n > 0 {
				descs := s.xsk.Receive(n)
				for _, d := range descs {
					if f := s.xsk.GetFrame(d); len(f) >= seqOffset+8 && binary.BigEndian.Uint64(f[seqOffset:]) == seq {
						got = true
					}
				}
				s.xsk.Fill(descs)
			}
			if !got && spins&1023 == 1023 && (time.Since(start) > cfg.Timeout || r.stop(&cfg)) {
				break
			}
		}
		if r.Interrupted {
			break
		}
		r.record(i >= cfg.Warmup, got, time.Since(start))
	}
	r.finish()
	return r, nil
}

// AsavieFrameRate is RawFrameRate with asavie/xdp's socket sending at a
// (one Transmit, one sendto, per batch); b counts with afxdp.
func AsavieFrameRate(a, b datapath.Place, n, batch int, mode loader.Mode) (*RateResult, error) {
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
	return &RateResult{API: "raw frames, asavie/xdp", Messages: got, Seconds: elapsed.Seconds(),
		PerSec: float64(got) / elapsed.Seconds(), Frames: uint64(n)}, nil
}

// unmapRings unmaps the mappings of socket fd (its four rings): asavie/xdp
// v0.3.3's Close closes the socket and forgets the rings without
// unmapping them, and a mapping holds the socket, which then stays bound
// to the device's queue (EBUSY for the next socket there) until the
// process exits.
func unmapRings(fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return
	}
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != strconv.FormatUint(st.Ino, 10) {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if ok && err1 == nil && err2 == nil {
			unix.Syscall(unix.SYS_MUNMAP, uintptr(start), uintptr(end-start), 0)
		}
	}
}
