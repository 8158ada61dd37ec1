//go:build !amd64 || purego

package cells

// useCRC10CLMUL is false where there is no assembly implementation.
var useCRC10CLMUL = false

// crc10K is computed here too, so that its test runs everywhere.
var crc10K = crc10Constants()

// crc10CLMUL is never called on this platform (useCRC10CLMUL is false);
// it exists so that the tests compile everywhere.
func crc10CLMUL(p []byte) uint16 { return crc10Update(0, p) >> crc10Shift }
