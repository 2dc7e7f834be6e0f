// Double backward (create_graph): second-order gradient checks of every twice-differentiable
// op family in float64, kiln::grad, Hessian-vector products, a gradient penalty, and the
// error where a backward is not twice differentiable.
#include "gradcheck.h"

using namespace kiln;
using namespace kiln::test;

namespace {
Tensor rnd(const Shape& s) { return randn(s, f64); }
// values in [lo, hi): away from kinks and poles where a test needs it
Tensor uni(const Shape& s, double lo, double hi) { return add(mul(rand(s, f64), hi - lo), lo); }
// |x| in [0.2, 1.2) with random signs: away from 0 (abs, relu's kink)
Tensor away_from_zero(const Shape& s) {
  Tensor sign = sub(mul(gt(rand(s, f64), 0.5).to(DType::float64), 2.0), 1.0);
  return mul(uni(s, 0.2, 1.2), sign);
}
}  // namespace

TEST_CASE("x^3: grad with create_graph gives 3x^2, and its gradient 6x") {
  Tensor x = T({0.5, -1.5, 2.0}, {3}).requires_grad_();
  Tensor y = sum(x * x * x);
  Tensor dy = grad({y}, {x}, {}, {.create_graph = true})[0];
  CHECK(dy.requires_grad());
  CHECK(max_abs_diff(dy, mul(mul(x, x), 3.0).detach()) < 1e-15);
  Tensor d2 = grad({sum(dy)}, {x}, {}, {.retain_graph = true})[0];
  CHECK(max_abs_diff(d2, mul(x, 6.0).detach()) < 1e-15);
  CHECK_FALSE(x.grad().defined());  // grad() leaves .grad alone
  // third order through the same graph: d/dx sum(6x) = 6
  Tensor d2g = grad({sum(grad({sum(dy)}, {x}, {}, {.create_graph = true})[0])}, {x})[0];
  CHECK(max_abs_diff(d2g, full({3}, 6.0, f64)) < 1e-15);
}

TEST_CASE("backward(create_graph) leaves differentiable .grad; a second backward accumulates") {
  Tensor x = T({1.0, 2.0}, {2}).requires_grad_();
  Tensor y = sum(x * x * x);
  y.backward(Tensor(), false, true);
  Tensor g = x.grad();
  REQUIRE(g.requires_grad());
  CHECK(max_abs_diff(g, T({3.0, 12.0}, {2})) < 1e-15);
  x.set_grad(Tensor());
  sum(g).backward();  // d/dx sum(3x^2) = 6x
  CHECK(max_abs_diff(x.grad(), T({6.0, 12.0}, {2})) < 1e-15);
}

TEST_CASE("grad: errors and allow_unused") {
  Tensor x = rnd({3}).requires_grad_(), u = rnd({3}).requires_grad_(), c = rnd({3});
  Tensor y = sum(x * x);
  CHECK(error_of([&] { grad({y}, {x, u}, {}, {.retain_graph = true}); }).find("input 1") != std::string::npos);
  CHECK(error_of([&] { grad({y}, {c}, {}, {.retain_graph = true}); }).find("does not require grad") !=
        std::string::npos);
  CHECK(error_of([&] { grad({y}, {x, x}, {}, {.retain_graph = true}); }).find("twice") != std::string::npos);
  auto g = grad({y}, {x, u}, {}, {.allow_unused = true});
  CHECK(g[0].defined());
  CHECK_FALSE(g[1].defined());
  // gradients of non-leaf inputs: d sum(h^2) / dh = 2h
  Tensor h = x * 3.0;
  Tensor z = sum(h * h);
  Tensor gh = grad({z}, {h})[0];
  CHECK(max_abs_diff(gh, mul(h, 2.0).detach()) < 1e-14);
}

