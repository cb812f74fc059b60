package vision

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"vlanode/msgs"
)

// The fuzz targets check the header readers, which stand between any
// bytes a client sends and the decoders, and the decoders behind them.
// go test runs their seeds (the golden frames, hostile headers, cut and
// edited files); go test -fuzz FuzzXxx explores from there.

// addSeeds adds the golden files of one encoding, each whole, cut short
// and with a header that lies, to f's corpus.
func addSeeds(f *testing.F, enc msgs.Encoding, add func(data []byte)) {
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*."+map[msgs.Encoding]string{msgs.EncodingJPEG: "jpg", msgs.EncodingPNG: "png"}[enc]))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no golden %s files in %s: %v", enc, goldenDir, err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		add(data)
		add(data[:len(data)/2])
		add(data[:min(len(data), 40)])
		if enc == msgs.EncodingPNG {
			add(withIHDRSize(data, 60000, 60000))
		} else {
			add(withSOFSize(f, data, 16384, 16384))
		}
	}
}

// FuzzPNGHeader checks pngHeader against image/png's DecodeConfig: when
// both read a size it is the same, and any size pngHeader reads is one
// the PNG format allows.
func FuzzPNGHeader(f *testing.F) {
	addSeeds(f, msgs.EncodingPNG, func(d []byte) { f.Add(d) })
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := pngHeader(data)
		if err != nil {
			if !errors.Is(err, errHeader) {
				t.Fatalf("error %v does not wrap errHeader", err)
			}
			return
		}
		if h.Width < 1 || h.Height < 1 || h.Width > 1<<31-1 || h.Height > 1<<31-1 {
			t.Fatalf("size %d×%d", h.Width, h.Height)
		}
		if cfg, err := png.DecodeConfig(bytes.NewReader(data)); err == nil && (cfg.Width != h.Width || cfg.Height != h.Height) {
			t.Fatalf("pngHeader %d×%d, image/png %d×%d", h.Width, h.Height, cfg.Width, cfg.Height)
		}
	})
}

// FuzzJPEGHeader checks jpegHeader against libjpeg: a file whose header
// gives a small size is decoded at that size, and libjpeg must then
// either fail or find that same size, never another (the decoders'
// "decoded size differs" error would mean the header check let a file
// through that libjpeg reads differently).
func FuzzJPEGHeader(f *testing.F) {
	addSeeds(f, msgs.EncodingJPEG, func(d []byte) { f.Add(d) })
	f.Add([]byte{0xFF, 0xD8, 0x00, 0xFF, 0xFF, 0xC0, 0, 11, 8, 0, 1, 0, 1, 1, 1, 0x11, 0, 0xFF, 0xD9})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := jpegHeader(data)
		if err != nil {
			if !errors.Is(err, errHeader) {
				t.Fatalf("error %v does not wrap errHeader", err)
			}
			return
		}
		if h.Width < 1 || h.Height < 1 || h.Width > 65535 || h.Height > 65535 || h.Components < 1 || h.Components > 4 {
			t.Fatalf("header %+v", h)
		}
		if h.Width*h.Height > 1<<20 {
			return
		}
		fr := msgs.Frame{Encoding: msgs.EncodingJPEG, Width: h.Width, Height: h.Height, Data: data}
		var img Image
		err = decodeJPEG(context.Background(), &img, &fr)
		if err != nil && strings.Contains(err.Error(), "decoded size") {
			t.Fatalf("jpegHeader read %d×%d: %v", h.Width, h.Height, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidFrame) {
			t.Fatalf("error %v does not wrap ErrInvalidFrame", err)
		}
	})
}

// FuzzDecodeFrame decodes any bytes as a JPEG or PNG frame of the size
// its header claims (when small) or of 16×16: no panic, an error wrapping
// ErrInvalidFrame, or an image of the declared size.
func FuzzDecodeFrame(f *testing.F) {
	addSeeds(f, msgs.EncodingJPEG, func(d []byte) { f.Add(d, true) })
	addSeeds(f, msgs.EncodingPNG, func(d []byte) { f.Add(d, false) })
	f.Fuzz(func(t *testing.T, data []byte, isJPEG bool) {
		fr := msgs.Frame{Camera: "front_wide_120fov", Encoding: msgs.EncodingPNG, Width: 16, Height: 16, Data: data}
		if isJPEG {
			fr.Encoding = msgs.EncodingJPEG
		}
		if h, err := ReadHeader(&fr); err == nil && h.Width*h.Height <= 1<<20 {
			fr.Width, fr.Height = h.Width, h.Height
		}
		var img Image
		err := DecodeContext(context.Background(), &img, &fr)
		switch {
		case err != nil && !errors.Is(err, ErrInvalidFrame):
			t.Fatalf("error %v does not wrap ErrInvalidFrame", err)
		case err == nil && (img.Width != fr.Width || img.Height != fr.Height || len(img.Pix) != 3*fr.Width*fr.Height):
			t.Fatalf("decoded %d×%d (%d bytes) for a %d×%d frame", img.Width, img.Height, len(img.Pix), fr.Width, fr.Height)
		}
		if err == nil && CheckFrame(&fr) != nil {
			t.Fatalf("decoded a frame CheckFrame refuses: %v", CheckFrame(&fr))
		}
	})
}
