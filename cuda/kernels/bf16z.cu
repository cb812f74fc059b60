// bf16z.cu: decoding of compressed weight units (package weights/bf16z)
// into their slots: vla_z_decode (a block of 8 warps a tile, a warp a
// warp-stream, the decoding table in shared memory) and
// vla_z_decode_serial (a warp a tile, a thread a warp-stream decoding its
// 32 lanes in turn, as the Go decoder does: simpler and slower, to check
// or stand in for the first). Both read a table of jobs (struct
// vla_z_job), one tile each, and leave every tile they cannot decode
// exactly as the encoder wrote it reported in a status word.
//
// The format (weights/bf16z, docs/compression.md): a coded tile of n ≤
// 65,536 bf16 elements is ceil(n / 8192) warp-streams. Its payload holds
// the streams' word offsets (u32, one more than the streams, padded to 16
// bytes), the sign-and-mantissa bytes (8,192 a stream, the last rounded up
// to 128; lane l's bytes of steps 4q..4q+3 at 128q + 4l of its stream's
// bytes), then the 16-bit words of the streams. In a warp-stream lane l
// decodes elements l, l + 32, ... of the stream, one a step: it looks the
// next 12 bits of its bit buffer up in the table (entry: symbol in the low
// byte, codeword length in the high byte, 0 for none); a lane whose
// codeword is longer than the bits it holds, or that finds none while it
// holds fewer than 12, takes the stream's next word (lanes of a step in
// order: a ballot and a prefix count) and looks up again. Every word of
// the stream must be taken. The element is sign | exponent << 7 | mantissa.

typedef unsigned char u8; // (a repeated identical typedef is allowed, should common.cuh gain one)

#define VLA_Z_MAXLEN 12                           // bf16z.MaxCodeLen
#define VLA_Z_LANES 32                            // bf16z.Lanes
#define VLA_Z_STREAM (VLA_Z_LANES * 256)          // bf16z.StreamElems
#define VLA_Z_MAX_TILE 65536                      // bf16z.MaxTileElems
#define VLA_Z_LUT_BYTES (2 << VLA_Z_MAXLEN)       // bf16z.LUTBytes
#define VLA_Z_RAW_MAX (1u << 24)                  // bf16z.maxRawTileBytes
#define VLA_Z_THREADS (VLA_Z_MAX_TILE / VLA_Z_STREAM * 32) // vla_z_decode: a warp a warp-stream
#define VLA_Z_KIND_RAW 0
#define VLA_Z_KIND_CODED 1

// Failure codes, or-ed into status[2] (cuda.ZErrJob, ZErrStream, ZErrSum).
#define VLA_Z_ERR_JOB 1    // the job does not fit the compressed bytes or the destination
#define VLA_Z_ERR_STREAM 2 // a warp-stream does not decode: offsets, overrun, no codeword, words left
#define VLA_Z_ERR_SUM 4    // the tile's checksum differs

// vla_z_job is bf16z.Job's 48-byte form.
struct vla_z_job {
	u64 src;   // payload offset in the compressed bytes (a multiple of 16)
	u64 dst;   // destination offset of the tile's first element
	u64 lut;   // decoding table's offset in the compressed bytes (coded)
	u32 rows;  // tile rows
	u32 cols;  // coded: bf16 elements of a row; raw: bytes of a row
	u32 pitch; // destination bytes from one row to the next
	u32 kind;  // VLA_Z_KIND_*
	u32 sum;   // checksum: see vla_z_mix and vla_z_desc_hash
	u32 bytes; // payload bytes
};

// vla_z_mix is MurmurHash3's finalizer (bf16z.mix). A tile's checksum is
// the sum of vla_z_mix(i << 16 | bits) over its coded elements (i the
// element's index in the tile), or of vla_z_mix(i << 8 | byte) over a raw
// tile's bytes, plus vla_z_desc_hash of its job.
__device__ __forceinline__ u32 vla_z_mix(u32 x) {
	x ^= x >> 16;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	x *= 0xc2b2ae35u;
	x ^= x >> 16;
	return x;
}

