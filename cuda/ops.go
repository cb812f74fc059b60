package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// rowThreads is the block size of a kernel that reduces rows of n: a
// multiple of 32 up to threadsPerBlock.
func rowThreads(n int) int { return int(min(max(roundUp(int64(n), 32), 32), threadsPerBlock)) }

// warpRowMax is the longest row the norms reduce with one warp a row
// (vla_*norm_rows) rather than one block.
const warpRowMax = 1024

// LayerNorm holds rows of warpRowMax < n <= layerNormRegMax (n a multiple
// of 4, 16-byte aligned rows) in registers, a warp a row:
// vla_layernorm_reg_<v> with v = ceil(n/128) float4s a lane, from
// layerNormRegMin (kernelSet.layerNormReg).
const (
	layerNormRegMax = 1536
	layerNormRegMin = warpRowMax/128 + 1
)

// warpRowsGrid is the grid of a warp-per-row kernel over rows.
func warpRowsGrid(rows int64) driver.Dim3 {
	per := int64(threadsPerBlock / 32)
	return driver.Dim3{uint32((rows + per - 1) / per), 1, 1}
}

// rowsGrid is the grid of a kernel whose blocks take rows (or row chunks)
// in turn: one block per item up to maxGridBlocks.
func rowsGrid(items int64) driver.Dim3 {
	return driver.Dim3{uint32(max(min(items, maxGridBlocks), 1)), 1, 1}
}

// normArgs checks the operands of a row-wise norm and returns the row
// count and length.
func (b *Backend) normArgs(op string, dst, x, w backend.Tensor) (d, xt, wt *Tensor, rows, n int64, err error) {
	if d, err = b.dstArg(op, "dst", dst); err != nil {
		return
	}
	if xt, err = b.f32Arg(op, "x", x); err != nil {
		return
	}
	if wt, err = b.floatArg(op, "w", w); err != nil {
		return
	}
	n = wt.elements()
	switch {
	case n == 0 || n > math.MaxInt32 || xt.elements()%n != 0:
		err = fmt.Errorf("cuda: %s: x %v is not made of rows of len(w) = %d", op, xt, n)
	case d.elements() != xt.elements():
		err = fmt.Errorf("cuda: %s: dst %v and x %v differ in size", op, d, xt)
	case d.overlaps(xt) && !d.same(xt):
		err = fmt.Errorf("cuda: %s: dst %v partly overlaps x", op, d)
	case xt.elements()/max(n, 1) > math.MaxInt32:
		err = fmt.Errorf("cuda: %s: x %v has more rows than a grid holds", op, xt)
	}
	return d, xt, wt, xt.elements() / max(n, 1), n, err
}

// RMSNorm normalizes each row of x over its last n = len(w) elements:
// dst = w · (x · rsqrt(mean(x²) + eps)), the sum of squares in double. w may
// be F32, F16 or BF16; dst may be x.
func (b *Backend) RMSNorm(dst, x, w backend.Tensor, eps float32) error {
	d, xt, wt, rows, n, err := b.normArgs("rmsnorm", dst, x, w)
	if err != nil || rows == 0 {
		return err
	}
	return b.run(func(g *gpu) error { return g.rmsNorm(d, xt, wt, rows, n, eps) })
}

// rmsNormTo16 queues RMSNorm of rows of n > warpRowMax (a block per row,
// as rmsNorm) with the result rounded to dt, a 16-bit type, into the
// MatMul scratch, whose address it returns: a cuBLAS product's input, the
// bits that rmsNorm then the product's rounding of x would give.
func (g *gpu) rmsNormTo16(xt, wt *Tensor, rows, n int64, eps float32, dt tensor.DType) (driver.DevicePtr, error) {
	p, err := g.scratch(&g.xScratch, rows*n*2)
	if err != nil {
		return 0, fmt.Errorf("cuda: rmsnorm: %w", err)
	}
	g.args.Reset()
	g.args.Ptr(p).Ptr(xt.ptr).Ptr(wt.ptr).I32(dtypeCode(wt.dt)).I32(int32(n)).F32(eps)
	return p, g.launch("rmsnorm to 16 bits", g.k.rmsNorm16[kind16(dt)], driver.Dim3{uint32(rows), 1, 1}, block1D(rowThreads(int(n))), 0)
}

