// Package bf16z compresses the bf16 tensors of a weights.Blob losslessly,
// in the manner of DFloat11 (arXiv 2504.11651): of each element, the sign
// and the seven mantissa bits are kept as a raw byte and the eight exponent
// bits, which carry about 3 bits of information in trained or synthetic
// weights, are Huffman-coded with a canonical, length-limited code of the
// tensor's own (codewords of at most MaxCodeLen bits, decoded through one
// 8 KiB table a GPU block keeps in shared memory).
//
// A compressed Unit decodes into the raw blob's layout, so the executor's
// slot, WeightAt views and kernels do not change: only the copy moves fewer
// bytes (Unit.Data, about 0.70 of the raw blob for Alpamayo-R1-10B), and a
// decode kernel (cuda: ZDecoder) expands them into the slot.
//
// Every tensor is cut into tiles, rectangles of its matrix view (Shape[0]
// rows of the product of the other dimensions) of at most MaxTileElems
// elements; a job decodes one tile into a destination at a given offset and
// row pitch, so a plan can decode a row range or a column range of a tensor
// elsewhere (Unit.Plan). A coded tile is up to eight warp-streams of
// StreamElems elements; in a warp-stream lane l codes elements l, l+32,
// l+64, ... into a bit stream of its own, and the 32 lanes' 16-bit words are
// interleaved in the order a warp reads them, each lane taking a word when
// its next codeword needs more bits than it holds. A warp thus decodes one
// element a lane a step with no offsets but the warp-stream's start, and a
// CPU decodes the same stream lane after lane (decodeStream).
//
// Each job carries a 32-bit checksum of the decoded tile (every element
// keyed by its position) and of the job's own fields, checked before the
// Go decoder writes a tile and by the GPU kernel, which reports failing
// jobs in a device status word: corrupted or truncated data is reported,
// naming the tensor and tile, never decoded silently into wrong weights.
// Tensors that coding would not shrink by Options.MinSaving, and tiles that
// coding would not shrink at all, are stored raw (KindRaw) and copied.
//
// docs/compression.md describes the format, its measured ratios and
// rates, and what the planner and executor need to account for it.
package bf16z
