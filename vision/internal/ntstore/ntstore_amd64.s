#include "textflag.h"

// func patchNT(dst, src *float32, size, rowStride, planeStride, channels, times int)
TEXT ·patchNT(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ size+16(FP), R12
	MOVQ rowStride+24(FP), R10
	MOVQ planeStride+32(FP), R11
	MOVQ channels+40(FP), R8
	MOVQ times+48(FP), DX
	MOVQ R12, CX
	SHLQ $2, CX  // bytes a patch row, a multiple of 16
	SHLQ $2, R10 // bytes between source rows
	SHLQ $2, R11 // bytes between source planes

channel:
	MOVQ DX, R9 // copies of this channel's patch left

copy:
	MOVQ SI, BX  // source row
	MOVQ R12, R13 // rows left

row:
	XORQ AX, AX
	CMPQ CX, $64
	JNE  span

	// size 16, the common case: one cache line a row.
	MOVUPS  0(BX), X0
	MOVUPS  16(BX), X1
	MOVUPS  32(BX), X2
	MOVUPS  48(BX), X3
	MOVNTPS X0, 0(DI)
	MOVNTPS X1, 16(DI)
	MOVNTPS X2, 32(DI)
	MOVNTPS X3, 48(DI)
	JMP     next

span:
	MOVUPS  (BX)(AX*1), X0
	MOVNTPS X0, (DI)(AX*1)
	ADDQ    $16, AX
	CMPQ    AX, CX
	JB      span

next:
	ADDQ CX, DI
	ADDQ R10, BX
	DECQ R13
	JNZ  row
	DECQ R9
	JNZ  copy
	ADDQ R11, SI
	DECQ R8
	JNZ  channel
	RET

// func fence()
TEXT ·fence(SB), NOSPLIT, $0-0
	SFENCE
	RET