// rmsNorm queues RMSNorm of rows of n: a warp per row up to warpRowMax,
// else a block.
func (g *gpu) rmsNorm(d, xt, wt *Tensor, rows, n int64, eps float32) error {
	g.args.Reset()
	g.args.Ptr(d.ptr).Ptr(xt.ptr).Ptr(wt.ptr).I32(dtypeCode(wt.dt)).I32(int32(n)).F32(eps)
	if n <= warpRowMax {
		g.args.U64(uint64(rows))
		return g.launch("rmsnorm", g.k.rmsNormRows, warpRowsGrid(rows), block1D(threadsPerBlock), 0)
	}
	return g.launch("rmsnorm", g.k.rmsNorm, driver.Dim3{uint32(rows), 1, 1}, block1D(rowThreads(int(n))), 0)
}

// LayerNorm normalizes each row of x over its last n = len(w) elements:
// dst = (x - mean) / sqrt(var + eps) · w + bias (biased variance, sums in
// double). w and bias may be F32, F16 or BF16; bias may be nil; dst may be
// x.
func (b *Backend) LayerNorm(dst, x, w, bias backend.Tensor, eps float32) error {
	ln, err := b.layerNormArgs(dst, x, w, bias, eps)
	if err != nil {
		return err
	}
	d, xt, wt, rows, n := ln.d, ln.x, ln.w, ln.rows, ln.n
	if rows == 0 {
		return nil
	}
	if ln.reg() {
		// The vision encoder's rows of 1152: vla_layernorm (below) took 69
		// µs for [11520, 1152] on the H200, three passes over each row;
		// this, 56-59 µs with the twin (bench/results/cuda-kernels.md run 9).
		return b.run(func(g *gpu) error {
			// Its output rounded to bf16 as well, into the MatMul
			// scratch: the next op's products read it instead of
			// converting (gpu.twin; in the vision encoder, q/k/v and fc1).
			y16, err := g.layerNormReg(ln, true)
			if err == nil && y16 != 0 {
				g.twinOut = twin{src: d.ptr, p: y16, n: d.elements()}
			}
			return err
		})
	}
	bp, bdt := biasArg(ln.b)
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(d.ptr).Ptr(xt.ptr).Ptr(wt.ptr).I32(dtypeCode(wt.dt)).Ptr(bp).I32(bdt).I32(int32(n)).F32(eps)
		if n <= warpRowMax {
			g.args.U64(uint64(rows))
			return g.launch("layernorm", g.k.layerNormRows, warpRowsGrid(rows), block1D(threadsPerBlock), 0)
		}
		return g.launch("layernorm", g.k.layerNorm, driver.Dim3{uint32(rows), 1, 1}, block1D(rowThreads(int(n))), 0)
	})
}

// layerNormOperands is one checked LayerNorm: d = LayerNorm(x) of rows of
// n with weight w, bias b (nil: none) and eps.
type layerNormOperands struct {
	d, x, w, b *Tensor
	rows, n    int64
	eps        float32
}

// layerNormArgs checks LayerNorm's operands.
func (b *Backend) layerNormArgs(dst, x, w, bias backend.Tensor, eps float32) (ln layerNormOperands, err error) {
	ln.eps = eps
	if ln.d, ln.x, ln.w, ln.rows, ln.n, err = b.normArgs("layernorm", dst, x, w); err != nil {
		return ln, err
	}
	if ln.b, err = b.optArg("layernorm", "bias", bias); err != nil {
		return ln, err
	}
	if ln.b != nil && ln.b.elements() != ln.n {
		return ln, fmt.Errorf("cuda: layernorm: bias %v for rows of %d", ln.b, ln.n)
	}
	return ln, nil
}

