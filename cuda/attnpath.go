package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// Shapes of the decode and flash attention kernels (kernels/decode.cu,
// kernels/flash.cu).
const (
	decMaxQueries = 4    // queries that take the decode kernel
	decMaxGroup   = 8    // VLA_DEC_MAX_G: query heads per KV head
	decMaxHeadDim = 128  // lanes × 4 dims
	decChunk      = 32   // VLA_DEC_CHUNK: keys per block
	decMaxSplits  = 4096 // VLA_COMB_MAX_SPLITS: splits vla_attn_combine merges
	decThreads    = 128  // VLA_DEC_THREADS
	combThreads   = 256  // VLA_COMB_THREADS
	combWarps     = combThreads / 32
	flashBlockQ   = 64  // VLA_FA_BQ: query rows per block
	flashBlockK   = 64  // VLA_FA_BK: keys per tile
	flashThreads  = 128 // VLA_FA_THREADS
	maxSplits     = 64  // key splits of one flash call
	flashPerSM    = 2   // flash blocks resident per SM (171 registers × 128 threads)

	// vla_flash_wg_* (sm_90a): a warpgroup a block, 64 query rows (as
	// flashBlockQ).
	flashWGThreads = 128 // VLA_FW_THREADS
)

// flashWGKStages is VLA_FW_KST: the stages of K tiles of vla_flash_wg_*.
const flashWGKStages = 3

// flashWGSmem is VLA_FW_SMEM of each vla_flash_wg_* kernel (by
// flashHeadDims): flashWGKStages stages of K tiles and two of V (Q staged
// in V's second) and 1,024 bytes of alignment.
var flashWGSmem = [len(flashHeadDims)]int{
	(flashWGKStages+2)*flashBlockK*80*2 + 1024,
	(flashWGKStages+2)*flashBlockK*128*2 + 1024,
}

// combRowsSplits are the most splits of each vla_attn_combine_rows_* kernel.
var combRowsSplits = [...]int{16, 32}

// flashHeadDims are the padded head dims of the flash kernels, smallest
// first: a head dim is padded with zeros to the first that holds it.
var flashHeadDims = [...]int{80, 128}

// attnKind is the kernel an attention call takes.
type attnKind int

const (
	pathExact attnKind = iota
	pathDecode
	pathFlash
)

// attnCall is one checked attention call.
type attnCall struct {
	d, q, k, v *Tensor
	o          backend.AttnOpts
	tq         int
	segs       []byte // struct vla_segments
	// posAt, when not 0, holds the queries' position on the device
	// (AttentionAt): o.NKV is then the most keys the call may see.
	posAt driver.DevicePtr
	// rc and rs, when not 0, are rotary tables that the flash kernels
	// apply to q and k as they read them (RopeAttention: ropeArgs chose
	// the pipelined flash kernel over float K and V).
	rc, rs driver.DevicePtr
}

func (a attnCall) causal() int32 {
	if a.o.Causal {
		return 1
	}
	return 0
}

// common adds the parameters every attention kernel starts with: out (or
// the first output), q, k, v, heads, kvheads, hd, and, for the exact
// kernel, nkv.
func (a attnCall) common(args *driver.Args, out driver.DevicePtr) {
	args.Ptr(out).Ptr(a.q.ptr).Ptr(a.k.ptr).Ptr(a.v.ptr).
		I32(int32(a.o.Heads)).I32(int32(a.o.KVHeads)).I32(int32(a.o.HeadDim)).I32(int32(a.o.NKV))
}

// aligned16 says whether q, k and v can be read 16 bytes at a time (bf16
// K and V: 4 elements, 8 bytes, at a time).
func (a attnCall) aligned16() bool {
	kvAlign := driver.DevicePtr(16)
	if a.k.dt == tensor.BF16 {
		kvAlign = 8
	}
	return a.q.ptr%16 == 0 && a.k.ptr%kvAlign == 0 && a.v.ptr%kvAlign == 0 && a.d.ptr%8 == 0 && a.o.HeadDim%4 == 0
}

// attnPath picks the kernel of an attention call (see Attention).
func attnPath(a attnCall, exact bool) attnKind {
	hd := a.o.HeadDim
	switch {
	case a.tq <= decMaxQueries && hd <= decMaxHeadDim && a.o.Heads/a.o.KVHeads <= decMaxGroup && a.aligned16():
		return pathDecode
	case !exact && hd <= flashHeadDims[len(flashHeadDims)-1] && a.aligned16():
		return pathFlash
	}
	return pathExact
}

// log2e converts a natural-log scale to base 2 (the kernels use exp2).
const log2e = 1.4426950408889634

