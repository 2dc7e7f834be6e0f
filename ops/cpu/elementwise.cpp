// CPU kernels of the elementwise family: broadcasting binary ops, unary ops (forward and
// backward) and where. The op switches are generated from the table ops/elementwise_ops.def
// and run the functors of ops/elementwise_functors.h, the same the CUDA loops run.
// Contiguous operands take tight loops the compiler vectorises.
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports once inlined (GCC bug 105593): the AVX-512 GELU below.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <algorithm>
#include <cmath>
#include <type_traits>
#include "kiln/core/copy.h"
#include "kiln/core/simd_half.h"
#include "kiln/core/strided.h"
#include "kiln/ops/cpu/simd_exp.h"
#include "kiln/ops/kernels/elementwise.h"
#include "kiln/ops/elementwise_functors.h"

namespace kiln {
namespace {

// Elementwise: every output element is written once from its own inputs, so long rows
// are split over the threads too (a contiguous tensor is one row).
template <int N>
void for_each_row_args(const EwArgs& a, const auto& row) {
  std::vector<int64_t> shape(a.shape, a.shape + a.ndim);
  std::array<std::vector<int64_t>, N> st;
  for (int k = 0; k < N; ++k) st[k].assign(a.strides[k], a.strides[k] + a.ndim);
  for_each_row<N>(shape, st, row, 32768, true);
}

// Runs f(out, a, b) elementwise with broadcasting; fast paths for unit-stride rows and
// a broadcast scalar operand.
template <class TO, class T, class F>
void binary_loop(const EwArgs& args, F f) {
  TO* out = static_cast<TO*>(args.ptr[0]);
  const T* a = static_cast<const T*>(args.ptr[1]);
  const T* b = static_cast<const T*>(args.ptr[2]);
  for_each_row_args<3>(args, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& s) {
    TO* o = out + off[0];
    const T* x = a + off[1];
    const T* y = b + off[2];
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f(x[i * s[1]], y[i * s[2]]);
    }
  });
}

