package weights

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/tensor"
)

func TestRectCheck(t *testing.T) {
	ok := Rect{SrcOffset: 4, SrcPitch: 10, DstOffset: 0, DstPitch: 6, Width: 6, Height: 3}
	// Source rows end at 4+6, 14+6, 24+6 = 30; destination at 6, 12, 18.
	require.NoError(t, ok.Check(30, 18))
	assert.Equal(t, int64(18), ok.Bytes())
	assert.False(t, ok.Contiguous())
	for name, c := range map[string]struct {
		r        Rect
		src, dst int64
		want     string
	}{
		"no width":         {Rect{SrcPitch: 1, DstPitch: 1, Height: 1}, 10, 10, "need at least 1 of each"},
		"no rows":          {Rect{SrcPitch: 1, DstPitch: 1, Width: 1}, 10, 10, "need at least 1 of each"},
		"negative offset":  {Rect{SrcOffset: -1, SrcPitch: 1, DstPitch: 1, Width: 1, Height: 1}, 10, 10, "negative"},
		"narrow src pitch": {Rect{SrcPitch: 5, DstPitch: 6, Width: 6, Height: 2}, 100, 100, "a pitch below the width"},
		"narrow dst pitch": {Rect{SrcPitch: 6, DstPitch: 0, Width: 6, Height: 1}, 100, 100, "a pitch below the width"},
		"past the source":  {ok, 29, 18, "passes the source's 29 bytes"},
		"past the slot":    {ok, 30, 17, "passes the destination's 17 bytes"},
		"offset past":      {Rect{SrcOffset: 11, SrcPitch: 1, DstPitch: 1, Width: 1, Height: 1}, 10, 10, "passes the source's"},
		"huge height":      {Rect{SrcPitch: 1 << 40, DstPitch: 1 << 40, Width: 1, Height: 1 << 40}, 1 << 62, 1 << 62, "passes the source's"},
	} {
		assert.ErrorContains(t, c.r.Check(c.src, c.dst), c.want, name)
	}
}

// apply copies r from src into dst byte by byte.
func apply(dst, src []byte, r Rect) {
	for row := int64(0); row < r.Height; row++ {
		for b := int64(0); b < r.Width; b++ {
			dst[r.DstOffset+row*r.DstPitch+b] = src[r.SrcOffset+row*r.SrcPitch+b]
		}
	}
}

// TestColumnAndRowRect: the rectangles of a [4, 6] F32 tensor at offset
// 256 of its blob give its columns [2, 5) packed and its rows [1, 3),
// element by element.
func TestColumnAndRowRect(t *testing.T) {
	const rows, cols = 4, 6
	e := Entry{Name: "down", DType: tensor.F32, Shape: []int{rows, cols}, Offset: 256, Size: rows * cols * 4}
	blob := make([]byte, 256+e.Size)
	at := func(r, c int) float32 { return float32(r*100 + c) }
	for r := range rows {
		for c := range cols {
			binary.LittleEndian.PutUint32(blob[256+4*(r*cols+c):], math.Float32bits(at(r, c)))
		}
	}
	read := func(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }

	cr, err := e.ColumnRect(2, 5, 8)
	require.NoError(t, err)
	dst := make([]byte, 8+rows*3*4)
	require.NoError(t, cr.Check(int64(len(blob)), int64(len(dst))))
	apply(dst, blob, cr)
	for r := range rows {
		for c := 2; c < 5; c++ {
			assert.Equal(t, at(r, c), read(dst[8:], r*3+c-2), "column %d of row %d", c, r)
		}
	}

	rr, err := e.RowRect(1, 3, 0)
	require.NoError(t, err)
	assert.True(t, rr.Contiguous())
	dst = make([]byte, 2*cols*4)
	require.NoError(t, rr.Check(int64(len(blob)), int64(len(dst))))
	apply(dst, blob, rr)
	for r := 1; r < 3; r++ {
		for c := range cols {
			assert.Equal(t, at(r, c), read(dst, (r-1)*cols+c))
		}
	}

	_, err = e.ColumnRect(5, 5, 0)
	assert.ErrorContains(t, err, "columns [5, 5) of 6")
	_, err = e.RowRect(0, 5, 0)
	assert.ErrorContains(t, err, "rows [0, 5) of 4")
	_, err = Entry{Name: "norm", DType: tensor.F32, Shape: []int{6}}.ColumnRect(0, 1, 0)
	assert.ErrorContains(t, err, "is not a matrix")
}
