// CPU kernels of the nn op family (dropout, embedding, fused scaled dot-product attention
// forward/backward) and their registration in the dispatch table. Attention works on
// blocks of rows (flash-attention style, small GEMMs), never a T x T matrix.
// GCC 12 reports false -Wmaybe-uninitialized inside Eigen's AVX-512 paths (-march=native).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"  // same Eigen AVX-512 code at -O1
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include "kiln/core/copy.h"
#include "kiln/core/half.h"
#include "kiln/core/parallel.h"
#include "kiln/core/rng.h"
#include "kiln/core/simd_half.h"
#include "kiln/ops/cpu/sgemm.h"
#include "kiln/ops/cpu/simd_exp.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/kernels/nn.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/nn_math.h"

namespace kiln {

namespace {

// ---------------------------------------------------------------- dropout

// The Philox words of kLanes consecutive blocks, in element order (word j of block
// first + l is w[4 l + j]), so the keep/scale loop below runs vectorised.
constexpr int kLanes = 16;
struct PhiloxLanes {
  uint32_t w[4 * kLanes];
};
inline void philox_lanes(uint64_t first, uint64_t seed, PhiloxLanes& out) {
  for (int l = 0; l < kLanes; ++l) {
    const Philox4 r = philox4x32(first + uint64_t(l), 0, seed);
    for (int j = 0; j < 4; ++j) out.w[4 * l + j] = r.x[j];
  }
}

template <class T>
void dropout_apply_t(const T* in, T* out, int64_t n, float p, T scale, uint64_t seed, uint64_t offset) {
  // Element i uses word i % 4 of Philox block offset + i / 4 (math::dropout_keep).
  constexpr int64_t kChunk = 4 * kLanes;  // elements per batch of blocks
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(0, chunks, 64, [&](int64_t c0, int64_t c1) {
    const float pl = p;  // locals: no aliasing with out[]
    const T sl = scale;
    PhiloxLanes r;
    for (int64_t c = c0; c < c1; ++c) {
      philox_lanes(offset + uint64_t(c * kLanes), seed, r);
      const int64_t i0 = c * kChunk, m = std::min(kChunk, n - i0);
      const T* x = in + i0;
      T* y = out + i0;
      if (m == kChunk) {  // branch-free, vectorised
        for (int64_t e = 0; e < kChunk; ++e) y[e] = x[e] * (math::dropout_keep_word(r.w[e], pl) ? sl : T(0));
      } else {
        for (int64_t e = 0; e < m; ++e) y[e] = x[e] * (math::dropout_keep_word(r.w[e], pl) ? sl : T(0));
      }
    }
  });
}

void dropout_apply(DType dt, const void* in, void* out, int64_t n, float p, double scale, uint64_t seed,
                   uint64_t offset) {
  KILN_DISPATCH_FLOATING(dt, "dropout", [&]<class T>() {
    dropout_apply_t<T>(static_cast<const T*>(in), static_cast<T*>(out), n, p, T(scale), seed, offset);
  });
}

// ---------------------------------------------------------------- embedding

void embedding_forward(size_t es, const int64_t* idx, const void* weight, void* out, int64_t n, int64_t D) {
  const size_t row = size_t(D) * es;
  const char* w = static_cast<const char*>(weight);
  char* o = static_cast<char*>(out);
  parallel_for(0, n, std::max<int64_t>(1, 65536 / std::max<int64_t>(int64_t(row), 1)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::memcpy(o + size_t(i) * row, w + size_t(idx[i]) * row, row);
  });
}

template <class T>
void embedding_backward_t(const int64_t* idx, const T* g, T* dw, int64_t n, int64_t D, int64_t padding_idx) {
  // Each task owns a block of columns and walks the indices in order: deterministic.
  constexpr int64_t kBlock = 64;
  const int64_t nblocks = (D + kBlock - 1) / kBlock;
  parallel_for(0, nblocks, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t c0 = blk * kBlock, m = std::min(kBlock, D - c0);
      for (int64_t i = 0; i < n; ++i) {
        if (idx[i] == padding_idx) continue;
        const T* gr = g + i * D + c0;
        T* d = dw + idx[i] * D + c0;
        for (int64_t c = 0; c < m; ++c) d[c] += gr[c];
      }
    }
  });
}

