// The bodies of kiln's one-block-per-row CUDA kernels (reduce.cu, norm.cu, loss.cu, nn.cu,
// conv.cu): what one block does for one row (or channel), as templates over the block it
// runs in. A block `b` offers
//   b.thread(), b.size()   threadIdx.x and blockDim.x,
//   b.sum(v), b.max(v)     the sum / fmax of every thread's v, returned to every thread,
//   b.reduce(v, op)        the same for any associative op.
// On the GPU the block is cuda::DeviceBlock (block_reduce.cuh: cub::BlockReduce and
// __syncthreads); the CPU test tests/cuda/test_cuda_block_rows.cpp runs the very same
// bodies in a block emulated by one std::thread per CUDA thread, joined by a std::barrier
// at every block reduction (tests/cuda/block_emulation.h), against kiln's CPU ops.
// Host and device code: no CUDA header here.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include "kiln/core/macros.h"
#include "kiln/ops/math.h"
#include "kiln/ops/reduce_math.h"
#include "kiln/ops/cuda/reduce_index.h"

namespace kiln::cuda::rows {

// Overloads of the C math functions for float and double on both sides (nvcc declares the
// float ones globally, the host library in std::).
#ifdef __CUDACC__
template <class T> KILN_HD_INLINE T r_fmax(T a, T b) { return fmax(a, b); }
template <class T> KILN_HD_INLINE T r_log(T x) { return log(x); }
template <class T> KILN_HD_INLINE bool r_isfinite(T x) { return isfinite(x); }
#else
template <class T> KILN_HD_INLINE T r_fmax(T a, T b) { return std::fmax(a, b); }
template <class T> KILN_HD_INLINE T r_log(T x) { return std::log(x); }
template <class T> KILN_HD_INLINE bool r_isfinite(T x) { return std::isfinite(x); }
#endif

// ---------------------------------------------------------------- reduce.cu

/// Row k of a (outer, R, I) reduction, kind 0: sum * scale (sum, mean), 1: var, 2: std
/// (sum of squares / denom), 3: logsumexp. Thread 0 writes out[k].
template <class T, class Block>
KILN_HD_INLINE void reduce_sum_row(const Block& b, int64_t k, const T* x, T* out, int64_t R, int64_t I, int kind,
                                   double scale, double denom) {
  if (kind == 3) {  // logsumexp: max, then sum of exp(x - max)
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t r = b.thread(); r < R; r += b.size()) m = r_fmax(m, x[reduce_elem_offset(k, r, R, I)]);
    m = b.max(m);
    T s = 0;
    if (r_isfinite(m))
      for (int64_t r = b.thread(); r < R; r += b.size()) s += math::fast_exp(x[reduce_elem_offset(k, r, R, I)] - m);
    s = b.sum(s);
    if (b.thread() == 0) out[k] = math::logsumexp_finish(m, s);
    return;
  }
  T s = 0;
  for (int64_t r = b.thread(); r < R; r += b.size()) s += x[reduce_elem_offset(k, r, R, I)];
  s = b.sum(s);
  if (kind == 0) {
    if (b.thread() == 0) out[k] = T(double(s) * scale);
    return;
  }
  const T mean = T(double(s) / double(R));
  T ss = 0;
  for (int64_t r = b.thread(); r < R; r += b.size()) {
    const T d = x[reduce_elem_offset(k, r, R, I)] - mean;
    ss += d * d;
  }
  ss = b.sum(ss);
  if (b.thread() == 0) {
    const double v = R == 0 ? std::numeric_limits<double>::quiet_NaN() : double(ss) / denom;
    out[k] = T(kind == 2 ? ::sqrt(v) : v);
  }
}

/// Column sums for a reduction whose inner size I is at least a warp (sum over dim 0 of
/// (R, I): a bias gradient): columns [c0, c0 + 32) of outer slice o over the reduced rows
/// [r0, r1). Thread t reads column c0 + t % 32 at rows r0 + t / 32, + G, + 2G, ... (G =
/// size / 32 row groups), so each warp reads 32 consecutive elements of a row (coalesced,
/// where reduce_sum_row's threads walk down one column, I elements apart). The G partials
/// of a column meet in shared memory `part` (size() values) and threads t < 32 add them in
/// group order and call emit(c, total). size() must be a multiple of 32.
template <class T, class Block, class Emit>
KILN_HD_INLINE void column_sum_tile(const Block& b, T* part, const T* x, int64_t o, int64_t c0, int64_t r0,
                                    int64_t r1, int64_t R, int64_t I, Emit emit) {
  const int lane = b.thread() % 32, g = b.thread() / 32, G = b.size() / 32;
  const int64_t c = c0 + lane;
  T s = 0;
  if (c < I)
    for (int64_t r = r0 + g; r < r1; r += G) s += x[(o * R + r) * I + c];
  part[b.thread()] = s;
  b.sync();
  if (b.thread() < 32 && c < I) {
    T total = 0;
    for (int j = 0; j < G; ++j) total += part[j * 32 + lane];
    emit(c, total);
  }
  b.sync();  // part is reused by the block's next tile
}

