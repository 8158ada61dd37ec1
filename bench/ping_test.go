package bench

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"

	"github.com/xam-project/xam/internal/netnstest"
)

func places(p *netnstest.Pair) (a, b datapath.Place) {
	at := func(h *netnstest.Host) datapath.Place {
		return datapath.Place{Ifindex: h.Index, MAC: h.MAC, Addr: h.Addr.Addr(), Do: h.Do}
	}
	return at(p.A), at(p.B)
}

func checkResult(t *testing.T, r *PingResult, err error, count int) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if r.Lost != 0 || r.hist.TotalCount() != int64(count) {
		t.Fatalf("%s: %d lost, %d recorded of %d", r.API, r.Lost, r.hist.TotalCount(), count)
	}
	if !(0 < r.RTT.P50 && r.RTT.P50 <= r.RTT.P90 && r.RTT.P90 <= r.RTT.P99 && r.RTT.P99 <= r.RTT.P999 && r.RTT.P999 <= r.RTT.Max) {
		t.Fatalf("%s: percentiles out of order: %+v", r.API, r.RTT)
	}
	t.Logf("%s size %d: p50 %v p99 %v", r.API, r.Size, time.Duration(r.RTT.P50), time.Duration(r.RTT.P99))
}

func TestRawPing(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1), netnstest.WithMTU(3000))
	a, b := places(p)
	for _, size := range []int{0, 32, 48, 49, 1400, 2688} {
		r, err := RawPing(a, b, PingConfig{Count: 500, Size: size})
		checkResult(t, r, err, 500)
		if want := 18 + 53*max(1, (r.Size+47)/48); r.FrameBytes != want {
			t.Errorf("size %d: %d-byte frames, want %d", size, r.FrameBytes, want)
		}
	}
	// A message too big for the device is refused before anything is sent.
	if _, err := RawPing(a, b, PingConfig{Count: 1, Size: 4000}); err == nil {
		t.Error("a 4000-byte raw ping on an MTU-3000 link was not refused")
	}
}

// TestRawPingTimestamps: with Timestamps, the pinging host's device-bound
// program (native mode) puts xam's receive metadata in front of every
// answer, where the socket finds it; a veth gives the kfunc but never a
// hardware stamp, so none is stamped. Without Timestamps there is no
// metadata to count.
func TestRawPingTimestamps(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	const count = 300
	r, err := RawPing(a, b, PingConfig{Count: count, NoWarmup: true, Timestamps: true})
	checkResult(t, r, err, count)
	if st := r.RxStamps; st == nil || st.Answers != count || st.WithMeta != count || st.Stamped != 0 || st.NICToAppNs != 0 || st.Hashed != count {
		t.Errorf("receive stamps %+v, want %d answers, each with metadata and a hash, none stamped (veth)", st, count)
	}
	// Copy mode stamps every request on the kernel's clock; without a
	// receive stamp there is no split.
	if st := r.TxStamps; st == nil || st.Requests != count || st.Stamped != count || st.AppToTxNs <= 0 || st.AppToTxNs > r.RTT.Max || st.NICToNICNs != 0 {
		t.Errorf("transmit stamps %+v (round trip max %d ns), want each of %d requests stamped, none split", st, r.RTT.Max, count)
	}
	r, err = RawPing(a, b, PingConfig{Count: 10, NoWarmup: true})
	checkResult(t, r, err, 10)
	if r.RxStamps != nil || r.TxStamps != nil {
		t.Errorf("stamps without Timestamps: %+v %+v", r.RxStamps, r.TxStamps)
	}
}

func TestKernelPings(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	r, err := UDPPing(a, b, p.A.Addr.Addr(), p.B.Addr.Addr(), PingConfig{Count: 500, Size: 32})
	checkResult(t, r, err, 500)
	r, err = PacketPing(a, b, PingConfig{Count: 500, Size: 32})
	checkResult(t, r, err, 500)
}