void embedding_backward(DType dt, const int64_t* idx, const void* g, void* dw, int64_t n, int64_t D,
                        int64_t padding_idx) {
  KILN_DISPATCH_FLOATING(dt, "embedding_backward", [&]<class T>() {
    embedding_backward_t<T>(idx, static_cast<const T*>(g), static_cast<T*>(dw), n, D, padding_idx);
  });
}

// ---------------------------------------------------------------- attention
//
// Flash-attention style on the CPU: the forward's work units are blocks of kRows query
// rows of one batch entry, the backward's whole batch entries (walked in blocks of kRows
// query rows; so a backward with fewer batch entries than threads leaves threads idle); a
// block holds at most kRows x T scores (never a T x T matrix) and turns its products into
// small GEMMs (gemm_cpu, serial inside the unit's thread). Units are fixed by the shapes,
// so results do not depend on the thread count. Operands are addressed through
// AttnLayout, so the heads of a packed qkv tensor are read in place and the gradients
// written in place.

constexpr int64_t kRows = 32;

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Row prefix to run exp over: the seen length ni rounded up to whole 16-lane packets
// (within the n computed columns), so Eigen's vectorised exp has no scalar tail.
inline int64_t exp_width(int64_t ni, int64_t n) { return std::min(n, (ni + 15) / 16 * 16); }

// Number of keys query row i sees: j <= i when causal (top-left aligned, like PyTorch).
inline int64_t keys_seen(int64_t i, int64_t Tk, bool causal) { return causal ? std::min(i + 1, Tk) : Tk; }

/// Batch entries per parallel_for chunk for units of whole batch entries (a backward, or a
/// 16-bit pass that widens an entry at a time): about 32768 multiply-adds per chunk or more.
inline int64_t entry_grain(int64_t Tq, int64_t Tk, int64_t E, int64_t Ev) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(Tq * Tk * (E + Ev), 1));
}

/// Row t of batch entry b of an operand.
template <class T>
inline T* row_of(T* base, const AttnLayout& l, int64_t b, int64_t t) {
  return base + l.offset(b) + t * l.st;
}

template <class T>
void attention_forward_t(const T* q, AttnLayout lq, const T* k, AttnLayout lk, const T* v, AttnLayout lv, T* out,
                         AttnLayout lo, T* lse, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, T scale,
                         bool causal) {
  const int64_t nblk = (Tq + kRows - 1) / kRows;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(kRows * Tk * (E + Ev), 1));
  parallel_for(0, B * nblk, grain, [&](int64_t u0, int64_t u1) {
    RowMat<T> S(kRows, Tk);  // (rows, Tk) scores of one block
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / nblk, i0 = (u % nblk) * kRows, r = std::min(kRows, Tq - i0);
      const int64_t n = keys_seen(i0 + r - 1, Tk, causal);  // keys any row of the block sees
      // S (r, n) = Q_block K^T
      gemm_cpu<T>(false, true, r, n, E, T(1), row_of(q, lq, b, i0), lq.st, row_of(k, lk, b, 0), lk.st, T(0),
                  S.data(), Tk);
      auto Sb = S.topLeftCorner(r, n);
      for (int64_t rr = 0; rr < r; ++rr) {
        const int64_t ni = keys_seen(i0 + rr, Tk, causal);
        auto row = Sb.row(rr);
        const int64_t w = exp_width(ni, n);
        row.head(w) *= scale;
        const T m = row.head(ni).maxCoeff();
        row.head(w).array() = (row.head(w).array() - m).exp();  // masked lanes are zeroed next
        row.tail(n - ni).setZero();
        const T sum = row.head(ni).sum();
        row.head(ni) *= T(1) / sum;  // probabilities
        lse[b * Tq + i0 + rr] = m + std::log(sum);
      }
      // O_block (r, Ev) = P V
      gemm_cpu<T>(false, false, r, Ev, n, T(1), S.data(), Tk, row_of(v, lv, b, 0), lv.st, T(0),
                  row_of(out, lo, b, i0), lo.st);
    }
  });
}

