package vision

// JPEG frames are decoded with libjpeg-turbo's libjpeg API, the library
// OpenCV itself decodes JPEG with, and with OpenCV's settings: scale 1,
// the default ISLOW IDCT and fancy upsampling, output colour space
// JCS_RGB. OpenCV 4.6's decoder then swaps every row to BGR with a byte
// loop that takes longer than the decoding; here the rows go straight
// into the caller's RGB buffer. TestJPEGMatchesOpenCV checks that the
// pixels are OpenCV's.
//
// CMYK and YCCK files are decoded to CMYK and converted to RGB with
// OpenCV's formula (cmyk_rows).
//
// It needs no OpenCV: a build with the tag nogocv links libjpeg.a
// statically (jpeg_link_static.go), so that its binary runs where no
// libjpeg is installed; the default build links the libjpeg that OpenCV
// uses (jpeg_link_dynamic.go). The headers come with libjpeg62-turbo-dev,
// which Debian's libopencv-dev pulls in.
//
// libjpeg reports a fatal error through error_exit, which must not
// return: here it longjmps back to the decoding function, which returns
// an error code. The warnings that mean the pixels would be made up
// (premature end of data, which libjpeg pads with grey; a bad Huffman or
// arithmetic code, a missing restart marker or a segment cut short, which
// it fills with zeros) end the decoding the same way. A progress monitor
// ends it when the Go side sets the cancel flag (the request's context is
// done) and after maxScans scans (a progressive file of thousands of tiny
// scans costs a pass over the whole image for each).

