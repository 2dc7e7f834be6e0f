// CPU kernels of the norm op family (batch norm, layer norm: fused forward and backward)
// and their registration in the dispatch table. Row sums use 16 independent lanes (vectors
// of GCC's vector extension, see Lanes; the order depends only on the length, so results
// do not change with alignment or thread count; batch norm's channels sum blocks of rows
// in 64 lanes, see rows_sum), their lanes combined in vector registers (combine_lanes);
// per-channel / per-column totals use double. GCC 12's AVX-512
// intrinsics start some results from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports once inlined (GCC bug 105593): store_row's bf16 rounding.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include "kiln/core/copy.h"
#include "kiln/core/half.h"
#include "kiln/core/parallel.h"
#include "kiln/core/simd_half.h"
#include "kiln/core/simd_width.h"
#include "kiln/ops/kernels/norm.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

namespace {

/// acc[0] + ... + acc[L-1] combined pairwise (acc[j] += acc[j + w] for w = L/2, ..., 1).
/// With AVX-512 the lanes are combined as whole vectors and then inside one vector, the same
/// additions in the same order (float addition commutes), where a loop over the array made
/// partial-width reloads of the vectors just stored: stalls as long as the row's own sum.
template <class T, int L>
inline T combine_lanes(T* acc) {
#if defined(__AVX512F__)
  auto tree = [acc]<class V, int kN>() {  // the whole vectors, pairwise
    V v[kN];
    for (int k = 0; k < kN; ++k) std::memcpy(&v[k], acc + k * (64 / int(sizeof(T))), 64);
    for (int n = kN; n > 1; n /= 2)
      for (int k = 0; k < n / 2; ++k) v[k] = v[k] + v[k + n / 2];
    return v[0];
  };
  if constexpr (std::is_same_v<T, float> && L % 16 == 0)
    return _mm512_reduce_add_ps(tree.template operator()<__m512, L / 16>());
  else if constexpr (std::is_same_v<T, double> && L % 8 == 0)
    return _mm512_reduce_add_pd(tree.template operator()<__m512d, L / 8>());
#endif
  for (int w = L / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

// Sums in lanes, with the lane arithmetic written out: a summand f reads its operands
// through the load it is given, ld(p) for p[i], which is a vector of the 16 values at p + i
// (Vec16 below: one AVX-512 register for float, two AVX2 ones) in the main loops and the
// value p[i] in the tails. (Loops over arrays of 16 lanes relied on the compiler's SLP
// vectoriser, which this build turns off for GCC 12, and ran one scalar add at a time.)
// A load also takes bf16 rows (batch norm reads them in place) and widens them: the bits
// shifted up, as BFloat16's conversion does.

using simd::kRegBytes;

/// 16 lanes of T as vectors of GCC's vector extension no wider than the target's registers,
/// with elementwise +, - and * (a scalar operand applies to every lane). One 64-byte vector
/// type would do the same arithmetic, but GCC keeps a vector wider than the widest register
/// in memory and splits every operation into stores and narrower reloads: with AVX2 (and
/// for double with AVX-512) the norms' sums ran at a fraction of their speed (layer norm
/// 2048 x 768 float32 on a Zen 3, 2 threads: forward 1.51-1.56 -> 0.35 ms).
template <class T>
struct Vec16 {
  static constexpr int kParts = 16 * int(sizeof(T)) / kRegBytes;
  typedef T R __attribute__((vector_size(kRegBytes)));
  R p[kParts];

  template <class X>
  static auto part(const X& x, int k) {
    if constexpr (std::is_same_v<X, Vec16>) return x.p[k];
    else return T(x);
  }
  template <class A, class B, class Op>
  static Vec16 map(const A& a, const B& b, Op op) {
    Vec16 r;
    for (int k = 0; k < kParts; ++k) r.p[k] = op(part(a, k), part(b, k));
    return r;
  }
  template <class A, class B>
  static constexpr bool kOperands = std::is_same_v<A, Vec16> || std::is_same_v<B, Vec16>;
  template <class A, class B>
    requires kOperands<A, B>
  friend Vec16 operator+(const A& a, const B& b) {
    return map(a, b, [](auto x, auto y) { return x + y; });
  }
  template <class A, class B>
    requires kOperands<A, B>
  friend Vec16 operator-(const A& a, const B& b) {
    return map(a, b, [](auto x, auto y) { return x - y; });
  }
  template <class A, class B>
    requires kOperands<A, B>
  friend Vec16 operator*(const A& a, const B& b) {
    return map(a, b, [](auto x, auto y) { return x * y; });
  }
  Vec16& operator+=(const Vec16& b) { return *this = *this + b; }
};

template <class T>
struct Lanes {
  using V = Vec16<T>;
  static auto vector_at(int64_t i) {
    return [i]<class P>(const P* p) {
      V v;
      if constexpr (std::is_same_v<P, T>) {  // a register at a time (one 64-byte copy went
        for (int k = 0; k < V::kParts; ++k)  // through the stack in 16-byte pieces)
          std::memcpy(&v.p[k], p + i + k * (kRegBytes / int(sizeof(T))), kRegBytes);
      } else {
        static_assert(std::is_same_v<P, BFloat16> && std::is_same_v<T, float>);
#if defined(__AVX512F__)  // one VPMOVZXWD (GCC splits __builtin_convertvector's into four)
        const __m512 w = simd::floats_from_bf16x16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        std::memcpy(&v, &w, sizeof(V));
#else
        typedef uint16_t H __attribute__((vector_size(kRegBytes / 2)));
        typedef uint32_t W __attribute__((vector_size(kRegBytes)));
        constexpr int kPer = kRegBytes / 4;
        for (int k = 0; k < V::kParts; ++k) {
          H h;
          std::memcpy(&h, p + i + k * kPer, sizeof(H));
          const W w = __builtin_convertvector(h, W) << 16;
          std::memcpy(&v.p[k], &w, sizeof(W));
        }
#endif
      }
      return v;
    };
  }
  static auto value_at(int64_t i) {
    return [i](const auto* p) { return T(p[i]); };
  }
};

// sum_{i < n} f(ld) in 16 lanes, combined pairwise.
template <class T, class F>
inline T lane_sum(int64_t n, const F& f) {
  typename Lanes<T>::V acc = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc += f(Lanes<T>::vector_at(i));
  T tail = T(0);
  for (; i < n; ++i) tail += f(Lanes<T>::value_at(i));
  T lanes[16];
  std::memcpy(lanes, &acc, sizeof(acc));
  return combine_lanes<T, 16>(lanes) + tail;
}

// ---------------------------------------------------------------- batch norm

// A batch-norm channel is N rows of S values (196-784 for a small CNN). Summed a row at a
// time, each row waited on one chain of dependent adds and then combined its lanes; the
// channel sums instead run kRowLanes lanes (four float32 vectors: four chains in flight)
// over a block of rows of about kRowBlock values, combine the lanes pairwise into a double
// total once per block, block after block: the order depends only on N and S.
constexpr int kRowLanes = 64;
constexpr int64_t kRowBlock = 4096;

/// sum over rows n < N and i < S of f(row(n), ld) (see above; lane j of the 64 sums the
/// values at i = j mod 64, and the 16-value steps past the last 64 add to lanes 0-15).
template <class T, class R, class F>
inline double rows_sum(int64_t N, int64_t S, const R& row, const F& f) {
  using L = Lanes<T>;
  const int64_t block = std::max<int64_t>(1, kRowBlock / std::max<int64_t>(S, 1));
  double total = 0;
  for (int64_t n0 = 0; n0 < N; n0 += block) {
    typename L::V a[kRowLanes / 16] = {};
    T tail = T(0);
    for (int64_t n = n0; n < std::min(N, n0 + block); ++n) {
      const auto r = row(n);
      int64_t i = 0;
      for (; i + kRowLanes <= S; i += kRowLanes)
        for (int k = 0; k < kRowLanes / 16; ++k) a[k] += f(r, L::vector_at(i + 16 * k));
      for (; i + 16 <= S; i += 16) a[0] += f(r, L::vector_at(i));
      for (; i < S; ++i) tail += f(r, L::value_at(i));
    }
    T lanes[kRowLanes];
    std::memcpy(lanes, a, sizeof(a));
    total += double(combine_lanes<T, kRowLanes>(lanes) + tail);
  }
  return total;
}

/// rows_sum of f and of g together, in one pass over their rows.
template <class T, class R, class F, class G>
inline std::pair<double, double> rows_sum2(int64_t N, int64_t S, const R& row, const F& f, const G& g) {
  using L = Lanes<T>;
  const int64_t block = std::max<int64_t>(1, kRowBlock / std::max<int64_t>(S, 1));
  double ta = 0, tb = 0;
  for (int64_t n0 = 0; n0 < N; n0 += block) {
    typename L::V a[kRowLanes / 16] = {}, b[kRowLanes / 16] = {};
    T taila = T(0), tailb = T(0);
    for (int64_t n = n0; n < std::min(N, n0 + block); ++n) {
      const auto r = row(n);
      int64_t i = 0;
      for (; i + kRowLanes <= S; i += kRowLanes)
        for (int k = 0; k < kRowLanes / 16; ++k) {
          const auto ld = L::vector_at(i + 16 * k);
          a[k] += f(r, ld), b[k] += g(r, ld);
        }
      for (; i + 16 <= S; i += 16) {
        const auto ld = L::vector_at(i);
        a[0] += f(r, ld), b[0] += g(r, ld);
      }
      for (; i < S; ++i) taila += f(r, L::value_at(i)), tailb += g(r, L::value_at(i));
    }
    T la[kRowLanes], lb[kRowLanes];
    std::memcpy(la, a, sizeof(a));
    std::memcpy(lb, b, sizeof(b));
    ta += double(combine_lanes<T, kRowLanes>(la) + taila);
    tb += double(combine_lanes<T, kRowLanes>(lb) + tailb);
  }
  return {ta, tb};
}

// X is how the activations x, out, dout and dx are stored: T, or a 16-bit float (the op
// keeps a 16-bit input 16-bit on the CPU; ops/kernels/norm.h), computed on in T = float a
// row at a time: rows are widened into a per-thread buffer (the same values as converting
// the whole tensor first) and results rounded as they are stored.

/// d[i] = f(ld) for i in [0, n) (ld as in lane_sum), stored as X: directly, or (16-bit X)
/// rounded as Tensor::to rounds. With AVX-512, 16 values at a time are computed in a
/// register and rounded straight into d (the last n % 16 through a masked store);
/// elsewhere through a float32 chunk and the vectorised conversion.
template <class T, class X, class F>
inline void store_row(X* d, int64_t n, const F& f) {
  using L = Lanes<T>;
  if constexpr (std::is_same_v<X, T>) {
    for (int64_t i = 0; i < n; ++i) d[i] = f(L::value_at(i));
  } else {
    int64_t i0 = 0;
#if defined(KILN_SIMD_BF16_ROWS)
    if constexpr (std::is_same_v<T, float>) {
      auto round16 = [](__m512 z) {
        if constexpr (std::is_same_v<X, BFloat16>) return simd::bf16x16_from_floats(z);
        else return simd::half16_from_floats(z);
      };
      for (; i0 + 16 <= n; i0 += 16) {
        const auto v = f(L::vector_at(i0));
        __m512 z;
        std::memcpy(&z, &v, sizeof(z));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i0), round16(z));
      }
      if (i0 < n) {  // the last n % 16 through a masked store
        alignas(64) float t[16];
        for (int64_t i = 0; i < n - i0; ++i) t[i] = f(L::value_at(i0 + i));
        const __mmask16 k = simd::lanes16(n - i0);
        _mm256_mask_storeu_epi16(d + i0, k, round16(_mm512_maskz_loadu_ps(k, t)));
      }
      return;
    }
#endif
    constexpr int64_t kChunk = 512;
    alignas(64) float buf[kChunk];
    for (; i0 < n; i0 += kChunk) {
      const int64_t m = std::min(kChunk, n - i0);
      for (int64_t i = 0; i < m; ++i) buf[i] = f(L::value_at(i0 + i));
      convert_floats(buf, d + i0, m);
    }
  }
}

/// One channel's rows (n, c) of a (N, C, S) tensor for the passes over it, read as T
/// through T(row[i]). bf16 rows are read where they lie (a bf16 value widens by a shift,
/// which vectorises inside the loops); a float16 channel of at most kChannelFloats values
/// is widened once, at construction, into a per-thread buffer (batch norm reads each row
/// two or three times), a larger one, or with `once` false (a single pass), a row at a
/// time as widened() gives it. The same floats every way.
template <class T, class X>
class ChannelRows {
 public:
  static constexpr bool kDirect = std::is_same_v<X, T> || std::is_same_v<X, BFloat16>;
  using Row = std::conditional_t<kDirect, const X*, const T*>;
  static constexpr int64_t kChannelFloats = 262144;  // 1 MiB of float32, an L2's share
  ChannelRows(const X* x, int64_t N, int64_t C, int64_t S, int64_t c, std::vector<T>& whole, std::vector<T>& row,
              bool once = true)
      : x_(x), C_(C), S_(S), c_(c), row_(row) {
    if constexpr (!kDirect) {
      if (once && N * S <= kChannelFloats) {
        if (int64_t(whole.size()) < N * S) whole.resize(size_t(N * S));
        for (int64_t n = 0; n < N; ++n) convert_floats(x + (n * C + c) * S, whole.data() + n * S, S);
        whole_ = whole.data();
      }
    }
  }
  Row operator()(int64_t n) const {
    if constexpr (kDirect) return x_ + (n * C_ + c_) * S_;
    else return whole_ ? whole_ + n * S_ : widened<T>(x_ + (n * C_ + c_) * S_, S_, row_);
  }

