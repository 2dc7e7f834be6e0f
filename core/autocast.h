// Mixed precision: the autocast scope (thread-local enabled flag + low-precision dtype) and
// the two casting helpers ops call at their top: autocast_to_low (matmul/linear/conv/attention)
// and autocast_to_fp32 (softmax, layer_norm, losses, reductions).
#pragma once
#include <optional>
#include <tuple>
#include <initializer_list>
#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

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
/// on 16-bit copies of float32 inputs (fp32 accumulation), while softmax, layer_norm, losses
/// and reductions run in float32; other ops (batch_norm, elementwise, pooling) run in their
/// inputs' dtype. The scope is thread-local; nesting restores the previous
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

/// Under autocast: a float32 tensor, or one of the other 16-bit dtype, converted
/// (differentiably, Tensor::to) to autocast_dtype(), as PyTorch's autocast casts every
/// floating tensor but float64 (so float16 x beside float32 w runs in bfloat16 under
/// autocast(bfloat16)); any other tensor (or autocast off, or undefined) is returned as is.
Tensor autocast_to_low(const Tensor& t);
/// Under autocast: a float16/bfloat16 tensor converted (differentiably) to float32; any
/// other tensor (or autocast off, or undefined) is returned as is.
Tensor autocast_to_fp32(const Tensor& t);

/// True under autocast when autocast_to_low would cast any of the tensors.
bool autocast_wants_low(std::initializer_list<Tensor> ts);
/// True under autocast when any defined tensor is float16/bfloat16 (autocast_to_fp32 would
/// cast it).
bool autocast_wants_fp32(std::initializer_list<Tensor> ts);

enum class AutocastTo { low, fp32 };

/// An op's autocast policy, called first thing in the op: when autocast applies to one of
/// `ts`, casts them (to the autocast dtype, or to float32), then runs op(cast tensors...)
/// with autocast off (so the op's own 16-bit path does not re-enter autocast) and returns
/// its result; otherwise returns nullopt and the op runs normally.
///   if (auto r = autocast_op(AutocastTo::low, [&](const Tensor& a2, const Tensor& b2) {
///         return matmul(a2, b2); }, a, b)) return *r;
template <class F, class... Ts>
std::optional<Tensor> autocast_op(AutocastTo to, F&& op, const Ts&... ts) {
  const bool wants = to == AutocastTo::low ? autocast_wants_low({ts...}) : autocast_wants_fp32({ts...});
  if (!wants) return std::nullopt;
  auto cast = [to](const Tensor& t) { return to == AutocastTo::low ? autocast_to_low(t) : autocast_to_fp32(t); };
  std::tuple<decltype(cast(ts))...> casted{cast(ts)...};  // cast while autocast is still on
  autocast off(autocast_dtype(), false);
  return std::apply(op, casted);
}

/// DESIGN.md spells the mixed-precision API kiln::amp (autocast here, GradScaler in
/// optim/grad_scaler.h).
namespace amp {
using ::kiln::autocast;
}  // namespace amp

}  // namespace kiln
