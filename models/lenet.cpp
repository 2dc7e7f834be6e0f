// models::LeNet5 implementation.
#include "kiln/models/lenet.h"
#include "kiln/nn/checkpoint.h"

namespace kiln::models {

LeNet5::LeNet5(LeNet5Options o) : options(o) {
  features = register_module("features", nn::Sequential{
      nn::Conv2d(options.in_channels, 6, 5, {.padding = 2}), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(6, 16, 5), nn::ReLU(), nn::MaxPool2d(2)});
  classifier = register_module("classifier", nn::Sequential{
      nn::Flatten(), nn::Linear(16 * 5 * 5, 120), nn::ReLU(), nn::Linear(120, 84), nn::ReLU(),
      nn::Linear(84, options.num_classes)});
}

Tensor LeNet5::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == options.in_channels && x.size(2) == 28 && x.size(3) == 28,
             "LeNet5: expected input (N, ", options.in_channels, ", 28, 28), got ",
             x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  return classifier(checkpoint_activations ? kiln::checkpoint(features, x) : features(x));
}

}  // namespace kiln::models
