package residency

import (
	"vlanode/placement"
	"vlanode/weights/bf16z"
)

// Compressed streaming (docs/compression.md): a streamed unit's blob is
// kept bf16z-coded in pinned host memory, copied compressed into a VRAM
// staging buffer and decoded by the GPU into its slot (or home). The
// planner models each unit's compressed size and its decode, on an engine
// of its own, and counts the staging buffers in the budget.

// PurposeStaging is the budget purpose of the staging buffers (one per DFB
// slot, sized to the largest compressed unit): layering.StagingPurpose.
const PurposeStaging Purpose = "z-staging"

// DefaultZRatio is the share of a coded bf16 tensor's bytes that bf16z
// keeps, for plans made before the weights are read (Options.ZRatio's
// default): 0.665, measured on synth Alpamayo-R1-10B
// (bench/results/compression.md; trained LLMs 0.68–0.70 per DFloat11).
// After encoding, Options.Stored gives the exact sizes.
const DefaultZRatio = 0.665

// ZMaxRatio is the largest compressed-to-raw ratio at which a unit is
// streamed compressed; above it (norms, tiny units) it stays raw: the
// decode would cost more than the copy saves.
const ZMaxRatio = 0.95

// zEstimate is the size bf16z.Encode makes of u, its bf16 tensors at
// ratio rho of their bytes: the header, a record per tensor, a job per
// tile, and for each tensor that pays (DefaultMinSaving, its decoding
// table counted) rho of its bytes plus its table, else its bytes.
func zEstimate(u placement.Unit, rho float64) int64 {
	n := int64(bf16z.HeaderBytes + bf16z.TensorBytes*len(u.Tensors))
	for _, t := range u.Tensors {
		elems := int64(1)
		for _, d := range t.Shape {
			elems *= int64(d)
		}
		raw := 2 * elems
		n += bf16z.JobBytes * zTiles(t.Shape)
		if coded := int64(rho*float64(raw)) + bf16z.LUTBytes; float64(raw-coded) >= bf16z.DefaultMinSaving*float64(raw) {
			n += coded
		} else {
			n += (raw + bf16z.PayloadAlign - 1) / bf16z.PayloadAlign * bf16z.PayloadAlign
		}
	}
	return n
}

// zTiles is the tiles of a tensor of shape: whole rows of its matrix view
// (Shape[0] rows of the product of the rest), at most MaxTileElems
// elements a tile.
func zTiles(shape []int) int64 {
	if len(shape) == 0 {
		return 0
	}
	rows, cols := int64(shape[0]), int64(1)
	for _, d := range shape[1:] {
		cols *= int64(d)
	}
	if rows*cols == 0 {
		return 0
	}
	tr := max(bf16z.MaxTileElems/cols, 1)
	tc := min(cols, bf16z.MaxTileElems)
	return (rows + tr - 1) / tr * ((cols + tc - 1) / tc)
}

// compress sets what compressed streaming makes of each item: its stored
// size (exact from opts.Stored, else estimated), its copy time at that
// size and its decode time; an item whose stored size is not below
// ZMaxRatio of its bytes, that lives on the host or that a stage of
// opts.RawStages computes, stays raw.
func compress(items []item, p *Profile, opts Options) {
	if !opts.Compress {
		return
	}
	rho := opts.ZRatio
	if rho == 0 {
		rho = DefaultZRatio
	}
	for i := range items {
		it := &items[i]
		if it.HostOnly || it.Bytes == 0 || rawIn(it.Unit, opts.RawStages) {
			continue
		}
		stored, ok := opts.Stored[it.ID]
		if !ok {
			stored = zEstimate(it.Unit, rho)
		}
		if float64(stored) >= ZMaxRatio*float64(it.Bytes) {
			continue
		}
		it.zok, it.stored = true, stored
		it.dma = p.DMAMs(stored)
		it.dec = p.DecodeMs(it.Bytes)
		it.shareRatio = float64(stored) / float64(it.Bytes)
		if r, ok := opts.ShareRatio[it.ID]; ok {
			it.shareRatio = r
		}
	}
}

// gpuShare is the raw bytes of the GPU's share of item it when the CPU
// takes cpu of its split dimension: its bytes less the CPU's share of its
// matrices.
func (it *item) gpuShare(cpu int) int64 {
	share := float64(cpu) / float64(it.SplitDim)
	return it.Bytes - int64(share*float64(it.MatrixBytes()))
}

// shareStored is what the GPU's share at cut cpu stores compressed.
func (it *item) shareStored(cpu int) int64 {
	return int64(it.shareRatio * float64(it.gpuShare(cpu)))
}

// storedBytes is what the item keeps in host memory and copies: its
// compressed size when z, else its bytes.
func (it *item) storedBytes(z bool) int64 {
	if z {
		return it.stored
	}
	return it.Bytes
}

// rawIn says whether one of stages computes u (its units stream raw).
func rawIn(u placement.Unit, stages []placement.Stage) bool {
	for _, s := range stages {
		if w, ok := u.WorkIn(s); ok && w.Passes > 0 {
			return true
		}
	}
	return false
}
