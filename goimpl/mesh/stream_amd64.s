#include "textflag.h"

// func streamNT(dst, src *byte, n int)
//
// Copies n bytes, n a positive multiple of 64, with non-temporal 16-byte
// stores (SSE2 MOVNTDQ, which every amd64 CPU has) to a 16-byte aligned
// dst, then fences them so that later stores are ordered after.
TEXT ·streamNT(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
next:
	MOVOU	0(SI), X0
	MOVOU	16(SI), X1
	MOVOU	32(SI), X2
	MOVOU	48(SI), X3
	MOVNTO	X0, 0(DI)
	MOVNTO	X1, 16(DI)
	MOVNTO	X2, 32(DI)
	MOVNTO	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DI
	SUBQ	$64, CX
	JNZ	next
	SFENCE
	RET
