package crc32aal5

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuardPages places inputs flush against inaccessible pages on both
// sides, so that any read before p[0] or after p[len(p)-1] faults.
func TestGuardPages(t *testing.T) {
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 3*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer unix.Munmap(mem)
	if err := unix.Mprotect(mem[:ps], unix.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	if err := unix.Mprotect(mem[2*ps:], unix.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	page := mem[ps : 2*ps]
	r := rand.New(rand.NewPCG(15, 16))
	for i := range page {
		page[i] = byte(r.Uint32())
	}
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
