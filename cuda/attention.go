package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/cuda/driver"
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
// One thread block per (query, head) streams over the visible keys (at
// most two ranges: before and after [MaskFrom, MaskTo)) with an online
// softmax, so no Tq×NKV matrix exists. A query that sees no key gets
// zeros. dst must not overlap q, k or v.
func (b *Backend) Attention(dst, q, k, v backend.Tensor, o backend.AttnOpts) error {
	const op = "attention"
	d, err := b.dstArg(op, "dst", dst)
	if err != nil {
		return err
	}
	qt, err := b.f32Arg(op, "q", q)
	if err != nil {
		return err
	}
	kt, err := b.f32Arg(op, "k", k)
	if err != nil {
		return err
	}
	vt, err := b.f32Arg(op, "v", v)
	if err != nil {
		return err
	}
	if err := o.Validate(qt, kt, vt, d); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	tq, _ := backend.Matrix(qt)
	switch {
	case o.QPos0 < 0:
		return fmt.Errorf("cuda: attention: negative QPos0 %d", o.QPos0)
	case o.HeadDim > attMaxHeadDim:
		return fmt.Errorf("cuda: attention: head dim %d is more than the kernel's %d", o.HeadDim, attMaxHeadDim)
	case len(o.Segments) > attMaxBounds:
		return fmt.Errorf("cuda: attention: %d segments are more than the kernel's %d", len(o.Segments)-1, attMaxBounds-1)
	case o.Heads > maxGridY:
		return fmt.Errorf("cuda: attention: %d heads are more than %d", o.Heads, maxGridY)
	case tq > math.MaxInt32 || o.NKV > math.MaxInt32 || o.QPos0+tq > math.MaxInt32 || o.MaskTo > math.MaxInt32:
		return fmt.Errorf("cuda: attention: %d queries over %d keys is too many", tq, o.NKV)
	case d.overlaps(qt) || d.overlaps(kt) || d.overlaps(vt):
		return fmt.Errorf("cuda: attention: dst %v overlaps q, k or v", d)
	}
	if tq == 0 {
		return nil
	}
	segs := segmentBytes(o.Segments)
	causal := int32(0)
	if o.Causal {
		causal = 1
	}
	return b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.Ptr(d.ptr).Ptr(qt.ptr).Ptr(kt.ptr).Ptr(vt.ptr).
			I32(int32(o.Heads)).I32(int32(o.KVHeads)).I32(int32(o.HeadDim)).I32(int32(o.NKV)).
			F32(o.Scale).I32(causal).I32(int32(o.QPos0)).I32(int32(o.MaskFrom)).I32(int32(o.MaskTo)).
			Struct(segs, 4)
		grid := driver.Dim3{uint32(tq), uint32(o.Heads), 1}
		shared := uint32(4 * (o.HeadDim + attTile))
		return g.launch("attention", g.k.attention, grid, block1D(attThreads), shared)
	})
}

// segmentBytes lays out struct vla_segments: the boundary count, then the
// boundaries, zero-padded.
func segmentBytes(bounds []int) []byte {
	out := make([]byte, attSegsBytes)
	binary.NativeEndian.PutUint32(out, uint32(len(bounds)))
	for i, s := range bounds {
		binary.NativeEndian.PutUint32(out[4+4*i:], uint32(s))
	}
	return out
}