// The switch over the binary rows of ops/elementwise_ops.def: each runs its functor.
template <class T>
void binary_typed(Op op, const EwArgs& args) {
  using bool_ = bool;
  using same = T;
  switch (op) {
#define KILN_BINARY(name, Fn, result) \
  case Op::name: return binary_loop<result, T>(args, elementwise::Fn##F<T>{});
#include "kiln/ops/elementwise_ops.def"
#undef KILN_BINARY
    default: KILN_FAIL("elementwise: op ", op_name(op), " is not a binary op");
  }
}

// float16 / bfloat16 storage computes in float32: each chunk is widened into a buffer on
// the stack, computed as a float32 row is, and rounded back, so memory is read and written
// once in 16 bits (where converting the tensors first would read and write it three
// times). The same bits as computing on the widened tensor and rounding its result.
constexpr int64_t kChunk = 512;  // (kIs16: core/copy.h)

/// m values of an operand of dtype d from p (stride s; 0 broadcasts one value, and then only
/// that one is returned) as float32: a contiguous float32 row where it lies, else widened
/// into buf.
inline const float* operand_floats(const void* p, DType d, int64_t s, int64_t m, float* buf) {
  const int64_t n = s == 0 ? 1 : m;
  if (d == DType::float32) {
    const float* f = static_cast<const float*>(p);
    if (s <= 1) return f;
    for (int64_t j = 0; j < n; ++j) buf[j] = f[j * s];
    return buf;
  }
  auto widen = [&]<class X>(const X* x) {
    if (s <= 1) return convert_floats(x, buf, n);
    for (int64_t j = 0; j < n; ++j) buf[j] = float(x[j * s]);
  };
  if (d == DType::bfloat16) widen(static_cast<const BFloat16*>(p));
  else widen(static_cast<const Half*>(p));
  return buf;
}

/// The float32 computation of f over operands and an output any of which may be 16-bit
/// (EwArgs::dtype; TO: float, rounded into a 16-bit out, or bool for comparisons), a
/// chunk of a row at a time.
template <class TO, class F>
void binary_widened(const EwArgs& args, F f) {
  const DType od = args.dtype[0], ad = args.dtype[1], bd = args.dtype[2];
  const size_t osz = dtype_size(od), asz = dtype_size(ad), bsz = dtype_size(bd);
  for_each_row_args<3>(args, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& s) {
    alignas(64) float ab[kChunk], bb[kChunk], ob[kChunk];
    for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
      const int64_t m = std::min(kChunk, n - i0);
      const bool ua = s[1] != 0, ub = s[2] != 0;  // false: one broadcast value
      const char* pa = static_cast<const char*>(args.ptr[1]) + (off[1] + i0 * s[1]) * asz;
      const char* pb = static_cast<const char*>(args.ptr[2]) + (off[2] + i0 * s[2]) * bsz;
      const float* x = operand_floats(pa, ad, s[1], m, ab);
      const float* y = operand_floats(pb, bd, s[2], m, bb);
      char* o = static_cast<char*>(args.ptr[0]) + (off[0] + i0 * s[0]) * osz;
      // d[j * sd] = f(x_j, y_j), with a broadcast operand's one value hoisted (loops that vectorise)
      auto run = [&](auto* d, auto sd) {  // sd: int64_t, or a constant 1
        const float xv = x[0], yv = y[0];
        if (ua && ub) {
          for (int64_t j = 0; j < m; ++j) d[j * sd] = f(x[j], y[j]);
        } else if (ua) {
          for (int64_t j = 0; j < m; ++j) d[j * sd] = f(x[j], yv);
        } else if (ub) {
          for (int64_t j = 0; j < m; ++j) d[j * sd] = f(xv, y[j]);
        } else {
          for (int64_t j = 0; j < m; ++j) d[j * sd] = f(xv, yv);
        }
      };
      if constexpr (std::is_same_v<TO, bool>) {
        run(reinterpret_cast<bool*>(o), s[0]);
      } else if (od == DType::float32 && s[0] == 1) {  // straight into a float32 row
        run(reinterpret_cast<float*>(o), std::integral_constant<int64_t, 1>{});
      } else {
        run(ob, std::integral_constant<int64_t, 1>{});
        auto store = [&]<class X>(X* d) {
          if constexpr (!std::is_same_v<X, float>)
            if (s[0] == 1) return convert_floats(ob, d, m);
          for (int64_t j = 0; j < m; ++j) d[j * s[0]] = X(ob[j]);
        };
        if (od == DType::float32) store(reinterpret_cast<float*>(o));
        else if (od == DType::bfloat16) store(reinterpret_cast<BFloat16*>(o));
        else store(reinterpret_cast<Half*>(o));
      }
    }
  });
}

