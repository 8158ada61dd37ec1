package crc32aal5

// Constants for the carry-less multiplication (PCLMULQDQ) implementation.
//
// The assembly reads them through go_asm.h (as const_kX64 and so on), so the
// values below are the only copy; TestFoldConstants recomputes every one of
// them from poly and fails if any differs.
//
// Notation: P is the 33-bit generator x^32 + poly. kXn is x^n mod P, a
// polynomial of degree < 32. Folding a 128-bit block A = A_hi·x^64 + A_lo
// forward by n bits replaces A·x^n by A_hi·kX(n+64) ⊕ A_lo·kXn, which is
// congruent modulo P and has degree < 96, so it fits in 128 bits again.
const (
	kX64   = 0x490d678d // x^64 mod P: final 128 -> 64 bit reduction
	kX96   = 0xf200aa66 // x^96 mod P: final 128 -> 64 bit reduction
	kX128  = 0xe8a45605 // x^128 mod P: fold by 128 bits, low half; final reduction
	kX192  = 0xc5b9cd4c // x^192 mod P: fold by 128 bits, high half
	kX256  = 0x75be46b7 // x^256 mod P: fold by 256 bits, low half
	kX320  = 0x569700e5 // x^320 mod P: fold by 256 bits, high half
	kX384  = 0x8c3828a8 // x^384 mod P: fold by 384 bits, low half
	kX448  = 0x64bf7a9b // x^448 mod P: fold by 384 bits, high half
	kX512  = 0xe6228b11 // x^512 mod P: fold by 512 bits, low half
	kX576  = 0x8833794c // x^576 mod P: fold by 512 bits, high half
	kX1024 = 0x567fddeb // x^1024 mod P: fold by 1024 bits, low half
	kX1088 = 0x10bd4d7c // x^1088 mod P: fold by 1024 bits, high half

	// kMu is the Barrett constant floor(x^64 / P), 33 bits.
	kMu = 0x104d101df
	// kP is the full generator P = x^32 + poly, 33 bits.
	kP = 0x104c11db7
)
