package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"

	"vlanode/cuda/driver"
)

// The products of 2 to 64 rows with a 16-bit weight take vla_gemm_rows
// (kernels/gemm_rows.cu) instead of cuBLAS: 64 columns of one weight and a
// slice of K a block, the partial sums of a tile's slices added by its
// last block in slot order. On sm_90a they take vla_gemm_rows_wg, the same
// kernel on wgmma (gpu.rowsWG).
const (
	rowsMaxM    = 64  // rows of x a launch takes
	rowsBN      = 64  // VLA_ROWS_BN: columns a tile
	rowsBK      = 128 // VLA_ROWS_BK: K a stage (the last may be part zeros)
	rowsThreads = 256 // VLA_ROWS_THREADS
	rowsOps     = 3   // VLA_ROWS_OPS: weights one launch takes
	rowsStages  = 3   // VLA_ROWS_STAGES: the pipeline's depth
	// rowsSmem is a block's dynamic shared memory: each stage holds 64
	// rows of x and 64 of w, rowsBK wide, in 16 bits.
	rowsSmem = rowsStages * 2 * 64 * rowsBK * 2
	// rowsTileFloats is VLA_ROWS_TILE: the floats of one partial tile.
	rowsTileFloats = 64 * rowsBN
	// rowsBlocks is about how many blocks one weight is spread over:
	// rowsSplits splits K until its tiles make that many, about two
	// blocks an SM on the H200's 132.
	rowsBlocks = 256
	// rowsMaxSplits caps the slices of K a tile is split into
	// (VLA_ROWS_MAX_SPLITS): a tile's last block adds its slices'
	// partial sums, loading them all at once, a tail that grows with
	// their count.
	rowsMaxSplits = 8
	// rowsMinStages is the fewest pipeline stages a slice of K gets.
	rowsMinStages = 4
	// rowsMaxSlots caps the partial tiles of one launch: the workspace
	// (RowsScratchBytes) is sized for it.
	rowsMaxSlots = rowsOps * rowsBlocks
	// rowsCounters is the tile counters' count: the tiles of split
	// products (at most rowsBlocks an op) and of mode 2 (one a gate
	// tile); a launch that needs more goes to cuBLAS.
	rowsCounters = rowsMaxSlots

	// The wgmma kernel: the mma.sync kernel's geometry, its stages aligned
	// to VLA_ROWS_ALIGN bytes.
	rowsAlign  = 1024
	rowsWGSmem = rowsSmem + rowsAlign
)

// rowsGeom is the kernel of a vla_gemm_rows launch (by weight type) and
// its shared memory.
type rowsGeom struct {
	wg   bool
	f    [2]driver.Function
	smem uint32
}

// geom is the kernel that products of 2 to 64 rows take: the same for
// every shape, which sets the bits a product computes.
func (g *gpu) geom() rowsGeom {
	if g.rowsWG && !g.noRowsWG {
		return rowsGeom{wg: true, f: g.k.gemmRowsWG, smem: rowsWGSmem}
	}
	return rowsGeom{f: g.k.gemmRows, smem: rowsSmem}
}

// RowsScratchBytes is the device memory the row products keep at most:
// their workspace of partial tiles, the tiles' counters and mode 2's
// output (residency's planner counts it with the backend's scratch).
const RowsScratchBytes = rowsMaxSlots*rowsTileFloats*4 + rowsCounters*4 + rowsMaxM*rowsCounters*rowsBN*2

// Modes of vla_gemm_rows.
const (
	rowsPlain    = 0 // y = x·wᵀ + bias
	rowsResidual = 1 // y += x·wᵀ, then + bias
	rowsSwiGLU   = 2 // y16 = silu(x·wgᵀ)·(x·wuᵀ) in the weights' type
)

// rowsSplits is how many slices of K a product of N columns and depth K
// is split into: about rowsBlocks blocks in all, at most rowsMaxSplits,
// and rowsMinStages stages a slice where K has that many. It depends on N
// and K alone, so a product computes the same bits in every launch it is
// part of.
func rowsSplits(N, K int) int {
	tiles := (N + rowsBN - 1) / rowsBN
	return max(1, min(rowsBlocks/tiles, rowsMaxSplits, (K+rowsBK-1)/rowsBK/rowsMinStages))
}

