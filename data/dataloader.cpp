// DataLoader's epoch machinery. Each epoch is an EpochRun shared by its iterators:
// workers claim batch numbers in order, produce them outside the lock, and park them
// in a map keyed by batch number; the consumer takes batch k only when it is ready,
// so order (and content) never depends on the worker count. Workers stay at most
// `workers * prefetch` batches ahead of the consumer.
#include "kiln/data/dataloader.h"
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include "kiln/core/autograd.h"
#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/core/rng.h"

namespace kiln::data {

namespace {
// Per-epoch key: all randomness of epoch e derives from it (stream 0: the order,
// stream k + 1: batch k's transform).
uint64_t epoch_key(uint64_t seed, int64_t epoch) { return mix64(seed ^ mix64(uint64_t(epoch) + 0x1234567ull)); }
}  // namespace

namespace detail {

struct EpochRun {
  std::shared_ptr<const Dataset> dataset;
  DataLoaderOptions opts;
  bool pin = false;  // opts.pin_memory and a GPU is there to copy to
  uint64_t key = 0;
  std::vector<int64_t> order;
  int64_t num_batches = 0;

  Batch current;
  int64_t next_consume = 0;  // batch number the consumer takes next
  bool done = false;

  // worker state (guarded by mu)
  std::mutex mu;
  std::condition_variable cv_work, cv_ready;
  int64_t next_claim = 0;
  int64_t window = 0;
  bool stop = false;
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  std::map<int64_t, Slot> ready;
  std::vector<std::thread> threads;

  ~EpochRun() {
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
    }
    cv_work.notify_all();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }

  Batch make(int64_t k) const {
    const int64_t B = opts.batch_size, n = int64_t(order.size());
    const int64_t b = k * B, e = std::min(b + B, n);
    std::span<const int64_t> idx(order.data() + b, size_t(e - b));
    Batch batch = dataset->get_batch(idx);
    batch.indices.assign(idx.begin(), idx.end());
    if (opts.transform) {
      Rng rng(key, uint64_t(k) + 1);
      batch.input = opts.transform(batch.input, rng);
    }
    if (pin) {  // page-locked copies, so the upload to the GPU can run asynchronously
      for (Tensor* t : {&batch.input, &batch.target}) {
        Tensor p = cuda::pinned_empty(t->shape(), t->dtype());
        p.copy_(*t);
        *t = p;
      }
    }
    return batch;
  }

  void worker() {
    NoGradGuard no_grad;
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      cv_work.wait(l, [&] { return stop || next_claim >= num_batches || next_claim < next_consume + window; });
      if (stop || next_claim >= num_batches) return;
      const int64_t k = next_claim++;
      l.unlock();
      Slot s;
      try {
        s.batch = make(k);
      } catch (...) {
        s.error = std::current_exception();
      }
      l.lock();
      ready.emplace(k, std::move(s));
      cv_ready.notify_all();
    }
  }

  // Sets `current` to batch next_consume (or done), rethrowing a producer's error.
  void advance() {
    if (next_consume >= num_batches) {
      done = true;
      current = Batch();
      return;
    }
    const int64_t k = next_consume;
    if (threads.empty()) {
      current = make(k);
      ++next_consume;
      return;
    }
    Slot s;
    {
      std::unique_lock<std::mutex> l(mu);
      cv_ready.wait(l, [&] { return ready.count(k) > 0; });
      auto it = ready.find(k);
      s = std::move(it->second);
      ready.erase(it);
      next_consume = k + 1;
    }
    cv_work.notify_all();
    if (s.error) {
      done = true;
      try {
        std::rethrow_exception(s.error);
      } catch (const Error& e) {
        throw Error(std::string("DataLoader worker, batch ") + std::to_string(k) + ": " + e.what());
      } catch (const std::exception& e) {
        throw Error(std::string("DataLoader worker, batch ") + std::to_string(k) + ": " + e.what());
      } catch (...) {
        throw Error("DataLoader worker, batch " + std::to_string(k) + ": unknown exception");
      }
    }
    current = std::move(s.batch);
  }
};

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  KILN_CHECK(dataset_ != nullptr, "DataLoader: null dataset");
  KILN_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size);
  KILN_CHECK(options_.workers >= 0, "DataLoader: workers must be >= 0, got ", options_.workers);
  KILN_CHECK(options_.prefetch >= 1, "DataLoader: prefetch must be >= 1, got ", options_.prefetch);
  KILN_CHECK(!(options_.shuffle && options_.sampler), "DataLoader: shuffle and a sampler exclude each other (the "
             "sampler decides the order)");
  if (options_.seed) {
    seed_ = *options_.seed;
  } else {
    RngState s = rng_reserve(1);
    Philox4 r = philox4x32(s.offset, 0, s.seed);
    seed_ = (uint64_t(r.x[0]) << 32) | r.x[1];
  }
}

int64_t DataLoader::size() const {
  const int64_t n = options_.sampler ? options_.sampler->count(dataset_->size()) : dataset_->size();
  const int64_t B = options_.batch_size;
  return options_.drop_last ? n / B : (n + B - 1) / B;
}

std::vector<int64_t> DataLoader::epoch_order(int64_t e) const {
  const int64_t n = dataset_->size();
  KILN_CHECK(n >= 0, "DataLoader: dataset reports a negative size ", n);
  if (options_.sampler) {
    std::vector<int64_t> order = options_.sampler->indices(e, n);
    KILN_CHECK(int64_t(order.size()) == options_.sampler->count(n), "DataLoader: the sampler gave ", order.size(),
               " indices for epoch ", e, " but promised ", options_.sampler->count(n));
    for (int64_t i : order)
      KILN_CHECK(i >= 0 && i < n, "DataLoader: the sampler gave index ", i, " of a dataset of ", n);
    return order;
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  if (options_.shuffle) {
    Rng rng(epoch_key(seed_, e), 0);
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.below(uint64_t(i) + 1)]);
  }
  return order;
}

void DataLoader::set_start_batch(int64_t k) {
  KILN_CHECK(k >= 0 && k <= size(), "DataLoader::set_start_batch: batch ", k, " is outside the epoch's ", size(),
             " batches");
  start_batch_ = k;
}

DataLoader::Iterator DataLoader::begin() {
  const int64_t e = epoch_++;
  auto run = std::make_shared<detail::EpochRun>();
  run->dataset = dataset_;
  run->opts = options_;
  run->pin = options_.pin_memory && cuda::is_available();
  run->key = epoch_key(seed_, e);
  run->order = epoch_order(e);
  run->num_batches = size();
  run->next_consume = run->next_claim = start_batch_;
  start_batch_ = 0;
  const int W = int(std::min<int64_t>(options_.workers, run->num_batches));
  run->window = int64_t(std::max(W, 1)) * options_.prefetch;
  for (int w = 0; w < W; ++w) run->threads.emplace_back([r = run.get()] { r->worker(); });
  run->advance();
  return Iterator(std::move(run));
}

Batch& DataLoader::Iterator::operator*() const {
  KILN_CHECK(run_ && !run_->done, "DataLoader iterator: dereferencing past the end of the epoch");
  return run_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  KILN_CHECK(run_ && !run_->done, "DataLoader iterator: incrementing past the end of the epoch");
  run_->advance();
  return *this;
}

bool DataLoader::Iterator::operator==(std::default_sentinel_t) const { return !run_ || run_->done; }

}  // namespace kiln::data
