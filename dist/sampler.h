// DistributedSampler: each rank's share of a dataset for data-parallel training. Every
// rank draws the same permutation of the epoch (same seed), then takes every world_size-th
// index from its rank on, so the shares are disjoint and together cover the dataset.
#pragma once
#include <cstdint>
#include <vector>
#include "kiln/data/dataloader.h"

namespace kiln::dist {

struct DistributedSamplerOptions {
  bool shuffle = true;     ///< a new permutation each epoch (the same on every rank)
  uint64_t seed = 0;       ///< must be equal on every rank
  /// false: pad by repeating the first indices of the epoch's order so that every rank gets
  /// ceil(n / world) (PyTorch's default: a few examples are seen twice per epoch);
  /// true: drop the last n % world indices of the order so that no index repeats.
  bool drop_last = false;
  int rank = -1;           ///< -1: dist::rank()
  int world_size = -1;     ///< -1: dist::world_size()
};

/// Give it to a DataLoader: `{.batch_size = 32, .sampler = std::make_shared<dist::DistributedSampler>()}`;
/// call loader.set_epoch(e) each epoch, as always.
class DistributedSampler : public data::Sampler {
 public:
  explicit DistributedSampler(DistributedSamplerOptions options = {});
  std::vector<int64_t> indices(int64_t epoch, int64_t n) const override;
  int64_t count(int64_t n) const override;
  int rank() const { return rank_; }
  int world_size() const { return world_; }

 private:
  DistributedSamplerOptions o_;
  int rank_, world_;
};

}  // namespace kiln::dist
