// models::LeNet5 (WORKLOADS.md "lenet"): two conv/ReLU/maxpool stages and three Linear layers.
// Children: features (Sequential), classifier (Sequential).
#pragma once
#include <cstdint>
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"

namespace kiln::models {

struct LeNet5Options {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
};

/// x (N, 1, 28, 28) -> logits (N, 10):
///   Conv(1->6, k5, pad 2), ReLU, MaxPool 2; Conv(6->16, k5), ReLU, MaxPool 2; Flatten;
///   Linear 400-120, ReLU, Linear 120-84, ReLU, Linear 84-10.
class LeNet5 : public nn::Module {
 public:
  explicit LeNet5(LeNet5Options o = {});
  Tensor forward(const Tensor& x) override;

  nn::Sequential features, classifier;
  /// Activation checkpointing (not saved with the weights): recompute the convolutional features
  /// in the backward pass instead of keeping their activations (kiln::checkpoint).
  bool checkpoint_activations = false;

  LeNet5Options options;
};

}  // namespace kiln::models
