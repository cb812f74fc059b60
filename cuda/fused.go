package cuda

import (
	"encoding/binary"
	"fmt"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// The fused ops (backend.Fused, kernels/fused.cu and gemv.cu): each runs a
// sequence of ops in one kernel where the shapes allow, with the bits of
// the sequence, and the sequence itself otherwise.

var _ backend.Fused = (*Backend)(nil)

// AddRMSNorm is Add(x, x, d) then RMSNorm(dst, x, w, eps), in one kernel
// for rows longer than a warp's (the residual stream). dst may be d.
func (b *Backend) AddRMSNorm(dst, x, d, w backend.Tensor, eps float32) error {
	const op = "add+rmsnorm"
	xt, in, err := b.elementwiseArgs(op, x, []string{"d"}, d)
	if err != nil {
		return err
	}
	dt, _, wt, rows, n, err := b.normArgs(op, dst, x, w)
	if err != nil {
		return err
	}
	if dt.overlaps(xt) {
		return fmt.Errorf("cuda: %s: dst %v overlaps x", op, dt)
	}
	if dt.overlaps(in[0]) && !dt.same(in[0]) {
		return fmt.Errorf("cuda: %s: dst %v partly overlaps d", op, dt)
	}
	if n <= warpRowMax {
		if err := b.Add(x, x, d); err != nil {
			return err
		}
		return b.RMSNorm(dst, x, w, eps)
	}
	if rows == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(dt.ptr).Ptr(xt.ptr).Ptr(in[0].ptr).Ptr(wt.ptr).I32(dtypeCode(wt.dt)).I32(int32(n)).F32(eps)
		return g.launch(op, g.k.addRMSNorm, driver.Dim3{uint32(rows), 1, 1}, block1D(rowThreads(int(n))), 0)
	})
}

// QKNormRope is the per-head RMSNorm of q with qw and of k with kw, then
// Rope of both, in place: one kernel, a warp per head of a row.
func (b *Backend) QKNormRope(q, k, qw, kw, cos, sin backend.Tensor, headDim int, eps float32) error {
	const op = "qk norm+rope"
	seq := func() error {
		if err := b.RMSNorm(q, q, qw, eps); err != nil {
			return err
		}
		if err := b.RMSNorm(k, k, kw, eps); err != nil {
			return err
		}
		if err := b.Rope(q, cos, sin, headDim); err != nil {
			return err
		}
		return b.Rope(k, cos, sin, headDim)
	}
	qt, err := b.dstArg(op, "q", q)
	if err != nil {
		return err
	}
	kt, err := b.dstArg(op, "k", k)
	if err != nil {
		return err
	}
	qwt, err := b.floatArg(op, "q weight", qw)
	if err != nil {
		return err
	}
	kwt, err := b.floatArg(op, "k weight", kw)
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
	qr, qc := backend.Matrix(qt)
	kr, kc := backend.Matrix(kt)
	half := headDim / 2
	cr, cc := backend.Matrix(ct)
	sr, sc := backend.Matrix(st)
	if headDim <= 0 || headDim%2 != 0 || headDim > warpRowMax || qr != kr || qc%headDim != 0 || kc%headDim != 0 ||
		qwt.elements() != int64(headDim) || kwt.elements() != int64(headDim) ||
		cr != qr || cc != half || sr != qr || sc != half ||
		qt.overlaps(kt) || qt.overlaps(ct) || qt.overlaps(st) || kt.overlaps(ct) || kt.overlaps(st) {
		return seq() // the ops' own checks name what is wrong
	}
	rows, qh, kh := int64(qr), qc/headDim, kc/headDim
	if rows == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(qt.ptr).Ptr(kt.ptr).Ptr(qwt.ptr).I32(dtypeCode(qwt.dt)).Ptr(kwt.ptr).I32(dtypeCode(kwt.dt)).
			Ptr(ct.ptr).Ptr(st.ptr).U64(uint64(rows)).I32(int32(qh)).I32(int32(kh)).I32(int32(headDim)).F32(eps)
		return g.launch(op, g.k.qkNormRope, warpRowsGrid(rows*int64(qh+kh)), block1D(threadsPerBlock), 0)
	})
}

// gemv3Max is the most projections one vla_gemv3 launch takes.
const gemv3Max = 3