/// How column_sum_tile's work is split: `splits` consecutive row ranges of `rows` each
/// (the last may be shorter) over `tiles` = outer * ceil(I / 32) column tiles, enough
/// blocks (tiles * splits, about `target`) to fill the GPU, each range at least 256 rows.
struct ColumnSplit {
  int64_t tiles, splits, rows;
};
KILN_HD_INLINE ColumnSplit column_split(int64_t outer, int64_t R, int64_t I, int64_t target) {
  const int64_t tiles = outer * ((I + 31) / 32);
  int64_t splits = tiles >= target ? 1 : (target + tiles - 1) / tiles;
  const int64_t most = (R + 255) / 256;
  if (splits > most) splits = most;
  if (splits < 1) splits = 1;
  const int64_t rows = (R + splits - 1) / splits;  // 0 only when R = 0 (then one empty range)
  return {tiles, rows > 0 ? (R + rows - 1) / rows : 1, rows};
}

/// A max/min candidate: value and position along the reduced dim (-1: none yet).
template <class T>
struct Best {
  T v;
  int64_t i;
};

/// The winner of two candidates: the later one (larger index) wins only when it is better
/// (ops/reduce_math.h: NaN wins, ties keep the first), so the result does not depend on
/// how the block pairs them.
template <bool IsMax, class T>
struct PickBest {
  KILN_HD_INLINE Best<T> operator()(const Best<T>& a, const Best<T>& b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const Best<T>& first = a.i < b.i ? a : b;
    const Best<T>& second = a.i < b.i ? b : a;
    return math::reduce_better<IsMax>(second.v, first.v) ? second : first;
  }
};

/// Row k of max/min/argmax/argmin (R > 0): values[k] and/or indices[k] (either may be null).
template <bool IsMax, class T, class Block>
KILN_HD_INLINE void reduce_best_row(const Block& b, int64_t k, const T* x, T* values, int64_t* indices, int64_t R,
                                    int64_t I) {
  Best<T> c{T(0), -1};
  for (int64_t r = b.thread(); r < R; r += b.size()) {  // r increases: later ones win only when better
    const T v = x[reduce_elem_offset(k, r, R, I)];
    if (c.i < 0 || math::reduce_better<IsMax>(v, c.v)) c = {v, r};
  }
  c = b.reduce(c, PickBest<IsMax, T>());
  if (b.thread() == 0) {
    if (values) values[k] = c.v;
    if (indices) indices[k] = c.i;
  }
}

/// Row k of an integer (or bool read as uint8) sum: int64 accumulator and output.
template <class T, class Block>
KILN_HD_INLINE void reduce_sum_int_row(const Block& b, int64_t k, const T* x, int64_t* out, int64_t R, int64_t I) {
  int64_t s = 0;
  for (int64_t r = b.thread(); r < R; r += b.size()) s += int64_t(x[reduce_elem_offset(k, r, R, I)]);
  s = b.sum(s);
  if (b.thread() == 0) out[k] = s;
}

/// Row k of softmax / log_softmax over the middle dim of (outer, D, I).
template <class T, class Block>
KILN_HD_INLINE void softmax_row(const Block& b, int64_t k, bool is_log, const T* x, T* y, int64_t D, int64_t I) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t r = b.thread(); r < D; r += b.size()) m = r_fmax(m, x[reduce_elem_offset(k, r, D, I)]);
  m = b.max(m);
  T s = 0;
  for (int64_t r = b.thread(); r < D; r += b.size()) s += math::fast_exp(x[reduce_elem_offset(k, r, D, I)] - m);
  s = b.sum(s);
  const T log_s = r_log(s);  // log_softmax = (x - m) - log(s): m + log(s) would round log(s) away
  for (int64_t r = b.thread(); r < D; r += b.size()) {
    const int64_t off = reduce_elem_offset(k, r, D, I);
    y[off] = is_log ? (x[off] - m) - log_s : math::fast_exp(x[off] - m) / s;
  }
}

/// Row k of the softmax / log_softmax backward from the output y and its gradient g.
template <class T, class Block>
KILN_HD_INLINE void softmax_backward_row(const Block& b, int64_t k, bool is_log, const T* y, const T* g, T* dx,
                                         int64_t D, int64_t I) {
  T s = 0;  // softmax: sum(g * y); log_softmax: sum(g)
  for (int64_t r = b.thread(); r < D; r += b.size()) {
    const int64_t off = reduce_elem_offset(k, r, D, I);
    s += is_log ? g[off] : g[off] * y[off];
  }
  s = b.sum(s);
  for (int64_t r = b.thread(); r < D; r += b.size()) {
    const int64_t off = reduce_elem_offset(k, r, D, I);
    dx[off] = is_log ? g[off] - math::fast_exp(y[off]) * s : y[off] * (g[off] - s);
  }
}

