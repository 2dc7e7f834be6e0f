// models::GPT implementation: forward and sampling (generate).
#include "kiln/models/gpt.h"
#include <algorithm>
#include <cmath>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/core/rng.h"
#include "kiln/nn/checkpoint.h"
#include "kiln/nn/init.h"
#include "kiln/ops/linalg.h"

namespace kiln::models {

GPT::GPT(GPTConfig c) : config(c) {
  KILN_CHECK(c.vocab > 0 && c.context > 0 && c.layers >= 0 && c.heads > 0 && c.width > 0,
             "GPT: vocab, context, heads and width must be positive, got vocab=", c.vocab, ", context=", c.context,
             ", heads=", c.heads, ", width=", c.width);
  KILN_CHECK(c.width % c.heads == 0, "GPT: width ", c.width, " is not divisible by heads ", c.heads);
  KILN_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "GPT: dropout must be in [0, 1), got ", c.dropout);
  wte = register_module("wte", nn::Embedding(c.vocab, c.width));
  wpe = register_module("wpe", nn::Embedding(c.context, c.width));
  drop = register_module("drop", nn::Dropout(c.dropout));
  nn::ModuleList bl;
  for (int64_t i = 0; i < c.layers; ++i)
    bl.push_back(nn::TransformerBlock(c.width, c.heads, {.causal = true, .dropout = c.dropout}));
  blocks = register_module("blocks", bl);
  ln_f = register_module("ln_f", nn::LayerNorm(c.width));
  if (!c.tie_weights) head = register_module("head", nn::Linear(c.width, c.vocab, {.bias = false}));
  reset_parameters();
}

void GPT::reset_parameters() {
  // GPT-2's initialisation (as in llm.c and nanoGPT): every matrix N(0, 0.02), the two
  // projections that write into the residual stream N(0, 0.02 / sqrt(2 * layers)) so its
  // variance does not grow with depth, biases zero, LayerNorms (1, 0).
  NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * double(std::max<int64_t>(config.layers, 1)));
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (auto& [name, p] : named_parameters()) {
    if (name.rfind("ln", 0) == 0 || name.find(".ln") != std::string::npos) continue;  // LayerNorm
    if (p.dim() == 1) nn::init::zeros_(p);
    else if (ends_with(name, "attn.proj.weight") || ends_with(name, "mlp.2.weight")) nn::init::normal_(p, 0.0, residual_std);
    else nn::init::normal_(p, 0.0, 0.02);
  }
}

Tensor GPT::forward(const Tensor& idx) {
  KILN_CHECK(idx.defined() && idx.dim() == 2, "GPT: expected idx (B, T), got ",
             idx.defined() ? shape_str(idx.shape()) : std::string("undefined"));
  KILN_CHECK(idx.dtype() == DType::int64 || idx.dtype() == DType::int32, "GPT: idx must be int64 or int32, got ",
             dtype_name(idx.dtype()));
  const int64_t T = idx.size(1);
  KILN_CHECK(T >= 1 && T <= config.context, "GPT: sequence length ", T, " of idx ", shape_str(idx.shape()),
             " must be in [1, context=", config.context, "]");
  Tensor pos = arange(0.0, double(T), 1.0, {.dtype = DType::int64, .device = idx.device()});  // (T)
  Tensor x = drop(wte(idx) + wpe(pos));                                                        // (B, T, C)
  for (size_t i = 0; i < blocks.size(); ++i)
    x = checkpoint_activations ? kiln::checkpoint(blocks.get<nn::TransformerBlock>(int64_t(i)), x)
                               : blocks[int64_t(i)](x);
  x = ln_f(x);
  return linear(x, head_weight());  // (B, T, V)
}

