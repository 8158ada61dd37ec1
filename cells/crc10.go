package cells

// CRC-10 as used by AAL3/4 (ITU-T I.363.3) and OAM cells (I.610):
// generator x^10 + x^9 + x^5 + x^4 + x + 1, initial value 0, no reflection,
// no final XOR. The CRC of the ASCII string "123456789" is 0x199.
//
// Every compact cell and SSAM message carries one, so it is on the latency
// path. The register is kept left-aligned in 16 bits (generator shifted up
// by 6), which lets MSB-first slicing-by-8 tables process eight bytes per
// step from 4 KB of tables (16-bit entries: half what 32-bit ones take of
// the cache the rest of the path needs); the CRC is the register's top ten
// bits.
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
func CRC10(p []byte) uint16 { return crc10Update(0, p) >> crc10Shift }

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
	c := crc10Update(0, p)
	c = c<<8 ^ crc10Table[0][byte(c>>8)^li<<2]
	return c >> crc10Shift
}