// splitScratch returns the partial-result buffers of nsplit splits:
// part_o [nsplit][tq*heads][hd] and part_ml [nsplit][tq*heads][2] floats.
func (g *gpu) splitScratch(a attnCall, nsplit int) (po, pml driver.DevicePtr, err error) {
	rows := int64(nsplit) * int64(a.tq) * int64(a.o.Heads)
	oBytes := roundUp(rows*int64(a.o.HeadDim)*4, smallGranule)
	p, err := g.scratch(&g.attnScratch, oBytes+rows*8)
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: attention: %w", err)
	}
	return p, p + driver.DevicePtr(oBytes), nil
}

// combine queues the merge of nsplit partial results into a.d.
func (g *gpu) combine(a attnCall, nsplit int, po, pml driver.DevicePtr) error {
	out16, err := g.attnTwin(a)
	if err != nil {
		return err
	}
	g.args.Reset()
	g.args.Ptr(a.d.ptr).Ptr(out16).Ptr(po).Ptr(pml).I32(int32(nsplit)).I32(int32(a.tq)).I32(int32(a.o.Heads)).I32(int32(a.o.HeadDim))
	rows := a.tq * a.o.Heads
	if a.posAt == 0 && nsplit <= combRowsSplits[len(combRowsSplits)-1] && !g.combineBlocks {
		// A warp a row (vla_attn_combine_rows_*): the same bits.
		i := 0
		for combRowsSplits[i] < nsplit {
			i++
		}
		grid := driver.Dim3{uint32((rows + combWarps - 1) / combWarps), 1, 1}
		return g.twinAfter(a, out16, g.launch("attention combine rows", g.k.attnCombineRows[i], grid, block1D(combThreads), 0))
	}
	g.args.Ptr(a.posAt)
	grid := driver.Dim3{uint32(rows), 1, 1}
	return g.twinAfter(a, out16, g.launch("attention combine", g.k.attnCombine, grid, block1D(combThreads), 0))
}

// attnTwin returns where the kernel that writes the attention output
// should write it rounded to bf16 as well (the MatMul scratch), or 0: for
// more rows than the GEMV takes, the output projection's cuBLAS product
// reads that twin instead of converting the output (gpu.twin).
func (g *gpu) attnTwin(a attnCall) (driver.DevicePtr, error) {
	if a.tq <= gemvMaxM {
		return 0, nil
	}
	p, err := g.twinFor(a.d)
	if err != nil {
		return 0, fmt.Errorf("cuda: attention: %w", err)
	}
	return p, nil
}

// twinAfter records the twin the launch (its error err) wrote.
func (g *gpu) twinAfter(a attnCall, out16 driver.DevicePtr, err error) error {
	if err == nil && out16 != 0 {
		g.twinOut = twin{src: a.d.ptr, p: out16, n: a.d.elements()}
	}
	return err
}

// attnDecode queues the decode kernel (one block per 32 keys, KV head and
// query) and the merge of its splits.
func (g *gpu) attnDecode(a attnCall) error { return g.attnDecodeWith(a, nil) }

// attnDecodeQK queues vla_attn_decode_bf16_g4_qk, which also does c's
// norms, rotary embedding and cache store (QKNormRopeCacheAttentionAt
// checked the shapes: one query at a device position, heads of 128 in
// groups of four, bf16 caches), and the merge of its splits.
func (g *gpu) attnDecodeQK(a attnCall, c qkCacheCall) error { return g.attnDecodeWith(a, &c) }