// reg says whether the norm takes vla_layernorm_reg (rows held in
// registers, a bf16 twin written with them).
func (ln layerNormOperands) reg() bool {
	return ln.n > warpRowMax && ln.n <= layerNormRegMax && ln.n%4 == 0 && (ln.d.ptr|ln.x.ptr)%16 == 0
}

// layerNormReg queues vla_layernorm_reg (ln.reg()) with its output rounded
// to bf16 into the MatMul scratch as well, and returns where (0 where a
// capture could not grow the scratch: then the float output alone). The
// float output is written with writeY, or where there is no twin.
func (g *gpu) layerNormReg(ln layerNormOperands, writeY bool) (driver.DevicePtr, error) {
	y16, err := g.twinFor(ln.d)
	if err != nil {
		return 0, fmt.Errorf("cuda: layernorm: %w", err)
	}
	y := ln.d.ptr
	if !writeY && y16 != 0 {
		y = 0
	}
	bp, bdt := biasArg(ln.b)
	g.args.Reset()
	g.args.Ptr(y).Ptr(y16).Ptr(ln.x.ptr).Ptr(ln.w.ptr).I32(dtypeCode(ln.w.dt)).Ptr(bp).I32(bdt).I32(int32(ln.n)).F32(ln.eps).
		U64(uint64(ln.rows))
	f := g.k.layerNormReg[(ln.n+127)/128-layerNormRegMin]
	return y16, g.launch("layernorm", f, warpRowsGrid(ln.rows), block1D(threadsPerBlock), 0)
}

// Rope rotates x [T, heads*headDim] in place with rotate-half (NeoX)
// rotary embeddings; cos and sin are [T, headDim/2]. Each product is
// rounded before the sum, as the cpu backend does.
func (b *Backend) Rope(x, cos, sin backend.Tensor, headDim int) error {
	const op = "rope"
	xt, err := b.dstArg(op, "x", x)
	if err != nil {
		return err
	}
	ct, err := b.f32Arg(op, "cos", cos)
	if err != nil {
		return err
	}
	st, err := b.f32Arg(op, "sin", sin)
	if err != nil {
		return err
	}
	rows, cols := backend.Matrix(xt)
	if headDim <= 0 || headDim%2 != 0 || cols%headDim != 0 {
		return fmt.Errorf("cuda: rope: head dim %d does not divide the rows of x %v in even halves", headDim, xt)
	}
	half := headDim / 2
	cr, cc := backend.Matrix(ct)
	sr, sc := backend.Matrix(st)
	if cr != rows || cc != half || sr != rows || sc != half {
		return fmt.Errorf("cuda: rope: cos %v / sin %v must be [%d, %d] for x %v", ct, st, rows, half, xt)
	}
	if xt.overlaps(ct) || xt.overlaps(st) {
		return fmt.Errorf("cuda: rope: x %v overlaps cos or sin", xt)
	}
	heads := cols / headDim
	n := int64(rows) * int64(heads) * int64(half)
	if n == 0 {
		return nil
	}
	// The kernel takes 4 consecutive i a thread, over a grid-stride loop of
	// n/4 items, when half is a multiple of 4 and the tensors are 16-byte
	// aligned (as it decides), else a block per row.
	grid := rowsGrid(int64(rows))
	if half%4 == 0 && (xt.ptr|ct.ptr|st.ptr)%16 == 0 {
		grid = elementwiseGrid(n / 4)
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(xt.ptr).Ptr(ct.ptr).Ptr(st.ptr).U64(uint64(rows)).I32(int32(heads)).I32(int32(headDim))
		return g.launch("rope", g.k.rope, grid, block1D(threadsPerBlock), 0)
	})
}

