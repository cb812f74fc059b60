package qwen3vl

import (
	"fmt"

	"vlanode/models"
)

// Token types, the values of transformers' mm_token_type_ids.
const (
	TextToken  = 0
	ImageToken = 1
	VideoToken = 2
)

// Positions are the multimodal rotary positions of a sequence: for every
// token its temporal (Positions[0]), height (1) and width (2) position.
type Positions [3][]int

// TokenTypes derives mm_token_type_ids from input ids as transformers'
// processor does: ImageToken where the id is imageTokenID, else TextToken.
func TokenTypes(ids []int32, imageTokenID int) []int32 {
	types := make([]int32, len(ids))
	for i, id := range ids {
		if int(id) == imageTokenID {
			types[i] = ImageToken
		}
	}
	return types
}

// imageRun is a run of consecutive image tokens: sequence positions
// [Start, Start+Len) hold visual tokens [Offset, Offset+Len) of the batch.
type imageRun struct{ Start, Len, Offset int }

// imageRuns splits the image tokens of types into runs, one per image, and
// checks them against the grids: as many runs as grids, run i holding
// exactly grid i's merged token count.
func imageRuns(types []int32, grids []Grid, merge int) ([]imageRun, error) {
	var runs []imageRun
	off := 0
	for i := 0; i < len(types); {
		switch types[i] {
		case TextToken:
			i++
			continue
		case ImageToken:
		case VideoToken:
			return nil, fmt.Errorf("qwen3vl: token %d is a video token; videos are not supported: %w", i, models.ErrBadInput)
		default:
			return nil, fmt.Errorf("qwen3vl: token %d has type %d (want 0 text or 1 image): %w", i, types[i], models.ErrBadInput)
		}
		j := i
		for j < len(types) && types[j] == ImageToken {
			j++
		}
		k := len(runs)
		if k >= len(grids) {
			return nil, fmt.Errorf("qwen3vl: image token run %d at position %d has no image (%d grids given): %w", k, i, len(grids), models.ErrBadInput)
		}
		if want := grids[k].Tokens(merge); j-i != want {
			g := grids[k]
			return nil, fmt.Errorf("qwen3vl: image %d has %d image tokens at position %d; its grid (%d, %d, %d) merges to %d: %w", k, j-i, i, g.T, g.H, g.W, want, models.ErrBadInput)
		}
		runs = append(runs, imageRun{Start: i, Len: j - i, Offset: off})
		off += j - i
		i = j
	}
	if len(runs) != len(grids) {
		return nil, fmt.Errorf("qwen3vl: %d runs of image tokens for %d images: %w", len(runs), len(grids), models.ErrBadInput)
	}
	return runs, nil
}

// RopeIndex lays out the multimodal positions of a sequence as transformers'
// Qwen3VLModel.get_rope_index does from mm_token_type_ids and
// image_grid_thw. A run of text tokens counts up from the current position
// on all three axes. A run of image tokens (one image, grid T×H×W, merged
// to T×h×w tokens with h = H/merge, w = W/merge) gets (start+t, start+i,
// start+j) for frame t, token row i and column j, and the current position
// then advances by max(H, W)/merge. delta is the largest position + 1 −
// len(types): text appended after the sequence at cache row r sits at
// position r + delta on all three axes.
func RopeIndex(types []int32, grids []Grid, merge int) (pos Positions, delta int, err error) {
	if len(types) == 0 {
		return pos, 0, fmt.Errorf("qwen3vl: no tokens: %w", models.ErrBadInput)
	}
	runs, err := imageRuns(types, grids, merge)
	if err != nil {
		return pos, 0, err
	}
	for a := range pos {
		pos[a] = make([]int, 0, len(types))
	}
	cur, maxPos := 0, 0
	text := func(n int) {
		for i := range n {
			for a := range pos {
				pos[a] = append(pos[a], cur+i)
			}
		}
		cur += n
	}
	next := 0
	for k, r := range runs {
		text(r.Start - next)
		g := grids[k]
		h, w := g.H/merge, g.W/merge
		for t := range g.T {
			for i := range h {
				for j := range w {
					pos[0] = append(pos[0], cur+t)
					pos[1] = append(pos[1], cur+i)
					pos[2] = append(pos[2], cur+j)
				}
			}
		}
		cur += max(g.H, g.W) / merge
		next = r.Start + r.Len
	}
	text(len(types) - next)
	for a := range pos {
		for _, p := range pos[a] {
			maxPos = max(maxPos, p)
		}
	}
	return pos, maxPos + 1 - len(types), nil
}
