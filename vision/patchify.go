package vision

import "vlanode/vision/internal/ntstore"

// patchRows normalizes img, whose sides are multiples of PatchSize ×
// MergeSize and whose pixels are RGB, or BGR if bgr, and writes the rows of
// its merge-block rows [blockLo, blockHi) into dst, whose row 0 is the
// image's first. strip is the caller's scratch.
//
// transformers views the (T, C, H, W) stack as
// (T/Tp, Tp, C, H/(mP), m, P, W/(mP), m, P) and permutes it to
// (T/Tp, H/(mP), W/(mP), m, m, C, Tp, P, P): row r of the output is patch
// (py, px) = (bh·m + mh, bw·m + mw) for r = ((bh·(W/(mP)) + bw)·m + mh)·m + mw,
// and holds, for each channel c and temporal index t, the P×P patch row by
// row. A still image fills every t with the same values.
//
// Each merge-block row, m·P image rows, is first normalized into strip, one
// float32 plane a channel (a few hundred KiB, which stay in the L2 cache),
// in one sequential pass through a lookup table. Its patches are then copied
// out, each Tp times, with non-temporal stores (ntstore.Patch): pixel_values
// are megabytes (75 MB for 16 frames of 512×384) written once, and such
// stores send them to memory without reading the lines into the cache
// first.
func (p *Processor) patchRows(dst []float32, img *Image, bgr bool, blockLo, blockHi int, strip *[]float32) {
	P, m, tp := p.cfg.PatchSize, p.cfg.MergeSize, p.cfg.TemporalPatchSize
	rowSize := 3 * tp * P * P
	w := img.Width
	blocksW := w / (P * m)
	stripH := m * P
	n := stripH * w // values of one channel's plane
	planes := grow(strip, 3*n)
	// Source byte i of a pixel is output channel ch[i].
	ch := [3]int{0, 1, 2}
	if bgr {
		ch = [3]int{2, 1, 0}
	}
	for bh := blockLo; bh < blockHi; bh++ {
		src := img.Pix[bh*stripH*3*w:][:3*n]
		normalize(planes[ch[0]*n:][:n], planes[ch[1]*n:][:n], planes[ch[2]*n:][:n], src,
			&p.lut[ch[0]], &p.lut[ch[1]], &p.lut[ch[2]])
		for bw := range blocksW {
			for mh := range m {
				for mw := range m {
					r := ((bh*blocksW+bw)*m+mh)*m + mw
					ntstore.Patch(dst[r*rowSize:][:rowSize], planes[mh*P*w+(bw*m+mw)*P:], P, w, n, 3, tp)
				}
			}
		}
	}
	ntstore.Fence()
}

// normalize splits the interleaved pixels of src into three planes, mapping
// byte i of each pixel through lut i. It is kept out of line so that its
// loop gets the registers to itself.
//
//go:noinline
func normalize(o0, o1, o2 []float32, src []uint8, l0, l1, l2 *[256]float32) {
	o1, o2 = o1[:len(o0)], o2[:len(o0)]
	for i, j := 0, 0; i < len(o0) && j+2 < len(src); i, j = i+1, j+3 {
		o0[i], o1[i], o2[i] = l0[src[j]], l1[src[j+1]], l2[src[j+2]]
	}
}
