//go:build !purego

#include "textflag.h"
#include "go_asm.h"

// PCLMULQDQ folding for the non-reflected (MSB-first) AAL5 CRC-32, after
// Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
// Instruction". See doc.go for the algebra and consts.go for the constants,
// which come from go_asm.h.
//
// Every 16-byte block is byte-reversed with PSHUFB so that, read as a
// 128-bit integer, bit i is the coefficient of x^i of the message polynomial
// (the first byte of the block is the most significant). A carry-less
// product of such values needs no bit reflection or shift.
//
// Register use:
//   X7/Y7     byte-reverse shuffle mask (in both lanes for Y7)
//   X0/Y0     folding constants {lo: x^d mod P, hi: x^(d+64) mod P}
//   X1..X4    accumulators (Y1..Y4 in the VPCLMULQDQ loop)
//   others    scratch
//
// Paths by length, all ending in the same 1x128-bit loop, partial-block
// step and Barrett reduction:
//   >= 256 bytes and useVPCLMUL: 4 YMM accumulators, 128 bytes/iteration,
//                                then the 4 XMM loop for what remains
//   >= 64 bytes:                 4 XMM accumulators, 64 bytes/iteration
//   16..63 bytes:                1 XMM accumulator (three blocks folded in
//                                parallel when there are 48 bytes or more)

// bswapMask reverses the 16 bytes of an XMM register with PSHUFB.
DATA bswapMask<>+0(SB)/8, $0x08090a0b0c0d0e0f
DATA bswapMask<>+8(SB)/8, $0x0001020304050607
GLOBL bswapMask<>(SB), RODATA|NOPTR, $16

// Folding constants, low qword multiplies the low half of a block, high qword
// the high half.
DATA k128<>+0(SB)/8, $const_kX128
DATA k128<>+8(SB)/8, $const_kX192
GLOBL k128<>(SB), RODATA|NOPTR, $16

DATA k256<>+0(SB)/8, $const_kX256
DATA k256<>+8(SB)/8, $const_kX320
GLOBL k256<>(SB), RODATA|NOPTR, $16

DATA k384<>+0(SB)/8, $const_kX384
DATA k384<>+8(SB)/8, $const_kX448
GLOBL k384<>(SB), RODATA|NOPTR, $16

DATA k512<>+0(SB)/8, $const_kX512
DATA k512<>+8(SB)/8, $const_kX576
GLOBL k512<>(SB), RODATA|NOPTR, $16

DATA k1024<>+0(SB)/8, $const_kX1024
DATA k1024<>+8(SB)/8, $const_kX1088
GLOBL k1024<>(SB), RODATA|NOPTR, $16

// Final reduction 128 -> 64 bits: {x^64, x^128} mod P, then x^96 mod P.
DATA kRed<>+0(SB)/8, $const_kX64
DATA kRed<>+8(SB)/8, $const_kX128
DATA kRed<>+16(SB)/8, $const_kX96
DATA kRed<>+24(SB)/8, $0
GLOBL kRed<>(SB), RODATA|NOPTR, $32

// mask32 keeps the low 32 bits of each qword.
DATA mask32<>+0(SB)/8, $0x00000000ffffffff
DATA mask32<>+8(SB)/8, $0x00000000ffffffff
GLOBL mask32<>(SB), RODATA|NOPTR, $16

// Barrett reduction 64 -> 32 bits: mu = floor(x^64/P) and P.
DATA kBarrett<>+0(SB)/8, $const_kMu
DATA kBarrett<>+8(SB)/8, $const_kP
GLOBL kBarrett<>(SB), RODATA|NOPTR, $16

// shiftTab yields PSHUFB masks for the final partial block: loaded at offset
// 16-r it shifts a register right by 16-r bytes (bytes 0..r-1 receive bytes
// 16-r..15, the rest are zeroed); the same mask with every byte's top bit
// flipped shifts left by r bytes.
DATA shiftTab<>+0(SB)/8, $0x0706050403020100
DATA shiftTab<>+8(SB)/8, $0x0f0e0d0c0b0a0908
DATA shiftTab<>+16(SB)/8, $0x8786858483828180
DATA shiftTab<>+24(SB)/8, $0x8f8e8d8c8b8a8988
GLOBL shiftTab<>(SB), RODATA|NOPTR, $32

