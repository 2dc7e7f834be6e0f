// Data transforms: to-tensor (uint8 HWC -> float CHW / 255), per-channel normalize,
// random crop with zero padding, random horizontal flip, and Compose to chain them.
// Each works on one example (C, H, W) or a whole batch (N, C, H, W); random ones draw
// per sample from the Rng they are given, so results are fixed by the seed.
#pragma once
#include <functional>
#include <initializer_list>
#include <vector>
#include "kiln/core/tensor.h"
#include "kiln/data/rng.h"

namespace kiln::data {

/// A transform maps a tensor (one example or a batch) to a new tensor, drawing any
/// randomness from rng. Every transform below (and Compose) converts to it, as does
/// any lambda `[](const Tensor& x, Rng& rng) { ... }`.
using Transform = std::function<Tensor(const Tensor& x, Rng& rng)>;

/// uint8 images (H, W, C) or (N, H, W, C) (or (H, W), treated as one channel) ->
/// float32 (C, H, W) / (N, C, H, W) scaled to [0, 1].
struct ToTensor {
  Tensor operator()(const Tensor& x, Rng& rng) const;
};

/// (x - mean[c]) / std[c] per channel of a float32/float64 (..., C, H, W) tensor;
/// one value of mean/std applies to every channel.
struct Normalize {
  std::vector<double> mean;
  std::vector<double> std;
  Tensor operator()(const Tensor& x, Rng& rng) const;
};

/// Pads (..., C, H, W) with `padding` zeros on every side, then cuts a random
/// height x width window per sample (any dtype).
struct RandomCrop {
  int64_t height = 0;
  int64_t width = 0;
  int64_t padding = 0;
  Tensor operator()(const Tensor& x, Rng& rng) const;
};

/// Mirrors each sample left-right with probability p (any dtype, (..., H, W)).
struct RandomHorizontalFlip {
  double p = 0.5;
  Tensor operator()(const Tensor& x, Rng& rng) const;
};

/// Applies transforms in order: `Compose{ToTensor{}, RandomCrop{32, 32, 4}, Normalize{{0.5}, {0.5}}}`.
class Compose {
 public:
  Compose() = default;
  Compose(std::initializer_list<Transform> ts) : ts_(ts) {}
  explicit Compose(std::vector<Transform> ts) : ts_(std::move(ts)) {}
  /// Appends a transform; returns *this.
  Compose& push_back(Transform t);
  Tensor operator()(const Tensor& x, Rng& rng) const;
  size_t size() const { return ts_.size(); }

 private:
  std::vector<Transform> ts_;
};

}  // namespace kiln::data