// vla_z_desc_hash hashes every field of a job but its sum (bf16z.descHash).
__device__ u32 vla_z_desc_hash(const vla_z_job &j) {
	u32 h = vla_z_mix(j.kind ^ 0x9e3779b9u);
	h = vla_z_mix(h ^ (u32)j.src);
	h = vla_z_mix(h ^ (u32)(j.src >> 32));
	h = vla_z_mix(h ^ (u32)j.dst);
	h = vla_z_mix(h ^ (u32)(j.dst >> 32));
	h = vla_z_mix(h ^ (u32)j.lut);
	h = vla_z_mix(h ^ (u32)(j.lut >> 32));
	h = vla_z_mix(h ^ j.rows);
	h = vla_z_mix(h ^ j.cols);
	h = vla_z_mix(h ^ j.pitch);
	return vla_z_mix(h ^ j.bytes);
}

// Payload geometry of a coded tile of n elements (bf16z.streams,
// offsetBytes, smBytes).
__device__ __forceinline__ u32 vla_z_streams(u32 n) { return (n + VLA_Z_STREAM - 1) / VLA_Z_STREAM; }
__device__ __forceinline__ u32 vla_z_offset_bytes(u32 n) { return (4 * (vla_z_streams(n) + 1) + 15) & ~15u; }
__device__ __forceinline__ u32 vla_z_sm_bytes(u32 n) {
	const u32 s = vla_z_streams(n);
	return (s - 1) * VLA_Z_STREAM + ((n - (s - 1) * VLA_Z_STREAM + 127) & ~127u);
}

// vla_z_check returns VLA_Z_ERR_JOB unless every byte the job reads lies
// in the src_bytes of compressed bytes and every byte it writes in the
// dst_bytes of the destination, with the alignment the kernels assume
// (bf16z.checkJob). The bases of both are 16-byte aligned (ZDecoder.Decode).
__device__ u32 vla_z_check(const vla_z_job &j, u64 src_bytes, u64 dst_bytes) {
	if (j.rows < 1 || j.cols < 1) return VLA_Z_ERR_JOB;
	const u64 row_bytes = (u64)j.cols * (j.kind == VLA_Z_KIND_CODED ? 2 : 1);
	if (j.rows > 1 && row_bytes > j.pitch) return VLA_Z_ERR_JOB;
	if (j.dst > dst_bytes || (u64)(j.rows - 1) * j.pitch + row_bytes > dst_bytes - j.dst) return VLA_Z_ERR_JOB;
	if ((j.src & 15) != 0 || j.src > src_bytes || j.bytes > src_bytes - j.src) return VLA_Z_ERR_JOB;
	const u64 n = (u64)j.rows * j.cols;
	if (j.kind == VLA_Z_KIND_RAW) return j.bytes == n && n <= VLA_Z_RAW_MAX ? 0 : VLA_Z_ERR_JOB;
	if (j.kind != VLA_Z_KIND_CODED || n > VLA_Z_MAX_TILE) return VLA_Z_ERR_JOB;
	if (((j.dst | j.pitch) & 1) != 0) return VLA_Z_ERR_JOB;
	if ((j.lut & 15) != 0 || src_bytes < VLA_Z_LUT_BYTES || j.lut > src_bytes - VLA_Z_LUT_BYTES) return VLA_Z_ERR_JOB;
	const u32 fixed = vla_z_offset_bytes((u32)n) + vla_z_sm_bytes((u32)n);
	return j.bytes >= fixed && ((j.bytes - fixed) & 1) == 0 ? 0 : VLA_Z_ERR_JOB;
}

// vla_z_fail reports job ji (its index in the launch's table plus the
// launch's base): status[0] counts failed jobs, status[1] holds the
// bitwise complement of the lowest failed index (0: none), status[2] the
// or of the codes.
__device__ void vla_z_fail(u32 *status, u32 ji, u32 code) {
	atomicAdd(status, 1u);
	atomicMax(status + 1, ~ji);
	atomicOr(status + 2, code);
}

