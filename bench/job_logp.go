package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/job"
	"github.com/xam-project/xam/nicfw"
)

// AM-II's LogP between two nodes of a job: the measurement of logp.go
// (its configurations, baseline to batching, and its client), with rank 0
// the sender and rank 1 the receiver. The receiver takes Or as the lab's
// does, per handler of each poll that ran handlers while the sender's
// stream is marked, but times the whole poll: its engine's run that sends
// the replies included (the lab's hook into the engine is not there).

// The handlers of the LogP endpoint, registered in this order on every
// rank: 0 echoes at the receiver and counts the answers at the sender
// (logpEcho), 1 is null (logpNull; the implicit reply answers it), 2 marks
// the stream, 3 says a rank is done (finish).
const (
	jobLogPMark = 2
	jobLogPDone = 3
)

// logp runs logpConfigs' rows between ranks 0 and 1.
func (x *jobRun) logp() (Reported, error) {
	count := x.pick(2000, 20000)
	res := &logpResult{Count: count, Credits: amii.DefaultCredits}
	for _, c := range logpConfigs {
		row, err := x.logpRow(count, c.cfg, c.coalesce)
		if err != nil {
			return nil, fmt.Errorf("LogP %s: %w", c.name, err)
		}
		if row != nil {
			row.Config = c.name
			res.Rows = append(res.Rows, *row)
		}
	}
	if x.j.Rank != 0 {
		return nil, nil
	}
	return res, nil
}

// logpRow measures one configuration: rank 0 returns the row.
func (x *jobRun) logpRow(count int, ecfg nicfw.EngineConfig, coalesce bool) (*logpRowResult, error) {
	var answered, dones int
	var measuring bool
	var ors []time.Duration
	cfg := job.Config{Mode: job.Inline, Device: x.cfg.Device, XDP: x.cfg.XDP, Engine: ecfg,
		AMII: amii.Config{Coalesce: coalesce && x.j.Rank == 0}}
	cfg.SetupAMII = func(a *job.AMII) error {
		a.Register(func(t *amii.Token, args []uint64) {
			if x.j.Rank == 0 {
				answered++
			} else {
				t.Reply(logpEcho, args...) //nolint:errcheck // a missing answer stops the sender
			}
		})
		a.Register(func(*amii.Token, []uint64) {})
		a.Register(func(_ *amii.Token, args []uint64) { measuring = args[0] == 1 })
		a.Register(func(*amii.Token, []uint64) { dones++ })
		return nil
	}
	a, err := job.OpenAMII(x.ctx, x.j, cfg)
	if err != nil {
		return nil, err
	}
	var row *logpRowResult
	if x.j.Rank == 0 {
		mark := func(on bool) error {
			v := uint64(0)
			if on {
				v = 1
			}
			return a.Request(1, jobLogPMark, v)
		}
		row, err = logpClient(a.Endpoint, 1, logpConfig{Count: count}, &answered, mark)
	}
	poll := func() (int, error) {
		t0 := time.Now()
		n, err := a.Poll()
		if n > 0 && measuring {
			ors = append(ors, time.Since(t0)/time.Duration(n))
		}
		return n, err
	}
	if err == nil {
		err = x.finish(func(r int) error { return a.Request(r, jobLogPDone) }, poll, func() bool { return a.Outstanding() == 0 }, &dones)
	}
	var or []float64
	if err == nil {
		or, err = x.gather("or", durUS(median(ors)))
	}
	if berr := a.Barrier(x.ctx); err == nil {
		err = berr
	}
	if err = errors.Join(err, a.Close()); err != nil || row == nil {
		return nil, err
	}
	row.Or = or[1]
	row.setL()
	return row, nil
}
