// kiln/testing.h as a library user meets it (docs/training.md's example): a custom
// Function whose gradient the installed check accepts, a wrong one it rejects, and the
// module check over parameters.
#include <doctest/doctest.h>
#include <kiln/kiln.h>
#include <kiln/testing.h>

namespace {

struct LogCosh : kiln::Function {  // y = log(cosh(x)) = log((e^x + e^-x) / 2), dy/dx = tanh(x)
  kiln::Tensor forward(const std::vector<kiln::Tensor>& in) override {
    save_for_backward({in[0]});
    return kiln::log(kiln::mul(kiln::add(kiln::exp(in[0]), kiln::exp(kiln::neg(in[0]))), 0.5));
  }
  std::vector<kiln::Tensor> backward(const kiln::Tensor& g) override {
    return {kiln::mul(g, kiln::tanh(saved()[0]))};
  }
  std::string name() const override { return "LogCosh"; }
};
kiln::Tensor log_cosh(const kiln::Tensor& x) { return kiln::Function::apply(std::make_shared<LogCosh>(), {x}); }

struct WrongLogCosh : LogCosh {  // a gradient off by a factor of 2
  std::vector<kiln::Tensor> backward(const kiln::Tensor& g) override {
    return {kiln::mul(kiln::mul(g, kiln::tanh(saved()[0])), 2.0)};
  }
};

}  // namespace

TEST_CASE("kiln/testing.h: gradcheck_report accepts a right gradient and names the wrong elements") {
  kiln::manual_seed(1);
  const std::string ok = kiln::testing::gradcheck_report(
      [](std::vector<kiln::Tensor>& in) { return log_cosh(in[0]); }, {kiln::randn({4, 5})});
  CHECK(ok.empty());
  const std::string bad = kiln::testing::gradcheck_report(
      [](std::vector<kiln::Tensor>& in) { return kiln::Function::apply(std::make_shared<WrongLogCosh>(), {in[0]}); },
      {kiln::randn({2, 3})});
  CHECK(bad.find("tensor 0 element") != std::string::npos);
  CHECK_FALSE(kiln::testing::gradcheck([](std::vector<kiln::Tensor>& in) {
    return kiln::Function::apply(std::make_shared<WrongLogCosh>(), {in[0]});
  }, {kiln::randn({3})}));
}

TEST_CASE("kiln/testing.h: module check, comparisons, error_of") {
  kiln::manual_seed(2);
  kiln::nn::Linear lin(3, 2);
  lin.to(kiln::DType::float64);
  CHECK(kiln::testing::module_gradcheck_report(lin, [&](std::vector<kiln::Tensor>& in) { return lin(in[0]); },
                                               {kiln::randn({4, 3})})
            .empty());
  kiln::nn::Linear f32(3, 2);
  CHECK(kiln::testing::error_of([&] {
          kiln::testing::module_gradcheck_report(f32, [&](std::vector<kiln::Tensor>& in) { return f32(in[0]); },
                                                 {kiln::randn({4, 3})});
        }).find("float64") != std::string::npos);
  const kiln::Tensor a = kiln::ones({2, 2});
  CHECK(kiln::testing::allclose(a, kiln::add(a, 1e-9)));
  CHECK(kiln::testing::max_abs_diff(a, kiln::mul(a, 3.0)) == 2.0);
  CHECK(kiln::testing::error_of([] {}) == "(no error)");
}