 private:
  const X* x_;
  int64_t C_, S_, c_;
  std::vector<T>& row_;
  const T* whole_ = nullptr;
};

template <class T, class X = T>
void bn_forward_train(const X* x, const T* w, const T* b, X* out, T* smean, T* sinv, T* rmean, T* rvar,
                      int64_t N, int64_t C, int64_t S, double momentum, double eps) {
  const int64_t M = N * S;
  parallel_for(0, C, 1, [&](int64_t c0, int64_t c1) {
    thread_local std::vector<T> xb, xw;
    for (int64_t c = c0; c < c1; ++c) {
      const ChannelRows<T, X> rows(x, N, C, S, c, xw, xb);
      const double acc = rows_sum<T>(N, S, rows, [](const auto* xr, auto ld) { return ld(xr); });
      const double mean = M > 0 ? acc / double(M) : 0.0;
      const T mt = T(mean);
      const double sq = rows_sum<T>(N, S, rows, [mt](const auto* xr, auto ld) {
        const auto d = ld(xr) - mt;
        return d * d;
      });
      const double var = M > 0 ? sq / double(M) : 0.0;
      const double inv = 1.0 / std::sqrt(var + eps);
      smean[c] = T(mean);
      sinv[c] = T(inv);
      if (rmean) rmean[c] = T((1.0 - momentum) * double(rmean[c]) + momentum * mean);
      if (rvar) {
        const double unbiased = M > 1 ? sq / double(M - 1) : var;
        rvar[c] = T((1.0 - momentum) * double(rvar[c]) + momentum * unbiased);
      }
      const double wc = w ? double(w[c]) : 1.0, bc = b ? double(b[c]) : 0.0;
      const T a = T(wc * inv), sh = T(bc - mean * wc * inv);
      for (int64_t n = 0; n < N; ++n) {
        const auto xr = rows(n);
        store_row<T>(out + (n * C + c) * S, S, [&](auto ld) { return ld(xr) * a + sh; });
      }
    }
  });
}

template <class T, class X = T>
void bn_forward_eval(const X* x, const T* w, const T* b, const T* rmean, const T* rvar, X* out, T* smean,
                     T* sinv, int64_t N, int64_t C, int64_t S, double eps) {
  for (int64_t c = 0; c < C; ++c) {
    smean[c] = rmean[c];
    sinv[c] = T(1.0 / std::sqrt(double(rvar[c]) + eps));
  }
  // parallel over (n, c) rows
  parallel_for(0, N * C, std::max<int64_t>(1, 32768 / std::max<int64_t>(S, 1)), [&](int64_t r0, int64_t r1) {
    thread_local std::vector<T> xb;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % C;
      const double wc = w ? double(w[c]) : 1.0, bc = b ? double(b[c]) : 0.0;
      const T a = T(wc * double(sinv[c])), sh = T(bc - double(smean[c]) * wc * double(sinv[c]));
      const T* xr = widened<T>(x + r * S, S, xb);
      store_row<T>(out + r * S, S, [&](auto ld) { return ld(xr) * a + sh; });
    }
  });
}

