// AVX-512 helpers of the AVX-512-BF16 and AMX paths. Include it inside a
// region compiled for AVX512F/BW/VL/DQ (#pragma GCC target).
#ifndef VLANODE_KERN_AVX512_H
#define VLANODE_KERN_AVX512_H

#include <immintrin.h>

// round16 rounds 16 floats to bf16 exactly as kern_bf16 (nearest, ties to
// even; a NaN stays a quiet NaN).
static inline __m256i round16(__m512 v)
{
	__m512i u = _mm512_castps_si512(v);
	__m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
	__mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
						_mm512_set1_epi32(0x7f800000));
	r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
	return _mm512_cvtepi32_epi16(r);
}

// hsum16 adds 16 lanes in a fixed order: halves, then quarters, then pairs.
static inline float hsum16(__m512 v)
{
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(b);
}

// exp16 is e^x to about 2 ulp: x = n·ln2 + r with |r| ≤ ln2/2, e^r by the
// degree-6 polynomial of Cephes' expf, scaled by 2^n (scalef: overflow to
// +inf, underflow to 0). x is clamped to [-104, 89], where e^x is already 0
// or +inf in float32.
static inline __m512 exp16(__m512 x)
{
	x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	__m512 p = _mm512_set1_ps(1.9875691500e-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
	p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	return _mm512_scalef_ps(p, n);
}

// silu_mul16 is silu(g)·u = g / (1 + e^-g) · u on 16 lanes.
static inline __m512 silu_mul16(__m512 g, __m512 u)
{
	__m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
	return _mm512_mul_ps(s, u);
}

// mask16 and mask32 have the low n bits set (0 ≤ n ≤ 16 or 32).
static inline __mmask16 mask16(int n) { return (__mmask16)((1u << n) - 1u); }
static inline __mmask32 mask32(int n) { return n >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << n) - 1u); }

#endif
