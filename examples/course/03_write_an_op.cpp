// Course chapter 3 (docs/course/03-writing-an-op.md): a new differentiable op is a forward
// and a backward. Softsign, x / (1 + |x|), written as a kiln::Function, checked against
// central finite differences in float64; then a backward with a typical mistake, which
// the same check catches. kiln::softsign is the same function composed of recorded ops
// (autograd derives its backward): the two agree.
#include <cmath>
#include <cstdio>
#include <kiln/kiln.h>
#include <kiln/testing.h>

using kiln::Tensor;

// y = x / (1 + |x|), dy/dx = 1 / (1 + |x|)^2
struct Softsign : kiln::Function {
  bool wrong = false;  // the mistake: forgetting the square
  Tensor forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return kiln::div(in[0], kiln::add(kiln::abs(in[0]), 1.0));
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Tensor d = kiln::add(kiln::abs(saved()[0]), 1.0);
    return {kiln::div(g, wrong ? d : kiln::mul(d, d))};
  }
  std::string name() const override { return "Softsign"; }
};

static Tensor my_softsign(const Tensor& x, bool wrong = false) {
  auto fn = std::make_shared<Softsign>();
  fn->wrong = wrong;
  return kiln::Function::apply(fn, {x});
}

int main() {
  kiln::manual_seed(3);
  const Tensor x = kiln::randn({2, 3}, {.dtype = kiln::DType::float64});
  std::printf("my_softsign(x) =\n%s\n", my_softsign(x).str().c_str());
  std::printf("largest difference from kiln::softsign(x): %g\n",
              kiln::max(kiln::abs(kiln::sub(my_softsign(x), kiln::softsign(x)))).item());

  // gradcheck: for each element, (f(x + h) - f(x - h)) / 2h against the backward's value
  const std::string ok = kiln::testing::gradcheck_report([](std::vector<Tensor>& in) { return my_softsign(in[0]); }, {x});
  std::printf("\ngradcheck, the right backward: %s\n", ok.empty() ? "passed" : ok.c_str());
  const std::string bad =
      kiln::testing::gradcheck_report([](std::vector<Tensor>& in) { return my_softsign(in[0], true); }, {x});
  std::printf("\ngradcheck, the backward without the square:\n%s\n", bad.empty() ? "passed (?!)" : bad.c_str());
  return ok.empty() && !bad.empty() ? 0 : 1;
}
