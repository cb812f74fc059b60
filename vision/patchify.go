package vision

// patchify normalizes img, whose sides are multiples of PatchSize ×
// MergeSize and whose pixels are RGB, or BGR if bgr, and writes the rows of
// merge-block rows [blockLo, blockHi) of its pixel values into dst, row r at
// dst[(r-rowBase)·RowSize:].
//
// transformers views the (T, C, H, W) stack as
// (T/Tp, Tp, C, H/(mP), m, P, W/(mP), m, P) and permutes it to
// (T/Tp, H/(mP), W/(mP), m, m, C, Tp, P, P): row r of the output is patch
// (py, px) = (bh·m + mh, bw·m + mw) for r = ((bh·(W/(mP)) + bw)·m + mh)·m + mw,
// and holds, for each channel c and temporal index t, the P×P patch row by
// row. A still image fills every t with the same values.
func (p *Processor) patchify(dst []float32, rowBase int, img *Image, bgr bool, blockLo, blockHi int) {
	P, m, tp := p.cfg.PatchSize, p.cfg.MergeSize, p.cfg.TemporalPatchSize
	pp := P * P
	plane := tp * pp // one channel's values in a row
	rowSize := 3 * plane
	blocksW := img.Width / (P * m)
	stride := 3 * img.Width
	// Source byte i of a pixel is output channel ch[i].
	ch := [3]int{0, 1, 2}
	if bgr {
		ch = [3]int{2, 1, 0}
	}
	l0, l1, l2 := &p.lut[ch[0]], &p.lut[ch[1]], &p.lut[ch[2]]
	for bh := blockLo; bh < blockHi; bh++ {
		for bw := range blocksW {
			for mh := range m {
				for mw := range m {
					r := ((bh*blocksW+bw)*m+mh)*m + mw - rowBase
					row := dst[r*rowSize : (r+1)*rowSize]
					y0, x0 := (bh*m+mh)*P, (bw*m+mw)*P
					c0, c1, c2 := row[ch[0]*plane:][:pp], row[ch[1]*plane:][:pp], row[ch[2]*plane:][:pp]
					for y := range P {
						off := (y0+y)*stride + 3*x0
						src := img.Pix[off : off+3*P]
						o0 := c0[y*P:][:P]
						o1, o2 := c1[y*P:][:len(o0)], c2[y*P:][:len(o0)]
						for x := range o0 {
							if len(src) < 3 {
								break // never: len(src) = 3·P; this drops bounds checks
							}
							o0[x], o1[x], o2[x] = l0[src[0]], l1[src[1]], l2[src[2]]
							src = src[3:]
						}
					}
					for c := range 3 {
						first := row[c*plane : c*plane+pp]
						for t := 1; t < tp; t++ {
							copy(row[c*plane+t*pp:c*plane+(t+1)*pp], first)
						}
					}
				}
			}
		}
	}
}

// stagedCopyBytes is the size from which Go's copy on amd64 uses
// non-temporal stores (runtime/memmove_amd64.s), which write memory without
// reading it first. pixel_values are megabytes that are written once and
// not read back soon, so patchRows builds them in a cache-sized buffer of at
// least this size and copies it out: about 10% faster when the 2-core
// machine is short of memory bandwidth.
const stagedCopyBytes = 1 << 20

// patchRows writes the rows of merge-block rows [blockLo, blockHi) of img
// into dst (whose row 0 is the image's first), through stage.
func (p *Processor) patchRows(dst []float32, img *Image, bgr bool, blockLo, blockHi int, stage *[]float32) {
	blockRowPatches := (img.Width / p.cfg.PatchSize) * p.cfg.MergeSize
	blockRowValues := blockRowPatches * p.RowSize()
	group := max(1, (stagedCopyBytes/4+blockRowValues-1)/blockRowValues)
	for b := blockLo; b < blockHi; b += group {
		e := min(b+group, blockHi)
		buf := grow(stage, (e-b)*blockRowValues)
		p.patchify(buf, b*blockRowPatches, img, bgr, b, e)
		copy(dst[b*blockRowValues:], buf)
	}
}
