// MultiheadAttention and TransformerBlock: construction, shape checks and forward.
#include "kiln/nn/attention.h"
#include <sstream>
#include "kiln/ops/nn_functional.h"

namespace kiln::nn {

MultiheadAttention::MultiheadAttention(int64_t d, int64_t h, MultiheadAttentionOptions o)
    : embed_dim(d), num_heads(h), options(o) {
  KILN_CHECK(d > 0 && h > 0 && d % h == 0, "MultiheadAttention: embed_dim (", d,
             ") must be positive and divisible by num_heads (", h, ")");
  KILN_CHECK(o.dropout >= 0 && o.dropout <= 1, "MultiheadAttention: dropout must be in [0, 1], got ", o.dropout);
  qkv = register_module("qkv", Linear(d, 3 * d, {.bias = o.bias}));
  proj = register_module("proj", Linear(d, d, {.bias = o.bias}));
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  KILN_CHECK(embed_dim > 0, "MultiheadAttention: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::MultiheadAttention(...)) before calling it");
  KILN_CHECK(x.defined() && x.dim() == 3 && x.size(2) == embed_dim, "MultiheadAttention(embed_dim=", embed_dim,
             ", num_heads=", num_heads, "): expected input of shape (B, T, ", embed_dim, "), got ",
             x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  // qkv(x) is (B, T, 3C): the heads of q, k and v side by side; y (B, T, C) the heads' outputs.
  Tensor y = scaled_dot_product_attention_packed(qkv(x), num_heads, options.causal);
  return dropout(proj(y), options.dropout, is_training());
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << embed_dim << ", num_heads=" << num_heads << ", causal=" << (options.causal ? "true" : "false")
     << ", dropout=" << options.dropout;
  return os.str();
}

TransformerBlock::TransformerBlock(int64_t d, int64_t h, TransformerBlockOptions o)
    : embed_dim(d), num_heads(h), options(o) {
  KILN_CHECK(o.mlp_ratio > 0, "TransformerBlock: mlp_ratio must be positive, got ", o.mlp_ratio);
  ln1 = register_module("ln1", LayerNorm(d, {.eps = o.eps, .bias = o.bias}));
  attn = register_module("attn", MultiheadAttention(d, h, {.causal = o.causal, .dropout = o.dropout, .bias = o.bias}));
  ln2 = register_module("ln2", LayerNorm(d, {.eps = o.eps, .bias = o.bias}));
  mlp = register_module("mlp", Sequential{Linear(d, o.mlp_ratio * d, {.bias = o.bias}), GELU(GeluApprox::tanh),
                                          Linear(o.mlp_ratio * d, d, {.bias = o.bias}), Dropout(o.dropout)});
}

Tensor TransformerBlock::forward(const Tensor& x) {
  KILN_CHECK(embed_dim > 0, "TransformerBlock: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::TransformerBlock(...)) before calling it");
  Tensor h = x + attn(ln1(x));
  return h + mlp(ln2(h));
}

std::string TransformerBlock::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << embed_dim << ", num_heads=" << num_heads;
  return os.str();
}

}  // namespace kiln::nn
