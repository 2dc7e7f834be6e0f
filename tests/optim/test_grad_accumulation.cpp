// Gradient accumulation: a tiny MLP built from raw ops (linear + relu, leaf parameters)
// trained with k accumulated micro-batches (loss / k each) ends each step with the same
// parameters as full-batch steps, for SGD (momentum) and AdamW.
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>
#include "gradcheck.h"

using namespace kiln;
namespace optim = kiln::optim;

namespace {

struct TinyMLP {
  Tensor W1, b1, W2, b2;
  explicit TinyMLP(uint64_t seed) {
    manual_seed(seed);
    W1 = leaf(randn({16, 4}) * 0.5);
    b1 = leaf(randn({16}) * 0.1);
    W2 = leaf(randn({3, 16}) * 0.3);
    b2 = leaf(randn({3}) * 0.1);
  }
  static Tensor leaf(Tensor t) {
    t = t.detach();
    t.requires_grad_();
    return t;
  }
  std::vector<Tensor> params() const { return {W1, b1, W2, b2}; }
  Tensor forward(const Tensor& x) const { return linear(relu(linear(x, W1, b1)), W2, b2); }
};

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

void check_accumulation(const MakeOpt& make, int k, int steps) {
  manual_seed(100);
  const int64_t N = 24;
  Tensor x = randn({N, 4}), y = randn({N, 3});
  TinyMLP full(1), acc(1);
  auto of = make(full.params()), oa = make(acc.params());
  for (int s = 0; s < steps; ++s) {
    // full batch
    of->zero_grad();
    mse_loss(full.forward(x), y).backward();
    of->step();
    // k micro-batches, each loss / k, gradients accumulated by backward
    oa->zero_grad();
    const int64_t mb = N / k;
    for (int i = 0; i < k; ++i) {
      Tensor xi = x.narrow(0, i * mb, mb), yi = y.narrow(0, i * mb, mb);
      (mse_loss(acc.forward(xi), yi) / double(k)).backward();
    }
    oa->step();
    auto pf = full.params(), pa = acc.params();
    for (size_t j = 0; j < pf.size(); ++j) {
      CAPTURE(s);
      CAPTURE(j);
      CHECK(test::allclose(pa[j], pf[j], 1e-5, 1e-7));
    }
  }
}

}  // namespace

TEST_CASE("gradient accumulation equals the full-batch step: SGD with momentum") {
  check_accumulation([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  }, 3, 3);
  check_accumulation([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.05});
  }, 4, 1);
}

TEST_CASE("gradient accumulation equals the full-batch step: AdamW") {
  check_accumulation([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.01});
  }, 3, 3);
  check_accumulation([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 1e-3});
  }, 2, 1);
}
