// Standard layers as modules: Linear, Conv1d/2d, pooling, BatchNorm1d/2d, LayerNorm,
// Embedding, Dropout, activations, Flatten, Identity. Each holds its parameters as
// registered Tensor handles and initialises them like PyTorch (reset_parameters()).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include "kiln/nn/module.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/nn_functional.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::nn {

/// A pair of sizes (height, width) that also accepts one number for both:
/// `.stride = 2` or `.stride = {2, 1}`.
struct Int2 {
  int64_t h = 0, w = 0;
  Int2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit by design
  Int2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  operator IntPair() const { return {h, w}; }
  bool operator==(const Int2&) const = default;
};

// ---------------------------------------------------------------- Linear

struct LinearOptions {
  bool bias = true;
};
/// y = x W^T + b for x (..., in_features) -> (..., out_features).
/// W (out, in) and b (out) ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's default).
class Linear : public Module {
 public:
  /// An empty handle, to be assigned from register_module(...).
  Linear() = default;
  Linear(int64_t in_features, int64_t out_features, LinearOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;

  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features), undefined when bias = false
  int64_t in_features = 0, out_features = 0;
};

// ---------------------------------------------------------------- Conv2d

struct Conv2dOptions {
  Int2 stride = 1;
  Int2 padding = 0;
  Int2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
/// 2-D convolution over (N, C, H, W):  nn::Conv2d(1, 32, 3, {.stride = 1, .padding = 1, .bias = false}).
/// Weight (out, in/groups, kH, kW) and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
class Conv2d : public Module {
 public:
  Conv2d() = default;
  Conv2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, Conv2dOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;

  Tensor weight;  // (out_channels, in_channels / groups, kH, kW)
  Tensor bias;    // (out_channels) or undefined
  int64_t in_channels = 0, out_channels = 0;
  Int2 kernel_size = 1;
  Conv2dOptions options;
};

struct ConvTranspose2dOptions {
  Int2 stride = 1;
  Int2 padding = 0;
  Int2 output_padding = 0;
  Int2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
/// Transposed 2-D convolution (kiln::conv_transpose2d), the upsampling layer of decoders
/// and GAN generators: nn::ConvTranspose2d(64, 32, 4, {.stride = 2, .padding = 1}) doubles
/// H and W. Weight (in, out/groups, kH, kW) and bias initialised as PyTorch does.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d() = default;
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Int2 kernel_size, ConvTranspose2dOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;

  Tensor weight;  // (in_channels, out_channels / groups, kH, kW)
  Tensor bias;    // (out_channels) or undefined
  int64_t in_channels = 0, out_channels = 0;
  Int2 kernel_size = 1;
  ConvTranspose2dOptions options;
};

/// nn.Upsample: kiln::interpolate with fixed options, e.g.
/// nn::Upsample({.scale_factor = {2, 2}, .mode = InterpolateMode::bilinear}).
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions o = {.scale_factor = {2.0, 2.0}}) : options(o) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, options); }
  std::string extra_repr() const override;
  InterpolateOptions options;
};

// ---------------------------------------------------------------- pooling

struct MaxPool2dOptions {
  Int2 stride = 0;  ///< 0 means stride = kernel_size
  Int2 padding = 0;
  Int2 dilation = 1;
  bool ceil_mode = false;
};
class MaxPool2d : public Module {
 public:
  MaxPool2d(Int2 kernel_size = 2, MaxPool2dOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Int2 kernel_size;
  MaxPool2dOptions options;
};

struct AvgPool2dOptions {
  Int2 stride = 0;  ///< 0 means stride = kernel_size
  Int2 padding = 0;
  bool count_include_pad = true;
  bool ceil_mode = false;
};
class AvgPool2d : public Module {
 public:
  AvgPool2d(Int2 kernel_size = 2, AvgPool2dOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Int2 kernel_size;
  AvgPool2dOptions options;
};

/// Average pooling to a fixed (H, W) output size.
class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(Int2 output_size = 1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Int2 output_size;
};

/// Max pooling to a fixed (H, W) output size (kiln::adaptive_max_pool2d).
class AdaptiveMaxPool2d : public Module {
 public:
  AdaptiveMaxPool2d(Int2 output_size = 1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Int2 output_size;
};

// ---------------------------------------------------------------- 1-D convolution and pooling

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
/// 1-D convolution over (N, C, L) (kiln::conv1d): nn::Conv1d(16, 32, 3, {.padding = 1}).
/// Weight (out, in/groups, K) and bias initialised as PyTorch does.
class Conv1d : public Module {
 public:
  Conv1d() = default;
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;

