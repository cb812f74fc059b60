//go:build nogocv

package vision

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"vlanode/msgs"
)

func TestNoOpenCV(t *testing.T) {
	for _, tt := range []struct {
		enc  msgs.Encoding
		data []byte
	}{
		{msgs.EncodingJPEG, []byte{0xFF, 0xD8, 0xFF, 0xE0, 0, 0, 0xFF, 0xD9}},
		{msgs.EncodingPNG, []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0}},
	} {
		f := msgs.Frame{Camera: "front_tele_30fov", Encoding: tt.enc, Width: 8, Height: 8, Data: tt.data}
		_, err := Decode(&f)
		assert.ErrorIs(t, err, ErrNoOpenCV)
		assert.ErrorContains(t, err, "built without OpenCV (tag nogocv): cannot decode "+string(tt.enc))
		assert.ErrorContains(t, err, `camera "front_tele_30fov"`)

		p, err := NewProcessor(AlpamayoConfig())
		assert.NoError(t, err)
		f.Width, f.Height = 512, 384
		assert.ErrorIs(t, p.ProcessFrames(new(Batch), []msgs.Frame{f}), ErrNoOpenCV)
	}
}
