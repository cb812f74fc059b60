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
		return backend.AddRMSNormSeq(b, dst, x, d, w, eps)
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

// qkOperands are QKNormRope's checked operands.
type qkOperands struct {
	q, k, qw, kw, cos, sin *Tensor
	rows, qh, kh, hd       int
}

// qkArgs checks QKNormRope's operands for the fused kernel: ok is false
// (with no error) where the ops one by one must run, whose own checks
// then name what is wrong.
func (b *Backend) qkArgs(op string, q, k, qw, kw, cos, sin backend.Tensor, headDim int) (a qkOperands, ok bool, err error) {
	if a.q, err = b.dstArg(op, "q", q); err != nil {
		return a, false, err
	}
	if a.k, err = b.dstArg(op, "k", k); err != nil {
		return a, false, err
	}
	if a.qw, err = b.floatArg(op, "q weight", qw); err != nil {
		return a, false, err
	}
	if a.kw, err = b.floatArg(op, "k weight", kw); err != nil {
		return a, false, err
	}
	if a.cos, err = b.f32Arg(op, "cos", cos); err != nil {
		return a, false, err
	}
	if a.sin, err = b.f32Arg(op, "sin", sin); err != nil {
		return a, false, err
	}
	qr, qc := backend.Matrix(a.q)
	kr, kc := backend.Matrix(a.k)
	half := headDim / 2
	cr, cc := backend.Matrix(a.cos)
	sr, sc := backend.Matrix(a.sin)
	if headDim <= 0 || headDim%2 != 0 || headDim > warpRowMax || qr != kr || qc%headDim != 0 || kc%headDim != 0 ||
		a.qw.elements() != int64(headDim) || a.kw.elements() != int64(headDim) ||
		cr != qr || cc != half || sr != qr || sc != half ||
		a.q.overlaps(a.k) || a.q.overlaps(a.cos) || a.q.overlaps(a.sin) || a.k.overlaps(a.cos) || a.k.overlaps(a.sin) {
		return a, false, nil
	}
	a.rows, a.qh, a.kh, a.hd = qr, qc/headDim, kc/headDim, headDim
	return a, true, nil
}

// qkPer is VLA_QK_PER: the heads a warp of vla_qk_norm_rope(_cache) takes
// at head dim 128 over more than one row.
const qkPer = 4

// qkHeads returns the heads a warp takes (per) and the grid for items
// heads of rows: one a warp for a decode row (as soon as possible) and
// head dims other than 128, else qkPer, their loads issued together.
func (g *gpu) qkHeads(a qkOperands, items int64) (int32, driver.Dim3) {
	if a.hd != 128 || a.rows <= 1 || g.qkOne {
		return 1, warpRowsGrid(items)
	}
	return qkPer, warpRowsGrid((items + qkPer - 1) / qkPer)
}

// QKNormRope is the per-head RMSNorm of q with qw and of k with kw, then
// Rope of both, in place: one kernel, a warp per head of a row.
func (b *Backend) QKNormRope(q, k, qw, kw, cos, sin backend.Tensor, headDim int, eps float32) error {
	a, ok, err := b.qkArgs("qk norm+rope", q, k, qw, kw, cos, sin, headDim)
	if err != nil {
		return err
	}
	if !ok {
		return backend.QKNormRopeSeq(b, q, k, qw, kw, cos, sin, headDim, eps)
	}
	if a.rows == 0 {
		return nil
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(a.q.ptr).Ptr(a.k.ptr).Ptr(a.qw.ptr).I32(dtypeCode(a.qw.dt)).Ptr(a.kw.ptr).I32(dtypeCode(a.kw.dt)).
			Ptr(a.cos.ptr).Ptr(a.sin.ptr).U64(uint64(a.rows)).I32(int32(a.qh)).I32(int32(a.kh)).I32(int32(a.hd)).F32(eps)
		per, grid := g.qkHeads(a, int64(a.rows)*int64(a.qh+a.kh))
		g.args.I32(per)
		return g.launch("qk norm+rope", g.k.qkNormRope, grid, block1D(threadsPerBlock), 0)
	})
}

// QKNormRopeCache is QKNormRope, then k's and v's rows stored into the
// caches kc and vc at at: one kernel, whose extra warps copy v.
func (b *Backend) QKNormRopeCache(q, k, v, qw, kw, cos, sin backend.Tensor, headDim int, eps float32, kc, vc backend.Tensor, at backend.CacheAt) error {
	c, ok, err := b.qkCacheArgs(q, k, v, qw, kw, cos, sin, headDim, eps, kc, vc, at)
	if err != nil {
		return err
	}
	if !ok {
		return backend.QKNormRopeCacheSeq(b, q, k, v, qw, kw, cos, sin, headDim, eps, kc, vc, at)
	}
	if c.rows == 0 {
		return nil
	}
	return b.run(func(g *gpu) error { return g.qkNormRopeCache(c) })
}

// qkCacheCall is QKNormRopeCache's checked call.
type qkCacheCall struct {
	qkOperands
	v, kc, vc *Tensor
	eps       float32
	at        int     // the cache row, where pos is nil
	pos       *Tensor // the cache row on the device, or nil
	crows     int     // the caches' rows
}

