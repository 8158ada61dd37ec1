package bench

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// rateResult is a one-way message or frame rate.
type rateResult struct {
	API      string  `json:"api"`
	Messages int     `json:"messages"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"per_second"`
	Frames   uint64  `json:"frames,omitempty"` // frames the sender sent
}

// rawFrameRate sends n minimal xam frames (one cell each) from a to b in
// batches through AF_XDP and counts them at b: the raw frame rate the
// short-message rate is compared with.
func rawFrameRate(a, b datapath.Place, n, batch int, mode loader.Mode) (*rateResult, error) {
	return rawStream(a, b, n, batch, 16, mode)
}

// rawBulk sends total bytes from a to b in xam frames as full as a's MTU
// allows, in batches through AF_XDP, and counts the cells' payload bytes
// arriving at b: what the data path carries with no protocol on it, the
// ceiling of the bulk goodputs.
func rawBulk(a, b datapath.Place, total int64, mode loader.Mode) (*BulkResult, error) {
	var mtu int
	if err := a.Do(func() error {
		ifi, err := net.InterfaceByIndex(a.Ifindex) // in a's namespace
		if err == nil {
			mtu = ifi.MTU
		}
		return err
	}); err != nil {
		return nil, err
	}
	if a.Encap.UDP {
		ip, err := a.IP()
		if err != nil {
			return nil, err
		}
		mtu -= cells.UDPOverhead(ip)
	}
	per := (mtu - cells.FrameHeaderSize) / cells.CellSize * cells.PayloadSize
	n := int((total + int64(per) - 1) / int64(per))
	r, err := rawStream(a, b, n, 32, per, mode)
	if err != nil {
		return nil, err
	}
	bytes := int64(r.Messages) * int64(per)
	return &BulkResult{API: "raw frames", Bytes: bytes, Message: per, Seconds: r.Seconds,
		MBPerSec: float64(bytes) / r.Seconds / 1e6}, nil
}

// rawStream sends n xam frames of size bytes of cell payload from a to b
// in batches and counts those that arrive.
func rawStream(a, b datapath.Place, n, batch, size int, mode loader.Mode) (*rateResult, error) {
	ea, err := datapath.Open(a, mode, 0)
	if err != nil {
		return nil, err
	}
	defer ea.Close()
	eb, err := datapath.Open(b, mode, 0)
	if err != nil {
		return nil, err
	}
	defer eb.Close()
	peer, err := ea.Peer(b)
	if err != nil {
		return nil, err
	}
	frame, err := rawFrame(peer, ea.MAC, size)
	if err != nil {
		return nil, err
	}
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = frame
	}
	wait := countFrames(eb)
	start := time.Now()
	for sent := 0; sent < n; sent += batch {
		if _, err := ea.Link().Send(frames[:min(batch, n-sent)]); err != nil {
			wait(0, start)
			return nil, err
		}
	}
	got, elapsed, err := wait(n, start)
	if err != nil {
		return nil, err
	}
	return &rateResult{API: "raw frames", Messages: got, Seconds: elapsed.Seconds(),
		PerSec: float64(got) / elapsed.Seconds(), Frames: uint64(n)}, nil
}

// countFrames counts the frames e receives, in a goroutine of its own,
// until the returned wait is called. wait waits for n of them, or for a
// quiet 100 ms (frames the receiver's full ring dropped never come), and
// returns how many came and how long after start the last did.
func countFrames(e *datapath.Endpoint) (wait func(n int, start time.Time) (int, time.Duration, error)) {
	var got atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var rxErr error
	wg.Go(func() {
		l := e.Link()
		bufs := make([][]byte, l.BatchSize())
		for !stop.Load() {
			k, err := l.Recv(bufs)
			if err != nil {
				rxErr = err
				return
			}
			got.Add(int64(k))
		}
	})
	return func(n int, start time.Time) (int, time.Duration, error) {
		last, lastChange := got.Load(), time.Now()
		for got.Load() < int64(n) && time.Since(lastChange) < 100*time.Millisecond {
			if g := got.Load(); g != last {
				last, lastChange = g, time.Now()
			}
		}
		elapsed := time.Since(start)
		if got.Load() < int64(n) {
			elapsed = lastChange.Sub(start)
		}
		stop.Store(true)
		wg.Wait()
		return int(got.Load()), elapsed, rxErr
	}
}

