// Neural-network functions: dropout, embedding lookup, scaled dot-product attention.
#pragma once
#include "core/tensor.h"

namespace kiln {

/// Zeroes elements with probability p and scales the rest by 1/(1-p) when training;
/// the mask comes from the global Philox generator (seeded, repeatable).
Tensor dropout(const Tensor& x, double p, bool training = true);

/// weight (V, D) rows picked by integer indices (any shape) -> (..., D). Rows equal to
/// padding_idx (if >= 0) get no gradient.
Tensor embedding(const Tensor& indices, const Tensor& weight, int64_t padding_idx = -1);

/// softmax(q k^T / sqrt(d) [+ causal mask]) v for q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false);

}  // namespace kiln
