package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
)

// PingConfig describes a ping-pong run.
type PingConfig struct {
	Count   int           // measured round trips; default 10000
	Warmup  int           // unmeasured round trips before them; 0: min(Count/10, 1000), unless NoWarmup
	Size    int           // message bytes (see each API); default 32
	Timeout time.Duration // a round trip not answered within it is lost; default 1 s
	Mode    loader.Mode   // XDP attach mode for the raw API; default as the doctor recommends
	Queue   int           // device queue of the AF_XDP sockets
	// NoWarmup measures from the first round trip (Warmup 0).
	NoWarmup bool
	// Timestamps (raw API) reads the receive metadata of every answer:
	// the pinging host's data path is opened with the device-bound
	// program that puts the NIC's receive stamp there
	// (loader.Config.RxMetadata), in native mode.
	Timestamps bool
	// Key, where the API has it (AM-II inline), authenticates the
	// messages (nicfw.VNet.Key).
	Key []byte
	// Stop, when set (by a signal handler, say), ends the run before its
	// next round trip: the result holds what was measured so far and is
	// marked Interrupted.
	Stop *atomic.Bool
	// Progress, when set, is called about once a second of round trips
	// with how far the run has come.
	Progress func(p Progress)
}

// Progress is how far a run has come.
type Progress struct {
	Made    int           // round trips made, warm-up included
	Total   int           // Warmup + Count
	Lost    int           // measured round trips lost
	Elapsed time.Duration // the round trips' time, summed
}

// stopped reports whether the run is to stop.
func (c *PingConfig) stopped() bool { return c.Stop != nil && c.Stop.Load() }

func (c *PingConfig) fill() error {
	if c.Count == 0 {
		c.Count = 10000
	}
	if c.Count < 0 || c.Warmup < 0 {
		return fmt.Errorf("count %d and warmup %d must not be negative", c.Count, c.Warmup)
	}
	if c.Warmup == 0 && !c.NoWarmup {
		c.Warmup = min(c.Count/10, 1000)
	}
	if c.Size == 0 {
		c.Size = 32
	}
	if c.Timeout == 0 {
		c.Timeout = time.Second
	}
	return nil
}

// RTT holds round-trip statistics in nanoseconds.
type RTT struct {
	P50  int64 `json:"p50"`
	P90  int64 `json:"p90"`
	P99  int64 `json:"p99"`
	P999 int64 `json:"p999"`
	Mean int64 `json:"mean"`
	Max  int64 `json:"max"`
}

// PingResult is the outcome of a ping-pong run (the JSON of `xam ping`).
// Count measured round trips follow Warmup unmeasured ones; Done of them
// were made (Count, unless the run was interrupted), Lost of those went
// unanswered within the timeout (Loss is the fraction), and RTT sums up
// the answered ones (all zero when none was).
type PingResult struct {
	API        string `json:"api"`
	Count      int    `json:"count"`
	Warmup     int    `json:"warmup"`
	Size       int    `json:"size"`
	FrameBytes int    `json:"frame_bytes,omitempty"`
	// RxStamps is what the answers' receive metadata said
	// (PingConfig.Timestamps).
	RxStamps *RxStamps `json:"rx_stamps,omitempty"`
	// TxStamps is what the requests' transmit stamps said (AF_XDP TX
	// metadata, with --timestamps).
	TxStamps    *TxStamps `json:"tx_stamps,omitempty"`
	Done        int       `json:"done"`
	Lost        int       `json:"lost"`
	Loss        float64   `json:"loss"`
	Interrupted bool      `json:"interrupted,omitempty"`
	RTT         RTT       `json:"rtt_ns"`
	Config      RunConfig `json:"config"`
	hist        *hdrhistogram.Histogram
	progress    func(Progress)
	made        int           // round trips made, warm-up included
	elapsed     time.Duration // their time, summed
	reported    time.Duration // elapsed at the last progress report
}

// RunConfig is the configuration a ping ran with, as its JSON records it.
// The bench functions fill what PingConfig holds; the command adds how the
// run was set up.
type RunConfig struct {
	TimeoutNS    int64   `json:"timeout_ns"`
	XDPMode      string  `json:"xdp_mode"`
	Queue        int     `json:"queue"`
	Device       string  `json:"device,omitempty"`        // a device given (--dev); empty: a lab built for the run
	Peer         string  `json:"peer,omitempty"`          // the peer's MAC with --dev
	InjectedLoss float64 `json:"injected_loss,omitempty"` // the fraction the XDP programs dropped (--loss)
	InjectedDup  float64 `json:"injected_dup,omitempty"`  // the fraction the switch delivered twice (--dup)
	EngineMode   string  `json:"engine_mode,omitempty"`   // AM-II: inline or firmware
	FWSleepNS    int64   `json:"fw_sleep_ns,omitempty"`   // firmware mode: the engines' idle time before sleeping (0: busy-poll)
	FWLayout     string  `json:"fw_layout,omitempty"`     // firmware mode: where the engines ran (FirmwareShape: daemons, group, threads)
	MTU          int     `json:"mtu,omitempty"`           // the device's (or the lab's) MTU
	MultiBuffer  bool    `json:"multi_buffer"`            // frames span several UMEM chunks (datapath.MultiBuffer)
	Encap        string  `json:"encap,omitempty"`         // the frames' form: raw, udp:PORT or udp6:PORT (datapath.Encap)
	Routed       bool    `json:"routed,omitempty"`        // the lab's hosts were on two subnets joined by a router
	// The AF_XDP mode of the run's sockets and the --zerocopy it ran with
	// (datapath.XSKInUse).
	datapath.XSKUse
}

