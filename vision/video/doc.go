// Package video reads and writes camera video files through OpenCV's
// videoio (gocv, FFmpeg underneath): what `vlanode replay` plays from a clip
// folder's videos and what `vlanode clip --video` writes.
//
// A Reader decodes a file's frames in order and stamps frame i at i / FPS
// from the first frame, FPS and the frame count taken from the file's
// header: stamps are known before anything is decoded (replay plans its
// requests from them), and they do not depend on CAP_PROP_POS_MSEC, which
// OpenCV 4.6 reported as 0 from the fourth frame of an H.264 .mp4 it wrote.
// Videos are taken to have a constant frame rate, as cameras record and as
// Writer writes. A file that ends before the frame count its header announces
// (truncated or corrupt) is an error naming the file, as is one that
// FFmpeg cannot open.
//
// A Writer encodes frames as MJPG in .avi or .mkv (each frame a JPEG) or
// as MPEG-4 Part 2 (mp4v) in .mp4, at the encoders' default quality: both
// are built into Debian's FFmpeg, so no extra codec is needed.
//
// The package needs OpenCV (libopencv-dev; make deps installs it). Built
// with the tag nogocv it keeps the same API, and Open, Probe and Create
// return ErrNoOpenCV, so that a binary without OpenCV refuses video with
// the reason.
package video
