// Kernel types of the nn family (dropout, embedding, scaled dot-product attention). One
// table entry per op holds a struct of kernel pointers, registered per device type:
//   kernel<AttentionKernels>(Op::scaled_dot_product_attention, q.device())->forward(...)
// Buffers are contiguous unless a kernel takes layouts; `dt` is the compute dtype
// (float32 or float64 on the CPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include "kiln/core/dtype.h"
#include "kiln/core/macros.h"

namespace kiln {

struct DropoutKernels {
  /// out[i] = keep(i) ? in[i] * scale : 0 with the keep rule of ops/nn_math.h
  /// (math::dropout_keep(seed, offset, i, p)). Used for the forward (in = x) and the
  /// backward (in = dout): the mask is regenerated from (seed, offset), never stored.
  void (*apply)(DType dt, const void* in /* (n) */, void* out /* (n) */, int64_t n, float p, double scale,
                uint64_t seed, uint64_t offset);
};

struct EmbeddingKernels {
  /// out[i, :] = weight[idx[i], :] for i < n; any dtype (elem_size bytes per element).
  /// Indices are already checked to lie in [0, V).
  void (*forward)(size_t elem_size, const int64_t* idx /* (n) */, const void* weight /* (V, D) */,
                  void* out /* (n, D) */, int64_t n, int64_t D);
  /// dweight[idx[i], :] += dout[i, :] for every i with idx[i] != padding_idx, in index
  /// order (deterministic). dweight must be zeroed by the caller.
  void (*backward)(DType dt, const int64_t* idx /* (n) */, const void* dout /* (n, D) */,
                   void* dweight /* (V, D) */, int64_t n, int64_t D, int64_t padding_idx);
};

/// Where the rows of one attention operand live: row t of batch entry b = bb * H + h
/// starts at element bb * sb + h * sh + t * st, and the row itself is contiguous. A
/// contiguous (B, T, E) tensor is contiguous(T, E); the query third of a packed (B', T, 3C)
/// qkv tensor with H heads of width d = C / H is {H, T * 3C, d, 3C} (keys: the same
/// layout starting C elements later, values 2C later).
struct AttnLayout {
  int64_t H = 1, sb = 0, sh = 0, st = 0;
  KILN_HD_INLINE int64_t offset(int64_t b) const { return (b / H) * sb + (b % H) * sh; }
  KILN_HD_INLINE static AttnLayout contiguous(int64_t T, int64_t E) { return {1, T * E, 0, E}; }
};

struct AttentionKernels {
  /// For every batch b and query row i: s_j = scale q_i . k_j (j <= i when causal),
  /// p = softmax(s), out_i = sum_j p_j v_j; saves lse_i = log sum_j exp(s_j). lse has the
  /// dtype dt, except for 16-bit dt (the CPU's bfloat16 kernel, CUDA's float16 and
  /// bfloat16), where it is float32.
  void (*forward)(DType dt, const void* q /* (B, Tq, E) */, const void* k /* (B, Tk, E) */,
                  const void* v /* (B, Tk, Ev) */, void* out /* (B, Tq, Ev) */, void* lse /* (B, Tq) */, int64_t B,
                  int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal);
  /// Flash-attention style backward: probabilities are recomputed from lse row by row.
  /// Null dq / dk / dv are skipped.
  void (*backward)(DType dt, const void* q, const void* k, const void* v, const void* out, const void* lse,
                   const void* dout /* (B, Tq, Ev) */, void* dq /* (B, Tq, E) */, void* dk /* (B, Tk, E) */,
                   void* dv /* (B, Tk, Ev) */, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev,
                   double scale, bool causal);
  /// The same over operands with their own layouts (lse stays contiguous (B, Tq)); null on
  /// devices without them, where callers make the operands contiguous instead.
  void (*forward_strided)(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v,
                          AttnLayout lv, void* out, AttnLayout lout, void* lse, int64_t B, int64_t Tq, int64_t Tk,
                          int64_t E, int64_t Ev, double scale, bool causal) = nullptr;
  void (*backward_strided)(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v,
                           AttnLayout lv, const void* out, AttnLayout lout, const void* lse, const void* dout,
                           AttnLayout ldout, void* dq, AttnLayout ldq, void* dk, AttnLayout ldk, void* dv,
                           AttnLayout ldv, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, double scale,
                           bool causal) = nullptr;
};

}  // namespace kiln