// ssamRate sends n single-cell requests of size bytes (at most 40) from a
// to b, whose handler takes them without replying (each is acknowledged
// explicitly), and returns the message rate: reliable, in order, exactly
// once. cfg.Batch packs messages into frames.
func ssamRate(a, b datapath.Place, n, size int, mode loader.Mode, cfg ssam.Config) (*rateResult, error) {
	if size > ssam.MaxShort {
		return nil, fmt.Errorf("%d-byte messages are not single-cell", size)
	}
	ea, err := OpenSSAM(a, b.MAC, mode, cfg)
	if err != nil {
		return nil, err
	}
	defer ea.Close()
	eb, err := OpenSSAM(b, a.MAC, mode, cfg)
	if err != nil {
		return nil, err
	}
	defer eb.Close()
	var delivered atomic.Int64
	sink := eb.AM.Register(func(*ssam.Token, []byte) { delivered.Add(1) })
	msg := make([]byte, size)
	elapsed, err := stream(n, &delivered,
		func() error { return ea.AM.Request(0, sink, msg) },
		func() error { return ea.AM.Drain(30 * time.Second) },
		func() error { _, err := eb.AM.Poll(); return err },
		eb.AM.Flush)
	if err != nil {
		return nil, err
	}
	api := "ssam"
	if ea.AM.Config().Batch > 1 {
		api = fmt.Sprintf("ssam batch %d", ea.AM.Config().Batch)
	}
	return &rateResult{API: api, Messages: n, Seconds: elapsed.Seconds(), PerSec: float64(n) / elapsed.Seconds(),
		Frames: ea.AM.Device().Stats().FramesSent}, nil
}

// amiiPlainRate streams n short requests of nargs arguments from an AM-II
// endpoint at a to one at b, in inline mode on an engine per host, with
// window requests outstanding (the endpoint's credits and its engine's
// window); b's handler takes them without replying (each gets the
// implicit reply that gives the credit back). With coalesce the client's
// requests only queue until it polls or runs out of credits
// (amii.Config.Coalesce): an engine run then sends them all, packed into
// frames. It returns the message rate and the frames a's engine sent.
func amiiPlainRate(a, b datapath.Place, n, nargs, window int, coalesce bool, mode loader.Mode) (*rateResult, error) {
	return amiiRate(a, b, n, nargs, window, coalesce, mode, amiiKeys{})
}

// amiiRate is amiiPlainRate with keys: the messages authenticated with the
// virtual network's if it is set, the frames with the transport's.
func amiiRate(a, b datapath.Place, n, nargs, window int, coalesce bool, mode loader.Mode, keys amiiKeys) (*rateResult, error) {
	if nargs > amii.MaxArgs {
		return nil, fmt.Errorf("an AM-II short message carries at most %d arguments", amii.MaxArgs)
	}
	entries := max(window, endpoint.DefaultQueueEntries) // room for the window in every queue
	ha, hb, err := openAMIIPair(a, b, mode, 0, window, amii.Config{Credits: window, Coalesce: coalesce, QueueEntries: entries}, amii.Config{Credits: window, QueueEntries: entries}, keys)
	if err != nil {
		return nil, err
	}
	defer ha.close()
	defer hb.close()
	var delivered atomic.Int64
	if err := hb.am.Handle(1, func(*amii.Token, []uint64) { delivered.Add(1) }); err != nil {
		return nil, err
	}
	args := make([]uint64, nargs)
	elapsed, err := stream(n, &delivered,
		func() error { return ha.am.Request(0, 1, args...) },
		func() error { return ha.am.Drain(30 * time.Second) },
		func() error { _, err := hb.am.Poll(); return err },
		nil)
	if err != nil {
		return nil, err
	}
	api := fmt.Sprintf("amii window %d", window)
	if coalesce {
		api += " coalesced"
	}
	return &rateResult{API: api, Messages: n, Seconds: elapsed.Seconds(), PerSec: float64(n) / elapsed.Seconds(),
		Frames: ha.eng.TransportStats().BatchFrames}, nil
}

// stream sends n messages with send and waits for their answers with
// drain, while a goroutine of its own runs serve (the receiver's poll)
// until the stream is over, then finish if set. It returns the stream's
// time, and an error unless delivered (counted by the receiver's handler)
// reached n.
func stream(n int, delivered *atomic.Int64, send, drain, serve, finish func() error) (time.Duration, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var rxErr error
	wg.Go(func() {
		for !stop.Load() {
			if rxErr = serve(); rxErr != nil {
				return
			}
		}
		if finish != nil {
			rxErr = finish()
		}
	})
	start := time.Now()
	var err error
	for i := 0; i < n && err == nil; i++ {
		err = send()
	}
	if err == nil {
		err = drain()
	}
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(err, rxErr); err != nil {
		return 0, err
	}
	if d := delivered.Load(); d != int64(n) {
		return 0, fmt.Errorf("%d of %d messages delivered", d, n)
	}
	return elapsed, nil
}

