// DistributedSampler (see sampler.h).
#include "kiln/dist/sampler.h"
#include <numeric>
#include "kiln/core/error.h"
#include "kiln/data/rng.h"
#include "kiln/dist/dist.h"

namespace kiln::dist {

DistributedSampler::DistributedSampler(DistributedSamplerOptions o)
    : o_(o), rank_(o.rank >= 0 ? o.rank : dist::rank()), world_(o.world_size >= 0 ? o.world_size : dist::world_size()) {
  if (o.rank < 0 || o.world_size < 0) check_initialized("DistributedSampler");
  KILN_CHECK(world_ >= 1 && rank_ >= 0 && rank_ < world_, "DistributedSampler: rank ", rank_,
             " is not in a group of ", world_);
}

int64_t DistributedSampler::count(int64_t n) const { return o_.drop_last ? n / world_ : (n + world_ - 1) / world_; }

std::vector<int64_t> DistributedSampler::indices(int64_t epoch, int64_t n) const {
  KILN_CHECK(n >= 0, "DistributedSampler: the dataset size must be >= 0, got ", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (o_.shuffle) {  // Fisher-Yates with a key of (seed, epoch): the same on every rank
    data::Rng rng(data::mix64(o_.seed ^ data::mix64(uint64_t(epoch) + 0x5d15ull)), 0);
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.below(uint64_t(i) + 1)]);
  }
  const int64_t per_rank = count(n), total = per_rank * world_;
  std::vector<int64_t> mine;
  mine.reserve(size_t(per_rank));
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(order[size_t(n ? i % n : 0)]);
  return mine;
}

}  // namespace kiln::dist