template <class T, class X = T>
void bn_backward(const X* g, const X* x, const T* w, const T* smean, const T* sinv, X* dx, T* dw, T* db,
                 int64_t N, int64_t C, int64_t S, bool training) {
  const int64_t M = N * S;
  parallel_for(0, C, 1, [&](int64_t c0, int64_t c1) {
    thread_local std::vector<T> xb, gb, xw, gw;
    for (int64_t c = c0; c < c1; ++c) {
      const T mean = smean[c];
      const double inv = double(sinv[c]);
      const bool again = dx && training && M > 0;  // a second pass reads x and g
      const ChannelRows<T, X> grows(g, N, C, S, c, gw, gb, again), xrows(x, N, C, S, c, xw, xb, again);
      // sum(g), sum(g (x - mean))
      const auto [sum_g, sum_gx] = rows_sum2<T>(
          N, S, [&](int64_t n) { return std::make_pair(grows(n), xrows(n)); },
          [](const auto& r, auto ld) { return ld(r.first); },
          [mean](const auto& r, auto ld) { return ld(r.first) * (ld(r.second) - mean); });
      if (dw) dw[c] = T(sum_gx * inv);
      if (db) db[c] = T(sum_g);
      if (!dx) continue;
      const double wc = w ? double(w[c]) : 1.0;
      if (training && M > 0) {
        // dx = w inv (g - sum_g/M - (x - mean) inv^2 sum_gx / M)
        const T k = T(wc * inv), mg = T(sum_g / double(M)), kx = T(inv * inv * sum_gx / double(M));
        for (int64_t n = 0; n < N; ++n) {
          const auto gr = grows(n);
          const auto xr = xrows(n);
          store_row<T>(dx + (n * C + c) * S, S,
                       [&](auto ld) { return k * (ld(gr) - mg - (ld(xr) - mean) * kx); });
        }
      } else {
        const T k = T(wc * inv);
        for (int64_t n = 0; n < N; ++n) {
          const T* gr = widened<T>(g + (n * C + c) * S, S, gb);
          store_row<T>(dx + (n * C + c) * S, S, [&](auto ld) { return k * ld(gr); });
        }
      }
    }
  });
}