// qkCacheArgs checks QKNormRopeCache's operands for the fused kernel: ok
// is false (with no error) where the ops one by one must run.
func (b *Backend) qkCacheArgs(q, k, v, qw, kw, cos, sin backend.Tensor, headDim int, eps float32, kc, vc backend.Tensor, at backend.CacheAt) (c qkCacheCall, ok bool, err error) {
	const op = "qk norm+rope+cache"
	c.eps, c.at = eps, max(at.Pos, 0)
	if c.qkOperands, ok, err = b.qkArgs(op, q, k, qw, kw, cos, sin, headDim); err != nil {
		return c, false, err
	}
	if c.v, err = b.f32Arg(op, "v", v); err != nil {
		return c, false, err
	}
	if c.kc, err = b.arg(op, "k cache", kc); err != nil {
		return c, false, err
	}
	if c.vc, err = b.arg(op, "v cache", vc); err != nil {
		return c, false, err
	}
	if at.PosAt != nil {
		if c.pos, err = b.posArg(op, at.PosAt); err != nil {
			return c, false, err
		}
	}
	if ok {
		crows, ccols := backend.Matrix(c.kc)
		vrows, vcols := backend.Matrix(c.vc)
		vr, vcc := backend.Matrix(c.v)
		kct, vct, a := c.kc, c.vc, c.qkOperands
		ok = !kct.readOnly && !vct.readOnly && kct.dt == vct.dt && (kct.dt == tensor.BF16 || kct.dt == tensor.F32) &&
			ccols == a.kh*a.hd && vcols == ccols && vrows == crows && vr == a.rows && vcc == ccols &&
			!kct.overlaps(vct) && !kct.overlaps(a.k) && !kct.overlaps(c.v) && !vct.overlaps(c.v) && !vct.overlaps(a.k) &&
			!c.v.overlaps(a.q) && !c.v.overlaps(a.k) && (c.pos != nil || at.Pos >= 0 && at.Pos+a.rows <= crows)
		c.crows = crows
	}
	return c, ok, nil
}

// qkNormRopeCache queues vla_qk_norm_rope_cache for c (rows > 0).
func (g *gpu) qkNormRopeCache(c qkCacheCall) error {
	const op = "qk norm+rope+cache"
	a := c.qkOperands
	var pp driver.DevicePtr
	if c.pos != nil {
		pp = c.pos.ptr
	}
	g.args.Reset()
	g.args.Ptr(a.q.ptr).Ptr(a.k.ptr).Ptr(c.v.ptr).Ptr(a.qw.ptr).I32(dtypeCode(a.qw.dt)).Ptr(a.kw.ptr).I32(dtypeCode(a.kw.dt)).
		Ptr(a.cos.ptr).Ptr(a.sin.ptr).U64(uint64(a.rows)).I32(int32(a.qh)).I32(int32(a.kh)).I32(int32(a.hd)).F32(c.eps).
		Ptr(c.kc.ptr).Ptr(c.vc.ptr).I32(dtypeCode(c.kc.dt)).U64(uint64(c.at)).Ptr(pp).U64(uint64(c.crows)).
		I32(boolArg(pp != 0)) // a decode step: the next kernel, AttentionAt's, may load its old rows now
	per, grid := g.qkHeads(a, int64(a.rows)*int64(a.qh+2*a.kh))
	g.args.I32(per)
	return g.launch(op, g.k.qkNormRopeCache, grid, block1D(threadsPerBlock), 0)
}

// QKNormRopeCacheAttentionAt is QKNormRopeCache at pos then AttentionAt
// (backend.QKAttentionAt). For one query of heads of 128 in groups of four
// over bf16 caches whose rows o.NKV counts, one kernel does both (vla_attn_decode_bf16_g4_qk: the
// same bits in dst and the caches; q and k keep the products' values);
// otherwise the two ops' kernels run in turn.
func (b *Backend) QKNormRopeCacheAttentionAt(dst, q, k, v, qw, kw, cos, sin backend.Tensor, eps float32, kc, vc backend.Tensor, o backend.AttnOpts, pos backend.Tensor) error {
	seq := func() error {
		return backend.QKNormRopeCacheAttentionAtSeq(b, dst, q, k, v, qw, kw, cos, sin, eps, kc, vc, o, pos)
	}
	c, ok, err := b.qkCacheArgs(q, k, v, qw, kw, cos, sin, o.HeadDim, eps, kc, vc, backend.CacheAt{PosAt: pos})
	if err != nil {
		return err
	}
	if !ok || c.pos == nil || c.rows == 0 {
		return seq()
	}
	a, err := b.attnArgs(dst, q, kc, vc, o, c.pos, nil) // o.NKV: the most keys it may see, as AttentionAt's
	if err != nil {
		return err
	}
	if a.tq != c.rows || a.d.overlaps(c.k) || a.d.overlaps(c.v) || a.d.overlaps(c.cos) || a.d.overlaps(c.sin) {
		return seq()
	}
	// The fused kernel guards its cache store with the keys it may see (as
	// the other kernel guards it with the caches' rows): they must agree.
	fused := a.tq == 1 && c.hd == 128 && c.qh == 4*c.kh && o.Heads == c.qh && o.KVHeads == c.kh &&
		c.kc.dt == tensor.BF16 && c.q.ptr%16 == 0 && c.v.ptr%16 == 0 && o.NKV == c.crows
	return b.run(func(g *gpu) error {
		if fused && !g.noQKAttn && attnPath(a, g.exactAttention) == pathDecode {
			return g.attnDecodeQK(a, c)
		}
		if err := g.qkNormRopeCache(c); err != nil {
			return err
		}
		return g.attend(a)
	})
}