// vla_z_raw copies a raw tile (rows of cols bytes, contiguous in the
// payload) with the block's threads, four bytes at a time where every
// address allows it, and returns the thread's share of its checksum.
__device__ u32 vla_z_raw(const u8 *__restrict__ s, u8 *__restrict__ d, u32 rows, u32 cols, u32 pitch) {
	const u32 n = rows * cols;
	u32 sum = 0;
	if (((cols | pitch | (u32)(u64)d | (u32)(u64)s) & 3) == 0) {
		for (u32 p = 4 * threadIdx.x; p < n; p += 4 * blockDim.x) {
			const u32 r = p / cols, c = p - r * cols;
			const u32 w = *(const u32 *)(s + p);
			*(u32 *)(d + (u64)r * pitch + c) = w;
#pragma unroll
			for (u32 b = 0; b < 4; b++) sum += vla_z_mix((p + b) << 8 | (w >> (8 * b) & 0xffu));
		}
	} else {
		for (u32 p = threadIdx.x; p < n; p += blockDim.x) {
			const u32 r = p / cols, c = p - r * cols;
			const u32 v = s[p];
			d[(u64)r * pitch + c] = (u8)v;
			sum += vla_z_mix(p << 8 | v);
		}
	}
	return sum;
}

// vla_z_stream is warp-stream k of a coded tile (payload p, n elements,
// rows of cols elements pitch bytes apart at out): the stream's bounds,
// and where its elements start.
struct vla_z_stream {
	const u16 *words;  // the stream's words
	const u8 *sm;      // its sign-and-mantissa bytes
	u32 nw;            // its word count
	u32 m;             // its elements
	u32 e0;            // the tile index of its first element
	bool ok;           // its offsets are sound
};

__device__ __forceinline__ vla_z_stream vla_z_stream_at(const u8 *p, u32 n, u32 bytes, u32 k) {
	vla_z_stream s;
	const u32 hb = vla_z_offset_bytes(n), smb = vla_z_sm_bytes(n);
	const u32 w0 = ((const u32 *)p)[k], w1 = ((const u32 *)p)[k + 1];
	s.ok = w0 <= w1 && w1 <= (bytes - hb - smb) >> 1;
	s.words = (const u16 *)(p + hb + smb) + w0;
	s.nw = s.ok ? w1 - w0 : 0;
	s.sm = p + hb + k * VLA_Z_STREAM;
	s.e0 = k * VLA_Z_STREAM;
	s.m = min((u32)VLA_Z_STREAM, n - s.e0);
	return s;
}

// vla_z_bf16 is the element of sign-and-mantissa byte b and exponent e.
__device__ __forceinline__ u32 vla_z_bf16(u32 b, u32 e) { return (b & 0x80u) << 8 | (e & 0xffu) << 7 | (b & 0x7fu); }