// newResult starts the result of a run of api with size-byte messages.
func (c *PingConfig) newResult(api string, size int) *PingResult {
	return &PingResult{API: api, Count: c.Count, Warmup: c.Warmup, Size: size, hist: newHistogram(), progress: c.Progress,
		Config: RunConfig{TimeoutNS: int64(c.Timeout), XDPMode: c.Mode.String(), Queue: c.Queue}}
}

// stop reports whether the run is to stop before its next round trip, and
// marks the result interrupted if so.
func (r *PingResult) stop(c *PingConfig) bool {
	if c.stopped() {
		r.Interrupted = true
	}
	return r.Interrupted
}

// await runs poll until done holds (the round trip that began at start
// is answered), calling wait between polls if set (a blocking wait; nil:
// spin). It stops early when the run is stopped (r.Interrupted), and
// fails once the round trip has taken longer than limit.
func (r *PingResult) await(cfg *PingConfig, start time.Time, limit time.Duration, poll, wait func() error, done func() bool, what func() string) error {
	for spins := 0; !done(); spins++ {
		if err := poll(); err != nil {
			return err
		}
		if done() {
			return nil
		}
		if wait != nil {
			if err := wait(); err != nil {
				return err
			}
		} else if spins&1023 != 1023 {
			continue // spinning: look at the time now and then only
		}
		if r.stop(cfg) {
			return nil
		}
		if time.Since(start) > limit {
			return fmt.Errorf("%s after %v", what(), time.Since(start))
		}
	}
	return nil
}

// AllLost reports whether round trips were made and none was answered.
func (r *PingResult) AllLost() bool { return r.Done > 0 && r.Lost == r.Done }

// Histogram returns the recorded round trips (nanoseconds).
func (r *PingResult) Histogram() *hdrhistogram.Histogram { return r.hist }

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute), 3)
}

// record accounts for one round trip: measured or warm-up, answered or
// lost.
func (r *PingResult) record(measured, answered bool, rtt time.Duration) {
	if measured {
		r.Done++
	}
	if r.progress != nil {
		// The round trips' own times, summed, stand for the wall clock:
		// no clock read is added to the measured loop.
		r.made++
		r.elapsed += rtt
		if r.elapsed-r.reported >= time.Second {
			r.reported = r.elapsed
			r.progress(Progress{Made: r.made, Total: r.Warmup + r.Count, Lost: r.Lost, Elapsed: r.elapsed})
		}
	}
	switch {
	case !measured:
	case !answered:
		r.Lost++
	default:
		r.hist.RecordValue(int64(rtt))
	}
}

func (r *PingResult) finish() {
	h := r.hist
	r.RTT = RTT{
		P50: h.ValueAtQuantile(50), P90: h.ValueAtQuantile(90), P99: h.ValueAtQuantile(99),
		P999: h.ValueAtQuantile(99.9), Mean: int64(h.Mean()), Max: h.Max(),
	}
	if r.Done > 0 {
		r.Loss = float64(r.Lost) / float64(r.Done)
	}
}

// RawVCI is the circuit of raw frames (VPI 0): cells of no protocol, which
// the raw pings and frame rates send, on a VCI of their own so that a
// capture tells them from SSAM's and the transport's (32, and 33 for its
// compact cells); the Wireshark dissector names them by it.
const RawVCI = 40

// rawFrame builds a valid xam frame from src to dst carrying size bytes in
// the payloads of max(1, ceil(size/48)) cells on VC 0/RawVCI; the first
// eight payload bytes carry the sequence number.
func rawFrame(dst, src net.HardwareAddr, size int) ([]byte, error) {
	n := max(1, (size+cells.PayloadSize-1)/cells.PayloadSize)
	cs := make([]byte, n*cells.CellSize)
	for i := range n {
		c := cells.Cell(cs[i*cells.CellSize : (i+1)*cells.CellSize])
		pti := uint8(0)
		if i == n-1 {
			pti = cells.PTIEndOfMessage
		}
		if err := c.Encode(cells.UNI, cells.Fields{VCI: RawVCI, PTI: pti}); err != nil {
			return nil, err
		}
	}
	// The framer's MTU only bounds the cells: the link checks the frame.
	f := cells.Framer{Dst: dst, Src: src, MTU: cells.FrameLen(n) - cells.EthernetHeaderSize}
	return f.Append(nil, cs)
}

