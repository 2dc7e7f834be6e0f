// Exercise 2's test: five steps of sgd_step against kiln's optim::SGD from the same start.
#include <doctest/doctest.h>
#include <kiln/kiln.h>
#include "exercise.h"

TEST_CASE("exercise 2: sgd_step matches optim::SGD over five steps") {
  kiln::manual_seed(2);
  const kiln::TensorOptions f64{.dtype = kiln::DType::float64};
  std::vector<kiln::Tensor> mine = {kiln::randn({3, 4}, f64), kiln::randn({5}, f64)};
  std::vector<kiln::Tensor> ref = {mine[0].clone().requires_grad_(), mine[1].clone().requires_grad_()};
  for (auto& p : mine) p.requires_grad_();
  const SgdConfig c;
  kiln::optim::SGD opt(ref, {.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay});
  std::vector<kiln::Tensor> buffers;
  for (int step = 0; step < 5; ++step) {
    // the same loss on both copies: sum(p^3) (so the gradient changes as p moves)
    for (auto* ps : {&mine, &ref}) {
      kiln::Tensor loss = kiln::sum(kiln::pow((*ps)[0], 3.0)) + kiln::sum(kiln::pow((*ps)[1], 3.0));
      for (auto& p : *ps) p.set_grad(kiln::Tensor());
      loss.backward();
    }
    sgd_step(mine, buffers, c);
    opt.step();
    for (size_t i = 0; i < mine.size(); ++i) {
      CAPTURE(step);
      CAPTURE(i);
      CHECK(kiln::max(kiln::abs(mine[i].detach() - ref[i].detach())).item<double>() < 1e-12);
    }
  }
}