// ---------------------------------------------------------------- norm.cu

/// Row `row` of layer_norm over the last D features: out, and the saved mean and 1/std.
template <class T, class Block>
KILN_HD_INLINE void layer_norm_forward_row(const Block& b, int64_t row, const T* x, const T* w, const T* bias, T* out,
                                           T* save_mean, T* save_rstd, int64_t D, double eps) {
  const T* xr = x + row * D;
  T s = 0;
  for (int64_t d = b.thread(); d < D; d += b.size()) s += xr[d];
  const T mean = b.sum(s) / T(D);
  T ss = 0;
  for (int64_t d = b.thread(); d < D; d += b.size()) ss += (xr[d] - mean) * (xr[d] - mean);
  const T rstd = T(1.0 / ::sqrt(double(b.sum(ss)) / double(D) + eps));
  for (int64_t d = b.thread(); d < D; d += b.size())
    out[row * D + d] = (xr[d] - mean) * rstd * (w ? w[d] : T(1)) + (bias ? bias[d] : T(0));
  if (b.thread() == 0) {
    save_mean[row] = mean;
    save_rstd[row] = rstd;
  }
}

/// Row `row` of layer_norm's input gradient: dx = rstd (gw - mean(gw) - xhat mean(gw xhat)),
/// gw = g * w.
template <class T, class Block>
KILN_HD_INLINE void layer_norm_dx_row(const Block& b, int64_t row, const T* g, const T* x, const T* w, const T* mean,
                                      const T* rstd, T* dx, int64_t D) {
  const T m = mean[row], r = rstd[row];
  T a = 0, c = 0;  // sums of gw and gw * xhat
  for (int64_t d = b.thread(); d < D; d += b.size()) {
    const T gw = g[row * D + d] * (w ? w[d] : T(1));
    a += gw;
    c += gw * (x[row * D + d] - m) * r;
  }
  a = b.sum(a) / T(D);
  c = b.sum(c) / T(D);
  for (int64_t d = b.thread(); d < D; d += b.size()) {
    const T gw = g[row * D + d] * (w ? w[d] : T(1));
    dx[row * D + d] = r * (gw - a - (x[row * D + d] - m) * r * c);
  }
}

/// Channel c of batch norm's eval backward over (N, C, S): dweight = invstd sum g (x - mean),
/// dbias = sum g (either output may be null).
template <class T, class Block>
KILN_HD_INLINE void bn_eval_dwb_channel(const Block& b, int64_t c, const T* g, const T* x, const T* smean,
                                        const T* sinv, T* dw, T* db, int64_t N, int64_t C, int64_t S) {
  const T m = smean[c];
  T sg = 0, sgx = 0;
  for (int64_t j = b.thread(); j < N * S; j += b.size()) {
    const int64_t n = j / S, i = (n * C + c) * S + (j - n * S);
    sg += g[i];
    sgx += g[i] * (x[i] - m);
  }
  sg = b.sum(sg);
  sgx = b.sum(sgx);
  if (b.thread() == 0) {
    if (dw) dw[c] = sgx * sinv[c];
    if (db) db[c] = sg;
  }
}

// ---------------------------------------------------------------- loss.cu

/// Row k = n * S + s of cross_entropy's logits (N, C, S) (class c at reduce_elem_offset(k,
/// c, C, S)): the row's max, log of the sum of exp(x - max) (kept apart, see
/// CrossEntropyKernelArgs) and loss with label smoothing eps; sums in double, as the CPU.
/// X: how the logits are stored (T, or a 16-bit float read as T = float).
template <class T, class Block, class X>
KILN_HD_INLINE void cross_entropy_forward_row(const Block& b, int64_t k, const X* x, const int64_t* tg, T* loss,
                                              T* row_max, T* log_sum, int64_t C, int64_t S, int64_t ignore_index,
                                              double eps) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t c = b.thread(); c < C; c += b.size()) m = r_fmax(m, T(x[reduce_elem_offset(k, c, C, S)]));
  m = b.max(m);
  double se = 0, sx = 0;
  for (int64_t c = b.thread(); c < C; c += b.size()) {
    const T xv = T(x[reduce_elem_offset(k, c, C, S)]);
    se += double(math::fast_exp(xv - m));
    sx += double(xv);
  }
  se = b.sum(se);
  if (eps > 0) sx = b.sum(sx);
  if (b.thread() == 0) {
    const double ls = ::log(se);
    row_max[k] = m;
    log_sum[k] = T(ls);
    const int64_t t = tg[k];
    if (t == ignore_index) {
      loss[k] = T(0);
    } else {
      double v = (1.0 - eps) * (double(m) - double(T(x[reduce_elem_offset(k, t, C, S)]))) + ls;
      if (eps > 0) v += eps * (double(m) - sx / double(C));
      loss[k] = T(v);
    }
  }
}

