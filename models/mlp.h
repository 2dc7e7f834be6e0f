// models::MLP: a multi-layer perceptron (Linear + ReLU stack).
// Children: "net" (Sequential: Linear, ReLU, ..., Linear), so names are "net.0.weight", ...
#pragma once
#include <cstdint>
#include <vector>
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"

namespace kiln::models {

struct MLPOptions {
  int64_t in = 784;                     ///< input features
  std::vector<int64_t> hidden = {128};  ///< hidden layer sizes (each followed by ReLU)
  int64_t out = 10;                     ///< output features (no activation)
};

/// x (N, in) -> (N, out):  Linear(in, h0), ReLU, Linear(h0, h1), ReLU, ..., Linear(hk, out).
class MLP : public nn::Module {
 public:
  explicit MLP(MLPOptions o = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  nn::Sequential net;
  MLPOptions options;
};

}  // namespace kiln::models
