// Package vision turns camera frames into the inputs of a vision-language
// model: it decodes a frame (JPEG through libjpeg-turbo, PNG through OpenCV,
// raw rgb8, bgr8 and mono8 in Go) into an RGB image, and runs the Qwen2-VL/Qwen3-VL image
// processor on it with the numbers Hugging Face transformers produces.
//
// The processor (Processor) follows transformers' default, torchvision
// backend of Qwen2VLImageProcessor, which Qwen3-VL and Alpamayo-R1 use:
//
//  1. SmartResize picks the output size: both sides multiples of
//     patch_size × merge_size, the pixel count within [MinPixels, MaxPixels],
//     the aspect ratio kept as well as that allows.
//  2. If the size changes, the image is resized with torchvision's resize on
//     a uint8 tensor (bicubic, antialias=True). On the CPU that is PyTorch's
//     native uint8 kernel: Pillow-style separable convolution with the Keys
//     cubic (a = -0.5) whose support widens with the downscale factor,
//     weights rounded to int16 fixed point, horizontal pass first, a uint8
//     image between the passes. Resize reproduces it bit for bit; OpenCV's
//     INTER_CUBIC is not antialiased and would not match.
//  3. Rescale and normalize fused as transformers does: (x − mean/s) / (std/s)
//     in float32 with s the rescale factor, (x − 127.5) / 127.5 for
//     Alpamayo's mean = std = 0.5.
//  4. Patchify: the image is repeated along time to fill the temporal patch,
//     cut into patch_size² patches grouped in merge_size² blocks, one row of
//     3 · temporal_patch_size · patch_size² values per patch in the order
//     (channel, time, y, x). The rows of one image are ordered block by block
//     (row-major over blocks), and row-major inside a block.
//
// The output is bit-identical to transformers 5.17's pixel_values and
// image_grid_thw (torch 2.11, torchvision 0.26): reference_test.go checks the
// SHA-256 of every float32 value on images made by
// scripts/reference/vision_reference.py (testdata/vision). JPEG decoding is
// libjpeg-turbo's libjpeg API called as OpenCV 4.6's imdecode calls it
// (the same library and settings, without OpenCV's row-by-row RGB-to-BGR
// swap, which cost more than the decoding): the same pixels, which
// TestJPEGMatchesOpenCV checks on baseline, progressive, 4:4:4, greyscale
// and restart-marker files. PIL's decoder may differ in the last bits of a
// JPEG, so the bit-identity holds for the same RGB pixels.
//
// The entry points are Decode/DecodeInto (a msgs.Frame to an RGB Image),
// Processor.Preprocess/PreprocessInto (one Image to its rows) and
// Processor.ProcessFrames (decode and preprocess frames in parallel into a
// reusable Batch, decoding JPEG into per-worker buffers, reading PNG pixels
// straight from OpenCV's buffer and tightly packed raw frames in place).
// SmartResize and Resize are usable on their own.
//
// Files that use OpenCV (gocv) and libjpeg (cgo, pkg-config libjpeg, which
// Debian's libopencv-dev pulls in) are built unless the build tag nogocv is
// set; with it, the package has the same API and decodes the raw encodings
// only, returning an error wrapping ErrNoOpenCV for jpeg and png.
package vision