TEST_CASE("double backward: elementwise binary ops, with broadcasting") {
  CHECK(gradgradcheck([](auto& in) { return in[0] * in[1]; }, {rnd({3, 4}), rnd({4})}));
  CHECK(gradgradcheck([](auto& in) { return in[0] / in[1]; }, {rnd({2, 3}), uni({2, 1}, 0.5, 2.0)}));
  CHECK(gradgradcheck([](auto& in) { return pow(in[0], in[1]); }, {uni({3, 2}, 0.5, 2.0), uni({2}, 0.5, 2.5)}));
  CHECK(gradgradcheck([](auto& in) { return (in[0] + in[1]) * (in[0] - in[1]); }, {rnd({2, 3}), rnd({1, 3})}));
  CHECK(gradgradcheck([](auto& in) { return maximum(in[0], in[1]) * minimum(in[0], in[1]); },
                      {rnd({4}), rnd({4})}));
  CHECK(gradgradcheck([](auto& in) { return where(gt(in[0], 0.0), in[0] * in[1], in[1] * in[1]); },
                      {rnd({5}), rnd({5})}));
  CHECK(gradgradcheck([](auto& in) { return 2.0 / in[0] + mul(in[0], in[0]) - 1.5; }, {uni({4}, 0.5, 2.0)}));
}

