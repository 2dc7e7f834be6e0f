// e^x for 16 float32 lanes on AVX-512, for the CPU kernels that write their own vector loops
// (the tanh-GELU, the bf16 attention's softmax rows). math::fast_exp's range reduction and
// polynomial (within an ulp or so of exp), with 2^n applied by VSCALEFPS, which overflows to
// inf and underflows through the subnormals to 0 by itself: where fast_exp needs three range
// selects, this clamps x to [-150, 150] (keeping inf - inf out of the reduction) in an order
// that lets a NaN through.
#pragma once
#if defined(__AVX512F__)
#include <immintrin.h>

namespace kiln::simd {

inline __m512 exp16(__m512 x) {
  // max/min return their second operand when either is NaN: x stays NaN
  const __m512 t = _mm512_min_ps(_mm512_set1_ps(150.f), _mm512_max_ps(_mm512_set1_ps(-150.f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), t);  // t - n ln 2, in two parts
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(y, n);
}

}  // namespace kiln::simd
#endif