// elementwiseArgs checks an elementwise op: dst and every input F32 of
// one element count; dst may be an input but not overlap one partly.
func (b *Backend) elementwiseArgs(op string, dst backend.Tensor, names []string, in ...backend.Tensor) (*Tensor, []*Tensor, error) {
	d, err := b.dstArg(op, "dst", dst)
	if err != nil {
		return nil, nil, err
	}
	ts := make([]*Tensor, len(in))
	for i, t := range in {
		if ts[i], err = b.f32Arg(op, names[i], t); err != nil {
			return nil, nil, err
		}
		if ts[i].elements() != d.elements() {
			return nil, nil, fmt.Errorf("cuda: %s: %s %v and dst %v differ in size", op, names[i], ts[i], d)
		}
		if d.overlaps(ts[i]) && !d.same(ts[i]) {
			return nil, nil, fmt.Errorf("cuda: %s: dst %v partly overlaps %s", op, d, names[i])
		}
	}
	return d, ts, nil
}

// vecItems is the work items of an elementwise kernel (elementwise.cu):
// n/4 float4 groups when n is a multiple of 4 and every pointer is 16-byte
// aligned, as the kernel decides, else n elements.
func vecItems(d *Tensor, in ...*Tensor) int64 {
	n := d.elements()
	ok := n%4 == 0 && d.ptr%16 == 0
	for _, t := range in {
		ok = ok && t.ptr%16 == 0
	}
	if ok {
		return n / 4
	}
	return n
}

// SiLU computes dst = x·sigmoid(x) = x/(1+e^-x) elementwise, in double
// rounded to float. dst may be x.
func (b *Backend) SiLU(dst, x backend.Tensor) error {
	d, in, err := b.elementwiseArgs("silu", dst, []string{"x"}, x)
	if err != nil || d.elements() == 0 {
		return err
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(d.ptr).Ptr(in[0].ptr).U64(uint64(d.elements()))
		return g.elementwise("silu", g.k.silu, vecItems(d, in...))
	})
}

// SiLUMul computes dst = silu(gate) · up elementwise (silu in double,
// rounded before the product). dst may be gate or up.
func (b *Backend) SiLUMul(dst, gate, up backend.Tensor) error {
	d, in, err := b.elementwiseArgs("silumul", dst, []string{"gate", "up"}, gate, up)
	if err != nil || d.elements() == 0 {
		return err
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(d.ptr).Ptr(in[0].ptr).Ptr(in[1].ptr).U64(uint64(d.elements()))
		return g.elementwise("silumul", g.k.siluMul, vecItems(d, in...))
	})
}

// GELU computes dst = gelu(x) in double, exact (erf) or with the tanh
// approximation when tanh is set. dst may be x.
func (b *Backend) GELU(dst, x backend.Tensor, tanh bool) error {
	d, in, err := b.elementwiseArgs("gelu", dst, []string{"x"}, x)
	if err != nil || d.elements() == 0 {
		return err
	}
	approx := int32(0)
	if tanh {
		approx = 1
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(d.ptr).Ptr(in[0].ptr).U64(uint64(d.elements())).I32(approx)
		return g.elementwise("gelu", g.k.gelu, vecItems(d, in...))
	})
}

// Add computes dst = a + b elementwise; dst may be a or b.
func (b *Backend) Add(dst, x, y backend.Tensor) error {
	d, in, err := b.elementwiseArgs("add", dst, []string{"a", "b"}, x, y)
	if err != nil || d.elements() == 0 {
		return err
	}
	return b.run(func(g *gpu) error { return g.add(d, in[0], in[1]) })
}

// add queues d = a + c, elementwise.
func (g *gpu) add(d, a, c *Tensor) error {
	g.args.Reset()
	g.args.Ptr(d.ptr).Ptr(a.ptr).Ptr(c.ptr).U64(uint64(d.elements()))
	return g.elementwise("add", g.k.add, vecItems(d, a, c))
}

