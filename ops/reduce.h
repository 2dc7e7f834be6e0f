// Reductions over any set of dims (empty = all) with keepdim, and softmax-family ops.
// dtypes: float32/float64 compute natively; float16/bfloat16 are computed in float32 and
// return the input dtype (rounded once), as PyTorch's do; under autocast softmax/log_softmax
// run on float32 inputs and return float32. Every floating op is differentiable. Negative dims count from the end.
#pragma once
#include <utility>
#include <vector>
#include "kiln/core/tensor.h"

namespace kiln {

using Dims = std::vector<int64_t>;

/// Sum over dims (all dims when empty). Integral inputs sum in int64.
/// Integer and bool inputs give an int64 result (not differentiable). Sums of float32
/// accumulate in double; the result is the same for any thread count.
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Mean over dims. Integer and bool inputs give a float32 result (e.g. accuracy =
/// mean(eq(pred, target))). An empty reduction gives NaN.
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Variance with Bessel's correction when unbiased (divides by N - 1). Two-pass (exact for
/// data with a large offset); floating inputs only. std is its square root; with
/// `using namespace kiln`, call it as kiln::std(...) (std alone names the namespace).
/// A single element with unbiased=true gives NaN, like PyTorch.
Tensor var(const Tensor& x, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
/// {var, mean} and {std, mean} over dims (torch.var_mean, std_mean).
std::pair<Tensor, Tensor> var_mean(const Tensor& x, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
std::pair<Tensor, Tensor> std_mean(const Tensor& x, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
/// The vector p-norm over dims (all when empty), torch.linalg.vector_norm: sum(|x|^ord)^(1/ord);
/// ord = inf: max |x|, -inf: min |x| (an empty reduction is an error), 0: the count of nonzero
/// entries (no gradient). Floating inputs; 16-bit computed in float32 and returned in their dtype.
/// PyTorch's gradients: 0 where the norm is 0 (its subgradient; ord 2 gives x / norm elsewhere),
/// for +-inf split evenly among the entries whose |x| equals the result. Twice differentiable.
Tensor vector_norm(const Tensor& x, double ord = 2.0, const Dims& dims = {}, bool keepdim = false);
/// Cumulative sum along dim (torch.cumsum): out[i] = x[0] + ... + x[i]. Integer and bool inputs
/// give int64; float32 accumulates in double on the CPU (as PyTorch's CPU kernel). Gradient:
/// the reversed cumulative sum of the upstream gradient.
Tensor cumsum(const Tensor& x, int64_t dim);
/// Product over dims (all when empty), torch.prod; integer and bool inputs give int64. A
/// composition (pairwise halving: mul of the two halves until one entry is left), so its
/// gradient is exact with zeros present and twice differentiable. An empty product is 1.
Tensor prod(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Cumulative product along dim (torch.cumprod; integers in int64) and log(cumsum(exp(x)))
/// computed stably (torch.logcumsumexp, floating only): compositions by a Hillis-Steele scan
/// of mul / logaddexp (log2(n) whole-tensor steps), twice differentiable, exact with zeros.
Tensor cumprod(const Tensor& x, int64_t dim);
Tensor logcumsumexp(const Tensor& x, int64_t dim);
/// sum / mean treating NaN as absent (torch.nansum, nanmean; an all-NaN mean is NaN, no
/// gradient to the NaN entries), and the count of nonzero entries over dims (int64).
Tensor nansum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor nanmean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor count_nonzero(const Tensor& x, const Dims& dims = {});
/// log(sum(exp(x))) computed stably (max-shifted), over dims (all when empty); floating only.
/// All -inf gives -inf; any +inf gives +inf. Gradient: softmax(x).
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);

struct ValuesIndices {
  Tensor values;
  Tensor indices;  ///< int64
};
/// Max / min along one dim with their (first) indices; gradient flows to the chosen element.
/// NaN counts as the largest (and smallest) value, so it propagates, like PyTorch. Integer and
/// bool inputs are supported (values keep the input dtype). The dim must not be empty.
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
/// The running max / min along dim and where it was found (torch.cummax / cummin): a later
/// entry takes over when it is >= (<=) the running one or NaN, so ties give the later index
/// and a NaN stays. Values differentiable (gathered from x); integers too.
ValuesIndices cummax(const Tensor& x, int64_t dim);
ValuesIndices cummin(const Tensor& x, int64_t dim);
/// Max / min of all elements (0-dim); the gradient is split evenly among the elements equal to
/// the result (all NaNs when it is NaN), as in PyTorch.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
/// Max / min over dims (all when empty), torch.amax / amin: NaN propagates; the gradient is
/// split evenly among the entries equal to the result.
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
/// Index (int64) of the first max / min along dim.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

/// exp(x - max) / sum(exp(x - max)) along dim (stable). -inf entries get probability 0.
/// Backward: y * (g - sum(g * y)). 16-bit inputs: computed in float32, returned in their dtype.
Tensor softmax(const Tensor& x, int64_t dim);
/// x - logsumexp(x) along dim. Backward: g - exp(y) * sum(g). 16-bit as softmax.
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace kiln