// seqOffset is where the sequence number sits: the first cell's payload.
const seqOffset = cells.EthernetHeaderSize + cells.FrameHeaderSize + cells.HeaderSize

// RawPingFrom runs the ping-pong from e to the endpoint with MAC peer,
// which must echo (datapath.Endpoint.Echo).
func RawPingFrom(e *datapath.Endpoint, peer net.HardwareAddr, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	frame, err := rawFrame(peer, e.MAC, cfg.Size)
	if err != nil {
		return nil, err
	}
	l := e.Link()
	if len(frame) > cells.EthernetHeaderSize+l.MTU() {
		return nil, fmt.Errorf("a %d-byte message needs a %d-byte frame; the link's MTU is %d", cfg.Size, len(frame), l.MTU())
	}
	out := [][]byte{frame}
	bufs := make([][]byte, l.BatchSize())
	note, stamps, finish := stampsOf(e)
	tx := txStampsOf(e)
	send := func() error {
		tx.sending()
		_, err := l.Send(out)
		return err
	}
	answered := func(seq uint64) (bool, error) {
		n, err := l.Recv(bufs)
		if err != nil {
			return false, err
		}
		for _, f := range bufs[:n] {
			if isAnswer(f, seq) {
				tx.answered(note(f))
				return true, nil
			}
		}
		return false, nil
	}
	r, err := pingFrames(cfg, "raw", frame, 1024, send, answered)
	if r != nil {
		finish()
		r.RxStamps = stamps
		r.TxStamps = tx.finish()
	}
	return r, err
}

// TxStamps counts the transmit stamps of a ping's requests (AF_XDP TX
// metadata) and splits the round trip where it can.
type TxStamps struct {
	Requests int `json:"requests"` // requests answered
	Stamped  int `json:"stamped"`  // of them, with a transmit stamp
	// AppToTxNs is the median of the stamp less CLOCK_TAI when the
	// application sent: in copy mode, where the kernel stamps on its clock
	// as the frame's buffer is released, the send path's time.
	AppToTxNs int64 `json:"app_to_tx_p50_ns,omitempty"`
	// NICToNICNs is the median of the answer's receive stamp less the
	// request's transmit stamp, where the NIC stamped both (one clock):
	// the wire and the peer. HostNs is the round trip's median less it:
	// this host's send and receive paths.
	NICToNICNs int64 `json:"nic_to_nic_p50_ns,omitempty"`
	HostNs     int64 `json:"host_p50_ns,omitempty"`
}

// txStamper notes the transmit stamp of each answered request.
type txStamper struct {
	s                 *afxdp.Socket
	st                TxStamps
	sentAt, stamped   uint64
	appToTx, nicToNIC []int64
	rtts              []int64
	sentWall          time.Time
}

// txStampsOf returns the stamper of e's requests; nil (which does nothing)
// if e's socket takes no TX metadata.
func txStampsOf(e *datapath.Endpoint) *txStamper {
	if e.Sock == nil || !e.Sock.Info().TxMetadata {
		return nil
	}
	return &txStamper{s: e.Sock}
}

func (t *txStamper) sending() {
	if t != nil {
		t.sentAt, t.sentWall = afxdp.TAINow(), time.Now()
	}
}

// answered notes the stamp of the request just answered, whose answer's
// receive stamp (the NIC's, 0 if none) is rx.
func (t *txStamper) answered(rx uint64) {
	if t == nil {
		return
	}
	rtt := time.Since(t.sentWall).Nanoseconds()
	t.st.Requests++
	ns, n := t.s.TxStamp()
	if n == t.stamped {
		return // no new stamp: the request's completion did not carry one
	}
	t.stamped = n
	t.st.Stamped++
	if ns >= t.sentAt {
		t.appToTx = append(t.appToTx, int64(ns-t.sentAt))
	}
	if rx > ns {
		t.nicToNIC = append(t.nicToNIC, int64(rx-ns))
		t.rtts = append(t.rtts, rtt)
	}
}

