// Package units parses the quantities xam's flags take, as tc writes
// them: rates in bits per second with k, m or g for powers of 1000
// ("100mbit", "1gbit"), sizes in bytes with k, m or g for powers of 1024
// ("16k").
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseRate parses a rate in bits per second, with an optional k, m or g
// (powers of 1000) and an optional bit, bps or b/s: "100mbit", "1gbit".
// 0 is an error.
func ParseRate(s string) (uint64, error) {
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

// ParseSize parses a byte count with an optional k, m or g suffix (powers
// of 1024, as tc reads sizes).
func ParseSize(s string) (uint64, error) {
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
