package crc32aal5

import "encoding/binary"

// poly is the AAL5 CRC-32 generator polynomial
// x^32 + x^26 + x^23 + x^22 + x^16 + x^12 + x^11 + x^10 + x^8 + x^7 + x^5 +
// x^4 + x^2 + x + 1 without its x^32 term, in MSB-first (non-reflected)
// bit order: bit i is the coefficient of x^i.
const poly = 0x04C11DB7

// Size is the size of an AAL5 CRC-32 in bytes.
const Size = 4

// tab holds the slicing-by-16 lookup tables. tab[0] is the classic
// byte-at-a-time table: tab[0][b] is the register obtained by clocking the
// byte b, placed in the top byte of an otherwise zero register, through
// eight shifts of the CRC register, i.e. (b·x^32) mod P. tab[k][b] is the
// same for the byte followed by k zero bytes, i.e. (b·x^(32+8k)) mod P.
var tab [16][256]uint32

func init() {
	for i := range 256 {
		r := uint32(i) << 24
		for range 8 {
			if r&0x80000000 != 0 {
				r = r<<1 ^ poly
			} else {
				r <<= 1
			}
		}
		tab[0][i] = r
	}
	for k := 1; k < len(tab); k++ {
		for i := range 256 {
			r := tab[k-1][i]
			tab[k][i] = r<<8 ^ tab[0][r>>24]
		}
	}
}

// Checksum returns the AAL5 CRC-32 of p: the CRC-32/BZIP2 of ITU-T I.363.5,
// polynomial 0x04C11DB7 processed most significant bit first, register
// preset to 0xFFFFFFFF and result complemented. It does not allocate.
func Checksum(p []byte) uint32 {
	return ^update(0xFFFFFFFF, p)
}

// Update returns the CRC of (data that had CRC crc) followed by p, so that
// Update(Checksum(a), b) == Checksum(append(a, b...)) and
// Update(0, p) == Checksum(p), the same convention as hash/crc32.Update.
// It does not allocate.
func Update(crc uint32, p []byte) uint32 {
	return ^update(^crc, p)
}

// updateGeneric is the portable implementation. It clocks p through the raw
// (non-complemented) CRC register state and returns the new register. It
// uses slicing-by-16 for the bulk of p and the byte-at-a-time table for the
// remaining 0..15 bytes.
func updateGeneric(state uint32, p []byte) uint32 {
	for len(p) >= 16 {
		q := p[:16]
		w := state ^ binary.BigEndian.Uint32(q)
		state = tab[15][w>>24] ^ tab[14][uint8(w>>16)] ^
			tab[13][uint8(w>>8)] ^ tab[12][uint8(w)] ^
			tab[11][q[4]] ^ tab[10][q[5]] ^ tab[9][q[6]] ^ tab[8][q[7]] ^
			tab[7][q[8]] ^ tab[6][q[9]] ^ tab[5][q[10]] ^ tab[4][q[11]] ^
			tab[3][q[12]] ^ tab[2][q[13]] ^ tab[1][q[14]] ^ tab[0][q[15]]
		p = p[16:]
	}
	if len(p) >= 8 {
		q := p[:8]
		w := state ^ binary.BigEndian.Uint32(q)
		state = tab[7][w>>24] ^ tab[6][uint8(w>>16)] ^
			tab[5][uint8(w>>8)] ^ tab[4][uint8(w)] ^
			tab[3][q[4]] ^ tab[2][q[5]] ^ tab[1][q[6]] ^ tab[0][q[7]]
		p = p[8:]
	}
	return updateBytes(state, p)
}

// updateBytes clocks p through the register state one byte at a time.
func updateBytes(state uint32, p []byte) uint32 {
	for _, b := range p {
		state = state<<8 ^ tab[0][byte(state>>24)^b]
	}
	return state
}