template <class T>
void attention_backward_t(const T* q, AttnLayout lq, const T* k, AttnLayout lk, const T* v, AttnLayout lv,
                          const T* out, AttnLayout lo, const T* lse, const T* dout, AttnLayout lg, T* dq,
                          AttnLayout ldq, T* dk, AttnLayout ldk, T* dv, AttnLayout ldv, int64_t B, int64_t Tq,
                          int64_t Tk, int64_t E, int64_t Ev, T scale, bool causal) {
  // With s_ij = scale q_i . k_j and p_ij = exp(s_ij - lse_i) (0 where masked), Dsum_i = dout_i . out_i:
  //   ds_ij = p_ij (dout_i . v_j - Dsum_i), dq_i = scale sum_j ds_ij k_j,
  //   dv_j = sum_i p_ij dout_i, dk_j = scale sum_i ds_ij q_i.
  // One pass per batch entry over blocks of query rows: each block recomputes its P and
  // dS once (kRows x the keys it sees) and adds its share to dk and dv, which the unit owns
  // (five GEMMs per block; a pass for dq and another for dk, dv would recompute P and dP).
  // Units are whole batch entries, so the order of the sums does not depend on the threads.
  const int64_t grain = entry_grain(Tq, Tk, E, Ev);
  parallel_for(0, B, grain, [&](int64_t b0, int64_t b1) {
    RowMat<T> P(kRows, Tk), dS(kRows, Tk);
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t j = 0; j < Tk; ++j) {  // dk and dv accumulate over the query blocks
        if (dk) std::fill_n(row_of(dk, ldk, b, j), E, T(0));
        if (dv) std::fill_n(row_of(dv, ldv, b, j), Ev, T(0));
      }
      const T* K = row_of(k, lk, b, 0);
      const T* V = row_of(v, lv, b, 0);
      for (int64_t i0 = 0; i0 < Tq; i0 += kRows) {
        const int64_t r = std::min(kRows, Tq - i0), n = keys_seen(i0 + r - 1, Tk, causal);
        const T* Q = row_of(q, lq, b, i0);
        const T* G = row_of(dout, lg, b, i0);
        gemm_cpu<T>(false, true, r, n, E, T(1), Q, lq.st, K, lk.st, T(0), P.data(), Tk);             // Q K^T
        gemm_cpu<T>(false, true, r, n, Ev, T(1), G, lg.st, V, lv.st, T(0), dS.data(), Tk);            // dP = G V^T
        for (int64_t rr = 0; rr < r; ++rr) {
          const int64_t i = i0 + rr, ni = keys_seen(i, Tk, causal), w = exp_width(ni, n);
          Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>> o(row_of(out, lo, b, i), Ev), g(G + rr * lg.st, Ev);
          const T dsum = o.dot(g);
          auto p = P.row(rr).head(w).array();
          p = (p * scale - lse[b * Tq + i]).exp();
          P.row(rr).segment(ni, n - ni).setZero();  // masked keys
          dS.row(rr).segment(ni, n - ni).setZero();
          dS.row(rr).head(ni).array() = P.row(rr).head(ni).array() * (dS.row(rr).head(ni).array() - dsum);
        }
        if (dq)  // dQ_block (r, E) = scale dS K
          gemm_cpu<T>(false, false, r, E, n, scale, dS.data(), Tk, K, lk.st, T(0), row_of(dq, ldq, b, i0), ldq.st);
        if (dk)  // dK[0, n) (n, E) += scale dS^T Q_block
          gemm_cpu<T>(true, false, n, E, r, scale, dS.data(), Tk, Q, lq.st, T(1), row_of(dk, ldk, b, 0), ldk.st);
        if (dv)  // dV[0, n) (n, Ev) += P^T dout_block
          gemm_cpu<T>(true, false, n, Ev, r, T(1), P.data(), Tk, G, lg.st, T(1), row_of(dv, ldv, b, 0), ldv.st);
      }
    }
  });
}

// ---------------------------------------------------------------- bf16 attention
//
// bfloat16 storage, float32 math, on the AVX512_BF16 GEMM (ops/cpu/sgemm_bf16.cpp): the
// same units and blocks as above, but every product reads bf16 operands, q, k, v and the
// output gradient in place, and the probabilities and score gradients rounded to bf16 for
// theirs (as a GPU's flash attention does), every sum in float32. lse is float32. Scaled
// products (dq, dk) are summed unscaled and scaled once in float32; dk and dv add up over
// the query blocks in float32 and are rounded once at the end of their batch entry.

