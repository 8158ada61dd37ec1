package crc32aal5

import (
	"testing"

	"github.com/xam-project/xam/internal/guardtest"
)

// TestGuardPages places inputs flush against inaccessible pages on both
// sides, so that any read before p[0] or after p[len(p)-1] faults.
func TestGuardPages(t *testing.T) {
	page := guardtest.Page(t, 15)
	ps := len(page)
	for n := 0; n <= 600 && n <= ps; n++ {
		for _, p := range [][]byte{page[:n], page[ps-n:]} {
			want := refChecksum(p)
			for _, im := range impls() {
				if n < im.min {
					continue
				}
				if got := im.update(0, p); got != want {
					t.Fatalf("%s: len %d: got %#08x, want %#08x", im.name, n, got, want)
				}
			}
		}
	}
}
