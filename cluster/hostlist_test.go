package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"vm", "vm"},
		{"n0", "n0"},
		{"n[0-3]", "n0 n1 n2 n3"},
		{"n[0-3,7]", "n0 n1 n2 n3 n7"},
		{"n[0-3,7],gpu[01-02]", "n0 n1 n2 n3 n7 gpu01 gpu02"},
		{"gpu[01-02],login", "gpu01 gpu02 login"},
		{"r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2"},
		{"n[8-10]-ib", "n8-ib n9-ib n10-ib"},
		{"n[001-003,010]", "n001 n002 n003 n010"},
		{"n[098-101]", "n098 n099 n100 n101"},
		{"[1-2]", "1 2"},
		{"a.b-c_d[5]", "a.b-c_d5"},
		{"rack[1-2]-node[01-02].ib", "rack1-node01.ib rack1-node02.ib rack2-node01.ib rack2-node02.ib"},
		{"n[3,1-2]", "n3 n1 n2"},
	} {
		got, err := ExpandHostlist(tc.in)
		if err != nil {
			t.Errorf("ExpandHostlist(%q): %v", tc.in, err)
			continue
		}
		if want := strings.Fields(tc.want); !slices.Equal(got, want) {
			t.Errorf("ExpandHostlist(%q) = %q, want %q", tc.in, got, want)
		}
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	for _, in := range []string{
		"", ",", "n0,", ",n0", "n0,,n1", "n[", "n]", "n[0-3", "n0-3]", "n[[0-1]]", "n[]", "n[,]", "n[1,]",
		"n[3-1]", "n[a-b]", "n[1-]", "n[-1]", "n[1-2-3]", "n[0-99999999]", "n[1234567890]",
		"n 0", "n\t0", "n/0", "n[0-256]m[0-255]", "a[0-300]b[0-300]", "n[1:2]",
	} {
		got, err := ExpandHostlist(in)
		if err == nil || !errors.Is(err, errHostlist) {
			t.Errorf("ExpandHostlist(%q) = %d names, %v; want a hostlist error", in, len(got), err)
		}
	}
}

// FuzzExpandHostlist: any input expands or fails with a hostlist error; the
// names are plain (no brackets or commas), at most MaxHosts, and each
// expands to itself.
func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{
		"n[0-3,7],gpu[01-02]", "r[1-2]n[1-2]", "n[8-10]-ib", "n[001-010]", "vm", "[0-9]", "a,b,c",
		"n[", "n[0-3", "n[3-1]", "n[0-65535]", "a[0-255]b[0-255]", "x[1-2]y[3-4]z[5-6]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		hosts, err := ExpandHostlist(in)
		if err != nil {
			if !errors.Is(err, errHostlist) {
				t.Fatalf("ExpandHostlist(%q): %v is not a hostlist error", in, err)
			}
			return
		}
		if len(hosts) == 0 || len(hosts) > MaxHosts {
			t.Fatalf("ExpandHostlist(%q): %d names", in, len(hosts))
		}
		for _, h := range hosts[:min(len(hosts), 50)] {
			if h == "" || strings.ContainsAny(h, "[],") {
				t.Fatalf("ExpandHostlist(%q) gave name %q", in, h)
			}
			again, err := ExpandHostlist(h)
			if err != nil || len(again) != 1 || again[0] != h {
				t.Fatalf("name %q of %q expands to %q, %v", h, in, again, err)
			}
		}
	})
}