using bf16 = uint16_t;

// The softmax rows of both kernels, one fused pass where the build has AVX-512 (a row of
// the GPT workload is 32 to 128 values; separate passes for scale, max, exp, mask, sum,
// normalise and round cost more than their arithmetic), else in Eigen:
//   softmax_row: s[0, n) scores, [0, ni) seen -> p16[0, n) = softmax(scale s) in bf16 (0 past
//     ni), s overwritten; returns the row's log-sum-exp.
//   softmax_grad_row: s[0, n) scores, dp[0, n) = dout_i . v_j, lse, dsum = dout_i . out_i ->
//     p16 = exp(scale s - lse), ds16 = p (dp - dsum), both in bf16 and 0 past ni.
//   row_dot: o . g over bf16 rows, summed in float32.
#if defined(KILN_SIMD_BF16_ROWS)
/// Lanes [0, k) of the 16 from j on (none when k <= j).
inline __mmask16 lanes_from(int64_t j, int64_t k) { return j >= k ? __mmask16(0) : simd::lanes16(k - j); }

inline float softmax_row(float* s, int64_t ni, int64_t n, float scale, bf16* p16) {
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 vm = _mm512_set1_ps(-HUGE_VALF);
  for (int64_t j = 0; j < ni; j += 16) {
    const __mmask16 m = lanes_from(j, ni);
    vm = _mm512_mask_max_ps(vm, m, vm, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), vs));
  }
  const float mx = _mm512_reduce_max_ps(vm);
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < ni; j += 16) {
    const __mmask16 m = lanes_from(j, ni);
    const __m512 e = _mm512_maskz_mov_ps(m, simd::exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, s + j), vs, vmx)));
    _mm512_mask_storeu_ps(s + j, m, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  const float sum = _mm512_reduce_add_ps(vsum);
  const __m512 inv = _mm512_set1_ps(1.f / sum);
  for (int64_t j = 0; j < n; j += 16) {
    const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes_from(j, ni), s + j), inv);
    _mm256_mask_storeu_epi16(p16 + j, lanes_from(j, n), simd::bf16x16_from_floats(p));
  }
  return mx + std::log(sum);
}

inline void softmax_grad_row(const float* s, const float* dp, int64_t ni, int64_t n, float scale, float lse,
                             float dsum, bf16* p16, bf16* ds16) {
  const __m512 vs = _mm512_set1_ps(scale), vl = _mm512_set1_ps(lse), vd = _mm512_set1_ps(dsum);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes_from(j, ni), mn = lanes_from(j, n);
    const __m512 p = _mm512_maskz_mov_ps(m, simd::exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, s + j), vs, vl)));
    const __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp + j), vd));
    _mm256_mask_storeu_epi16(p16 + j, mn, simd::bf16x16_from_floats(p));
    _mm256_mask_storeu_epi16(ds16 + j, mn, simd::bf16x16_from_floats(ds));
  }
}