TEST_CASE("double backward: every unary op and activation") {
  const Shape s{2, 5};
  auto sq = [](const Tensor& t) { return t * t; };  // makes an op's second derivative matter for the check
  CHECK(gradgradcheck([&](auto& in) { return sq(neg(in[0])); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return exp(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return log(in[0]); }, {uni(s, 0.5, 2.0)}));
  CHECK(gradgradcheck([&](auto& in) { return sqrt(in[0]); }, {uni(s, 0.5, 2.0)}));
  CHECK(gradgradcheck([&](auto& in) { return rsqrt(in[0]); }, {uni(s, 0.5, 2.0)}));
  CHECK(gradgradcheck([&](auto& in) { return sq(abs(in[0])); }, {away_from_zero(s)}));
  CHECK(gradgradcheck([&](auto& in) { return sin(in[0]) * cos(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return tanh(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return sigmoid(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return sq(relu(in[0])); }, {away_from_zero(s)}));
  CHECK(gradgradcheck([&](auto& in) { return sq(leaky_relu(in[0], 0.1)); }, {away_from_zero(s)}));
  CHECK(gradgradcheck([&](auto& in) { return gelu(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return gelu(in[0], GeluApprox::tanh); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return silu(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return softplus(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return log_sigmoid(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return log1p(in[0]); }, {uni(s, 0.5, 2.0)}));
  CHECK(gradgradcheck([&](auto& in) { return expm1(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return elu(in[0], 0.7); }, {away_from_zero(s)}));
  CHECK(gradgradcheck([&](auto& in) { return selu(in[0]); }, {away_from_zero(s)}));
  CHECK(gradgradcheck([&](auto& in) { return sq(hardtanh(in[0], -0.5, 0.5)); }, {T({-1.0, -0.3, 0.1, 0.4, 0.9}, {5})}));
  CHECK(gradgradcheck([&](auto& in) { return sq(in[0]) * (floor(in[0]) + ceil(in[0]) + round(in[0]) + sign(in[0])); },
                      {T({-1.3, -0.4, 0.2, 0.7, 1.4}, {5})}));
  CHECK(gradgradcheck([&](auto& in) { return sq(hardsigmoid(in[0])) + hardswish(in[0]); },
                      {T({-4.0, -2.5, -0.3, 0.7, 2.9, 3.5}, {6})}));
  CHECK(gradgradcheck([&](auto& in) { return sq(clamp(in[0], -0.5, 0.5)); },
                      {T({-1.0, -0.3, 0.1, 0.4, 0.9}, {5})}));
  CHECK(gradgradcheck([&](auto& in) { return pow(in[0], 2.5) + pow(in[0], 3.0); }, {uni(s, 0.5, 2.0)}));
  CHECK(gradgradcheck([&](auto& in) { return reciprocal(in[0]) + square(in[0]) * in[0]; }, {uni(s, 0.5, 2.0)}));
  CHECK(gradgradcheck([&](auto& in) { return kiln::tan(in[0]) + kiln::atan(in[0]); }, {uni(s, -1.2, 1.2)}));
  CHECK(gradgradcheck([&](auto& in) { return kiln::asin(in[0]) * kiln::acos(in[0]); }, {uni(s, -0.8, 0.8)}));
  CHECK(gradgradcheck([&](auto& in) { return kiln::sinh(in[0]) * kiln::cosh(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return kiln::erf(in[0]) * kiln::erfc(in[0]); }, {rnd(s)}));
  CHECK(gradgradcheck([&](auto& in) { return kiln::exp2(in[0]) * kiln::log2(in[0]) + kiln::log10(in[0]); },
                      {uni(s, 0.5, 2.0)}));
}

TEST_CASE("double backward: reductions, softmax and log_softmax") {
  CHECK(gradgradcheck([](auto& in) { return sum(in[0] * in[0], {1}); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return mean(in[0] * in[0], {0}, true); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return var(in[0], {1}); }, {rnd({3, 5})}));
  CHECK(gradgradcheck([](auto& in) { return kiln::std(in[0], {0}, false); }, {rnd({4, 3})}));
  CHECK(gradgradcheck([](auto& in) { return logsumexp(in[0], {1}); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return max(in[0] * in[0], 1).values; }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return min(in[0] * in[0]); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return softmax(in[0], 1); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return log_softmax(in[0], 0); }, {rnd({3, 4})}));
  for (double ord : {2.0, 3.0, 1.5, 1.0, double(INFINITY)})
    CHECK(gradgradcheck([ord](auto& in) { return vector_norm(in[0] * in[0], ord, {1}); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return amax(in[0] * in[0], {0, 1}) + amin(in[0] * in[0], {1}); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return cumsum(in[0] * in[0], 1); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return normalize(in[0], 2, 1) + normalize(in[0], 3, 0); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return cosine_similarity(in[0], in[1]) + pairwise_distance(in[0], in[1]); },
                      {rnd({3, 4}), rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return lerp(in[0], in[1] * in[1], in[2]); }, {rnd({4}), rnd({4}), rnd({4})}));
  CHECK(gradgradcheck([](auto& in) { return nan_to_num(in[0] * in[0]); }, {rnd({4})}));
  {  // away from fmod's and remainder's jumps (a / b and a^2 / b not near whole numbers)
    const Tensor a = from_vector<double>({2.3, -2.3, 4.6, -0.4}, {4}), b = from_vector<double>({0.9, -1.3, 1.7, 0.7}, {4});
    CHECK(gradgradcheck([](auto& in) { return fmod(in[0] * in[0], in[1]) + remainder(in[0], in[1] * in[1]); }, {a, b}));
  }
  CHECK(gradgradcheck([](auto& in) { return atan2(in[0], in[1] * in[1] + 0.1); }, {rnd({4}), rnd({4})}));
  CHECK(gradgradcheck([](auto& in) { return soft_margin_loss(in[0], in[1]) + poisson_nll_loss(in[0], in[1] * in[1]); },
                      {rnd({2, 3}), rnd({2, 3})}));
  CHECK(gradgradcheck([](auto& in) { return triplet_margin_loss(in[0], in[1], in[2], {.margin = 5.0}); },
                      {rnd({2, 3}), rnd({2, 3}), rnd({2, 3})}));
  CHECK(gradgradcheck([](auto& in) { return gaussian_nll_loss(in[0], in[1], in[2] * in[2] + 0.5); },
                      {rnd({2, 3}), rnd({2, 3}), rnd({2, 3})}));
  CHECK(gradgradcheck([](auto& in) {
    return prelu(in[0] * in[0] - 0.3, in[1]) + sum(glu(in[0], 1)) + celu(in[0], 0.7) + softsign(in[0]) +
           tanhshrink(in[0]) + softmin(in[0], 1) + softshrink(in[0] * 3.0, 0.5);
  }, {rnd({2, 4}), from_vector<double>({0.2}, {1})}));
  CHECK(gradgradcheck([](auto& in) {
    return addmm(in[0], in[1], in[1].t(), 0.5, 2.0) + outer(diag(in[1]), diag(in[1])) * trace(in[1] * in[1]) +
           cdist(in[1], in[1] * 2.0 + 1.0) + logaddexp(in[0], in[1] * in[1]) + sum(diff(in[1] * in[1], 1, 1), {1}, true);
  }, {rnd({3, 3}), rnd({3, 3})}));
}

TEST_CASE("double backward: matmul (1-D, 2-D, batched, broadcast) and linear") {
  CHECK(gradgradcheck([](auto& in) { return matmul(in[0], in[1]); }, {rnd({3, 4}), rnd({4, 2})}));
  CHECK(gradgradcheck([](auto& in) { return matmul(in[0], in[1]); }, {rnd({4}), rnd({4, 2})}));
  CHECK(gradgradcheck([](auto& in) { return matmul(in[0], in[1]); }, {rnd({3, 4}), rnd({4})}));
  CHECK(gradgradcheck([](auto& in) { return matmul(in[0], in[1]); }, {rnd({2, 3, 4}), rnd({4, 2})}));
  CHECK(gradgradcheck([](auto& in) { return matmul(in[0], in[1]); }, {rnd({4}), rnd({2, 4, 3})}));
  CHECK(gradgradcheck([](auto& in) { return matmul(in[0], in[1]); }, {rnd({2, 1, 3, 4}), rnd({3, 4, 2})}));
  CHECK(gradgradcheck([](auto& in) { return tanh(linear(in[0], in[1], in[2])); },
                      {rnd({2, 3, 4}), rnd({5, 4}), rnd({5})}));
  CHECK(gradgradcheck([](auto& in) { return tanh(linear(in[0], in[1])); }, {rnd({4}), rnd({3, 4})}));
}

TEST_CASE("double backward: views, cat and stack") {
  auto sq = [](const Tensor& t) { return t * t; };
  CHECK(gradgradcheck([&](auto& in) { return sq(in[0]).reshape({6, 2}).transpose(0, 1); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([&](auto& in) { return sq(in[0]).permute({2, 0, 1}).unsqueeze(1); }, {rnd({2, 3, 2})}));
  CHECK(gradgradcheck([](auto& in) { return (in[0] * in[0]).expand({3, 4}); }, {rnd({1, 4})}));
  CHECK(gradgradcheck([](auto& in) { return (in[0] * in[0]).slice(1, 1, 3); }, {rnd({3, 4})}));
  // strided slices (used to refuse double backward), a step not dividing the range, an empty one
  CHECK(gradgradcheck([](auto& in) { return (in[0] * in[0]).slice(1, 0, 5, 2); }, {rnd({3, 5})}));
  CHECK(gradgradcheck([](auto& in) { return (in[0] * in[0]).slice(0, 1, 7, 3).slice(1, 1, 4, 2); }, {rnd({7, 4})}));
  CHECK(gradgradcheck([](auto& in) { return cat({(in[0] * in[0]).slice(1, 2, 2, 2), in[0]}, 1); }, {rnd({2, 3})}));
  CHECK(gradgradcheck([](auto& in) { return (in[0] * in[0]).select(0, 1); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return cat({in[0] * in[1], in[1]}, 1); }, {rnd({2, 3}), rnd({2, 3})}));
  CHECK(gradgradcheck([](auto& in) { return stack({in[0] * in[0], in[1]}, 0).clone(); }, {rnd({2, 3}), rnd({2, 3})}));
  CHECK(gradgradcheck([](auto& in) { return tril(in[0] * in[0], -1) + triu(in[0] * in[0], 1); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return roll(in[0] * in[0], {1, -2}, {0, 1}); }, {rnd({3, 4})}));
  CHECK(gradgradcheck([](auto& in) { return repeat(in[0] * in[0], {2, 1, 3}); }, {rnd({3, 2})}));
  CHECK(gradgradcheck([](auto& in) { Tensor y = in[0].to(DType::float32).to(DType::float64); return y * y; },
                      {rnd({3})}, {.eps = 1e-3, .atol = 1e-4, .rtol = 1e-3}));
}

TEST_CASE("Hessian-vector product of an MLP's loss matches finite differences of its gradient") {
  manual_seed(3);
  Tensor x = rnd({5, 3}), w1 = rnd({4, 3}).requires_grad_(), b1 = rnd({4}).requires_grad_(),
         w2 = rnd({2, 4}).requires_grad_();
  auto loss_of = [&](const Tensor& w) { return mean(pow(linear(silu(linear(x, w, b1)), w2), 2.0)); };
  Tensor v = rnd({4, 3});
  Tensor g = grad({loss_of(w1)}, {w1}, {}, {.create_graph = true})[0];
  Tensor hv = grad({sum(g * v)}, {w1})[0];  // H v
  const double eps = 1e-5;
  Tensor gp, gm;
  {
    Tensor wp = (w1.detach() + v * eps).requires_grad_(), wm = (w1.detach() - v * eps).requires_grad_();
    gp = grad({loss_of(wp)}, {wp})[0];
    gm = grad({loss_of(wm)}, {wm})[0];
  }
  Tensor fd = (gp - gm) / (2 * eps);
  CHECK(max_abs_diff(hv, fd) < 1e-7);
}

namespace {
struct Critic : nn::Module {
  nn::Linear l1, l2;
  Critic() {
    l1 = register_module("l1", nn::Linear(3, 4));
    l2 = register_module("l2", nn::Linear(4, 1));
  }
  Tensor forward(const Tensor& x) override { return l2(tanh(l1(x))); }
};
}  // namespace

TEST_CASE("a gradient penalty |dD(x)/dx|^2: its gradient with respect to the parameters passes gradcheck") {
  manual_seed(4);
  Critic critic;
  critic.to(DType::float64);
  auto penalty = [&](std::vector<Tensor>& in) {
    GradModeGuard on(true);  // the finite differences evaluate under NoGradGuard
    Tensor gx = grad({sum(critic(in[0]))}, {in[0]}, {}, {.create_graph = true})[0];
    return sum(gx * gx, {1});  // one penalty per sample
  };
  std::string r = kiln::testing::module_gradcheck_report(critic, penalty, {rnd({2, 3})});
  if (!r.empty()) MESSAGE(r);
  CHECK(r.empty());
}

TEST_CASE("double backward: the losses (reductions, smoothing, ignored targets, spatial layouts)") {
  Tensor t = T({0.0, 3.0, 1.0}, {3}, DType::int64), ti = T({2.0, -100.0, 1.0}, {3}, DType::int64);
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    CHECK(gradgradcheck([&](auto& in) { return cross_entropy(in[0], t, {.reduction = r}); }, {rnd({3, 4})}));
    CHECK(gradgradcheck([&](auto& in) { return nll_loss(log_softmax(in[0], 1), ti, {.reduction = r}); },
                        {rnd({3, 4})}));
    CHECK(gradgradcheck([&](auto& in) { return mse_loss(in[0] * in[1], in[1], r); }, {rnd({2, 3}), rnd({2, 3})}));
  }
  CHECK(gradgradcheck([&](auto& in) { return cross_entropy(in[0], ti, {.label_smoothing = 0.2}); }, {rnd({3, 4})}));
  Tensor spatial = T({0, 1, 2, 0, 2, 2, 1, -100}, {2, 2, 2}, DType::int64);  // (N, d1, d2)
  CHECK(gradgradcheck([&](auto& in) { return cross_entropy(in[0], spatial, {.label_smoothing = 0.1}); },
                      {rnd({2, 3, 2, 2})}));
  CHECK(gradgradcheck([&](auto& in) { return cross_entropy(in[0], T({2.0}, {}, DType::int64)); }, {rnd({4})}));
}

TEST_CASE("double backward through a backward that is not twice differentiable is an error naming it") {
  Tensor x = rnd({1, 2, 5, 5}).requires_grad_(), w = rnd({3, 2, 3, 3});
  Tensor g = grad({sum(conv2d(x, w) * conv2d(x, w))}, {x}, {}, {.create_graph = true})[0];
  REQUIRE(g.requires_grad());  // first order works
  std::string e = error_of([&] { grad({sum(g * g)}, {x}); });
  CHECK(e.find("double backward through 'conv2d'") != std::string::npos);
  // a custom Function is not twice differentiable either
  struct Square : Function {
    Tensor forward(const std::vector<Tensor>& in) override {
      save_for_backward({in[0]});
      return in[0] * in[0];
    }
    std::vector<Tensor> backward(const Tensor& go) override { return {go * saved()[0] * 2.0}; }
    std::string name() const override { return "Square"; }
  };
  Tensor y = rnd({3}).requires_grad_();
  Tensor gs = grad({sum(Function::apply(std::make_shared<Square>(), {y}))}, {y}, {}, {.create_graph = true})[0];
  CHECK(error_of([&] { grad({sum(gs)}, {y}); }).find("'Square'") != std::string::npos);
}