DATA flip80<>+0(SB)/8, $0x8080808080808080
DATA flip80<>+8(SB)/8, $0x8080808080808080
GLOBL flip80<>(SB), RODATA|NOPTR, $16

// FOLD folds accumulator acc forward with constants in X0 and XORs the
// result into acc, using tmp as scratch: acc = acc.lo*X0.lo ^ acc.hi*X0.hi.
#define FOLD(acc, tmp) \
	MOVOA     acc, tmp; \
	PCLMULQDQ $0x00, X0, acc; \
	PCLMULQDQ $0x11, X0, tmp; \
	PXOR      tmp, acc

// YFOLD folds the two 128-bit lanes of acc forward with constants in Y0
// (both lanes), using tmp as scratch.
#define YFOLD(acc, tmp) \
	VPCLMULQDQ $0x00, Y0, acc, tmp; \
	VPCLMULQDQ $0x11, Y0, acc, acc; \
	VPXOR      tmp, acc, acc

// func update(state uint32, p []byte) uint32
//
// Tail-jumps, with the arguments untouched, to updateCLMUL or to the Go
// function updateGeneric (through its ABI0 wrapper).
TEXT ·update(SB), NOSPLIT, $0-36
	CMPB ·useCLMUL(SB), $0
	JEQ  generic
	CMPQ p_len+16(FP), $const_clmulThreshold
	JB   generic
	JMP  ·updateCLMUL(SB)

generic:
	JMP ·updateGeneric(SB)

// func updateCLMUL(state uint32, p []byte) uint32
TEXT ·updateCLMUL(SB), NOSPLIT, $0-36
	MOVL state+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX

	CMPQ CX, $256
	JB   sse
	CMPB ·useVPCLMUL(SB), $0
	JEQ  sse

	// Four YMM accumulators each holding two consecutive blocks, 128 bytes
	// per iteration, every lane folded forward by 1024 bits.
	VBROADCASTI128 bswapMask<>(SB), Y7
	VMOVD          AX, X6
	VPSLLDQ        $12, X6, X6 // VEX: zeroes the upper lane of Y6
	VMOVDQU        0(SI), Y1
	VMOVDQU        32(SI), Y2
	VMOVDQU        64(SI), Y3
	VMOVDQU        96(SI), Y4
	VPSHUFB        Y7, Y1, Y1
	VPSHUFB        Y7, Y2, Y2
	VPSHUFB        Y7, Y3, Y3
	VPSHUFB        Y7, Y4, Y4
	VPXOR          Y6, Y1, Y1
	ADDQ           $128, SI
	SUBQ           $128, CX
	VBROADCASTI128 k1024<>(SB), Y0

	PCALIGN $16
