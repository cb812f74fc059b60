//go:build !nogocv

package vision

// JPEG frames are decoded with libjpeg-turbo's libjpeg API, the library
// OpenCV itself decodes JPEG with (Debian's libopencv-dev depends on
// libjpeg-dev, so the headers come with it), and with OpenCV's settings:
// scale 1, the default ISLOW IDCT and fancy upsampling, output colour
// space JCS_RGB. OpenCV 4.6's decoder then swaps every row to BGR with a
// byte loop that takes longer than the decoding; here the rows go straight
// into the caller's RGB buffer. TestJPEGMatchesOpenCV checks that the pixels
// are OpenCV's.

/*
#cgo pkg-config: libjpeg
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
	VL_JPEG_UNSUPPORTED = 3, // CMYK/YCCK or MJPEG without Huffman tables: left to OpenCV
	VL_JPEG_TRUNCATED = 4    // the data ended before the image did
};

typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
	int eof; // libjpeg ran out of data and inserted an end-of-image marker
} vl_jpeg_error;

static void vl_jpeg_error_exit(j_common_ptr c) {
	longjmp(((vl_jpeg_error *)c->err)->jump, 1);
}

// vl_jpeg_emit_message drops libjpeg's warnings and trace messages, as
// OpenCV lets a JPEG with recoverable corruption through, and remembers
// premature end of data, which OpenCV would leave as uninitialized rows.
static void vl_jpeg_emit_message(j_common_ptr c, int level) {
	if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
		((vl_jpeg_error *)c->err)->eof = 1;
	}
}

// vl_jpeg_decode_rgb decodes the JPEG file data[0:n] into out, width ×
// height RGB pixels, rows 3·width bytes apart. On VL_JPEG_ERROR msg (at
// least JMSG_LENGTH_MAX bytes) holds libjpeg's message.
static int vl_jpeg_decode_rgb(const unsigned char *data, unsigned long n, unsigned char *out,
                              int width, int height, int *got_w, int *got_h, char *msg) {
	struct jpeg_decompress_struct cinfo;
	vl_jpeg_error err;
	int rc = VL_JPEG_OK;
	memset(&cinfo, 0, sizeof cinfo);
	memset(&err, 0, sizeof err);
	msg[0] = 0;
	cinfo.err = jpeg_std_error(&err.pub);
	err.pub.error_exit = vl_jpeg_error_exit;
	err.pub.emit_message = vl_jpeg_emit_message;
	if (setjmp(err.jump)) {
		err.pub.format_message((j_common_ptr)&cinfo, msg);
		jpeg_destroy_decompress(&cinfo);
		return VL_JPEG_ERROR;
	}
	jpeg_create_decompress(&cinfo);
	jpeg_mem_src(&cinfo, data, n);
	jpeg_read_header(&cinfo, TRUE);
	*got_w = (int)cinfo.image_width;
	*got_h = (int)cinfo.image_height;
	if (cinfo.num_components != 1 && cinfo.num_components != 3) {
		rc = VL_JPEG_UNSUPPORTED;
	} else if (cinfo.ac_huff_tbl_ptrs[0] == NULL && cinfo.ac_huff_tbl_ptrs[1] == NULL &&
	           cinfo.dc_huff_tbl_ptrs[0] == NULL && cinfo.dc_huff_tbl_ptrs[1] == NULL) {
		rc = VL_JPEG_UNSUPPORTED; // OpenCV loads the MJPEG tables itself
	} else if ((int)cinfo.image_width != width || (int)cinfo.image_height != height) {
		rc = VL_JPEG_SIZE;
	}
	if (rc != VL_JPEG_OK) {
		jpeg_destroy_decompress(&cinfo);
		return rc;
	}
	cinfo.out_color_space = JCS_RGB;
	cinfo.out_color_components = 3;
	jpeg_start_decompress(&cinfo);
	if ((int)cinfo.output_width != width || (int)cinfo.output_height != height ||
	    cinfo.output_components != 3) {
		jpeg_destroy_decompress(&cinfo);
		return VL_JPEG_SIZE;
	}
	size_t stride = 3 * (size_t)width;
	while (cinfo.output_scanline < cinfo.output_height) {
		JSAMPROW rows[16];
		int k = 0;
		for (; k < 16 && cinfo.output_scanline + k < cinfo.output_height; k++) {
			rows[k] = out + (cinfo.output_scanline + k) * stride;
		}
		if (jpeg_read_scanlines(&cinfo, rows, k) == 0) {
			break; // never with a memory source, which does not suspend
		}
	}
	if (cinfo.output_scanline < cinfo.output_height) {
		rc = VL_JPEG_TRUNCATED;
	} else {
		jpeg_finish_decompress(&cinfo);
	}
	if (err.eof) {
		rc = VL_JPEG_TRUNCATED;
	}
	jpeg_destroy_decompress(&cinfo);
	return rc;
}
*/
import "C"

import (
	"unsafe"

	"vlanode/msgs"
)

// errJPEGUnsupported is decodeJPEG's answer for the JPEG files it leaves to
// OpenCV: CMYK and YCCK, and MJPEG frames without Huffman tables.
type errJPEGUnsupported struct{}

func (errJPEGUnsupported) Error() string { return "left to OpenCV" }

// decodeJPEG decodes the JPEG frame f into dst, resized to f's declared
// size, as RGB: the pixels OpenCV's imdecode gives, in RGB order. It
// returns errJPEGUnsupported for the files it leaves to OpenCV; its other
// errors wrap ErrInvalidFrame.
func decodeJPEG(dst *Image, f *msgs.Frame) error {
	dst.Reshape(f.Width, f.Height)
	var gotW, gotH C.int
	var msg [C.JMSG_LENGTH_MAX]C.char
	rc := C.vl_jpeg_decode_rgb((*C.uchar)(unsafe.Pointer(unsafe.SliceData(f.Data))), C.ulong(len(f.Data)),
		(*C.uchar)(unsafe.Pointer(unsafe.SliceData(dst.Pix))), C.int(f.Width), C.int(f.Height),
		&gotW, &gotH, &msg[0])
	switch rc {
	case C.VL_JPEG_OK:
		return nil
	case C.VL_JPEG_UNSUPPORTED:
		return errJPEGUnsupported{}
	case C.VL_JPEG_SIZE:
		return frameError(f, ErrInvalidFrame, "decoded size %d×%d differs from the declared %d×%d", int(gotW), int(gotH), f.Width, f.Height)
	case C.VL_JPEG_TRUNCATED:
		return frameError(f, ErrInvalidFrame, "corrupt or truncated image (libjpeg ran out of data in %d bytes)", len(f.Data))
	}
	return frameError(f, ErrInvalidFrame, "corrupt or truncated image (libjpeg: %s)", C.GoString(&msg[0]))
}
