// models::ConvNet implementation.
#include "kiln/models/convnet.h"
#include "kiln/nn/checkpoint.h"

namespace kiln::models {

namespace {
void add_conv_bn_relu(nn::Sequential& s, int64_t in, int64_t out) {
  s.push_back(nn::Conv2d(in, out, 3, {.padding = 1, .bias = false}));
  s.push_back(nn::BatchNorm2d(out));
  s.push_back(nn::ReLU());
}
}  // namespace

ConvNet::ConvNet(ConvNetOptions o) : options(o) {
  KILN_CHECK(options.image_size > 0 && options.image_size % 4 == 0, "ConvNet: image_size must be a positive ",
             "multiple of 4, got ", options.image_size);
  nn::Sequential f;
  add_conv_bn_relu(f, options.in_channels, 32);
  add_conv_bn_relu(f, 32, 32);
  f.push_back(nn::MaxPool2d(2));
  add_conv_bn_relu(f, 32, 64);
  add_conv_bn_relu(f, 64, 64);
  f.push_back(nn::MaxPool2d(2));
  features = register_module("features", f);
  const int64_t s = options.image_size / 4;
  classifier = register_module("classifier", nn::Sequential{
      nn::Flatten(), nn::Linear(64 * s * s, 128), nn::ReLU(), nn::Linear(128, options.num_classes)});
}

Tensor ConvNet::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 4 && x.size(1) == options.in_channels && x.size(2) == options.image_size &&
                 x.size(3) == options.image_size,
             "ConvNet: expected input (N, ", options.in_channels, ", ", options.image_size, ", ", options.image_size,
             "), got ", x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  return classifier(checkpoint_activations ? kiln::checkpoint(features, x) : features(x));
}

}  // namespace kiln::models