loop128:
	VMOVDQU    0(SI), Y9
	VMOVDQU    32(SI), Y10
	VMOVDQU    64(SI), Y11
	VMOVDQU    96(SI), Y12
	VPCLMULQDQ $0x00, Y0, Y1, Y5
	VPCLMULQDQ $0x00, Y0, Y2, Y6
	VPCLMULQDQ $0x00, Y0, Y3, Y8
	VPCLMULQDQ $0x00, Y0, Y4, Y13
	VPCLMULQDQ $0x11, Y0, Y1, Y1
	VPCLMULQDQ $0x11, Y0, Y2, Y2
	VPCLMULQDQ $0x11, Y0, Y3, Y3
	VPCLMULQDQ $0x11, Y0, Y4, Y4
	VPSHUFB    Y7, Y9, Y9
	VPSHUFB    Y7, Y10, Y10
	VPSHUFB    Y7, Y11, Y11
	VPSHUFB    Y7, Y12, Y12
	VPXOR      Y5, Y1, Y1
	VPXOR      Y6, Y2, Y2
	VPXOR      Y8, Y3, Y3
	VPXOR      Y13, Y4, Y4
	VPXOR      Y9, Y1, Y1
	VPXOR      Y10, Y2, Y2
	VPXOR      Y11, Y3, Y3
	VPXOR      Y12, Y4, Y4
	ADDQ       $128, SI
	SUBQ       $128, CX
	CMPQ       CX, $128
	JAE        loop128

	// Lane-wise, Y1 and Y2 are 512 bits ahead of Y3 and Y4: fold them on,
	// leaving four consecutive blocks in Y3 and Y4, and carry on with those
	// as the four 128-bit accumulators X1..X4.
	VBROADCASTI128 k512<>(SB), Y0
	YFOLD(Y1, Y5)
	YFOLD(Y2, Y6)
	VPXOR          Y1, Y3, Y3
	VPXOR          Y2, Y4, Y4
	VMOVDQA        X3, X1
	VEXTRACTI128   $1, Y3, X2
	VMOVDQA        X4, X3
	VEXTRACTI128   $1, Y4, X4
	VZEROUPPER
	MOVOU          k512<>(SB), X0
	CMPQ           CX, $64
	JAE            loop64
	JMP            fold4

sse:
	MOVOU bswapMask<>(SB), X7

	// The register state is XORed into the first 32 message bits: put it in
	// the top dword of X6.
	MOVL   AX, X6
	PSLLDQ $12, X6

	CMPQ CX, $64
	JB   single

	// Four accumulators, 64 bytes per iteration.
	MOVOU  0(SI), X1
	MOVOU  16(SI), X2
	MOVOU  32(SI), X3
	MOVOU  48(SI), X4
	PSHUFB X7, X1
	PSHUFB X7, X2
	PSHUFB X7, X3
	PSHUFB X7, X4
	PXOR   X6, X1
	ADDQ   $64, SI
	SUBQ   $64, CX
	CMPQ   CX, $64
	JB     fold4

	MOVOU k512<>(SB), X0

	PCALIGN $16
loop64:
	MOVOU     0(SI), X9
	MOVOU     16(SI), X10
	MOVOU     32(SI), X11
	MOVOU     48(SI), X12
	MOVOA     X1, X5
	MOVOA     X2, X6
	MOVOA     X3, X8
	MOVOA     X4, X13
	PCLMULQDQ $0x00, X0, X1
	PCLMULQDQ $0x00, X0, X2
	PCLMULQDQ $0x00, X0, X3
	PCLMULQDQ $0x00, X0, X4
	PCLMULQDQ $0x11, X0, X5
	PCLMULQDQ $0x11, X0, X6
	PCLMULQDQ $0x11, X0, X8
	PCLMULQDQ $0x11, X0, X13
	PSHUFB    X7, X9
	PSHUFB    X7, X10
	PSHUFB    X7, X11
	PSHUFB    X7, X12
	PXOR      X5, X1
	PXOR      X6, X2
	PXOR      X8, X3
	PXOR      X13, X4
	PXOR      X9, X1
	PXOR      X10, X2
	PXOR      X11, X3
	PXOR      X12, X4
	ADDQ      $64, SI
	SUBQ      $64, CX
	CMPQ      CX, $64
	JAE       loop64

fold4:
	// X1 is 384 bits ahead of X4, X2 256 and X3 128: fold all three onto X4
	// independently and sum.
	MOVOU k384<>(SB), X0
	FOLD(X1, X5)
	MOVOU k256<>(SB), X0
	FOLD(X2, X6)
	MOVOU k128<>(SB), X0
	FOLD(X3, X8)
	PXOR  X2, X1
	PXOR  X3, X1
	PXOR  X4, X1
	JMP   loop16

