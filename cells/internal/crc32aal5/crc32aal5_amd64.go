//go:build !purego

package crc32aal5

import "golang.org/x/sys/cpu"

// useCLMUL reports whether the PCLMULQDQ implementation is used. It needs
// PCLMULQDQ for the multiplications, SSSE3 for the PSHUFB byte swaps and
// SSE4.1 for PBLENDVB. Tests clear it to force the portable fallback.
var useCLMUL = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41

// useVPCLMUL reports whether updateCLMUL may use its 256-bit VPCLMULQDQ
// loop for inputs of 256 bytes or more. That needs AVX2 (which
// golang.org/x/sys/cpu only reports when the OS saves YMM state) and the
// VPCLMULQDQ CPUID bit, which x/sys/cpu only exposes together with AVX-512,
// so it is read directly. The assembly reads this variable; tests clear it
// to exercise the 128-bit loop.
var useVPCLMUL = useCLMUL && cpu.X86.HasAVX2 && hasVPCLMULQDQ()

// hasVPCLMULQDQ reports the CPUID.(EAX=7,ECX=0):ECX[10] feature bit.
func hasVPCLMULQDQ() bool {
	if maxID, _, _, _ := cpuid(0, 0); maxID < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

// cpuid executes the CPUID instruction; implemented in crc32aal5_amd64.s.
func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

// clmulThreshold is the input length from which the PCLMULQDQ
// implementation is used; shorter inputs take the table code.
// updateCLMUL itself needs at least 16 bytes.
const clmulThreshold = 16

// updateCLMUL clocks p through the raw (non-complemented) CRC register state
// and returns the new register, using PCLMULQDQ folding. len(p) must be at
// least 16; it need not be a multiple of 16. It is implemented in
// crc32aal5_amd64.s.
//
//go:noescape
func updateCLMUL(state uint32, p []byte) uint32

// update clocks p through the raw CRC register state, choosing the fastest
// available implementation for len(p): updateCLMUL if useCLMUL is set and
// len(p) >= clmulThreshold, updateGeneric otherwise.
//
// It is written in assembly (crc32aal5_amd64.s) as a tail jump to one or the
// other: in Go, with two calls, it is too big to inline into Checksum and
// Update, and the extra call layer cost about 2 ns per call (some 20% at 48
// bytes).
//
//go:noescape
func update(state uint32, p []byte) uint32
