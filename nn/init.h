// Parameter initialisation (torch.nn.init): in-place fills drawn from kiln's global
// Philox generator (seeded with kiln::manual_seed), each under NoGradGuard.
#pragma once
#include <utility>
#include "kiln/core/tensor.h"

namespace kiln::nn::init {

enum class FanMode { fan_in, fan_out };
enum class Nonlinearity { linear, sigmoid, tanh, relu, leaky_relu };

/// The recommended gain for a nonlinearity (PyTorch's calculate_gain); `param` is the
/// negative slope for leaky_relu.
double calculate_gain(Nonlinearity nl, double param = 0.01);
/// (fan_in, fan_out) of a weight of at least 2 dims: (size(1) * receptive, size(0) * receptive).
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);

/// Fills t with U(a, b): values in [a, b), also in float16 / bfloat16; a and b finite.
/// Returns t (the same handle).
Tensor uniform_(const Tensor& t, double a = 0.0, double b = 1.0);
/// Fills t with N(mean, std^2).
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
/// Fills t (of any dtype, as PyTorch) with value; zeros_ and ones_ likewise.
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);
/// He uniform: U(-bound, bound), bound = gain(nl, a) * sqrt(3 / fan). With a = sqrt(5)
/// (PyTorch's Linear/Conv default) the bound is 1/sqrt(fan_in).
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nl = Nonlinearity::leaky_relu);
/// He normal: N(0, std^2), std = gain(nl, a) / sqrt(fan).
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                       Nonlinearity nl = Nonlinearity::leaky_relu);
/// Glorot uniform: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0);
/// Glorot normal: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& t, double gain = 1.0);
/// N(mean, std^2) truncated to [a, b] (PyTorch's trunc_normal_, ViT's init): uniform draws
/// between the normal CDF at a and b mapped through the inverse CDF (erfinv), then clamped.
Tensor trunc_normal_(const Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);
/// A (semi-)orthogonal matrix times gain (PyTorch's orthogonal_, Saxe et al.): t viewed as
/// (size(0), numel / size(0)), from the QR decomposition of a Gaussian matrix with the signs
/// of R's diagonal folded into Q. At least 2 dims.
Tensor orthogonal_(const Tensor& t, double gain = 1.0);
/// The identity matrix (2-D t; eye_), or the identity convolution (dirac_: 3- to 5-D weights
/// (out, in, k...), 1 at the kernel's centre of channel i -> i in each of `groups` groups).
Tensor eye_(const Tensor& t);
Tensor dirac_(const Tensor& t, int64_t groups = 1);
/// N(0, std^2) with ceil(sparsity * rows) entries of each column zeroed (2-D t; sparse_).
Tensor sparse_(const Tensor& t, double sparsity, double std = 0.01);

}  // namespace kiln::nn::init
