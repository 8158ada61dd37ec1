package coord

import (
	"errors"
	cmdflag "flag" // named apart from this package's flag (a control message's boolean)
	"fmt"
	"strconv"
	"strings"

	"github.com/xam-project/xam/nicfw"
)

// The module registers itself by name, so that a command loads it with
// `--module coord` and configures it with the --coord-* flags it declares
// here (`xam fw` imports the package for this alone).
func init() {
	nicfw.RegisterModule(nicfw.ModuleKind{
		Name:     "coord",
		Help:     "sender coordination",
		Usage:    "[--coord-threshold B] [--coord-early B] [--coord-link-rate RATE --coord-port-buffer B]",
		Flags:    declareFlags,
		Describe: describe,
	})
}

// declareFlags declares the module's flags on fs and returns what builds
// the module from them once fs is parsed.
func declareFlags(fs *cmdflag.FlagSet) func() (nicfw.Module, error) {
	threshold := fs.Int("coord-threshold", DefaultThreshold, "coord: messages of at most this many bytes are not coordinated")
	early := fs.Int("coord-early", 0, "coord: pass the token on when this many bytes of the message are left (Early Token Release)")
	rate := fs.String("coord-link-rate", "", "coord: the switch ports' rate, e.g. 100mbit or 1gbit: a holder keeps the token until its message has crossed the port at that rate")
	buffer := fs.String("coord-port-buffer", "", "coord: the bytes a switch port queues, e.g. 16k: with --coord-link-rate, the holder paces its message to three quarters of it")
	return func() (nicfw.Module, error) {
		given := map[string]bool{}
		fs.Visit(func(f *cmdflag.Flag) { given[f.Name] = true })
		cfg, err := flagConfig(given, *threshold, *early, *rate, *buffer)
		if err != nil {
			return nil, err
		}
		return New(cfg), nil
	}
}

// flagConfig checks the module's flags and returns its configuration;
// given holds the names of the flags set on the command line, so that
// --coord-link-rate and --coord-port-buffer are read only when given.
func flagConfig(given map[string]bool, threshold, early int, rate, buffer string) (Config, error) {
	cfg := Config{Threshold: threshold, EarlyRelease: early}
	if early < 0 {
		return cfg, fmt.Errorf("--coord-early %d: want 0 or more bytes", early)
	}
	if given["coord-link-rate"] {
		r, err := parseRate(rate)
		if err != nil {
			return cfg, fmt.Errorf("--coord-link-rate: %v", err)
		}
		cfg.LinkRate = r
	}
	if given["coord-port-buffer"] {
		b, err := parseSize(buffer)
		if err != nil || b < 1<<10 || b > 1<<30 {
			return cfg, fmt.Errorf("--coord-port-buffer %q: want a size from 1k to 1g, e.g. 16k", buffer)
		}
		if cfg.LinkRate == 0 {
			return cfg, errors.New("--coord-port-buffer needs --coord-link-rate: the port's queue is estimated from the rate it drains at")
		}
		cfg.PortBuffer = int(b)
	}
	return cfg, nil
}

// describe says what module m, built from the flags, is set to do, for
// the daemon's first lines.
func describe(m nicfw.Module) string {
	c, ok := m.(*Module)
	if !ok {
		return m.Name()
	}
	cfg := c.Config()
	s := fmt.Sprintf("coord: messages above %d bytes wait for the token", cfg.Threshold)
	if cfg.Threshold < 0 {
		s = "coord: every message waits for the token"
	}
	if cfg.EarlyRelease > 0 {
		s += fmt.Sprintf(", released with %d bytes left", cfg.EarlyRelease)
	}
	switch {
	case cfg.PortBuffer > 0:
		s += fmt.Sprintf("; paced to %d bit/s and a %d-byte port buffer", cfg.LinkRate, cfg.PortBuffer)
	case cfg.LinkRate > 0:
		s += fmt.Sprintf("; held until the message crossed a %d bit/s port, not paced (no --coord-port-buffer)", cfg.LinkRate)
	default:
		s += "; not paced (no --coord-link-rate, --coord-port-buffer)"
	}
	return s
}

// parseRate parses a rate in bits per second with an optional k/m/g
// suffix (powers of 1000, as tc reads rates) and an optional "bit", "bps"
// or "b/s" unit: 100mbit, 1g, 2500000. It reads rates as xam's other
// flags do (cmd/xam's parseRate), which the module's package cannot
// import: packages import only downward.
func parseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, unit := range []string{"bit", "bps", "b/s"} {
		t = strings.TrimSuffix(t, unit)
	}
	v, err := parseScaled(t, 1000)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("%q: want a rate such as 100mbit or 1gbit", s)
	}
	return v, nil
}

// parseSize parses a byte count with an optional k/m/g suffix (powers of
// 1024, as tc reads sizes).
func parseSize(s string) (uint64, error) {
	return parseScaled(strings.ToLower(strings.TrimSpace(s)), 1024)
}

// parseScaled parses a number with an optional k, m or g suffix, the
// powers of base.
func parseScaled(t string, base uint64) (uint64, error) {
	mult := uint64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k':
			mult, t = base, t[:len(t)-1]
		case 'm':
			mult, t = base*base, t[:len(t)-1]
		case 'g':
			mult, t = base*base*base, t[:len(t)-1]
		}
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number with an optional k, m or g", t)
	}
	return v * mult, nil
}
