package cuda

import (
	"encoding/binary"
	"fmt"

	"vlanode/cuda/driver"
)

// The streamed GEMV kernel (kernels/gemv_stream.cu): the one-row products
// of gemv.go with the weight brought into shared memory by bulk copies
// (sm_90), one block an SM over a contiguous range of columns, its first
// copies issued before it waits for the kernel ahead. It computes the bits
// of vla_gemv, vla_gemv3 and vla_gemv_swiglu; where it is built (sm_90 and
// NVRTC 12 or later) it takes their launches. Measured on the H200
// (bench/results/cuda-kernels.md run 13): the standard workload's decode
// 104 ms against 111 ms on vla_gemv, the same bits.
const (
	gstreamWarps   = 8                 // VLA_GSTREAM_WARPS: warps a block
	gstreamRows    = 2                 // VLA_GSTREAM_ROWS: rows a warp reads at once
	gstreamThreads = 32 * gstreamWarps // VLA_GSTREAM_THREADS
	gstreamPiece   = 4096              // VLA_GSTREAM_PIECE: bytes of a row a step (a slot)
	gstreamOps     = 3                 // VLA_GSTREAM_OPS
	gstreamMaxSmem = 227 << 10         // the most shared memory a block may have on sm_90: all dynamic (see allowStreamSmem)
	gstreamSlots   = 32                // the default: two steps in flight a warp, 128 KB (16 slots: 4% slower)
	gstreamModeSet = 0                 // y = x·wᵀ + bias
	gstreamModeAdd = 1                 // y += x·wᵀ + bias
	gstreamModeGLU = 2                 // y = silu(x·wgᵀ)·(x·wuᵀ)
	gstreamArgLen  = 112               // sizeof(vla_gstream_args)
	gstreamMinArch = 90                // cp.async.bulk and mbarrier transaction counts
	gstreamMinRTC  = 12                // the NVRTC that knows them (kernels built by older ones trap)
	gstreamBarrier = 8                 // bytes of shared memory a buffer's barrier takes
	gstreamNormSum = 32 * 8            // bytes of shared memory for a norm's block sum (32 doubles)
)

// gstreamSmem is a block's dynamic shared memory for slots (a multiple of
// gstreamWarps·gstreamRows: each warp has slots/gstreamWarps, a buffer
// of gstreamRows slots for each of its steps in flight, and a barrier a
// buffer), x of depth K (rounded: packed in 16 bits with xh, else as
// floats) and a norm's block sum.
func gstreamSmem(slots, K int, xh bool) int {
	xb := 4 * K
	if xh {
		xb = 2 * K
	}
	return slots*gstreamPiece + slots/gstreamRows*gstreamBarrier + xb + gstreamNormSum
}

// allowStreamSmem turns the streamed GEMV on where it is built: sm_90 or
// later, an NVRTC of version 12 or later, and the device granting a block
// 227 KB of dynamic shared memory. (The kernel has no static shared
// memory: a __shared__ array would make the device refuse this and turn
// the kernel off, which TestGPUStreamGEMV reports.) gstreamOff says why
// it is off.
func (g *gpu) allowStreamSmem(arch, rtcMajor int) {
	g.gstreamSlots = gstreamSlots
	if arch < gstreamMinArch || rtcMajor < gstreamMinRTC {
		g.gstreamOff = fmt.Sprintf("needs sm_%d and NVRTC %d or later (sm_%d, NVRTC %d)", gstreamMinArch, gstreamMinRTC, arch, rtcMajor)
		return
	}
	g.gstreamOff = g.grantSmem(g.k.gemvStream[:], gstreamMaxSmem)
	g.gstreamOK = g.gstreamOff == ""
}

// grantSmem lets each kernel of fs have bytes of dynamic shared memory
// (above the 48 KB a kernel gets unasked); it returns why the device
// refused, or "".
func (g *gpu) grantSmem(fs []driver.Function, bytes int) string {
	for _, f := range fs {
		if err := g.drv.SetFuncAttribute(f, driver.FuncMaxDynamicSharedBytes, bytes); err != nil {
			return fmt.Sprintf("%d bytes of shared memory refused: %v", bytes, err)
		}
	}
	return ""
}

