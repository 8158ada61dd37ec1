package bench

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/ssam"
	"github.com/xam-project/xam/loader"
)

// RateResult is a one-way message or frame rate.
type RateResult struct {
	API      string  `json:"api"`
	Messages int     `json:"messages"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"per_second"`
	Frames   uint64  `json:"frames,omitempty"` // frames the sender sent
}

// RawFrameRate sends n minimal xam frames (one cell each) from a to b in
// batches through AF_XDP and counts them at b: the raw frame rate the
// short-message rate is compared with.
func RawFrameRate(a, b Place, n, batch int, mode loader.Mode) (*RateResult, error) {
	ea, err := OpenRaw(a, mode, 0)
	if err != nil {
		return nil, err
	}
	defer ea.Close()
	eb, err := OpenRaw(b, mode, 0)
	if err != nil {
		return nil, err
	}
	defer eb.Close()
	frame, err := rawFrame(b.MAC, a.MAC, 16)
	if err != nil {
		return nil, err
	}
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = frame
	}
	var got atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var rxErr error
	wg.Go(func() {
		bufs := make([][]byte, eb.Sock.BatchSize())
		for !stop.Load() {
			k, err := eb.Sock.Recv(bufs)
			if err != nil {
				rxErr = err
				return
			}
			got.Add(int64(k))
		}
	})
	start := time.Now()
	for sent := 0; sent < n; sent += batch {
		if _, err := ea.Sock.Send(frames[:min(batch, n-sent)]); err != nil {
			stop.Store(true)
			wg.Wait()
			return nil, err
		}
	}
	// Wait for the last frames (those the receiver's ring dropped never
	// come: give up after a quiet 100 ms).
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
	if rxErr != nil {
		return nil, rxErr
	}
	return &RateResult{API: "raw frames", Messages: int(got.Load()), Seconds: elapsed.Seconds(),
		PerSec: float64(got.Load()) / elapsed.Seconds(), Frames: uint64(n)}, nil
}

// SSAMRate sends n single-cell requests of size bytes (at most 40) from a
// to b, whose handler takes them without replying (each is acknowledged
// explicitly), and returns the message rate: reliable, in order, exactly
// once. cfg.Batch packs messages into frames.
func SSAMRate(a, b Place, n, size int, mode loader.Mode, cfg ssam.Config) (*RateResult, error) {
	if size > ssam.MaxShort {
		return nil, fmt.Errorf("bench: %d-byte messages are not single-cell", size)
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
	var stop atomic.Bool
	var wg sync.WaitGroup
	var rxErr error
	wg.Go(func() {
		for !stop.Load() {
			if _, err := eb.AM.Poll(); err != nil {
				rxErr = err
				return
			}
		}
		rxErr = eb.AM.Flush()
	})
	msg := make([]byte, size)
	start := time.Now()
	var runErr error
	for i := 0; i < n && runErr == nil; i++ {
		runErr = ea.AM.Request(0, sink, msg)
	}
	if runErr == nil {
		runErr = ea.AM.Drain(30 * time.Second)
	}
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err := errors.Join(runErr, rxErr); err != nil {
		return nil, err
	}
	if d := delivered.Load(); d != int64(n) {
		return nil, fmt.Errorf("bench: %d of %d messages delivered", d, n)
	}
	api := "ssam"
	if ea.AM.Config().Batch > 1 {
		api = fmt.Sprintf("ssam batch %d", ea.AM.Config().Batch)
	}
	return &RateResult{API: api, Messages: n, Seconds: elapsed.Seconds(), PerSec: float64(n) / elapsed.Seconds(),
		Frames: ea.Dev.Stats().FramesSent}, nil
}