void binary_cpu(Op op, DType dt, const EwArgs& args) {
  if (dt == DType::bool_) return binary_typed<uint8_t>(bool_binary_op(op), args);  // one byte, 0 or 1
  if (dt == DType::float32 && (is_half(args.dtype[0]) || is_half(args.dtype[1]) || is_half(args.dtype[2]))) {
    using bool_ = bool;
    using same = float;
    switch (op) {
#define KILN_BINARY(name, Fn, result) \
  case Op::name: return binary_widened<result>(args, elementwise::Fn##F<float>{});
#include "kiln/ops/elementwise_ops.def"
#undef KILN_BINARY
      default: KILN_FAIL("elementwise: op ", op_name(op), " is not a binary op");
    }
  }
  KILN_DISPATCH_NUMERIC(dt, op_name(op), [&]<class T>() { binary_typed<T>(op, args); });
}

/// out[0, m) = f(x[0, m)) for 16-bit x, m <= kChunk, through float32.
template <class T, class F>
void unary_chunk16(const T* x, T* out, int64_t m, F f) {
  alignas(64) float xf[kChunk];
  convert_floats(x, xf, m);
  for (int64_t j = 0; j < m; ++j) xf[j] = f(xf[j]);
  convert_floats(xf, out, m);
}
/// out[0, m) = g * d(s) for 16-bit s, g, m <= kChunk, through float32.
template <class T, class D>
void unary_grad_chunk16(const T* s, const T* g, T* out, int64_t m, D d) {
  alignas(64) float sf[kChunk], gf[kChunk];
  convert_floats(s, sf, m);
  convert_floats(g, gf, m);
  for (int64_t j = 0; j < m; ++j) gf[j] = elementwise::unary_grad(d, gf[j], sf[j]);
  convert_floats(gf, out, m);
}

template <class T, class F>
void unary_loop(const UnaryArgs& a, F f) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  parallel_for(0, a.n, 16384, [&](int64_t b, int64_t e) {
    if constexpr (kIs16<T>) {
      for (int64_t i = b; i < e; i += kChunk) unary_chunk16(x + i, out + i, std::min(kChunk, e - i), f);
    } else {
      for (int64_t i = b; i < e; ++i) out[i] = f(x[i]);
    }
  });
}
// out = g * d(s) (elementwise::unary_grad), s the saved input or output (the row's `reads`)
template <class T, class D>
void unary_grad_loop(const UnaryArgs& a, D d) {
  const T* s = static_cast<const T*>(a.s);
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  parallel_for(0, a.n, 16384, [&](int64_t b, int64_t e) {
    if constexpr (kIs16<T>) {
      for (int64_t i = b; i < e; i += kChunk) unary_grad_chunk16(s + i, g + i, out + i, std::min(kChunk, e - i), d);
    } else {
      for (int64_t i = b; i < e; ++i) out[i] = elementwise::unary_grad(d, g[i], s[i]);
    }
  });
}

// ReLU on 16-bit storage only selects: relu(x) is x or +0, its gradient g where y > 0, else
// +0. On finite values that is a choice between bit patterns, made here without converting
// anything (a sign test as an arithmetic shift or a signed compare of the bits, which
// vectorises 16 lanes to an AVX2 register; written for 32 lanes of AVX-512 where the build
// has it). A chunk holding an inf or NaN takes the float32 path (NaNs keep its payload
// rules), so the result is bitwise the float32 path's everywhere.
template <class T>
void relu16(const UnaryArgs& a) {
  const T* const x = static_cast<const T*>(a.backward ? a.s : a.x);  // the backward reads the output y
  const T* const g = static_cast<const T*>(a.g);
  T* const out = static_cast<T*>(a.out);
  const bool backward = a.backward;
  parallel_for(0, a.n, 16384, [x, g, out, backward](int64_t b, int64_t e) {
#if defined(KILN_SIMD_BF16_ROWS)
    // 32 lanes at a time in a 512-bit register; a group holding an inf or NaN takes the
    // float32 path on its own
    const __m512i inf = _mm512_set1_epi16(int16_t(kInfBits16<T>)), abs_bits = _mm512_set1_epi16(0x7fff);
    for (int64_t i = b; i < e; i += 32) {
      const int64_t m = std::min<int64_t>(32, e - i);
      const __mmask32 lanes = m == 32 ? ~__mmask32(0) : __mmask32((1u << m) - 1);
      const __m512i xv = _mm512_maskz_loadu_epi16(lanes, x + i);
      if (!backward) {
        if (_mm512_cmpge_epu16_mask(_mm512_and_si512(xv, abs_bits), inf)) {
          unary_chunk16(x + i, out + i, m, elementwise::ReluF<float>{});
          continue;
        }
        _mm512_mask_storeu_epi16(out + i, lanes, _mm512_andnot_si512(_mm512_srai_epi16(xv, 15), xv));
      } else {
        const __m512i gv = _mm512_maskz_loadu_epi16(lanes, g + i);
        if (_mm512_cmpge_epu16_mask(_mm512_and_si512(xv, abs_bits), inf) |
            _mm512_cmpge_epu16_mask(_mm512_and_si512(gv, abs_bits), inf)) {
          unary_grad_chunk16(x + i, g + i, out + i, m, elementwise::ReluD<float>{});
          continue;
        }
        const __mmask32 pos = _mm512_cmpgt_epi16_mask(xv, _mm512_setzero_si512());
        _mm512_mask_storeu_epi16(out + i, lanes, _mm512_maskz_mov_epi16(pos, gv));
      }
    }
#else
    for (int64_t i = b; i < e; i += kChunk) {
      const int64_t m = std::min(kChunk, e - i);
      const T* xc = x + i;
      T* oc = out + i;
      if (!backward) {
        if (!all_finite16(xc, m)) {
          unary_chunk16(xc, oc, m, elementwise::ReluF<float>{});
          continue;
        }
        for (int64_t j = 0; j < m; ++j)  // x < 0 or -0: +0; else x
          oc[j].bits = uint16_t(xc[j].bits & ~uint16_t(int16_t(xc[j].bits) >> 15));
      } else {
        const T* gc = g + i;
        if (!all_finite16(xc, m) || !all_finite16(gc, m)) {
          unary_grad_chunk16(xc, gc, oc, m, elementwise::ReluD<float>{});
          continue;
        }
        for (int64_t j = 0; j < m; ++j)  // y > 0: g; else +0
          oc[j].bits = int16_t(xc[j].bits) > 0 ? gc[j].bits : uint16_t(0);
      }
    }
#endif
  });
}