  Tensor weight;  // (out_channels, in_channels / groups, K)
  Tensor bias;    // (out_channels) or undefined
  int64_t in_channels = 0, out_channels = 0, kernel_size = 1;
  Conv1dOptions options;
};

struct MaxPool1dOptions {
  int64_t stride = 0;  ///< 0 means stride = kernel_size
  int64_t padding = 0;
  int64_t dilation = 1;
  bool ceil_mode = false;
};
class MaxPool1d : public Module {
 public:
  MaxPool1d(int64_t kernel_size = 2, MaxPool1dOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t kernel_size;
  MaxPool1dOptions options;
};

struct AvgPool1dOptions {
  int64_t stride = 0;  ///< 0 means stride = kernel_size
  int64_t padding = 0;
  bool count_include_pad = true;
  bool ceil_mode = false;
};
class AvgPool1d : public Module {
 public:
  AvgPool1d(int64_t kernel_size = 2, AvgPool1dOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t kernel_size;
  AvgPool1dOptions options;
};

// ---------------------------------------------------------------- normalisation

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;          ///< running = (1 - momentum) * running + momentum * batch
  bool affine = true;             ///< learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;
};
/// Shared implementation of BatchNorm1d / BatchNorm2d. Buffers: running_mean (zeros),
/// running_var (ones), num_batches_tracked (int64 scalar, +1 per training forward).
/// Training uses batch statistics and updates the running ones; eval uses the running ones.
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  /// Zeroes the running statistics (mean 0, var 1, count 0).
  void reset_running_stats();
  std::string extra_repr() const override;

  Tensor weight, bias;                                      // (C) or undefined
  Tensor running_mean, running_var, num_batches_tracked;    // (C), (C), () int64
  int64_t num_features = 0;
  BatchNormOptions options;

