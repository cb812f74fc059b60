package vision

import (
	"fmt"
	"math"
)

// maxAspectRatio is the largest long-side / short-side ratio SmartResize
// accepts, as in transformers.
const maxAspectRatio = 200

// SmartResize returns the size, height and width, to which transformers'
// Qwen2-VL image processor (smart_resize in image_processing_qwen2_vl.py)
// resizes a height × width image: both sides multiples of factor, the
// pixel count within [minPixels, maxPixels] and the aspect ratio kept as
// nearly as possible. Each side is first rounded to the nearest multiple of
// factor (Python's round: halves to even); if that has too many pixels both
// sides are scaled down by √(h·w/maxPixels) and floored to multiples of
// factor (at least factor), if too few scaled up by √(minPixels/(h·w)) and
// ceiled. The float64 arithmetic is Python's, in the same order.
func SmartResize(height, width, factor, minPixels, maxPixels int) (int, int, error) {
	if height < 1 || width < 1 || factor < 1 {
		return 0, 0, fmt.Errorf("vision: smart resize of %d×%d (h×w) with factor %d: sizes must be positive", height, width, factor)
	}
	if r := float64(max(height, width)) / float64(min(height, width)); r > maxAspectRatio {
		return 0, 0, fmt.Errorf("vision: smart resize of %d×%d (h×w): aspect ratio %g is above %d", height, width, r, maxAspectRatio)
	}
	h, w, fac := float64(height), float64(width), float64(factor)
	hBar := int(math.RoundToEven(h/fac)) * factor
	wBar := int(math.RoundToEven(w/fac)) * factor
	switch {
	case hBar*wBar > maxPixels:
		beta := math.Sqrt(float64(height*width) / float64(maxPixels))
		hBar = max(factor, int(math.Floor(h/beta/fac))*factor)
		wBar = max(factor, int(math.Floor(w/beta/fac))*factor)
	case hBar*wBar < minPixels:
		beta := math.Sqrt(float64(minPixels) / float64(height*width))
		hBar = int(math.Ceil(h*beta/fac)) * factor
		wBar = int(math.Ceil(w*beta/fac)) * factor
	}
	if hBar < factor || wBar < factor {
		return 0, 0, fmt.Errorf("vision: smart resize of %d×%d (h×w) gives %d×%d: a side below factor %d (min_pixels %d)", height, width, hBar, wBar, factor, minPixels)
	}
	return hBar, wBar, nil
}
