// Neural-network functions: dropout (elementwise and per channel), embedding lookup, scaled
// dot-product attention, interpolation (upsampling), pixel (un)shuffle, normalize, the
// distances (cosine, pairwise) and PyTorch's smaller activations (prelu, glu, celu,
// softsign, tanhshrink, softmin, hard/soft shrink, threshold), compositions of recorded ops.
#pragma once
#include <array>
#include <optional>
#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"

namespace kiln {

/// Zeroes elements with probability p and scales the rest by 1/(1-p) when training;
/// the mask comes from the global Philox generator (seeded, repeatable).
Tensor dropout(const Tensor& x, double p, bool training = true);

/// weight (V, D) rows picked by integer indices (any shape) -> (..., D). Rows equal to
/// padding_idx get no gradient; a negative one counts from the end (-1: row V - 1), as in
/// PyTorch.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

/// softmax(q k^T / sqrt(d) [+ causal mask]) v for q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false);

/// PyTorch's other keywords of F.scaled_dot_product_attention.
struct AttentionOptions {
  /// bool: true where a query may attend to a key; float: added to the scores. Broadcasts to
  /// (..., Tq, Tk). Not together with is_causal (PyTorch refuses it too).
  Tensor attn_mask{};
  double dropout_p = 0.0;       ///< dropout on the attention weights, applied whenever > 0 (as PyTorch's)
  bool is_causal = false;       ///< query i attends to keys <= i (top-left aligned when Tq != Tk)
  std::optional<double> scale{};  ///< the scores' factor; 1 / sqrt(d) when unset
};
/// With a mask, dropout or another scale this is the composition softmax(q k^T * scale
/// (+ mask)) v (its (..., Tq, Tk) weights in memory; the fused kernels otherwise). A row
/// whose keys are all masked gives zeros, as PyTorch's.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o);

/// Multi-head self-attention over a packed projection, what nn::MultiheadAttention runs:
/// qkv (B, T, 3C) holds q, k and v side by side on the last dim, each C = num_heads x d
/// with head h in columns [h d, (h + 1) d). Returns (B, T, C), the heads' outputs side by
/// side. The same values as splitting qkv, moving the heads to (B, H, T, d), calling
/// scaled_dot_product_attention and merging back; on the CPU one kernel reads the heads in
/// place and writes d(qkv) directly (no split, no transposed copies, no zero-filled slice
/// gradients); on other devices it runs that composition.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t num_heads, bool causal = false);

/// How interpolate fills in values: the nearest input pixel (PyTorch's "nearest", the
/// index floor(dst * r), or "nearest-exact", floor((dst + 0.5) r)), bilinear weights of the
/// four around it ("linear" for (N, C, L) inputs), PyTorch's bicubic (cubic convolution with
/// A = -0.75 over 4 x 4 pixels, edges clamped), or "area" (adaptive average pooling).
enum class InterpolateMode { nearest, bilinear, bicubic, nearest_exact, area, linear };
struct InterpolateOptions {
  IntPair size{0, 0};               ///< output (H', W'); or, when 0, from scale_factor
  std::array<double, 2> scale_factor{0.0, 0.0};
  InterpolateMode mode = InterpolateMode::nearest;
  /// bilinear: corner pixels' centres aligned (source = dst * (in - 1) / (out - 1)) instead
  /// of the half-pixel rule (source = (dst + 0.5) * in / out - 0.5, PyTorch's default).
  bool align_corners = false;
};
/// Resizes the spatial dims of x (N, C, H, W), or the length of (N, C, L) given as the
/// options' first entries (PyTorch's F.interpolate / nn.Upsample), with
/// PyTorch's index rules: an axis whose size does not change is copied; nearest takes source
/// dst / 2 at twice the size, else floor(dst * r) with r = in / out (1 / scale_factor when one
/// is given) in float32 (PyTorch's float32 results exactly; for float64 tensors PyTorch 2.15
/// picks the next pixel at a few positions, e.g. 25 of 561 (size, factor) pairs tried).
/// Composed of index_select and arithmetic, so it is differentiable.
Tensor interpolate(const Tensor& x, InterpolateOptions options);

/// x / max(||x||_p, eps) along dim (torch.nn.functional.normalize): unit vectors along dim.
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);

/// Cosine of the angle between x1 and x2 along dim (torch.nn.functional.cosine_similarity):
/// sum((x1 / max(||x1||, eps)) (x2 / max(||x2||, eps))) over dim, the inputs broadcast together.
/// As PyTorch, the clamp to eps does not enter the gradient (a norm below eps still passes its
/// gradient). Integer inputs beside a floating one take its dtype.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);

/// ||x1 - x2 + eps||_p over the last dim (torch.nn.functional.pairwise_distance).
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);

/// Zeroes whole channels with probability p and scales the rest by 1/(1-p) when training
/// (PyTorch's dropout1d/2d/3d): x is (N, C, *spatial) or unbatched (C, *spatial) with
/// `spatial_dims` spatial dims (1, 2 or 3); the mask is drawn per (sample, channel).
Tensor feature_dropout(const Tensor& x, double p, bool training, int64_t spatial_dims);

/// (N, C r^2, H, W) -> (N, C, H r, W r): channels rearranged into r x r blocks (PyTorch's
/// pixel_shuffle, the sub-pixel upsampling of ESPCN); any number of leading dims. And back.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