// useStream says whether the one-row products of depth K take
// vla_gemv_stream: where it is built and its ring and x fit a block's
// shared memory (K = 0, an empty sum, stays with the warp kernels, which
// write the bias alone). The choice depends on K alone, and both kernels
// compute the same bits.
func (g *gpu) useStream(K int) bool {
	return g.gstreamOK && !g.noStream && K > 0 && gstreamSmem(g.gstreamSlots, K, !g.gstreamFloatX) <= gstreamMaxSmem
}

// gstreamNorm is an RMSNorm that a vla_gemv_stream launch applies to x
// itself before its products read it: weight w (of x's length), eps.
type gstreamNorm struct {
	w   *Tensor
	eps float32
}

// normStream says whether the one-row products of depth K may read
// RMSNorm(x) through vla_gemv_stream's own norm (gstreamNorm) rather than
// after a vla_rmsnorm launch: where they take the streamed kernel, x is
// 16-byte aligned and K > warpRowMax, so that vla_rmsnorm would reduce
// the row with a block of gstreamThreads threads, as the streamed kernel's
// block does: the same sums in the same order, the same bits.
// Backend.SetNormGEMV(false) turns it off.
func (g *gpu) normStream(x *Tensor, K int) bool {
	return !g.noNormStream && g.useStream(K) && K > warpRowMax && rowThreads(K) == gstreamThreads && x.ptr%16 == 0
}

// gemvStream queues the one-row products of ops (one K, one weight type;
// the caller checked useGEMV for each and useStream(K)) in one
// vla_gemv_stream launch: mode gstreamModeSet for up to three ops,
// gstreamModeAdd for one, gstreamModeGLU for gate and up (ops[0].d gets
// silu(gate)·up). With norm (the caller checked normStream), the products
// read RMSNorm(ops[0].x) instead of ops[0].x.
func (g *gpu) gemvStream(name string, ops []matmulOperands, mode int32, norm *gstreamNorm) error {
	// vla_gstream_args: the ops (putOpArgs), then int mode, slots, pad.
	var st [gstreamArgLen]byte
	le := binary.LittleEndian
	putOpArgs(st[:], ops)
	items := 0
	for _, a := range ops {
		items += a.N
	}
	if mode == gstreamModeGLU {
		items = ops[0].N
	}
	slots := g.gstreamSlots
	if slots < gstreamWarps*gstreamRows || slots%(gstreamWarps*gstreamRows) != 0 {
		return fmt.Errorf("cuda: matmul 1×%d×%d: %d ring slots: want a multiple of %d", items, ops[0].K, slots,
			gstreamWarps*gstreamRows)
	}
	le.PutUint32(st[96:], uint32(mode))
	le.PutUint32(st[100:], uint32(slots))
	early := true
	for _, a := range ops {
		early = early && g.gemvEarly(a.w)
	}
	groups := items // of gstreamRows rows: pairs of columns, or gate and up rows
	if mode != gstreamModeGLU {
		groups = (items + 1) / 2
	}
	blocks := max(1, min(g.info.SMs, groups))
	g.args.Reset()
	g.args.Struct(st[:], 8).Ptr(ops[0].x.ptr).I32(int32(ops[0].K)).I32(boolArg(early))
	if norm != nil {
		g.args.Ptr(norm.w.ptr).I32(dtypeCode(norm.w.dt)).F32(norm.eps).I32(boolArg(g.gemvEarly(norm.w)))
	} else {
		g.args.Ptr(0).I32(0).F32(0).I32(0)
	}
	xh := !g.gstreamFloatX
	f := g.k.gemvStream[kind16(ops[0].w.dt)+2*int(boolArg(xh))]
	if err := g.launch(name, f, driver.Dim3{uint32(blocks), 1, 1}, block1D(gstreamThreads), uint32(gstreamSmem(slots, ops[0].K, xh))); err != nil {
		return fmt.Errorf("cuda: matmul 1×%d×%d: %w", items, ops[0].K, err)
	}
	return nil
}
