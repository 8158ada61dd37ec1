package cells

import (
	"math/rand/v2"
	"testing"
)

// bitCRC10 is the CRC-10 one bit at a time: the definition, for checking
// the tables and the carry-less multiplication against.
func bitCRC10(p []byte) uint16 {
	var reg uint16
	for _, b := range p {
		for i := 7; i >= 0; i-- {
			top := reg>>9&1 ^ uint16(b>>i)&1
			reg = reg << 1 & 0x3ff
			if top != 0 {
				reg ^= crc10Poly
			}
		}
	}
	return reg
}

// TestCRC10Implementations checks both ways of computing the CRC-10 (the
// tables, and the carry-less multiplication where the processor has it)
// against the bit-at-a-time definition, for every length up to 300 bytes
// at every alignment of a 16-byte block, of random bytes and of all ones.
func TestCRC10Implementations(t *testing.T) {
	if !useCRC10CLMUL {
		t.Log("no carry-less multiplication on this processor: the tables only")
	}
	rng := rand.New(rand.NewPCG(10, 10))
	buf := make([]byte, 300+16)
	for n := range 301 {
		for off := range 16 {
			for _, fill := range []string{"random", "ones"} {
				p := buf[off : off+n]
				for i := range p {
					p[i] = 0xff
					if fill == "random" {
						p[i] = byte(rng.Uint32())
					}
				}
				want := bitCRC10(p)
				if got := crc10Update(0, p) >> crc10Shift; got != want {
					t.Fatalf("tables: CRC-10 of %d %s bytes at offset %d = %#03x, want %#03x", n, fill, off, got, want)
				}
				if useCRC10CLMUL && n >= 16 {
					if got := crc10CLMUL(p); got != want {
						t.Fatalf("carry-less: CRC-10 of %d %s bytes at offset %d = %#03x, want %#03x", n, fill, off, got, want)
					}
				}
				if got := CRC10(p); got != want {
					t.Fatalf("CRC10 of %d %s bytes = %#03x, want %#03x", n, fill, got, want)
				}
			}
		}
	}
}

// TestCRC10Constants: the constants are the remainders of powers of x
// (checked by multiplying out: x^n = q·g + r), and mu·g + x^64 mod g is
// x^64.
func TestCRC10Constants(t *testing.T) {
	g := uint64(1<<10 | crc10Poly)
	for _, c := range []struct {
		n    int
		want uint64
	}{{128, crc10K[0]}, {192, crc10K[1]}, {10, crc10K[2]}, {74, crc10K[3]}, {64, crc10K[4]}} {
		if c.want >= 1<<10 {
			t.Errorf("x^%d mod g = %#x: not below x^10", c.n, c.want)
		}
		// x^n mod g by repeated multiplication by x.
		r := uint64(1)
		for range c.n {
			r <<= 1
			if r&(1<<10) != 0 {
				r ^= g
			}
		}
		if r != c.want {
			t.Errorf("x^%d mod g = %#x, crc10K has %#x", c.n, r, c.want)
		}
	}
	// mu·g, a carry-less product of 55 and 11 bits, plus x^64 mod g is x^64.
	var lo, hi uint64
	for i := range 11 {
		if g>>i&1 != 0 {
			lo ^= crc10K[5] << i
			if i > 0 {
				hi ^= crc10K[5] >> (64 - i)
			}
		}
	}
	if lo^crc10K[4] != 0 || hi != 1 {
		t.Errorf("mu·g + (x^64 mod g) = %#x·x^64 + %#x, want x^64", hi, lo^crc10K[4])
	}
	if crc10K[6] != g || crc10K[7] != 0 {
		t.Errorf("crc10K[6:] = %#x, want {g, 0}", crc10K[6:])
	}
}

// FuzzCRC10 checks CRC10 against the bit-at-a-time definition, and the
// two implementations against each other, on arbitrary bytes.
func FuzzCRC10(f *testing.F) {
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 46, 48, 64, 100} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*37 + n)
		}
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		want := bitCRC10(p)
		if got := CRC10(p); got != want {
			t.Fatalf("CRC10 of %d bytes = %#03x, want %#03x", len(p), got, want)
		}
		if got := crc10Update(0, p) >> crc10Shift; got != want {
			t.Fatalf("tables: CRC-10 of %d bytes = %#03x, want %#03x", len(p), got, want)
		}
		if useCRC10CLMUL && len(p) >= 16 {
			if got := crc10CLMUL(p); got != want {
				t.Fatalf("carry-less: CRC-10 of %d bytes = %#03x, want %#03x", len(p), got, want)
			}
		}
	})
}
