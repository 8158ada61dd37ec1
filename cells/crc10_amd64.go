//go:build !purego

package cells

import "golang.org/x/sys/cpu"

// useCRC10CLMUL reports whether CRC-10s of 16 bytes or more are computed by
// carry-less multiplication (crc10_amd64.s): PCLMULQDQ for the products,
// SSSE3 for the PSHUFB byte swaps, SSE4.1 for PEXTRQ. Tests clear it to
// force the tables.
var useCRC10CLMUL = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41

// crc10K holds the constants crc10CLMUL reads, computed from the generator
// g = x^10 + x^9 + x^5 + x^4 + x + 1 (crc10Constants): pairs of 64-bit
// lanes, the low one first.
var crc10K = crc10Constants()

// crc10CLMUL returns the CRC-10 of p (at least 16 bytes), right-aligned,
// by carry-less multiplication. It is implemented in crc10_amd64.s.
//
//go:noescape
func crc10CLMUL(p []byte) uint16
