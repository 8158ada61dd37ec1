package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/job"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// ring is a task's part of the ring all-reduce: its AM-II endpoint, its
// vector and the chunks it is cut into, and what its handlers counted.
type ring struct {
	a          *job.AMII
	size, rank int
	vec        []float64
	bounds     []int  // chunk c is vec[bounds[c]:bounds[c+1]]
	recv       uint32 // offset of the receive buffer in every rank's staging area (the send buffer is at 0)
	timeout    time.Duration
	reduced    int   // reduce-scatter chunks received and added
	gathered   int   // all-gather chunks received and copied
	failed     error // a bad Store, or one that came back
	reduceH    amii.HandlerID
	gatherH    amii.HandlerID
}

// openRing opens the job's AM-II endpoint with room for a send and a
// receive buffer of the largest chunk, and registers the ring's handlers
// before any rank sends (the open's setup).
func openRing(ctx context.Context, j *cluster.Job, n int, timeout time.Duration, cfg job.Config) (*ring, error) {
	r := &ring{size: j.Size, rank: j.Rank, vec: make([]float64, n), timeout: timeout}
	for c := 0; c <= j.Size; c++ {
		r.bounds = append(r.bounds, c*n/j.Size)
	}
	chunk := 8 * (n/j.Size + 1)
	if 2*chunk > 1<<30-amii.DefaultMediumSlots*endpoint.MaxMedium {
		return nil, fmt.Errorf("-n %d: a chunk of %d bytes; two must fit in an endpoint's staging area (1 GiB)", n, chunk)
	}
	r.recv = uint32(chunk)
	cfg.AMII.StagingSize = (2*chunk + amii.DefaultMediumSlots*endpoint.MaxMedium + 4095) &^ 4095
	cfg.SetupAMII = func(a *job.AMII) error {
		r.a = a
		r.reduceH = a.RegisterMedium(func(_ *amii.Token, args []uint64, data []byte) { r.arrived(args, data, true) })
		r.gatherH = a.RegisterMedium(func(_ *amii.Token, args []uint64, data []byte) { r.arrived(args, data, false) })
		a.OnReturn(func(ret amii.Returned) {
			if err := a.Lost(ret); err != nil {
				// The job cannot finish without that rank: end it,
				// saying why, rather than wait for it.
				j.Abort(fmt.Sprintf("allreduce: %v", err)) //nolint:errcheck // under Slurm it does not return
				r.failed = err
				return
			}
			r.failed = fmt.Errorf("a Store came back: %v", ret)
		})
		return nil
	}
	a, err := job.OpenAMII(ctx, j, cfg)
	if err != nil {
		return nil, err
	}
	if len(a.Staging()) < 2*chunk {
		a.Close()
		return nil, fmt.Errorf("the staging area holds %d bytes, want %d", len(a.Staging()), 2*chunk)
	}
	return r, nil
}

// arrived is the handler of a chunk stored by the left neighbour: args
// are the chunk's index and the step; reduce adds it in, else it is
// copied.
func (r *ring) arrived(args []uint64, data []byte, reduce bool) {
	if len(args) != 2 || args[0] >= uint64(r.size) {
		r.failed = fmt.Errorf("a Store with arguments %v", args)
		return
	}
	c := int(args[0])
	dst := r.vec[r.bounds[c]:r.bounds[c+1]]
	if len(data) != 8*len(dst) {
		r.failed = fmt.Errorf("chunk %d: %d bytes, want %d", c, len(data), 8*len(dst))
		return
	}
	for i := range dst {
		v := math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
		if reduce {
			dst[i] += v
		} else {
			dst[i] = v
		}
	}
	if reduce {
		r.reduced++
	} else {
		r.gathered++
	}
}

// mod is x mod m, in [0, m).
func mod(x, m int) int { return ((x % m) + m) % m }

// reset sets the vector to this rank's values and the counts to zero,
// before the barrier that starts an all-reduce: once past it, the left
// neighbour's first chunk may come at any time.
func (r *ring) reset() {
	for i := range r.vec {
		r.vec[i] = value(r.rank, i)
	}
	r.reduced, r.gathered, r.failed = 0, 0, nil
}

// allreduce sums the ranks' vectors into every rank's: the reduce-scatter,
// then the all-gather.
func (r *ring) allreduce() error {
	for s := range r.size - 1 {
		if err := r.step(mod(r.rank-s, r.size), s, r.reduceH, func() bool { return r.reduced > s }); err != nil {
			return fmt.Errorf("reduce-scatter step %d: %w", s, err)
		}
	}
	for s := range r.size - 1 {
		if err := r.step(mod(r.rank+1-s, r.size), s, r.gatherH, func() bool { return r.gathered > s }); err != nil {
			return fmt.Errorf("all-gather step %d: %w", s, err)
		}
	}
	return nil
}

// step stores chunk c into the right neighbour's receive buffer, for its
// handler h, and waits until the Store is answered (the neighbour's buffer
// is free again) and the left neighbour's chunk of this step has arrived.
func (r *ring) step(c, s int, h amii.HandlerID, arrived func() bool) error {
	src := r.vec[r.bounds[c]:r.bounds[c+1]]
	buf := r.a.Staging()
	for i, v := range src {
		binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(v))
	}
	err := r.a.Store(amii.Bulk{Dest: mod(r.rank+1, r.size), Local: 0, Remote: r.recv, Length: uint32(8 * len(src)),
		Handler: h, Args: []uint64{uint64(c), uint64(s)}})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(r.timeout)
	for r.failed == nil && (r.a.Outstanding() > 0 || !arrived()) {
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing from rank %d, or no answer from rank %d, in %v", mod(r.rank-1, r.size), mod(r.rank+1, r.size), r.timeout)
		}
		if _, err := r.a.Wait(10 * time.Millisecond); err != nil {
			return err
		}
		if _, err := r.a.Poll(); err != nil {
			return err
		}
	}
	return r.failed
}
