// Gradient clipping: clip_grad_norm_ (global p-norm or inf-norm over all gradients) and
// clip_grad_value_ (elementwise clamp), like torch.nn.utils.clip_grad_*; and
// parameters_to_vector / vector_to_parameters.
#pragma once
#include <limits>
#include <vector>
#include "kiln/core/tensor.h"

namespace kiln::optim {

/// Scales all defined gradients in place so that their joint norm_type-norm is at most
/// max_norm (coefficient max_norm / (total + 1e-6) when below 1) and returns the total norm
/// before clipping (0 when no parameter has a gradient). norm_type is any p > 0 or
/// infinity (max |g|). When the total norm is inf or NaN the gradients are left unchanged
/// and the non-finite norm is returned, or, with error_if_nonfinite, kiln::Error is thrown.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

/// Clamps every defined gradient in place to [-clip_value, clip_value] (NaN stays NaN).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

/// The parameters flattened and joined into one vector (torch.nn.utils.parameters_to_vector;
/// differentiable), and its inverse: each parameter overwritten in place, under no grad, by
/// its slice of vec (vector_to_parameters). One device; vec's dtype is converted to each
/// parameter's.
Tensor parameters_to_vector(const std::vector<Tensor>& params);
void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& params);

}  // namespace kiln::optim
