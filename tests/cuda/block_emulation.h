// One CUDA thread block emulated on the CPU, to run the row bodies of
// ops/cuda/row_kernels.h without a GPU: one std::thread per CUDA thread, joined at every
// block reduction by a std::barrier exactly where the GPU's __syncthreads() joins them.
// A reduction combines the threads' partials in the order of cub::BlockReduce's default
// algorithm (inside each 32-thread warp a shuffle-down tree with offsets 1, 2, 4, 8, 16,
// then the warp totals in warp order), so an emulated sum rounds like the GPU's. The
// threads are a team started once and reused by every block (starting 256 threads for each
// emulated row cost the tests seconds of kernel time creating and tearing down threads).
//
//   run_block(256, [&](const EmulatedBlock& b) { rows::softmax_row<float>(b, k, ...); });
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <semaphore>
#include <thread>
#include <type_traits>
#include <vector>

namespace kiln::test {

class EmulatedBlock {
 public:
  static constexpr size_t kSlot = 32;  // bytes per partial (a Best<double> is 16)
  struct Shared {
    explicit Shared(int n) : threads(n), barrier(n), slots(size_t(n) * kSlot) {}
    int threads;
    std::barrier<> barrier;
    std::vector<unsigned char> slots;  // one partial per thread
    unsigned char total[kSlot];        // a reduction's result, for every thread to read
  };

  EmulatedBlock(Shared& s, int t) : s_(&s), t_(t) {}
  int thread() const { return t_; }
  int size() const { return s_->threads; }
  /// __syncthreads(): every thread waits for the others.
  void sync() const { s_->barrier.arrive_and_wait(); }

  template <class A>
  A sum(A v) const {
    return reduce(v, [](const A& a, const A& b) { return a + b; });
  }
  template <class T>
  T max(T v) const {
    return reduce(v, [](T a, T b) { return std::fmax(a, b); });
  }
  /// Every thread publishes its partial and waits for the others; thread 0 combines them in
  /// cub's order and publishes the total; every thread waits again and reads it. (The next
  /// reduction's total is written only after its first barrier, when every thread has read
  /// this one.)
  template <class V, class Op>
  V reduce(V v, Op op) const {
    static_assert(sizeof(V) <= kSlot && std::is_trivially_copyable_v<V>);
    std::memcpy(&s_->slots[size_t(t_) * kSlot], &v, sizeof(V));
    s_->barrier.arrive_and_wait();
    if (t_ == 0) {
      const int n = s_->threads;
      V total{};
      for (int w = 0; w * 32 < n; ++w) {  // warp w: lanes [32 w, min(32 w + 32, n))
        const int lanes = std::min(32, n - w * 32);
        V lane[32];
        for (int l = 0; l < lanes; ++l) std::memcpy(&lane[l], &s_->slots[size_t(w * 32 + l) * kSlot], sizeof(V));
        for (int off = 1; off < 32; off *= 2)  // shuffle down by 1, 2, 4, 8, 16: lane l takes lane l + off
          for (int l = 0; l + off < lanes; ++l)  // ascending: lane l + off still holds its old value
            lane[l] = op(lane[l], lane[l + off]);
        total = w == 0 ? lane[0] : op(total, lane[0]);
      }
      std::memcpy(s_->total, &total, sizeof(V));
    }
    s_->barrier.arrive_and_wait();
    V total;
    std::memcpy(&total, s_->total, sizeof(V));
    return total;
  }

 private:
  Shared* s_;
  int t_;
};

/// The emulated CUDA threads: std::threads started on first use (as many as the largest
/// block so far) and reused; run(n, job) runs job(t) on threads t < n and returns when all n
/// have finished. Each thread sleeps on its own semaphore, so a block of n threads wakes
/// exactly n of them (one condition variable woke the whole team, 256 threads, for every
/// block, to send most of them back to sleep).
class ThreadTeam {
 public:
  static ThreadTeam& instance() {
    static ThreadTeam team;
    return team;
  }
  void run(int n, const std::function<void(int)>& job) {
    std::lock_guard<std::mutex> lock(run_);  // one block at a time
    while (int(workers_.size()) < n) {
      const int id = int(workers_.size());
      wake_.push_back(std::make_unique<std::binary_semaphore>(0));
      std::binary_semaphore* wake = wake_.back().get();  // the thread never reads wake_, which grows
      workers_.emplace_back([this, id, wake] { work(id, *wake); });
    }
    job_ = &job;
    pending_.store(n);
    for (int t = 0; t < n; ++t) wake_[size_t(t)]->release();
    done_.acquire();
  }
  ~ThreadTeam() {
    stop_ = true;
    for (auto& w : wake_) w->release();
    for (std::thread& w : workers_) w.join();
  }

 private:
  void work(int id, std::binary_semaphore& wake) {
    for (;;) {
      wake.acquire();  // run()'s release happens-before: job_ and stop_ are visible
      if (stop_) return;
      (*job_)(id);
      if (pending_.fetch_sub(1) == 1) done_.release();
    }
  }
  std::mutex run_;
  std::vector<std::unique_ptr<std::binary_semaphore>> wake_;
  std::vector<std::thread> workers_;
  std::binary_semaphore done_{0};
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

/// Runs f(block) on `threads` team threads, one per emulated CUDA thread of one block.
template <class F>
void run_block(int threads, F&& f) {
  EmulatedBlock::Shared shared(threads);
  ThreadTeam::instance().run(threads, [&shared, &f](int t) { f(EmulatedBlock(shared, t)); });
}

}  // namespace kiln::test
