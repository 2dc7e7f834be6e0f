// Kernel signatures of the loss family (shared by the CPU and CUDA backends): fused
// cross-entropy from logits, nll_loss over log-probabilities and mse_loss, forward and backward.
// Targets are validated by the op before the kernel runs (in [0, c) or ignore_index).
#pragma once
#include <cstdint>
#include "kiln/core/dtype.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

/// Cross entropy of logits (n, c, s) against int64 targets (n, s); s is the product of the
/// spatial dims (1 for (N, C) logits). With eps = label_smoothing, m = max_c x[c] and
/// ls = log sum_c exp(x[c] - m) (so the logsumexp is m + ls), a non-ignored element's loss is
///   (1 - eps)(m - x[t]) + eps (m - mean_c x[c]) + ls   (= (1-eps) nll + eps mean_c(-log p_c))
/// and its gradient  dx[c] = g (exp((x[c] - m) - ls) - (1 - eps) [c == t] - eps / c).
/// m and ls stay apart: rounding m + ls to float first would lose ls next to a large m
/// (logits [1e4, 1e4 - 10] would get a target-class gradient of exactly 0).
/// Ignored elements have loss 0 and gradient 0.
struct CrossEntropyKernelArgs {
  int64_t n = 0, c = 0, s = 1;
  const void* logits = nullptr;     // (n, c, s)
  const int64_t* target = nullptr;  // (n, s)
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  void* row_max = nullptr;          // (n, s) m: written by the forward, read by the backward
  void* log_sum = nullptr;          // (n, s) ls: likewise
  // forward
  void* loss = nullptr;             // (n, s) per-element loss
  // backward
  bool backward = false;
  const void* g = nullptr;          // (n, s) gradient of the per-element loss (g_stride 1), or one value (0)
  int64_t g_stride = 1;
  double scale = 1.0;               // multiplies g (1 / count for the mean)
  void* dlogits = nullptr;          // (n, c, s)
};
/// `dt` is the dtype of logits, row_max, log_sum, loss, g and dlogits (float32/float64),
/// or float16 / bfloat16: then logits and dlogits are stored in it (read widened, dlogits
/// rounded once) and row_max, log_sum, loss and g are float32.
using CrossEntropyKernelFn = void(DType dt, const CrossEntropyKernelArgs& args);

/// Negative log-likelihood of log-probabilities (n, c, s): loss = -log_probs[t] (0 where
/// ignored); backward: dlog_probs = 0 except dlog_probs[t] = -g.
struct NllLossKernelArgs {
  int64_t n = 0, c = 0, s = 1;
  const void* log_probs = nullptr;  // (n, c, s)
  const int64_t* target = nullptr;  // (n, s)
  int64_t ignore_index = -100;
  void* loss = nullptr;             // forward (n, s)
  bool backward = false;
  const void* g = nullptr;          // backward: as for cross entropy
  int64_t g_stride = 1;
  double scale = 1.0;
  void* dlog_probs = nullptr;       // (n, c, s)
};
using NllLossKernelFn = void(DType dt, const NllLossKernelArgs& args);

/// Squared error of input and target (n elements, contiguous).
/// Forward: out = (x - y)^2 per element, or (reduce) one value: scale * sum (x - y)^2.
/// Backward: d = 2 (x - y) g scale; dinput = d, dtarget = -d (either may be null).
struct MseLossKernelArgs {
  int64_t n = 0;
  const void* input = nullptr;   // (n)
  const void* target = nullptr;  // (n)
  void* out = nullptr;           // (n), or (1) when reduce
  bool reduce = false;
  double scale = 1.0;
  bool backward = false;
  const void* g = nullptr;       // (n) with g_stride 1, or one value with g_stride 0
  int64_t g_stride = 1;
  void* dinput = nullptr;        // (n)
  void* dtarget = nullptr;       // (n)
};
using MseLossKernelFn = void(DType dt, const MseLossKernelArgs& args);

}  // namespace kiln
