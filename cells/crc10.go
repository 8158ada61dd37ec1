package cells

// CRC-10 as used by AAL3/4 (ITU-T I.363.3) and OAM cells (I.610):
// generator x^10 + x^9 + x^5 + x^4 + x + 1, initial value 0, no reflection,
// no final XOR. The CRC of the ASCII string "123456789" is 0x199.
const crc10Poly = 0x233 // without the x^10 term

var crc10Table [256]uint16

func init() {
	for i := range crc10Table {
		c := uint16(i) << 2
		for range 8 {
			if c&0x200 != 0 {
				c = (c<<1 ^ crc10Poly) & 0x3ff
			} else {
				c = c << 1 & 0x3ff
			}
		}
		crc10Table[i] = c
	}
}

// CRC10 returns the AAL3/4 CRC-10 of p.
func CRC10(p []byte) uint16 { return crc10Update(0, p) }

func crc10Update(c uint16, p []byte) uint16 {
	for _, b := range p {
		c = (c<<8)&0x3ff ^ crc10Table[uint8(c>>2)^b]
	}
	return c
}
