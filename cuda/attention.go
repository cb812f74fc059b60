package cuda

import (
	"errors"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// Shape of the attention kernel (the VLA_ATT_* constants of
// kernels/attention.cu).
const (
	attThreads    = 128                    // threads per (query, head) block
	attTile       = 64                     // keys scored per step
	attMaxHeadDim = 4 * attThreads         // head dims a thread block holds
	attMaxBounds  = 513                    // segment boundaries passed by value
	attSegsBytes  = 4 * (1 + attMaxBounds) // sizeof(struct vla_segments)
	maxGridY      = 65535                  // CUDA's limit on gridDim.y
)

// Attention computes softmax(q·kᵀ·scale + mask)·v; see backend.AttnOpts.
// No Tq×NKV score matrix is ever stored. Three kernels serve it, chosen by
// shape alone (so a unit computes the same bits wherever it lives):
//
//   - up to 4 queries (decoding): vla_attn_decode, float32, split over the
//     keys so that a few heads still fill the GPU, then vla_attn_combine
//     (or, for up to 32 splits, vla_attn_combine_rows_*: a warp a row,
//     the same bits);
//   - more queries, head dim <= 128 and a multiple of 4: vla_kv_to_bf16
//     then vla_flash_pipe_*, flash attention on the tensor cores with q,
//     k, v and the softmax weights rounded to bf16 (scores, softmax and
//     sums in float32; the error is that of bf16 inputs, about 3e-3 of the
//     output's norm), K and V tiles copied asynchronously while the
//     previous tile computes, split over the keys as well when query
//     tiles × heads are too few to fill the GPU (on sm_90a, calls of one
//     split, the prefill's and the vision encoder's, take vla_flash_wg_*
//     instead: the asynchronous warpgroup MMA; Backend.SetFlashWGMMA);
//   - anything else, or every case with more than 4 queries under
//     WithExactAttention: vla_attention, float32, one block per (query,
//     head).
//
// A query that sees no key gets zeros. dst must not overlap q, k or v.
func (b *Backend) Attention(dst, q, k, v backend.Tensor, o backend.AttnOpts) error {
	return b.attention(dst, q, k, v, o, nil, nil)
}

// AttentionAt is Attention for decoding with the queries' position in
// device memory: pos, an I32 tensor of one element, holds the cache row
// of the first query (QPos0), and the call sees keys [0, *pos + rows of
// q). o.NKV is the most keys it may see (the cache's rows), o.QPos0 is
// ignored. It takes the decode kernel (up to 4 queries), whose results
// are those of Attention with that NKV and QPos0, bit for bit; with the
// position on the device, one captured graph serves every decode step.
// The kernel loads the K and V rows below *pos before it waits for the
// kernel ahead (which QKNormRopeCache with the same pos lets start it at
// once): those rows and pos must not be written by the kernels queued
// just before (backend.DevicePos).
func (b *Backend) AttentionAt(dst, q, k, v backend.Tensor, o backend.AttnOpts, pos backend.Tensor) error {
	p, err := b.posArg("attention", pos)
	if err != nil {
		return err
	}
	o.QPos0 = 0
	return b.attention(dst, q, k, v, o, p, nil)
}

// RopeAttention computes Rope(q), Rope(k), then Attention (see
// backend.Fused). Where the attention takes the pipelined flash kernel
// over float K and V of the queries' own rows (the vision encoder's), the
// keys are rotated as vla_kv_to_bf16 rounds them to bf16 and the queries
// as the flash kernel loads them: the bits of the sequence, two launches
// and four passes over q and k fewer, q and k left unrotated
// (TestGPURopeAttention). Otherwise it runs the sequence.
func (b *Backend) RopeAttention(dst, q, k, v, cos, sin backend.Tensor, o backend.AttnOpts) error {
	r, err := b.ropeArgs(dst, q, k, v, cos, sin, o)
	if err != nil {
		return err
	}
	if r == nil {
		return backend.RopeAttentionSeq(b, dst, q, k, v, cos, sin, o)
	}
	return b.attention(dst, q, k, v, o, nil, r)
}

// ropeTables are the rotary tables RopeAttention applies in its kernels.
type ropeTables struct{ cos, sin *Tensor }

// ropeArgs returns the tables when RopeAttention's rotations can ride in
// the flash kernels (see RopeAttention), else nil (the sequence checks
// everything else).
func (b *Backend) ropeArgs(dst, q, k, v, cos, sin backend.Tensor, o backend.AttnOpts) (*ropeTables, error) {
	dt, ok0 := dst.(*Tensor)
	qt, ok1 := q.(*Tensor)
	kt, ok2 := k.(*Tensor)
	vt, ok5 := v.(*Tensor)
	ct, ok3 := cos.(*Tensor)
	st, ok4 := sin.(*Tensor)
	if !ok0 || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || o.HeadDim <= 0 || o.HeadDim%8 != 0 {
		return nil, nil
	}
	rows, _ := backend.Matrix(qt)
	krows, _ := backend.Matrix(kt)
	cr, cc := backend.Matrix(ct)
	sr, sc := backend.Matrix(st)
	if qt.dt != tensor.F32 || kt.dt != tensor.F32 || ct.dt != tensor.F32 || st.dt != tensor.F32 || qt.readOnly || kt.readOnly ||
		krows != rows || o.NKV != rows || cr != rows || sr != rows || cc != o.HeadDim/2 || sc != o.HeadDim/2 ||
		(ct.ptr|st.ptr)%16 != 0 {
		return nil, nil
	}
	var fused bool
	err := b.run(func(g *gpu) error {
		a := attnCall{d: dt, q: qt, k: kt, v: vt, o: o, tq: rows}
		fused = !g.flashInPlace && attnPath(a, g.exactAttention) == pathFlash
		return nil
	})
	if err != nil || !fused {
		return nil, err
	}
	return &ropeTables{cos: ct, sin: st}, nil
}

// posArg checks a device position: an I32 tensor of one element.
func (b *Backend) posArg(op string, pos backend.Tensor) (*Tensor, error) {
	p, err := b.arg(op, "pos", pos)
	if err != nil {
		return nil, err
	}
	if p.dt != tensor.I32 || p.elements() != 1 {
		return nil, fmt.Errorf("cuda: %s: position %v must be one I32", op, p)
	}
	return p, nil
}

func (b *Backend) attention(dst, q, k, v backend.Tensor, o backend.AttnOpts, pos *Tensor, rope *ropeTables) error {
	a, err := b.attnArgs(dst, q, k, v, o, pos, rope)
	if err != nil || a.tq == 0 {
		return err
	}
	return b.run(func(g *gpu) error { return g.attend(a) })
}

// attnArgs checks attention's operands and makes its call (tq 0: nothing
// to do).
func (b *Backend) attnArgs(dst, q, k, v backend.Tensor, o backend.AttnOpts, pos *Tensor, rope *ropeTables) (attnCall, error) {
	const op = "attention"
	var a attnCall
	d, err := b.dstArg(op, "dst", dst)
	if err != nil {
		return a, err
	}
	qt, err := b.f32Arg(op, "q", q)
	if err != nil {
		return a, err
	}
	kt, err := b.arg(op, "k", k)
	if err != nil {
		return a, err
	}
	vt, err := b.arg(op, "v", v)
	if err != nil {
		return a, err
	}
	switch {
	case kt.dt != tensor.F32 && kt.dt != tensor.BF16:
		return a, fmt.Errorf("cuda: attention: k %v must be F32 or BF16", kt)
	case vt.dt != kt.dt:
		return a, fmt.Errorf("cuda: attention: v %v and k %v differ in type", vt, kt)
	}
	if err := o.Validate(qt, kt, vt, d); err != nil {
		return a, fmt.Errorf("cuda: %w", err)
	}
	tq, _ := backend.Matrix(qt)
	switch {
	case o.QPos0 < 0:
		return a, fmt.Errorf("cuda: attention: negative QPos0 %d", o.QPos0)
	case o.HeadDim > attMaxHeadDim:
		return a, fmt.Errorf("cuda: attention: head dim %d is more than the kernel's %d", o.HeadDim, attMaxHeadDim)
	case len(o.Segments) > attMaxBounds:
		return a, fmt.Errorf("cuda: attention: %d segments are more than the kernel's %d", len(o.Segments)-1, attMaxBounds-1)
	case o.Heads > maxGridY:
		return a, fmt.Errorf("cuda: attention: %d heads are more than %d", o.Heads, maxGridY)
	case tq > math.MaxInt32 || o.NKV > math.MaxInt32 || o.QPos0+tq > math.MaxInt32 || o.MaskTo > math.MaxInt32:
		return a, fmt.Errorf("cuda: attention: %d queries over %d keys is too many", tq, o.NKV)
	case d.overlaps(qt) || d.overlaps(kt) || d.overlaps(vt):
		return a, fmt.Errorf("cuda: attention: dst %v overlaps q, k or v", d)
	}
	if tq == 0 {
		return a, nil
	}
	a = attnCall{d: d, q: qt, k: kt, v: vt, o: o, tq: tq, segs: segmentBytes(o.Segments)}
	if pos != nil {
		a.posAt = pos.ptr
	}
	if rope != nil {
		if d.overlaps(rope.cos) || d.overlaps(rope.sin) {
			return a, fmt.Errorf("cuda: attention: dst %v overlaps cos or sin", d)
		}
		a.rc, a.rs = rope.cos.ptr, rope.sin.ptr
	}
	return a, nil
}

// attend queues the attention call a on its kernel.
func (g *gpu) attend(a attnCall) error {
	o, tq := a.o, a.tq
	path := attnPath(a, g.exactAttention)
	if a.posAt != 0 && path != pathDecode {
		return fmt.Errorf("cuda: attention: a device position needs the decode kernel (%d queries, head dim %d, %d/%d heads)", tq, o.HeadDim, o.Heads, o.KVHeads)
	}
	if a.rc != 0 && path != pathFlash {
		return errors.New("cuda: attention: rotary tables for a kernel other than flash attention")
	}
	if a.k.dt == tensor.BF16 && (path == pathExact || (path == pathFlash && o.HeadDim%8 != 0)) {
		return fmt.Errorf("cuda: attention: bf16 K and V need the decode or flash kernels (head dim %d; exact attention %v): use a float cache", o.HeadDim, g.exactAttention)
	}
	switch path {
	case pathDecode:
		return g.attnDecode(a)
	case pathFlash:
		return g.attnFlash(a)
	}
	return g.attnExact(a)
}

// attnExact queues vla_attention: one block per (query, head).
func (g *gpu) attnExact(a attnCall) error {
	g.args.Reset()
	a.common(g.args, a.d.ptr)
	g.args.F32(a.o.Scale).I32(a.causal()).I32(int32(a.o.QPos0)).I32(int32(a.o.MaskFrom)).I32(int32(a.o.MaskTo)).
		Struct(a.segs, 4)
	grid := driver.Dim3{uint32(a.tq), uint32(a.o.Heads), 1}
	shared := uint32(4 * (a.o.HeadDim + attTile))
	return g.launch("attention", g.k.attention, grid, block1D(attThreads), shared)
}

// KVCacheDType is the element type the models keep their KV caches in on
// this backend for a head dim: BF16 when the decode and flash kernels read
// it (head dims up to 128, a multiple of 8, and without
// WithExactAttention), which halves the cache and the bytes a decode step
// reads; F32 otherwise. Rounding K and V to bf16 where they are written
// gives the flash kernels the values they rounded to themselves from a
// float cache; the decode kernel now reads rounded keys and values too.
func (b *Backend) KVCacheDType(headDim int) tensor.DType {
	if b.exact || headDim > decMaxHeadDim || headDim%8 != 0 {
		return tensor.F32
	}
	return tensor.BF16
}
