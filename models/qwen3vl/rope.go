package qwen3vl

import (
	"fmt"
	"math"
	"sync"

	"vlanode/models"
)

// mropeAxis returns which position axis (0 temporal, 1 height, 2 width)
// rotary frequency j carries under transformers' apply_interleaved_mrope:
// height at j ≡ 1 (mod 3) below 3·section[1], width at j ≡ 2 (mod 3) below
// 3·section[2], temporal everywhere else (so the last frequencies are all
// temporal when section[0] is the largest, as in [24, 20, 20]).
func mropeAxis(j int, section [3]int) int {
	switch {
	case j%3 == 1 && j < 3*section[1]:
		return 1
	case j%3 == 2 && j < 3*section[2]:
		return 2
	}
	return 0
}

// MRopeTables fills cos and sin ([len(pos[0]), len(invFreq)] row-major)
// with the interleaved multimodal rotary tables of Qwen3-VL's text decoder:
// frequency j of token t turns by float32(pos[axis(j)][t]) · invFreq[j], in
// float32 as transformers computes it.
func MRopeTables(cos, sin []float32, pos Positions, invFreq []float32, section [3]int) {
	half := len(invFreq)
	models.ParallelFor(len(pos[0]), 256, func(lo, hi int) {
		for j, f := range invFreq {
			p := pos[mropeAxis(j, section)]
			for t := lo; t < hi; t++ {
				a := float64(float32(p[t]) * f)
				cos[t*half+j] = float32(math.Cos(a))
				sin[t*half+j] = float32(math.Sin(a))
			}
		}
	})
}

// patchCoords returns the (row, column) of every patch of grids in the
// encoder's patch order: per image and frame, merge×merge blocks in raster
// order and the patches of a block in raster order (transformers'
// rot_pos_emb and the processor's pixel_values layout).
func patchCoords(grids []Grid, merge int) (rows, cols []int) {
	for _, g := range grids {
		for range g.T {
			for bh := range g.H / merge {
				for bw := range g.W / merge {
					for mh := range merge {
						for mw := range merge {
							rows = append(rows, bh*merge+mh)
							cols = append(cols, bw*merge+mw)
						}
					}
				}
			}
		}
	}
	return rows, cols
}

// visionRopeTables returns the 2D rotary tables of the vision encoder,
// cos and sin [patches, headDim/2]: the first headDim/4 frequencies turn by
// the patch's row, the next headDim/4 by its column, each
// float32(coordinate) · invFreq[i] with invFreq the rotary frequencies of
// dimension headDim/2 (transformers' Qwen3VLVisionRotaryEmbedding).
func visionRopeTables(grids []Grid, merge int, invFreq []float32) (cos, sin []float32) {
	rows, cols := patchCoords(grids, merge)
	q := len(invFreq)
	half := 2 * q
	cos, sin = make([]float32, len(rows)*half), make([]float32, len(rows)*half)
	for p := range rows {
		for i, f := range invFreq {
			for k, c := range [2]int{rows[p], cols[p]} {
				a := float64(float32(c) * f)
				cos[p*half+k*q+i] = float32(math.Cos(a))
				sin[p*half+k*q+i] = float32(math.Sin(a))
			}
		}
	}
	return cos, sin
}

// ropeCache keeps the vision rotary tables of the last list of grids: a
// node's requests repeat the same cameras and sizes. Safe for concurrent use.
type ropeCache struct {
	mu       sync.Mutex
	key      string
	cos, sin []float32
}

// tables returns visionRopeTables(grids, merge, invFreq), from the cache
// when grids are those of the last call. The slices must not be modified.
func (c *ropeCache) tables(grids []Grid, merge int, invFreq []float32) (cos, sin []float32) {
	key := fmt.Sprint(grids, merge)
	c.mu.Lock()
	defer c.mu.Unlock()
	if key != c.key {
		c.cos, c.sin = visionRopeTables(grids, merge, invFreq)
		c.key = key
	}
	return c.cos, c.sin
}
