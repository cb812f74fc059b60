package qwen3vl

import (
	"context"
	"errors"
	"fmt"
	"math"

	"vlanode/backend"
	"vlanode/models"
	"vlanode/tensor"
)

// Features are the vision tower's outputs for a batch of images, in the
// text decoder's hidden size. They MUST be released with Free.
type Features struct {
	Grids []Grid
	// Embeds are the merged visual tokens [tokens, textHidden], images in
	// order: they replace the embeddings of the image tokens.
	Embeds backend.Tensor
	// Deepstack[k] [tokens, textHidden] is added to the image tokens'
	// hidden states after text layer k.
	Deepstack []backend.Tensor
}

// Tokens is the number of visual tokens.
func (f *Features) Tokens() int {
	n, _ := backend.Matrix(f.Embeds)
	return n
}

// Free releases the feature tensors.
func (f *Features) Free(be backend.Backend) {
	for _, t := range append([]backend.Tensor{f.Embeds}, f.Deepstack...) {
		if t != nil {
			be.Free(t)
		}
	}
	f.Embeds, f.Deepstack = nil, nil
}

// visionScratch is the activation memory of one vision pass over P
// patches, with the pass's rotary tables and frame segments.
type visionScratch struct {
	patches       int
	h             backend.Tensor // [P, hidden]
	q, k, v, attn backend.Tensor // [P, hidden]
	ff            backend.Tensor // [P, intermediate]
	merged        backend.Tensor // [P/unit, unit*hidden]
	cos, sin      backend.Tensor // [P, headDim/2]
	scale         float32
	segments      []int
	allocated     []backend.Tensor
}

func (v *Vision) newScratch(P int) (*visionScratch, error) {
	if v.shared != nil {
		return v.sharedScratch(P)
	}
	c := v.Config
	s := &visionScratch{patches: P, scale: float32(1 / math.Sqrt(float64(c.HeadDim())))}
	for _, a := range []struct {
		dst        *backend.Tensor
		rows, cols int
	}{
		{&s.h, P, c.HiddenSize}, {&s.q, P, c.HiddenSize}, {&s.k, P, c.HiddenSize}, {&s.v, P, c.HiddenSize},
		{&s.attn, P, c.HiddenSize}, {&s.ff, P, c.IntermediateSize},
		{&s.merged, P / c.MergeUnit(), c.MergeUnit() * c.HiddenSize},
		{&s.cos, P, c.HeadDim() / 2}, {&s.sin, P, c.HeadDim() / 2},
	} {
		t, err := v.be.Alloc("activations", tensor.F32, a.rows, a.cols)
		if err != nil {
			s.free(v.be)
			return nil, fmt.Errorf("qwen3vl: allocating vision activations: %w", err)
		}
		*a.dst = t
		s.allocated = append(s.allocated, t)
	}
	return s, nil
}

// sharedScratch is a scratch of P patches over the shared activations
// (ShareScratch), with rotary tables of its own; freeing it frees only
// those.
func (v *Vision) sharedScratch(P int) (*visionScratch, error) {
	base, ok := v.shared[P]
	if !ok {
		shared := v.shared
		v.shared = nil // newScratch allocates
		var err error
		base, err = v.newScratch(P)
		v.shared = shared
		if err != nil {
			return nil, err
		}
		v.shared[P] = base
	}
	s := *base
	s.allocated, s.segments = nil, nil
	for _, dst := range []*backend.Tensor{&s.cos, &s.sin} {
		t, err := v.be.Alloc("activations", tensor.F32, P, v.Config.HeadDim()/2)
		if err != nil {
			s.free(v.be)
			return nil, fmt.Errorf("qwen3vl: allocating vision rotary tables: %w", err)
		}
		*dst = t
		s.allocated = append(s.allocated, t)
	}
	return &s, nil
}

func (s *visionScratch) free(be backend.Backend) {
	for _, t := range s.allocated {
		be.Free(t)
	}
	s.allocated = nil
}

// VisionPass is one run of the vision tower over a batch of images, block
// by block, so that an executor can bring each block's weights in just
// before it runs: Begin embeds the patches, RunBlock runs the next block
// (and the DeepStack merger that reads its output), Finish runs the patch
// merger and hands the Features over. A pass MUST be closed.
type VisionPass struct {
	v         *Vision
	grids     []Grid
	x         backend.Tensor // [P, hidden] hidden states
	s         *visionScratch
	next      int
	deepstack []backend.Tensor
}

// Begin checks the images and computes the blocks' input: the patch
// embedding of Pixels plus the interpolated position embedding; it also
// prepares the rotary tables and the per-frame attention segments.
func (v *Vision) Begin(im *Images) (*VisionPass, error) {
	c := v.Config
	if err := CheckImages(c, im); err != nil {
		return nil, err
	}
	P := im.Patches()
	p := &VisionPass{v: v, grids: append([]Grid(nil), im.Grids...)}
	var err error
	if p.s, err = v.newScratch(P); err != nil {
		return nil, err
	}
	p.s.segments = frameSegments(im.Grids)
	if p.x, err = v.be.Alloc("activations", tensor.F32, P, c.HiddenSize); err != nil {
		p.Close()
		return nil, err
	}
	if err := models.Do(v.Exec, v.embedUnit, func() error { return p.embed(im) }); err != nil {
		p.Close()
		return nil, fmt.Errorf("qwen3vl: vision embedding: %w", err)
	}
	return p, nil
}