// Copy copies src into dst of the same element count and type (into
// KV-cache rows obtained with Rows, say), in order on the stream.
func (b *Backend) Copy(dst, src backend.Tensor) error {
	const op = "copy"
	d, err := b.arg(op, "dst", dst)
	if err != nil {
		return err
	}
	s, err := b.arg(op, "src", src)
	if err != nil {
		return err
	}
	if d.dt == tensor.BF16 && s.dt == tensor.F32 && d.elements() == s.elements() && !d.readOnly && !d.overlaps(s) {
		// Rounding float rows into a bf16 KV cache (KVCacheDType).
		return b.run(func(g *gpu) error {
			g.args.Reset()
			g.args.Ptr(d.ptr).Ptr(s.ptr).U64(uint64(d.elements()))
			return g.elementwise("copy to bf16", g.k.f32ToBF16, convertItems(d.elements(), s.ptr, d.ptr))
		})
	}
	switch {
	case d.readOnly:
		return fmt.Errorf("cuda: copy: dst %v is a read-only weight", d)
	case d.dt != s.dt || d.elements() != s.elements():
		return fmt.Errorf("cuda: copy: src %v into dst %v", s, d)
	case d.same(s) || d.bytes() == 0:
		return nil
	case d.overlaps(s):
		return fmt.Errorf("cuda: copy: dst %v partly overlaps src", d)
	}
	return b.run(func(g *gpu) error {
		err := g.traced(func() string { return "copy" }, func() error {
			return g.drv.CopyDtoDAsync(d.ptr, s.ptr, d.bytes(), g.stream)
		})
		if err != nil {
			return fmt.Errorf("cuda: copy: %w", err)
		}
		return nil
	})
}

// embChunk is VLA_EMB_CHUNK: the columns an embedding block copies at a
// time.
const embChunk = 1024

// embeddingArgs unwraps the destination [rows, H] and the table [V, H]
// of Embedding and EmbeddingAt.
func (b *Backend) embeddingArgs(op string, dst, table backend.Tensor, rows int) (d, tt *Tensor, err error) {
	if d, err = b.dstArg(op, "dst", dst); err != nil {
		return nil, nil, err
	}
	if tt, err = b.floatArg(op, "table", table); err != nil {
		return nil, nil, err
	}
	if len(tt.shape) != 2 {
		return nil, nil, fmt.Errorf("cuda: %s: table %v must be [V, H]", op, tt)
	}
	if dr, dc := backend.Matrix(d); dr != rows || dc != tt.shape[1] {
		return nil, nil, fmt.Errorf("cuda: %s: dst %v for %d ids of %d", op, d, rows, tt.shape[1])
	}
	return d, tt, nil
}

// Embedding gathers rows ids of table [V, H] (F32, F16 or BF16) into
// dst [len(ids), H] as float32. The ids travel through the pinned staging
// buffer; an id out of range is an error before anything is queued.
func (b *Backend) Embedding(dst, table backend.Tensor, ids []int32) error {
	const op = "embedding"
	d, tt, err := b.embeddingArgs(op, dst, table, len(ids))
	if err != nil {
		return err
	}
	V, H := tt.shape[0], tt.shape[1]
	for i, id := range ids {
		if id < 0 || int(id) >= V {
			return fmt.Errorf("cuda: embedding: id %d (at %d) outside the %d rows of the table", id, i, V)
		}
	}
	if len(ids) == 0 || H == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		if err := g.inCapture("embedding"); err != nil {
			return err
		}
		n := int64(len(ids)) * 4
		idp, err := g.scratch(&g.idsDev, n)
		if err != nil {
			return fmt.Errorf("cuda: embedding: %w", err)
		}
		buf, err := g.stage.take(g.drv, n)
		if err != nil {
			return fmt.Errorf("cuda: embedding: %w", err)
		}
		copy(unsafe.Slice((*int32)(unsafe.Pointer(&buf[0])), len(ids)), ids)
		if err := g.drv.CopyHtoDAsync(idp, unsafe.Pointer(&buf[0]), n, g.stream); err != nil {
			return fmt.Errorf("cuda: embedding: %w", err)
		}
		if err := g.stage.queued(g.drv, g.stream); err != nil {
			return err
		}
		return g.embedding("embedding", d, tt, idp, len(ids))
	})
}
