package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/bench"
	"github.com/xam-project/xam/cluster"
	"github.com/xam-project/xam/loader"
)

// runBenchJob runs `xam bench all --job`: this process is a task of a job
// (Slurm's, through PMI-2, or a hostfile's), one per node; the experiments run between the
// tasks (bench.RunJob) and rank 0 writes the report into dir. The other
// ranks print nothing but their failure.
func runBenchJob(e *env, f benchFlags, m loader.Mode, runs int, dir string) error {
	ctx := context.Background()
	var j *cluster.Job
	var err error
	if *f.hostfile != "" {
		jctx, cancel := context.WithTimeout(ctx, cluster.DefaultFenceTimeout)
		j, err = cluster.FromHostfile(jctx, *f.hostfile, *f.rank)
		cancel()
	} else {
		j, err = cluster.Join(ctx)
	}
	if errors.Is(err, cluster.ErrNoLauncher) {
		return usageError("--job: %v (without Slurm: --hostfile FILE --rank N)", err)
	}
	if err != nil {
		return err
	}
	defer j.Close()
	in := watchInterrupts(e, "the report of what was measured follows once the experiment in progress ends")
	in.grace = benchGrace
	defer in.release()
	cmd := "xam bench all --job"
	if *f.quick {
		cmd += " --quick"
	}
	cfg := bench.JobConfig{Device: *f.dev, XDP: m, Quick: *f.quick, Runs: runs, Stop: in.flag(), Command: cmd}
	if !*f.asJSON {
		cfg.Progress = func(what string) {
			fmt.Fprintf(e.stderr, "xam bench all --job: %s\n", what)
		}
	}
	start := time.Now()
	rep, err := bench.RunJob(ctx, j, cfg)
	if err != nil {
		j.Abort(fmt.Sprintf("xam bench on %s: %v", j.Node, err))
		return err
	}
	if rep == nil {
		return nil // not rank 0: rank 0 reports
	}
	written, err := rep.WriteFiles(dir)
	if err != nil {
		return err
	}
	if !*f.asJSON {
		fmt.Fprintf(e.stdout, "xam bench all --job: %d hosts, %d experiments in %s\n", len(rep.Setup.Hosts), len(rep.Sections[0].Experiments),
			time.Since(start).Round(time.Second))
	}
	return finishReport(e, rep, written, dir, *f.asJSON, in.interrupted())
}