// bulkMTU is the MTU of the links that the bulk benchmarks run on, kernel
// TCP's included: the largest whose frames an AF_XDP socket with 4 KB UMEM
// chunks receives whole (veth carries any MTU; OpenRaw picks 4 KB chunks
// for an MTU above what 2 KB chunks hold).
var bulkMTU = afxdp.MaxMTU(4096, 0)

// amiiBulk writes total bytes from an AM-II endpoint at a to one at b as
// Stores of msg bytes (at most the application's part of the staging
// area), in inline mode on an engine per host, with up to window Stores
// outstanding; b's handler counts the stored bytes. Each Store travels in
// chunks of the transport's largest payload, up to window of them in
// flight at once after the first.
func amiiBulk(a, b datapath.Place, total int64, msg, window int, mode loader.Mode) (*BulkResult, error) {
	// Room for window messages of msg bytes each, at both ends.
	acfg := amii.Config{Credits: window, StagingSize: 2 * window * msg, MediumSlots: -1}
	ha, hb, err := openAMIIPair(a, b, mode, 0, window, acfg, acfg, amiiKeys{})
	if err != nil {
		return nil, err
	}
	defer ha.close()
	defer hb.close()
	if msg < 1 || msg > len(ha.am.Staging())/window {
		return nil, fmt.Errorf("AM-II bulk message of %d bytes out of range [1, %d]", msg, len(ha.am.Staging())/window)
	}
	var received, delivered atomic.Int64
	if err := hb.am.HandleMedium(1, func(_ *amii.Token, _ []uint64, data []byte) {
		received.Add(int64(len(data)))
		delivered.Add(1)
	}); err != nil {
		return nil, err
	}
	n := int((total + int64(msg) - 1) / int64(msg))
	i := 0
	elapsed, err := stream(n, &delivered,
		func() error {
			slot := uint32(i%window) * uint32(msg)
			length := uint32(min(int64(msg), total-int64(i)*int64(msg)))
			i++
			return ha.am.Store(amii.Bulk{Dest: 0, Local: slot, Remote: slot, Length: length, Handler: 1})
		},
		func() error { return ha.am.Drain(30 * time.Second) },
		func() error { _, err := hb.am.Poll(); return err },
		nil)
	if err != nil {
		return nil, err
	}
	if got := received.Load(); got != total {
		return nil, fmt.Errorf("%d of %d bytes stored", got, total)
	}
	return &BulkResult{API: "amii", Bytes: total, Message: msg, Seconds: elapsed.Seconds(),
		MBPerSec: float64(total) / elapsed.Seconds() / 1e6}, nil
}

// amiiMedium streams n medium requests of size bytes from a to b with up
// to window outstanding (credits, medium slots, the engine's window); b's
// handler counts them without replying. It returns the message rate.
func amiiMedium(a, b datapath.Place, n, size, window int, mode loader.Mode) (*rateResult, error) {
	if size < 1 || size > endpoint.MaxMedium {
		return nil, fmt.Errorf("an AM-II medium message carries 1..%d bytes, not %d", endpoint.MaxMedium, size)
	}
	entries := max(window, endpoint.DefaultQueueEntries)
	acfg := amii.Config{Credits: window, QueueEntries: entries, MediumSlots: window, StagingSize: max(endpoint.DefaultStagingSize, 2*window*endpoint.MaxMedium)}
	ha, hb, err := openAMIIPair(a, b, mode, 0, window, acfg, acfg, amiiKeys{})
	if err != nil {
		return nil, err
	}
	defer ha.close()
	defer hb.close()
	var delivered atomic.Int64
	if err := hb.am.HandleMedium(1, func(_ *amii.Token, _ []uint64, data []byte) {
		if len(data) == size {
			delivered.Add(1)
		}
	}); err != nil {
		return nil, err
	}
	data := make([]byte, size)
	elapsed, err := stream(n, &delivered,
		func() error { return ha.am.RequestMedium(0, 1, data) },
		func() error { return ha.am.Drain(30 * time.Second) },
		func() error { _, err := hb.am.Poll(); return err },
		nil)
	if err != nil {
		return nil, err
	}
	return &rateResult{API: fmt.Sprintf("amii medium %d B, window %d", size, window), Messages: n, Seconds: elapsed.Seconds(),
		PerSec: float64(n) / elapsed.Seconds(), Frames: ha.eng.TransportStats().BatchFrames}, nil
}
