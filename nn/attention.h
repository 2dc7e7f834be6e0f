// Attention layers: MultiheadAttention (fused qkv projection, kiln's fused
// scaled_dot_product_attention, output projection; a general forward with separate query,
// key and value and PyTorch's masks), the pre-LayerNorm TransformerBlock (GPT-2), and
// PyTorch's TransformerEncoderLayer / DecoderLayer, TransformerEncoder / Decoder and
// Transformer (batch first).
#pragma once
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"

namespace kiln::nn {

struct MultiheadAttentionOptions {
  bool causal = false;   ///< position t attends to positions <= t only
  double dropout = 0.0;  ///< dropout on the output projection (training only)
  bool bias = true;      ///< biases in the qkv and output projections
  /// dropout on the attention weights (training only): what torch.nn.MultiheadAttention
  /// calls `dropout`. Above 0 the layer computes the weights explicitly (no fused kernel).
  double attn_dropout = 0.0;
};

/// The keywords of torch.nn.MultiheadAttention's forward (batch first).
struct MultiheadAttentionArgs {
  /// (B, S): bool, true marks a padding key that no query attends to; or float, added to
  /// the scores.
  Tensor key_padding_mask{};
  /// (L, S) or (B * num_heads, L, S): bool, true where a query may NOT attend (PyTorch's
  /// MultiheadAttention convention, the opposite of F.scaled_dot_product_attention's); or
  /// float, added to the scores.
  Tensor attn_mask{};
  bool need_weights = true;          ///< also return the attention weights (as PyTorch's default)
  bool average_attn_weights = true;  ///< weights averaged over the heads (B, L, S), else (B, H, L, S)
  bool is_causal = false;            ///< also mask the keys after each query (top-left aligned)
};
/// Self-attention over x (B, T, C) -> (B, T, C), C = embed_dim split into num_heads heads:
///   q, k, v = split(qkv(x)); y = sdpa(q, k, v, causal) per head; out = dropout(proj(y)).
/// Children: qkv = Linear(C, 3C), proj = Linear(C, C), initialised as Linear layers (nanoGPT's
/// layout). torch.nn.MultiheadAttention differs in names and init: its in_proj_weight /
/// in_proj_bias are kiln's qkv.weight / qkv.bias (the same q|k|v row blocks) and out_proj.*
/// kiln's proj.*, so renaming the keys loads its weights (outputs then match); it initialises
/// in_proj_weight with xavier_uniform and both biases with zeros.
/// `dropout` is applied to the projected output (nanoGPT's resid_dropout); `attn_dropout`
/// to the attention weights (PyTorch's `dropout`).
///
/// forward(query, key, value, args) is torch.nn.MultiheadAttention's forward, batch first:
/// query (B, L, E), key and value (B, S, E) -> {output (B, L, E), weights or undefined}. It
/// computes the weights explicitly: softmax(q k^T / sqrt(d) + masks), dropout, times v. A
/// query whose keys are all masked gives NaN, as PyTorch's. (kdim / vdim other than
/// embed_dim, add_bias_kv and add_zero_attn are not offered.)
class MultiheadAttention : public Module {
 public:
  MultiheadAttention() = default;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const MultiheadAttentionArgs& args = {});
  /// torch.nn.MultiheadAttention's initialisation: xavier_uniform in_proj (qkv) weight,
  /// zero biases (the output projection's weight keeps Linear's).
  void reset_parameters_like_torch();
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
///   mlp = Sequential{Linear(C, 4C), GELU(tanh), Linear(4C, C), Dropout(p)},
/// its Linear and GELU run as one linear_gelu (mlp_forward).
/// Children: ln1, attn, ln2, mlp (parameter names like "attn.qkv.weight", "mlp.0.weight").
class TransformerBlock : public Module {
 public:
  TransformerBlock() = default;
  TransformerBlock(int64_t embed_dim, int64_t num_heads, TransformerBlockOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  /// mlp(x), with its Linear and GELU(tanh) as one linear_gelu where they are unchanged.
  Tensor mlp_forward(const Tensor& x);

  LayerNorm ln1, ln2;
  MultiheadAttention attn;
  Sequential mlp;
  int64_t embed_dim = 0, num_heads = 0;
  TransformerBlockOptions options;
};


/// (sz, sz) float32 mask for the attention masks: 0 on and below the diagonal, -inf above
/// (torch.nn.Transformer.generate_square_subsequent_mask).
Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions o = {});

enum class TransformerActivation { relu, gelu };

/// torch.nn.TransformerEncoderLayer / DecoderLayer's options (batch_first only).
struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;  ///< on the attention weights, after each block and inside the MLP
  TransformerActivation activation = TransformerActivation::relu;  ///< gelu: the exact one
  double layer_norm_eps = 1e-5;
  bool norm_first = false;  ///< pre-norm (x + block(norm(x))) instead of post-norm (norm(x + block(x)))
  bool bias = true;         ///< biases in the Linear and LayerNorm layers
};

