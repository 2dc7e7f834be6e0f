// One CUDA thread block emulated on the CPU, to run the row bodies of
// ops/cuda/row_kernels.h without a GPU: one std::thread per CUDA thread, joined at every
// block reduction by a std::barrier exactly where the GPU's __syncthreads() joins them.
// A reduction combines the threads' partials in the order of cub::BlockReduce's default
// algorithm (inside each 32-thread warp a shuffle-down tree with offsets 1, 2, 4, 8, 16,
// then the warp totals in warp order), so an emulated sum rounds like the GPU's.
//
//   run_block(256, [&](const EmulatedBlock& b) { rows::softmax_row<float>(b, k, ...); });
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <type_traits>
#include <vector>

namespace kiln::test {

class EmulatedBlock {
 public:
  struct Shared {
    explicit Shared(int n) : threads(n), barrier(n), slots(size_t(n) * kSlot) {}
    int threads;
    std::barrier<> barrier;
    std::vector<unsigned char> slots;  // one partial per thread
  };
  static constexpr size_t kSlot = 32;  // bytes per partial (a Best<double> is 16)

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
  /// Every thread publishes its partial, waits for the others, combines them all in cub's
  /// order (each thread computes the same total), then waits again before the slots are
  /// reused by the next reduction.
  template <class V, class Op>
  V reduce(V v, Op op) const {
    static_assert(sizeof(V) <= kSlot && std::is_trivially_copyable_v<V>);
    std::memcpy(&s_->slots[size_t(t_) * kSlot], &v, sizeof(V));
    s_->barrier.arrive_and_wait();
    const int n = s_->threads;
    auto at = [&](int i) {
      V x;
      std::memcpy(&x, &s_->slots[size_t(i) * kSlot], sizeof(V));
      return x;
    };
    V total{};
    for (int w = 0; w * 32 < n; ++w) {  // warp w: lanes [32 w, min(32 w + 32, n))
      const int lanes = std::min(32, n - w * 32);
      std::vector<V> lane(static_cast<size_t>(lanes));
      for (int l = 0; l < lanes; ++l) lane[size_t(l)] = at(w * 32 + l);
      for (int off = 1; off < 32; off *= 2)  // shuffle down by 1, 2, 4, 8, 16: lane l takes lane l + off
        for (int l = 0; l + off < lanes; ++l)  // ascending: lane l + off still holds its old value
          lane[size_t(l)] = op(lane[size_t(l)], lane[size_t(l + off)]);
      total = w == 0 ? lane[0] : op(total, lane[0]);
    }
    s_->barrier.arrive_and_wait();
    return total;
  }

 private:
  Shared* s_;
  int t_;
};

/// Runs f(block) on `threads` std::threads, one per emulated CUDA thread of one block.
template <class F>
void run_block(int threads, F&& f) {
  EmulatedBlock::Shared shared(threads);
  std::vector<std::thread> ts;
  ts.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) ts.emplace_back([&shared, &f, t] { f(EmulatedBlock(shared, t)); });
  for (std::thread& t : ts) t.join();
}

}  // namespace kiln::test
