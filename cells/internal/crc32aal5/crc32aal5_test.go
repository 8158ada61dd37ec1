package crc32aal5

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"
)

// refChecksum is a bit-at-a-time reference implementation straight from
// the definition: register preset to all ones, each message bit, most
// significant bit of each byte first, XORed into the top of the register,
// which is shifted left and reduced by poly, and the result complemented.
func refChecksum(p []byte) uint32 {
	return ^refUpdate(0xFFFFFFFF, p)
}

// refUpdate clocks p through the raw register bit by bit.
func refUpdate(reg uint32, p []byte) uint32 {
	for _, b := range p {
		for i := 7; i >= 0; i-- {
			bit := uint32(b>>uint(i)) & 1
			top := reg >> 31
			reg <<= 1
			if top^bit != 0 {
				reg ^= poly
			}
		}
	}
	return reg
}

// impl is an implementation with the Update convention.
type impl struct {
	name   string
	update func(crc uint32, p []byte) uint32
	min    int // shortest input the implementation handles
}

// impls returns the implementations to test: the dispatching public
// function, the portable code alone and, where available, the PCLMULQDQ
// code alone for every length it accepts.
func impls() []impl {
	l := []impl{
		{"Update", Update, 0},
		{"generic", func(crc uint32, p []byte) uint32 { return ^updateGeneric(^crc, p) }, 0},
		{"bytes", func(crc uint32, p []byte) uint32 { return ^updateBytes(^crc, p) }, 0},
	}
	if useCLMUL {
		l = append(l, impl{"clmul-sse", func(crc uint32, p []byte) uint32 {
			return ^updateCLMULNoVPCLMUL(^crc, p)
		}, 16})
	}
	if useVPCLMUL {
		l = append(l, impl{"clmul-avx2", func(crc uint32, p []byte) uint32 { return ^updateCLMUL(^crc, p) }, 16})
	}
	return l
}

// updateCLMULNoVPCLMUL runs updateCLMUL with its 256-bit loop disabled.
// Tests do not run in parallel, so flipping the switch is safe.
func updateCLMULNoVPCLMUL(state uint32, p []byte) uint32 {
	saved := useVPCLMUL
	useVPCLMUL = false
	state = updateCLMUL(state, p)
	useVPCLMUL = saved
	return state
}

func TestCheckValue(t *testing.T) {
	const want uint32 = 0xFC891918
	if got := refChecksum([]byte("123456789")); got != want {
		t.Fatalf("reference: got %#08x, want %#08x", got, want)
	}
	if got := Checksum([]byte("123456789")); got != want {
		t.Fatalf("Checksum: got %#08x, want %#08x", got, want)
	}
}

// aal5Trailer40 is the 4 bytes UU=0, CPI=0, Length=40 that end the AAL5
// CPCS-PDU examples below, less the CRC field.
const aal5Trailer40 = "\x00\x00\x00\x28"

// pattern returns n bytes i*mul mod 256 for i = 0..n-1.
func pattern(n, mul int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * mul)
	}
	return string(b)
}