/// Sliding blocks (PyTorch's F.unfold, im2col): x (N, C, H, W) -> (N, C kh kw, L), L the
/// number of block positions; column c kh kw + i kw + j holds the block's (i, j) entry of
/// channel c. fold (F.fold, col2im) sums such columns back into (N, C, H, W) =
/// output_size, overlapping entries added. Unbatched inputs (no N) too. Differentiable
/// (index_select / index_add along the flattened padded plane).
struct FoldArgs {
  std::array<int64_t, 2> kernel_size{1, 1};
  std::array<int64_t, 2> dilation{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> stride{1, 1};
};
Tensor unfold(const Tensor& x, const FoldArgs& a);
Tensor fold(const Tensor& x, std::array<int64_t, 2> output_size, const FoldArgs& a);
/// y = x1^T W x2 + b per output feature (PyTorch's F.bilinear): x1 (..., in1), x2 (..., in2),
/// weight (out, in1, in2), bias (out) or undefined.
Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias = {});
/// x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta, the window centred
/// and zero-padded (PyTorch's F.local_response_norm, AlexNet's LRN); x is (N, C, ...).
Tensor local_response_norm(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);
/// The channels of x (N, C, ...) regrouped: (N, g, C / g, ...) transposed to (N, C / g, g, ...)
/// (PyTorch's F.channel_shuffle, ShuffleNet's).
Tensor channel_shuffle(const Tensor& x, int64_t groups);
enum class EmbeddingBagMode { sum, mean, max };
/// Reduced embeddings of bags of indices (PyTorch's F.embedding_bag): indices 2-D (B, L):
/// each row a bag; or 1-D with `offsets` (the start of each bag; include_last_offset: the
/// last entry ends the last bag). -> (B, D). sum (optionally weighted per index by
/// per_sample_weights, indices' shape), mean, or max (gradient to the chosen row); an empty
/// bag gives zeros; indices equal to padding_idx are left out. Differentiable in weight.
struct EmbeddingBagArgs {
  Tensor offsets{};
  EmbeddingBagMode mode = EmbeddingBagMode::mean;
  Tensor per_sample_weights{};
  bool include_last_offset = false;
  std::optional<int64_t> padding_idx{};
};
Tensor embedding_bag(const Tensor& indices, const Tensor& weight, const EmbeddingBagArgs& a = {});

enum class GridSampleMode { bilinear, nearest };
enum class GridSamplePadding { zeros, border, reflection };
/// Samples input (N, C, H, W) at the points of grid (N, Ho, Wo, 2), (x, y) in [-1, 1] from
/// the left/top to the right/bottom edge (PyTorch's F.grid_sample, 2-D): bilinear or nearest
/// (half to even), outside points read as zeros, the border, or the image reflected;
/// align_corners: -1 and 1 are the corner pixels' centres (else their outer edges). ->
/// (N, C, Ho, Wo). Differentiable in input and (bilinear) in grid, with PyTorch's gradients.
Tensor grid_sample(const Tensor& input, const Tensor& grid, GridSampleMode mode = GridSampleMode::bilinear,
                   GridSamplePadding padding = GridSamplePadding::zeros, bool align_corners = false);
/// The sampling grid of 2-D affine maps theta (N, 2, 3) for an output of size (N, C, H, W)
/// (PyTorch's F.affine_grid): (N, H, W, 2), differentiable in theta.
Tensor affine_grid(const Tensor& theta, const Shape& size, bool align_corners = false);

/// x where x > 0, weight * x elsewhere (PyTorch's prelu): weight has 1 element or one per
/// channel (x.size(1)); inputs of fewer than 2 dims have one channel.
Tensor prelu(const Tensor& x, const Tensor& weight);
/// a * sigmoid(b) with a, b the two halves of x along dim (PyTorch's glu); that size must be even.
Tensor glu(const Tensor& x, int64_t dim = -1);
/// x where x > 0, alpha (exp(x / alpha) - 1) elsewhere (PyTorch's celu; alpha != 0).
Tensor celu(const Tensor& x, double alpha = 1.0);
/// x / (1 + |x|).
Tensor softsign(const Tensor& x);
/// x - tanh(x).
Tensor tanhshrink(const Tensor& x);
/// softmax(-x, dim).
Tensor softmin(const Tensor& x, int64_t dim);
/// 0 where -lambd <= x <= lambd, x elsewhere (NaN stays NaN).
Tensor hardshrink(const Tensor& x, double lambd = 0.5);
/// x - lambd above lambd, x + lambd below -lambd, 0 between (lambd >= 0).
Tensor softshrink(const Tensor& x, double lambd = 0.5);
/// x where x > threshold, value elsewhere (PyTorch's threshold).
Tensor threshold(const Tensor& x, double threshold, double value);
/// Randomized leaky ReLU (PyTorch's rrelu): in training each negative entry is scaled by its
/// own slope drawn from U(lower, upper) (the gradient by the same slope); in evaluation it is
/// leaky_relu with the mean slope (lower + upper) / 2.
Tensor rrelu(const Tensor& x, double lower = 1.0 / 8, double upper = 1.0 / 3, bool training = false);

}  // namespace kiln