inline float row_dot(const bf16* o, const bf16* g, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes_from(j, n);
    acc = _mm512_fmadd_ps(simd::floats_from_bf16x16(_mm256_maskz_loadu_epi16(m, o + j)),
                          simd::floats_from_bf16x16(_mm256_maskz_loadu_epi16(m, g + j)), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

/// n values of a float32 row rounded into bf16 (kiln's Tensor casts' bits).
inline void round_row(const float* s, bf16* d, int64_t n) { simd::bf16_from_floats(s, d, n); }
#else
inline void round_row(const float* s, bf16* d, int64_t n) { convert_floats(s, reinterpret_cast<BFloat16*>(d), n); }

inline float softmax_row(float* s, int64_t ni, int64_t n, float scale, bf16* p16) {
  Eigen::Map<Eigen::VectorXf> row(s, n);
  const int64_t w = exp_width(ni, n);
  row.head(w) *= scale;
  const float m = row.head(ni).maxCoeff();
  row.head(w).array() = (row.head(w).array() - m).exp();
  row.tail(n - ni).setZero();
  const float sum = row.head(ni).sum();
  row.head(ni) *= 1.f / sum;
  round_row(s, p16, n);
  return m + std::log(sum);
}

inline void softmax_grad_row(float* s, float* dp, int64_t ni, int64_t n, float scale, float lse, float dsum,
                             bf16* p16, bf16* ds16) {
  Eigen::Map<Eigen::ArrayXf> p(s, n), d(dp, n);
  const int64_t w = exp_width(ni, n);
  p.head(w) = (p.head(w) * scale - lse).exp();
  p.segment(ni, n - ni).setZero();
  d.segment(ni, n - ni).setZero();
  d.head(ni) = p.head(ni) * (d.head(ni) - dsum);
  round_row(s, p16, n);
  round_row(dp, ds16, n);
}

inline float row_dot(const bf16* o, const bf16* g, int64_t n) {
  float acc = 0.f;
  for (int64_t e = 0; e < n; ++e) acc += bf16_bits_to_float(o[e]) * bf16_bits_to_float(g[e]);
  return acc;
}
#endif

void attention_forward_bf16(const bf16* q, AttnLayout lq, const bf16* k, AttnLayout lk, const bf16* v,
                            AttnLayout lv, bf16* out, AttnLayout lo, float* lse, int64_t B, int64_t Tq, int64_t Tk,
                            int64_t E, int64_t Ev, float scale, bool causal) {
  const int64_t nblk = (Tq + kRows - 1) / kRows;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(kRows * Tk * (E + Ev), 1));
  parallel_for(0, B * nblk, grain, [&](int64_t u0, int64_t u1) {
    RowMat<float> S(kRows, Tk);                                 // scores, then probabilities
    std::vector<bf16> P(size_t(kRows * Tk));                    // the probabilities in bf16
    std::vector<float> O(size_t(kRows * std::max<int64_t>(Ev, 1)));  // one block of output rows
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / nblk, i0 = (u % nblk) * kRows, r = std::min(kRows, Tq - i0);
      const int64_t n = keys_seen(i0 + r - 1, Tk, causal);
      sgemm_bf16(false, true, r, n, E, row_of(q, lq, b, i0), lq.st, row_of(k, lk, b, 0), lk.st, 0.f, S.data(), Tk, 1);
      for (int64_t rr = 0; rr < r; ++rr)
        lse[b * Tq + i0 + rr] =
            softmax_row(S.data() + rr * Tk, keys_seen(i0 + rr, Tk, causal), n, scale, P.data() + rr * Tk);
      sgemm_bf16(false, false, r, Ev, n, P.data(), Tk, row_of(v, lv, b, 0), lv.st, 0.f, O.data(), Ev, 1);
      for (int64_t rr = 0; rr < r; ++rr) round_row(O.data() + rr * Ev, row_of(out, lo, b, i0 + rr), Ev);
    }
  });
}