// gemv3Max is the most projections one vla_gemv3 launch takes.
const gemv3Max = 3

// MatMuls computes dsts[i] = x·ws[i]ᵀ + biases[i]. For one row of x and
// 16-bit weights of one type that the GEMV kernel takes, up to three
// projections (q, k and v) run in one launch, each column exactly as
// MatMul computes it. For more rows and 16-bit weights of one type, x is
// rounded to that type once for every product (for 2 to 64 rows, up to
// three in one vla_gemm_rows launch, again each as MatMul computes it).
// Otherwise one MatMul runs after another.
func (b *Backend) MatMuls(dsts []backend.Tensor, x backend.Tensor, ws, biases []backend.Tensor) error {
	if len(ws) != len(dsts) || (biases != nil && len(biases) != len(dsts)) || len(dsts) < 2 {
		return backend.MatMulsInTurn(b, dsts, x, ws, biases)
	}
	ops, gemv, shared, err := b.matmulsArgs(dsts, x, ws, biases)
	if err != nil {
		return err
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
			return g.gemmsFrom(xp, ops)
		})
	}
	return backend.MatMulsInTurn(b, dsts, x, ws, biases)
}

// matmulsArgs checks MatMuls' operands (as many weights as destinations,
// biases nil or as many) and says whether they take one GEMV launch or
// share one rounding of x for cuBLAS.
func (b *Backend) matmulsArgs(dsts []backend.Tensor, x backend.Tensor, ws, biases []backend.Tensor) (ops []matmulOperands, gemv, shared bool, err error) {
	ops = make([]matmulOperands, len(dsts))
	gemv, shared = len(dsts) <= gemv3Max, true
	for i := range dsts {
		var bias backend.Tensor
		if biases != nil {
			bias = biases[i]
		}
		a, err := b.matmulArgs(dsts[i], x, ws[i], bias)
		if err != nil {
			return nil, false, false, fmt.Errorf("matmuls %d: %w", i, err)
		}
		for j := range i {
			if a.d.overlaps(ops[j].d) {
				return nil, false, false, fmt.Errorf("cuda: matmuls: dst %d %v overlaps dst %d %v", i, a.d, j, ops[j].d)
			}
		}
		sameType := a.w.dt != tensor.F32 && (i == 0 || a.w.dt == ops[0].w.dt)
		gemv = gemv && sameType && a.M == 1 && a.K > 0 && useGEMV(a.x, a.w, a.M, a.K)
		shared = shared && sameType && a.M > gemvMaxM && a.N > 0 && a.K > 0
		ops[i] = a
	}
	return ops, gemv, shared, nil
}

// RMSNormMatMuls computes dsts[i] = RMSNorm(x)·ws[i]ᵀ + biases[i]. Where
// MatMuls would round its input once for several cuBLAS products and
// RMSNorm take a block per row, the norm writes that rounded input itself
// (rmsNormTo16: the same bits, no float copy, no conversion pass; h
// untouched). For one row whose products take one streamed GEMV launch,
// that launch normalizes x itself (gpu.normStream: the same bits, h
// untouched). Otherwise RMSNorm into h, then MatMuls.
func (b *Backend) RMSNormMatMuls(dsts []backend.Tensor, h, x, nw backend.Tensor, eps float32, ws, biases []backend.Tensor) error {
	seq := func() error { return backend.RMSNormMatMulsSeq(b, dsts, h, x, nw, eps, ws, biases) }
	ht, xt, wt, rows, n, err := b.normArgs("rmsnorm+matmuls", h, x, nw)
	if err != nil {
		return err
	}
	if rows == 1 && len(dsts) >= 2 && len(ws) == len(dsts) && (biases == nil || len(biases) == len(dsts)) {
		ops, gemv, _, err := b.matmulsArgs(dsts, h, ws, biases)
		if err != nil {
			return err
		}
		apart := false // an output overlaps x or h: the sequence's checks and order
		for _, a := range ops {
			apart = apart || a.d.overlaps(xt) || a.d.overlaps(ht)
		}
		if gemv && !apart {
			// The sequence's launches (RMSNorm, then MatMuls' GEMV), unless
			// the streamed GEMV takes the norm.
			return b.run(func(g *gpu) error {
				if !g.noGEMV && g.normStream(xt, ops[0].K) {
					return g.gemvStream("norm+matmuls gemv stream", withX(ops, xt), gstreamModeSet, &gstreamNorm{w: wt, eps: eps})
				}
				if err := g.rmsNorm(ht, xt, wt, rows, n, eps); err != nil {
					return err
				}
				if g.noGEMV {
					return g.matmulsInTurn(ops)
				}
				return g.gemv3(ops)
			})
		}
	}
	// One row (decode) takes the GEMV kernels, which read x as float: the
	// sequence, without checking the products twice.
	if rows <= gemvMaxM || n <= warpRowMax || len(ws) != len(dsts) || (biases != nil && len(biases) != len(dsts)) ||
		len(dsts) < 2 {
		return seq()
	}
	ops, _, shared, err := b.matmulsArgs(dsts, h, ws, biases)
	if err != nil {
		return err
	}
	if !shared {
		return seq()
	}
	for i, a := range ops {
		if a.d.overlaps(xt) || a.d.overlaps(ht) {
			return fmt.Errorf("cuda: rmsnorm+matmuls: dst %d %v overlaps x %v or h %v", i, a.d, xt, ht)
		}
	}
	return b.run(func(g *gpu) error {
		hp, err := g.rmsNormTo16(xt, wt, rows, n, eps, ops[0].w.dt)
		if err != nil {
			return err
		}
		return g.gemmsFrom(hp, ops)
	})
}