/// Block `block` of `grid` of the reduced mse: part[block] = sum of (x - y)^2 in double
/// over i = block * B + t, + grid * B, ... (fixed by n and the grid, so deterministic).
template <class T, class Block>
KILN_HD_INLINE void mse_partial_block(const Block& b, int64_t block, int64_t grid, const T* x, const T* y,
                                      double* part, int64_t n) {
  double acc = 0;
  for (int64_t i = block * b.size() + b.thread(); i < n; i += grid * b.size()) {
    const double d = double(x[i]) - double(y[i]);
    acc += d * d;
  }
  acc = b.sum(acc);
  if (b.thread() == 0) part[block] = acc;
}

/// The one block finishing the reduced mse: out[0] = scale * sum of the np partials.
template <class T, class Block>
KILN_HD_INLINE void mse_finish_block(const Block& b, const double* part, int64_t np, T* out, double scale) {
  double acc = 0;
  for (int64_t i = b.thread(); i < np; i += b.size()) acc += part[i];
  acc = b.sum(acc);
  if (b.thread() == 0) out[0] = T(acc * scale);
}

// ---------------------------------------------------------------- nn.cu (attention)

/// Keys query row i sees: j < i + 1 when causal (top-left aligned, as the CPU), else all.
KILN_HD_INLINE int64_t keys_seen(int64_t i, int64_t Tk, bool causal) {
  return causal ? (i + 1 < Tk ? i + 1 : Tk) : Tk;
}

/// log sum_j<n exp(row[j]) over one row, by the whole block (every thread gets it).
template <class T, class Block>
KILN_HD_INLINE T row_logsumexp(const Block& b, const T* row, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = b.thread(); j < n; j += b.size()) m = r_fmax(m, row[j]);
  m = b.max(m);
  T sum = 0;
  for (int64_t j = b.thread(); j < n; j += b.size()) sum += math::fast_exp(row[j] - m);
  return m + r_log(b.sum(sum));
}

/// Row k = batch * Tq + i of the scaled scores s (B, Tq, Tk): masks the keys row i does not
/// see, turns the row into probabilities in place and saves lse[k] (lse may be null: the
/// backward's recomputation, which passes the saved lse in `given` instead when it has one).
template <class T, class Block>
KILN_HD_INLINE void attention_softmax_row(const Block& b, int64_t k, T* s, T* lse, const T* given, int64_t Tq,
                                          int64_t Tk, bool causal) {
  T* row = s + k * Tk;  // (Tk)
  const int64_t ni = keys_seen(k % Tq, Tk, causal);
  const T l = given ? given[k] : row_logsumexp(b, row, ni);
  for (int64_t j = b.thread(); j < Tk; j += b.size()) row[j] = j < ni ? math::fast_exp(row[j] - l) : T(0);
  if (lse && b.thread() == 0) lse[k] = l;
}

/// Row k of the attention backward: dsum = dout_k . out_k, then in place
/// dp (B, Tq, Tk) <- ds = p (dp - dsum) scale (the scale of s folded in).
template <class T, class Block>
KILN_HD_INLINE void attention_dscores_row(const Block& b, int64_t k, const T* p, T* dp, const T* dout, const T* out,
                                          int64_t Tk, int64_t Ev, T scale) {
  T d = 0;
  for (int64_t e = b.thread(); e < Ev; e += b.size()) d += dout[k * Ev + e] * out[k * Ev + e];
  d = b.sum(d);
  for (int64_t j = b.thread(); j < Tk; j += b.size()) {
    const int64_t o = k * Tk + j;
    dp[o] = p[o] * (dp[o] - d) * scale;
  }
}

// ---------------------------------------------------------------- conv.cu

/// dbias[o] = sum over (n, l) of dy (N, O, L), accumulated in A (float for 16-bit T).
template <class T, class A, class Block>
KILN_HD_INLINE void bias_grad_channel(const Block& b, int64_t o, const T* dy, T* db, int64_t N, int64_t O, int64_t L) {
  A s = A(0);
  for (int64_t j = b.thread(); j < N * L; j += b.size()) {
    const int64_t n = j / L, l = j - n * L;
    s += A(dy[(n * O + o) * L + l]);
  }
  s = b.sum(s);
  if (b.thread() == 0) db[o] = T(s);
}

}  // namespace kiln::cuda::rows