// BenchmarkPingPong measures the round trip of a 32-byte message over raw
// AF_XDP (xam's XDP program and socket), SSAM (request/reply on the same
// data path), AM-II over the inline firmware engine, AF_PACKET and kernel UDP on the same veth pair, side by side;
// ns/op is the mean round trip.
func BenchmarkPingPong(b *testing.B) {
	p := netnstest.NewVethPair(b, netnstest.WithQueues(1))
	pa, pb := places(p)
	run := func(b *testing.B, ping func(PingConfig) (*PingResult, error)) {
		r, err := ping(PingConfig{Count: b.N, Size: 32})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(r.RTT.P50), "p50-ns")
		b.ReportMetric(float64(r.RTT.P99), "p99-ns")
		b.ReportMetric(float64(r.Lost), "lost")
	}
	b.Run("raw", func(b *testing.B) {
		run(b, func(c PingConfig) (*PingResult, error) { return RawPing(pa, pb, c) })
	})
	b.Run("ssam", func(b *testing.B) {
		run(b, func(c PingConfig) (*PingResult, error) {
			r, err := SSAMPing(pa, pb, c, 0, ssam.Config{})
			if err != nil {
				return nil, err
			}
			b.ReportMetric(float64(r.Retransmits), "retransmits")
			return &r.PingResult, nil
		})
	})
	b.Run("amii", func(b *testing.B) {
		run(b, func(c PingConfig) (*PingResult, error) {
			r, err := AMIIPing(pa, pb, c, 0)
			if err != nil {
				return nil, err
			}
			return &r.PingResult, nil
		})
	})
	b.Run("packet", func(b *testing.B) {
		run(b, func(c PingConfig) (*PingResult, error) { return PacketPing(pa, pb, c) })
	})
	b.Run("udp", func(b *testing.B) {
		run(b, func(c PingConfig) (*PingResult, error) { return UDPPing(pa, pb, p.A.Addr.Addr(), p.B.Addr.Addr(), c) })
	})
}

// BenchmarkPingCompare measures the round trip of a 32-byte message over
// raw AF_XDP, SSAM and AM-II (inline engines), and of GRIM's short
// message (four integers), on one veth pair in alternation (Compare, ten
// rounds), b.N round trips each: besides each path's p50, the ratios of
// SSAM's, AM-II's and GRIM's p50 to raw's, which hold still on a machine
// whose speed drifts.
func BenchmarkPingCompare(b *testing.B) {
	p := netnstest.NewVethPair(b, netnstest.WithQueues(1))
	pa, pb := places(p)
	c, err := comparePaths(PingConfig{Count: max(b.N, 10), Size: 32}, 10,
		pinger{"raw", func(c PingConfig) (*PingResult, error) { return RawPing(pa, pb, c) }},
		pinger{"ssam", func(c PingConfig) (*PingResult, error) {
			r, err := SSAMPing(pa, pb, c, 0, ssam.Config{})
			if err != nil {
				return nil, err
			}
			return &r.PingResult, nil
		}},
		pinger{"amii", func(c PingConfig) (*PingResult, error) {
			r, err := AMIIPing(pa, pb, c, 0)
			if err != nil {
				return nil, err
			}
			return &r.PingResult, nil
		}},
		pinger{"grim", func(c PingConfig) (*PingResult, error) {
			c.Size = 4 * grim.ShortArgs // a short message
			r, err := GRIMPing(pa, pb, c, 0, false, FirmwareLayout{})
			if err != nil {
				return nil, err
			}
			return &r.PingResult, nil
		}})
	reportCompared(b, c, err)
}

// reportCompared reports each path's p50 and, but for the first path's,
// its ratio to the first's; a lost round trip fails b.
func reportCompared(b *testing.B, c *comparison, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range c.Paths {
		if r.Lost != 0 {
			b.Fatalf("%s: %d round trips lost", r.Name, r.Lost)
		}
		b.ReportMetric(float64(r.RTT.P50), r.Name+"-p50-ns")
		if i > 0 {
			b.ReportMetric(r.Ratio, r.Name+"/"+c.Paths[0].Name)
		}
	}
}

