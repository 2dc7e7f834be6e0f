// models::GPT: a GPT-2 style decoder-only transformer (token + learned position
// embeddings, pre-LN causal TransformerBlocks, final LayerNorm, bias-free head with
// optional weight tying) and autoregressive sampling (generate).
#pragma once
#include <cstdint>
#include <optional>
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"

namespace kiln::models {

struct GPTConfig {
  int64_t vocab = 65;
  int64_t context = 256;  ///< maximum sequence length (position table size)
  int64_t layers = 6;
  int64_t heads = 6;
  int64_t width = 384;    ///< embedding dim (divisible by heads)
  double dropout = 0.0;   ///< after the embeddings and inside each block
  bool tie_weights = true;  ///< head weight is the token embedding tensor
};

/// idx (B, T) int64, T <= context -> logits (B, T, vocab).
/// Children: wte (Embedding vocab x width), wpe (Embedding context x width), drop,
/// blocks (ModuleList of TransformerBlock, causal), ln_f (LayerNorm), and head
/// (Linear width -> vocab, no bias) only when !tie_weights (tied: logits = x wte^T).
class GPT : public nn::Module {
 public:
  explicit GPT(GPTConfig config = {});
  /// GPT-2's initialisation: matrices and embeddings N(0, 0.02), the attention and MLP
  /// output projections N(0, 0.02 / sqrt(2 * layers)), biases 0, LayerNorms (1, 0).
  void reset_parameters() override;
  Tensor forward(const Tensor& idx) override;
  /// The head's weight (vocab, width): wte.weight when tied.
  Tensor head_weight() const { return config.tie_weights ? wte.param(wte.weight) : head.param(head.weight); }

  /// Appends max_new_tokens sampled tokens to idx (B, T) int64 and returns (B, T + new).
  /// Runs under NoGradGuard; each step feeds the last `context` tokens, scales the last
  /// logits by 1/temperature, keeps the top_k largest (when given), then the smallest set
  /// of most likely tokens whose probabilities sum to at least top_p (nucleus sampling,
  /// when given, in (0, 1]), and samples from the renormalised softmax with kiln's
  /// generator (kiln::manual_seed makes it reproducible). temperature <= 0 means greedy
  /// (argmax). Does not change training mode: call eval() first when dropout > 0.
  Tensor generate(const Tensor& idx, int64_t max_new_tokens, double temperature = 1.0,
                  std::optional<int64_t> top_k = std::nullopt, std::optional<double> top_p = std::nullopt);

  nn::Embedding wte, wpe;
  nn::Dropout drop;
  nn::ModuleList blocks;
  nn::LayerNorm ln_f;
  nn::Linear head;
  GPTConfig config;
  /// Activation checkpointing (not saved with the weights): recompute each transformer
  /// block in the backward pass instead of keeping its activations (kiln::checkpoint).
  bool checkpoint_activations = false;
};

}  // namespace kiln::models