void attention_backward_bf16(const bf16* q, AttnLayout lq, const bf16* k, AttnLayout lk, const bf16* v,
                             AttnLayout lv, const bf16* out, AttnLayout lo, const float* lse, const bf16* dout,
                             AttnLayout lg, bf16* dq, AttnLayout ldq, bf16* dk, AttnLayout ldk, bf16* dv,
                             AttnLayout ldv, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, float scale,
                             bool causal) {
  // attention_backward_t's formulas and units (whole batch entries, blocks of query rows)
  const int64_t grain = entry_grain(Tq, Tk, E, Ev);
  parallel_for(0, B, grain, [&](int64_t b0, int64_t b1) {
    RowMat<float> P(kRows, Tk), dS(kRows, Tk);
    std::vector<bf16> P16(size_t(kRows * Tk)), dS16(size_t(kRows * Tk));
    std::vector<float> dK(static_cast<size_t>(Tk * E)), dV(static_cast<size_t>(Tk * Ev));
    std::vector<float> dQ(static_cast<size_t>(kRows * E));
    for (int64_t b = b0; b < b1; ++b) {
      std::fill(dK.begin(), dK.end(), 0.f);
      std::fill(dV.begin(), dV.end(), 0.f);
      const bf16* K = row_of(k, lk, b, 0);
      const bf16* V = row_of(v, lv, b, 0);
      for (int64_t i0 = 0; i0 < Tq; i0 += kRows) {
        const int64_t r = std::min(kRows, Tq - i0), n = keys_seen(i0 + r - 1, Tk, causal);
        const bf16* Q = row_of(q, lq, b, i0);
        const bf16* G = row_of(dout, lg, b, i0);
        sgemm_bf16(false, true, r, n, E, Q, lq.st, K, lk.st, 0.f, P.data(), Tk, 1);    // Q K^T
        sgemm_bf16(false, true, r, n, Ev, G, lg.st, V, lv.st, 0.f, dS.data(), Tk, 1);  // dP = G V^T
        for (int64_t rr = 0; rr < r; ++rr) {
          const int64_t i = i0 + rr;
          const float dsum = row_dot(row_of(out, lo, b, i), G + rr * lg.st, Ev);
          softmax_grad_row(P.data() + rr * Tk, dS.data() + rr * Tk, keys_seen(i, Tk, causal), n, scale,
                           lse[b * Tq + i], dsum, P16.data() + rr * Tk, dS16.data() + rr * Tk);
        }
        if (dq) {  // dQ_block = scale dS K
          sgemm_bf16(false, false, r, E, n, dS16.data(), Tk, K, lk.st, 0.f, dQ.data(), E, 1);
          for (int64_t rr = 0; rr < r; ++rr) {
            for (int64_t e = 0; e < E; ++e) dQ[size_t(rr * E + e)] *= scale;
            round_row(dQ.data() + rr * E, row_of(dq, ldq, b, i0 + rr), E);
          }
        }
        if (dk) sgemm_bf16(true, false, n, E, r, dS16.data(), Tk, Q, lq.st, 1.f, dK.data(), E, 1);  // += dS^T Q
        if (dv) sgemm_bf16(true, false, n, Ev, r, P16.data(), Tk, G, lg.st, 1.f, dV.data(), Ev, 1);  // += P^T G
      }
      for (int64_t j = 0; j < Tk; ++j) {
        if (dk) {
          for (int64_t e = 0; e < E; ++e) dK[size_t(j * E + e)] *= scale;
          round_row(dK.data() + j * E, row_of(dk, ldk, b, j), E);
        }
        if (dv) round_row(dV.data() + j * Ev, row_of(dv, ldv, b, j), Ev);
      }
    }
  });
}

// ---------------------------------------------------------------- 16-bit attention, widened
//
// float16, and bfloat16 on a CPU without AVX512_BF16: one batch entry at a time, its rows of
// q, k, v (and out, dout for the backward) are widened into float32 buffers of the thread,
// the float32 kernel runs on them and its results are rounded into place. The bits of
// widening whole tensors first (the float32 kernel's units do not depend on the batch
// entries around them), without a float32 copy of qkv in memory.

/// The rows [0, T) of batch entry b of a 16-bit operand widened into dst (T x n, contiguous).
template <class X>
void widen_rows(const X* src, const AttnLayout& l, int64_t b, int64_t T, int64_t n, float* dst) {
  for (int64_t t = 0; t < T; ++t) convert_floats(row_of(src, l, b, t), dst + t * n, n);
}
/// The rows of src (T x n, contiguous) rounded into batch entry b of a 16-bit operand.
template <class X>
void round_rows(const float* src, int64_t T, int64_t n, X* dst, const AttnLayout& l, int64_t b) {
  for (int64_t t = 0; t < T; ++t) convert_floats(src + t * n, row_of(dst, l, b, t), n);
}

template <class X>
void attention_forward_16(const X* q, AttnLayout lq, const X* k, AttnLayout lk, const X* v, AttnLayout lv, X* out,
                          AttnLayout lo, float* lse, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev,
                          float scale, bool causal) {
  const auto cq = AttnLayout::contiguous(Tq, E), ck = AttnLayout::contiguous(Tk, E),
             cv = AttnLayout::contiguous(Tk, Ev), co = AttnLayout::contiguous(Tq, Ev);
  const int64_t grain = entry_grain(Tq, Tk, E, Ev);
  parallel_for(0, B, grain, [&](int64_t b0, int64_t b1) {  // the float32 kernel runs serially inside
    std::vector<float> Q(size_t(Tq * E)), K(size_t(Tk * E)), V(size_t(Tk * Ev)), O(size_t(Tq * Ev));
    for (int64_t b = b0; b < b1; ++b) {
      widen_rows(q, lq, b, Tq, E, Q.data());
      widen_rows(k, lk, b, Tk, E, K.data());
      widen_rows(v, lv, b, Tk, Ev, V.data());
      attention_forward_t<float>(Q.data(), cq, K.data(), ck, V.data(), cv, O.data(), co, lse + b * Tq, 1, Tq, Tk, E,
                                 Ev, scale, causal);
      round_rows(O.data(), Tq, Ev, out, lo, b);
    }
  });
}

