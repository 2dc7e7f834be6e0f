// Custom autograd Functions beyond one output (core/autograd.h): several outputs with one
// backward_many per backward, the Function object as the call's context (saved tensors and
// plain members), outputs marked non-differentiable or not floating point, float64
// gradient checks through them, and the errors a wrong Function gets.
#include <doctest/doctest.h>
#include <cmath>
#include <memory>
#include <vector>
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::test::error_of;

namespace {

// (a, b) = (x * y, x + scale * y^2): two outputs; `scale` is non-tensor state of the call.
struct MulAndSquare : Function {
  double scale = 1.0;
  int backward_calls = 0;
  std::vector<Tensor> last_grads;  // what backward_many received
  explicit MulAndSquare(double s) : scale(s) {}
  std::vector<Tensor> forward_many(const std::vector<Tensor>& in) override {
    save_for_backward({in[0], in[1]});
    return {mul(in[0], in[1]), add(in[0], mul(mul(in[1], in[1]), scale))};
  }
  std::vector<Tensor> backward_many(const std::vector<Tensor>& g) override {
    ++backward_calls;
    last_grads = g;
    const Tensor& x = saved()[0];
    const Tensor& y = saved()[1];
    // da/dx = y, da/dy = x; db/dx = 1, db/dy = 2 scale y
    Tensor dx = add(mul(g[0], y), g[1]);
    Tensor dy = add(mul(g[0], x), mul(mul(g[1], y), 2.0 * scale));
    return {needs_input_grad(0) ? dx : Tensor(), needs_input_grad(1) ? dy : Tensor()};
  }
  std::string name() const override { return "MulAndSquare"; }
};

// Softmax over the last dim with its argmax (int64, no gradient) and a marked float mask.
struct SoftmaxArgmax : Function {
  std::vector<Tensor> forward_many(const std::vector<Tensor>& in) override {
    Tensor y = softmax(in[0], -1);
    Tensor mask = gt(y, 0.5).to(y.dtype());
    mark_non_differentiable({mask});
    save_for_backward({y});
    return {y, argmax(in[0], -1), mask};
  }
  std::vector<Tensor> backward_many(const std::vector<Tensor>& g) override {
    CHECK(g.size() == 3);
    CHECK(!g[1].defined());  // the int64 output
    CHECK(!g[2].defined());  // the marked mask
    const Tensor& y = saved()[0];
    return {mul(y, sub(g[0], sum(mul(g[0], y), {-1}, true)))};
  }
  std::string name() const override { return "SoftmaxArgmax"; }
};

}  // namespace

TEST_CASE("Function::apply_many: two outputs, one backward per backward, float64 gradient check") {
  manual_seed(1);
  auto f = [](std::vector<Tensor>& in) {
    std::vector<Tensor> o = Function::apply_many(std::make_shared<MulAndSquare>(0.7), in);
    // weigh the outputs differently so that a swapped gradient would show
    return add(sum(mul(o[0], 1.5)), sum(mul(o[1], o[1])));
  };
  CHECK(kiln::testing::gradcheck_report(f, {randn({3, 4}, {.dtype = DType::float64}),
                                            randn({3, 4}, {.dtype = DType::float64})}) == "");

  auto fn = std::make_shared<MulAndSquare>(2.0);
  Tensor x = randn({5}, {.dtype = DType::float64}).requires_grad_(), y = randn({5}, {.dtype = DType::float64}).requires_grad_();
  std::vector<Tensor> o = Function::apply_many(fn, {x, y});
  REQUIRE(o.size() == 2);
  CHECK(o[0].grad_fn()->name == "MulAndSquare output 0");
  add(sum(o[0]), sum(o[1])).backward();
  CHECK(fn->backward_calls == 1);  // both outputs' gradients arrive together
  CHECK(kiln::testing::allclose(x.grad(), add(y.detach(), 1.0), 1e-12, 1e-12));
  CHECK(kiln::testing::allclose(y.grad(), add(x.detach(), mul(y.detach(), 4.0)), 1e-12, 1e-12));
}

