#include "textflag.h"

// func prefetchHomes(base unsafe.Pointer, keys []uint64, shift uint, homes uint64, slotSize uintptr)
//
// For each key: slot = (key * fibonacciMul) >> shift & homes (u64Map.home, Fibonacci hashing),
// then PREFETCHT0 base + slot*slotSize. A prefetch retires without waiting for its line, so the loop
// costs a few cycles a key and the misses overlap with the work that follows.
TEXT ·prefetchHomes(SB), NOSPLIT, $0-56
	MOVQ base+0(FP), DI
	MOVQ keys_base+8(FP), SI
	MOVQ keys_len+16(FP), BX
	MOVQ shift+32(FP), CX
	MOVQ homes+40(FP), R9
	MOVQ slotSize+48(FP), R10
	MOVQ $0x9e3779b97f4a7c15, R11
	TESTQ BX, BX
	JZ done
loop:
	MOVQ (SI), AX
	IMULQ R11, AX
	SHRQ CX, AX
	ANDQ R9, AX
	IMULQ R10, AX
	PREFETCHT0 (DI)(AX*1)
	ADDQ $8, SI
	DECQ BX
	JNZ loop
done:
	RET
