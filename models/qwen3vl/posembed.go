package qwen3vl

import (
	"fmt"
	"sync"

	"vlanode/tensor"
)

// linspace32 returns torch.linspace(start, end, steps) in float32 as
// torch's CPU kernel computes it element by element: step = (end−start) /
// (steps−1), start + step·i for the first half, end − step·(steps−1−i) for
// the rest. (torch's vectorized path can round a value of the second half
// differently by one ulp; the interpolation weights then differ by ~1e-7.)
func linspace32(start, end float32, steps int) []float32 {
	out := make([]float32, steps)
	if steps == 1 {
		out[0] = start
		return out
	}
	step := (end - start) / float32(steps-1)
	half := steps / 2
	for i := range out {
		if i < half {
			out[i] = start + float32(step*float32(i))
		} else {
			out[i] = end - float32(step*float32(steps-1-i))
		}
	}
	return out
}

// corners are the bilinear interpolation terms of one patch: rows of the
// position table and their weights, in transformers' order (top-left,
// top-right, bottom-left, bottom-right).
type corners struct {
	idx [4]int
	w   [4]float32
}

// bilinearPlan returns the interpolation terms of every patch of grid g in
// the encoder's patch order, all frames (which repeat the same terms), for a square
// position table of side × side rows — transformers'
// fast_pos_embed_interpolate: the table is sampled at linspace(0, side−1,
// H) × linspace(0, side−1, W), then reordered into merge blocks.
func bilinearPlan(g Grid, side, merge int) []corners {
	hs := linspace32(0, float32(side-1), g.H)
	ws := linspace32(0, float32(side-1), g.W)
	grid := make([]corners, g.H*g.W) // raster order
	for i, hv := range hs {
		hf := int(hv) // truncation, as Tensor.int()
		hc := min(hf+1, side-1)
		dh := hv - float32(hf)
		for j, wv := range ws {
			wf := int(wv)
			wc := min(wf+1, side-1)
			dw := wv - float32(wf)
			grid[i*g.W+j] = corners{
				idx: [4]int{hf*side + wf, hf*side + wc, hc*side + wf, hc*side + wc},
				w: [4]float32{
					float32((1 - dh) * (1 - dw)), float32((1 - dh) * dw),
					float32(dh * (1 - dw)), float32(dh * dw),
				},
			}
		}
	}
	rows, cols := patchCoords([]Grid{g}, merge)
	out := make([]corners, 0, g.Patches())
	for p := range rows {
		out = append(out, grid[rows[p]*g.W+cols[p]])
	}
	return out
}

// posTable reads rows of the learned position embedding from its
// checkpoint bytes (F32, F16 or BF16) as float32.
type posTable struct {
	dt     tensor.DType
	data   []byte
	hidden int
}

func (t posTable) row(dst []float32, r int) error {
	n := t.hidden * t.dt.Size()
	if (r+1)*n > len(t.data) {
		return fmt.Errorf("qwen3vl: position table row %d outside its %d bytes", r, len(t.data))
	}
	return tensor.ToF32(dst, t.dt, t.data[r*n:(r+1)*n])
}

// gridCache keeps the interpolated position embeddings of the grids seen
// last: a camera's frames keep their size, so every request after the first
// reuses them. It is safe for concurrent use.
type gridCache struct {
	mu      sync.Mutex
	entries map[Grid][]float32
}

// maxCachedGrids bounds the cache (each 1×20×36 grid holds 720 × 1152
// float32: 3.3 MB).
const maxCachedGrids = 16

func (c *gridCache) get(g Grid, compute func() ([]float32, error)) ([]float32, error) {
	c.mu.Lock()
	v, ok := c.entries[g]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := compute()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxCachedGrids {
		c.entries = map[Grid][]float32{}
	}
	c.entries[g] = v
	return v, nil
}

// gridPositions returns the position embeddings of the patches of one
// image of grid g, [g.Patches(), hidden] row-major: for each patch the sum,
// in float32 and in transformers' order, of its four table rows times
// their weights. Each grid is computed once and kept in cache: the slice
// must not be modified.
func gridPositions(t posTable, cache *gridCache, g Grid, side, merge int) ([]float32, error) {
	return cache.get(g, func() ([]float32, error) { return interpolateGrid(t, g, side, merge) })
}

// interpolateGrid computes gridPositions for one grid.
func interpolateGrid(t posTable, g Grid, side, merge int) ([]float32, error) {
	out := make([]float32, 0, g.Patches()*t.hidden)
	rows := make([][]float32, 4)
	for i := range rows {
		rows[i] = make([]float32, t.hidden)
	}
	acc := make([]float32, t.hidden)
	{
		for _, c := range bilinearPlan(g, side, merge) {
			for k := range 4 {
				if err := t.row(rows[k], c.idx[k]); err != nil {
					return nil, err
				}
			}
			for e := range acc {
				s := float32(rows[0][e] * c.w[0])
				s = float32(s + float32(rows[1][e]*c.w[1]))
				s = float32(s + float32(rows[2][e]*c.w[2]))
				acc[e] = float32(s + float32(rows[3][e]*c.w[3]))
			}
			out = append(out, acc...)
		}
	}
	return out, nil
}