 protected:
  BatchNormBase() = default;
  BatchNormBase(int64_t num_features, BatchNormOptions o);
  virtual void check_input(const Tensor& x) const = 0;
};
/// Batch norm over (N, C) or (N, C, L).
class BatchNorm1d : public BatchNormBase {
 public:
  BatchNorm1d() = default;
  BatchNorm1d(int64_t num_features, BatchNormOptions o = {}) : BatchNormBase(num_features, o) {}
 protected:
  void check_input(const Tensor& x) const override;
};
/// Batch norm over (N, C, H, W).
class BatchNorm2d : public BatchNormBase {
 public:
  BatchNorm2d() = default;
  BatchNorm2d(int64_t num_features, BatchNormOptions o = {}) : BatchNormBase(num_features, o) {}
 protected:
  void check_input(const Tensor& x) const override;
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  ///< learnable weight (ones)
  bool bias = true;                ///< learnable bias (zeros), when elementwise_affine
};
/// Normalises over the trailing dims `normalized_shape`.
class LayerNorm : public Module {
 public:
  LayerNorm() = default;
  LayerNorm(int64_t normalized_dim, LayerNormOptions o = {}) : LayerNorm(Shape{normalized_dim}, o) {}
  LayerNorm(Shape normalized_shape, LayerNormOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;

  Tensor weight, bias;  // normalized_shape, or undefined
  Shape normalized_shape;
  LayerNormOptions options;
};

struct RMSNormOptions {
  /// Added to mean(x^2); unset (the default, as torch.nn.RMSNorm's eps=None): the machine
  /// epsilon of the input's dtype (float32 2^-23, float64 2^-52, float16 2^-10, bfloat16 2^-7).
  std::optional<double> eps = std::nullopt;
  bool elementwise_affine = true;  ///< learnable weight (ones)
};
/// Root-mean-square normalisation over the trailing dims `normalized_shape` (LLaMA's
/// norm; torch.nn.RMSNorm): y = x / sqrt(mean(x^2) + eps) * weight. No mean subtracted,
/// no bias. Composed of ops, so its gradient comes from autograd.
class RMSNorm : public Module {
 public:
  RMSNorm() = default;
  RMSNorm(int64_t normalized_dim, RMSNormOptions o = {}) : RMSNorm(Shape{normalized_dim}, o) {}
  RMSNorm(Shape normalized_shape, RMSNormOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;

  Tensor weight;  // normalized_shape, or undefined
  Shape normalized_shape;
  RMSNormOptions options;
};

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  ///< learnable per-channel weight (ones) and bias (zeros)
};
/// Normalises each group of num_channels / num_groups channels of each sample (kiln::group_norm;
/// torch.nn.GroupNorm): input (N, C, ...).
class GroupNorm : public Module {
 public:
  GroupNorm() = default;
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;

  Tensor weight, bias;  // (num_channels), or undefined
  int64_t num_groups = 0, num_channels = 0;
  GroupNormOptions options;
};

struct InstanceNormOptions {
  double eps = 1e-5;
  bool affine = false;  ///< learnable per-channel weight (ones) and bias (zeros); PyTorch's default off
  /// running_mean / running_var buffers (and num_batches_tracked, which PyTorch registers and
  /// never advances for instance norm): updated in training, used in evaluation
  bool track_running_stats = false;
  /// the running statistics' update weight; none: 0 (PyTorch passes 0 for momentum=None)
  std::optional<double> momentum = 0.1;
};
/// Normalises each channel of each sample over its positions (torch.nn.InstanceNorm1d/2d/3d):
/// group_norm with one channel per group, through kiln::instance_norm. By default (PyTorch's
/// track_running_stats=False) batch statistics in training and evaluation; with
/// track_running_stats the running statistics are updated in training and normalise in
/// evaluation. Input (N, C, L) or (C, L) for 1d, (N, C, H, W) or (C, H, W) for 2d, (N, C, D,
/// H, W) or (C, D, H, W) for 3d.
class InstanceNorm : public GroupNorm {
 public:
  InstanceNorm() = default;
  InstanceNorm(int64_t spatial_dims, int64_t num_features, InstanceNormOptions o);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t spatial_dims = 0;  // num_features is num_channels (= num_groups)
  InstanceNormOptions instance_options;
  Tensor running_mean, running_var, num_batches_tracked;  // with track_running_stats
};
class InstanceNorm1d : public InstanceNorm {
 public:
  InstanceNorm1d(int64_t num_features, InstanceNormOptions o = {}) : InstanceNorm(1, num_features, o) {}
};
class InstanceNorm2d : public InstanceNorm {
 public:
  InstanceNorm2d(int64_t num_features, InstanceNormOptions o = {}) : InstanceNorm(2, num_features, o) {}
};
class InstanceNorm3d : public InstanceNorm {
 public:
  InstanceNorm3d(int64_t num_features, InstanceNormOptions o = {}) : InstanceNorm(3, num_features, o) {}
};

// ---------------------------------------------------------------- Embedding

struct EmbeddingOptions {
  /// Row that gets no gradient and starts at zero; negative counts from the end.
  std::optional<int64_t> padding_idx;
};
/// Lookup table: integer indices (any shape) -> (..., embedding_dim). Weight ~ N(0, 1).
class Embedding : public Module {
 public:
  Embedding() = default;
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions o = {});
  Tensor forward(const Tensor& indices) override;
  void reset_parameters() override;
  std::string extra_repr() const override;