// MatMuls computes dsts[i] = x·ws[i]ᵀ + biases[i]. For one row of x and
// 16-bit weights of one type that the GEMV kernel takes, up to three
// projections (q, k and v) run in one launch, each column exactly as
// MatMul computes it. For more rows and 16-bit weights of one type, x is
// rounded to that type once for every cuBLAS product. Otherwise one
// MatMul runs after another.
func (b *Backend) MatMuls(dsts []backend.Tensor, x backend.Tensor, ws, biases []backend.Tensor) error {
	if len(ws) != len(dsts) || (biases != nil && len(biases) != len(dsts)) || len(dsts) < 2 {
		return backend.MatMulsInTurn(b, dsts, x, ws, biases)
	}
	ops := make([]matmulOperands, len(dsts))
	gemv, shared := len(dsts) <= gemv3Max, true
	for i := range dsts {
		var bias backend.Tensor
		if biases != nil {
			bias = biases[i]
		}
		a, err := b.matmulArgs(dsts[i], x, ws[i], bias)
		if err != nil {
			return fmt.Errorf("matmuls %d: %w", i, err)
		}
		for j := range i {
			if a.d.overlaps(ops[j].d) {
				return fmt.Errorf("cuda: matmuls: dst %d %v overlaps dst %d %v", i, a.d, j, ops[j].d)
			}
		}
		sameType := a.w.dt != tensor.F32 && (i == 0 || a.w.dt == ops[0].w.dt)
		gemv = gemv && sameType && a.M == 1 && a.K > 0 && useGEMV(a.x, a.w, a.M, a.K)
		shared = shared && sameType && a.M > gemvMaxM && a.N > 0 && a.K > 0
		ops[i] = a
	}
	switch {
	case gemv:
		return b.run(func(g *gpu) error {
			if g.noGEMV {
				return g.matmulsInTurn(ops)
			}
			return g.gemv3(ops)
		})
	case shared:
		return b.run(func(g *gpu) error {
			xp, err := g.convertX(ops[0].x, ops[0].w.dt)
			if err != nil {
				return err
			}
			for _, a := range ops {
				if err := g.gemm(a.d, xp, a.w, a.bias, a.M, a.N, a.K); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return backend.MatMulsInTurn(b, dsts, x, ws, biases)
}

// matmulsInTurn queues one matmul after another.
func (g *gpu) matmulsInTurn(ops []matmulOperands) error {
	for _, a := range ops {
		if a.M == 0 || a.N == 0 {
			continue
		}
		if err := g.matmul(a.d, a.x, a.w, a.bias, a.M, a.N, a.K); err != nil {
			return err
		}
	}
	return nil
}

// gemv3 queues up to three one-row projections in one vla_gemv3 launch.
func (g *gpu) gemv3(ops []matmulOperands) error {
	// vla_gemv3_args: float *y[3]; const uint4 *w[3]; const void
	// *bias[3]; int bdt[3]; int n[3] — 96 bytes, 8-byte aligned.
	var st [96]byte
	cols := 0
	for i, a := range ops {
		var bp driver.DevicePtr
		bdt := int32(0)
		if a.bias != nil {
			bp, bdt = a.bias.ptr, dtypeCode(a.bias.dt)
		}
		binary.LittleEndian.PutUint64(st[8*i:], uint64(a.d.ptr))
		binary.LittleEndian.PutUint64(st[24+8*i:], uint64(a.w.ptr))
		binary.LittleEndian.PutUint64(st[48+8*i:], uint64(bp))
		binary.LittleEndian.PutUint32(st[72+4*i:], uint32(bdt))
		binary.LittleEndian.PutUint32(st[84+4*i:], uint32(a.N))
		cols += a.N
	}
	f := g.k.gemv3[0]
	if ops[0].w.dt == tensor.F16 {
		f = g.k.gemv3[1]
	}
	g.args.Reset()
	g.args.Struct(st[:], 8).Ptr(ops[0].x.ptr).I32(int32(ops[0].K))
	warps := gemvThreads / 32
	return g.launch("matmuls gemv", f, driver.Dim3{uint32((cols + warps - 1) / warps), 1, 1}, block1D(gemvThreads), 0)
}

// SwiGLU computes gate = silu(x·wgᵀ) · (x·wuᵀ). For one row of x and 16-bit
// weights of one type that the GEMV kernel takes, in one launch that
// leaves up untouched; for more rows with 16-bit weights of one type, x is
// rounded once for both cuBLAS products; otherwise as MatMul, MatMul,
// SiLUMul.
func (b *Backend) SwiGLU(gate, up, x, wg, wu backend.Tensor) error {
	seq := func() error {
		if err := b.MatMul(gate, x, wg, nil); err != nil {
			return err
		}
		if err := b.MatMul(up, x, wu, nil); err != nil {
			return err
		}
		return b.SiLUMul(gate, gate, up)
	}
	ga, err := b.matmulArgs(gate, x, wg, nil)
	if err != nil {
		return err
	}
	ua, err := b.matmulArgs(up, x, wu, nil)
	if err != nil {
		return err
	}
	if ga.M == 0 || ga.N == 0 || ga.K == 0 || ga.N != ua.N || ga.w.dt != ua.w.dt || ga.w.dt == tensor.F32 {
		return seq()
	}
	if ga.M == 1 && useGEMV(ga.x, ga.w, 1, ga.K) && useGEMV(ua.x, ua.w, 1, ua.K) {
		return b.run(func(g *gpu) error {
			if g.noGEMV {
				if err := g.matmulsInTurn([]matmulOperands{ga, ua}); err != nil {
					return err
				}
				return g.siluMul(ga.d, ua.d)
			}
			f := g.k.gemvSwiGLU[0]
			if ga.w.dt == tensor.F16 {
				f = g.k.gemvSwiGLU[1]
			}
			g.args.Reset()
			g.args.Ptr(ga.d.ptr).Ptr(ga.x.ptr).Ptr(ga.w.ptr).Ptr(ua.w.ptr).I32(int32(ga.N)).I32(int32(ga.K))
			warps := gemvThreads / 32
			return g.launch("swiglu gemv", f, driver.Dim3{uint32((ga.N + warps - 1) / warps), 1, 1}, block1D(gemvThreads), 0)
		})
	}
	if ga.M <= gemvMaxM {
		return seq()
	}
	// More rows: x rounded once for both cuBLAS products.
	return b.run(func(g *gpu) error {
		xp, err := g.convertX(ga.x, ga.w.dt)
		if err != nil {
			return err
		}
		if err := g.gemm(ga.d, xp, ga.w, nil, ga.M, ga.N, ga.K); err != nil {
			return err
		}
		if err := g.gemm(ua.d, xp, ua.w, nil, ua.M, ua.N, ua.K); err != nil {
			return err
		}
		return g.siluMul(ga.d, ua.d)
	})
}

// siluMul queues gate = silu(gate)·up.
func (g *gpu) siluMul(gate, up *Tensor) error {
	g.args.Reset()
	g.args.Ptr(gate.ptr).Ptr(gate.ptr).Ptr(up.ptr).U64(uint64(gate.elements()))
	return g.elementwise("silumul", g.k.siluMul, vecItems(gate, gate, up))
}