void batch_norm_forward_train(DType dt, const void* x, const void* w, const void* b, void* out, void* smean,
                              void* sinv, void* rmean, void* rvar, int64_t N, int64_t C, int64_t S,
                              double momentum, double eps) {
  auto run16 = [&]<class X>() {
    bn_forward_train<float, X>(static_cast<const X*>(x), static_cast<const float*>(w), static_cast<const float*>(b),
                               static_cast<X*>(out), static_cast<float*>(smean), static_cast<float*>(sinv),
                               static_cast<float*>(rmean), static_cast<float*>(rvar), N, C, S, momentum, eps);
  };
  if (dt == DType::bfloat16) return run16.template operator()<BFloat16>();
  if (dt == DType::float16) return run16.template operator()<Half>();
  KILN_DISPATCH_FLOATING(dt, "batch_norm", [&]<class T>() {
    bn_forward_train<T>(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
                        static_cast<T*>(out), static_cast<T*>(smean), static_cast<T*>(sinv), static_cast<T*>(rmean),
                        static_cast<T*>(rvar), N, C, S, momentum, eps);
  });
}

void batch_norm_forward_eval(DType dt, const void* x, const void* w, const void* b, const void* rmean,
                             const void* rvar, void* out, void* smean, void* sinv, int64_t N, int64_t C, int64_t S,
                             double eps) {
  auto run16 = [&]<class X>() {
    bn_forward_eval<float, X>(static_cast<const X*>(x), static_cast<const float*>(w), static_cast<const float*>(b),
                              static_cast<const float*>(rmean), static_cast<const float*>(rvar),
                              static_cast<X*>(out), static_cast<float*>(smean), static_cast<float*>(sinv), N, C, S,
                              eps);
  };
  if (dt == DType::bfloat16) return run16.template operator()<BFloat16>();
  if (dt == DType::float16) return run16.template operator()<Half>();
  KILN_DISPATCH_FLOATING(dt, "batch_norm", [&]<class T>() {
    bn_forward_eval<T>(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
                       static_cast<const T*>(rmean), static_cast<const T*>(rvar), static_cast<T*>(out),
                       static_cast<T*>(smean), static_cast<T*>(sinv), N, C, S, eps);
  });
}

