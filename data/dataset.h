// Dataset interface (size + get(i), with an overridable whole-batch fast path) and
// TensorDataset, an in-memory dataset over an inputs tensor and a targets tensor whose
// batches are gathered row by row with memcpy (optionally converting uint8 -> float).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>
#include "kiln/core/tensor.h"

namespace kiln::data {

/// Which part of a dataset to read.
enum class Split { Train, Test };
/// "train" / "test".
const char* split_name(Split s);

/// One example: an input (e.g. (C, H, W) float32) and a target (e.g. a 0-dim int64 label).
struct Example {
  Tensor input;
  Tensor target;
};

/// A batch: inputs stacked along a new first dim, (B, ...), and targets (B, ...).
/// `indices` are the dataset indices the rows came from (filled by the DataLoader).
struct Batch {
  Tensor input;
  Tensor target;
  std::vector<int64_t> indices;
};

/// A map-style dataset. get() and get_batch() are const and must be safe to call from
/// several threads at once (DataLoader workers do).
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of examples.
  virtual int64_t size() const = 0;
  /// Example i, 0 <= i < size().
  virtual Example get(int64_t i) const = 0;
  /// The examples at `indices` stacked into one batch. The default calls get() per
  /// index and copies each example into the batch; datasets that can do better (an
  /// in-memory tensor: one memcpy per row) override it.
  virtual Batch get_batch(std::span<const int64_t> indices) const;
};

/// Stacks examples (equal shapes and dtypes) into a batch; the error names the
/// offending example. Used by the default Dataset::get_batch.
Batch stack_examples(const std::vector<Example>& examples, std::span<const int64_t> indices = {});

/// Options of TensorDataset.
struct TensorDatasetOptions {
  /// When set, inputs are converted to this dtype (float32 or float64) as they are
  /// gathered, e.g. uint8 pixels stored compactly and served as float32.
  std::optional<DType> input_dtype = std::nullopt;
  /// Multiplier applied with that conversion (e.g. 1/255 to scale pixels to [0, 1]).
  double input_scale = 1.0;
};

/// In-memory dataset over inputs (N, ...) and targets (N, ...), both on the CPU.
/// get_batch gathers rows with memcpy (consecutive indices in one copy), never
/// building per-example tensors.
class TensorDataset : public Dataset {
 public:
  TensorDataset() = default;
  TensorDataset(Tensor inputs, Tensor targets, TensorDatasetOptions options = {});

  int64_t size() const override { return n_; }
  Example get(int64_t i) const override;
  Batch get_batch(std::span<const int64_t> indices) const override;

  /// The stored inputs (N, ...), in their stored dtype (before any conversion).
  const Tensor& inputs() const { return inputs_; }
  /// The stored targets (N, ...).
  const Tensor& targets() const { return targets_; }
  /// dtype of the inputs a batch carries.
  DType input_dtype() const;

 protected:
  /// For subclasses that fill the tensors after construction.
  void reset(Tensor inputs, Tensor targets, TensorDatasetOptions options, const char* who);

 private:
  Tensor inputs_, targets_;
  TensorDatasetOptions options_;
  int64_t n_ = 0;
};

/// Part of a dataset (torch.utils.data.Subset): example i is dataset->get(indices[i]).
/// Batches go through the dataset's own get_batch, so an in-memory dataset keeps its
/// one-copy-per-row fast path. Holds the dataset alive.
class Subset : public Dataset {
 public:
  /// Throws kiln::Error naming the first index outside [0, dataset->size()).
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return int64_t(indices_.size()); }
  Example get(int64_t i) const override;
  Batch get_batch(std::span<const int64_t> indices) const override;
  /// The dataset's indices, in this subset's order.
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

/// Splits a dataset into disjoint random subsets (torch.utils.data.random_split), from a
/// permutation drawn with `seed` (the same seed gives the same split). `lengths` are
/// either sizes summing to dataset->size(), or fractions summing to 1: each subset then
/// gets floor(n * fraction) examples and the remainder goes one by one to the first
/// subsets, as in PyTorch. E.g. `auto parts = random_split(train, {0.9, 0.1});`
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& lengths, uint64_t seed = 0);

}  // namespace kiln::data
