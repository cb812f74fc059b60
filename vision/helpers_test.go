package vision

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// readPNG loads a PNG file as an RGB Image with the standard library, so
// that tests that need no OpenCV run under the nogocv tag too.
func readPNG(t testing.TB, path string) *Image {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	src, err := png.Decode(f)
	require.NoError(t, err)
	b := src.Bounds()
	rgba := image.NewNRGBA(b)
	draw.Draw(rgba, b, src, b.Min, draw.Src)
	img := NewImage(b.Dx(), b.Dy())
	for i := range b.Dx() * b.Dy() {
		copy(img.Pix[3*i:3*i+3], rgba.Pix[4*i:4*i+3])
	}
	return img
}

// testImage returns a deterministic w×h RGB image: gradients with a
// xorshift noise in the low bits, so neighbouring pixels differ.
func testImage(w, h int, seed uint32) *Image {
	img := NewImage(w, h)
	s := seed | 1
	for y := range h {
		for x := range w {
			s ^= s << 13
			s ^= s >> 17
			s ^= s << 5
			i := 3 * (y*w + x)
			img.Pix[i] = uint8(x*255/max(w-1, 1)) ^ uint8(s&15)
			img.Pix[i+1] = uint8(y*255/max(h-1, 1)) ^ uint8(s>>8&15)
			img.Pix[i+2] = uint8((x^y)&255) ^ uint8(s>>16&63)
		}
	}
	return img
}

// sceneImage is a camera-like test picture: gradients, blocks with hard
// edges, and ±4 levels of noise.
func sceneImage(w, h int, seed uint32) *Image {
	img := NewImage(w, h)
	s := seed*2654435761 | 1
	for y := range h {
		for x := range w {
			s ^= s << 13
			s ^= s >> 17
			s ^= s << 5
			n := int(s&7) - 4
			i := 3 * (y*w + x)
			block := ((x/(w/12+1))+(y/(h/8+1))+int(seed))%5 == 0
			r, g, bl := x*255/w, y*255/h, (x+y)*255/(w+h)
			if block {
				r, g, bl = 230-r/4, 40+g/3, 90
			}
			img.Pix[i] = clampByte(r + n)
			img.Pix[i+1] = clampByte(g + n)
			img.Pix[i+2] = clampByte(bl + n)
		}
	}
	return img
}

func clampByte(v int) uint8 { return uint8(min(max(v, 0), 255)) }

// goJPEGFrame encodes img with Go's image/jpeg (4:2:0, standard tables)
// at quality q: JPEG frames without OpenCV.
func goJPEGFrame(tb testing.TB, img *Image, q int) msgs.Frame {
	tb.Helper()
	var buf bytes.Buffer
	require.NoError(tb, jpeg.Encode(&buf, rgbaOf(img), &jpeg.Options{Quality: q}))
	return msgs.Frame{V: msgs.Version, Camera: "front_wide_120fov", Encoding: msgs.EncodingJPEG, Width: img.Width, Height: img.Height, Data: buf.Bytes()}
}

// goPNGFrame encodes img with Go's image/png (8-bit RGB).
func goPNGFrame(tb testing.TB, img *Image) msgs.Frame {
	tb.Helper()
	var buf bytes.Buffer
	require.NoError(tb, png.Encode(&buf, rgbaOf(img)))
	return msgs.Frame{V: msgs.Version, Camera: "front_wide_120fov", Encoding: msgs.EncodingPNG, Width: img.Width, Height: img.Height, Data: buf.Bytes()}
}

// rgbaOf is img as an opaque image.RGBA.
func rgbaOf(img *Image) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, img.Width, img.Height))
	for i := range img.Width * img.Height {
		copy(m.Pix[4*i:], img.Pix[3*i:3*i+3])
		m.Pix[4*i+3] = 0xFF
	}
	return m
}

// pngSpec describes a PNG file written sample by sample (writePNG): any
// colour type and bit depth, interlaced or not, with extra chunks (PLTE,
// tRNS, ...) before the image data.
type pngSpec struct {
	w, h, depth, color int
	interlace          bool
	chunks             [][2]string // type, data
	// sample returns channel c of pixel (x, y), below 2^depth.
	sample func(x, y, c int) int
}

// channels is the samples a pixel of the colour type holds.
func (s pngSpec) channels() int { return map[int]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[s.color] }

// adam7 are the interlace passes: x0, y0, dx, dy.
var adam7 = [7][4]int{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}

// writePNG returns the PNG file of s, its rows unfiltered (filter type 0).
func writePNG(tb testing.TB, s pngSpec) []byte {
	tb.Helper()
	var idat bytes.Buffer
	zw := zlib.NewWriter(&idat)
	passes := [][4]int{{0, 0, 1, 1}}
	if s.interlace {
		passes = adam7[:]
	}
	ch := s.channels()
	for _, p := range passes {
		pw := (s.w - p[0] + p[2] - 1) / p[2]
		ph := (s.h - p[1] + p[3] - 1) / p[3]
		if pw <= 0 || ph <= 0 {
			continue
		}
		row := make([]byte, 1+(pw*ch*s.depth+7)/8)
		for j := range ph {
			clear(row)
			bit := 0
			for i := range pw {
				x, y := p[0]+i*p[2], p[1]+j*p[3]
				for c := range ch {
					v := s.sample(x, y, c)
					switch s.depth {
					case 16:
						row[1+bit/8], row[2+bit/8] = byte(v>>8), byte(v)
					case 8:
						row[1+bit/8] = byte(v)
					default:
						row[1+bit/8] |= byte(v << (8 - s.depth - bit%8))
					}
					bit += s.depth
				}
			}
			_, err := zw.Write(row)
			require.NoError(tb, err)
		}
	}
	require.NoError(tb, zw.Close())
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr, uint32(s.w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(s.h))
	ihdr[8], ihdr[9] = byte(s.depth), byte(s.color)
	if s.interlace {
		ihdr[12] = 1
	}
	out := append([]byte(nil), pngMagic...)
	out = appendChunk(out, "IHDR", ihdr)
	for _, c := range s.chunks {
		out = appendChunk(out, c[0], []byte(c[1]))
	}
	out = appendChunk(out, "IDAT", idat.Bytes())
	return appendChunk(out, "IEND", nil)
}