#if defined(KILN_SIMD_BF16_ROWS)
// GELU, tanh form, on AVX-512: a GPT's MLP runs it on four times its width per token,
// forward and backward, and it was 8% of the GPT workload's step. math::gelu_tanh's
// formulas (x / (1 + e^t), t = -2u; its derivative s + 2 x s (1 - s) du with s = 1 / (1 +
// e^t)), with e^t from simd::exp16 (ops/cpu/simd_exp.h: VSCALEFPS in place of the scalar
// version's range selects). Every storage dtype
// but float64 runs this one routine (16-bit values widened, and rounded as Tensor::to
// does), so a 16-bit result is the float32 result rounded.
template <class T>
inline __m512 load_lanes(const T* p, __mmask16 m) {
  if constexpr (std::is_same_v<T, float>) return _mm512_maskz_loadu_ps(m, p);
  else if constexpr (std::is_same_v<T, BFloat16>) return simd::floats_from_bf16x16(_mm256_maskz_loadu_epi16(m, p));
  else return simd::floats_from_half16(_mm256_maskz_loadu_epi16(m, p));
}
template <class T>
inline void store_lanes(T* p, __mmask16 m, __m512 v) {
  if constexpr (std::is_same_v<T, float>) _mm512_mask_storeu_ps(p, m, v);
  else if constexpr (std::is_same_v<T, BFloat16>) _mm256_mask_storeu_epi16(p, m, simd::bf16x16_from_floats(v));
  else _mm256_mask_storeu_epi16(p, m, simd::half16_from_floats(v));
}

template <class T>
void gelu_tanh_avx512(const UnaryArgs& a) {
  const T* const x = static_cast<const T*>(a.backward ? a.s : a.x);
  const T* const g = static_cast<const T*>(a.g);
  T* const out = static_cast<T*>(a.out);
  const bool backward = a.backward;
  parallel_for(0, a.n, 16384, [x, g, out, backward](int64_t b, int64_t e) {
    const __m512 c = _mm512_set1_ps(0.79788456080286535588f), k = _mm512_set1_ps(0.044715f);
    const __m512 k3 = _mm512_set1_ps(3 * 0.044715f), one = _mm512_set1_ps(1.f), two = _mm512_set1_ps(2.f);
    for (int64_t i = b; i < e; i += 16) {
      const __mmask16 m = simd::lanes16(e - i);
      const __m512 v = load_lanes(x + i, m), v2 = _mm512_mul_ps(v, v);
      const __m512 u = _mm512_mul_ps(c, _mm512_fmadd_ps(_mm512_mul_ps(k, v2), v, v));  // c (x + k x^3)
      const __m512 z = simd::exp16(_mm512_mul_ps(_mm512_set1_ps(-2.f), u));
      if (!backward) {
        store_lanes(out + i, m, _mm512_div_ps(v, _mm512_add_ps(one, z)));
      } else {
        const __m512 sg = _mm512_div_ps(one, _mm512_add_ps(one, z));
        const __m512 du = _mm512_mul_ps(c, _mm512_fmadd_ps(k3, v2, one));
        const __m512 d = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(two, v), _mm512_mul_ps(sg, _mm512_sub_ps(one, sg))),
                                         du, sg);
        store_lanes(out + i, m, _mm512_mul_ps(load_lanes(g + i, m), d));
      }
    }
  });
}
#endif