Tensor GPT::generate(const Tensor& idx, int64_t max_new_tokens, double temperature, std::optional<int64_t> top_k,
                     std::optional<double> top_p) {
  KILN_CHECK(std::isfinite(temperature) && temperature >= 0, "GPT::generate: temperature must be a finite number >= 0 "
             "(0: greedy), got ", temperature);
  KILN_CHECK(idx.defined() && idx.dim() == 2 && idx.size(1) >= 1, "GPT::generate: expected idx (B, T) with T >= 1, got ",
             idx.defined() ? shape_str(idx.shape()) : std::string("undefined"));
  KILN_CHECK(max_new_tokens >= 0, "GPT::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  KILN_CHECK(!top_k || *top_k >= 1, "GPT::generate: top_k must be >= 1, got ", top_k ? *top_k : 0);
  KILN_CHECK(!top_p || (*top_p > 0 && *top_p <= 1), "GPT::generate: top_p must be in (0, 1], got ", top_p ? *top_p : 0);
  NoGradGuard no_grad;
  const int64_t B = idx.size(0), V = config.vocab;
  std::vector<int64_t> toks = idx.to(DType::int64).contiguous().to(Device::cpu()).to_vector<int64_t>();  // (B, L)
  int64_t L = idx.size(1);
  for (int64_t v : toks)
    KILN_CHECK(v >= 0 && v < V, "GPT::generate: token ", v, " out of range [0, ", V, ")");
  std::vector<float> logit(V);
  std::vector<int64_t> order(V);
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const int64_t T = std::min(L, config.context);
    std::vector<int64_t> window(B * T);  // (B, T): the last T tokens of each row
    for (int64_t b = 0; b < B; ++b)
      std::copy(toks.begin() + b * L + (L - T), toks.begin() + (b + 1) * L, window.begin() + b * T);
    Tensor in = from_vector(window, {B, T}, {.dtype = DType::int64, .device = idx.device()});
    Tensor last = forward(in).narrow(1, T - 1, 1).reshape({B, V}).to(DType::float32).contiguous().to(Device::cpu());
    std::vector<float> all = last.to_vector<float>();  // (B, V)
    // One uniform per row from kiln's generator.
    std::vector<float> u = rand({B}).to_vector<float>();
    std::vector<int64_t> next(B);
    for (int64_t b = 0; b < B; ++b) {
      std::copy(all.begin() + b * V, all.begin() + (b + 1) * V, logit.begin());
      if (temperature <= 0.0) {
        next[b] = std::max_element(logit.begin(), logit.end()) - logit.begin();
        continue;
      }
      // Keep the k largest logits (ties at the k-th value are kept too, like nanoGPT).
      float cutoff = -INFINITY;
      if (top_k && *top_k < V) {
        for (int64_t i = 0; i < V; ++i) order[i] = i;
        std::nth_element(order.begin(), order.begin() + (*top_k - 1), order.end(),
                         [&](int64_t a, int64_t c) { return logit[a] > logit[c]; });
        cutoff = logit[order[*top_k - 1]];
      }
      const float mx = *std::max_element(logit.begin(), logit.end());
      double total = 0.0;
      std::vector<double> p(V);
      for (int64_t i = 0; i < V; ++i) {
        p[i] = logit[i] < cutoff ? 0.0 : std::exp((double(logit[i]) - mx) / temperature);
        total += p[i];
      }
      if (top_p && *top_p < 1) {  // nucleus: the most likely tokens until their mass reaches top_p
        for (int64_t i = 0; i < V; ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return p[a] > p[c] || (p[a] == p[c] && a < c); });
        double kept = 0;
        int64_t n = 0;
        while (n < V && kept < *top_p * total) kept += p[order[n++]];
        for (int64_t j = n; j < V; ++j) p[order[j]] = 0.0;
        total = kept;
      }
      const double target = double(u[b]) * total;
      double acc = 0.0;
      int64_t pick = -1;
      for (int64_t i = 0; i < V; ++i) {
        if (p[i] == 0.0) continue;
        acc += p[i];
        pick = i;
        if (acc > target) break;
      }
      next[b] = pick;
    }
    std::vector<int64_t> grown(B * (L + 1));
    for (int64_t b = 0; b < B; ++b) {
      std::copy(toks.begin() + b * L, toks.begin() + (b + 1) * L, grown.begin() + b * (L + 1));
      grown[b * (L + 1) + L] = next[b];
    }
    toks.swap(grown);
    ++L;
  }
  return from_vector(toks, {B, L}, {.dtype = DType::int64, .device = idx.device()});
}

}  // namespace kiln::models