  Tensor weight;  // (num_embeddings, embedding_dim)
  int64_t num_embeddings = 0, embedding_dim = 0;
  int64_t padding_idx = -1;  ///< resolved (non-negative) index, or -1 for none
};

// ---------------------------------------------------------------- elementwise

/// Zeroes elements with probability p and scales by 1/(1-p) in training; identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double p;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};
class GELU : public Module {
 public:
  explicit GELU(GeluApprox approx = GeluApprox::none) : approx(approx) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approx); }
  std::string extra_repr() const override;
  GeluApprox approx;
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};
class Softplus : public Module {
 public:
  Tensor forward(const Tensor& x) override { return softplus(x); }
};
class LogSigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return log_sigmoid(x); }
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string extra_repr() const override { return "negative_slope=" + std::to_string(negative_slope); }
  double negative_slope;
};
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override { return elu(x, alpha); }
  std::string extra_repr() const override { return "alpha=" + std::to_string(alpha); }
  double alpha;
};
class SELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return selu(x); }
};
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0) : min_val(min_val), max_val(max_val) {}
  Tensor forward(const Tensor& x) override { return hardtanh(x, min_val, max_val); }
  std::string extra_repr() const override {
    return "min_val=" + std::to_string(min_val) + ", max_val=" + std::to_string(max_val);
  }
  double min_val, max_val;
};
class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu6(x); }
};
class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardsigmoid(x); }
};
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardswish(x); }
};
/// softmax / log_softmax over one dim.
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return softmax(x, dim); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return log_softmax(x, dim); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};
/// Cosine similarity of two inputs along dim (kiln::cosine_similarity).
class CosineSimilarity : public Module {
 public:
  explicit CosineSimilarity(int64_t dim = 1, double eps = 1e-8) : dim(dim), eps(eps) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& x1, const Tensor& x2) const { return cosine_similarity(x1, x2, dim, eps); }
  Tensor operator()(const Tensor& x1, const Tensor& x2) const { return forward(x1, x2); }
  std::string extra_repr() const override;
  int64_t dim;
  double eps;
};
/// p-norm distance of two inputs over the last dim (kiln::pairwise_distance).
class PairwiseDistance : public Module {
 public:
  explicit PairwiseDistance(double p = 2.0, double eps = 1e-6, bool keepdim = false)
      : p(p), eps(eps), keepdim(keepdim) {}
  using Module::forward;
  using Module::operator();
  Tensor forward(const Tensor& x1, const Tensor& x2) const { return pairwise_distance(x1, x2, p, eps, keepdim); }
  Tensor operator()(const Tensor& x1, const Tensor& x2) const { return forward(x1, x2); }
  std::string extra_repr() const override;
  double p, eps;
  bool keepdim;
};
/// Returns its input.
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};
/// Flattens dims start_dim..end_dim (default: all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};


// ---- PyTorch's smaller activations, channel dropout, pixel shuffle, unflatten, padding ----

/// x where x > 0, a learned slope times x elsewhere: one slope (num_parameters = 1) or one per
/// channel (input dim 1), initialised to `init` (torch.nn.PReLU).
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override { return prelu(x, param(weight)); }
  void reset_parameters() override;
  std::string extra_repr() const override { return "num_parameters=" + std::to_string(num_parameters); }
  Tensor weight;
  int64_t num_parameters;
  double init;
};
class GLU : public Module {
 public:
  explicit GLU(int64_t dim = -1) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return glu(x, dim); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};