// embed writes patch embedding + position embedding into p.x and uploads
// the rotary tables.
func (p *VisionPass) embed(im *Images) error {
	v, c, be := p.v, p.v.Config, p.v.be
	px := im.Device
	if px == nil {
		var err error
		if px, err = be.Alloc("activations", tensor.F32, im.Patches(), c.PatchDim()); err != nil {
			return err
		}
		defer be.Free(px)
		if err := be.Upload(px, im.Pixels); err != nil {
			return err
		}
	}
	if err := be.MatMul(p.x, px, v.patchMat, v.PatchB); err != nil {
		return err
	}
	if im.Done != nil {
		im.Done()
	}
	if err := p.uploadPositions(im); err != nil {
		return err
	}
	if err := be.Add(p.x, p.x, p.s.h); err != nil {
		return err
	}
	cos, sin := v.rope.tables(im.Grids, c.SpatialMergeSize, v.invFreq)
	if err := be.Upload(p.s.cos, cos); err != nil {
		return err
	}
	return be.Upload(p.s.sin, sin)
}

// uploadPositions writes the patches' position embeddings into p.s.h: the
// rows of each distinct grid are uploaded once, and an image whose grid
// came before copies them on the device (the 16 frames of the standard
// workload upload one frame's 3.3 MB instead of 53 MB). The interpolation
// runs on the host: the backend has no op that scales rows by per-row
// weights (see gridPositions).
func (p *VisionPass) uploadPositions(im *Images) error {
	v, c, be := p.v, p.v.Config, p.v.be
	first := map[Grid]int{} // the first row of each grid's first image
	row := 0
	for _, g := range im.Grids {
		n := g.Patches()
		dst, err := be.Rows(p.s.h, row, n)
		if err != nil {
			return err
		}
		if at, ok := first[g]; ok {
			src, err := be.Rows(p.s.h, at, n)
			if err != nil {
				return err
			}
			if err := be.Copy(dst, src); err != nil {
				return err
			}
		} else {
			pos, err := gridPositions(v.pos, &v.posCache, g, c.GridSide(), c.SpatialMergeSize)
			if err != nil {
				return err
			}
			if err := be.Upload(dst, pos); err != nil {
				return err
			}
			first[g] = row
		}
		row += n
	}
	return nil
}

// Next is the index of the block RunBlock runs next (Depth when all ran).
func (p *VisionPass) Next() int { return p.next }

// Hidden is the pass's hidden states [patches, hidden], the output of the
// blocks run so far; it belongs to the pass.
func (p *VisionPass) Hidden() backend.Tensor { return p.x }

// RunBlock runs the next block, then the DeepStack merger of its output
// if the block is one of deepstack_visual_indexes.
func (p *VisionPass) RunBlock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	v := p.v
	if p.x == nil || p.next >= len(v.Blocks) {
		return errors.New("qwen3vl: no vision block left to run")
	}
	i := p.next
	b, us := v.Blocks[i], v.blockUnits[i]
	err := models.Do(v.Exec, us[0], func() error { return b.Attention(v.be, p.x, p.s) })
	if err == nil {
		err = models.Do(v.Exec, us[1], func() error { return b.MLP(v.be, p.x, p.s) })
	}
	if err != nil {
		return fmt.Errorf("qwen3vl: vision block %d: %w", i, err)
	}
	p.next++
	if k := len(p.deepstack); k < len(v.dsBlocks) && v.dsBlocks[k] == i {
		out, err := p.merge(v.Deepstack[v.dsMerger[k]], v.deepstackUnits[v.dsMerger[k]])
		if err != nil {
			return fmt.Errorf("qwen3vl: deepstack merger %d (after vision block %d): %w", v.dsMerger[k], i, err)
		}
		p.deepstack = append(p.deepstack, out)
	}
	return nil
}

// merge runs merger m over the hidden states into a new tensor.
func (p *VisionPass) merge(m *Merger, u *models.Unit) (backend.Tensor, error) {
	c := p.v.Config
	out, err := p.v.be.Alloc("activations", tensor.F32, p.s.patches/c.MergeUnit(), c.OutHiddenSize)
	if err != nil {
		return nil, err
	}
	if err := models.Do(p.v.Exec, u, func() error { return m.Forward(p.v.be, out, p.x, p.s) }); err != nil {
		p.v.be.Free(out)
		return nil, err
	}
	return out, nil
}

// Finish runs the patch merger after the last block and returns the
// features; the pass keeps nothing of them.
func (p *VisionPass) Finish() (*Features, error) {
	if p.x == nil || p.next != len(p.v.Blocks) {
		return nil, fmt.Errorf("qwen3vl: vision pass finished after %d of %d blocks", p.next, len(p.v.Blocks))
	}
	emb, err := p.merge(p.v.Merger, p.v.mergerUnit)
	if err != nil {
		return nil, fmt.Errorf("qwen3vl: patch merger: %w", err)
	}
	f := &Features{Grids: p.grids, Embeds: emb, Deepstack: p.deepstack}
	p.deepstack = nil
	p.Close()
	return f, nil
}

// Close releases what the pass still holds.
func (p *VisionPass) Close() {
	be := p.v.be
	if p.s != nil {
		p.s.free(be)
		p.s = nil
	}
	if p.x != nil {
		be.Free(p.x)
		p.x = nil
	}
	for _, t := range p.deepstack {
		be.Free(t)
	}
	p.deepstack = nil
}

// Encode runs the whole vision tower over a batch of images.
func (v *Vision) Encode(ctx context.Context, im *Images) (*Features, error) {
	p, err := v.Begin(im)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	for p.Next() < len(v.Blocks) {
		if err := p.RunBlock(ctx); err != nil {
			return nil, err
		}
	}
	return p.Finish()
}
