// Mixed precision: the autocast scope (thread-local enabled flag + low-precision dtype) and
// the two casting helpers ops call at their top: autocast_to_low (matmul/linear/conv/attention)
// and autocast_to_fp32 (softmax, norms, losses, reductions).
#pragma once
#include <initializer_list>
#include "core/dtype.h"
#include "core/tensor.h"

namespace kiln {

/// True inside an enabled autocast scope on this thread.
bool autocast_enabled();
/// The low-precision dtype of the innermost autocast scope (bfloat16 when none).
DType autocast_dtype();
/// Sets this thread's autocast state directly (prefer the autocast scope).
void set_autocast_enabled(bool enabled);
/// dtype must be float16 or bfloat16.
void set_autocast_dtype(DType dtype);

/// RAII autocast scope (like torch.autocast): inside it, matmul/linear/conv2d/attention run
/// on 16-bit copies of float32 inputs (fp32 accumulation), while softmax, norms, losses
/// and reductions run in float32. The scope is thread-local; nesting restores the previous
/// state on exit; `autocast guard(dt, false)` disables autocast inside an enabled scope.
///   { kiln::autocast guard(kiln::DType::bfloat16); loss = cross_entropy(model(x), y); }
class autocast {
 public:
  explicit autocast(DType dtype = DType::bfloat16, bool enabled = true);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

/// Under autocast: a float32 tensor converted (differentiably, Tensor::to) to
/// autocast_dtype(); any other tensor (or autocast off, or undefined) is returned as is.
Tensor autocast_to_low(const Tensor& t);
/// Under autocast: a float16/bfloat16 tensor converted (differentiably) to float32; any
/// other tensor (or autocast off, or undefined) is returned as is.
Tensor autocast_to_fp32(const Tensor& t);

/// True under autocast when any defined tensor is float32 (autocast_to_low would cast it).
/// Ops use it for a one-line re-dispatch at their top:
///   if (autocast_wants_low({a, b})) return matmul(autocast_to_low(a), autocast_to_low(b));
bool autocast_wants_low(std::initializer_list<Tensor> ts);
/// True under autocast when any defined tensor is float16/bfloat16 (autocast_to_fp32 would
/// cast it):  if (autocast_wants_fp32({x})) return softmax(autocast_to_fp32(x), dim);
bool autocast_wants_fp32(std::initializer_list<Tensor> ts);

/// DESIGN.md spells the mixed-precision API kiln::amp (autocast here, GradScaler in
/// optim/grad_scaler.h).
namespace amp {
using ::kiln::autocast;
}  // namespace amp

}  // namespace kiln