class CELU : public Module {
 public:
  explicit CELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override { return celu(x, alpha); }
  std::string extra_repr() const override { return "alpha=" + std::to_string(alpha); }
  double alpha;
};
class Softsign : public Module {
 public:
  Tensor forward(const Tensor& x) override { return softsign(x); }
};
class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return mish(x); }
};
/// rrelu: random negative slopes from U(lower, upper) in training, their mean in evaluation.
class RReLU : public Module {
 public:
  explicit RReLU(double lower = 1.0 / 8, double upper = 1.0 / 3) : lower(lower), upper(upper) {}
  Tensor forward(const Tensor& x) override { return rrelu(x, lower, upper, is_training()); }
  std::string extra_repr() const override { return "lower=" + std::to_string(lower) + ", upper=" + std::to_string(upper); }
  double lower, upper;
};
class Tanhshrink : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanhshrink(x); }
};
class Softmin : public Module {
 public:
  explicit Softmin(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return softmin(x, dim); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};
class Hardshrink : public Module {
 public:
  explicit Hardshrink(double lambd = 0.5) : lambd(lambd) {}
  Tensor forward(const Tensor& x) override { return hardshrink(x, lambd); }
  std::string extra_repr() const override { return "lambd=" + std::to_string(lambd); }
  double lambd;
};
class Softshrink : public Module {
 public:
  explicit Softshrink(double lambd = 0.5) : lambd(lambd) {}
  Tensor forward(const Tensor& x) override { return softshrink(x, lambd); }
  std::string extra_repr() const override { return "lambd=" + std::to_string(lambd); }
  double lambd;
};
class Threshold : public Module {
 public:
  Threshold(double threshold, double value) : threshold(threshold), value(value) {}
  Tensor forward(const Tensor& x) override { return kiln::threshold(x, threshold, value); }
  std::string extra_repr() const override;
  double threshold, value;
};

/// Zeroes whole channels with probability p in training (torch.nn.Dropout1d/2d/3d):
/// input (N, C, *spatial) or (C, *spatial) with D = 1, 2 or 3 spatial dims.
template <int D>
class FeatureDropout : public Module {
 public:
  explicit FeatureDropout(double p = 0.5) : p(p) {
    KILN_CHECK(p >= 0 && p <= 1, "Dropout", D, "d: p must be in [0, 1], got ", p);
  }
  Tensor forward(const Tensor& x) override { return feature_dropout(x, p, is_training(), D); }
  std::string extra_repr() const override { return "p=" + std::to_string(p); }
  double p;
};
using Dropout1d = FeatureDropout<1>;
using Dropout2d = FeatureDropout<2>;
using Dropout3d = FeatureDropout<3>;

class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(int64_t upscale_factor) : upscale_factor(upscale_factor) {}
  Tensor forward(const Tensor& x) override { return pixel_shuffle(x, upscale_factor); }
  std::string extra_repr() const override { return "upscale_factor=" + std::to_string(upscale_factor); }
  int64_t upscale_factor;
};
class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor) : downscale_factor(downscale_factor) {}
  Tensor forward(const Tensor& x) override { return pixel_unshuffle(x, downscale_factor); }
  std::string extra_repr() const override { return "downscale_factor=" + std::to_string(downscale_factor); }
  int64_t downscale_factor;
};

/// Splits dim into `sizes` (one of them may be -1), the inverse of Flatten (torch.nn.Unflatten).
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, Shape sizes) : dim(dim), sizes(std::move(sizes)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  int64_t dim;
  Shape sizes;
};

