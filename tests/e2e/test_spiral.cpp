// End to end: a 2-layer MLP built from raw ops (matmul, add, relu, cross_entropy) and a
// hand-written SGD loop fits a synthetic 2-class spiral to >= 95% training accuracy.
#include <doctest/doctest.h>
#include <cmath>
#include "gradcheck.h"

using namespace kiln;

namespace {
// Two interleaved spiral arms, n points each, with a little noise.
void make_spiral(int n, Tensor& x, Tensor& y) {
  std::vector<float> xs;
  std::vector<int64_t> ys;
  Tensor noise = randn({2 * n, 2}) * 0.05;
  auto nz = noise.to_vector<float>();
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < n; ++i) {
      double r = 0.1 + 0.9 * i / n;
      double t = 2.0 * i / n * M_PI + c * M_PI;  // one full turn per arm
      int k = c * n + i;
      xs.push_back(2.0f * float(r * std::cos(t)) + nz[2 * k]);
      xs.push_back(2.0f * float(r * std::sin(t)) + nz[2 * k + 1]);
      ys.push_back(c);
    }
  x = from_vector(xs, {2 * n, 2});
  y = from_vector(ys, {2 * n});
}
}  // namespace

TEST_CASE("a raw-op MLP with hand-written SGD fits a 2-class spiral") {
  manual_seed(1);
  Tensor x, y;
  make_spiral(200, x, y);
  const int64_t H = 128;
  Tensor w1 = (randn({2, H}) * std::sqrt(2.0 / 2)).requires_grad_();
  Tensor b1 = zeros({H}).requires_grad_();
  Tensor w2 = (randn({H, 2}) * std::sqrt(1.0 / H)).requires_grad_();
  Tensor b2 = zeros({2}).requires_grad_();
  std::vector<Tensor> params{w1, b1, w2, b2};
  auto forward = [&](const Tensor& in) { return matmul(relu(matmul(in, w1) + b1), w2) + b2; };
  double first_loss = 0, last_loss = 0;
  Tensor vel[4];
  for (int step = 0; step < 2000; ++step) {
    Tensor loss = cross_entropy(forward(x), y);
    for (auto& p : params) p.set_grad(Tensor());
    loss.backward();
    NoGradGuard ng;
    for (int i = 0; i < 4; ++i) {  // SGD with momentum 0.9, lr 0.1
      Tensor g = params[i].grad();
      if (!vel[i].defined()) vel[i] = g.clone();
      else vel[i].mul_(0.9).add_(g);
      params[i].add_(vel[i], -0.1);
    }
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
  }
  Tensor pred = argmax(forward(x), 1);
  double acc = mean((pred == y).to(DType::float32)).item();
  MESSAGE("spiral: loss " << first_loss << " -> " << last_loss << ", accuracy " << acc);
  CHECK(last_loss < first_loss);
  CHECK(acc >= 0.95);
}