func (g *gpu) attnDecodeWith(a attnCall, qk *qkCacheCall) error {
	nsplit := (a.o.NKV + decChunk - 1) / decChunk
	if nsplit > decMaxSplits {
		if a.posAt != 0 {
			return fmt.Errorf("cuda: attention: %d keys are more than the decode kernel's %d with a device position", a.o.NKV, decMaxSplits*decChunk)
		}
		return g.attnExact(a)
	}
	po, pml, err := g.splitScratch(a, nsplit)
	if err != nil {
		return err
	}
	g.args.Reset()
	g.args.Ptr(po).Ptr(pml).Ptr(a.q.ptr).Ptr(a.k.ptr).Ptr(a.v.ptr).
		I32(int32(a.o.Heads)).I32(int32(a.o.KVHeads)).I32(int32(a.o.HeadDim)).I32(int32(a.tq)).I32(int32(a.o.NKV)).
		F32(float32(float64(a.o.Scale)*log2e)).I32(a.causal()).I32(int32(a.o.QPos0)).
		I32(int32(a.o.MaskFrom)).I32(int32(a.o.MaskTo)).Struct(a.segs, 4).Ptr(a.posAt).
		I32(boolArg(a.posAt != 0)) // rows below *pos_at are loaded before the wait (AttentionAt)
	grid := driver.Dim3{uint32(nsplit), uint32(a.o.KVHeads), uint32(a.tq)}
	kernel := g.k.attnDecode
	name := "attention decode"
	if qk != nil {
		// struct vla_dec_qk: k, v, qw, kw, qwdt, kwdt, cs, sn, eps, wearly.
		var st [64]byte
		le := binary.LittleEndian
		le.PutUint64(st[0:], uint64(qk.k.ptr))
		le.PutUint64(st[8:], uint64(qk.v.ptr))
		le.PutUint64(st[16:], uint64(qk.qw.ptr))
		le.PutUint64(st[24:], uint64(qk.kw.ptr))
		le.PutUint32(st[32:], uint32(dtypeCode(qk.qw.dt)))
		le.PutUint32(st[36:], uint32(dtypeCode(qk.kw.dt)))
		le.PutUint64(st[40:], uint64(qk.cos.ptr))
		le.PutUint64(st[48:], uint64(qk.sin.ptr))
		le.PutUint32(st[56:], math.Float32bits(qk.eps))
		le.PutUint32(st[60:], uint32(boolArg(g.gemvEarly(qk.qw) && g.gemvEarly(qk.kw)))) // weights no copy refills
		g.args.Struct(st[:], 8)
		kernel, name = g.k.attnDecodeQK, "attention decode+qk norm"
	} else if a.k.dt == tensor.BF16 {
		kernel = g.k.attnDecodeBF16
		switch a.o.Heads / a.o.KVHeads { // kernels for the group size: the same bits
		case 1:
			kernel = g.k.attnDecodeBF16G[0]
		case 2:
			kernel = g.k.attnDecodeBF16G[1]
		case 4:
			kernel = g.k.attnDecodeBF16G[2]
		}
	}
	if err := g.launch(name, kernel, grid, block1D(decThreads), 0); err != nil {
		return err
	}
	return g.combine(a, nsplit, po, pml)
}

// flashTiles is the number of 64-row query tiles: over all rows, or
// segment by segment (a tile never spans two segments).
func flashTiles(tq int, segments []int) int {
	if len(segments) < 2 {
		return (tq + flashBlockQ - 1) / flashBlockQ
	}
	n := 0
	for i := 1; i < len(segments); i++ {
		n += (segments[i] - segments[i-1] + flashBlockQ - 1) / flashBlockQ
	}
	return n
}

// allowFlashWG grants the vla_flash_wg_* kernels their shared memory
// where the module is compiled for sm_90a (arch); elsewhere, or where
// refused, the calls they would take run on vla_flash_pipe_*, and
// flashWGOff says why.
func (g *gpu) allowFlashWG(arch string) {
	if arch != "sm_90a" {
		g.flashWGOff = fmt.Sprintf("needs sm_90a (compiled for %s)", arch)
		return
	}
	for i, f := range g.k.flashWG {
		if g.flashWGOff = g.grantSmem([]driver.Function{f}, flashWGSmem[i]); g.flashWGOff != "" {
			return
		}
	}
	g.flashWG = true
}

// useFlashWG says whether a flash call of nsplit key splits takes
// vla_flash_wg_* (of its padded head dim): where they are built, over
// bf16 rows (not the kernels that read float K and V in place), with one
// split: query tiles × heads enough to fill the GPU (the prefill, the
// vision encoder). Split calls (the action expert's 64 queries over the
// cache) stay on vla_flash_pipe_128, faster there (35 µs against 38-39
// for the expert's call, bench/results/cuda-kernels.md run 17). The
// choice depends on the shapes alone.
func (g *gpu) useFlashWG(nsplit int) bool {
	if !g.flashWG || g.noFlashWG || g.flashInPlace {
		return false
	}
	return nsplit == 1 || g.flashWGAll
}

// flashSplits is the key splits of a flash launch: 1 when tiles × heads
// fill the GPU's want blocks (one wave of resident blocks: flashPerSM an
// SM; 1 and 4 were slower for the expert, bench/results/cuda-kernels.md
// run 14), else as many as that wave holds (a second, partial wave would
// double the time), each split keeping at least one key tile.
func flashSplits(tiles, heads, keyTiles, want int) int {
	blocks := tiles * heads
	want = max(want, 1)
	if blocks >= want || keyTiles < 2 {
		return 1
	}
	return max(1, min(want/blocks, keyTiles, maxSplits))
}