// vla_z_warp decodes warp-stream s with one warp (lut in shared memory)
// into the rows at out, adds its elements' checksum terms to sum and
// returns whether it found the stream unsound. Every lane must call it.
__device__ bool vla_z_warp(const vla_z_stream &s, const u16 *lut, u8 *__restrict__ out, u32 cols, u32 pitch, u32 &sum) {
	const u32 lane = threadIdx.x & 31, below = (1u << lane) - 1u;
	const u32 steps = (s.m + 31) >> 5;
	const u32 *smw = (const u32 *)s.sm;
	u32 e = s.e0 + lane;
	u32 r = e / cols, c = e - r * cols;
	u32 buf = 0, held = 0, ptr = 0, q = 0;
	u32 qn = smw[lane]; // this lane's sign-and-mantissa bytes of the next four steps, loaded four steps ahead
	bool bad = !s.ok;
	for (u32 st = 0; st < steps; st++) {
		if ((st & 3) == 0) {
			q = qn;
			const u32 g = (st >> 2) + 1;
			if (4 * g < steps) qn = smw[g * 32 + lane];
		}
		const bool active = (st << 5) + lane < s.m;
		u32 ent = lut[buf >> (32 - VLA_Z_MAXLEN)];
		u32 len = ent >> 8;
		const bool need = active && held < VLA_Z_MAXLEN && (len - 1u >= VLA_Z_MAXLEN || len > held);
		const u32 mask = __ballot_sync(0xffffffffu, need);
		if (need) {
			const u32 at = ptr + __popc(mask & below);
			u32 w = 0;
			if (at < s.nw) w = s.words[at];
			else bad = true;
			buf |= w << (16 - held); // held < 12: the word fits below the held bits
			held += 16;
			ent = lut[buf >> (32 - VLA_Z_MAXLEN)];
			len = ent >> 8;
		}
		ptr += __popc(mask);
		if (active) {
			if (len - 1u >= VLA_Z_MAXLEN || len > held) { // no codeword
				bad = true;
				len = 0;
			}
			buf <<= len;
			held -= len;
			const u32 v = vla_z_bf16(q >> (8 * (st & 3)), ent);
			*(u16 *)(out + (u64)r * pitch + 2 * c) = (u16)v;
			sum += vla_z_mix(e << 16 | v);
		}
		e += 32;
		c += 32;
		while (c >= cols) {
			c -= cols;
			r++;
		}
	}
	return bad || ptr != s.nw;
}

// vla_z_serial decodes warp-stream s with one thread (lut in global
// memory), its 32 lanes in turn: bf16z's decodeStream.
__device__ bool vla_z_serial(const vla_z_stream &s, const u16 *__restrict__ lut, u8 *__restrict__ out, u32 cols, u32 pitch,
                             u32 &sum) {
	u32 buf[VLA_Z_LANES], held[VLA_Z_LANES];
#pragma unroll
	for (int l = 0; l < VLA_Z_LANES; l++) buf[l] = held[l] = 0;
	const u32 steps = (s.m + 31) >> 5;
	u32 e = s.e0, r = e / cols, c = e - r * cols, ptr = 0;
	bool bad = !s.ok;
	for (u32 st = 0; st < steps; st++) {
		const u8 *q = s.sm + (st >> 2) * 128 + (st & 3);
#pragma unroll
		for (int l = 0; l < VLA_Z_LANES; l++) {
			if ((st << 5) + l < s.m) {
				u32 b = buf[l], h = held[l];
				u32 ent = lut[b >> (32 - VLA_Z_MAXLEN)];
				u32 len = ent >> 8;
				if (h < VLA_Z_MAXLEN && (len - 1u >= VLA_Z_MAXLEN || len > h)) {
					u32 w = 0;
					if (ptr < s.nw) w = s.words[ptr];
					else bad = true;
					ptr++;
					b |= w << (16 - h);
					h += 16;
					ent = lut[b >> (32 - VLA_Z_MAXLEN)];
					len = ent >> 8;
				}
				if (len - 1u >= VLA_Z_MAXLEN || len > h) {
					bad = true;
					len = 0;
				}
				buf[l] = b << len;
				held[l] = h - len;
				const u32 v = vla_z_bf16(q[4 * l], ent);
				*(u16 *)(out + (u64)r * pitch + 2 * c) = (u16)v;
				sum += vla_z_mix(e << 16 | v);
				e++;
				if (++c == cols) {
					c = 0;
					r++;
				}
			}
		}
	}
	return bad || ptr != s.nw;
}

// vla_z_finish adds the block's checksum terms and flags and reports the
// job if it failed. sh holds a u32 a warp; every thread must call it.
__device__ void vla_z_finish(const vla_z_job &j, u32 ji, u32 sum, bool bad, u32 *sh, u32 *status) {
	const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
	const u32 anyBad = __any_sync(0xffffffffu, bad);
	if (lane == 0) {
		sh[warp] = sum;
		sh[warp + 32] = anyBad;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		u32 total = vla_z_desc_hash(j), code = 0;
		for (u32 w = 0; w < (blockDim.x + 31) / 32; w++) {
			total += sh[w];
			if (sh[w + 32]) code = VLA_Z_ERR_STREAM;
		}
		if (total != j.sum) code |= VLA_Z_ERR_SUM;
		if (code) vla_z_fail(status, ji, code);
	}
}

