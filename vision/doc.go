// Package vision turns camera frames into the inputs of a vision-language
// model: it decodes a frame (JPEG through libjpeg-turbo, PNG through Go's
// image/png, raw rgb8, bgr8 and mono8 in Go) into an RGB image, and runs
// the Qwen2-VL/Qwen3-VL image processor on it with the numbers Hugging
// Face transformers produces.
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
// scripts/reference/vision_reference.py (testdata/vision).
//
// # Decoding
//
// JPEG and PNG decode to exactly the RGB pixels OpenCV 4.6's imdecode
// (IMREAD_COLOR) gives, which the reference pixels assume: JPEG through
// libjpeg-turbo's libjpeg API with OpenCV's settings (without OpenCV's
// row-by-row RGB-to-BGR swap, which cost more than the decoding; CMYK and
// YCCK converted with OpenCV's formula), PNG through image/png with
// libpng's 16-to-8-bit strip and alpha dropped. OpenCV itself is not
// used: testdata/vision/frames holds every kind of JPEG and PNG with the
// SHA-256 of OpenCV's pixels, which TestFramesGolden checks in every build
// and TestFramesGoldenAreOpenCVs against OpenCV in the default one. PIL's
// decoder may differ in the last bits of a JPEG, so the bit-identity with
// transformers holds for the same RGB pixels.
//
// A frame is checked before it is decoded (CheckFrame): its declared size,
// the length of raw data, and for JPEG and PNG the size in the file's
// header (ReadHeader), which must be the declared one, so that no more
// pixels than declared are ever allocated; ProcessFrames also sums the
// declared pixels against a budget (WithMaxPixels) before anything is
// allocated. No bytes reach a decoder that can abort the process:
// image/png returns errors, and libjpeg's fatal errors longjmp back to
// the caller. Data that ends early or is corrupt is an error (libjpeg's
// warnings that it pads or guesses pixels end the decoding), never padded
// pixels. Decoding stops when the context is done: image/png reads in
// small pieces that check it, and libjpeg's progress monitor reads a flag
// that the context sets.
//
// The entry points are Decode/DecodeContext (a msgs.Frame to an RGB
// Image), Processor.Preprocess/PreprocessInto (one Image to its rows) and
// Processor.ProcessFrames (decode and preprocess frames in parallel into a
// reusable Batch, decoding into per-worker buffers and reading tightly
// packed raw frames in place). SmartResize and Resize are usable on their
// own.
//
// On a backend that implements backend.ImagePrep (cuda), a
// DeviceProcessor (Processor.OnDevice) decodes the frames on the host's
// cores straight into page-locked memory and has the device resize,
// normalize and patchify each as soon as it is decoded, with the same
// integer filters and normalization table: the pixel values are the same
// bits, left on the device for the model (qwen3vl.Images.Device).
//
// The package needs cgo and libjpeg (pkg-config libjpeg; Debian's
// libjpeg62-turbo-dev, which libopencv-dev pulls in), not OpenCV: only its
// tests use OpenCV (gocv), to compare with it. With the build tag nogocv
// those tests are left out and libjpeg is linked statically, so that the
// binary runs where no libjpeg is installed (the GPU machine). Video files
// are read and written by the sub-package vision/video, through OpenCV.
package vision
