// models::ConvNet (WORKLOADS.md "convnet"): four conv3x3/BatchNorm/ReLU layers with two max
// pools, then Linear 3136-128, ReLU, Linear 128-10. Children: features, classifier.
#pragma once
#include <cstdint>
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"

namespace kiln::models {

struct ConvNetOptions {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  int64_t image_size = 28;  ///< input height = width (must be divisible by 4)
};

/// x (N, 1, 28, 28) -> logits (N, 10):
///   [Conv3x3 pad 1 no bias, BatchNorm2d, ReLU] 1->32, 32->32, MaxPool 2, 32->64, 64->64,
///   MaxPool 2, Flatten, Linear(64*7*7 = 3136, 128), ReLU, Linear(128, 10).
class ConvNet : public nn::Module {
 public:
  explicit ConvNet(ConvNetOptions o = {});
  Tensor forward(const Tensor& x) override;

  nn::Sequential features, classifier;
  /// Activation checkpointing (not saved with the weights): recompute the convolutional features
  /// in the backward pass instead of keeping their activations (kiln::checkpoint).
  bool checkpoint_activations = false;

  ConvNetOptions options;
};

}  // namespace kiln::models