// appendChunk appends a PNG chunk with its length and CRC.
func appendChunk(out []byte, typ string, data []byte) []byte {
	out = binary.BigEndian.AppendUint32(out, uint32(len(data)))
	start := len(out)
	out = append(out, typ...)
	out = append(out, data...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(out[start:]))
}

// withIHDRSize returns a copy of a PNG file whose IHDR claims w × h (the
// CRC recomputed): a header that lies about the data after it.
func withIHDRSize(data []byte, w, h uint32) []byte {
	d := append([]byte(nil), data...)
	binary.BigEndian.PutUint32(d[16:], w)
	binary.BigEndian.PutUint32(d[20:], h)
	binary.BigEndian.PutUint32(d[29:], crc32.ChecksumIEEE(d[12:29]))
	return d
}

// withSOFSize returns a copy of a JPEG file whose frame header claims
// w × h.
func withSOFSize(tb testing.TB, data []byte, w, h int) []byte {
	tb.Helper()
	d := append([]byte(nil), data...)
	for i := 2; i+9 < len(d); {
		require.Equal(tb, byte(0xFF), d[i], "marker at %d", i)
		n := int(binary.BigEndian.Uint16(d[i+2:]))
		if isSOF(d[i+1]) {
			binary.BigEndian.PutUint16(d[i+5:], uint16(h))
			binary.BigEndian.PutUint16(d[i+7:], uint16(w))
			return d
		}
		i += 2 + n
	}
	tb.Fatal("no frame header")
	return nil
}

// dcJPEG writes a baseline JPEG of w × h pixels (multiples of 8) and nc
// components, each 8×8 block flat: its DC coefficient only, from
// level(block x, block y, component), an 8-bit level. adobe ≥ 0 adds an
// Adobe APP14 marker with that colour transform (0: CMYK or RGB, 2: YCCK,
// 1: YCbCr). Neither OpenCV nor Go can write a 4-component JPEG; this one
// exercises libjpeg's CMYK and YCCK paths against OpenCV's.
func dcJPEG(w, h, nc, adobe int, level func(bx, by, c int) int) []byte {
	out := []byte{0xFF, 0xD8}
	seg := func(m byte, data ...byte) {
		out = append(out, 0xFF, m, byte((len(data)+2)>>8), byte(len(data)+2))
		out = append(out, data...)
	}
	if adobe >= 0 {
		seg(0xEE, 'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, byte(adobe))
	}
	dqt := []byte{0}
	for range 64 {
		dqt = append(dqt, 1) // DC coefficient = its quantized value
	}
	seg(0xDB, dqt...)
	sof := []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(nc)}
	for c := range nc {
		sof = append(sof, byte(c+1), 0x11, 0)
	}
	seg(0xC0, sof...)
	// DC table 0: the standard luminance table (categories 0..11); AC
	// table 0: one code, "0", for end-of-block.
	dc := []byte{0x00, 0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	seg(0xC4, dc...)
	seg(0xC4, 0x10, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00)
	sos := []byte{byte(nc)}
	for c := range nc {
		sos = append(sos, byte(c+1), 0x00)
	}
	seg(0xDA, append(sos, 0, 63, 0)...)
	// The standard DC luminance codes by category (ITU T.81 table K.3).
	codes := [12]struct{ bits, n uint32 }{{0, 2}, {2, 3}, {3, 3}, {4, 3}, {5, 3}, {6, 3}, {14, 4}, {30, 5}, {62, 6}, {126, 7}, {254, 8}, {510, 9}}
	var acc uint64
	var nbits uint
	put := func(v uint32, n uint) {
		acc = acc<<n | uint64(v)&(1<<n-1)
		nbits += n
		for nbits >= 8 {
			b := byte(acc >> (nbits - 8))
			out = append(out, b)
			if b == 0xFF {
				out = append(out, 0) // stuffing
			}
			nbits -= 8
		}
	}
	pred := make([]int, nc)
	for by := range h / 8 {
		for bx := range w / 8 {
			for c := range nc {
				dcv := (level(bx, by, c) - 128) * 8 // IDCT: sample = DC/8 + 128
				diff := dcv - pred[c]
				pred[c] = dcv
				cat, mag := 0, diff
				if mag < 0 {
					mag = -mag
				}
				for mag>>cat != 0 {
					cat++
				}
				put(codes[cat].bits, uint(codes[cat].n))
				if cat > 0 {
					v := diff
					if v < 0 {
						v += 1<<cat - 1
					}
					put(uint32(v), uint(cat))
				}
				put(0, 1) // end of block
			}
		}
	}
	if nbits > 0 {
		put(1<<(8-nbits)-1, 8-nbits) // pad with ones
	}
	return append(out, 0xFF, 0xD9)
}