template <class X>
void attention_backward_16(const X* q, AttnLayout lq, const X* k, AttnLayout lk, const X* v, AttnLayout lv,
                           const X* out, AttnLayout lo, const float* lse, const X* dout, AttnLayout lg, X* dq,
                           AttnLayout ldq, X* dk, AttnLayout ldk, X* dv, AttnLayout ldv, int64_t B, int64_t Tq,
                           int64_t Tk, int64_t E, int64_t Ev, float scale, bool causal) {
  const auto cq = AttnLayout::contiguous(Tq, E), ck = AttnLayout::contiguous(Tk, E),
             cv = AttnLayout::contiguous(Tk, Ev), co = AttnLayout::contiguous(Tq, Ev);
  const int64_t grain = entry_grain(Tq, Tk, E, Ev);
  parallel_for(0, B, grain, [&](int64_t b0, int64_t b1) {
    std::vector<float> Q(size_t(Tq * E)), K(size_t(Tk * E)), V(size_t(Tk * Ev)), O(size_t(Tq * Ev)),
        G(size_t(Tq * Ev)), dQ(dq ? size_t(Tq * E) : 0), dK(dk ? size_t(Tk * E) : 0), dV(dv ? size_t(Tk * Ev) : 0);
    for (int64_t b = b0; b < b1; ++b) {
      widen_rows(q, lq, b, Tq, E, Q.data());
      widen_rows(k, lk, b, Tk, E, K.data());
      widen_rows(v, lv, b, Tk, Ev, V.data());
      widen_rows(out, lo, b, Tq, Ev, O.data());
      widen_rows(dout, lg, b, Tq, Ev, G.data());
      attention_backward_t<float>(Q.data(), cq, K.data(), ck, V.data(), cv, O.data(), co, lse + b * Tq, G.data(), co,
                                  dq ? dQ.data() : nullptr, cq, dk ? dK.data() : nullptr, ck,
                                  dv ? dV.data() : nullptr, cv, 1, Tq, Tk, E, Ev, scale, causal);
      if (dq) round_rows(dQ.data(), Tq, E, dq, ldq, b);
      if (dk) round_rows(dK.data(), Tk, E, dk, ldk, b);
      if (dv) round_rows(dV.data(), Tk, Ev, dv, ldv, b);
    }
  });
}

void attention_forward_strided(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v,
                               AttnLayout lv, void* out, AttnLayout lo, void* lse, int64_t B, int64_t Tq,
                               int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal) {
  // 16-bit: lse float32 (ops/kernels/nn.h)
  auto run16 = [&]<class X>() {
    attention_forward_16(static_cast<const X*>(q), lq, static_cast<const X*>(k), lk, static_cast<const X*>(v), lv,
                         static_cast<X*>(out), lo, static_cast<float*>(lse), B, Tq, Tk, E, Ev, float(scale), causal);
  };
  if (dt == DType::float16) return run16.template operator()<Half>();
  if (dt == DType::bfloat16 && !sgemm_bf16_preferred()) return run16.template operator()<BFloat16>();
  if (dt == DType::bfloat16)
    return attention_forward_bf16(static_cast<const bf16*>(q), lq, static_cast<const bf16*>(k), lk,
                                  static_cast<const bf16*>(v), lv, static_cast<bf16*>(out), lo,
                                  static_cast<float*>(lse), B, Tq, Tk, E, Ev, float(scale), causal);
  KILN_DISPATCH_FLOATING(dt, "scaled_dot_product_attention", [&]<class T>() {
    attention_forward_t<T>(static_cast<const T*>(q), lq, static_cast<const T*>(k), lk, static_cast<const T*>(v), lv,
                           static_cast<T*>(out), lo, static_cast<T*>(lse), B, Tq, Tk, E, Ev, T(scale), causal);
  });
}

