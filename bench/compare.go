package bench

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// pinger runs one ping-pong of a path (RawPing, AMIIPing and the others,
// bound to their places).
type pinger struct {
	Name string
	Ping func(PingConfig) (*PingResult, error)
}

// comparison is the outcome of Compare: each path's merged result, in the
// order given.
type comparison struct {
	Rounds int        `json:"rounds"`
	Paths  []compared `json:"paths"`
}

// compared is one path's result in a Comparison.
type compared struct {
	Name string `json:"name"`
	*PingResult
	// Ratio is the path's median round trip over the first path's.
	Ratio float64 `json:"p50_ratio"`
}

// comparePaths measures the paths side by side: rounds rounds, each running
// every path in turn for cfg.Count/rounds round trips (after a warm-up of
// its own), their round trips merged per path. On a shared machine the
// speed of the processors drifts over seconds; running the paths in
// alternation, rather than one after the other, gives each the same mix
// of fast and slow moments, so that their ratios hold still from one run
// to the next even when the absolute times do not.
func comparePaths(cfg PingConfig, rounds int, paths ...pinger) (*comparison, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, errors.New("nothing to compare")
	}
	if rounds < 1 || rounds > cfg.Count {
		return nil, fmt.Errorf("%d rounds for %d round trips: want 1..%d", rounds, cfg.Count, cfg.Count)
	}
	c := &comparison{Rounds: rounds, Paths: make([]compared, len(paths))}
	for i := range rounds {
		rc := cfg
		// Spread cfg.Count over the rounds; each round warms up again,
		// the caches and the branch predictors having served the other
		// paths meanwhile.
		rc.Count = cfg.Count/rounds + min(1, max(0, cfg.Count%rounds-i))
		rc.Warmup = max(1, cfg.Warmup/rounds)
		for j, p := range paths {
			r, err := p.Ping(rc)
			if err != nil {
				return nil, fmt.Errorf("%s, round %d: %w", p.Name, i+1, err)
			}
			m := &c.Paths[j]
			if m.PingResult == nil {
				m.Name, m.PingResult = p.Name, r
				continue
			}
			m.Count += r.Count
			m.Lost += r.Lost
			m.hist.Merge(r.hist) // the same range: nothing is dropped
		}
	}
	for j := range c.Paths {
		m := &c.Paths[j]
		m.finish()
		if base := c.Paths[0].RTT.P50; base > 0 {
			m.Ratio = float64(m.RTT.P50) / float64(base)
		}
	}
	return c, nil
}

// stepper returns a run's step function: before each measurement, step
// reports whether to go on (not once stop is set, which marks the result
// interrupted) and tells progress, if set, what is measured next.
func stepper(stop *atomic.Bool, progress func(string), interrupted *bool) func(what string) bool {
	return func(what string) bool {
		if stop != nil && stop.Load() {
			*interrupted = true
			return false
		}
		if progress != nil {
			progress(what)
		}
		return true
	}
}
