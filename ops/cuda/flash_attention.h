// Fused ("flash") attention for CUDA: what one thread block does, as templates over the
// block and over the tile GEMM, so that the very same bodies run on the GPU
// (ops/cuda/flash_attention.cu: cuda::DeviceBlock, Tensor Core WMMA tiles) and on the CPU in
// an emulated block (tests/cuda/test_cuda_flash_attention.cpp: one std::thread per CUDA
// thread, scalar tiles). Host and device code: no CUDA header here.
//
// The forward (one block per (batch entry, tile of query rows)) never holds more than one
// tile x tile block of scores: for each tile of keys it computes S = Q K^T, updates each
// row's running maximum m and sum l (the online softmax), rescales the output accumulator
// O by exp(m_old - m_new) and adds P V. At the end out = O / l and lse = m + log l (float32).
// The backward recomputes P = exp(scale S - lse) tile by tile in two passes with no atomics
// (so it is deterministic): pass 1, one block per query tile, computes D = rowsum(dO * out)
// and dQ = sum over key tiles of dS K; pass 2, one block per key tile, dV = sum P^T dO and
// dK = sum dS^T Q, with dS = P (dP - D) scale and dP = dO V^T. The operands are read in
// place through AttnLayout (the packed (B, T, 3C) qkv of the GPT needs no copy).
//
// Every tile lives in shared memory: Q/K/V/dO tiles in the input type (16-bit, or float32
// rounded to TF32 by the Tensor Core GEMM when float32 matmuls may use TF32), float32
// scores and accumulators. Rows are padded (8 halves, 4 floats) so WMMA's leading dimensions
// and fragment addresses are aligned. Not yet tuned: the scores go through shared memory
// (FlashAttention-2 keeps them in registers) and the softmax pass gives each row one thread.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include "kiln/core/macros.h"
#include "kiln/core/dtype.h"
#include "kiln/ops/kernels/nn.h"

namespace kiln::cuda::flash {

constexpr int kThreads = 128;  // 4 warps per block
constexpr int kMaxHeadDim = 128;

/// Whether the fused kernels take this shape: head dims multiples of 16 (Tensor Core tiles)
/// up to kMaxHeadDim.
KILN_HD_INLINE bool supported(int64_t E, int64_t Ev) {
  return E > 0 && Ev > 0 && E % 16 == 0 && Ev % 16 == 0 && E <= kMaxHeadDim && Ev <= kMaxHeadDim;
}
/// Rows (queries or keys) per tile: 64 for 16-bit inputs with head dims up to 64, else 32
/// (shared memory: float32 tiles take twice the bytes).
KILN_HD_INLINE int tile_rows(int64_t E, int64_t Ev, size_t elem = 2) {
  return elem == 2 && E <= 64 && Ev <= 64 ? 64 : 32;
}

/// Everything a kernel needs (pointers of element type T; lse and D float32 (B, Tq)).
template <class T>
struct Params {
  const T *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *dout = nullptr;
  AttnLayout lq, lk, lv, lout, ldout;
  T *o = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;  // o: the forward's output
  AttnLayout lo, ldq, ldk, ldv;
  float *lse = nullptr, *dsum = nullptr;  // dsum: D = rowsum(dO * out), written by pass 1
  int64_t B = 0, Tq = 0, Tk = 0;
  int E = 0, Ev = 0, tile = 64;
  float scale = 1;
  bool causal = false;
};

/// Byte offsets of a kernel's shared-memory arrays, each 128-byte aligned. `kind` 0: the
/// forward, 1: pass 1 of the backward (dQ), 2: pass 2 (dK, dV).
struct SmemLayout {
  int ld_e, ld_ev, ld_t;        // 16-bit rows: E + 8, Ev + 8, tile + 8
  int ldf_e, ldf_ev, ldf_t;     // float rows: E + 4, Ev + 4, tile + 4
  size_t q, k, v, dout;         // 16-bit tiles (tile x E or Ev)
  size_t s, dp;                 // float tile x tile
  size_t p, ds;                 // 16-bit tile x tile
  size_t acc_e, acc_ev;         // float accumulators (tile x E: dQ or dK; tile x Ev: O or dV)
  size_t row_a, row_b, row_c;   // float per-row values (m, l, alpha or lse, D)
  size_t bytes;