void attention_backward_strided(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v,
                                AttnLayout lv, const void* out, AttnLayout lo, const void* lse, const void* dout,
                                AttnLayout lg, void* dq, AttnLayout ldq, void* dk, AttnLayout ldk, void* dv,
                                AttnLayout ldv, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev,
                                double scale, bool causal) {
  auto run16 = [&]<class X>() {
    attention_backward_16(static_cast<const X*>(q), lq, static_cast<const X*>(k), lk, static_cast<const X*>(v), lv,
                          static_cast<const X*>(out), lo, static_cast<const float*>(lse),
                          static_cast<const X*>(dout), lg, static_cast<X*>(dq), ldq, static_cast<X*>(dk), ldk,
                          static_cast<X*>(dv), ldv, B, Tq, Tk, E, Ev, float(scale), causal);
  };
  if (dt == DType::float16) return run16.template operator()<Half>();
  if (dt == DType::bfloat16 && !sgemm_bf16_preferred()) return run16.template operator()<BFloat16>();
  if (dt == DType::bfloat16)
    return attention_backward_bf16(static_cast<const bf16*>(q), lq, static_cast<const bf16*>(k), lk,
                                   static_cast<const bf16*>(v), lv, static_cast<const bf16*>(out), lo,
                                   static_cast<const float*>(lse), static_cast<const bf16*>(dout), lg,
                                   static_cast<bf16*>(dq), ldq, static_cast<bf16*>(dk), ldk, static_cast<bf16*>(dv),
                                   ldv, B, Tq, Tk, E, Ev, float(scale), causal);
  KILN_DISPATCH_FLOATING(dt, "scaled_dot_product_attention_backward", [&]<class T>() {
    attention_backward_t<T>(static_cast<const T*>(q), lq, static_cast<const T*>(k), lk, static_cast<const T*>(v), lv,
                            static_cast<const T*>(out), lo, static_cast<const T*>(lse), static_cast<const T*>(dout),
                            lg, static_cast<T*>(dq), ldq, static_cast<T*>(dk), ldk, static_cast<T*>(dv), ldv, B, Tq,
                            Tk, E, Ev, T(scale), causal);
  });
}

void attention_forward(DType dt, const void* q, const void* k, const void* v, void* out, void* lse, int64_t B,
                       int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal) {
  const AttnLayout lq = AttnLayout::contiguous(Tq, E), lk = AttnLayout::contiguous(Tk, E),
                   lv = AttnLayout::contiguous(Tk, Ev), lo = AttnLayout::contiguous(Tq, Ev);
  attention_forward_strided(dt, q, lq, k, lk, v, lv, out, lo, lse, B, Tq, Tk, E, Ev, scale, causal);
}

void attention_backward(DType dt, const void* q, const void* k, const void* v, const void* out, const void* lse,
                        const void* dout, void* dq, void* dk, void* dv, int64_t B, int64_t Tq, int64_t Tk, int64_t E,
                        int64_t Ev, double scale, bool causal) {
  const AttnLayout lq = AttnLayout::contiguous(Tq, E), lk = AttnLayout::contiguous(Tk, E),
                   lv = AttnLayout::contiguous(Tk, Ev), lo = AttnLayout::contiguous(Tq, Ev);
  attention_backward_strided(dt, q, lq, k, lk, v, lv, out, lo, lse, dout, lo, dq, lq, dk, lk, dv, lv, B, Tq, Tk, E,
                             Ev, scale, causal);
}

const DropoutKernels kDropoutCpu{&dropout_apply};
const EmbeddingKernels kEmbeddingCpu{&embedding_forward, &embedding_backward};
const AttentionKernels kAttentionCpu{&attention_forward, &attention_backward, &attention_forward_strided,
                                     &attention_backward_strided};

}  // namespace

void register_cpu_nn() {
  register_kernel(Op::dropout, DeviceType::CPU, &kDropoutCpu);
  register_kernel(Op::embedding, DeviceType::CPU, &kEmbeddingCpu);
  register_kernel(Op::scaled_dot_product_attention, DeviceType::CPU, &kAttentionCpu);
}

}  // namespace kiln