// gemmsFrom queues the products of ops from xp, their common input
// already in their weights' type: of 2 to 64 rows, several in one
// vla_gemm_rows launch (each as MatMul computes it: the kernel's sums
// depend on a product's shape alone), else one cuBLAS call each.
func (g *gpu) gemmsFrom(xp driver.DevicePtr, ops []matmulOperands) error {
	if len(ops) > 1 && g.rowsAll(xp, ops) {
		if ok, err := g.gemmRows(xp, ops, rowsPlain, 0); ok || err != nil {
			return err
		}
	}
	for _, a := range ops {
		if err := g.gemm(a.d, xp, a.w, a.bias, a.M, a.N, a.K); err != nil {
			return err
		}
	}
	return nil
}

// withX is ops with input x instead.
func withX(ops []matmulOperands, x *Tensor) []matmulOperands {
	out := make([]matmulOperands, len(ops))
	for i, a := range ops {
		a.x = x
		out[i] = a
	}
	return out
}

// RMSNormMLP computes x += SwiGLUDown(RMSNorm(x)) (see backend.Fused): the
// norm into h, then, for 16-bit weights, the down product added to x by
// its own kernel: for one row the GEMV kernels (vla_gemv_swiglu, then
// vla_gemv adding its columns to x), for more rows as SwiGLUDown with the
// down GEMM accumulating into x (cuBLAS's beta = 1); otherwise the
// sequence. Either way without an Add, in the same bits.
func (b *Backend) RMSNormMLP(x, h, gate, up, nw backend.Tensor, eps float32, wg, wu, wd backend.Tensor) error {
	const op = "rmsnorm+mlp"
	ht, xt, wt, rows, n, err := b.normArgs(op, h, x, nw)
	if err != nil {
		return err
	}
	ga, ua, err := b.swigluArgs(op, gate, up, h, wg, wu)
	if err != nil {
		return err
	}
	da, err := b.matmulArgs(h, gate, wd, nil)
	if err != nil {
		return err
	}
	seq := func() error { return backend.RMSNormMLPSeq(b, x, h, gate, up, nw, eps, wg, wu, wd) }
	if ga.M == 0 || ga.N == 0 || ga.K == 0 || ga.N != ua.N || ga.w.dt != ua.w.dt || !is16(ga.w.dt) || !is16(da.w.dt) ||
		ht.overlaps(xt) || ga.d.overlaps(xt) || ua.d.overlaps(xt) || ga.d.overlaps(ht) || ua.d.overlaps(ht) {
		return seq()
	}
	if ga.M == 1 {
		if !useGEMV(ga.x, ga.w, 1, ga.K) || !useGEMV(ua.x, ua.w, 1, ua.K) || !useGEMV(da.x, da.w, 1, da.K) {
			return seq()
		}
		return b.run(func(g *gpu) error {
			if !g.noGEMV && g.normStream(xt, ga.K) {
				// The norm in the gate·up launch itself.
				glu := withX([]matmulOperands{ga, ua}, xt)
				if err := g.gemvStream("norm+swiglu gemv stream", glu, gstreamModeGLU, &gstreamNorm{w: wt, eps: eps}); err != nil {
					return err
				}
				return g.gemv(xt, da.x, da.w, nil, da.M, da.N, da.K, true)
			}
			if err := g.rmsNorm(ht, xt, wt, rows, n, eps); err != nil {
				return err
			}
			if g.noGEMV { // every product through cuBLAS
				if err := g.matmulsInTurn([]matmulOperands{ga, ua}); err != nil {
					return err
				}
				if err := g.siluMul(ga.d, ua.d); err != nil {
					return err
				}
				if err := g.matmul(da.d, da.x, da.w, nil, da.M, da.N, da.K); err != nil {
					return err
				}
				return g.add(xt, xt, da.d)
			}
			if err := g.gemvSwiGLU(ga, ua); err != nil {
				return err
			}
			return g.gemv(xt, da.x, da.w, nil, da.M, da.N, da.K, true)
		})
	}
	return b.run(func(g *gpu) error {
		// The norm's output as the gate and up products read it: written
		// in their type directly where RMSNorm takes a block per row.
		var xp driver.DevicePtr
		var err error
		if n > warpRowMax {
			xp, err = g.rmsNormTo16(xt, wt, rows, n, eps, ga.w.dt)
		} else if err = g.rmsNorm(ht, xt, wt, rows, n, eps); err == nil {
			xp, err = g.convertX(ht, ga.w.dt)
		}
		if err != nil {
			return err
		}
		hp, err := g.swigluTo16(xp, ga, ua, da.w.dt)
		if err != nil {
			return fmt.Errorf("cuda: %s: %w", op, err)
		}
		return g.gemmBeta(xt, hp, da.w, nil, da.M, da.N, da.K, 1)
	})
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
	if g.useStream(ops[0].K) {
		return g.gemvStream("matmuls gemv stream", ops, gstreamModeSet, nil)
	}
	// vla_gemv3_args: float *y[3]; const uint4 *w[3]; const void
	// *bias[3]; int bdt[3]; int n[3] — 96 bytes, 8-byte aligned.
	var st [96]byte
	cols := 0
	for i, a := range ops {
		bp, bdt := biasArg(a.bias)
		binary.LittleEndian.PutUint64(st[8*i:], uint64(a.d.ptr))
		binary.LittleEndian.PutUint64(st[24+8*i:], uint64(a.w.ptr))
		binary.LittleEndian.PutUint64(st[48+8*i:], uint64(bp))
		binary.LittleEndian.PutUint32(st[72+4*i:], uint32(bdt))
		binary.LittleEndian.PutUint32(st[84+4*i:], uint32(a.N))
		cols += a.N
	}
	f := g.k.gemv3[kind16(ops[0].w.dt)]
	g.args.Reset()
	early := true
	for _, a := range ops {
		early = early && g.gemvEarly(a.w)
	}
	g.args.Struct(st[:], 8).Ptr(ops[0].x.ptr).I32(int32(ops[0].K)).I32(boolArg(early))
	return g.launch("matmuls gemv", f, gemvGrid(cols), block1D(gemvThreads), 0)
}