// TestVectors checks known answers. The catalogue values (check value and
// the short strings) were cross-checked against zlib's reflected CRC-32
// through the identity BZIP2(m) = rev32(IEEE(rev8 each byte of m)); the
// three 44-byte AAL5 PDUs are the widely quoted I.363.5 examples (40 bytes
// of 0x00, of 0xFF, and 0x01..0x28, each followed by UU, CPI and Length=40).
func TestVectors(t *testing.T) {
	vectors := []struct {
		in   string
		want uint32
	}{
		{"", 0x00000000},
		{"a", 0x19939B6B},
		{"abc", 0x648CBB73},
		{"123456789", 0xFC891918},
		{"message digest", 0xBFC90357},
		{"The quick brown fox jumps over the lazy dog", 0x459DEE61},
		{"\x00", 0xB1F7404B},
		{"\xff\xff\xff\xff", 0xFFFFFFFF},
		{string(make([]byte, 48)), 0xA9CD114F},
		{string(make([]byte, 40)) + aal5Trailer40, 0x864D7F99},
		{strings.Repeat("\xff", 40) + aal5Trailer40, 0xC55E457A},
		{pattern(41, 1)[1:] + aal5Trailer40, 0xBF671ED0},
		{strings.Repeat(pattern(256, 1), 7), 0xBAB92E4E},
		{pattern(1500, 7), 0xEEDC4227},
	}
	for _, v := range vectors {
		if got := refChecksum([]byte(v.in)); got != v.want {
			t.Errorf("reference(%q) = %#08x, want %#08x", v.in, got, v.want)
		}
		for _, im := range impls() {
			if len(v.in) < im.min {
				continue
			}
			if got := im.update(0, []byte(v.in)); got != v.want {
				t.Errorf("%s(%q) = %#08x, want %#08x", im.name, v.in, got, v.want)
			}
		}
		if got := Checksum([]byte(v.in)); got != v.want {
			t.Errorf("Checksum(%q) = %#08x, want %#08x", v.in, got, v.want)
		}
	}
}

// TestAAL5Residue checks the property receivers use: appending the CRC of a
// message big-endian gives a frame whose raw register is the fixed residue
// 0xC704DD7B, i.e. whose Checksum is 0x38FB2284.
func TestAAL5Residue(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 200; n++ {
		msg := make([]byte, n, n+4)
		for i := range msg {
			msg[i] = byte(r.Uint32())
		}
		c := Checksum(msg)
		frame := append(msg, byte(c>>24), byte(c>>16), byte(c>>8), byte(c))
		if got := Checksum(frame); got != 0x38FB2284 {
			t.Fatalf("len %d: Checksum(msg||crc) = %#08x, want 0x38FB2284", n, got)
		}
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// testLengths are the lengths compared with the reference: every length up
// to 600 and some large, odd ones.
func testLengths() []int {
	var l []int
	for n := 0; n <= 600; n++ {
		l = append(l, n)
	}
	return append(l, 1023, 1024, 1025, 4095, 4099, 65536, 65535+8, 65537, 100003)
}

func TestAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range testLengths() {
		p := randBytes(r, n)
		want := refChecksum(p)
		for _, im := range impls() {
			if n < im.min {
				continue
			}
			if got := im.update(0, p); got != want {
				t.Errorf("%s: len %d: got %#08x, want %#08x", im.name, n, got, want)
			}
		}
		if got := Checksum(p); got != want {
			t.Errorf("Checksum: len %d: got %#08x, want %#08x", n, got, want)
		}
		// A non-trivial incoming CRC.
		seed := r.Uint32()
		want = ^refUpdate(^seed, p)
		for _, im := range impls() {
			if n < im.min {
				continue
			}
			if got := im.update(seed, p); got != want {
				t.Errorf("%s: len %d, crc %#08x: got %#08x, want %#08x", im.name, n, seed, got, want)
			}
		}
	}
}

// TestUpdateSplit checks Update(Update(0, a), b) == Checksum(a||b) for every
// split point, for each implementation.
func TestUpdateSplit(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	lengths := []int{0, 1, 15, 16, 17, 47, 48, 63, 64, 65, 127, 128, 129, 200, 333, 600}
	if testing.Short() {
		lengths = lengths[:10]
	}
	for _, n := range lengths {
		p := randBytes(r, n)
		want := refChecksum(p)
		for _, im := range impls() {
			for i := 0; i <= n; i++ {
				a, b := p[:i], p[i:]
				var c uint32
				if len(a) >= im.min {
					c = im.update(0, a)
				} else {
					c = Update(0, a)
				}
				if len(b) >= im.min {
					c = im.update(c, b)
				} else {
					c = Update(c, b)
				}
				if c != want {
					t.Errorf("%s: len %d split %d: got %#08x, want %#08x", im.name, n, i, c, want)
				}
			}
		}
	}
	// Large inputs, a few split points.
	for _, n := range []int{65536, 65535 + 8} {
		p := randBytes(r, n)
		want := refChecksum(p)
		for _, i := range []int{0, 1, 13, 16, 64, 1000, n / 2, n - 17, n - 1, n} {
			if got := Update(Update(0, p[:i]), p[i:]); got != want {
				t.Errorf("Update: len %d split %d: got %#08x, want %#08x", n, i, got, want)
			}
		}
	}
}

// TestFallback runs the public API with the PCLMULQDQ code switched off.
func TestFallback(t *testing.T) {
	saved := useCLMUL
	useCLMUL = false
	defer func() { useCLMUL = saved }()
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 9, 48, 100, 1500, 65536, 65535 + 8} {
		p := randBytes(r, n)
		if got, want := Checksum(p), refChecksum(p); got != want {
			t.Errorf("len %d: got %#08x, want %#08x", n, got, want)
		}
	}
}

