package cells

// CRC-10 as used by AAL3/4 (ITU-T I.363.3) and OAM cells (I.610):
// generator x^10 + x^9 + x^5 + x^4 + x + 1, initial value 0, no reflection,
// no final XOR. The CRC of the ASCII string "123456789" is 0x199.
//
// Every compact cell and SSAM message carries one, so it is on the latency
// path. On amd64 with PCLMULQDQ it is computed by carry-less
// multiplication (crc10_amd64.s; the algebra is at crc10Constants), which
// needs no tables; elsewhere, and for fewer than 16 bytes, by tables: the
// register is kept left-aligned in 16 bits (generator shifted up by 6),
// which lets MSB-first slicing-by-8 tables process eight bytes per step
// from 4 KB of tables (16-bit entries: half what 32-bit ones take of the
// cache the rest of the path needs); the CRC is the register's top ten
// bits. BenchmarkCRC10: 8.3 ns for 46 bytes by multiplication, 21.5 ns by
// the tables.
const (
	crc10Poly  = 0x233 // without the x^10 term
	crc10Shift = 16 - 10
)

var crc10Table [8][256]uint16

func init() {
	for i := range 256 {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ crc10Poly<<crc10Shift
			} else {
				c <<= 1
			}
		}
		crc10Table[0][i] = c
	}
	for k := 1; k < 8; k++ {
		for i := range 256 {
			c := crc10Table[k-1][i]
			crc10Table[k][i] = c<<8 ^ crc10Table[0][c>>8]
		}
	}
}

// CRC10 returns the AAL3/4 CRC-10 of p.
func CRC10(p []byte) uint16 { return crc10(p) }

// crc10 returns the CRC-10 of p, right-aligned: by carry-less
// multiplication where the processor has it and p is 16 bytes or more
// (crc10_amd64.s), by the tables otherwise.
func crc10(p []byte) uint16 {
	if useCRC10CLMUL && len(p) >= 16 {
		return crc10CLMUL(p)
	}
	return crc10Update(0, p) >> crc10Shift
}

// crc10Update advances a left-aligned CRC-10 register over p.
func crc10Update(c uint16, p []byte) uint16 {
	t := &crc10Table
	for len(p) >= 8 {
		q := p[:8]
		c = t[7][byte(c>>8)^q[0]] ^ t[6][byte(c)^q[1]] ^ t[5][q[2]] ^ t[4][q[3]] ^
			t[3][q[4]] ^ t[2][q[5]] ^ t[1][q[6]] ^ t[0][q[7]]
		p = p[8:]
	}
	if len(p) >= 4 {
		p4 := p[:4]
		c = t[3][byte(c>>8)^p4[0]] ^ t[2][byte(c)^p4[1]] ^ t[1][p4[2]] ^ t[0][p4[3]]
		p = p[4:]
	}
	for _, b := range p {
		c = c<<8 ^ t[0][byte(c>>8)^b]
	}
	return c
}

// CRC10Trailer returns the CRC-10 of p followed by a 6-bit length
// indicator li, as AAL3/4's SAR-PDU trailer protects its length: the
// register runs over p, then over the byte li<<2 (the indicator's six bits
// and two zero bits). A 16-bit trailer li<<10 | CRC10Trailer(p, li) then
// carries both, every bit of it covered. li above 63 is cut to 6 bits.
func CRC10Trailer(p []byte, li uint8) uint16 {
	var c uint16 // crc10(p), its call spared: every compact cell with an acknowledgement computes one
	if useCRC10CLMUL && len(p) >= 16 {
		c = crc10CLMUL(p) << crc10Shift
	} else {
		c = crc10Update(0, p)
	}
	c = c<<8 ^ crc10Table[0][byte(c>>8)^li<<2]
	return c >> crc10Shift
}

// The carry-less multiplication (crc10_amd64.s) works on the message as a
// polynomial over GF(2), M(x), whose CRC-10 is M(x)·x^10 mod g(x) for the
// generator g = x^10 + x^9 + x^5 + x^4 + x + 1 (0x633). A 128-bit
// accumulator A = A_hi·x^64 + A_lo is moved 128 bits on by
// A_hi·(x^192 mod g) + A_lo·(x^128 mod g): congruent modulo g, and each
// product of a 64-bit half by a constant of degree below 10 is below
// 2^74, so the sum fits in 128 bits with the next block added. At the end
// A·x^10 is congruent to T = A_hi·(x^74 mod g) + A_lo·(x^10 mod g) (below
// 2^74) and to U = T_hi·(x^64 mod g) + T_lo (below 2^64), and Barrett
// reduction gives U's quotient by g exactly, q = ((U >> 10)·mu) >> 54 with
// mu = floor(x^64 / g): for U below x^64 the terms it leaves out are of
// degree below 10, so the remainder U + q·g is the CRC.

// crc10Constants returns the constants crc10CLMUL reads, in pairs of
// 64-bit lanes: {x^128, x^192} mod g (a fold by 128 bits),
// {x^10, x^74} mod g (A·x^10 below 2^74), {x^64 mod g, mu} (below 2^64,
// and Barrett's mu = floor(x^64 / g)) and {g, 0}.
func crc10Constants() [8]uint64 {
	mod := func(n int) uint64 { _, r := crc10DivXn(n); return r }
	mu, _ := crc10DivXn(64)
	return [8]uint64{mod(128), mod(192), mod(10), mod(74), mod(64), mu, 1<<10 | crc10Poly, 0}
}

// crc10DivXn divides x^n by g and returns the quotient's terms below x^64
// (all of it for n up to 73) and the remainder, by long division one
// coefficient at a time, the highest first.
func crc10DivXn(n int) (q, r uint64) {
	for i := n; i >= 0; i-- {
		r <<= 1
		if i == n {
			r |= 1
		}
		if r&(1<<10) != 0 {
			r ^= 1<<10 | crc10Poly
			if i < 64 {
				q |= 1 << i
			}
		}
	}
	return q, r
}