// BenchmarkShortMessageRate compares, in one run on one veth pair, the
// raw AF_XDP frame rate (one-cell frames in batches of 64) with SSAM's
// reliable single-cell message rate, unbatched and batched (window 63,
// 28 cells per frame); the metric is per second at the receiver.
func BenchmarkShortMessageRate(b *testing.B) {
	p := netnstest.NewVethPair(b, netnstest.WithQueues(1))
	pa, pb := places(p)
	report := func(b *testing.B, r *rateResult, err error) {
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.PerSec/1e6, "M/s")
		b.ReportMetric(float64(r.Messages)/float64(max(r.Frames, 1)), "msgs/frame")
	}
	b.Run("raw-frames", func(b *testing.B) {
		r, err := rawFrameRate(pa, pb, b.N, 64, loader.ModeAuto)
		report(b, r, err)
	})
	b.Run("ssam", func(b *testing.B) {
		r, err := ssamRate(pa, pb, b.N, 16, loader.ModeAuto, ssam.Config{Window: 63})
		report(b, r, err)
	})
	b.Run("ssam-batched", func(b *testing.B) {
		r, err := ssamRate(pa, pb, b.N, 16, loader.ModeAuto, ssam.Config{Window: 63, Batch: 28})
		report(b, r, err)
	})
	// AM-II: one endpoint streaming requests of two arguments (16 bytes,
	// as SSAM's) with 8 outstanding, each sent by its own engine run, or
	// coalesced: the requests between two polls leave in one run, packed
	// into frames; and coalesced with 32 outstanding (on 32 channels).
	b.Run("amii", func(b *testing.B) {
		r, err := amiiPlainRate(pa, pb, b.N, 2, 8, false, loader.ModeAuto)
		report(b, r, err)
	})
	b.Run("amii-batched", func(b *testing.B) {
		r, err := amiiPlainRate(pa, pb, b.N, 2, 8, true, loader.ModeAuto)
		report(b, r, err)
	})
	b.Run("amii-batched-w32", func(b *testing.B) {
		r, err := amiiPlainRate(pa, pb, b.N, 2, 32, true, loader.ModeAuto)
		report(b, r, err)
	})
	b.Run("amii-batched-w128", func(b *testing.B) {
		r, err := amiiPlainRate(pa, pb, b.N, 2, 128, true, loader.ModeAuto)
		report(b, r, err)
	})
}

// BenchmarkRawProgram measures the raw ping-pong with xam's XDP program as
// xam runs it (frame check, destination-MAC filter, counters) and with the
// program reduced to the EtherType steering alone, interleaved twice, in
// one run: what the program's checks cost on the round trip.
func BenchmarkRawProgram(b *testing.B) {
	p := netnstest.NewVethPair(b, netnstest.WithQueues(1))
	pa, pb := places(p)
	full := func(p datapath.Place) loader.Config { return loader.Config{DstMAC: p.MAC} }
	bare := func(datapath.Place) loader.Config { return loader.Config{SkipFrameCheck: true} }
	for i, cfg := range []func(datapath.Place) loader.Config{full, bare, full, bare} {
		name := []string{"xam-program", "steering-only"}[i%2]
		b.Run(name, func(b *testing.B) {
			ea, err := datapath.OpenConfig(pa, loader.ModeAuto, 0, cfg(pa))
			if err != nil {
				b.Fatal(err)
			}
			defer ea.Close()
			eb, err := datapath.OpenConfig(pb, loader.ModeAuto, 0, cfg(pb))
			if err != nil {
				b.Fatal(err)
			}
			defer eb.Close()
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Go(func() { eb.Echo(&stop) })
			r, err := RawPingFrom(ea, pb.MAC, PingConfig{Count: b.N})
			stop.Store(true)
			wg.Wait()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(r.RTT.P50), "p50-ns")
			b.ReportMetric(float64(r.RTT.P99), "p99-ns")
		})
	}
}

// BenchmarkBulk compares, in one run on a veth pair of each MTU, what
// raw AF_XDP frames of that MTU carry and kernel TCP's stream goodput with
// SSAM's bulk writes (8 KB AAL5 messages) and AM-II's Stores of 64 KB; b.N
// bytes of each (-benchtime Nx), at least 8 MB. The MTUs: Ethernet's,
// bulkMTU (the largest one 4 KB chunk holds), a jumbo frame's and the
// largest a multi-buffer socket takes (frames of several chunks; Linux
// 6.6+), each beside kernel TCP at the same MTU.
func BenchmarkBulk(b *testing.B) {
	for _, mtu := range []int{1500, bulkMTU, 9000, afxdp.MaxMultiBufferMTU(4096)} {
		b.Run(fmt.Sprintf("mtu=%d", mtu), func(b *testing.B) { benchBulk(b, mtu) })
	}
}