void batch_norm_backward(DType dt, const void* g, const void* x, const void* w, const void* smean,
                         const void* sinv, void* dx, void* dw, void* db, int64_t N, int64_t C, int64_t S,
                         bool training) {
  auto run16 = [&]<class X>() {
    bn_backward<float, X>(static_cast<const X*>(g), static_cast<const X*>(x), static_cast<const float*>(w),
                          static_cast<const float*>(smean), static_cast<const float*>(sinv), static_cast<X*>(dx),
                          static_cast<float*>(dw), static_cast<float*>(db), N, C, S, training);
  };
  if (dt == DType::bfloat16) return run16.template operator()<BFloat16>();
  if (dt == DType::float16) return run16.template operator()<Half>();
  KILN_DISPATCH_FLOATING(dt, "batch_norm_backward", [&]<class T>() {
    bn_backward<T>(static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const T*>(w),
                   static_cast<const T*>(smean), static_cast<const T*>(sinv), static_cast<T*>(dx), static_cast<T*>(dw),
                   static_cast<T*>(db), N, C, S, training);
  });
}

// ---------------------------------------------------------------- layer norm

template <class T>
void ln_forward(const T* x, const T* w, const T* b, T* out, T* smean, T* srstd, int64_t R, int64_t D, double eps) {
  parallel_for(0, R, std::max<int64_t>(1, 16384 / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * D;
      T* o = out + r * D;
      const double mean = D > 0 ? double(lane_sum<T>(D, [&](auto ld) { return ld(xr); })) / double(D) : 0.0;
      const T mt = T(mean);
      const double var = D > 0 ? double(lane_sum<T>(D, [&](auto ld) {
                                   const auto d = ld(xr) - mt;
                                   return d * d;
                                 })) / double(D)
                               : 0.0;
      const T rstd = T(1.0 / std::sqrt(var + eps));
      smean[r] = mt;
      srstd[r] = rstd;
      if (w && b) {
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] - mt) * rstd * w[i] + b[i];
      } else if (w) {
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] - mt) * rstd * w[i];
      } else if (b) {
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] - mt) * rstd + b[i];
      } else {
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] - mt) * rstd;
      }
    }
  });
}

