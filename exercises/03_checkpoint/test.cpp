// Exercise 3's test: the same gradients as without checkpointing, and a lower memory peak
// (the allocator's byte counters, not a timing) between forward and backward.
#include <doctest/doctest.h>
#include <kiln/kiln.h>
#include "exercise.h"

namespace {

const kiln::TensorOptions f64{.dtype = kiln::DType::float64};

// 16 layers of tanh(h W): 16 activations of 256 x 256 doubles (512 KiB each) to keep
struct Chain {
  kiln::Tensor w = (kiln::randn({256, 256}, f64) * 0.05).requires_grad_();
  kiln::Tensor operator()(const kiln::Tensor& x) const {
    kiln::Tensor h = x;
    for (int i = 0; i < 16; ++i) h = kiln::tanh(kiln::matmul(h, w));
    return h;
  }
};

}  // namespace

TEST_CASE("exercise 3: checkpointed gives the gradients of f itself") {
  kiln::manual_seed(3);
  Chain f;
  kiln::Tensor x = kiln::randn({256, 256}, f64).requires_grad_();
  kiln::sum(f(x)).backward();
  const kiln::Tensor gx = x.grad().clone(), gw = f.w.grad().clone();
  x.set_grad(kiln::Tensor());
  f.w.set_grad(kiln::Tensor());
  kiln::sum(checkpointed(f, x)).backward();
  REQUIRE(x.grad().defined());
  REQUIRE(f.w.grad().defined());
  CHECK(kiln::max(kiln::abs(x.grad() - gx)).item<double>() < 1e-12);
  CHECK(kiln::max(kiln::abs(f.w.grad() - gw)).item<double>() < 1e-12);
}

TEST_CASE("exercise 3: checkpointed keeps far less memory between forward and backward") {
  kiln::manual_seed(4);
  Chain f;
  kiln::Tensor x = kiln::randn({256, 256}, f64).requires_grad_();
  auto held = [&](bool ckpt) {  // bytes still allocated after the forward, before backward
    const int64_t before = kiln::memory_stats().current_bytes;
    kiln::Tensor loss = kiln::sum(ckpt ? checkpointed(f, x) : f(x));
    const int64_t after = kiln::memory_stats().current_bytes;
    loss.backward();
    return after - before;
  };
  const int64_t plain = held(false), ckpt = held(true);
  INFO("plain " << plain << " bytes, checkpointed " << ckpt << " bytes");
  CHECK(plain > 16 * 256 * 256 * 8);  // the activations the plain chain keeps
  CHECK(ckpt * 4 < plain);            // checkpointed: its output and little else
}