// gemvSwiGLU queues gate = silu(x·wgᵀ)·(x·wuᵀ) for one row of x in one
// vla_gemv_swiglu launch.
func (g *gpu) gemvSwiGLU(ga, ua matmulOperands) error {
	if g.useStream(ga.K) {
		return g.gemvStream("swiglu gemv stream", []matmulOperands{ga, ua}, gstreamModeGLU, nil)
	}
	f := g.k.gemvSwiGLU[kind16(ga.w.dt)]
	g.args.Reset()
	g.args.Ptr(ga.d.ptr).Ptr(ga.x.ptr).Ptr(ga.w.ptr).Ptr(ua.w.ptr).I32(int32(ga.N)).I32(int32(ga.K)).
		I32(boolArg(g.gemvEarly(ga.w)))
	return g.launch("swiglu gemv", f, gemvGrid(ga.N), block1D(gemvThreads), 0)
}

// SwiGLU computes gate = silu(x·wgᵀ) · (x·wuᵀ). For one row of x and 16-bit
// weights of one type that the GEMV kernel takes, in one launch that
// leaves up untouched; for more rows with 16-bit weights of one type, x is
// rounded once for both cuBLAS products; otherwise as MatMul, MatMul,
// SiLUMul.
func (b *Backend) SwiGLU(gate, up, x, wg, wu backend.Tensor) error {
	seq := func() error { return backend.SwiGLUSeq(b, gate, up, x, wg, wu) }
	ga, ua, err := b.swigluArgs("swiglu", gate, up, x, wg, wu)
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
			return g.gemvSwiGLU(ga, ua)
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
		if err := g.gateUp(xp, ga, ua); err != nil {
			return err
		}
		return g.siluMul(ga.d, ua.d)
	})
}

// swigluArgs checks the gate and up products of SwiGLU and SwiGLUDown.
func (b *Backend) swigluArgs(op string, gate, up, x, wg, wu backend.Tensor) (ga, ua matmulOperands, err error) {
	if ga, err = b.matmulArgs(gate, x, wg, nil); err != nil {
		return ga, ua, err
	}
	if ua, err = b.matmulArgs(up, x, wu, nil); err != nil {
		return ga, ua, err
	}
	if ga.d.overlaps(ua.d) {
		return ga, ua, fmt.Errorf("cuda: %s: gate %v overlaps up %v", op, ga.d, ua.d)
	}
	return ga, ua, nil
}

// gateUp queues the cuBLAS products gate = x·wgᵀ and up = x·wuᵀ from xp,
// x rounded to the weights' type once.
func (g *gpu) gateUp(xp driver.DevicePtr, ga, ua matmulOperands) error {
	return g.gemmsFrom(xp, []matmulOperands{ga, ua})
}

// siluUnroll is VLA_SILU_U: the groups of four elements a thread of the
// vla_silu_mul kernels takes a step (their grids are that much smaller).
const siluUnroll = 4

// siluMul queues gate = silu(gate)·up.
func (g *gpu) siluMul(gate, up *Tensor) error {
	g.args.Reset()
	g.args.Ptr(gate.ptr).Ptr(gate.ptr).Ptr(up.ptr).U64(uint64(gate.elements()))
	items := vecItems(gate, gate, up)
	if items < gate.elements() { // VLA_SILU_U groups of 4 a thread
		items = (items + siluUnroll - 1) / siluUnroll
	}
	return g.elementwise("silumul", g.k.siluMul, items)
}

// MatMulGELU computes dst = gelu(x·wᵀ + bias): for products that go to
// cuBLAS, the bias in cuBLASLt's epilogue (gpu.epilogues) and the GELU in
// one pass after, or the bias and the GELU in one pass after the GEMM;
// otherwise MatMul then GELU.
func (b *Backend) MatMulGELU(dst, x, w, bias backend.Tensor, tanh bool) error {
	a, err := b.matmulArgs(dst, x, w, bias)
	if err != nil || a.M == 0 || a.N == 0 {
		return err
	}
	if a.K == 0 || useGEMV(a.x, a.w, a.M, a.K) {
		return backend.MatMulGELUSeq(b, dst, x, w, bias, tanh)
	}
	act := int32(1)
	if tanh {
		act = 2
	}
	return b.run(func(g *gpu) error {
		if a.bias != nil && is16(a.w.dt) && g.epilogues(a.M) {
			// The bias in cuBLASLt's epilogue, as MatMul adds it, then
			// the GELU.
			ok, err := g.biasProduct(a.d, a.x, a.w, a.bias, a.M, a.N, a.K, 0)
			if err != nil {
				return err
			}
			if ok {
				return g.biasAct("matmul gelu", a.d, nil, a.M, a.N, act)
			}
		}
		if err := g.matmul(a.d, a.x, a.w, nil, a.M, a.N, a.K); err != nil {
			return err
		}
		return g.biasAct("matmul bias+gelu", a.d, a.bias, a.M, a.N, act)
	})
}

