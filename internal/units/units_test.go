package units

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		rate bool
		want uint64
		ok   bool
	}{
		{"100mbit", true, 100_000_000, true}, {"1gbit", true, 1_000_000_000, true}, {"10kbps", true, 10_000, true},
		{"0", true, 0, false}, {"fast", true, 0, false},
		{"16k", false, 16 << 10, true}, {"64m", false, 64 << 20, true}, {"512", false, 512, true}, {"1x", false, 0, false},
	} {
		f := ParseSize
		if tc.rate {
			f = ParseRate
		}
		got, err := f(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
