package cells

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCRC10GuardPages places inputs flush against inaccessible pages on
// both sides, so that a read before p[0] or after p[len(p)-1] by either
// implementation faults.
func TestCRC10GuardPages(t *testing.T) {
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 3*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	defer unix.Munmap(mem)
	for _, guard := range [][]byte{mem[:ps], mem[2*ps:]} {
		if err := unix.Mprotect(guard, unix.PROT_NONE); err != nil {
			t.Fatalf("mprotect: %v", err)
		}
	}
	page := mem[ps : 2*ps]
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range page {
		page[i] = byte(rng.Uint32())
	}
	for n := 0; n <= 300; n++ {
		for _, p := range [][]byte{page[:n], page[ps-n:]} {
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
