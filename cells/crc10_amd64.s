//go:build !purego

#include "textflag.h"

// CRC-10 by carry-less multiplication (PCLMULQDQ), for inputs of 16 bytes
// or more; crc10.go has the algebra and computes the constants (crc10K).
//
// Every 16-byte block is byte-reversed with PSHUFB, so that as a 128-bit
// integer bit i is the coefficient of x^i (the first byte most
// significant). The message is cut so that its last blocks are whole: the
// first r = len mod 16 bytes (16 if that is 0) make the first block, with
// zero bytes above them. The accumulator A is folded 128 bits on and the
// next block added (A = A_hi·(x^192 mod g) + A_lo·(x^128 mod g) + B, below
// 2^128), then A·x^10 is brought below 2^74 (A_hi·(x^74 mod g) +
// A_lo·(x^10 mod g)), below 2^64 (T_hi·(x^64 mod g) + T_lo), and reduced
// modulo g by Barrett: q = ((U >> 10)·mu) >> 54, CRC = (U + q·g) mod x^10.

// crc10Bswap reverses the 16 bytes of an XMM register with PSHUFB.
DATA crc10Bswap<>+0(SB)/8, $0x08090a0b0c0d0e0f
DATA crc10Bswap<>+8(SB)/8, $0x0001020304050607
GLOBL crc10Bswap<>(SB), RODATA|NOPTR, $16

// crc10Shift, loaded at offset 16-r, is the PSHUFB mask that shifts a
// register right by 16-r bytes: bytes 0..r-1 take bytes 16-r..15, the
// others are zeroed.
DATA crc10Shift<>+0(SB)/8, $0x0706050403020100
DATA crc10Shift<>+8(SB)/8, $0x0f0e0d0c0b0a0908
DATA crc10Shift<>+16(SB)/8, $0x8080808080808080
DATA crc10Shift<>+24(SB)/8, $0x8080808080808080
GLOBL crc10Shift<>(SB), RODATA|NOPTR, $32

// func crc10CLMUL(p []byte) uint16
//
// Register use:
//   X7      byte-reverse mask
//   X0      constants: {x^128, x^192} mod g, then {x^10, x^74} mod g, then {x^64 mod g, mu}
//   X4      {g, 0}
//   X1      accumulator
//   X2, X3  scratch
TEXT ·crc10CLMUL(SB), NOSPLIT, $0-26
	MOVQ  p_base+0(FP), SI
	MOVQ  p_len+8(FP), CX
	MOVOU crc10Bswap<>(SB), X7

	// r = len mod 16, or 16; the first block is the first r bytes.
	MOVQ CX, AX
	ANDQ $15, AX
	JNZ  first
	MOVQ $16, AX

first:
	MOVOU  (SI), X1
	PSHUFB X7, X1
	LEAQ   crc10Shift<>(SB), BX
	MOVQ   $16, DX
	SUBQ   AX, DX
	MOVOU  (BX)(DX*1), X2
	PSHUFB X2, X1
	ADDQ   AX, SI
	SUBQ   AX, CX
	MOVOU  ·crc10K+0(SB), X0

loop:
	TESTQ     CX, CX
	JZ        reduce
	MOVOU     (SI), X2
	PSHUFB    X7, X2
	MOVOA     X1, X3
	PCLMULQDQ $0x00, X0, X1
	PCLMULQDQ $0x11, X0, X3
	PXOR      X3, X1
	PXOR      X2, X1
	ADDQ      $16, SI
	SUBQ      $16, CX
	JMP       loop

reduce:
	// T = A_hi·(x^74 mod g) + A_lo·(x^10 mod g) ≡ A·x^10, below 2^74.
	MOVOU     ·crc10K+16(SB), X0
	MOVOA     X1, X3
	PCLMULQDQ $0x00, X0, X1
	PCLMULQDQ $0x11, X0, X3
	PXOR      X3, X1

	// U = T_hi·(x^64 mod g) + T_lo, below 2^64.
	MOVOU     ·crc10K+32(SB), X0
	MOVOA     X1, X3
	PSRLDQ    $8, X3
	PCLMULQDQ $0x00, X0, X3
	PXOR      X3, X1
	MOVQ      X1, AX

	// q = ((U >> 10)·mu) >> 54.
	MOVQ      AX, DX
	SHRQ      $10, DX
	MOVQ      DX, X3
	PCLMULQDQ $0x10, X0, X3
	MOVQ      X3, R8
	PEXTRQ    $1, X3, R9
	SHRQ      $54, R8
	SHLQ      $10, R9
	ORQ       R9, R8

	// CRC = (U + q·g) mod x^10.
	MOVOU     ·crc10K+48(SB), X4
	MOVQ      R8, X3
	PCLMULQDQ $0x00, X4, X3
	MOVQ      X3, R8
	XORQ      AX, R8
	ANDQ      $0x3ff, R8
	MOVW      R8, ret+24(FP)
	RET
