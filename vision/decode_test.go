package vision

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

// rawFrame builds a raw frame of img in encoding enc with step bytes a row
// (0: tight), padding rows with 0xEE.
func rawFrame(img *Image, enc msgs.Encoding, step int) msgs.Frame {
	ch := enc.Channels()
	row := ch * img.Width
	stride := step
	if stride == 0 {
		stride = row
	}
	data := make([]byte, stride*img.Height)
	for i := range data {
		data[i] = 0xEE
	}
	for y := range img.Height {
		for x := range img.Width {
			p := img.Pix[3*(y*img.Width+x):][:3]
			o := data[y*stride+ch*x:][:ch]
			switch enc {
			case msgs.EncodingRGB8:
				copy(o, p)
			case msgs.EncodingBGR8:
				o[0], o[1], o[2] = p[2], p[1], p[0]
			case msgs.EncodingMono8:
				o[0] = p[1]
			}
		}
	}
	return msgs.Frame{V: msgs.Version, Camera: "cross_left_120fov", Encoding: enc, Width: img.Width, Height: img.Height, Step: step, Data: data}
}

// grey returns img with every channel set to its green one, what a mono8
// frame of it decodes to.
func grey(img *Image) *Image {
	out := NewImage(img.Width, img.Height)
	for i := 0; i < len(img.Pix); i += 3 {
		g := img.Pix[i+1]
		out.Pix[i], out.Pix[i+1], out.Pix[i+2] = g, g, g
	}
	return out
}

func TestDecodeRaw(t *testing.T) {
	img := testImage(7, 5, 11)
	tests := []struct {
		name string
		enc  msgs.Encoding
		step int
		want *Image
	}{
		{"rgb8 tight", msgs.EncodingRGB8, 0, img},
		{"rgb8 explicit step", msgs.EncodingRGB8, 21, img},
		{"rgb8 padded rows", msgs.EncodingRGB8, 24, img},
		{"bgr8 tight", msgs.EncodingBGR8, 0, img},
		{"bgr8 padded rows", msgs.EncodingBGR8, 32, img},
		{"mono8 tight", msgs.EncodingMono8, 0, grey(img)},
		{"mono8 padded rows", msgs.EncodingMono8, 8, grey(img)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := rawFrame(img, tt.enc, tt.step)
			got, err := Decode(&f)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)

			// The processor's view decodes to the same pixels.
			var scratch Image
			v, err := decodeView(context.Background(), &f, &scratch)
			require.NoError(t, err)
			rgb := NewImage(v.img.Width, v.img.Height)
			copyRGB(rgb.Pix, v.img.Pix, v.bgr)
			assert.Equal(t, tt.want, rgb)
		})
	}
}

func TestDecodeIntoReusesBuffer(t *testing.T) {
	f := rawFrame(testImage(8, 8, 1), msgs.EncodingRGB8, 0)
	img := &Image{Pix: make([]uint8, 0, 1000)}
	buf := &img.Pix[:1][0]
	require.NoError(t, DecodeInto(img, &f))
	assert.Same(t, buf, &img.Pix[0])
	assert.Len(t, img.Pix, 3*8*8)
}

func TestDecodeErrors(t *testing.T) {
	img := testImage(4, 3, 2)
	good := rawFrame(img, msgs.EncodingRGB8, 0)
	with := func(edit func(f *msgs.Frame)) *msgs.Frame {
		f := good
		f.Data = append([]byte(nil), good.Data...)
		edit(&f)
		return &f
	}
	tests := []struct {
		name  string
		frame *msgs.Frame
		msg   string
	}{
		{"nil", nil, "nil frame"},
		{"short data", with(func(f *msgs.Frame) { f.Data = f.Data[:30] }), "4×3 with step 12 needs 36 bytes, got 30"},
		{"long data", with(func(f *msgs.Frame) { f.Data = append(f.Data, 0) }), "needs 36 bytes, got 37"},
		{"step below row", with(func(f *msgs.Frame) { f.Step = 11 }), "step 11 is less than width 4 × 3 bytes a pixel"},
		{"step past data", with(func(f *msgs.Frame) { f.Step = 1 << 40 }), "needs"},
		{"zero width", with(func(f *msgs.Frame) { f.Width = 0 }), "size 0×3 is outside 1..16384"},
		{"huge height", with(func(f *msgs.Frame) { f.Height = msgs.MaxDimension + 1 }), "outside"},
		{"unknown encoding", with(func(f *msgs.Frame) { f.Encoding = "yuyv" }), "unknown encoding"},
		{"jpeg without data", with(func(f *msgs.Frame) { f.Encoding, f.Data = msgs.EncodingJPEG, nil }), "no data"},
		{"jpeg that is not", with(func(f *msgs.Frame) { f.Encoding = msgs.EncodingJPEG }), "data is not a JPEG file"},
		{"png that is a jpeg", with(func(f *msgs.Frame) { f.Encoding, f.Data = msgs.EncodingPNG, []byte{0xFF, 0xD8, 0xFF, 0xE0} }), "data is not a PNG file"},
		{"truncated jpeg", with(func(f *msgs.Frame) { f.Encoding, f.Data = msgs.EncodingJPEG, []byte{0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3} }), "truncated JPEG"},
		{"jpeg without frame header", with(func(f *msgs.Frame) { f.Encoding, f.Data = msgs.EncodingJPEG, []byte{0xFF, 0xD8, 0xFF, 0xD9} }), "JPEG file ends (EOI) before its frame header"},
		{"png without IHDR", with(func(f *msgs.Frame) {
			f.Encoding, f.Data = msgs.EncodingPNG, append(append([]byte(nil), pngMagic...), 0, 0)
		}), "PNG file ends in its header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.frame)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidFrame)
			assert.Contains(t, err.Error(), tt.msg)
			if tt.frame != nil {
				assert.Contains(t, err.Error(), `camera "cross_left_120fov"`)
			}
			if tt.frame != nil {
				_, err := decodeView(context.Background(), tt.frame, new(Image))
				assert.ErrorIs(t, err, ErrInvalidFrame, "decodeView")
			}
		})
	}
}