// vla_z_decode decodes job blockIdx.x of jobs: the compressed bytes at src
// (src_bytes of them, 16-byte aligned) into dst (dst_bytes, 16-byte
// aligned); a job that fails is reported in status as base + its index
// (vla_z_fail) and its rectangle of dst may hold anything. Launched with
// VLA_Z_THREADS threads a block and a block a job.
extern "C" __global__ void __launch_bounds__(VLA_Z_THREADS, 8)
    vla_z_decode(const u8 *__restrict__ src, u64 src_bytes, const vla_z_job *__restrict__ jobs, u8 *__restrict__ dst,
                 u64 dst_bytes, u32 *status, u32 base) {
	vla_pdl_enter();
	__shared__ __align__(16) u16 lut[1 << VLA_Z_MAXLEN];
	__shared__ u32 sh[64];
	const vla_z_job j = jobs[blockIdx.x];
	const u32 ji = base + blockIdx.x;
	const u32 err = vla_z_check(j, src_bytes, dst_bytes);
	if (err != 0) { // the same for every thread of the block
		if (threadIdx.x == 0) vla_z_fail(status, ji, err);
		return;
	}
	const u8 *p = src + j.src;
	u8 *out = dst + j.dst;
	u32 sum = 0;
	bool bad = false;
	if (j.kind == VLA_Z_KIND_RAW) {
		sum = vla_z_raw(p, out, j.rows, j.cols, j.pitch);
	} else {
		const uint4 *g = (const uint4 *)(src + j.lut);
		for (u32 i = threadIdx.x; i < VLA_Z_LUT_BYTES / 16; i += blockDim.x) ((uint4 *)lut)[i] = g[i];
		__syncthreads();
		const u32 n = j.rows * j.cols, k = threadIdx.x >> 5;
		if (k < vla_z_streams(n)) { // the same for the whole warp
			const vla_z_stream s = vla_z_stream_at(p, n, j.bytes, k);
			bad = vla_z_warp(s, lut, out, j.cols, j.pitch, sum);
		}
	}
	vla_z_finish(j, ji, sum, bad, sh, status);
}

// vla_z_decode_serial is vla_z_decode with a warp a job, thread k decoding
// warp-stream k alone (vla_z_serial); the table is read from global
// memory. Launched with 32 threads a block and a block a job.
extern "C" __global__ void __launch_bounds__(32)
    vla_z_decode_serial(const u8 *__restrict__ src, u64 src_bytes, const vla_z_job *__restrict__ jobs, u8 *__restrict__ dst,
                        u64 dst_bytes, u32 *status, u32 base) {
	vla_pdl_enter();
	__shared__ u32 sh[64];
	const vla_z_job j = jobs[blockIdx.x];
	const u32 ji = base + blockIdx.x;
	const u32 err = vla_z_check(j, src_bytes, dst_bytes);
	if (err != 0) {
		if (threadIdx.x == 0) vla_z_fail(status, ji, err);
		return;
	}
	const u8 *p = src + j.src;
	u8 *out = dst + j.dst;
	u32 sum = 0;
	bool bad = false;
	if (j.kind == VLA_Z_KIND_RAW) {
		sum = vla_z_raw(p, out, j.rows, j.cols, j.pitch);
	} else {
		const u32 n = j.rows * j.cols;
		if (threadIdx.x < vla_z_streams(n)) {
			const vla_z_stream s = vla_z_stream_at(p, n, j.bytes, threadIdx.x);
			bad = vla_z_serial(s, (const u16 *)(src + j.lut), out, j.cols, j.pitch, sum);
		}
	}
	vla_z_finish(j, ji, sum, bad, sh, status);
}