// MatMulResidual computes x += a·wᵀ + bias through h: for one row and the
// GEMV kernel, the kernel adds each column to x itself; for products that
// go to cuBLAS, without a bias and with a 16-bit weight, the GEMM adds its
// product to x (beta = 1; h untouched either way), with a bias and
// cuBLASLt (gpu.epilogues) one product adding x and the bias, (a·wᵀ + x)
// + b, else the bias and the residual sum in one pass after the GEMM (h
// is left without the bias); otherwise MatMul then Add.
func (b *Backend) MatMulResidual(x, h, a, w, bias backend.Tensor) error {
	m, err := b.matmulArgs(h, a, w, bias)
	if err != nil {
		return err
	}
	xt, in, err := b.elementwiseArgs("matmul+residual", x, []string{"h"}, h)
	if err != nil {
		return err
	}
	if xt.overlaps(in[0]) || xt.overlaps(m.x) {
		return fmt.Errorf("cuda: matmul+residual: x %v overlaps h or a", xt)
	}
	if m.M == 0 || m.N == 0 {
		return nil
	}
	if m.K == 0 {
		return backend.MatMulResidualSeq(b, x, h, a, w, bias)
	}
	if useGEMV(m.x, m.w, m.M, m.K) {
		return b.run(func(g *gpu) error {
			if g.noGEMV {
				if err := g.matmul(m.d, m.x, m.w, m.bias, m.M, m.N, m.K); err != nil {
					return err
				}
				return g.add(xt, xt, m.d)
			}
			return g.gemv(xt, m.x, m.w, m.bias, m.M, m.N, m.K, true)
		})
	}
	if m.bias == nil && is16(m.w.dt) {
		// The GEMM adds its product to x itself (cuBLAS's beta = 1).
		return b.run(func(g *gpu) error {
			xp, err := g.convertX(m.x, m.w.dt)
			if err != nil {
				return err
			}
			return g.gemmBeta(xt, xp, m.w, nil, m.M, m.N, m.K, 1)
		})
	}
	return b.run(func(g *gpu) error {
		if is16(m.w.dt) && g.epilogues(m.M) {
			// x = (a·wᵀ + x) + bias, one cuBLASLt product.
			if ok, err := g.biasProduct(xt, m.x, m.w, m.bias, m.M, m.N, m.K, 1); ok || err != nil {
				return err
			}
		}
		if err := g.matmul(m.d, m.x, m.w, nil, m.M, m.N, m.K); err != nil {
			return err
		}
		return g.biasResidual(xt, m.d, m.bias, m.M, m.N)
	})
}

// biasResidual queues x += h + bias (by row; nil: none) for h [M, N].
func (g *gpu) biasResidual(x, h, bias *Tensor, M, N int) error {
	bp, bdt := biasArg(bias)
	g.args.Reset()
	g.args.Ptr(x.ptr).Ptr(h.ptr).Ptr(bp).I32(bdt).U64(uint64(M)).U64(uint64(N))
	n := int64(M) * int64(N)
	if N%4 == 0 && x.ptr%16 == 0 && h.ptr%16 == 0 {
		n /= 4
	}
	return g.elementwise("matmul bias+residual", g.k.biasResidual, n)
}

// geluMLPEpilogues queues GELUMLP as two cuBLASLt products, where
// cuBLASLt has them: the first with its bias and the tanh GELU folded in,
// written in w2's type into mid (scratch, twice the room needed), the
// second adding its product and bias to x. It returns false, having
// queued nothing, otherwise (the exact GELU has no epilogue).
func (g *gpu) geluMLPEpilogues(x *Tensor, m1, m2 matmulOperands, tanh bool) (bool, error) {
	if !tanh || !g.epilogues(m1.M) || m1.bias == nil || m2.bias == nil || !is16(m1.w.dt) {
		return false, nil
	}
	d2, err := blasType(m2.w.dt)
	if err != nil {
		return false, err
	}
	if ok, err := g.hasEpilogue(d2, m1.w, m1.bias, m1.M, m1.N, m1.K, driver.EpilogueGELUBias); !ok || err != nil {
		return false, err
	}
	if ok, err := g.hasEpilogue(driver.R32F, m2.w, m2.bias, m2.M, m2.N, m2.K, driver.EpilogueBias); !ok || err != nil {
		return false, err
	}
	xp, err := g.convertX(m1.x, m1.w.dt)
	if err != nil {
		return false, err
	}
	mid := m1.d.ptr
	if _, err := g.gemmEpilogue(mid, d2, xp, m1.w, m1.bias, m1.M, m1.N, m1.K, 0, driver.EpilogueGELUBias); err != nil {
		return false, err
	}
	_, err = g.gemmEpilogue(x.ptr, driver.R32F, mid, m2.w, m2.bias, m2.M, m2.N, m2.K, 1, driver.EpilogueBias)
	return true, err
}

