// models::ResNet20 for 32x32 inputs (He et al. 2016, CIFAR variant): conv3x3(16) + BN +
// ReLU, three stages of 3 basic blocks (16/32/64 channels; stride 2 at stages 2 and 3),
// global average pool, Linear to the classes. Shortcut: 1x1 conv + BN projection where the
// shape changes (option B), identity otherwise.
#pragma once
#include <cstdint>
#include "kiln/nn/container.h"
#include "kiln/nn/layers.h"

namespace kiln::models {

/// Basic residual block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
/// Children: conv1, bn1, conv2, bn2 and, when stride != 1 or in != out, shortcut
/// (Sequential{Conv2d 1x1 stride s no bias, BatchNorm2d}).
class BasicBlock : public nn::Module {
 public:
  BasicBlock() = default;
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;

  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  nn::Sequential shortcut;  // empty (unregistered) for the identity shortcut
  bool has_projection = false;
};

struct ResNetOptions {
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  int64_t blocks_per_stage = 3;  ///< 3 gives ResNet20 (6n + 2 layers)
  int64_t base_width = 16;       ///< stage widths base, 2*base, 4*base
};

/// x (N, 3, 32, 32) -> logits (N, num_classes). Children: conv1, bn1, layer1..layer3
/// (Sequentials of BasicBlock), fc.
class ResNet20 : public nn::Module {
 public:
  explicit ResNet20(ResNetOptions o = {});
  Tensor forward(const Tensor& x) override;

  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Sequential layer1, layer2, layer3;
  nn::Linear fc;
  ResNetOptions options;
  /// Activation checkpointing (not saved with the weights): recompute the three stages
  /// in the backward pass instead of keeping their activations (kiln::checkpoint).
  bool checkpoint_activations = false;

};

}  // namespace kiln::models