template <class T>
void ln_backward(const T* g, const T* x, const T* w, const T* smean, const T* srstd, T* dx, T* dw, T* db, int64_t R,
                 int64_t D) {
  if (dx) {
    parallel_for(0, R, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<T> gw(size_t(w ? D : 0));
      for (int64_t r = r0; r < r1; ++r) {
        const T* gr = g + r * D;
        const T* xr = x + r * D;
        T* d = dx + r * D;
        const T mean = smean[r], rstd = srstd[r];
        const T* gwp = gr;
        if (w) {
          for (int64_t i = 0; i < D; ++i) gw[i] = gr[i] * w[i];
          gwp = gw.data();
        }
        // mean(gw) and mean(gw xhat)
        const T m1 = T(double(lane_sum<T>(D, [&](auto ld) { return ld(gwp); })) / double(D));
        const T m2 = T(double(lane_sum<T>(D, [&](auto ld) { return ld(gwp) * (ld(xr) - mean); })) * double(rstd) /
                       double(D));
        for (int64_t i = 0; i < D; ++i) d[i] = rstd * (gwp[i] - m1 - (xr[i] - mean) * rstd * m2);
      }
    });
  }
  if (dw || db) {
    // Deterministic: each task owns a block of columns and walks all rows in order.
    constexpr int64_t kBlock = 64;
    const int64_t nblocks = (D + kBlock - 1) / kBlock;
    parallel_for(0, nblocks, 1, [&](int64_t b0, int64_t b1) {
      std::vector<double> aw(kBlock), ab(kBlock);
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t c0 = blk * kBlock, n = std::min(kBlock, D - c0);
        std::fill(aw.begin(), aw.end(), 0.0);
        std::fill(ab.begin(), ab.end(), 0.0);
        for (int64_t r = 0; r < R; ++r) {
          const T* gr = g + r * D + c0;
          const T* xr = x + r * D + c0;
          const T mean = smean[r], rstd = srstd[r];
          for (int64_t i = 0; i < n; ++i) {
            aw[i] += double(gr[i] * ((xr[i] - mean) * rstd));
            ab[i] += double(gr[i]);
          }
        }
        for (int64_t i = 0; i < n; ++i) {
          if (dw) dw[c0 + i] = T(aw[i]);
          if (db) db[c0 + i] = T(ab[i]);
        }
      }
    });
  }
}