func benchBulk(b *testing.B, mtu int) {
	p := netnstest.NewVethPair(b, netnstest.WithQueues(1), netnstest.WithMTU(mtu))
	pa, pb := places(p)
	run := func(name string, f func(total int64) (*BulkResult, error)) { runBulk(b, name, f) }
	run("raw", func(total int64) (*BulkResult, error) {
		return rawBulk(pa, pb, total, loader.ModeAuto)
	})
	run("tcp", func(total int64) (*BulkResult, error) {
		return tcpStream(pa, pb, p.A.Addr.Addr(), p.B.Addr.Addr(), total, 64<<10)
	})
	run("ssam-8k", func(total int64) (*BulkResult, error) {
		return SSAMBulk(pa, pb, total, 8192, loader.ModeAuto, ssam.Config{})
	})
	run("amii-store-64k", func(total int64) (*BulkResult, error) {
		return amiiBulk(pa, pb, total, 64<<10, 16, loader.ModeAuto)
	})
}

// BenchmarkEncap measures what xam's UDP form costs against raw Ethernet
// frames on the same veth pair, in one run: the round trip of raw frames
// and of AM-II (inline engines) in alternation (ratios to raw Ethernet
// frames), then bulk goodput of raw frames and of AM-II 64 KB Stores in
// each form, at MTU 1500 and 9000.
func BenchmarkEncap(b *testing.B) {
	udp := datapath.Encap{UDP: true}
	b.Run("ping", func(b *testing.B) {
		p := netnstest.NewVethPair(b, netnstest.WithQueues(1))
		pa, pb := places(p)
		ua, ub := pa, pb
		ua.Encap, ub.Encap = udp, udp
		amii := func(a, b datapath.Place) func(PingConfig) (*PingResult, error) {
			return func(c PingConfig) (*PingResult, error) {
				r, err := AMIIPing(a, b, c, 0)
				if err != nil {
					return nil, err
				}
				return &r.PingResult, nil
			}
		}
		c, err := comparePaths(PingConfig{Count: max(b.N, 10), Size: 32}, 10,
			pinger{"raw-eth", func(c PingConfig) (*PingResult, error) { return RawPing(pa, pb, c) }},
			pinger{"raw-udp", func(c PingConfig) (*PingResult, error) { return RawPing(ua, ub, c) }},
			pinger{"amii-eth", amii(pa, pb)},
			pinger{"amii-udp", amii(ua, ub)})
		reportCompared(b, c, err)
	})
	for _, mtu := range []int{1500, 9000} {
		b.Run(fmt.Sprintf("bulk/mtu=%d", mtu), func(b *testing.B) {
			p := netnstest.NewVethPair(b, netnstest.WithQueues(1), netnstest.WithMTU(mtu))
			pa, pb := places(p)
			ua, ub := pa, pb
			ua.Encap, ub.Encap = udp, udp
			run := func(name string, f func(total int64) (*BulkResult, error)) { runBulk(b, name, f) }
			for _, form := range []struct {
				name string
				a, b datapath.Place
			}{{"eth", pa, pb}, {"udp", ua, ub}} {
				run("raw-"+form.name, func(total int64) (*BulkResult, error) { return rawBulk(form.a, form.b, total, loader.ModeAuto) })
				run("amii-store-64k-"+form.name, func(total int64) (*BulkResult, error) {
					return amiiBulk(form.a, form.b, total, 64<<10, 16, loader.ModeAuto)
				})
			}
		})
	}
}

// runBulk runs the sub-benchmark name: f moves b.N bytes (at least 8 MB)
// and its goodput is reported in MB/s.
func runBulk(b *testing.B, name string, f func(total int64) (*BulkResult, error)) {
	b.Run(name, func(b *testing.B) {
		r, err := f(max(int64(b.N), 8<<20))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r.MBPerSec, "MB/s")
	})
}