// attnFlash queues the tensor-core kernel (and the merge of its splits).
func (g *gpu) attnFlash(a attnCall) error {
	idx := 0
	for idx < len(flashHeadDims)-1 && flashHeadDims[idx] < a.o.HeadDim {
		idx++
	}
	tiles := flashTiles(a.tq, a.o.Segments)
	nsplit := 1
	if len(a.o.Segments) < 2 {
		keys := a.o.NKV
		if a.o.Causal {
			keys = min(keys, a.o.QPos0+a.tq)
		}
		nsplit = flashSplits(tiles, a.o.Heads, (keys+flashBlockK-1)/flashBlockK, flashPerSM*g.info.SMs)
	}
	hdp := flashHeadDims[idx]
	wg := g.useFlashWG(nsplit)
	var po, pml driver.DevicePtr
	if nsplit > 1 {
		var err error
		if po, pml, err = g.splitScratch(a, nsplit); err != nil {
			return err
		}
	}
	kernel, name := g.k.flashPipe[idx], "attention flash"
	threads, smem := flashThreads, uint32(0)
	if wg {
		kernel, name, threads, smem = g.k.flashWG[idx], "attention flash wgmma", flashWGThreads, uint32(flashWGSmem[idx])
	}
	kp, vp := a.k.ptr, a.v.ptr
	hs, rs := uint64(a.o.HeadDim), a.o.KVHeads*a.o.HeadDim // a bf16 cache in place
	switch {
	case a.rc != 0 && (a.k.dt != tensor.F32 || g.flashInPlace):
		return errors.New("cuda: attention: rotary tables for a flash kernel that does not read float K and V through vla_kv_to_bf16")
	case g.flashInPlace && a.k.dt == tensor.F32:
		kernel, name = g.k.flash[idx], "attention flash (in place)"
	case a.k.dt == tensor.BF16 && a.o.HeadDim == hdp && kp%16 == 0 && vp%16 == 0:
		// The pipelined kernel copies its tiles from the cache's rows.
	default:
		var err error
		if kp, vp, err = g.kvBF16(a, hdp); err != nil {
			return err
		}
		hs, rs = uint64(a.o.NKV)*uint64(hdp), hdp
	}
	var out16 driver.DevicePtr
	if nsplit == 1 {
		var err error
		if out16, err = g.attnTwin(a); err != nil {
			return err
		}
	}
	g.args.Reset()
	g.args.Ptr(a.d.ptr).Ptr(out16).Ptr(po).Ptr(pml).Ptr(a.q.ptr).Ptr(kp).Ptr(vp).
		I32(int32(a.o.Heads)).I32(int32(a.o.KVHeads)).I32(int32(a.o.HeadDim)).I32(int32(a.tq)).I32(int32(a.o.NKV)).
		F32(float32(float64(a.o.Scale)*log2e)).I32(a.causal()).I32(int32(a.o.QPos0)).
		I32(int32(a.o.MaskFrom)).I32(int32(a.o.MaskTo)).Struct(a.segs, 4).U64(hs).I32(int32(rs)).Ptr(a.rc).Ptr(a.rs)
	grid := driver.Dim3{uint32(tiles), uint32(a.o.Heads), uint32(nsplit)}
	if err := g.launch(fmt.Sprintf("%s %d", name, hdp), kernel, grid, block1D(threads), smem); err != nil {
		return err
	}
	if nsplit == 1 {
		return g.twinAfter(a, out16, nil)
	}
	return g.combine(a, nsplit, po, pml)
}

// kvBF16 queues the rounding of the first NKV rows of K and V to bf16
// copies [kvheads][NKV][hdp] (zero-padded head dims) in a scratch buffer,
// the layout the pipelined flash kernels copy tiles from.
func (g *gpu) kvBF16(a attnCall, hdp int) (kb, vb driver.DevicePtr, err error) {
	per := int64(a.o.KVHeads) * int64(a.o.NKV) * int64(hdp) * 2
	half := roundUp(per, smallGranule)
	p, err := g.scratch(&g.kvScratch, 2*half)
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: attention: %w", err)
	}
	kb, vb = p, p+driver.DevicePtr(half)
	g.args.Reset()
	g.args.Ptr(kb).Ptr(vb).Ptr(a.k.ptr).Ptr(a.v.ptr).I32(int32(a.o.KVHeads)).I32(int32(a.o.HeadDim)).I32(int32(hdp)).I32(int32(a.o.NKV))
	if a.k.dt == tensor.BF16 { // already rounded: only the layout changes
		return kb, vb, g.elementwise("attention k/v layout", g.k.kvBF16ToBF16, 2*per/16)
	}
	g.args.Ptr(a.rc).Ptr(a.rs) // rotary tables for K, or none
	return kb, vb, g.elementwise("attention k/v to bf16", g.k.kvToBF16, 2*per/16)
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