// TestUnaligned exercises every start offset modulo 16.
func TestUnaligned(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	buf := randBytes(r, 4096+64)
	for off := 0; off < 32; off++ {
		for _, n := range []int{16, 48, 64, 100, 1500, 4096} {
			p := buf[off : off+n]
			want := refChecksum(p)
			for _, im := range impls() {
				if got := im.update(0, p); got != want {
					t.Errorf("%s: off %d len %d: got %#08x, want %#08x", im.name, off, n, got, want)
				}
			}
		}
	}
}

// TestInputUnmodified checks that no implementation writes to its input,
// with inputs that end their backing array. Out-of-bounds reads are caught
// by TestGuardPages (Linux).
func TestInputUnmodified(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for n := 16; n <= 200; n++ {
		p := randBytes(r, n)
		p = p[:n:n]
		orig := bytes.Clone(p)
		want := refChecksum(p)
		for _, im := range impls() {
			if got := im.update(0, p); got != want {
				t.Errorf("%s: len %d: got %#08x, want %#08x", im.name, n, got, want)
			}
		}
		if !bytes.Equal(p, orig) {
			t.Fatalf("len %d: input modified", n)
		}
	}
}

func TestAllocs(t *testing.T) {
	p := make([]byte, 1500)
	if a := testing.AllocsPerRun(100, func() { Checksum(p); Update(1, p[:48]) }); a != 0 {
		t.Errorf("Checksum allocates %v times per run", a)
	}
}

// TestTables checks the slicing tables against the reference.
func TestTables(t *testing.T) {
	for k := range tab {
		for i := range 256 {
			p := make([]byte, k+1)
			p[0] = byte(i)
			if got, want := tab[k][i], refUpdate(0, p); got != want {
				t.Fatalf("tab[%d][%#02x] = %#08x, want %#08x", k, i, got, want)
			}
		}
	}
}

// xPowModP returns x^n mod P by repeated multiplication by x.
func xPowModP(n int) uint64 {
	r := uint64(1)
	for range n {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= 1<<32 | poly
		}
	}
	return r
}