TEST_CASE("Function::apply_many: an unused output's gradient is zeros; inputs without grad get none") {
  auto fn = std::make_shared<MulAndSquare>(1.0);
  Tensor x = ones({2, 2}).requires_grad_(), y = full({2, 2}, 3.0);  // y needs no gradient
  std::vector<Tensor> o = Function::apply_many(fn, {x, y});
  sum(o[1]).backward();  // only the second output is used
  REQUIRE(fn->last_grads.size() == 2);
  CHECK(fn->last_grads[0].shape() == Shape{2, 2});
  CHECK(sum(abs(fn->last_grads[0])).item() == 0.0);
  CHECK(kiln::testing::allclose(x.grad(), ones({2, 2})));
  CHECK(!y.grad().defined());
}

TEST_CASE("Function::apply_many: int64 and marked outputs get no gradient; the rest checks in float64") {
  manual_seed(2);
  Tensor x = randn({3, 6}, {.dtype = DType::float64}).requires_grad_();
  std::vector<Tensor> o = Function::apply_many(std::make_shared<SoftmaxArgmax>(), {x});
  REQUIRE(o.size() == 3);
  CHECK(o[0].requires_grad());
  CHECK(!o[1].requires_grad());
  CHECK(o[1].dtype() == DType::int64);
  CHECK(!o[2].requires_grad());
  CHECK(o[1].to_vector<int64_t>() == argmax(x.detach(), -1).to_vector<int64_t>());
  CHECK(kiln::testing::gradcheck_report(
            [](std::vector<Tensor>& in) {
              Tensor p = Function::apply_many(std::make_shared<SoftmaxArgmax>(), in)[0];
              return sum(mul(p, arange(0.0, 6.0, 1.0, {.dtype = DType::float64})));
            },
            {x.detach()}) == "");
}

TEST_CASE("Function: mark_non_differentiable on apply's one output; errors name the Function") {
  struct Step : Function {  // 1 where x > 0: a float output without a gradient
    Tensor forward(const std::vector<Tensor>& in) override {
      Tensor y = gt(in[0], 0.0).to(in[0].dtype());
      mark_non_differentiable({y});
      return y;
    }
    std::string name() const override { return "Step"; }
  };
  Tensor x = randn({4}).requires_grad_();
  Tensor y = Function::apply(std::make_shared<Step>(), {x});
  CHECK(!y.requires_grad());

  struct OnlyForward : Function {
    std::vector<Tensor> forward_many(const std::vector<Tensor>& in) override { return {in[0], in[0]}; }
    std::string name() const override { return "OnlyForward"; }
  };
  CHECK(error_of([&] { Function::apply(std::make_shared<OnlyForward>(), {x}); }).find("OnlyForward: override forward") !=
        std::string::npos);
  std::vector<Tensor> o = Function::apply_many(std::make_shared<OnlyForward>(), {x});
  CHECK(error_of([&] { sum(o[0]).backward(); }).find("OnlyForward: override backward_many") != std::string::npos);

  struct WrongCount : Function {
    std::vector<Tensor> forward_many(const std::vector<Tensor>& in) override { return {mul(in[0], 2.0)}; }
    std::vector<Tensor> backward_many(const std::vector<Tensor>& g) override { return {g[0], g[0]}; }
    std::string name() const override { return "WrongCount"; }
  };
  Tensor w = Function::apply_many(std::make_shared<WrongCount>(), {x})[0];
  CHECK(error_of([&] { sum(w).backward(); }).find("WrongCount: backward returned 2 gradients for 1 inputs") !=
        std::string::npos);

  struct Mixed : Function {
    std::vector<Tensor> forward_many(const std::vector<Tensor>& in) override {
      return {in[0].clone(), in[0].to(DType::float64)};
    }
    std::vector<Tensor> backward_many(const std::vector<Tensor>& g) override { return {g[0]}; }
    std::string name() const override { return "Mixed"; }
  };
  CHECK(error_of([&] { Function::apply_many(std::make_shared<Mixed>(), {x}); })
            .find("Mixed: the differentiable outputs must share one dtype and device") != std::string::npos);
}
