package coord

import (
	"errors"
	cmdflag "flag" // named apart from this package's flag (a control message's boolean)
	"fmt"

	"github.com/xam-project/xam/internal/units"
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
		r, err := units.ParseRate(rate)
		if err != nil {
			return cfg, fmt.Errorf("--coord-link-rate: %v", err)
		}
		cfg.LinkRate = r
	}
	if given["coord-port-buffer"] {
		b, err := units.ParseSize(buffer)
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