// The switch over the unary rows of ops/elementwise_ops.def, forward or backward, for
// storage T (the functors run in float32 for 16-bit T).
template <class T>
void unary_typed(Op op, const UnaryArgs& a) {
  using namespace elementwise;
  using C = std::conditional_t<kIs16<T>, float, T>;
  const C p0 = C(a.p0), p1 = C(a.p1);
  if constexpr (kIs16<T>)
    if (op == Op::relu) return relu16<T>(a);
#if defined(KILN_SIMD_BF16_ROWS)
  if constexpr (kIs16<T> || std::is_same_v<T, float>)
    if (op == Op::gelu_tanh) return gelu_tanh_avx512<T>(a);
#endif
  switch (op) {
#define KILN_UNARY(name, Fn, reads, api)                                                 \
  case Op::name:                                                                        \
    if (a.backward) return unary_grad_loop<T>(a, make_functor<Fn##D<C>>(p0, p1)); \
    return unary_loop<T>(a, make_functor<Fn##F<C>>(p0, p1));
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
    default: break;
  }
  KILN_FAIL(op_name(op), ": no CPU unary ", a.backward ? "backward" : "forward", " kernel");
}

// Integer inputs: the forward of the rows whose api is `any`.
#define KILN_UNARY_INT_float(name, Fn)
#define KILN_UNARY_INT_own(name, Fn)
#define KILN_UNARY_INT_any(name, Fn) \
  case Op::name: return unary_loop<T>(a, elementwise::Fn##F<T>{});
template <class T>
void unary_int(Op op, const UnaryArgs& a) {
  switch (op) {
#define KILN_UNARY(name, Fn, reads, api) KILN_UNARY_INT_##api(name, Fn)
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
    default: KILN_FAIL(op_name(op), ": not supported for integer tensors");
  }
}

void unary_cpu(Op op, DType dt, const UnaryArgs& a) {
  if (!is_floating(dt)) {
    KILN_CHECK(!a.backward, op_name(op), ": no backward for integer tensors");
    KILN_DISPATCH_NUMERIC(dt, op_name(op), [&]<class T>() { unary_int<T>(op, a); });
    return;
  }
  if (dt == DType::bfloat16) return unary_typed<BFloat16>(op, a);
  if (dt == DType::float16) return unary_typed<Half>(op, a);
  KILN_DISPATCH_FLOATING(dt, op_name(op), [&]<class T>() { unary_typed<T>(op, a); });
}

void where_cpu(DType dt, const EwArgs& args) {
  KILN_DISPATCH_ALL(dt, "where", [&]<class T>() {
    using S = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;
    S* out = static_cast<S*>(args.ptr[0]);
    const uint8_t* c = static_cast<const uint8_t*>(args.ptr[1]);
    const S* a = static_cast<const S*>(args.ptr[2]);
    const S* b = static_cast<const S*>(args.ptr[3]);
    for_each_row_args<4>(args, [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& s) {
      for (int64_t i = 0; i < n; ++i)
        out[off[0] + i * s[0]] = c[off[1] + i * s[1]] ? a[off[2] + i * s[2]] : b[off[3] + i * s[3]];
    });
  });
}

}  // namespace

void register_cpu_elementwise() {
#define KILN_UNARY(name, ...) register_kernel(Op::name, DeviceType::CPU, &unary_cpu);
#define KILN_BINARY(name, ...) register_kernel(Op::name, DeviceType::CPU, &binary_cpu);
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
#undef KILN_BINARY
  register_kernel(Op::where, DeviceType::CPU, &where_cpu);
  register_kernel(Op::masked_fill, DeviceType::CPU, &where_cpu);
}

}  // namespace kiln