// SwiGLUDown computes dst = (silu(x·wgᵀ)·(x·wuᵀ))·wdᵀ. For more than one
// row of x and 16-bit weights that go to cuBLAS, silu(gate)·up is written
// straight in wd's type as the down product's input (MatMul would write it
// as float and round it in a second pass: the same bits), leaving gate and
// up holding the two products; otherwise SwiGLU then MatMul.
func (b *Backend) SwiGLUDown(dst, gate, up, x, wg, wu, wd backend.Tensor) error {
	ga, ua, err := b.swigluArgs("swiglu+down", gate, up, x, wg, wu)
	if err != nil {
		return err
	}
	da, err := b.matmulArgs(dst, gate, wd, nil)
	if err != nil {
		return err
	}
	if ga.M <= gemvMaxM || ga.N == 0 || ga.K == 0 || ga.N != ua.N || ga.w.dt != ua.w.dt || !is16(ga.w.dt) ||
		!is16(da.w.dt) || da.N == 0 || da.d.overlaps(ua.d) {
		return backend.SwiGLUDownSeq(b, dst, gate, up, x, wg, wu, wd)
	}
	return b.run(func(g *gpu) error {
		xp, err := g.convertX(ga.x, ga.w.dt)
		if err != nil {
			return err
		}
		hp, err := g.swigluTo16(xp, ga, ua, da.w.dt)
		if err != nil {
			return fmt.Errorf("cuda: swiglu+down: %w", err)
		}
		return g.gemm(da.d, hp, da.w, nil, da.M, da.N, da.K)
	})
}

// swigluTo16 queues the products gate and up of xp (x in their type),
// then silu(gate)·up written in dt (a 16-bit type), and returns where: the
// next product's input, as MatMul would round it. For 2 to 64 rows one
// vla_gemm_rows launch does it all (into a buffer of its own, leaving gate
// and up holding anything); else two cuBLAS products and a kernel writing
// into the MatMul scratch.
func (g *gpu) swigluTo16(xp driver.DevicePtr, ga, ua matmulOperands, dt tensor.DType) (driver.DevicePtr, error) {
	ops := []matmulOperands{ga, ua}
	n := ga.d.elements()
	if dt == ga.w.dt && g.rowsAll(xp, ops) {
		if l := layoutRows(ops, rowsSwiGLU); l.ok {
			// One vla_gemm_rows launch writes silu(gate)·up in dt itself,
			// into a buffer of its own (xp is in the MatMul scratch).
			hp, err := g.scratch(&g.rowsOut, n*2)
			if err != nil {
				return 0, err
			}
			return hp, g.launchRows(xp, ops, l, rowsSwiGLU, hp)
		}
	}
	if err := g.gateUp(xp, ga, ua); err != nil {
		return 0, err
	}
	// The products above are queued before the scratch is rewritten
	// (or, to grow it, waited for).
	hp, err := g.scratch(&g.xScratch, n*2)
	if err != nil {
		return 0, err
	}
	g.args.Reset()
	g.args.Ptr(hp).Ptr(ga.d.ptr).Ptr(ua.d.ptr).U64(uint64(n))
	items := n
	if n%4 == 0 && (ga.d.ptr|ua.d.ptr)%16 == 0 && hp%8 == 0 {
		items = (n/4 + siluUnroll - 1) / siluUnroll // VLA_SILU_U groups of 4 a thread
	}
	return hp, g.elementwise("silumul to 16 bits", g.k.siluMul16[kind16(dt)], items)
}

// GELUMLP computes x += gelu(a·w1ᵀ + b1)·w2ᵀ + b2. When both products go
// to cuBLAS with a 16-bit w2, the bias and GELU of the first are written
// straight in w2's type as the second's input (MatMulGELU then MatMul's
// rounding: the same bits), mid holding a·w1ᵀ and h the second product;
// with the tanh GELU, biases and cuBLASLt, two cuBLASLt products instead
// (geluMLPEpilogues); otherwise MatMulGELU then MatMulResidual.
func (b *Backend) GELUMLP(x, h, mid, a, w1, b1, w2, b2 backend.Tensor, tanh bool) error {
	xt, m1, m2, ok, err := b.geluMLPArgs(x, h, mid, a, w1, b1, w2, b2)
	if err != nil {
		return err
	}
	if !ok {
		return backend.GELUMLPSeq(b, x, h, mid, a, w1, b1, w2, b2, tanh)
	}
	return b.run(func(g *gpu) error { return g.geluMLP(xt, m1, m2, tanh) })
}

// geluMLPArgs checks GELUMLP's operands and says whether its kernels take
// them (both products on cuBLAS, a 16-bit second weight).
func (b *Backend) geluMLPArgs(x, h, mid, a, w1, b1, w2, b2 backend.Tensor) (xt *Tensor, m1, m2 matmulOperands, ok bool,
	err error) {
	if m1, err = b.matmulArgs(mid, a, w1, b1); err != nil {
		return
	}
	if m2, err = b.matmulArgs(h, mid, w2, b2); err != nil {
		return
	}
	var in []*Tensor
	if xt, in, err = b.elementwiseArgs("gelu mlp", x, []string{"h"}, h); err != nil {
		return
	}
	if xt.overlaps(in[0]) || xt.overlaps(m1.x) || xt.overlaps(m1.d) {
		err = fmt.Errorf("cuda: gelu mlp: x %v overlaps h, a or mid", xt)
		return
	}
	ok = m1.M > 0 && m1.N > 0 && m1.K > 0 && m2.N > 0 && !useGEMV(m1.x, m1.w, m1.M, m1.K) &&
		!useGEMV(m2.x, m2.w, m2.M, m2.K) && is16(m2.w.dt)
	return
}

