// Exercise 6's test. On the CPU (always): saxpy_thread run for every thread of emulated
// grids (the student's launch shape, and others: one thread, one block, more threads than
// elements) gives a * x + y exactly, each element updated once; the launch shape is a legal
// CUDA launch. On a GPU (skipped without one): the real kernel against the CPU result.
#include <doctest/doctest.h>
#include <vector>
#include "exercise.h"
#include "kiln/kiln.h"
#include "kiln/testing.h"

namespace {

// y after running saxpy_thread for every thread of a grid of blocks x threads.
std::vector<float> emulate(int64_t blocks, int64_t threads, int64_t n, float a, const std::vector<float>& x,
                           std::vector<float> y) {
  const int64_t stride = blocks * threads;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t t = 0; t < threads; ++t) ex06::saxpy_thread(b * threads + t, stride, n, a, x.data(), y.data());
  return y;
}

}  // namespace

TEST_CASE("saxpy: every thread of emulated grids, and the launch shape") {
  for (int64_t n : {1, 7, 256, 1000, 70001}) {
    const size_t m = static_cast<size_t>(n);
    std::vector<float> x(m), y(m), want(m);
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = float(i % 97) * 0.25f - 3.0f;
      y[size_t(i)] = float(i % 13) - 6.0f;
      want[size_t(i)] = 1.5f * x[size_t(i)] + y[size_t(i)];  // exact in float for these values
    }
    const ex06::Launch l = ex06::saxpy_launch(n);
    INFO("n = " << n << ", launch " << l.blocks << " x " << l.threads);
    CHECK(l.threads % 32 == 0);  // whole warps
    CHECK(l.threads <= 1024);
    CHECK((l.blocks >= 1 && l.blocks <= 65535));
    CHECK(int64_t(l.blocks) * l.threads >= std::min<int64_t>(n, 65535 * 32));  // not a trickle of threads
    CHECK(emulate(l.blocks, l.threads, n, 1.5f, x, y) == want);
    for (auto [blocks, threads] : {std::pair<int64_t, int64_t>{1, 1}, {1, 256}, {3, 64}, {1000, 128}}) {
      INFO("emulated grid " << blocks << " x " << threads);
      CHECK(emulate(blocks, threads, n, 1.5f, x, y) == want);
    }
  }
}

TEST_CASE("saxpy on the GPU equals the CPU" * doctest::skip(!kiln::cuda::is_available())) {
  using namespace kiln;
  manual_seed(6);
  const int64_t n = 1 << 20;
  const Tensor x = randn({n}), y = randn({n});
  Tensor xd = x.to(Device::cuda(0)), yd = y.to(Device::cuda(0));
  ex06::saxpy_cuda(n, 0.5f, xd.data<float>(), yd.data<float>());
  const Tensor want = add(mul(x, 0.5), y);
  CHECK(kiln::testing::max_abs_diff(yd.to(Device::cpu()), want) <= 1e-6);
}
