package kern

/*
#include "kern.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// GEMM is one product y[M, N] (+)= x[M, K]·Wᵀ (+ bias) with W [N, K].
type GEMM struct {
	Y   []float32 // [M, LdY]; columns [0, N) written
	LdY int       // elements between rows of Y; 0 means N
	X   []float32 // [M, LdX]; columns [0, K) read, rounded to bf16
	LdX int       // elements between rows of X; 0 means K
	M   int       // rows of x and y, 1..MaxRows
	W   Weights   // [N, K]: a matrix, a row range or a column range

	Bias       []float32 // [N] added to each row, or nil
	Accumulate bool      // y += the product (+ bias) instead of y =
}

// MLP is one SwiGLU MLP shard for rows [r0, r1) of the intermediate
// dimension: y[M, H] (+)= down[:, r0:r1] · h with h = bf16(silu(x·gateᵀ) ⊙
// (x·upᵀ)) over gate[r0:r1] and up[r0:r1]. Summed over shards that cover
// every row, the y's make the MLP's output; h is rounded to bf16 as the GPU
// rounds the down product's input.
type MLP struct {
	Y   []float32 // [M, LdY]; columns [0, H) written
	LdY int       // 0 means H
	X   []float32 // [M, LdX], already normalized; columns [0, K) read
	LdX int       // 0 means K
	M   int       // 1..MaxRows

	Gate, Up Weights // [R, K]: row ranges of gate_proj and up_proj
	Down     Weights // [H, R]: the matching column range of down_proj

	Accumulate bool // y += the shard's output instead of y =
}

// MatMul computes op on the pool's workers and returns when it is done.
func (p *Pool) MatMul(op GEMM) error {
	n, k := op.W.Rows, op.W.Cols
	if op.LdY == 0 {
		op.LdY = n
	}
	if op.LdX == 0 {
		op.LdX = k
	}
	if err := op.W.check("matmul: w"); err != nil {
		return err
	}
	if err := checkRows("matmul", op.M, k, n); err != nil {
		return err
	}
	if err := checkMatrix("matmul: x", op.X, op.M, k, op.LdX); err != nil {
		return err
	}
	if err := checkMatrix("matmul: y", op.Y, op.M, n, op.LdY); err != nil {
		return err
	}
	if op.Bias != nil && len(op.Bias) < n {
		return fmt.Errorf("kern: matmul: bias has %d elements for %d outputs", len(op.Bias), n)
	}
	y := span32(op.Y, op.M, n, op.LdY)
	if y.overlaps(span32(op.X, op.M, k, op.LdX)) || y.overlaps(spanW(op.W)) ||
		(op.Bias != nil && y.overlaps(span32(op.Bias, 1, n, n))) {
		return fmt.Errorf("kern: matmul: y overlaps an operand")
	}
	if n == 0 {
		return nil
	}

	var pin runtime.Pinner
	defer pin.Unpin()
	c := p.cOp(&pin, op.M, op.X, op.LdX, op.Y, op.LdY, op.Accumulate)
	c.w = cMat(&pin, op.W)
	if op.Bias != nil {
		pin.Pin(&op.Bias[0])
		c.bias = (*C.float)(unsafe.Pointer(&op.Bias[0]))
	}
	return p.run("matmul", &c, false)
}

// MLP computes op on the pool's workers and returns when it is done.
func (p *Pool) MLP(op MLP) error {
	r, k, h := op.Gate.Rows, op.Gate.Cols, op.Down.Rows
	if op.LdY == 0 {
		op.LdY = h
	}
	if op.LdX == 0 {
		op.LdX = k
	}
	for _, w := range []struct {
		name string
		w    Weights
	}{{"mlp: gate", op.Gate}, {"mlp: up", op.Up}, {"mlp: down", op.Down}} {
		if err := w.w.check(w.name); err != nil {
			return err
		}
	}
	if op.Up.Rows != r || op.Up.Cols != k {
		return fmt.Errorf("kern: mlp: up [%d, %d] differs from gate [%d, %d]", op.Up.Rows, op.Up.Cols, r, k)
	}
	if op.Down.Cols != r {
		return fmt.Errorf("kern: mlp: down has %d columns for %d rows of gate and up", op.Down.Cols, r)
	}
	if r == 0 {
		return fmt.Errorf("kern: mlp: the shard has no rows of gate and up")
	}
	if err := checkRows("mlp", op.M, k, h); err != nil {
		return err
	}
	if err := checkMatrix("mlp: x", op.X, op.M, k, op.LdX); err != nil {
		return err
	}
	if err := checkMatrix("mlp: y", op.Y, op.M, h, op.LdY); err != nil {
		return err
	}
	y := span32(op.Y, op.M, h, op.LdY)
	if y.overlaps(span32(op.X, op.M, k, op.LdX)) || y.overlaps(spanW(op.Gate)) || y.overlaps(spanW(op.Up)) ||
		y.overlaps(spanW(op.Down)) {
		return fmt.Errorf("kern: mlp: y overlaps an operand")
	}
	if h == 0 {
		return nil
	}

	var pin runtime.Pinner
	defer pin.Unpin()
	c := p.cOp(&pin, op.M, op.X, op.LdX, op.Y, op.LdY, op.Accumulate)
	c.gate = cMat(&pin, op.Gate)
	c.up = cMat(&pin, op.Up)
	c.down = cMat(&pin, op.Down)
	return p.run("mlp", &c, true)
}

// cOp fills the fields every operation has, pinning x and y.
func (p *Pool) cOp(pin *runtime.Pinner, m int, x []float32, ldx int, y []float32, ldy int, acc bool) C.kern_op {
	pin.Pin(&x[0])
	pin.Pin(&y[0])
	c := C.kern_op{
		path:     C.int(p.PathFor(m)),
		m:        C.int(m),
		x:        (*C.float)(unsafe.Pointer(&x[0])),
		ldx:      C.int64_t(ldx),
		y:        (*C.float)(unsafe.Pointer(&y[0])),
		ldy:      C.int64_t(ldy),
		amx_kc:   C.int(p.amxKC),
		prefetch: C.int(p.prefetch),
	}
	if acc {
		c.accumulate = 1
	}
	return c
}

// run hands a filled operation to the workers.
func (p *Pool) run(name string, c *C.kern_op, mlp bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c == nil {
		return ErrClosed
	}
	var rc C.int
	if mlp {
		rc = C.kern_mlp(p.c, c)
	} else {
		rc = C.kern_gemm(p.c, c)
	}
	if rc != 0 {
		return fmt.Errorf("kern: %s on path %v: %w", name, Path(c.path), syscall.Errno(rc))
	}
	return nil
}

func cMat(pin *runtime.Pinner, w Weights) C.kern_mat {
	c := C.kern_mat{ld: C.int64_t(w.Stride), rows: C.int(w.Rows), cols: C.int(w.Cols)}
	if len(w.Data) > 0 {
		pin.Pin(&w.Data[0])
		c.p = (*C.uint16_t)(unsafe.Pointer(&w.Data[0]))
	}
	return c
}

// checkRows checks M against MaxRows and the sizes against the C side's int.
func checkRows(op string, m, k, n int) error {
	const maxDim = 1 << 30
	switch {
	case m < 1 || m > MaxRows:
		return fmt.Errorf("kern: %s: M = %d rows, want 1..%d", op, m, MaxRows)
	case k < 1:
		return fmt.Errorf("kern: %s: K = %d, want at least 1", op, k)
	case k >= maxDim || n >= maxDim:
		return fmt.Errorf("kern: %s: K = %d, N = %d too large", op, k, n)
	}
	return nil
}

// checkMatrix checks that a [rows, cols] matrix with row pitch ld fits s.
func checkMatrix(name string, s []float32, rows, cols, ld int) error {
	if ld < cols {
		return fmt.Errorf("kern: %s: row pitch %d below its %d columns", name, ld, cols)
	}
	if need := int64(rows-1)*int64(ld) + int64(cols); need > int64(len(s)) {
		return fmt.Errorf("kern: %s: [%d, %d] with row pitch %d needs %d elements, has %d", name, rows, cols, ld, need, len(s))
	}
	return nil
}

// span is the byte range [lo, hi) a matrix touches.
type span struct{ lo, hi uintptr }

func (a span) overlaps(b span) bool { return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi }

func span32(s []float32, rows, cols, ld int) span {
	if len(s) == 0 || rows == 0 || cols == 0 {
		return span{}
	}
	lo := uintptr(unsafe.Pointer(&s[0]))
	return span{lo, lo + uintptr((rows-1)*ld+cols)*4}
}

func spanW(w Weights) span {
	if len(w.Data) == 0 || w.Rows == 0 || w.Cols == 0 {
		return span{}
	}
	lo := uintptr(unsafe.Pointer(&w.Data[0]))
	return span{lo, lo + uintptr((w.Rows-1)*w.Stride+w.Cols)*2}
}
