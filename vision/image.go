package vision

import "fmt"

// Image is an 8-bit RGB image. The red, green and blue bytes of pixel (x, y)
// are Pix[3*(y*Width+x)+0], +1 and +2: rows top first, no padding.
type Image struct {
	Width, Height int
	Pix           []uint8 // 3 · Width · Height bytes
}

// NewImage returns a black image of the given size.
func NewImage(width, height int) *Image {
	return &Image{Width: width, Height: height, Pix: make([]uint8, 3*width*height)}
}

// Reshape sets the image's size, reusing Pix when it is large enough. The
// pixels are left as they were: the caller overwrites them.
func (m *Image) Reshape(width, height int) {
	n := 3 * width * height
	if cap(m.Pix) < n {
		m.Pix = make([]uint8, n)
	}
	m.Width, m.Height, m.Pix = width, height, m.Pix[:n]
}

// check reports whether the image is well formed.
func (m *Image) check() error {
	if m == nil {
		return fmt.Errorf("vision: nil image")
	}
	if m.Width <= 0 || m.Height <= 0 {
		return fmt.Errorf("vision: image size %d×%d is not positive", m.Width, m.Height)
	}
	if len(m.Pix) != 3*m.Width*m.Height {
		return fmt.Errorf("vision: image %d×%d has %d bytes, want %d", m.Width, m.Height, len(m.Pix), 3*m.Width*m.Height)
	}
	return nil
}