func TestDecodePNGIsExact(t *testing.T) {
	img := testImage(33, 17, 5)
	f := goPNGFrame(t, img)
	got, err := Decode(&f)
	require.NoError(t, err)
	assert.Equal(t, img, got)

	want := readPNG(t, referenceDir+"/grad-1001x777.png")
	f = goPNGFrame(t, want)
	got, err = Decode(&f)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestDecodeJPEG(t *testing.T) {
	img := sceneImage(64, 48, 3)
	f := goJPEGFrame(t, img, 95)
	got, err := Decode(&f)
	require.NoError(t, err)
	require.Equal(t, img.Width, got.Width)
	require.Equal(t, img.Height, got.Height)
	swapped := NewImage(got.Width, got.Height)
	copyRGB(swapped.Pix, got.Pix, true)
	meanErr := func(a *Image) float64 {
		sum := 0
		for i := range img.Pix {
			d := int(img.Pix[i]) - int(a.Pix[i])
			sum += max(d, -d)
		}
		return float64(sum) / float64(len(img.Pix))
	}
	assert.Less(t, meanErr(got), 8.0, "mean absolute JPEG error, levels")
	assert.Greater(t, meanErr(swapped), 3*meanErr(got), "red and blue swapped?")
}

func TestDecodeCompressedErrors(t *testing.T) {
	img := sceneImage(40, 30, 1)
	jpg := goJPEGFrame(t, img, 90)
	png := goPNGFrame(t, img)

	wrongSize := jpg
	wrongSize.Width = 41
	_, err := Decode(&wrongSize)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "the file's header says 40×30, the frame declares 41×30")

	wrongPNG := png
	wrongPNG.Height = 31
	_, err = Decode(&wrongPNG)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "the file's header says 40×30, the frame declares 40×31")

	truncated := jpg
	truncated.Data = jpg.Data[:len(jpg.Data)/2]
	_, err = Decode(&truncated)
	assert.ErrorContains(t, err, "truncated JPEG")

	garbage := jpg
	garbage.Data = append([]byte{0xFF, 0xD8, 0xFF}, make([]byte, 200)...)
	garbage.Data = append(garbage.Data, 0xFF, 0xD9)
	_, err = Decode(&garbage)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, `camera "front_wide_120fov": jpeg: invalid frame: `)

	brokenPNG := png
	brokenPNG.Data = append([]byte(nil), png.Data[:len(png.Data)/2]...)
	_, err = Decode(&brokenPNG)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "png: invalid frame: corrupt or truncated image")
}

func TestDecodeJPEGErrors(t *testing.T) {
	f := goJPEGFrame(t, sceneImage(64, 48, 1), 90)
	var img Image
	ctx := context.Background()

	// Past checkContainer, data that ends early is refused, where OpenCV
	// would leave the missing rows uninitialized and libjpeg pads them.
	cut := f
	cut.Data = f.Data[:len(f.Data)*2/3]
	err := decodeJPEG(ctx, &img, &cut)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "libjpeg ran out of data")

	// Scan data cut short by a marker: libjpeg fills the rest with zeros
	// after a warning, which is an error here.
	marked := f
	marked.Data = append(append([]byte(nil), f.Data[:len(f.Data)*2/3]...), 0xFF, 0xD9)
	err = decodeJPEG(ctx, &img, &marked)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "libjpeg: Corrupt JPEG data: premature end of data segment")

	bad := f
	bad.Data = append([]byte{0xFF, 0xD8, 0xFF, 0xC0, 0, 3}, make([]byte, 64)...)
	err = decodeJPEG(ctx, &img, &bad)
	assert.ErrorIs(t, err, ErrInvalidFrame)
	assert.ErrorContains(t, err, "corrupt or truncated image (libjpeg: ")

	wide := f
	wide.Width = 65
	err = decodeJPEG(ctx, &img, &wide)
	assert.ErrorContains(t, err, "decoded size 64×48 differs from the declared 65×48")

	done, cancel := context.WithCancel(ctx)
	cancel()
	err = decodeJPEG(done, &img, &f)
	assert.ErrorIs(t, err, context.Canceled, "the progress monitor sees the cancel flag")
	assert.ErrorContains(t, err, "decoding stopped")
}