// allowRowsSmem lets the vla_gemm_rows kernels have rowsSmem bytes of
// shared memory (above the 48 KB a kernel gets unasked); where the device
// refuses, the products go to cuBLAS. The wgmma kernels, built where the
// module is compiled for sm_90a (arch), get rowsWGSmem; where refused,
// the mma.sync kernels run, and rowsWGOff says why.
func (g *gpu) allowRowsSmem(arch string) {
	for _, f := range []*driver.Function{&g.k.gemmRows[0], &g.k.gemmRows[1]} {
		if err := g.drv.SetFuncAttribute(*f, driver.FuncMaxDynamicSharedBytes, rowsSmem); err != nil {
			*f = 0
		}
	}
	if arch != "sm_90a" {
		g.rowsWGOff = fmt.Sprintf("needs sm_90a (compiled for %s)", arch)
		return
	}
	g.rowsWGOff = g.grantSmem(g.k.gemmRowsWG[:], rowsWGSmem)
	g.rowsWG = g.rowsWGOff == ""
}

// useRows says whether a product of M rows of xp (in w's type) by w takes
// vla_gemm_rows: a 16-bit weight, 2 to 64 rows, K a multiple of 8 and
// 16-byte aligned operands. The choice depends on the shapes and alignment
// alone.
func (g *gpu) useRows(w *Tensor, xp driver.DevicePtr, M, K int) bool {
	return !g.noRows && g.k.gemmRows[kind16(w.dt)] != 0 && is16(w.dt) && M >= 2 && M <= rowsMaxM &&
		K > 0 && K%8 == 0 && w.ptr%16 == 0 && xp%16 == 0
}

// rowsAll says whether every product of ops (one x, so one M and K) takes
// vla_gemm_rows in one launch: at most rowsOps, weights of one type.
func (g *gpu) rowsAll(xp driver.DevicePtr, ops []matmulOperands) bool {
	if len(ops) == 0 || len(ops) > rowsOps {
		return false
	}
	for _, a := range ops {
		if a.M != ops[0].M || a.K != ops[0].K || a.w.dt != ops[0].w.dt || a.N == 0 || !g.useRows(a.w, xp, a.M, a.K) {
			return false
		}
	}
	return true
}

// rowsLayout is how a vla_gemm_rows launch of ops in a mode spreads
// over blocks, tile counters and partial tiles (slots), and whether the
// counters and workspace hold it.
type rowsLayout struct {
	blocks, tiles, slots int
	splits, tile         [rowsOps]int // by op: slices of K; first tile
	block, slot          [rowsOps + 1]int
	ok                   bool
}

// layoutRows lays out a launch of ops in mode: rowsSplits' slices of K
// for each op, in the op order of the kernel's block ranges.
func layoutRows(ops []matmulOperands, mode int32) rowsLayout {
	var l rowsLayout
	for i, a := range ops {
		s := rowsSplits(a.N, a.K)
		t := (a.N + rowsBN - 1) / rowsBN
		l.splits[i], l.block[i], l.tile[i], l.slot[i] = s, l.blocks, l.tiles, l.slots
		l.blocks += t * s
		switch {
		case mode == rowsSwiGLU && i == 0:
			// One counter for a tile's gate and up blocks; with one
			// block a weight, the products go to gate and up themselves.
			l.tiles += t
			if s > 1 {
				l.slots += 2 * t * s
			}
		case mode != rowsSwiGLU && s > 1: // one block a tile writes y itself
			l.tiles += t
			l.slots += t * s
		}
	}
	for i := len(ops); i <= rowsOps; i++ {
		l.block[i], l.slot[i] = l.blocks, l.slots
	}
	l.ok = l.slots <= rowsMaxSlots && l.tiles <= rowsCounters
	return l
}

// gemmRows queues the products of ops from xp (their common input in
// their weights' type) in one vla_gemm_rows launch: each dst = xp·wᵀ +
// bias (mode rowsPlain), dst += xp·wᵀ then + bias (rowsResidual), or, for
// ops gate and up of one shape, y16 = silu(gate)·up rounded to their type
// (rowsSwiGLU, no biases; gate's and up's dsts are scratch). The caller
// checked rowsAll. It returns false, having queued nothing, when the
// launch needs more counters or partial tiles than there are
// (layoutRows).
func (g *gpu) gemmRows(xp driver.DevicePtr, ops []matmulOperands, mode int32, y16 driver.DevicePtr) (bool, error) {
	l := layoutRows(ops, mode)
	if !l.ok {
		return false, nil
	}
	return true, g.launchRows(xp, ops, l, mode, y16)
}

