package guardtest

import (
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// Page returns a page of bytes from a generator seeded with seed, with an
// inaccessible page on each side (see the package documentation).
func Page(tb testing.TB, seed uint64) []byte {
	tb.Helper()
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 3*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		tb.Fatalf("guardtest: mmap: %v", err)
	}
	tb.Cleanup(func() { unix.Munmap(mem) })
	for _, guard := range [][]byte{mem[:ps], mem[2*ps:]} {
		if err := unix.Mprotect(guard, unix.PROT_NONE); err != nil {
			tb.Fatalf("guardtest: mprotect: %v", err)
		}
	}
	page := mem[ps : 2*ps]
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for i := range page {
		page[i] = byte(rng.Uint32())
	}
	return page
}