single:
	// 16..63 bytes: start with one accumulator.
	MOVOU  0(SI), X1
	PSHUFB X7, X1
	PXOR   X6, X1
	ADDQ   $16, SI
	SUBQ   $16, CX
	MOVOU  k128<>(SB), X0
	CMPQ   CX, $32
	JB     loop16

	// 48..63 bytes: fold the first block by 256 bits and the second by 128
	// onto the third in parallel rather than one after the other.
	MOVOU  0(SI), X2
	MOVOU  16(SI), X3
	PSHUFB X7, X2
	PSHUFB X7, X3
	MOVOU  k256<>(SB), X0
	FOLD(X1, X5)
	MOVOU  k128<>(SB), X0
	FOLD(X2, X6)
	PXOR   X2, X1
	PXOR   X3, X1
	ADDQ   $32, SI
	SUBQ   $32, CX

loop16:
	// Fold one block at a time; X0 holds k128.
	CMPQ   CX, $16
	JB     tail
	MOVOU  0(SI), X2
	PSHUFB X7, X2
	FOLD(X1, X5)
	PXOR   X2, X1
	ADDQ   $16, SI
	SUBQ   $16, CX
	JMP    loop16

tail:
	// 0..15 bytes remain. With r of them, the message from the accumulator
	// on is X1·x^(8r) + T where T is the last r bytes. Split X1·x^(8r) into
	// H·x^128 + L (H = X1 >> (128-8r), L = X1 << 8r mod x^128), fill the low
	// r bytes of L with T and fold H onto it by 128 bits. The last 16 bytes
	// of p are loaded (len(p) >= 16), so no byte outside p is touched.
	TESTQ    CX, CX
	JZ       reduce
	MOVOU    -16(SI)(CX*1), X3
	PSHUFB   X7, X3
	LEAQ     shiftTab<>(SB), AX
	MOVQ     $16, DX
	SUBQ     CX, DX
	MOVOU    (AX)(DX*1), X4
	MOVOU    flip80<>(SB), X0
	PXOR     X4, X0
	MOVOA    X1, X2
	PSHUFB   X4, X2
	PSHUFB   X0, X1
	PBLENDVB X0, X3, X1
	MOVOU    k128<>(SB), X0
	FOLD(X2, X5)
	PXOR     X2, X1

reduce:
	// The CRC register is X1·x^32 mod P. With X1 = a3:a2:a1:a0 in 32-bit
	// pieces, X1·x^32 = a3·x^128 + a2·x^96 + a1·x^64 + a0·x^32, which is
	// congruent to the 64-bit
	//   T = a3·(x^128 mod P) ^ a2·(x^96 mod P) ^ a1·(x^64 mod P) ^ a0·x^32
	// whose three products are independent.
	MOVOU     kRed<>+0(SB), X0  // {lo: x^64 mod P, hi: x^128 mod P}
	MOVOU     kRed<>+16(SB), X5 // {lo: x^96 mod P, hi: 0}
	MOVOU     mask32<>(SB), X6
	MOVOA     X1, X2
	PSRLQ     $32, X2           // X2 = {a1, a3}
	PAND      X6, X1            // X1 = {a0, a2}
	MOVOA     X2, X3
	PCLMULQDQ $0x11, X0, X3     // a3·(x^128 mod P)
	PCLMULQDQ $0x00, X0, X2     // a1·(x^64 mod P)
	MOVOA     X1, X4
	PCLMULQDQ $0x01, X5, X4     // a2·(x^96 mod P)
	PSLLQ     $32, X1
	MOVQ      X1, X1            // a0·x^32, high qword cleared
	PXOR      X3, X2
	PXOR      X4, X1
	PXOR      X2, X1

	// Barrett, 64 -> 32 bits: q = floor(T[63:32]·mu / x^32),
	// remainder = T ^ q·P.
	MOVOU     kBarrett<>(SB), X0
	MOVOA     X1, X2
	PSRLQ     $32, X2
	PCLMULQDQ $0x00, X0, X2
	PSRLQ     $32, X2
	PCLMULQDQ $0x10, X0, X2
	PXOR      X2, X1

	MOVQ X1, AX
	MOVL AX, ret+32(FP)
	RET

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
