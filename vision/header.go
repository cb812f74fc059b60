package vision

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"vlanode/msgs"
)

// This file reads the size of a JPEG or PNG file from its header, without
// decoding anything, so that a frame whose file is larger than it claims,
// or larger than a request may be, is refused before any pixel buffer is
// allocated or any decoder runs.

// Header is what a compressed frame's file says of its image.
type Header struct {
	Width, Height int
	// Components is the JPEG frame's colour components (1 grey, 3 YCbCr
	// or RGB, 4 CMYK or YCCK); 0 for PNG.
	Components int
}

// errHeader is wrapped by the errors of a header that cannot be read.
var errHeader = errors.New("bad header")

// pngHeader reads the IHDR chunk that must follow a PNG file's signature:
// its width, height, bit depth and colour type, checked as the PNG
// specification allows them (width and height 1..2³¹−1, a known colour
// type with one of its bit depths, compression, filter and interlace
// methods known, a correct CRC).
func pngHeader(d []byte) (Header, error) {
	if !bytes.HasPrefix(d, pngMagic) {
		return Header{}, fmt.Errorf("%w: not a PNG file (starts % X)", errHeader, d[:min(len(d), 8)])
	}
	d = d[len(pngMagic):]
	// length (4) "IHDR" (4) width (4) height (4) depth, colour type,
	// compression, filter, interlace (5) CRC (4)
	if len(d) < 25 {
		return Header{}, fmt.Errorf("%w: PNG file ends in its header (%d bytes)", errHeader, len(pngMagic)+len(d))
	}
	if n := binary.BigEndian.Uint32(d); n != 13 || string(d[4:8]) != "IHDR" {
		return Header{}, fmt.Errorf("%w: PNG file does not start with a 13-byte IHDR chunk (%q of %d bytes)", errHeader, d[4:8], n)
	}
	if crc := crc32.ChecksumIEEE(d[4:21]); crc != binary.BigEndian.Uint32(d[21:]) {
		return Header{}, fmt.Errorf("%w: PNG IHDR checksum %08X, computed %08X", errHeader, binary.BigEndian.Uint32(d[21:]), crc)
	}
	w, h := binary.BigEndian.Uint32(d[8:]), binary.BigEndian.Uint32(d[12:])
	if w == 0 || h == 0 || w > 1<<31-1 || h > 1<<31-1 {
		return Header{}, fmt.Errorf("%w: PNG size %d×%d", errHeader, w, h)
	}
	depth, color := d[16], d[17]
	ok := false
	switch color {
	case 0: // grey
		ok = depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16
	case 3: // palette
		ok = depth == 1 || depth == 2 || depth == 4 || depth == 8
	case 2, 4, 6: // RGB, grey + alpha, RGBA
		ok = depth == 8 || depth == 16
	}
	if !ok {
		return Header{}, fmt.Errorf("%w: PNG colour type %d with bit depth %d", errHeader, color, depth)
	}
	if d[18] != 0 || d[19] != 0 || d[20] > 1 {
		return Header{}, fmt.Errorf("%w: PNG compression %d, filter %d, interlace %d", errHeader, d[18], d[19], d[20])
	}
	return Header{Width: int(w), Height: int(h)}, nil
}

