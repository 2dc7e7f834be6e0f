// Image datasets stored in binary files: MNIST and Fashion-MNIST (IDX files, plain or
// .gz) and CIFAR-10 (binary batches). Pixels are kept as uint8 and served as float32
// in [0, 1] through TensorDataset's gather; labels are int64.
#pragma once
#include <string>
#include <vector>
#include "kiln/data/dataset.h"

namespace kiln::data {

/// MNIST handwritten digits from `root` holding train-images-idx3-ubyte,
/// train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (each may
/// also be .gz). Inputs float32 (N, 1, H, W) in [0, 1] (H = W = 28 in the real files),
/// targets int64 (N) in [0, 10).
class MNIST : public TensorDataset {
 public:
  MNIST(const std::string& root, Split split = Split::Train);
  /// Class names, index = label.
  virtual const std::vector<std::string>& classes() const;

 protected:
  MNIST() = default;
  void load(const std::string& root, Split split, const char* who);
};

/// Fashion-MNIST (same file names and format as MNIST), e.g. Debian's
/// dataset-fashion-mnist in /usr/share/datasets/fashion-mnist.
class FashionMNIST : public MNIST {
 public:
  FashionMNIST(const std::string& root, Split split = Split::Train);
  const std::vector<std::string>& classes() const override;
};

/// CIFAR-10 binary version from `root` (or root/cifar-10-batches-bin): data_batch_1.bin
/// .. data_batch_5.bin for Train, test_batch.bin for Test; each record is 1 label byte
/// + 3072 pixel bytes (R, G, B planes of 32x32). Inputs float32 (N, 3, 32, 32) in
/// [0, 1], targets int64 (N).
class CIFAR10 : public TensorDataset {
 public:
  CIFAR10(const std::string& root, Split split = Split::Train);
  const std::vector<std::string>& classes() const;
};

}  // namespace kiln::data