// geluMLP queues GELUMLP for operands geluMLPArgs took.
func (g *gpu) geluMLP(xt *Tensor, m1, m2 matmulOperands, tanh bool) error {
	act := int32(1)
	if tanh {
		act = 2
	}
	if ok, err := g.geluMLPEpilogues(xt, m1, m2, tanh); ok || err != nil {
		return err
	}
	if err := g.matmul(m1.d, m1.x, m1.w, nil, m1.M, m1.N, m1.K); err != nil {
		return err
	}
	// The product above is queued before the scratch is rewritten (or,
	// to grow it, waited for).
	n := m1.d.elements()
	p, err := g.scratch(&g.xScratch, n*2)
	if err != nil {
		return fmt.Errorf("cuda: gelu mlp: %w", err)
	}
	bp, bdt := biasArg(m1.bias)
	g.args.Reset()
	g.args.Ptr(p).Ptr(m1.d.ptr).Ptr(bp).I32(bdt).U64(uint64(m1.M)).U64(uint64(m1.N)).I32(act)
	items := n
	if m1.N%4 == 0 && m1.d.ptr%16 == 0 && p%8 == 0 {
		items = n / 4
	}
	if err := g.elementwise("matmul bias+gelu to 16 bits", g.k.addBias16[kind16(m2.w.dt)], items); err != nil {
		return err
	}
	if err := g.gemm(m2.d, p, m2.w, nil, m2.M, m2.N, m2.K); err != nil {
		return err
	}
	return g.biasResidual(xt, m2.d, m2.bias, m2.M, m2.N)
}

// LayerNormMatMuls computes LayerNorm(h, x, w, bias, eps) then
// MatMuls(dsts, h, ws, biases) (backend.Fused). Where the norm holds its
// rows in registers (vla_layernorm_reg) and the products share one bf16
// input on cuBLAS (the vision encoder's q, k and v), the norm is written
// only rounded to bf16, as the products read it, and h is left untouched:
// the sequence's bits, 2·rows·n bytes fewer written. Otherwise the
// sequence.
func (b *Backend) LayerNormMatMuls(dsts []backend.Tensor, h, x, w, bias backend.Tensor, eps float32, ws,
	biases []backend.Tensor) error {
	seq := func() error { return backend.LayerNormMatMulsSeq(b, dsts, h, x, w, bias, eps, ws, biases) }
	ln, err := b.layerNormArgs(h, x, w, bias, eps)
	if err != nil {
		return err
	}
	if ln.rows <= gemvMaxM || !ln.reg() || len(ws) != len(dsts) || (biases != nil && len(biases) != len(dsts)) ||
		len(dsts) < 2 {
		return seq()
	}
	ops, _, shared, err := b.matmulsArgs(dsts, h, ws, biases)
	if err != nil {
		return err
	}
	if !shared || ops[0].w.dt != tensor.BF16 {
		return seq()
	}
	for i, a := range ops {
		if a.d.overlaps(ln.x) || a.d.overlaps(ln.d) {
			return fmt.Errorf("cuda: layernorm+matmuls: dst %d %v overlaps x %v or h %v", i, a.d, ln.x, ln.d)
		}
	}
	return b.run(func(g *gpu) error {
		xp, err := g.layerNormTwin(ln)
		if err != nil {
			return err
		}
		return g.gemmsFrom(xp, ops)
	})
}

// LayerNormGELUMLP computes LayerNorm(h, x, w, bias, eps) then GELUMLP(x,
// h, mid, h, w1, b1, w2, b2, tanh) (backend.Fused). Where the norm holds
// its rows in registers and the MLP's kernels take it with a bf16 first
// weight, the norm is written only rounded to bf16, as the first product
// reads it: the sequence's bits, 2·rows·n bytes fewer written. Otherwise
// the sequence.
func (b *Backend) LayerNormGELUMLP(x, h, mid, w, bias backend.Tensor, eps float32, w1, b1, w2, b2 backend.Tensor,
	tanh bool) error {
	seq := func() error { return backend.LayerNormGELUMLPSeq(b, x, h, mid, w, bias, eps, w1, b1, w2, b2, tanh) }
	ln, err := b.layerNormArgs(h, x, w, bias, eps)
	if err != nil {
		return err
	}
	xt, m1, m2, ok, err := b.geluMLPArgs(x, h, mid, h, w1, b1, w2, b2)
	if err != nil {
		return err
	}
	if !ok || !ln.reg() || m1.w.dt != tensor.BF16 { // geluMLPArgs refused an x that overlaps h
		return seq()
	}
	return b.run(func(g *gpu) error {
		xp, err := g.layerNormTwin(ln)
		if err != nil {
			return err
		}
		g.twinIn = twin{src: ln.d.ptr, p: xp, n: ln.d.elements()} // the products read h through it
		return g.geluMLP(xt, m1, m2, tanh)
	})
}

// layerNormTwin queues the norm ln (ln.reg()) written only rounded to
// bf16, into the MatMul scratch, and returns where; where a capture could
// not grow the scratch, the norm in float and then rounded as MatMul
// rounds its input.
func (g *gpu) layerNormTwin(ln layerNormOperands) (driver.DevicePtr, error) {
	g.twinIn = twin{} // what the op before left is not of this norm's output
	y16, err := g.layerNormReg(ln, false)
	if err != nil || y16 != 0 {
		return y16, err
	}
	return g.convertX(ln.d, tensor.BF16)
}