// TestFoldConstants recomputes the folding and Barrett constants in
// consts.go from the polynomial.
func TestFoldConstants(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		got  uint64
	}{
		{"kX64", 64, kX64},
		{"kX96", 96, kX96},
		{"kX128", 128, kX128},
		{"kX192", 192, kX192},
		{"kX256", 256, kX256},
		{"kX320", 320, kX320},
		{"kX384", 384, kX384},
		{"kX448", 448, kX448},
		{"kX512", 512, kX512},
		{"kX576", 576, kX576},
		{"kX1024", 1024, kX1024},
		{"kX1088", 1088, kX1088},
	} {
		if want := xPowModP(c.n); c.got != want {
			t.Errorf("%s = %#x, want x^%d mod P = %#x", c.name, c.got, c.n, want)
		}
	}
	if kP != 1<<32|poly {
		t.Errorf("kP = %#x, want %#x", uint64(kP), uint64(1<<32|poly))
	}
	// mu = floor(x^64 / P) by long division of x^64 (a 65-bit value, kept
	// as the implicit top bit plus the low 64 bits).
	var mu uint64
	rem := [2]uint64{1, 0} // {bit 64, bits 63..0}
	for d := 64; d >= 32; d-- {
		var bit uint64
		if d == 64 {
			bit = rem[0]
		} else {
			bit = rem[1] >> uint(d) & 1
		}
		if bit != 0 {
			mu |= 1 << uint(d-32)
			if d == 64 {
				rem[0] = 0
				rem[1] ^= uint64(poly) << 32
			} else {
				rem[1] ^= uint64(kP) << uint(d-32)
			}
		}
	}
	if kMu != mu {
		t.Errorf("kMu = %#x, want floor(x^64/P) = %#x", uint64(kMu), mu)
	}
	if rem[1] != kX64 {
		t.Errorf("x^64 mod P from division = %#x, want %#x", rem[1], uint64(kX64))
	}
}

// FuzzChecksum compares the fast implementations with the bit-at-a-time
// reference on arbitrary input and split point.
func FuzzChecksum(f *testing.F) {
	f.Add([]byte("123456789"), uint32(0), 4)
	f.Add(make([]byte, 48), uint32(0xFFFFFFFF), 0)
	f.Fuzz(func(t *testing.T, p []byte, crc uint32, split int) {
		want := ^refUpdate(^crc, p)
		for _, im := range impls() {
			if len(p) < im.min {
				continue
			}
			if got := im.update(crc, p); got != want {
				t.Fatalf("%s: len %d crc %#08x: got %#08x, want %#08x", im.name, len(p), crc, got, want)
			}
		}
		if crc == 0 {
			if got := Checksum(p); got != want {
				t.Fatalf("Checksum: len %d: got %#08x, want %#08x", len(p), got, want)
			}
		}
		if len(p) > 0 {
			i := split % (len(p) + 1)
			if i < 0 {
				i = -i
			}
			if got := Update(Update(crc, p[:i]), p[i:]); got != want {
				t.Fatalf("split %d of %d: got %#08x, want %#08x", i, len(p), got, want)
			}
		}
	})
}

var sink uint32

func benchSizes() []int { return []int{48, 1500, 64 << 10} }

func benchName(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dK", n/1024)
	}
	return fmt.Sprint(n)
}

func benchmark(b *testing.B, n int, f func([]byte) uint32) {
	p := make([]byte, n)
	r := rand.New(rand.NewPCG(13, 14))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		sink = f(p)
	}
}

func benchVariants(b *testing.B, n int) {
	b.Run("dispatch", func(b *testing.B) { benchmark(b, n, Checksum) })
	b.Run("generic", func(b *testing.B) {
		benchmark(b, n, func(p []byte) uint32 { return ^updateGeneric(0xFFFFFFFF, p) })
	})
	if useCLMUL && n >= 16 {
		b.Run("clmul-sse", func(b *testing.B) {
			saved := useVPCLMUL
			useVPCLMUL = false
			defer func() { useVPCLMUL = saved }()
			benchmark(b, n, func(p []byte) uint32 { return ^updateCLMUL(0xFFFFFFFF, p) })
		})
	}
	b.Run("bytewise", func(b *testing.B) {
		benchmark(b, n, func(p []byte) uint32 { return ^updateBytes(0xFFFFFFFF, p) })
	})
	b.Run("crc32IEEE", func(b *testing.B) { benchmark(b, n, crc32.ChecksumIEEE) })
}

func BenchmarkChecksum48(b *testing.B)   { benchVariants(b, 48) }
func BenchmarkChecksum1500(b *testing.B) { benchVariants(b, 1500) }
func BenchmarkChecksum64K(b *testing.B)  { benchVariants(b, 64<<10) }