struct Conv3dOptions {
  IntTriple stride{1, 1, 1};
  IntTriple padding{0, 0, 0};
  IntTriple dilation{1, 1, 1};
  int64_t groups = 1;
  bool bias = true;
};
/// 3-D convolution over (N, C, D, H, W) (kiln::conv3d): nn::Conv3d(3, 16, {3, 3, 3}, {.padding = {1, 1, 1}}).
/// Weight (out, in/groups, kD, kH, kW) and bias initialised as PyTorch does.
class Conv3d : public Module {
 public:
  Conv3d() = default;
  Conv3d(int64_t in_channels, int64_t out_channels, IntTriple kernel_size, Conv3dOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_channels = 0, out_channels = 0;
  IntTriple kernel_size{1, 1, 1};
  Conv3dOptions options;
};

struct ConvTranspose1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  int64_t dilation = 1;
};
/// Transposed 1-D convolution (kiln::conv_transpose1d). Weight (in, out/groups, K).
class ConvTranspose1d : public Module {
 public:
  ConvTranspose1d() = default;
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTranspose1dOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_channels = 0, out_channels = 0, kernel_size = 1;
  ConvTranspose1dOptions options;
};

/// torch.nn.MaxPool3d / AvgPool3d (kiln::max_pool3d / avg_pool3d; stride 0 = kernel).
class MaxPool3d : public Module {
 public:
  explicit MaxPool3d(IntTriple kernel_size, IntTriple stride = {0, 0, 0}, IntTriple padding = {0, 0, 0},
                     IntTriple dilation = {1, 1, 1})
      : kernel_size(kernel_size), stride(stride), padding(padding), dilation(dilation) {}
  Tensor forward(const Tensor& x) override { return max_pool3d(x, kernel_size, stride, padding, dilation); }
  IntTriple kernel_size, stride, padding, dilation;
};
class AvgPool3d : public Module {
 public:
  explicit AvgPool3d(IntTriple kernel_size, IntTriple stride = {0, 0, 0}, IntTriple padding = {0, 0, 0},
                     bool count_include_pad = true)
      : kernel_size(kernel_size), stride(stride), padding(padding), count_include_pad(count_include_pad) {}
  Tensor forward(const Tensor& x) override { return avg_pool3d(x, kernel_size, stride, padding, count_include_pad); }
  IntTriple kernel_size, stride, padding;
  bool count_include_pad;
};
/// torch.nn.LPPool1d / LPPool2d (kiln::lp_pool1d / lp_pool2d): (sum of x^p over each window)^(1/p);
/// stride 0 = kernel, as PyTorch's stride=None.
class LPPool1d : public Module {
 public:
  LPPool1d(double norm_type, int64_t kernel_size, int64_t stride = 0, bool ceil_mode = false)
      : norm_type(norm_type), kernel_size(kernel_size), stride(stride), ceil_mode(ceil_mode) {}
  Tensor forward(const Tensor& x) override { return lp_pool1d(x, norm_type, kernel_size, stride, ceil_mode); }
  double norm_type;
  int64_t kernel_size, stride;
  bool ceil_mode;
};
class LPPool2d : public Module {
 public:
  LPPool2d(double norm_type, Int2 kernel_size, Int2 stride = 0, bool ceil_mode = false)
      : norm_type(norm_type), kernel_size(kernel_size), stride(stride), ceil_mode(ceil_mode) {}
  Tensor forward(const Tensor& x) override {
    return lp_pool2d(x, norm_type, {kernel_size.h, kernel_size.w}, {stride.h, stride.w}, ceil_mode);
  }
  double norm_type;
  Int2 kernel_size, stride;
  bool ceil_mode;
};
/// torch.nn.AdaptiveAvgPool3d / AdaptiveMaxPool3d (kiln::adaptive_avg_pool3d / adaptive_max_pool3d):
/// AdaptiveAvgPool3d({1, 1, 1}) is a video or volume classifier's global pooling.
class AdaptiveAvgPool3d : public Module {
 public:
  explicit AdaptiveAvgPool3d(IntTriple output_size = {1, 1, 1}) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool3d(x, output_size); }
  IntTriple output_size;
};
class AdaptiveMaxPool3d : public Module {
 public:
  explicit AdaptiveMaxPool3d(IntTriple output_size = {1, 1, 1}) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_max_pool3d(x, output_size); }
  IntTriple output_size;
};
struct ConvTranspose3dOptions {
  IntTriple stride{1, 1, 1};
  IntTriple padding{0, 0, 0};
  IntTriple output_padding{0, 0, 0};
  IntTriple dilation{1, 1, 1};
  int64_t groups = 1;
  bool bias = true;
};
/// torch.nn.ConvTranspose3d (kiln::conv_transpose3d): weight (in, out / groups, kD, kH, kW);
/// nn::ConvTranspose3d(32, 16, {2, 2, 2}, {.stride = {2, 2, 2}}) doubles D, H and W, as in a
/// 3-D U-Net's decoder.
class ConvTranspose3d : public Module {
 public:
  ConvTranspose3d() = default;
  ConvTranspose3d(int64_t in_channels, int64_t out_channels, IntTriple kernel_size, ConvTranspose3dOptions o = {});
  Tensor forward(const Tensor& x) override;
  void reset_parameters() override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in_channels = 0, out_channels = 0;
  IntTriple kernel_size{1, 1, 1};
  ConvTranspose3dOptions options;
};
/// torch.nn.MaxUnpool2d: forward(x, indices) with the output size given, or worked out as
/// (H - 1) stride - 2 padding + kernel, as PyTorch's.
class MaxUnpool2d : public Module {
 public:
  using Module::forward;
  explicit MaxUnpool2d(Int2 kernel_size, std::optional<Int2> stride = std::nullopt, Int2 padding = 0)
      : kernel_size(kernel_size), stride(stride ? *stride : kernel_size), padding(padding) {}
  Tensor forward(const Tensor& x, const Tensor& indices, std::optional<Int2> output_size = std::nullopt) {
    KILN_CHECK(x.defined() && x.dim() >= 2, "MaxUnpool2d: expected (N, C, H, W) or (C, H, W), got ",
               x.defined() ? shape_str(x.shape()) : std::string("undefined"));
    const Int2 out = output_size ? *output_size
                                 : Int2{(x.size(-2) - 1) * stride.h - 2 * padding.h + kernel_size.h,
                                        (x.size(-1) - 1) * stride.w - 2 * padding.w + kernel_size.w};
    return max_unpool2d(x, indices, out);
  }
  Int2 kernel_size, stride, padding;
};

