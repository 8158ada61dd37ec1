package cells

import (
	"testing"

	"github.com/xam-project/xam/internal/guardtest"
)

// TestCRC10GuardPages places inputs flush against inaccessible pages on
// both sides, so that a read before p[0] or after p[len(p)-1] by either
// implementation faults.
func TestCRC10GuardPages(t *testing.T) {
	page := guardtest.Page(t, 11)
	for n := 0; n <= 300; n++ {
		for _, p := range [][]byte{page[:n], page[len(page)-n:]} {
			want := bitCRC10(p)
			if got := crc10Update(0, p) >> crc10Shift; got != want {
				t.Fatalf("tables: %d bytes: %#03x, want %#03x", n, got, want)
			}
			if useCRC10CLMUL && n >= 16 {
				if got := crc10CLMUL(p); got != want {
					t.Fatalf("carry-less: %d bytes: %#03x, want %#03x", n, got, want)
				}
			}
		}
	}
}