// launchRows queues gemmRows' launch laid out as l (layoutRows, l.ok).
func (g *gpu) launchRows(xp driver.DevicePtr, ops []matmulOperands, l rowsLayout, mode int32, y16 driver.DevicePtr) error {
	a := ops[0]
	ws, count, err := g.rowsBuffers(l.slots)
	if err != nil {
		return fmt.Errorf("cuda: matmul %d×%d×%d: %w", a.M, a.N, a.K, err)
	}
	// vla_rows_args: u16 *w[3]; float *y[3]; void *bias[3]; int bdt[3],
	// n[3], splits[3], block[4], tile[3], slot[3], pad; u16 *y16; float
	// *ws; u32 *count — 176 bytes, 8-byte aligned.
	var st [176]byte
	le := binary.LittleEndian
	putOpArgs(st[:], ops)
	for i := range ops {
		le.PutUint32(st[96+4*i:], uint32(l.splits[i]))
		le.PutUint32(st[124+4*i:], uint32(l.tile[i]))
	}
	for i := range rowsOps + 1 {
		le.PutUint32(st[108+4*i:], uint32(l.block[i]))
	}
	for i := range rowsOps {
		le.PutUint32(st[136+4*i:], uint32(l.slot[i]))
	}
	le.PutUint64(st[152:], uint64(y16))
	le.PutUint64(st[160:], uint64(ws))
	le.PutUint64(st[168:], uint64(count))
	early := true
	for _, o := range ops {
		early = early && g.gemvEarly(o.w)
	}
	g.args.Reset()
	g.args.Struct(st[:], 8).Ptr(xp).I32(int32(a.M)).I32(int32(a.K)).I32(mode).I32(boolArg(early))
	name := [...]string{"rows", "rows+residual", "rows swiglu"}[mode]
	if g.trace != nil { // the shapes, for the trace's table
		name += fmt.Sprintf(" %d×%d×%d", a.M, a.N, a.K)
		for _, o := range ops[1:] {
			name += fmt.Sprintf(",%d", o.N)
		}
		name += " " + a.w.dt.String()
	}
	ge := g.geom()
	if ge.wg {
		name += " wgmma"
	}
	err = g.launch(name, ge.f[kind16(a.w.dt)], driver.Dim3{uint32(l.blocks), 1, 1}, block1D(rowsThreads), ge.smem)
	if err != nil {
		return fmt.Errorf("cuda: matmul %d×%d×%d %v: %w", a.M, a.N, a.K, a.w.dt, err)
	}
	return nil
}

// rowsBuffers returns the workspace for slots partial tiles (0 when
// none) and the tile counters, allocated and zeroed on first use (the
// kernel leaves them at zero).
func (g *gpu) rowsBuffers(slots int) (ws, count driver.DevicePtr, err error) {
	if g.rowsCount == nil {
		if err := g.inCapture("allocating the row products' counters"); err != nil {
			return 0, 0, err
		}
		blk, err := g.mem.alloc(PurposeScratch, rowsCounters*4)
		if err != nil {
			return 0, 0, err
		}
		if err := g.drv.MemsetD8Async(blk.ptr, 0, blk.bytes, g.stream); err != nil {
			return 0, 0, fmt.Errorf("cuda: zeroing the row products' counters: %w", errors.Join(err, g.mem.free(blk)))
		}
		g.rowsCount = blk
	}
	if slots > 0 {
		if ws, err = g.scratch(&g.rowsScratch, int64(slots)*rowsTileFloats*4); err != nil {
			return 0, 0, err
		}
	}
	return ws, g.rowsCount.ptr, nil
}

// putOpArgs writes the head that vla_rows_args and vla_gstream_args
// share (96 bytes): the weights, outputs, biases, bias types and column
// counts of up to three ops, in that order, three slots of each.
func putOpArgs(st []byte, ops []matmulOperands) {
	le := binary.LittleEndian
	for i, o := range ops {
		bp, bdt := biasArg(o.bias)
		le.PutUint64(st[8*i:], uint64(o.w.ptr))
		le.PutUint64(st[24+8*i:], uint64(o.d.ptr))
		le.PutUint64(st[48+8*i:], uint64(bp))
		le.PutUint32(st[72+4*i:], uint32(bdt))
		le.PutUint32(st[84+4*i:], uint32(o.N))
	}
}
