// DataLoader: batches a Dataset, optionally shuffled (a seeded Philox permutation, new
// each epoch), optionally prefetched by worker threads into a bounded window. Batch k
// of an epoch is the same whatever the worker count; iteration is a range-for.
#pragma once
#include <cstdint>
#include <concepts>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>
#include "kiln/data/dataset.h"
#include "kiln/data/transforms.h"

namespace kiln::data {

/// Chooses which dataset indices an epoch visits, and in which order (e.g. one rank's
/// share of the data: dist::DistributedSampler). Must be thread-safe (const).
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices epoch `epoch` visits, for a dataset of `n` examples.
  virtual std::vector<int64_t> indices(int64_t epoch, int64_t n) const = 0;
  /// How many indices every epoch has for a dataset of `n` examples.
  virtual int64_t count(int64_t n) const = 0;
};

/// Options of DataLoader (an aggregate: `{.batch_size = 64, .shuffle = true, .workers = 2}`).
struct DataLoaderOptions {
  int64_t batch_size = 1;
  /// Visit examples in a random order, a new permutation each epoch.
  bool shuffle = false;
  /// Which indices each epoch visits, in order (replaces `shuffle`; the sampler shuffles).
  std::shared_ptr<const Sampler> sampler = nullptr;
  /// Seed of the shuffle order and of the per-batch Rng given to `transform`. Unset:
  /// drawn from kiln's global generator when the loader is built (so kiln::manual_seed
  /// makes runs repeatable).
  std::optional<uint64_t> seed = std::nullopt;
  /// Drop the last batch when it has fewer than batch_size examples.
  bool drop_last = false;
  /// Background threads producing batches (0: batches are made on the caller's thread).
  /// They call the dataset's get()/get_batch() and `transform` concurrently, so those
  /// must be thread-safe (kiln's datasets are). Worth it when producing a batch is
  /// slow (decoding images, heavy transforms); an in-memory TensorDataset is faster
  /// with 0.
  int workers = 0;
  /// Copy each batch's tensors into page-locked (pinned) host memory on the producing
  /// thread, so the upload to the GPU (batch.input.to(Device::cuda())) runs asynchronously.
  /// No effect where no GPU is available (a build without CUDA, or no device).
  bool pin_memory = false;
  /// Batches in flight per worker (the prefetch window is workers * prefetch).
  int prefetch = 2;
  /// Applied to each batch's input on the producing thread, with an Rng seeded by
  /// (seed, epoch, batch index); e.g. Compose{RandomCrop{32, 32, 4}, RandomHorizontalFlip{}}.
  Transform transform = nullptr;
};

namespace detail {
struct EpochRun;
}

class DataLoader {
 public:
  /// Loads from a shared dataset (it must outlive nothing: the loader and its running
  /// epochs hold it).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  /// Loads from a copy of `dataset` (kiln's datasets are cheap handles around shared
  /// tensors; pass a shared_ptr to share a heavy user dataset instead of copying it).
  template <class D>
    requires std::derived_from<std::remove_cvref_t<D>, Dataset>
  DataLoader(D&& dataset, DataLoaderOptions options = {})
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<std::remove_cvref_t<D>>(std::forward<D>(dataset))),
                   std::move(options)) {}

  /// Input iterator over one epoch's batches. Destroying it (e.g. `break`) stops and
  /// joins the epoch's workers.
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;
    Iterator() = default;
    explicit Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) {}
    Batch& operator*() const;
    Batch* operator->() const { return &**this; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const;

   private:
    std::shared_ptr<detail::EpochRun> run_;
  };

  /// Starts the next epoch (epoch() then increments): computes its order, starts the
  /// workers and returns an iterator at its first batch.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  /// Batches per epoch.
  int64_t size() const;
  /// The epoch the next begin() runs (0 for a new loader).
  int64_t epoch() const { return epoch_; }
  /// Sets the epoch the next begin() runs (its shuffle order and transform draws).
  void set_epoch(int64_t e) { epoch_ = e; }
  /// Makes the next begin() start at batch k of its epoch (the batches before it are not
  /// produced): with set_epoch, the data position a checkpoint saved mid-epoch resumes at.
  /// Batch k is the same as in an epoch started at 0. Applies to one begin() only.
  void set_start_batch(int64_t k);
  /// The seed in use (given, or drawn at construction).
  uint64_t seed() const { return seed_; }
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }
  /// The dataset indices epoch `e` visits, in order (the permutation when shuffling).
  std::vector<int64_t> epoch_order(int64_t e) const;

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
  int64_t start_batch_ = 0;
};

}  // namespace kiln::data