/*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>

enum {
	VL_JPEG_OK = 0,
	VL_JPEG_ERROR = 1,       // libjpeg failed; msg says why
	VL_JPEG_SIZE = 2,        // the image is not width × height; got_w, got_h say what it is
	VL_JPEG_COMPONENTS = 3,  // neither 1, 3 nor 4 components; got_w says how many
	VL_JPEG_TRUNCATED = 4,   // the data ended before the image did
	VL_JPEG_CORRUPT = 5,     // a warning that libjpeg would paper over; msg says which
	VL_JPEG_CANCELLED = 6,   // *cancel was set
	VL_JPEG_SCANS = 7        // more than max_scans scans
};

typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
	int code;  // VL_JPEG_* to return after the longjmp
	char *msg; // JMSG_LENGTH_MAX bytes
} vl_jpeg_error;

typedef struct {
	struct jpeg_progress_mgr pub;
	const int *cancel;
	int max_scans;
} vl_jpeg_progress;

static void vl_jpeg_fail(j_common_ptr c, int code) {
	vl_jpeg_error *e = (vl_jpeg_error *)c->err;
	e->code = code;
	e->pub.format_message(c, e->msg);
	longjmp(e->jump, 1);
}

static void vl_jpeg_error_exit(j_common_ptr c) { vl_jpeg_fail(c, VL_JPEG_ERROR); }

// vl_jpeg_emit_message turns the warnings after which libjpeg makes up
// pixels into errors and drops the others (an unknown JFIF version,
// stray bytes between markers, a bad ICC marker), as OpenCV does.
static void vl_jpeg_emit_message(j_common_ptr c, int level) {
	if (level >= 0) {
		return; // trace messages
	}
	switch (c->err->msg_code) {
	case JWRN_JPEG_EOF:
		vl_jpeg_fail(c, VL_JPEG_TRUNCATED);
		break;
	case JWRN_HIT_MARKER:
	case JWRN_HUFF_BAD_CODE:
	case JWRN_ARITH_BAD_CODE:
	case JWRN_MUST_RESYNC:
		vl_jpeg_fail(c, VL_JPEG_CORRUPT);
		break;
	}
}

// cmyk_rows converts n rows of CMYK pixels (width of them a row) into RGB
// rows at out as OpenCV 4.6 does (icvCvt_CMYK2BGR_8u_C4C3R, in RGB
// order): each of C, M, Y becomes k − ((255 − v)·k >> 8).
static void cmyk_rows(unsigned char *out, JSAMPARRAY rows, int n, int width) {
	for (int y = 0; y < n; y++) {
		const unsigned char *p = rows[y];
		unsigned char *o = out + (size_t)y * 3 * width;
		for (int x = 0; x < width; x++, p += 4, o += 3) {
			int k = p[3];
			o[0] = (unsigned char)(k - ((255 - p[0]) * k >> 8));
			o[1] = (unsigned char)(k - ((255 - p[1]) * k >> 8));
			o[2] = (unsigned char)(k - ((255 - p[2]) * k >> 8));
		}
	}
}

static void vl_jpeg_progress_monitor(j_common_ptr c) {
	vl_jpeg_progress *p = (vl_jpeg_progress *)c->progress;
	if (__atomic_load_n(p->cancel, __ATOMIC_RELAXED)) {
		((vl_jpeg_error *)c->err)->msg[0] = 0;
		((vl_jpeg_error *)c->err)->code = VL_JPEG_CANCELLED;
		longjmp(((vl_jpeg_error *)c->err)->jump, 1);
	}
	if (((j_decompress_ptr)c)->input_scan_number > p->max_scans) {
		((vl_jpeg_error *)c->err)->msg[0] = 0;
		((vl_jpeg_error *)c->err)->code = VL_JPEG_SCANS;
		longjmp(((vl_jpeg_error *)c->err)->jump, 1);
	}
}

// vl_jpeg_decode_rgb decodes the JPEG file data[0:n] into out, width ×
// height RGB pixels, rows 3·width bytes apart, after checking that the
// file's frame header says width × height. It stops when *cancel becomes
// non-zero. msg holds at least JMSG_LENGTH_MAX bytes.
static int vl_jpeg_decode_rgb(const unsigned char *data, unsigned long n, unsigned char *out,
                              int width, int height, const int *cancel, int max_scans,
                              int *got_w, int *got_h, char *msg) {
	struct jpeg_decompress_struct cinfo;
	vl_jpeg_error err;
	vl_jpeg_progress progress;
	memset(&cinfo, 0, sizeof cinfo);
	memset(&err, 0, sizeof err);
	memset(&progress, 0, sizeof progress);
	msg[0] = 0;
	err.msg = msg;
	cinfo.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = vl_jpeg_error_exit;
	err.pub.emit_message = vl_jpeg_emit_message;
	progress.pub.progress_monitor = vl_jpeg_progress_monitor;
	progress.cancel = cancel;
	progress.max_scans = max_scans;
	if (setjmp(err.jump)) {
		jpeg_destroy_decompress(&cinfo);
		return ((volatile vl_jpeg_error *)&err)->code;
	}
	jpeg_create_decompress(&cinfo);
	cinfo.progress = &progress.pub;
	// The coefficient buffers of a progressive file are the only
	// allocations that grow with the image's area; bound them well above
	// what a width × height image needs (6 bytes a pixel at 4:4:4).
	cinfo.mem->max_memory_to_use = 16L * width * height + (64L << 20);
	jpeg_mem_src(&cinfo, data, n);
	jpeg_read_header(&cinfo, TRUE);
	*got_w = (int)cinfo.image_width;
	*got_h = (int)cinfo.image_height;
	if ((int)cinfo.image_width != width || (int)cinfo.image_height != height) {
		jpeg_destroy_decompress(&cinfo);
		return VL_JPEG_SIZE;
	}
	// OpenCV decodes CMYK and YCCK (4 components) as CMYK and converts
	// that itself (cmyk_rows); everything else libjpeg turns into RGB.
	int cmyk = cinfo.num_components == 4;
	if (cinfo.num_components != 1 && cinfo.num_components != 3 && !cmyk) {
		*got_w = cinfo.num_components;
		jpeg_destroy_decompress(&cinfo);
		return VL_JPEG_COMPONENTS;
	}
	cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
	cinfo.out_color_components = cmyk ? 4 : 3;
	jpeg_start_decompress(&cinfo);
	if ((int)cinfo.output_width != width || (int)cinfo.output_height != height ||
	    cinfo.output_components != cinfo.out_color_components) {
		jpeg_destroy_decompress(&cinfo);
		return VL_JPEG_SIZE;
	}
	enum { chunk = 16 };
	JSAMPARRAY tmp = NULL; // CMYK rows, freed with cinfo
	if (cmyk) {
		tmp = (*cinfo.mem->alloc_sarray)((j_common_ptr)&cinfo, JPOOL_IMAGE, 4 * (JDIMENSION)width, chunk);
	}
	size_t stride = 3 * (size_t)width;
	while (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW rows[chunk];
		JDIMENSION y0 = cinfo.output_scanline;
		int k = 0;
		for (; k < chunk && y0 + k < cinfo.output_height; k++) {
			rows[k] = cmyk ? tmp[k] : out + (y0 + k) * stride;
		}
		// The progress monitor runs at each call: it checks *cancel.
		JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, k);
		if (got == 0) {
			break; // never with a memory source, which does not suspend
		}
		if (cmyk) {
			cmyk_rows(out + y0 * stride, tmp, (int)got, width);
		}
	}
	int rc = VL_JPEG_OK;
	if (cinfo.output_scanline < cinfo.output_height) {
		rc = VL_JPEG_TRUNCATED;
	} else {
		jpeg_finish_decompress(&cinfo);
	}
	jpeg_destroy_decompress(&cinfo);
	return rc;
}
*/
import "C"

