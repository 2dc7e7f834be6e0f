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
#include <barrier>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
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
/// have finished.
class ThreadTeam {
 public:
  static ThreadTeam& instance() {
    static ThreadTeam team;
    return team;
  }
  void run(int n, const std::function<void(int)>& job) {
    std::unique_lock<std::mutex> lock(m_);
    while (int(workers_.size()) < n) {
      const int id = int(workers_.size());
      workers_.emplace_back([this, id] { work(id); });
    }
    job_ = &job;
    active_ = pending_ = n;
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [this] { return pending_ == 0; });
  }
  ~ThreadTeam() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& w : workers_) w.join();
  }

 private:
  void work(int id) {
    uint64_t seen = 0;  // generations start at 1
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (id >= active_) continue;  // not in this block
      const std::function<void(int)>* job = job_;
      lock.unlock();
      (*job)(id);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }
  std::mutex m_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  int active_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

/// Runs f(block) on `threads` team threads, one per emulated CUDA thread of one block.
template <class F>
void run_block(int threads, F&& f) {
  EmulatedBlock::Shared shared(threads);
  ThreadTeam::instance().run(threads, [&shared, &f](int t) { f(EmulatedBlock(shared, t)); });
}

}  // namespace kiln::test
