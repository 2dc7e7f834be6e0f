// Kernel types of the normalisation family (batch norm, layer norm). One table entry per
// op holds a struct of kernel pointers (forward/backward), registered per device type:
//   kernel<BatchNormKernels>(Op::batch_norm, x.device())->forward_train(...)
// Buffers are contiguous, in the compute dtype `dt` (float32 or float64 on the CPU). One
// exception: the CPU's batch norm kernels also take dt float16 / bfloat16, meaning the
// activations x, out, dout and dx are stored in that dtype (widened as they are read,
// rounded as they are written) and the parameters and statistics are float32.
#pragma once
#include <cstdint>
#include "kiln/core/dtype.h"

namespace kiln {

struct BatchNormKernels {
  /// Training forward: per channel c, the batch mean and biased variance over (N, S);
  /// out = (x - mean) * invstd * weight + bias. Saves mean and invstd = 1/sqrt(var + eps).
  /// When running_mean/running_var are non-null they are updated in place:
  /// r = (1 - momentum) r + momentum * stat, with the UNBIASED variance (PyTorch).
  /// weight/bias may be null (1 and 0).
  void (*forward_train)(DType dt, const void* x /* (N, C, S) */, const void* weight /* (C) */,
                        const void* bias /* (C) */, void* out /* (N, C, S) */, void* save_mean /* (C) */,
                        void* save_invstd /* (C) */, void* running_mean /* (C) */, void* running_var /* (C) */,
                        int64_t N, int64_t C, int64_t S, double momentum, double eps);
  /// Inference forward with the running stats; also writes save_mean = running_mean and
  /// save_invstd = 1/sqrt(running_var + eps) for the backward.
  void (*forward_eval)(DType dt, const void* x, const void* weight, const void* bias, const void* running_mean,
                       const void* running_var, void* out, void* save_mean, void* save_invstd, int64_t N,
                       int64_t C, int64_t S, double eps);
  /// Backward. training: dx = w invstd (g - mean(g) - xhat mean(g xhat)) over (N, S);
  /// eval: dx = g w invstd. dweight = sum(g xhat), dbias = sum(g). Null outputs are skipped.
  void (*backward)(DType dt, const void* dout /* (N, C, S) */, const void* x, const void* weight,
                   const void* save_mean, const void* save_invstd, void* dx, void* dweight, void* dbias,
                   int64_t N, int64_t C, int64_t S, bool training);
};

struct LayerNormKernels {
  /// Each of the R rows of length D: out = (x - mean) * rstd * weight + bias; saves
  /// mean and rstd = 1/sqrt(biased var + eps) per row. weight/bias (D) may be null.
  void (*forward)(DType dt, const void* x /* (R, D) */, const void* weight /* (D) */, const void* bias /* (D) */,
                  void* out /* (R, D) */, void* save_mean /* (R) */, void* save_rstd /* (R) */, int64_t R,
                  int64_t D, double eps);
  /// dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) with gw = g * weight per row;
  /// dweight = sum_rows(g xhat), dbias = sum_rows(g). Null outputs are skipped.
  void (*backward)(DType dt, const void* dout /* (R, D) */, const void* x, const void* weight,
                   const void* save_mean, const void* save_rstd, void* dx, void* dweight, void* dbias, int64_t R,
                   int64_t D);
};

}  // namespace kiln
