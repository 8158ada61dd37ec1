// Command allreduce is an SPMD program: every task of a parallel job (a
// Slurm step, or the ranks of a hostfile) holds a vector of float64, and
// together they sum the vectors, each task ending with the sum, by a ring
// all-reduce over AM-II bulk Stores (am/job, am/amii). Every task checks
// the sum against the serial computation and rank 0 prints the time and
// bandwidth.
//
// The ring: the vector is cut into as many chunks as there are ranks. In
// each of the size-1 steps of the reduce-scatter, rank r stores chunk
// (r-s) mod size into its right neighbour's receive buffer, whose handler
// adds it into the neighbour's vector; then chunk (r+1) mod size holds
// the whole sum at rank r. In each of the size-1 steps of the all-gather,
// rank r stores its newest whole chunk to its right neighbour, whose
// handler copies it in. Each rank sends 2(size-1)/size of the vector, in
// size-1 Stores of a chunk at a time each way, and moves on once its
// Store is answered (the receive buffer is free again) and its left
// neighbour's has arrived.
//
// Each rank's staging area holds its send buffer and its receive buffer,
// a chunk each: the vector itself stays in Go memory, a chunk encoded into
// the send buffer before its Store.
//
// Run it under Slurm, one task per node (inline mode: the task owns its
// node's device queue):
//
//	srun -N 4 --ntasks-per-node=1 --mpi=pmi2 ./allreduce -dev eth1
//
// or through each node's xam fw (firmware mode; several tasks per node):
//
//	srun -N 4 --mpi=pmi2 ./allreduce -socket /run/xam/job-$SLURM_JOB_ID.sock
//
// allreduce.sbatch does either as a batch job.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xam-project/xam/am/job"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/nicfw"
)

func main() { os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr)) }

// options are the command line's.
type options struct {
	n, repeat      int
	window         int
	mode           string
	dev, socket    string
	hostfile       string
	rank           int
	timeout        time.Duration
	stdout, stderr io.Writer
}

// cli runs the command with args and returns its exit status: 0, 1 (a
// failure, or a wrong sum), 2 (bad usage).
func cli(args []string, stdout, stderr io.Writer) int {
	o := options{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("allreduce", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 1<<20, "elements of each rank's float64 vector")
	fs.IntVar(&o.repeat, "repeat", 3, "all-reduces to time, one after another")
	fs.StringVar(&o.mode, "mode", "", "inline or firmware (default: firmware with -socket, else inline)")
	fs.StringVar(&o.dev, "dev", "", "inline: this node's network device (default: the hostfile's)")
	fs.StringVar(&o.socket, "socket", "", "firmware: the node daemon's socket (default "+job.DefaultSocket+")")
	fs.StringVar(&o.hostfile, "hostfile", "", "without Slurm: the job's hostfile (package cluster), with -rank")
	fs.IntVar(&o.rank, "rank", -1, "with -hostfile: this task's rank")
	fs.IntVar(&o.window, "window", 8, "inline: a Store's chunks in flight at once (the engine's window, 1..256)")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "how long a step of the ring may wait for a neighbour")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "allreduce: unexpected arguments %q\n", fs.Args())
		return 2
	case o.n < 1 || o.repeat < 1 || o.timeout <= 0:
		fmt.Fprintln(stderr, "allreduce: -n, -repeat and -timeout must be positive")
		return 2
	case (o.hostfile == "") != (o.rank < 0):
		fmt.Fprintln(stderr, "allreduce: -hostfile and -rank go together")
		return 2
	}
	if err := run(o); err != nil {
		fmt.Fprintf(stderr, "allreduce: %v\n", err)
		return 1
	}
	return 0
}

// value is element i of rank r's vector: a multiple of 1/4 below 2^11, so
// that any sum of a few thousand of them is exact in float64, whatever
// the order of the additions, and the ring's sum must equal the serial
// one bit for bit.
func value(r, i int) float64 { return float64(i*(r+3)%1009) + 0.25*float64(r%4) }