void layer_norm_forward(DType dt, const void* x, const void* w, const void* b, void* out, void* smean, void* srstd,
                        int64_t R, int64_t D, double eps) {
  KILN_DISPATCH_FLOATING(dt, "layer_norm", [&]<class T>() {
    ln_forward<T>(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(out),
                  static_cast<T*>(smean), static_cast<T*>(srstd), R, D, eps);
  });
}

void layer_norm_backward(DType dt, const void* g, const void* x, const void* w, const void* smean,
                         const void* srstd, void* dx, void* dw, void* db, int64_t R, int64_t D) {
  KILN_DISPATCH_FLOATING(dt, "layer_norm_backward", [&]<class T>() {
    ln_backward<T>(static_cast<const T*>(g), static_cast<const T*>(x), static_cast<const T*>(w),
                   static_cast<const T*>(smean), static_cast<const T*>(srstd), static_cast<T*>(dx),
                   static_cast<T*>(dw), static_cast<T*>(db), R, D);
  });
}

const BatchNormKernels kBatchNormCpu{&batch_norm_forward_train, &batch_norm_forward_eval, &batch_norm_backward};
const LayerNormKernels kLayerNormCpu{&layer_norm_forward, &layer_norm_backward};

}  // namespace

void register_cpu_norm() {
  register_kernel(Op::batch_norm, DeviceType::CPU, &kBatchNormCpu);
  register_kernel(Op::layer_norm, DeviceType::CPU, &kLayerNormCpu);
}

}  // namespace kiln