  KILN_HD SmemLayout(int kind, int tile, int E, int Ev, size_t elem) {
    ld_e = E + 8, ld_ev = Ev + 8, ld_t = tile + 8;
    ldf_e = E + 4, ldf_ev = Ev + 4, ldf_t = tile + 4;
    size_t at = 0;
    auto take = [&at](size_t n) {
      const size_t here = at;
      at += (n + 127) / 128 * 128;
      return here;
    };
    const size_t t = size_t(tile), none = ~size_t(0);
    q = take(t * size_t(ld_e) * elem);
    k = take(t * size_t(ld_e) * elem);
    v = take(t * size_t(ld_ev) * elem);
    dout = kind == 0 ? none : take(t * size_t(ld_ev) * elem);
    s = take(t * size_t(ldf_t) * 4);
    dp = kind == 0 ? none : take(t * size_t(ldf_t) * 4);
    p = kind == 1 ? none : take(t * size_t(ld_t) * elem);
    ds = kind == 0 ? none : take(t * size_t(ld_t) * elem);
    acc_e = kind == 0 ? none : take(t * size_t(ldf_e) * 4);
    acc_ev = kind == 1 ? none : take(t * size_t(ldf_ev) * 4);
    row_a = take(t * 4);
    row_b = take(t * 4);
    row_c = take(t * 4);
    bytes = at;
  }
};

#ifdef __CUDACC__
KILN_HD_INLINE float f_exp(float x) { return expf(x); }
KILN_HD_INLINE float f_log(float x) { return logf(x); }
#else
inline float f_exp(float x) { return std::exp(x); }
inline float f_log(float x) { return std::log(x); }
#endif

/// Rows [r0, r0 + tile) of one operand (row t at base + t * st, `width` contiguous
/// elements) into a shared tile with leading dimension ld; rows at or past `rows` are zero.
template <class T, class Block>
KILN_HD_INLINE void load_tile(const Block& b, T* dst, int ld, const T* base, int64_t st, int64_t r0, int64_t rows,
                              int tile, int width) {
  for (int i = b.thread(); i < tile * width; i += b.size()) {
    const int r = i / width, c = i - r * width;
    dst[r * ld + c] = r0 + r < rows ? base[(r0 + r) * st + c] : T(0.0f);
  }
}

/// The inverse of load_tile for a float tile (leading dimension ld): rows r0 + r < rows go
/// to base + (r0 + r) * st, rounded to T, each divided by div[r] when div is set (a row
/// with div[r] = 0 has seen nothing and is written as 0).
template <class T, class Block>
KILN_HD_INLINE void store_tile(const Block& b, T* base, int64_t st, int64_t r0, int64_t rows, int tile, int width,
                               const float* src, int ld, const float* div) {
  for (int i = b.thread(); i < tile * width; i += b.size()) {
    const int r = i / width, c = i - r * width;
    if (r0 + r >= rows) continue;
    const float v = src[r * ld + c];
    base[(r0 + r) * st + c] = T(!div ? v : div[r] > 0 ? v / div[r] : 0.0f);
  }
}

/// Fills n floats with v.
template <class Block>
KILN_HD_INLINE void fill(const Block& b, float* dst, int n, float v) {
  for (int i = b.thread(); i < n; i += b.size()) dst[i] = v;
}

/// Whether query row i sees key j (and both exist).
KILN_HD_INLINE bool visible(int64_t i, int64_t j, int64_t Tq, int64_t Tk, bool causal) {
  return i < Tq && j < Tk && (!causal || j <= i);
}

/// Number of key tiles query tile `qt` visits.
KILN_HD_INLINE int64_t key_tiles(int64_t qt, int64_t Tk, int tile, bool causal) {
  const int64_t all = (Tk + tile - 1) / tile;
  return causal && qt + 1 < all ? qt + 1 : all;  // causal: keys up to the tile's last row
}

/// The scalar tile GEMM: C (M x N float, ldc) = [C +] A (M x K) B (K x N) with float
/// accumulation, A(m, k) = a[m lda + k] (or a[k lda + m] when TA), B(k, n) = b[k ldb + n]
/// (or b[n ldb + k] when TB). The emulated block's GEMM; on the GPU the WMMA one of
/// flash_attention.cu has the same contract. The caller synchronises afterwards.
struct ScalarMma {
  template <bool TA, bool TB, class T, class Block>
  KILN_HD_INLINE static void run(const Block& blk, const T* a, int lda, const T* b, int ldb, float* c, int ldc, int M,
                                 int N, int K, bool accumulate) {
    for (int i = blk.thread(); i < M * N; i += blk.size()) {
      const int m = i / N, n = i - m * N;
      float acc = accumulate ? c[m * ldc + n] : 0.0f;
      for (int kk = 0; kk < K; ++kk)
        acc += float(TA ? a[kk * lda + m] : a[m * lda + kk]) * float(TB ? b[n * ldb + kk] : b[kk * ldb + n]);
      c[m * ldc + n] = acc;
    }
  }
};

template <class T>
KILN_HD_INLINE T* at(unsigned char* smem, size_t off) {
  return reinterpret_cast<T*>(smem + off);
}

/// Forward of query tile `qt` of batch entry `bh`.
template <class T, class Mma, class Block>
KILN_HD void forward_tile(const Block& b, unsigned char* smem, const Params<T>& p, int64_t bh, int64_t qt) {
  const int tile = p.tile, E = p.E, Ev = p.Ev;
  const SmemLayout L(0, tile, E, Ev, sizeof(T));
  T *Q = at<T>(smem, L.q), *K = at<T>(smem, L.k), *V = at<T>(smem, L.v), *P = at<T>(smem, L.p);
  float *S = at<float>(smem, L.s), *O = at<float>(smem, L.acc_ev);
  float *m = at<float>(smem, L.row_a), *l = at<float>(smem, L.row_b), *alpha = at<float>(smem, L.row_c);
  const int64_t i0 = qt * tile;
  load_tile(b, Q, L.ld_e, p.q + p.lq.offset(bh), p.lq.st, i0, p.Tq, tile, E);
  fill(b, O, tile * L.ldf_ev, 0.0f);
  fill(b, m, tile, -std::numeric_limits<float>::infinity());
  fill(b, l, tile, 0.0f);
  const int64_t nk = key_tiles(qt, p.Tk, tile, p.causal);
  for (int64_t kt = 0; kt < nk; ++kt) {
    const int64_t j0 = kt * tile;
    b.sync();  // the last tile's P V has read K, V and P
    load_tile(b, K, L.ld_e, p.k + p.lk.offset(bh), p.lk.st, j0, p.Tk, tile, E);
    load_tile(b, V, L.ld_ev, p.v + p.lv.offset(bh), p.lv.st, j0, p.Tk, tile, Ev);
    b.sync();
    Mma::template run<false, true>(b, Q, L.ld_e, K, L.ld_e, S, L.ldf_t, tile, tile, E, false);  // S = Q K^T
    b.sync();
    for (int r = b.thread(); r < tile; r += b.size()) {  // the online softmax, one row per thread
      float* row = S + r * L.ldf_t;
      float mx = -std::numeric_limits<float>::infinity();
      for (int c = 0; c < tile; ++c) {
        const float s = visible(i0 + r, j0 + c, p.Tq, p.Tk, p.causal) ? row[c] * p.scale
                                                                       : -std::numeric_limits<float>::infinity();
        row[c] = s;
        mx = mx > s ? mx : s;
      }
      const float m_old = m[r], m_new = m_old > mx ? m_old : mx;
      const bool none = m_new == -std::numeric_limits<float>::infinity();  // nothing seen yet
      const float a = none ? 1.0f : f_exp(m_old - m_new);
      float sum = 0;
      for (int c = 0; c < tile; ++c) {
        const float e = none ? 0.0f : f_exp(row[c] - m_new);
        sum += e;
        P[r * L.ld_t + c] = T(e);
      }
      l[r] = l[r] * a + sum;
      m[r] = m_new;
      alpha[r] = a;
    }
    b.sync();
    for (int i = b.thread(); i < tile * Ev; i += b.size()) {
      const int r = i / Ev, c = i - r * Ev;
      O[r * L.ldf_ev + c] *= alpha[r];
    }
    b.sync();
    Mma::template run<false, false>(b, P, L.ld_t, V, L.ld_ev, O, L.ldf_ev, tile, Ev, tile, true);  // O += P V
  }
  b.sync();
  store_tile(b, p.o + p.lo.offset(bh), p.lo.st, i0, p.Tq, tile, Ev, O, L.ldf_ev, l);  // out = O / l
  for (int r = b.thread(); r < tile; r += b.size())
    if (i0 + r < p.Tq) p.lse[bh * p.Tq + i0 + r] = m[r] + f_log(l[r]);
}

/// Loads row values of (B, Tq) float `src` for query tile i0 (rows past Tq: `pad`).
template <class Block>
KILN_HD_INLINE void load_rows(const Block& b, float* dst, const float* src, int64_t i0, int64_t Tq, int tile,
                              float pad) {
  for (int r = b.thread(); r < tile; r += b.size()) dst[r] = i0 + r < Tq ? src[i0 + r] : pad;
}

/// dS (16-bit, ld_t) from S (scores, unscaled) and dP: p = exp(scale s - lse) where visible,
/// ds = p (dp - D) scale; also P (16-bit) when P is non-null.
template <class T, class Block>
KILN_HD_INLINE void scores_grad(const Block& b, const SmemLayout& L, const Params<T>& p, const float* S,
                                const float* dP, const float* lse, const float* D, T* P, T* dS, int64_t i0,
                                int64_t j0) {
  const int tile = p.tile;
  for (int i = b.thread(); i < tile * tile; i += b.size()) {
    const int r = i / tile, c = i - r * tile;
    const float pr = visible(i0 + r, j0 + c, p.Tq, p.Tk, p.causal) ? f_exp(S[r * L.ldf_t + c] * p.scale - lse[r])
                                                                   : 0.0f;
    if (P) P[r * L.ld_t + c] = T(pr);
    dS[r * L.ld_t + c] = T(pr * (dP[r * L.ldf_t + c] - D[r]) * p.scale);
  }
}

/// Backward pass 1 for query tile `qt` of batch entry `bh`: D = rowsum(dO * out) into
/// p.dsum, and dQ when p.dq is set.
template <class T, class Mma, class Block>
KILN_HD void backward_dq_tile(const Block& b, unsigned char* smem, const Params<T>& p, int64_t bh, int64_t qt) {
  const int tile = p.tile, E = p.E, Ev = p.Ev;
  const SmemLayout L(1, tile, E, Ev, sizeof(T));
  T *Q = at<T>(smem, L.q), *K = at<T>(smem, L.k), *V = at<T>(smem, L.v), *dO = at<T>(smem, L.dout);
  T* dS = at<T>(smem, L.ds);
  float *S = at<float>(smem, L.s), *dP = at<float>(smem, L.dp), *dQ = at<float>(smem, L.acc_e);
  float *lse = at<float>(smem, L.row_a), *D = at<float>(smem, L.row_b);
  const int64_t i0 = qt * tile;
  load_tile(b, dO, L.ld_ev, p.dout + p.ldout.offset(bh), p.ldout.st, i0, p.Tq, tile, Ev);
  b.sync();
  const T* out = p.out + p.lout.offset(bh);
  for (int r = b.thread(); r < tile; r += b.size()) {  // D = rowsum(dO * out), in the 16-bit values both hold
    float d = 0;
    if (i0 + r < p.Tq)
      for (int c = 0; c < Ev; ++c) d += float(dO[r * L.ld_ev + c]) * float(out[(i0 + r) * p.lout.st + c]);
    D[r] = d;
    if (i0 + r < p.Tq) p.dsum[bh * p.Tq + i0 + r] = d;
  }
  if (!p.dq) return;
  load_tile(b, Q, L.ld_e, p.q + p.lq.offset(bh), p.lq.st, i0, p.Tq, tile, E);
  load_rows(b, lse, p.lse + bh * p.Tq, i0, p.Tq, tile, 0.0f);
  fill(b, dQ, tile * L.ldf_e, 0.0f);
  const int64_t nk = key_tiles(qt, p.Tk, tile, p.causal);
  for (int64_t kt = 0; kt < nk; ++kt) {
    const int64_t j0 = kt * tile;
    b.sync();
    load_tile(b, K, L.ld_e, p.k + p.lk.offset(bh), p.lk.st, j0, p.Tk, tile, E);
    load_tile(b, V, L.ld_ev, p.v + p.lv.offset(bh), p.lv.st, j0, p.Tk, tile, Ev);
    b.sync();
    Mma::template run<false, true>(b, Q, L.ld_e, K, L.ld_e, S, L.ldf_t, tile, tile, E, false);     // S = Q K^T
    Mma::template run<false, true>(b, dO, L.ld_ev, V, L.ld_ev, dP, L.ldf_t, tile, tile, Ev, false);  // dP = dO V^T
    b.sync();
    scores_grad<T>(b, L, p, S, dP, lse, D, static_cast<T*>(nullptr), dS, i0, j0);
    b.sync();
    Mma::template run<false, false>(b, dS, L.ld_t, K, L.ld_e, dQ, L.ldf_e, tile, E, tile, true);  // dQ += dS K
  }
  b.sync();
  store_tile(b, p.dq + p.ldq.offset(bh), p.ldq.st, i0, p.Tq, tile, E, dQ, L.ldf_e, static_cast<const float*>(nullptr));
}

/// Backward pass 2 for key tile `kt` of batch entry `bh`: dK and dV (either may be null),
/// reading pass 1's D.
template <class T, class Mma, class Block>
KILN_HD void backward_dkv_tile(const Block& b, unsigned char* smem, const Params<T>& p, int64_t bh, int64_t kt) {
  const int tile = p.tile, E = p.E, Ev = p.Ev;
  const SmemLayout L(2, tile, E, Ev, sizeof(T));
  T *Q = at<T>(smem, L.q), *K = at<T>(smem, L.k), *V = at<T>(smem, L.v), *dO = at<T>(smem, L.dout);
  T *P = at<T>(smem, L.p), *dS = at<T>(smem, L.ds);
  float *S = at<float>(smem, L.s), *dP = at<float>(smem, L.dp);
  float *dK = at<float>(smem, L.acc_e), *dV = at<float>(smem, L.acc_ev);
  float *lse = at<float>(smem, L.row_a), *D = at<float>(smem, L.row_b);
  const int64_t j0 = kt * tile;
  load_tile(b, K, L.ld_e, p.k + p.lk.offset(bh), p.lk.st, j0, p.Tk, tile, E);
  load_tile(b, V, L.ld_ev, p.v + p.lv.offset(bh), p.lv.st, j0, p.Tk, tile, Ev);
  fill(b, dK, tile * L.ldf_e, 0.0f);
  fill(b, dV, tile * L.ldf_ev, 0.0f);
  const int64_t nq = (p.Tq + tile - 1) / tile;
  for (int64_t qt = p.causal ? kt : 0; qt < nq; ++qt) {  // causal: queries from the tile's first key on
    const int64_t i0 = qt * tile;
    b.sync();
    load_tile(b, Q, L.ld_e, p.q + p.lq.offset(bh), p.lq.st, i0, p.Tq, tile, E);
    load_tile(b, dO, L.ld_ev, p.dout + p.ldout.offset(bh), p.ldout.st, i0, p.Tq, tile, Ev);
    load_rows(b, lse, p.lse + bh * p.Tq, i0, p.Tq, tile, 0.0f);
    load_rows(b, D, p.dsum + bh * p.Tq, i0, p.Tq, tile, 0.0f);
    b.sync();
    Mma::template run<false, true>(b, Q, L.ld_e, K, L.ld_e, S, L.ldf_t, tile, tile, E, false);     // S = Q K^T
    Mma::template run<false, true>(b, dO, L.ld_ev, V, L.ld_ev, dP, L.ldf_t, tile, tile, Ev, false);  // dP = dO V^T
    b.sync();
    scores_grad<T>(b, L, p, S, dP, lse, D, P, dS, i0, j0);
    b.sync();
    Mma::template run<true, false>(b, P, L.ld_t, dO, L.ld_ev, dV, L.ldf_ev, tile, Ev, tile, true);  // dV += P^T dO
    Mma::template run<true, false>(b, dS, L.ld_t, Q, L.ld_e, dK, L.ldf_e, tile, E, tile, true);     // dK += dS^T Q
  }
  b.sync();
  const float* none = nullptr;
  if (p.dk) store_tile(b, p.dk + p.ldk.offset(bh), p.ldk.st, j0, p.Tk, tile, E, dK, L.ldf_e, none);
  if (p.dv) store_tile(b, p.dv + p.ldv.offset(bh), p.ldv.st, j0, p.Tk, tile, Ev, dV, L.ldf_ev, none);
}

// ---------------------------------------------------------------- launchers (flash_attention.cu)

/// The forward on the GPU when the fused kernels take it (float16/bfloat16, or float32 on
/// TF32 Tensor Cores when set_float32_matmul_precision allows TF32; supported() head dims;
/// the device's shared memory; KILN_CUDA_FLASH_ATTENTION=0 turns them off):
/// true when it ran, false to let the caller take the composed path. lse is float32 (B, Tq).
bool try_forward(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v, AttnLayout lv,
                 void* out, AttnLayout lout, float* lse, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev,
                 double scale, bool causal);
/// The backward likewise (null dq / dk / dv are skipped).
bool try_backward(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v, AttnLayout lv,
                  const void* out, AttnLayout lout, const float* lse, const void* dout, AttnLayout ldout, void* dq,
                  AttnLayout ldq, void* dk, AttnLayout ldk, void* dv, AttnLayout ldv, int64_t B, int64_t Tq,
                  int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal);

}  // namespace kiln::cuda::flash