import (
	"context"
	"sync/atomic"
	"unsafe"

	"vlanode/msgs"
)

// maxScans bounds the scans of a progressive JPEG, as TurboJPEG's
// TJFLAG_LIMITSCANS does (500): encoders write about ten.
const maxScans = 500

// decodeJPEG decodes the JPEG frame f into dst, resized to f's declared
// size, as RGB: the pixels OpenCV's imdecode gives, in RGB order. It
// returns an error wrapping ctx's once ctx is done; its other errors wrap
// ErrInvalidFrame.
func decodeJPEG(ctx context.Context, dst *Image, f *msgs.Frame) error {
	dst.Reshape(f.Width, f.Height)
	var gotW, gotH C.int
	var msg [C.JMSG_LENGTH_MAX]C.char
	cancel := new(C.int)
	if ctx.Err() != nil {
		*cancel = 1
	}
	stop := context.AfterFunc(ctx, func() { atomic.StoreInt32((*int32)(unsafe.Pointer(cancel)), 1) })
	rc := C.vl_jpeg_decode_rgb((*C.uchar)(unsafe.Pointer(unsafe.SliceData(f.Data))), C.ulong(len(f.Data)),
		(*C.uchar)(unsafe.Pointer(unsafe.SliceData(dst.Pix))), C.int(f.Width), C.int(f.Height), cancel, maxScans,
		&gotW, &gotH, &msg[0])
	stop()
	switch rc {
	case C.VL_JPEG_OK:
		return nil
	case C.VL_JPEG_COMPONENTS:
		return frameError(f, ErrInvalidFrame, "JPEG of %d components (want 1, 3 or 4)", int(gotW))
	case C.VL_JPEG_SIZE:
		return frameError(f, ErrInvalidFrame, "decoded size %d×%d differs from the declared %d×%d", int(gotW), int(gotH), f.Width, f.Height)
	case C.VL_JPEG_TRUNCATED:
		return frameError(f, ErrInvalidFrame, "corrupt or truncated image (libjpeg ran out of data in %d bytes)", len(f.Data))
	case C.VL_JPEG_CANCELLED:
		return cancelled(ctx, f)
	case C.VL_JPEG_SCANS:
		return frameError(f, ErrInvalidFrame, "progressive JPEG of more than %d scans", maxScans)
	}
	return frameError(f, ErrInvalidFrame, "corrupt or truncated image (libjpeg: %s)", C.GoString(&msg[0]))
}
