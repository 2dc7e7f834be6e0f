// Attention layers: MultiheadAttention (fused qkv projection, kiln's fused
// scaled_dot_product_attention, output projection) and the pre-LayerNorm TransformerBlock.
#pragma once
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  bool causal = false;   ///< position t attends to positions <= t only
  double dropout = 0.0;  ///< dropout on the output projection (training only)
  bool bias = true;      ///< biases in the qkv and output projections
};
/// Self-attention over x (B, T, C) -> (B, T, C), C = embed_dim split into num_heads heads:
///   q, k, v = split(qkv(x)); y = sdpa(q, k, v, causal) per head; out = dropout(proj(y)).
/// Children: qkv = Linear(C, 3C), proj = Linear(C, C), initialised as Linear layers (nanoGPT's
/// layout). torch.nn.MultiheadAttention differs in names and init: its in_proj_weight /
/// in_proj_bias are kiln's qkv.weight / qkv.bias (the same q|k|v row blocks) and out_proj.*
/// kiln's proj.*, so renaming the keys loads its weights (outputs then match); it initialises
/// in_proj_weight with xavier_uniform and both biases with zeros.
/// Note: kiln::scaled_dot_product_attention has no dropout on the attention weights, so
/// `dropout` is applied to the projected output (nanoGPT's resid_dropout).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention() = default;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Linear qkv, proj;
  int64_t embed_dim = 0, num_heads = 0;
  MultiheadAttentionOptions options;
};

struct TransformerBlockOptions {
  bool causal = false;    ///< causal self-attention (set true for a GPT)
  double dropout = 0.0;   ///< dropout after the attention and the MLP output projections
  int64_t mlp_ratio = 4;  ///< MLP hidden size = mlp_ratio * embed_dim
  double eps = 1e-5;      ///< LayerNorm eps
  bool bias = true;       ///< biases in the Linear layers
};
/// Pre-LayerNorm transformer block (GPT-2):
///   x = x + attn(ln1(x));  x = x + mlp(ln2(x));
///   mlp = Sequential{Linear(C, 4C), GELU(tanh), Linear(4C, C), Dropout(p)}.
/// Children: ln1, attn, ln2, mlp (parameter names like "attn.qkv.weight", "mlp.0.weight").
class TransformerBlock : public Module {
 public:
  TransformerBlock() = default;
  TransformerBlock(int64_t embed_dim, int64_t num_heads, TransformerBlockOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  LayerNorm ln1, ln2;
  MultiheadAttention attn;
  Sequential mlp;
  int64_t embed_dim = 0, num_heads = 0;
  TransformerBlockOptions options;
};

}  // namespace kiln::nn