func run(o options) error {
	ctx := context.Background()
	var j *cluster.Job
	var err error
	if o.hostfile != "" {
		j, err = cluster.FromHostfile(ctx, o.hostfile, o.rank)
	} else {
		j, err = cluster.Join(ctx)
	}
	if err != nil {
		return err
	}
	defer j.Close()
	if o.n < j.Size {
		return fmt.Errorf("-n %d: fewer elements than the job's %d ranks", o.n, j.Size)
	}
	// Inline, up to -window chunks of a Store in flight at once (in
	// firmware mode, the daemon's --window says).
	cfg := job.Config{Mode: job.Mode(o.mode), Device: o.dev, Socket: o.socket, Engine: nicfw.EngineConfig{Window: o.window}}
	r, err := openRing(ctx, j, o.n, o.timeout, cfg)
	if err != nil {
		return err
	}
	defer r.a.Close()
	times := make([]time.Duration, o.repeat)
	for k := range times {
		r.reset()
		if err := r.a.Barrier(ctx); err != nil {
			return err
		}
		start := time.Now()
		if err := r.allreduce(); err != nil {
			return fmt.Errorf("rank %d: all-reduce %d: %w", j.Rank, k+1, err)
		}
		times[k] = time.Since(start)
		if err := r.check(); err != nil {
			return fmt.Errorf("rank %d: all-reduce %d: %w", j.Rank, k+1, err)
		}
	}
	fmt.Fprintf(o.stdout, "rank %d: the sum of %d ranks' %d elements matches the serial computation, %d times\n",
		j.Rank, j.Size, o.n, o.repeat)
	return report(ctx, r, times, o.stdout)
}

// check compares the vector with the serial computation of the sum.
func (r *ring) check() error {
	for i, got := range r.vec {
		want := 0.0
		for rank := range r.size {
			want += value(rank, i)
		}
		if got != want {
			return fmt.Errorf("element %d is %v, the serial sum %v", i, got, want)
		}
	}
	return nil
}

// report publishes this rank's times; rank 0 prints, for each all-reduce,
// the slowest rank's time and the bandwidth it makes.
func report(ctx context.Context, r *ring, times []time.Duration, w io.Writer) error {
	j := r.a.Job
	var s []string
	for _, t := range times {
		s = append(s, strconv.FormatInt(int64(t), 10))
	}
	if err := j.Put("allreduce.times", []byte(strings.Join(s, ","))); err != nil {
		return err
	}
	if err := r.a.Barrier(ctx); err != nil || j.Rank != 0 {
		return err
	}
	slowest := make([]time.Duration, len(times))
	for rank := range j.Size {
		b, err := j.Get(rank, "allreduce.times")
		if err != nil {
			return err
		}
		for k, f := range strings.Split(string(b), ",") {
			ns, err := strconv.ParseInt(f, 10, 64)
			if err != nil || k >= len(slowest) {
				return errors.New("rank " + strconv.Itoa(rank) + " published bad times")
			}
			slowest[k] = max(slowest[k], time.Duration(ns))
		}
	}
	bytes := float64(8 * len(r.vec))
	for k, t := range slowest {
		// The algorithm bandwidth is the vector's size over the time; the
		// bus bandwidth what each rank sent and received per second,
		// 2(size-1)/size of the vector (NCCL's measures).
		alg := bytes / t.Seconds()
		fmt.Fprintf(w, "all-reduce %d of %d float64 (%.1f MiB) on %d ranks (%s mode): %v, algorithm bandwidth %.1f MB/s, bus bandwidth %.1f MB/s\n",
			k+1, len(r.vec), bytes/(1<<20), j.Size, r.a.Mode, t.Round(time.Microsecond), alg/1e6, alg*2*float64(j.Size-1)/float64(j.Size)/1e6)
	}
	return nil
}