/// torch.nn.TransformerEncoderLayer (batch first): self-attention then a feed-forward
/// block (linear1, activation, dropout, linear2), each with dropout, a residual and a
/// LayerNorm. Children with PyTorch's names (self_attn, linear1, dropout, linear2, norm1,
/// norm2, dropout1, dropout2) and initialisation; self_attn's in_proj_weight / in_proj_bias
/// / out_proj.* are kiln's self_attn.qkv.* / self_attn.proj.*.
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer() = default;
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions o = {});
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  /// src (B, S, E); src_mask and src_key_padding_mask as MultiheadAttentionArgs' attn_mask
  /// and key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  std::string extra_repr() const override;
  MultiheadAttention self_attn;
  Linear linear1, linear2;
  Dropout dropout, dropout1, dropout2;
  LayerNorm norm1, norm2;
  int64_t d_model = 0, nhead = 0;
  TransformerLayerOptions options;
};

/// torch.nn.TransformerDecoderLayer (batch first): self-attention on tgt, attention from
/// tgt to memory (multihead_attn), then the feed-forward block; norm1..3, dropout1..3.
class TransformerDecoderLayer : public Module {
 public:
  using Module::forward;
  TransformerDecoderLayer() = default;
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions o = {});
  /// tgt (B, T, E), memory (B, S, E); the masks as MultiheadAttentionArgs'.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  std::string extra_repr() const override;
  MultiheadAttention self_attn, multihead_attn;
  Linear linear1, linear2;
  Dropout dropout, dropout1, dropout2, dropout3;
  LayerNorm norm1, norm2, norm3;
  int64_t d_model = 0, nhead = 0;
  TransformerLayerOptions options;
};

/// torch.nn.TransformerEncoder: num_layers copies of one layer configuration in `layers`
/// (every copy starts from the same parameters, as PyTorch's deepcopy of its layer), then
/// the optional final LayerNorm `norm`.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder() = default;
  TransformerEncoder(int64_t d_model, int64_t nhead, int64_t num_layers, TransformerLayerOptions o = {},
                     bool final_norm = false);
  Tensor forward(const Tensor& src) override { return forward(src, Tensor()); }
  Tensor forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  ModuleList layers;
  LayerNorm norm;  ///< empty without final_norm
};

/// torch.nn.TransformerDecoder: num_layers copies of a TransformerDecoderLayer, then the
/// optional final LayerNorm.
class TransformerDecoder : public Module {
 public:
  using Module::forward;
  TransformerDecoder() = default;
  TransformerDecoder(int64_t d_model, int64_t nhead, int64_t num_layers, TransformerLayerOptions o = {},
                     bool final_norm = false);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {},
                 bool tgt_is_causal = false, bool memory_is_causal = false);
  ModuleList layers;
  LayerNorm norm;
};

struct TransformerOptions {
  int64_t d_model = 512, nhead = 8, num_encoder_layers = 6, num_decoder_layers = 6;
  TransformerLayerOptions layer;
};

/// torch.nn.Transformer (batch first): encoder (with a final LayerNorm) over src, decoder
/// (with one) over tgt attending to the encoder's output. Every parameter with more than one
/// dim starts xavier_uniform, as PyTorch's.
class Transformer : public Module {
 public:
  using Module::forward;
  Transformer() = default;
  explicit Transformer(TransformerOptions o);
  /// src (B, S, E), tgt (B, T, E) -> (B, T, E).
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {}, const Tensor& tgt_mask = {},
                 const Tensor& memory_mask = {}, const Tensor& src_key_padding_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {});
  TransformerEncoder encoder;
  TransformerDecoder decoder;
  TransformerOptions options;
};

}  // namespace kiln::nn
