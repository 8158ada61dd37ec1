// Package crc32aal5 computes the CRC-32 of the ATM Adaptation Layer 5
// (AAL5) CPCS-PDU trailer, as specified in ITU-T I.363.5.
//
// # The CRC
//
// The generator polynomial is
//
//	P(x) = x^32 + x^26 + x^23 + x^22 + x^16 + x^12 + x^11 + x^10 +
//	       x^8 + x^7 + x^5 + x^4 + x^2 + x + 1        (0x04C11DB7)
//
// the same polynomial as Ethernet's CRC-32, but processed most significant
// bit first (not reflected). The register is preset to 0xFFFFFFFF and the
// result is complemented. In the Williams/Cook catalogue this is
// CRC-32/BZIP2: width=32 poly=0x04c11db7 init=0xffffffff refin=false
// refout=false xorout=0xffffffff check=0xfc891918 residue=0xc704dd7b.
// Checksum([]byte("123456789")) is 0xFC891918 and Checksum(nil) is 0.
//
// AAL5 transmits the CRC most significant byte first in the last four
// bytes of the PDU, so the result of Checksum over the PDU without its CRC
// field is written with binary.BigEndian.PutUint32. Over a whole PDU
// including a correct CRC field, Checksum returns the constant 0x38FB2284
// (the complement of the residue 0xC704DD7B).
//
// This is not hash/crc32.IEEE, which uses the same polynomial reflected
// (LSB first); neither crc32.MakeTable nor crc32.Update can compute it.
//
// # Algorithms
//
// Portable (all platforms, and the short-input path everywhere): table
// driven slicing-by-16. Sixteen 256-entry tables, built at package
// initialisation (16 KiB, no allocation), give the contribution of a byte
// followed by k zero bytes, so 16 input bytes are consumed per step with 16
// independent lookups; the last 0..15 bytes go through slicing-by-8 and the
// classic byte-at-a-time table. Slicing-by-16 measured faster than
// slicing-by-8 here (about 1.9 against 1.6 GB/s).
//
// amd64 with PCLMULQDQ, SSSE3 and SSE4.1: carry-less multiplication
// folding, following Intel's white paper "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ Instruction", written in Go assembly. For a
// non-reflected CRC every 16-byte block is byte-reversed with PSHUFB so
// that, as a 128-bit integer, bit i is the coefficient of x^i; no
// bit-reflection or shift is then needed. The CRC register state is XORed
// into the first 32 message bits. A 128-bit accumulator A = A_hi·x^64 +
// A_lo is moved n bits further along the message by replacing it with
// A_hi·(x^(n+64) mod P) ⊕ A_lo·(x^n mod P) (two PCLMULQDQ), which is
// congruent modulo P, and the next block is XORed in. The main loop keeps
// four accumulators 64 bytes apart (fold distance 512 bits); they are
// combined by folding three of them by 384, 256 and 128 bits, then single
// 16-byte blocks are folded by 128 bits. A final partial block of r < 16
// bytes is handled in registers: the accumulator is shifted left by r bytes
// with PSHUFB, the r bytes that fall off the top are folded by 128 bits,
// and the last r input bytes fill the gap (loaded as the last 16 bytes of
// the input, which never reads outside it). The register is then A·x^32 mod
// P: with A = a3·x^96 + a2·x^64 + a1·x^32 + a0 in 32-bit pieces, three
// independent products a3·(x^128 mod P), a2·(x^96 mod P) and a1·(x^64 mod
// P) plus a0·x^32 give a congruent 64-bit value, which a Barrett reduction
// with mu = floor(x^64 / P) brings to 32 bits. The constants are in consts.go and are recomputed from the
// polynomial by TestFoldConstants.
//
// amd64 that additionally has AVX2 and VPCLMULQDQ (for example AMD Zen 3 and
// later, Intel Ice Lake and later): inputs of 256 bytes or more first run a
// loop with four 256-bit accumulators, each holding two consecutive blocks,
// consuming 128 bytes per iteration (fold distance 1024 bits); the first
// two are then folded onto the last two by 512 bits, which leaves exactly
// the four 128-bit accumulators of the loop above, and the code continues
// there with the remaining 0..127 bytes. On a CPU where PCLMULQDQ throughput is the limit this
// roughly doubles the speed of the 128-bit loop.
//
// # Which is chosen when
//
// On amd64, inputs of at least 16 bytes go to the assembly when the CPU has
// PCLMULQDQ, SSSE3 and SSE4.1 (golang.org/x/sys/cpu), and within it to the
// 256-bit loop when len >= 256 and AVX2 plus the VPCLMULQDQ CPUID bit are
// present. Shorter inputs, other CPUs, other architectures and builds with
// the purego tag use the slicing-by-16 code. On amd64 this dispatch is a
// few instructions of assembly that jump straight to the chosen code, so
// that Checksum and Update inline into their callers and cost one call.
// All paths give identical results and none allocates.
package crc32aal5
