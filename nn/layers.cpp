// Standard layers: construction (parameter registration + PyTorch default init),
// forward through the ops, argument checks and the summary text of each layer.
#include "kiln/nn/layers.h"
#include <cmath>
#include <sstream>
#include "kiln/nn/checkpoint.h"
#include "kiln/nn/init.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn_functional.h"
#include "kiln/ops/norm.h"
#include "kiln/ops/reduce.h"

namespace kiln::nn {

namespace {
void check_built(const Tensor& w, const char* layer) {
  KILN_CHECK(w.defined(), layer, ": the module is empty (default-constructed); assign it from "
             "register_module(name, nn::", layer, "(...)) before calling it");
}
void check_input(const Tensor& x, const char* layer) {
  KILN_CHECK(x.defined(), layer, ": input is an undefined tensor");
}
std::string pair_str(Int2 p) {
  std::ostringstream os;
  if (p.h == p.w) os << p.h;
  else os << "(" << p.h << ", " << p.w << ")";
  return os.str();
}
const char* bool_str(bool b) { return b ? "true" : "false"; }
// PyTorch's default for Conv2d and ConvTranspose2d: weight kaiming_uniform(a = sqrt(5)),
// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in from the weight's dim 1.
void init_conv_parameters(Tensor& weight, Tensor& bias) {
  if (!weight.defined()) return;
  NoGradGuard ng;
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(double(init::fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

// ---------------------------------------------------------------- Linear

Linear::Linear(int64_t in, int64_t out, LinearOptions o) : in_features(in), out_features(out) {
  KILN_CHECK(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ", in, " and ", out);
  weight = register_parameter("weight", empty({out, in}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Linear::reset_parameters() {
  if (!weight.defined()) return;
  NoGradGuard ng;
  init::kaiming_uniform_(weight, std::sqrt(5.0));  // U(-1/sqrt(in), 1/sqrt(in))
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(double(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  check_built(weight, "Linear");
  check_input(x, "Linear");
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear(in_features=", in_features, ", out_features=",
             out_features, "): expected input of shape (..., ", in_features, "), got ", shape_str(x.shape()));
  return linear(x, param(weight), param(bias));
}

std::string Linear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_features << ", out_features=" << out_features << ", bias=" << bool_str(bias.defined());
  return os.str();
}

// ---------------------------------------------------------------- Conv2d

Conv2d::Conv2d(int64_t in, int64_t out, Int2 k, Conv2dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  KILN_CHECK(in > 0 && out > 0, "Conv2d: in_channels and out_channels must be positive, got ", in, " and ", out);
  KILN_CHECK(k.h > 0 && k.w > 0, "Conv2d: kernel_size must be positive, got ", pair_str(k));
  KILN_CHECK(o.groups > 0 && in % o.groups == 0 && out % o.groups == 0, "Conv2d: groups=", o.groups,
             " must divide in_channels=", in, " and out_channels=", out);
  KILN_CHECK(o.stride.h > 0 && o.stride.w > 0 && o.dilation.h > 0 && o.dilation.w > 0 && o.padding.h >= 0 &&
                 o.padding.w >= 0,
             "Conv2d: stride and dilation must be positive and padding non-negative, got stride ",
             pair_str(o.stride), ", padding ", pair_str(o.padding), ", dilation ", pair_str(o.dilation));
  weight = register_parameter("weight", empty({out, in / o.groups, k.h, k.w}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv2d::reset_parameters() { init_conv_parameters(weight, bias); }

Tensor Conv2d::forward(const Tensor& x) {
  check_built(weight, "Conv2d");
  check_input(x, "Conv2d");
  KILN_CHECK(x.dim() == 4 && x.size(1) == in_channels, "Conv2d(", in_channels, ", ", out_channels,
             "): expected input of shape (N, ", in_channels, ", H, W), got ", shape_str(x.shape()));
  return conv2d(x, param(weight), param(bias), {.stride = options.stride, .padding = options.padding,
                                  .dilation = options.dilation, .groups = options.groups});
}

std::string Conv2d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << pair_str(kernel_size);
  if (options.stride != Int2(1)) os << ", stride=" << pair_str(options.stride);
  if (options.padding != Int2(0)) os << ", padding=" << pair_str(options.padding);
  if (options.dilation != Int2(1)) os << ", dilation=" << pair_str(options.dilation);
  if (options.groups != 1) os << ", groups=" << options.groups;
  os << ", bias=" << bool_str(bias.defined());
  return os.str();
}

// ---------------------------------------------------------------- ConvTranspose2d

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Int2 k, ConvTranspose2dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  KILN_CHECK(in > 0 && out > 0, "ConvTranspose2d: in_channels and out_channels must be positive, got ", in, " and ",
             out);
  KILN_CHECK(k.h > 0 && k.w > 0, "ConvTranspose2d: kernel_size must be positive, got ", pair_str(k));
  KILN_CHECK(o.groups > 0 && in % o.groups == 0 && out % o.groups == 0, "ConvTranspose2d: groups=", o.groups,
             " must divide in_channels=", in, " and out_channels=", out);
  weight = register_parameter("weight", empty({in, out / o.groups, k.h, k.w}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() { init_conv_parameters(weight, bias); }  // fan_in from dim 1, as PyTorch

Tensor ConvTranspose2d::forward(const Tensor& x) {
  check_built(weight, "ConvTranspose2d");
  check_input(x, "ConvTranspose2d");
  KILN_CHECK(x.dim() == 4 && x.size(1) == in_channels, "ConvTranspose2d(", in_channels, ", ", out_channels,
             "): expected input of shape (N, ", in_channels, ", H, W), got ", shape_str(x.shape()));
  return conv_transpose2d(x, param(weight), param(bias),
                          {.stride = options.stride, .padding = options.padding,
                           .output_padding = options.output_padding, .dilation = options.dilation,
                           .groups = options.groups});
}

std::string ConvTranspose2d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << pair_str(kernel_size);
  if (options.stride != Int2(1)) os << ", stride=" << pair_str(options.stride);
  if (options.padding != Int2(0)) os << ", padding=" << pair_str(options.padding);
  if (options.output_padding != Int2(0)) os << ", output_padding=" << pair_str(options.output_padding);
  if (options.dilation != Int2(1)) os << ", dilation=" << pair_str(options.dilation);
  if (options.groups != 1) os << ", groups=" << options.groups;
  os << ", bias=" << bool_str(bias.defined());
  return os.str();
}

std::string Upsample::extra_repr() const {
  std::ostringstream os;
  if (options.size[0] > 0) os << "size=(" << options.size[0] << ", " << options.size[1] << ")";
  else os << "scale_factor=(" << options.scale_factor[0] << ", " << options.scale_factor[1] << ")";
  os << ", mode=" << (options.mode == InterpolateMode::nearest ? "nearest" : "bilinear");
  if (options.mode == InterpolateMode::bilinear) os << ", align_corners=" << bool_str(options.align_corners);
  return os.str();
}

// ---------------------------------------------------------------- pooling

MaxPool2d::MaxPool2d(Int2 k, MaxPool2dOptions o) : kernel_size(k), options(o) {
  KILN_CHECK(k.h > 0 && k.w > 0, "MaxPool2d: kernel_size must be positive, got ", pair_str(k));
}
Tensor MaxPool2d::forward(const Tensor& x) {
  check_input(x, "MaxPool2d");
  return max_pool2d(x, kernel_size, options.stride, options.padding, options.dilation, options.ceil_mode);
}
std::string MaxPool2d::extra_repr() const {
  Int2 s = options.stride.h == 0 ? kernel_size : options.stride;
  return "kernel_size=" + pair_str(kernel_size) + ", stride=" + pair_str(s) + ", padding=" + pair_str(options.padding) +
         ", dilation=" + pair_str(options.dilation) + ", ceil_mode=" + bool_str(options.ceil_mode);
}

AvgPool2d::AvgPool2d(Int2 k, AvgPool2dOptions o) : kernel_size(k), options(o) {
  KILN_CHECK(k.h > 0 && k.w > 0, "AvgPool2d: kernel_size must be positive, got ", pair_str(k));
}
Tensor AvgPool2d::forward(const Tensor& x) {
  check_input(x, "AvgPool2d");
  return avg_pool2d(x, kernel_size, options.stride, options.padding, options.count_include_pad, options.ceil_mode);
}
std::string AvgPool2d::extra_repr() const {
  Int2 s = options.stride.h == 0 ? kernel_size : options.stride;
  return "kernel_size=" + pair_str(kernel_size) + ", stride=" + pair_str(s) + ", padding=" + pair_str(options.padding) +
         (options.ceil_mode ? ", ceil_mode=true" : "");
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Int2 out) : output_size(out) {
  KILN_CHECK(out.h > 0 && out.w > 0, "AdaptiveAvgPool2d: output_size must be positive, got ", pair_str(out));
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  check_input(x, "AdaptiveAvgPool2d");
  return adaptive_avg_pool2d(x, output_size);
}
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair_str(output_size); }

AdaptiveMaxPool2d::AdaptiveMaxPool2d(Int2 out) : output_size(out) {
  KILN_CHECK(out.h > 0 && out.w > 0, "AdaptiveMaxPool2d: output_size must be positive, got ", pair_str(out));
}
Tensor AdaptiveMaxPool2d::forward(const Tensor& x) {
  check_input(x, "AdaptiveMaxPool2d");
  return adaptive_max_pool2d(x, output_size);
}
std::string AdaptiveMaxPool2d::extra_repr() const { return "output_size=" + pair_str(output_size); }

// ---------------------------------------------------------------- 1-D convolution and pooling

Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, Conv1dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  KILN_CHECK(in > 0 && out > 0, "Conv1d: in_channels and out_channels must be positive, got ", in, " and ", out);
  KILN_CHECK(k > 0, "Conv1d: kernel_size must be positive, got ", k);
  KILN_CHECK(o.groups > 0 && in % o.groups == 0 && out % o.groups == 0, "Conv1d: groups=", o.groups,
             " must divide in_channels=", in, " and out_channels=", out);
  KILN_CHECK(o.stride > 0 && o.dilation > 0 && o.padding >= 0,
             "Conv1d: stride and dilation must be positive and padding non-negative, got stride ", o.stride,
             ", padding ", o.padding, ", dilation ", o.dilation);
  weight = register_parameter("weight", empty({out, in / o.groups, k}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv1d::reset_parameters() { init_conv_parameters(weight, bias); }

Tensor Conv1d::forward(const Tensor& x) {
  check_built(weight, "Conv1d");
  check_input(x, "Conv1d");
  KILN_CHECK((x.dim() == 3 && x.size(1) == in_channels) || (x.dim() == 2 && x.size(0) == in_channels), "Conv1d(",
             in_channels, ", ", out_channels, "): expected input of shape (N, ", in_channels, ", L) or (",
             in_channels, ", L), got ", shape_str(x.shape()));
  return conv1d(x, param(weight), param(bias), options.stride, options.padding, options.dilation, options.groups);
}

std::string Conv1d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << kernel_size;
  if (options.stride != 1) os << ", stride=" << options.stride;
  if (options.padding != 0) os << ", padding=" << options.padding;
  if (options.dilation != 1) os << ", dilation=" << options.dilation;
  if (options.groups != 1) os << ", groups=" << options.groups;
  os << ", bias=" << bool_str(bias.defined());
  return os.str();
}

MaxPool1d::MaxPool1d(int64_t k, MaxPool1dOptions o) : kernel_size(k), options(o) {
  KILN_CHECK(k > 0, "MaxPool1d: kernel_size must be positive, got ", k);
}
Tensor MaxPool1d::forward(const Tensor& x) {
  check_input(x, "MaxPool1d");
  return max_pool1d(x, kernel_size, options.stride, options.padding, options.dilation, options.ceil_mode);
}
std::string MaxPool1d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << kernel_size << ", stride=" << (options.stride == 0 ? kernel_size : options.stride)
     << ", padding=" << options.padding << ", dilation=" << options.dilation
     << ", ceil_mode=" << bool_str(options.ceil_mode);
  return os.str();
}

AvgPool1d::AvgPool1d(int64_t k, AvgPool1dOptions o) : kernel_size(k), options(o) {
  KILN_CHECK(k > 0, "AvgPool1d: kernel_size must be positive, got ", k);
}
Tensor AvgPool1d::forward(const Tensor& x) {
  check_input(x, "AvgPool1d");
  return avg_pool1d(x, kernel_size, options.stride, options.padding, options.count_include_pad, options.ceil_mode);
}
std::string AvgPool1d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << kernel_size << ", stride=" << (options.stride == 0 ? kernel_size : options.stride)
     << ", padding=" << options.padding;
  if (options.ceil_mode) os << ", ceil_mode=true";
  return os.str();
}

// ---------------------------------------------------------------- BatchNorm

BatchNormBase::BatchNormBase(int64_t c, BatchNormOptions o) : num_features(c), options(o) {
  KILN_CHECK(c > 0, "BatchNorm: num_features must be positive, got ", c);
  KILN_CHECK(o.momentum >= 0 && o.momentum <= 1 && o.eps >= 0, "BatchNorm: expected momentum in [0, 1] and eps >= 0, "
             "got momentum=", o.momentum, " eps=", o.eps);
  if (o.affine) {
    weight = register_parameter("weight", empty({c}));
    bias = register_parameter("bias", empty({c}));
  }
  if (o.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::int64}));
  }
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!running_mean.defined()) return;
  NoGradGuard ng;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (!weight.defined()) return;
  NoGradGuard ng;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor BatchNormBase::forward(const Tensor& x) {
  KILN_CHECK(num_features > 0, type_name(), ": the module is empty (default-constructed); assign it from "
             "register_module(name, nn::", type_name(), "(...)) before calling it");
  nn::check_input(x, "BatchNorm");
  check_input(x);
  KILN_CHECK(x.size(1) == num_features, type_name(), "(", num_features, "): expected ", num_features,
             " channels in dim 1, got input of shape ", shape_str(x.shape()));
  const bool training = is_training();
  // A checkpointed forward runs twice; the batch is counted in the first run only.
  const bool update_stats = training && !in_checkpoint_recomputation();
  if (update_stats && num_batches_tracked.defined()) {
    NoGradGuard ng;
    num_batches_tracked.add_(ones_like(num_batches_tracked));
  }
  // Batch statistics in training, or when there are no running stats to use.
  // (In the recomputation, training uses batch statistics without touching the running ones.)
  const bool pass_stats = !training || update_stats;
  const Tensor none;
  return batch_norm(x, param(weight), param(bias), pass_stats ? running_mean : none, pass_stats ? running_var : none,
                    training || !running_mean.defined(), options.momentum, options.eps);
}

std::string BatchNormBase::extra_repr() const {
  std::ostringstream os;
  os << num_features << ", eps=" << options.eps << ", momentum=" << options.momentum
     << ", affine=" << bool_str(options.affine) << ", track_running_stats=" << bool_str(options.track_running_stats);
  return os.str();
}

void BatchNorm1d::check_input(const Tensor& x) const {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d(", num_features, "): expected input of shape (N, C) or "
             "(N, C, L), got ", shape_str(x.shape()));
}
void BatchNorm2d::check_input(const Tensor& x) const {
  KILN_CHECK(x.dim() == 4, "BatchNorm2d(", num_features, "): expected input of shape (N, C, H, W), got ",
             shape_str(x.shape()));
}

// ---------------------------------------------------------------- LayerNorm

LayerNorm::LayerNorm(Shape ns, LayerNormOptions o) : normalized_shape(std::move(ns)), options(o) {
  KILN_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t d : normalized_shape)
    KILN_CHECK(d > 0, "LayerNorm: normalized_shape sizes must be positive, got ", shape_str(normalized_shape));
  if (o.elementwise_affine) {
    weight = register_parameter("weight", empty(normalized_shape));
    if (o.bias) bias = register_parameter("bias", empty(normalized_shape));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  NoGradGuard ng;
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) {
  KILN_CHECK(!normalized_shape.empty(), "LayerNorm: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::LayerNorm(...)) before calling it");
  check_input(x, "LayerNorm");
  return layer_norm(x, normalized_shape, param(weight), param(bias), options.eps);
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << shape_str(normalized_shape) << ", eps=" << options.eps
     << ", elementwise_affine=" << bool_str(options.elementwise_affine);
  if (options.elementwise_affine) os << ", bias=" << bool_str(bias.defined());
  return os.str();
}

// ---------------------------------------------------------------- RMSNorm

RMSNorm::RMSNorm(Shape ns, RMSNormOptions o) : normalized_shape(std::move(ns)), options(o) {
  KILN_CHECK(!normalized_shape.empty(), "RMSNorm: normalized_shape must not be empty");
  for (int64_t d : normalized_shape)
    KILN_CHECK(d > 0, "RMSNorm: normalized_shape sizes must be positive, got ", shape_str(normalized_shape));
  KILN_CHECK(!o.eps || (std::isfinite(*o.eps) && *o.eps >= 0), "RMSNorm: eps must be finite and >= 0, got ",
             o.eps.value_or(0.0));
  if (o.elementwise_affine) weight = register_parameter("weight", empty(normalized_shape));
  reset_parameters();
}

void RMSNorm::reset_parameters() {
  NoGradGuard ng;
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNorm::forward(const Tensor& x) {
  KILN_CHECK(!normalized_shape.empty(), "RMSNorm: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::RMSNorm(...)) before calling it");
  check_input(x, "RMSNorm");
  const int64_t k = int64_t(normalized_shape.size());
  bool trailing = x.dim() >= k;
  for (int64_t i = 0; trailing && i < k; ++i) trailing = x.size(x.dim() - k + i) == normalized_shape[size_t(i)];
  KILN_CHECK(trailing, "RMSNorm: input ", shape_str(x.shape()), " does not end in normalized_shape ",
             shape_str(normalized_shape));
  Dims dims;
  for (int64_t i = 0; i < k; ++i) dims.push_back(-1 - i);
  const DType dt = x.dtype();
  const double eps = options.eps ? *options.eps
                     : dt == DType::float64  ? 0x1p-52
                     : dt == DType::float16  ? 0x1p-10
                     : dt == DType::bfloat16 ? 0x1p-7
                                             : 0x1p-23;  // torch.finfo(x.dtype).eps
  Tensor y = mul(x, rsqrt(add(mean(mul(x, x), dims, true), eps)));
  return weight.defined() ? mul(y, param(weight)) : y;
}

std::string RMSNorm::extra_repr() const {
  std::ostringstream os;
  os << shape_str(normalized_shape) << ", eps=";
  if (options.eps) os << *options.eps;
  else os << "None";
  os
     << ", elementwise_affine=" << bool_str(options.elementwise_affine);
  return os.str();
}

// ---------------------------------------------------------------- GroupNorm

GroupNorm::GroupNorm(int64_t g, int64_t c, GroupNormOptions o) : num_groups(g), num_channels(c), options(o) {
  KILN_CHECK(g > 0 && c > 0 && c % g == 0, "GroupNorm: num_channels (", c, ") must be positive and split into ",
             "num_groups (", g, ") equal groups");
  if (o.affine) {
    weight = register_parameter("weight", empty({c}));
    bias = register_parameter("bias", empty({c}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  NoGradGuard ng;
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& x) {
  KILN_CHECK(num_groups > 0, "GroupNorm: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::GroupNorm(...)) before calling it");
  check_input(x, "GroupNorm");
  return group_norm(x, num_groups, param(weight), param(bias), options.eps);
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << num_groups << ", " << num_channels << ", eps=" << options.eps << ", affine=" << bool_str(options.affine);
  return os.str();
}

namespace {
int64_t checked_features(int64_t sd, int64_t c) {
  KILN_CHECK(c > 0, "InstanceNorm", sd, "d: num_features must be positive, got ", c);
  return c;
}
}  // namespace

InstanceNorm::InstanceNorm(int64_t sd, int64_t c, InstanceNormOptions o)
    : GroupNorm(checked_features(sd, c), c, {.eps = o.eps, .affine = o.affine}), spatial_dims(sd), instance_options(o) {
  if (o.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::int64}));
  }
}

Tensor InstanceNorm::forward(const Tensor& x) {
  KILN_CHECK(spatial_dims > 0, "InstanceNorm: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::InstanceNorm2d(...)) before calling it");
  check_input(x, "InstanceNorm");
  const bool batched = x.dim() == spatial_dims + 2;
  KILN_CHECK(batched || x.dim() == spatial_dims + 1, "InstanceNorm", spatial_dims, "d: expected a ", spatial_dims + 1,
             "-D (unbatched) or ", spatial_dims + 2, "-D input, got shape ", shape_str(x.shape()));
  const Tensor xb = batched ? x : x.unsqueeze(0);
  KILN_CHECK(!options.affine || xb.size(1) == num_channels, "InstanceNorm", spatial_dims, "d: expected ",
             num_channels, " channels (num_features) at dim ", batched ? 1 : 0, ", got input shape ",
             shape_str(x.shape()));
  KILN_CHECK(!instance_options.track_running_stats || xb.size(1) == num_channels, "InstanceNorm", spatial_dims,
             "d: expected ", num_channels, " channels (num_features, for the running statistics) at dim ",
             batched ? 1 : 0, ", got input shape ", shape_str(x.shape()));
  const Tensor y = instance_norm(xb, running_mean, running_var, param(weight), param(bias),
                                 is_training() || !instance_options.track_running_stats,
                                 instance_options.momentum.value_or(0.0), options.eps);
  return batched ? y : y.squeeze(0);
}

std::string InstanceNorm::extra_repr() const {
  std::ostringstream os;
  os << num_channels << ", eps=" << options.eps << ", affine=" << bool_str(options.affine);
  if (instance_options.track_running_stats) os << ", track_running_stats=true";
  return os.str();
}

std::string CosineSimilarity::extra_repr() const {
  std::ostringstream os;
  os << "dim=" << dim << ", eps=" << eps;
  return os.str();
}

std::string PairwiseDistance::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p << ", eps=" << eps << ", keepdim=" << bool_str(keepdim);
  return os.str();
}

// ---------------------------------------------------------------- Embedding

Embedding::Embedding(int64_t n, int64_t d, EmbeddingOptions o) : num_embeddings(n), embedding_dim(d) {
  KILN_CHECK(n > 0 && d > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ", n, " and ", d);
  if (o.padding_idx) {
    int64_t p = *o.padding_idx;
    KILN_CHECK(p >= -n && p < n, "Embedding: padding_idx ", p, " is out of range for ", n, " embeddings");
    padding_idx = p < 0 ? p + n : p;
  }
  weight = register_parameter("weight", empty({n, d}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  if (!weight.defined()) return;
  NoGradGuard ng;
  init::normal_(weight);
  if (padding_idx >= 0) weight.select(0, padding_idx).zero_();
}

Tensor Embedding::forward(const Tensor& indices) {
  check_built(weight, "Embedding");
  check_input(indices, "Embedding");
  return embedding(indices, param(weight), padding_idx >= 0 ? std::optional<int64_t>(padding_idx) : std::nullopt);
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (padding_idx >= 0) s += ", padding_idx=" + std::to_string(padding_idx);
  return s;
}

// ---------------------------------------------------------------- elementwise

Dropout::Dropout(double p_) : p(p_) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }
std::string Dropout::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p;
  return os.str();
}

std::string GELU::extra_repr() const { return approx == GeluApprox::tanh ? "approximate=tanh" : ""; }

Tensor Flatten::forward(const Tensor& x) {
  check_input(x, "Flatten");
  return x.flatten(start_dim, end_dim);
}
std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}


PReLU::PReLU(int64_t n, double init_) : num_parameters(n), init(init_) {
  KILN_CHECK(n >= 1, "PReLU: num_parameters must be >= 1, got ", n);
  weight = register_parameter("weight", empty({n}));
  reset_parameters();
}
void PReLU::reset_parameters() {
  NoGradGuard ng;
  weight.fill_(init);
}

std::string Threshold::extra_repr() const {
  std::ostringstream os;
  os << "threshold=" << threshold << ", value=" << value;
  return os.str();
}

Tensor Unflatten::forward(const Tensor& x) {
  check_input(x, "Unflatten");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  KILN_CHECK(d >= 0 && d < x.dim(), "Unflatten: dim ", dim, " is out of range for shape ", shape_str(x.shape()));
  Shape s(x.shape().begin(), x.shape().begin() + d);
  int64_t known = 1, free = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      KILN_CHECK(free < 0, "Unflatten: sizes ", shape_str(sizes), " have more than one -1");
      free = int64_t(i);
    } else {
      KILN_CHECK(sizes[i] >= 0, "Unflatten: sizes ", shape_str(sizes), " must be >= 0 or one -1");
      known *= sizes[i];
    }
  }
  Shape inner = sizes;
  if (free >= 0) {
    KILN_CHECK(known > 0 && x.size(d) % known == 0, "Unflatten: dim ", dim, " of size ", x.size(d),
               " cannot be split into ", shape_str(sizes));
    inner[size_t(free)] = x.size(d) / known;
  }
  KILN_CHECK(free >= 0 || known == x.size(d), "Unflatten: sizes ", shape_str(sizes), " multiply to ", known,
             ", not the size ", x.size(d), " of dim ", dim, " of shape ", shape_str(x.shape()));
  s.insert(s.end(), inner.begin(), inner.end());
  s.insert(s.end(), x.shape().begin() + d + 1, x.shape().end());
  return x.reshape(s);
}
std::string Unflatten::extra_repr() const { return "dim=" + std::to_string(dim) + ", unflattened_size=" + shape_str(sizes); }


Bilinear::Bilinear(int64_t in1, int64_t in2, int64_t out, bool with_bias)
    : in1_features(in1), in2_features(in2), out_features(out) {
  KILN_CHECK(in1 > 0 && in2 > 0 && out > 0, "Bilinear: feature sizes must be positive, got ", in1, ", ", in2, ", ", out);
  weight = register_parameter("weight", empty({out, in1, in2}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Bilinear::reset_parameters() {
  if (!weight.defined()) return;
  NoGradGuard ng;
  const double bound = 1.0 / std::sqrt(double(in1_features));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

std::string Bilinear::extra_repr() const {
  std::ostringstream os;
  os << "in1_features=" << in1_features << ", in2_features=" << in2_features << ", out_features=" << out_features
     << ", bias=" << (bias.defined() ? "true" : "false");
  return os.str();
}

EmbeddingBag::EmbeddingBag(int64_t n, int64_t d, EmbeddingBagOptions o)
    : num_embeddings(n), embedding_dim(d), options(o) {
  KILN_CHECK(n > 0 && d > 0, "EmbeddingBag: num_embeddings and embedding_dim must be positive, got ", n, " and ", d);
  if (o.padding_idx) {
    const int64_t p = *o.padding_idx;
    KILN_CHECK(p >= -n && p < n, "EmbeddingBag: padding_idx ", p, " is out of range for ", n, " embeddings");
    options.padding_idx = p < 0 ? p + n : p;
  }
  weight = register_parameter("weight", empty({n, d}));
  reset_parameters();
}

void EmbeddingBag::reset_parameters() {
  if (!weight.defined()) return;
  NoGradGuard ng;
  init::normal_(weight);
  if (options.padding_idx) weight.select(0, *options.padding_idx).zero_();
}

Tensor EmbeddingBag::forward(const Tensor& indices, const Tensor& offsets, const Tensor& per_sample_weights) {
  check_built(weight, "EmbeddingBag");
  return embedding_bag(indices, param(weight),
                       {.offsets = offsets, .mode = options.mode, .per_sample_weights = per_sample_weights,
                        .include_last_offset = options.include_last_offset, .padding_idx = options.padding_idx});
}

std::string EmbeddingBag::extra_repr() const {
  std::ostringstream os;
  const char* m[] = {"sum", "mean", "max"};
  os << num_embeddings << ", " << embedding_dim << ", mode=" << m[int(options.mode)];
  return os.str();
}


Conv3d::Conv3d(int64_t in, int64_t out, IntTriple k, Conv3dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  KILN_CHECK(in > 0 && out > 0, "Conv3d: in_channels and out_channels must be positive, got ", in, " and ", out);
  KILN_CHECK(k[0] > 0 && k[1] > 0 && k[2] > 0, "Conv3d: kernel_size must be positive");
  KILN_CHECK(o.groups > 0 && in % o.groups == 0 && out % o.groups == 0, "Conv3d: groups=", o.groups,
             " must divide in_channels=", in, " and out_channels=", out);
  weight = register_parameter("weight", empty({out, in / o.groups, k[0], k[1], k[2]}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void Conv3d::reset_parameters() { init_conv_parameters(weight, bias); }

Tensor Conv3d::forward(const Tensor& x) {
  check_built(weight, "Conv3d");
  check_input(x, "Conv3d");
  KILN_CHECK((x.dim() == 5 || x.dim() == 4) && x.size(-4) == in_channels, "Conv3d(", in_channels, ", ", out_channels,
             "): expected input of shape (N, ", in_channels, ", D, H, W), got ", shape_str(x.shape()));
  return conv3d(x, param(weight), param(bias),
                {.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
                 .groups = options.groups});
}

std::string Conv3d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=(" << kernel_size[0] << ", " << kernel_size[1] << ", "
     << kernel_size[2] << ")";
  return os.str();
}

ConvTranspose3d::ConvTranspose3d(int64_t in, int64_t out, IntTriple k, ConvTranspose3dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  KILN_CHECK(in > 0 && out > 0, "ConvTranspose3d: in_channels and out_channels must be positive, got ", in, " and ",
             out);
  KILN_CHECK(k[0] > 0 && k[1] > 0 && k[2] > 0, "ConvTranspose3d: kernel_size must be positive");
  KILN_CHECK(o.groups > 0 && in % o.groups == 0 && out % o.groups == 0, "ConvTranspose3d: groups=", o.groups,
             " must divide in_channels=", in, " and out_channels=", out);
  weight = register_parameter("weight", empty({in, out / o.groups, k[0], k[1], k[2]}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void ConvTranspose3d::reset_parameters() { init_conv_parameters(weight, bias); }  // fan_in from dim 1, as PyTorch

Tensor ConvTranspose3d::forward(const Tensor& x) {
  check_built(weight, "ConvTranspose3d");
  check_input(x, "ConvTranspose3d");
  KILN_CHECK((x.dim() == 5 || x.dim() == 4) && x.size(-4) == in_channels, "ConvTranspose3d(", in_channels, ", ",
             out_channels, "): expected input of shape (N, ", in_channels, ", D, H, W), got ", shape_str(x.shape()));
  return conv_transpose3d(x, param(weight), param(bias),
                          {.stride = options.stride, .padding = options.padding,
                           .output_padding = options.output_padding, .dilation = options.dilation,
                           .groups = options.groups});
}

std::string ConvTranspose3d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=(" << kernel_size[0] << ", " << kernel_size[1] << ", "
     << kernel_size[2] << ")";
  if (options.stride != IntTriple{1, 1, 1})
    os << ", stride=(" << options.stride[0] << ", " << options.stride[1] << ", " << options.stride[2] << ")";
  if (options.groups != 1) os << ", groups=" << options.groups;
  os << ", bias=" << bool_str(bias.defined());
  return os.str();
}

ConvTranspose1d::ConvTranspose1d(int64_t in, int64_t out, int64_t k, ConvTranspose1dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  KILN_CHECK(in > 0 && out > 0 && k > 0, "ConvTranspose1d: channels and kernel_size must be positive, got ", in, ", ",
             out, ", ", k);
  KILN_CHECK(o.groups > 0 && in % o.groups == 0 && out % o.groups == 0, "ConvTranspose1d: groups=", o.groups,
             " must divide in_channels=", in, " and out_channels=", out);
  weight = register_parameter("weight", empty({in, out / o.groups, k}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

void ConvTranspose1d::reset_parameters() { init_conv_parameters(weight, bias); }

Tensor ConvTranspose1d::forward(const Tensor& x) {
  check_built(weight, "ConvTranspose1d");
  check_input(x, "ConvTranspose1d");
  return conv_transpose1d(x, param(weight), param(bias), options.stride, options.padding, options.output_padding, options.groups,
                          options.dilation);
}

std::string ConvTranspose1d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << kernel_size << ", stride=" << options.stride;
  return os.str();
}
}  // namespace kiln::nn
