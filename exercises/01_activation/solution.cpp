// Exercise 1, a solution: dy/dx = tanh(s) + x (1 - tanh(s)^2) sigmoid(x), s = softplus(x).
#include "exercise.h"

namespace {

struct Mish : kiln::Function {
  kiln::Tensor forward(const std::vector<kiln::Tensor>& in) override {
    const kiln::Tensor& x = in[0];
    save_for_backward({x});
    return kiln::mul(x, kiln::tanh(kiln::softplus(x)));
  }
  std::vector<kiln::Tensor> backward(const kiln::Tensor& g) override {
    const kiln::Tensor& x = saved()[0];
    const kiln::Tensor t = kiln::tanh(kiln::softplus(x));
    const kiln::Tensor dydx = t + x * (1.0 - t * t) * kiln::sigmoid(x);
    return {g * dydx};
  }
  std::string name() const override { return "Mish"; }
};

}  // namespace

kiln::Tensor mish(const kiln::Tensor& x) { return kiln::Function::apply(std::make_shared<Mish>(), {x}); }
