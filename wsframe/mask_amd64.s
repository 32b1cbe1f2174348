//go:build amd64 && !purego

#include "textflag.h"

// func maskSSE2(p *byte, n int, k64 uint64)
//
// Four 16-byte loads, XORs with the key broadcast to both halves of X0, and
// four stores per iteration: 64 bytes.
TEXT ·maskSSE2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ k64+16(FP), X0
	PUNPCKLQDQ X0, X0
	SHRQ $6, CX
	JZ   done

loop:
	MOVOU (DI), X1
	MOVOU 16(DI), X2
	MOVOU 32(DI), X3
	MOVOU 48(DI), X4
	PXOR  X0, X1
	PXOR  X0, X2
	PXOR  X0, X3
	PXOR  X0, X4
	MOVOU X1, (DI)
	MOVOU X2, 16(DI)
	MOVOU X3, 32(DI)
	MOVOU X4, 48(DI)
	ADDQ  $64, DI
	DECQ  CX
	JNZ   loop

done:
	RET
