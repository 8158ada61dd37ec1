package cells

import "encoding/binary"

// CRC-10 as used by AAL3/4 (ITU-T I.363.3) and OAM cells (I.610):
// generator x^10 + x^9 + x^5 + x^4 + x + 1, initial value 0, no reflection,
// no final XOR. The CRC of the ASCII string "123456789" is 0x199.
//
// SSAM computes one per message, so it is on the latency path. The register
// is kept left-aligned in 32 bits (generator shifted up by 22), which lets
// the usual MSB-first slicing-by-8 tables of a 32-bit CRC process eight
// bytes per step; the CRC is the register's top ten bits.
const (
	crc10Poly  = 0x233 // without the x^10 term
	crc10Shift = 32 - 10
)

var crc10Table [8][256]uint32

func init() {
	for i := range 256 {
		c := uint32(i) << 24
		for range 8 {
			if c&0x80000000 != 0 {
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
			crc10Table[k][i] = c<<8 ^ crc10Table[0][c>>24]
		}
	}
}

// CRC10 returns the AAL3/4 CRC-10 of p.
func CRC10(p []byte) uint16 { return uint16(crc10Update(0, p) >> crc10Shift) }

// crc10Update advances a left-aligned CRC-10 register over p.
func crc10Update(c uint32, p []byte) uint32 {
	t := &crc10Table
	for len(p) >= 8 {
		c ^= binary.BigEndian.Uint32(p)
		c = t[7][c>>24] ^ t[6][c>>16&0xff] ^ t[5][c>>8&0xff] ^ t[4][c&0xff] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	for _, b := range p {
		c = c<<8 ^ t[0][c>>24^uint32(b)]
	}
	return c
}
