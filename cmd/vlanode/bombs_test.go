package main

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/jpeg"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"vlanode/msgs"
	"vlanode/vision"
)

// Decoder bombs for the chaos test: files whose header claims more pixels
// than a node should ever allocate. Each is built here, byte by byte, so
// that the test states exactly what the header says.

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// pngChunk returns a PNG chunk: length, type, data and the CRC of type and
// data.
func pngChunk(typ string, data []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	out = append(out, typ...)
	out = append(out, data...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(append([]byte(typ), data...)))
}

// ihdr returns an IHDR chunk's data: width, height, bit depth, colour type,
// and deflate compression, adaptive filtering, no interlace.
func ihdr(w, h uint32, depth, colour byte) []byte {
	d := binary.BigEndian.AppendUint32(nil, w)
	d = binary.BigEndian.AppendUint32(d, h)
	return append(d, depth, colour, 0, 0, 0)
}

// zlibOf returns the zlib stream of rows rows of rowBytes zero bytes each,
// each row led by its filter byte (0: none).
func zlibOf(t *testing.T, rows, rowBytes int) []byte {
	t.Helper()
	var b bytes.Buffer
	z, err := zlib.NewWriterLevel(&b, zlib.BestCompression)
	require.NoError(t, err)
	row := make([]byte, 1+rowBytes)
	for range rows {
		_, err := z.Write(row)
		require.NoError(t, err)
	}
	require.NoError(t, z.Close())
	return b.Bytes()
}

// pngHeaderBomb is a PNG whose IHDR says 60000×60000 8-bit RGB (10.8 GB
// of pixels), with one row of image data.
func pngHeaderBomb(t *testing.T) []byte {
	out := append([]byte(nil), pngSignature...)
	out = append(out, pngChunk("IHDR", ihdr(60000, 60000, 8, 2))...)
	out = append(out, pngChunk("IDAT", zlibOf(t, 1, 3*60000))...)
	return append(out, pngChunk("IEND", nil)...)
}

// pngOneBitBomb is a complete 30000×30000 1-bit greyscale PNG of zeros:
// 112 MB of rows deflated to about 110 KB, 2.7 GB once decoded to RGB.
func pngOneBitBomb(t *testing.T) []byte {
	out := append([]byte(nil), pngSignature...)
	out = append(out, pngChunk("IHDR", ihdr(30000, 30000, 1, 0))...)
	out = append(out, pngChunk("IDAT", zlibOf(t, 30000, 30000/8))...)
	return append(out, pngChunk("IEND", nil)...)
}

// jpegTruncatedBomb is a baseline JPEG whose SOF0 says 16384×16384 (805 MB
// decoded), followed by 23 KB of scan data and no end: a 16×16 JPEG with
// its size patched and its scan cut off and padded.
func jpegTruncatedBomb(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, jpeg.Encode(&b, image.NewRGBA(image.Rect(0, 0, 16, 16)), nil))
	data := b.Bytes()
	sof := bytes.Index(data, []byte{0xff, 0xc0})
	require.Positive(t, sof, "the encoder writes a baseline SOF0")
	binary.BigEndian.PutUint16(data[sof+5:], 16384) // height
	binary.BigEndian.PutUint16(data[sof+7:], 16384) // width
	sos := bytes.Index(data, []byte{0xff, 0xda})
	require.Positive(t, sos)
	scan := sos + 2 + int(binary.BigEndian.Uint16(data[sos+2:]))
	out := append([]byte(nil), data[:scan]...)
	r := rand.New(rand.NewPCG(34, 3))
	for range 23 << 10 {
		out = append(out, byte(r.UintN(0xff))) // never 0xff: no marker
	}
	return out
}

// pngHeaderShrunk returns a copy of a PNG whose IHDR is patched (its CRC
// recomputed) to say w×h: the file's header then differs from the size
// the frame declares.
func pngHeaderShrunk(t *testing.T, file []byte, w, h uint32) []byte {
	t.Helper()
	require.Equal(t, pngSignature, file[:8])
	out := append([]byte(nil), file...)
	head := out[8 : 8+8+13+4] // length, "IHDR", data, CRC
	require.Equal(t, "IHDR", string(head[4:8]))
	binary.BigEndian.PutUint32(head[8:], w)
	binary.BigEndian.PutUint32(head[12:], h)
	binary.BigEndian.PutUint32(head[21:], crc32.ChecksumIEEE(head[4:21]))
	return out
}

// The bombs are what they claim: each header reads as stated, and the PNG
// bomb is a complete file.
func TestBombsAreWellFormed(t *testing.T) {
	for _, c := range []struct {
		name string
		f    msgs.Frame
		w, h int
	}{
		{"png header", msgs.Frame{Encoding: msgs.EncodingPNG, Data: pngHeaderBomb(t)}, 60000, 60000},
		{"1-bit png", msgs.Frame{Encoding: msgs.EncodingPNG, Data: pngOneBitBomb(t)}, 30000, 30000},
		{"jpeg", msgs.Frame{Encoding: msgs.EncodingJPEG, Data: jpegTruncatedBomb(t)}, 16384, 16384},
	} {
		h, err := vision.ReadHeader(&c.f)
		require.NoError(t, err, c.name)
		require.Equal(t, [2]int{c.w, c.h}, [2]int{h.Width, h.Height}, c.name)
	}
	one := pngOneBitBomb(t)
	t.Logf("the 1-bit bomb is %d bytes", len(one))
	require.Less(t, len(one), 200<<10, "the 1-bit bomb is small")
	require.Equal(t, pngChunk("IEND", nil), one[len(one)-12:])
}

// poisonedFrames are frames a node must drop when they are published on its
// frame subjects (their camera and stamp are set there): the 60000×60000
// PNG header in a 128×96 frame, and a PNG whose header says half the size
// it declares.
func poisonedFrames(t *testing.T, frames []msgs.Frame) []msgs.Frame {
	header := msgs.Frame{Encoding: msgs.EncodingPNG, Width: 128, Height: 96, Data: pngHeaderBomb(t)}
	shrunk := frames[0]
	shrunk.Data = pngHeaderShrunk(t, shrunk.Data, uint32(shrunk.Width/2), uint32(shrunk.Height/2))
	return []msgs.Frame{header, shrunk}
}