/// torch.nn.Unfold / Fold: kiln::unfold / kiln::fold with fixed arguments.
class Unfold : public Module {
 public:
  explicit Unfold(FoldArgs a) : args(a) {}
  Tensor forward(const Tensor& x) override { return unfold(x, args); }
  FoldArgs args;
};
class Fold : public Module {
 public:
  Fold(std::array<int64_t, 2> output_size, FoldArgs a) : output_size(output_size), args(a) {}
  Tensor forward(const Tensor& x) override { return fold(x, output_size, args); }
  std::array<int64_t, 2> output_size;
  FoldArgs args;
};
/// torch.nn.LocalResponseNorm (kiln::local_response_norm) and ChannelShuffle.
class LocalResponseNorm : public Module {
 public:
  explicit LocalResponseNorm(int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0)
      : size(size), alpha(alpha), beta(beta), k(k) {}
  Tensor forward(const Tensor& x) override { return local_response_norm(x, size, alpha, beta, k); }
  int64_t size;
  double alpha, beta, k;
};
class ChannelShuffle : public Module {
 public:
  explicit ChannelShuffle(int64_t groups) : groups(groups) {}
  Tensor forward(const Tensor& x) override { return channel_shuffle(x, groups); }
  int64_t groups;
};

/// torch.nn.Bilinear: y = x1^T W x2 + b, weight (out, in1, in2) and bias (out) both
/// U(-1/sqrt(in1), 1/sqrt(in1)) as PyTorch's.
class Bilinear : public Module {
 public:
  using Module::forward;
  Bilinear() = default;
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x1, const Tensor& x2) { return bilinear(x1, x2, param(weight), param(bias)); }
  void reset_parameters() override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  int64_t in1_features = 0, in2_features = 0, out_features = 0;
};