// jpegHeader reads a JPEG file's markers up to its frame header (SOFn)
// and returns the frame's size and components. It skips what libjpeg
// skips (stray bytes between markers, fill bytes, standalone markers) so
// that it finds the frame header libjpeg will use; a scan or the end of
// the image before any frame header is an error, and so is a frame with
// a height of 0 (defined later by a DNL marker, which libjpeg refuses),
// a precision other than 8, or a length that does not match its
// components.
func jpegHeader(d []byte) (Header, error) {
	if len(d) < 2 || d[0] != 0xFF || d[1] != 0xD8 {
		return Header{}, fmt.Errorf("%w: not a JPEG file (starts % X)", errHeader, d[:min(len(d), 4)])
	}
	i := 2
	for {
		// Find the next marker: libjpeg discards anything before an 0xFF,
		// and any number of 0xFF fill bytes.
		for i < len(d) && d[i] != 0xFF {
			i++
		}
		for i < len(d) && d[i] == 0xFF {
			i++
		}
		if i >= len(d) {
			return Header{}, fmt.Errorf("%w: JPEG file ends before its frame header (%d bytes)", errHeader, len(d))
		}
		m := d[i]
		i++
		switch {
		case m == 0x00:
			continue // a stuffed zero outside entropy-coded data: stray
		case m == 0x01 || m >= 0xD0 && m <= 0xD7:
			continue // TEM and RSTn stand alone
		case m == 0xD8:
			return Header{}, fmt.Errorf("%w: JPEG file has a second start-of-image marker before its frame header", errHeader)
		case m == 0xD9:
			return Header{}, fmt.Errorf("%w: JPEG file ends (EOI) before its frame header", errHeader)
		case m == 0xDA:
			return Header{}, fmt.Errorf("%w: JPEG scan before its frame header", errHeader)
		}
		if i+2 > len(d) {
			return Header{}, fmt.Errorf("%w: JPEG file ends in marker %02X's length", errHeader, m)
		}
		n := int(binary.BigEndian.Uint16(d[i:]))
		if n < 2 || i+n > len(d) {
			return Header{}, fmt.Errorf("%w: JPEG marker %02X of %d bytes in %d left", errHeader, m, n, len(d)-i)
		}
		seg := d[i+2 : i+n]
		i += n
		if !isSOF(m) {
			continue
		}
		if len(seg) < 6 {
			return Header{}, fmt.Errorf("%w: JPEG frame header of %d bytes", errHeader, n)
		}
		p, h, w, nc := int(seg[0]), int(binary.BigEndian.Uint16(seg[1:])), int(binary.BigEndian.Uint16(seg[3:])), int(seg[5])
		switch {
		case p != 8:
			return Header{}, fmt.Errorf("%w: JPEG precision %d bits (want 8)", errHeader, p)
		case w == 0 || h == 0:
			return Header{}, fmt.Errorf("%w: JPEG frame size %d×%d (a height set by a DNL marker is not supported)", errHeader, w, h)
		case nc < 1 || nc > 4 || len(seg) != 6+3*nc:
			return Header{}, fmt.Errorf("%w: JPEG frame header of %d bytes for %d components", errHeader, n, nc)
		}
		return Header{Width: w, Height: h, Components: nc}, nil
	}
}

// isSOF reports whether m is a start-of-frame marker: SOF0–SOF3,
// SOF5–SOF7, SOF9–SOF11, SOF13–SOF15 (C4 is DHT, C8 reserved, CC DAC).
func isSOF(m byte) bool {
	return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC
}

// ReadHeader reads the size of a jpeg or png frame's image from its file
// header, without decoding it. Other encodings have no header: their size
// is the declared one.
func ReadHeader(f *msgs.Frame) (Header, error) {
	if f == nil {
		return Header{}, fmt.Errorf("vision: header: nil frame: %w", ErrInvalidFrame)
	}
	var h Header
	var err error
	switch f.Encoding {
	case msgs.EncodingJPEG:
		h, err = jpegHeader(f.Data)
	case msgs.EncodingPNG:
		h, err = pngHeader(f.Data)
	default:
		return Header{Width: f.Width, Height: f.Height}, nil
	}
	if err != nil {
		return Header{}, frameError(f, ErrInvalidFrame, "%v", err)
	}
	return h, nil
}

// CheckFrame checks a frame without decoding it: its declared size, its
// encoding, the length of raw data, and for JPEG and PNG that the file is
// complete enough to hold a header and that the header's size is the
// declared one. A frame that passes may still fail to decode (corrupt
// data); one that fails never would. A node can call it when a frame
// arrives, to drop a frame that no request could use. Errors wrap
// ErrInvalidFrame.
func CheckFrame(f *msgs.Frame) error {
	if f == nil {
		return fmt.Errorf("vision: check: nil frame: %w", ErrInvalidFrame)
	}
	if err := checkSize(f); err != nil {
		return err
	}
	switch f.Encoding {
	case msgs.EncodingJPEG, msgs.EncodingPNG:
		if err := checkContainer(f); err != nil {
			return err
		}
		_, err := checkHeader(f)
		return err
	case msgs.EncodingRGB8, msgs.EncodingBGR8, msgs.EncodingMono8:
		_, err := rawStep(f)
		return err
	}
	return frameError(f, ErrInvalidFrame, "unknown encoding (want jpeg, png, rgb8, bgr8 or mono8)")
}

// checkHeader reads a compressed frame's header and checks that its size
// is the declared one.
func checkHeader(f *msgs.Frame) (Header, error) {
	h, err := ReadHeader(f)
	if err != nil {
		return Header{}, err
	}
	if h.Width != f.Width || h.Height != f.Height {
		return Header{}, frameError(f, ErrInvalidFrame, "the file's header says %d×%d, the frame declares %d×%d", h.Width, h.Height, f.Width, f.Height)
	}
	return h, nil
}