func (t *txStamper) finish() *TxStamps {
	if t == nil {
		return nil
	}
	median := func(v []int64) int64 {
		if len(v) == 0 {
			return 0
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	t.st.AppToTxNs = median(t.appToTx)
	if len(t.nicToNIC) > 0 {
		t.st.NICToNICNs = median(t.nicToNIC)
		t.st.HostNs = median(t.rtts) - t.st.NICToNICNs
	}
	return &t.st
}

// RxStamps counts the receive metadata of a ping's answers.
type RxStamps struct {
	Answers  int `json:"answers"`   // answers received
	WithMeta int `json:"with_meta"` // of them, with xam's receive metadata in front
	Stamped  int `json:"stamped"`   // of them, stamped by the NIC
	Hashed   int `json:"hashed"`    // of them, with the NIC's RSS hash (the metadata kfunc's; a veth hashes in software)
	// NICToAppNs is the median, over the stamped answers, of the system
	// clock when the application took the answer less the NIC's stamp:
	// the receive path's time if the NIC's clock follows the system's
	// (phc2sys), an offset between the clocks otherwise.
	NICToAppNs int64 `json:"nic_to_app_p50_ns,omitempty"`
}

// stampsOf returns a function that notes the receive metadata of an
// answer f that e received, and the RxStamps it fills (nil if e's program
// puts none there).
func stampsOf(e *datapath.Endpoint) (func(f []byte) uint64, *RxStamps, func()) {
	if e.Prog == nil || !e.Prog.Config().RxMetadata {
		return func([]byte) uint64 { return 0 }, nil, func() {}
	}
	st := &RxStamps{}
	var deltas []int64
	note := func(f []byte) uint64 {
		now := time.Now().UnixNano()
		st.Answers++
		m, ok := loader.ParseRxMeta(e.Sock.Metadata(f, loader.RxMetaLen))
		if !ok {
			return 0
		}
		st.WithMeta++
		if m.Hashed {
			st.Hashed++
		}
		if !m.Stamped {
			return 0
		}
		st.Stamped++
		deltas = append(deltas, now-int64(m.Timestamp))
		return m.Timestamp
	}
	finish := func() {
		if len(deltas) > 0 {
			slices.Sort(deltas)
			st.NICToAppNs = deltas[len(deltas)/2]
		}
	}
	return note, st, finish
}

// isAnswer reports whether frame f carries sequence number seq.
func isAnswer(f []byte, seq uint64) bool {
	return len(f) >= seqOffset+8 && binary.BigEndian.Uint64(f[seqOffset:]) == seq
}

// pingFrames runs the ping-pong of frame, its sequence number written at
// seqOffset each round, for the raw paths: send sends it, answered looks
// once for the answer to seq. A round trip not answered within
// cfg.Timeout is lost; the clock and the stop flag are looked at every
// check calls of answered (1 for a receive that blocks, more for one that
// spins, so that looking costs the spin nothing).
func pingFrames(cfg PingConfig, api string, frame []byte, check int, send func() error, answered func(seq uint64) (bool, error)) (*PingResult, error) {
	r := cfg.newResult(api, cfg.Size)
	r.FrameBytes = len(frame)
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		seq := uint64(i)
		binary.BigEndian.PutUint64(frame[seqOffset:], seq)
		start := time.Now()
		if err := send(); err != nil {
			return nil, err
		}
		got := false
		for spins := 1; !got; spins++ {
			var err error
			if got, err = answered(seq); err != nil {
				return nil, err
			}
			if !got && spins%check == 0 && (time.Since(start) > cfg.Timeout || r.stop(&cfg)) {
				break
			}
		}
		if r.Interrupted {
			break // the round trip in progress is not counted
		}
		r.record(i >= cfg.Warmup, got, time.Since(start))
	}
	r.finish()
	return r, nil
}

// RawPing runs the raw AF_XDP ping-pong between two places (two lab
// hosts): b echoes, a pings.
func RawPing(a, b datapath.Place, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	mode, acfg := cfg.Mode, loader.Config{DstMAC: a.MAC}
	if cfg.Timestamps {
		// The metadata program is bound to its device, in native mode.
		mode, acfg.RxMetadata, acfg.Ifindex = loader.ModeNative, true, a.Ifindex
	}
	ea, err := datapath.OpenConfig(a, mode, cfg.Queue, acfg)
	if err != nil {
		return nil, fmt.Errorf("raw endpoint A: %w", err)
	}
	defer ea.Close()
	eb, err := datapath.Open(b, mode, cfg.Queue)
	if err != nil {
		return nil, fmt.Errorf("raw endpoint B: %w", err)
	}
	defer eb.Close()
	peer, err := ea.Peer(b)
	if err != nil {
		return nil, fmt.Errorf("raw endpoint A: %w", err)
	}
	if _, err := eb.Peer(a); err != nil { // B's answers go to A
		return nil, fmt.Errorf("raw endpoint B: %w", err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var echoErr error
	wg.Go(func() { echoErr = eb.Echo(&stop) })
	r, err := RawPingFrom(ea, peer, cfg)
	stop.Store(true)
	wg.Wait()
	return r, errors.Join(err, echoErr)
}