struct EmbeddingBagOptions {
  EmbeddingBagMode mode = EmbeddingBagMode::mean;
  bool include_last_offset = false;
  std::optional<int64_t> padding_idx;  ///< a row that is left out of every bag and starts at zero
};
/// torch.nn.EmbeddingBag: weight (num_embeddings, embedding_dim) ~ N(0, 1); forward(indices)
/// with one bag per row of 2-D indices, or forward(indices, offsets, per_sample_weights).
class EmbeddingBag : public Module {
 public:
  EmbeddingBag() = default;
  EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim, EmbeddingBagOptions o = {});
  Tensor forward(const Tensor& indices) override { return forward(indices, Tensor()); }
  Tensor forward(const Tensor& indices, const Tensor& offsets, const Tensor& per_sample_weights = {});
  void reset_parameters() override;
  std::string extra_repr() const override;
  Tensor weight;
  int64_t num_embeddings = 0, embedding_dim = 0;
  EmbeddingBagOptions options;
};

/// Pads the last D dims of (N, C, *spatial) or (C, *spatial) input (torch.nn's ZeroPad, ConstantPad,
/// ReflectionPad, ReplicationPad and CircularPad 1d/2d/3d): `padding` is one amount for every
/// side or 2 D of them in PyTorch's order, (left, right[, top, bottom[, front, back]]).
template <int D, PadMode M>
class PadNd : public Module {
 public:
  explicit PadNd(std::vector<int64_t> padding, double value = 0.0) : value(value) {
    KILN_CHECK(padding.size() == 1 || padding.size() == size_t(2 * D), "Pad", D, "d: expected 1 or ", 2 * D,
               " padding amounts, got ", padding.size());
    pads = padding.size() == 1 ? std::vector<int64_t>(size_t(2 * D), padding[0]) : std::move(padding);
  }
  Tensor forward(const Tensor& x) override {
    KILN_CHECK(x.defined() && (x.dim() == D + 1 || x.dim() == D + 2), "Pad", D, "d: expected an input of ", D + 1,
               " or ", D + 2, " dims, got shape ", x.defined() ? shape_str(x.shape()) : std::string("undefined"));
    return pad(x, pads, M, value);
  }
  std::string extra_repr() const override {
    std::string s = "padding=(";
    for (size_t i = 0; i < pads.size(); ++i) s += (i ? ", " : "") + std::to_string(pads[i]);
    return s + ")";
  }
  std::vector<int64_t> pads;
  double value;
};
/// Zero padding: the constant 0.
template <int D>
class ZeroPadNd : public PadNd<D, PadMode::constant> {
 public:
  explicit ZeroPadNd(std::vector<int64_t> padding) : PadNd<D, PadMode::constant>(std::move(padding), 0.0) {}
};
using ZeroPad1d = ZeroPadNd<1>;
using ZeroPad2d = ZeroPadNd<2>;
using ZeroPad3d = ZeroPadNd<3>;
using ConstantPad1d = PadNd<1, PadMode::constant>;  ///< ConstantPad1d({2, 1}, 3.5)
using ConstantPad2d = PadNd<2, PadMode::constant>;
using ConstantPad3d = PadNd<3, PadMode::constant>;
using ReflectionPad1d = PadNd<1, PadMode::reflect>;
using ReflectionPad2d = PadNd<2, PadMode::reflect>;
using ReflectionPad3d = PadNd<3, PadMode::reflect>;
using ReplicationPad1d = PadNd<1, PadMode::replicate>;
using ReplicationPad2d = PadNd<2, PadMode::replicate>;
using ReplicationPad3d = PadNd<3, PadMode::replicate>;
using CircularPad1d = PadNd<1, PadMode::circular>;
using CircularPad2d = PadNd<2, PadMode::circular>;
using CircularPad3d = PadNd<3, PadMode::circular>;

}  // namespace kiln::nn
