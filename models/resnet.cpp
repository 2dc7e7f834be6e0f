// models::ResNet20 and BasicBlock implementation.
#include "kiln/models/resnet.h"
#include "kiln/nn/checkpoint.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/elementwise.h"

namespace kiln::models {

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  conv1 = register_module("conv1", nn::Conv2d(in_channels, out_channels, 3,
                                              {.stride = stride, .padding = 1, .bias = false}));
  bn1 = register_module("bn1", nn::BatchNorm2d(out_channels));
  conv2 = register_module("conv2", nn::Conv2d(out_channels, out_channels, 3, {.padding = 1, .bias = false}));
  bn2 = register_module("bn2", nn::BatchNorm2d(out_channels));
  has_projection = stride != 1 || in_channels != out_channels;
  if (has_projection)
    shortcut = register_module("shortcut", nn::Sequential{
        nn::Conv2d(in_channels, out_channels, 1, {.stride = stride, .bias = false}), nn::BatchNorm2d(out_channels)});
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor h = relu(bn1(conv1(x)));
  h = bn2(conv2(h));
  return relu(h + (has_projection ? shortcut(x) : x));
}

ResNet20::ResNet20(ResNetOptions o) : options(o) {
  KILN_CHECK(options.blocks_per_stage > 0 && options.base_width > 0, "ResNet20: blocks_per_stage and base_width ",
             "must be positive, got ", options.blocks_per_stage, " and ", options.base_width);
  const int64_t w = options.base_width;
  conv1 = register_module("conv1", nn::Conv2d(options.in_channels, w, 3, {.padding = 1, .bias = false}));
  bn1 = register_module("bn1", nn::BatchNorm2d(w));
  auto stage = [&](int64_t in, int64_t out, int64_t stride) {
    nn::Sequential s;
    for (int64_t i = 0; i < options.blocks_per_stage; ++i) s.push_back(BasicBlock(i == 0 ? in : out, out, i == 0 ? stride : 1));
    return s;
  };
  layer1 = register_module("layer1", stage(w, w, 1));
  layer2 = register_module("layer2", stage(w, 2 * w, 2));
  layer3 = register_module("layer3", stage(2 * w, 4 * w, 2));
  fc = register_module("fc", nn::Linear(4 * w, options.num_classes));
}

Tensor ResNet20::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == options.in_channels, "ResNet20: expected input (N, ",
             options.in_channels, ", H, W), got ", x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  Tensor h = relu(bn1(conv1(x)));
  for (nn::Sequential* stage : {&layer1, &layer2, &layer3})
    h = checkpoint_activations ? kiln::checkpoint(*stage, h) : (*stage)(h);
  h = adaptive_avg_pool2d(h, {1, 1}).flatten(1);  // (N, 4w)
  return fc(h);
}

}  // namespace kiln::models
