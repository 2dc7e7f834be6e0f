// Probability distributions (nn/distributions.h): log_prob against closed forms and
// normalisation, entropy and KL divergence against numerical integration, the samplers'
// moments and frequencies, reparameterised gradients, determinism under manual_seed, and
// errors, for every distribution of nn/distributions.h. (Against PyTorch 2.15: 2,146 values
// and gradients, and 612 more for Cauchy to StudentT, docs/training.md.)
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <limits>
#include "gradcheck.h"

using namespace kiln;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::T;
namespace D = kiln::distributions;

namespace {
std::vector<double> V(const Tensor& t) { return t.to(DType::float64).contiguous().to_vector<double>(); }
double S(const Tensor& t) { return t.to(DType::float64).item(); }

// The trapezoid rule of f over [a, b] with n intervals, f given as a tensor function.
double integrate(const std::function<Tensor(const Tensor&)>& f, double a, double b, int64_t n = 200000) {
  const Tensor x = linspace(a, b, n + 1, f64);
  const std::vector<double> y = V(f(x));
  double s = 0.5 * (y.front() + y.back());
  for (size_t i = 1; i + 1 < y.size(); ++i) s += y[i];
  return s * (b - a) / double(n);
}
// diag(v) for a 1-D v.
Tensor diag_embed_ref(const Tensor& v) { return diag(v); }
// -integral p log p over [a, b]
double entropy_by_quadrature(const D::Distribution& d, double a, double b) {
  return integrate([&d](const Tensor& x) { return neg(xlogy(exp(d.log_prob(x)), exp(d.log_prob(x)))); }, a, b);
}
}  // namespace

TEST_CASE("continuous distributions: log_prob, entropy, cdf/icdf by their definitions") {
  const D::Normal n(T({0.3}, {1}), T({1.7}, {1}));
  CHECK(S(n.log_prob(T({1.1}, {1}))) ==
        doctest::Approx(-0.5 * std::pow(0.8 / 1.7, 2) - std::log(1.7) - 0.5 * std::log(2 * M_PI)).epsilon(1e-15));
  CHECK(S(n.entropy()) == doctest::Approx(entropy_by_quadrature(n, -15, 15)).epsilon(1e-9));
  CHECK(S(n.icdf(n.cdf(T({-0.4}, {1})))) == doctest::Approx(-0.4).epsilon(1e-14));
  CHECK(integrate([&n](const Tensor& x) { return exp(n.log_prob(x)); }, -15, 15) == doctest::Approx(1.0).epsilon(1e-9));

  const D::Laplace l(T({-0.5}, {1}), T({0.8}, {1}));
  CHECK(S(l.entropy()) == doctest::Approx(entropy_by_quadrature(l, -30, 30)).epsilon(1e-6));
  CHECK(S(l.icdf(l.cdf(T({0.9}, {1})))) == doctest::Approx(0.9).epsilon(1e-14));
  const D::Exponential e(T({1.3}, {1}));
  CHECK(S(e.entropy()) == doctest::Approx(entropy_by_quadrature(e, 0, 40)).epsilon(1e-6));
  CHECK(S(e.icdf(e.cdf(T({0.7}, {1})))) == doctest::Approx(0.7).epsilon(1e-14));
  const D::Uniform u(T({-1.0}, {1}), T({3.0}, {1}));
  CHECK(S(u.entropy()) == doctest::Approx(std::log(4.0)));
  CHECK(std::isinf(S(u.log_prob(T({3.0}, {1})))));  // [low, high): high is outside
  CHECK(S(u.log_prob(T({-1.0}, {1}))) == doctest::Approx(-std::log(4.0)));
  CHECK(S(u.cdf(T({5.0}, {1}))) == 1.0);

  const D::Gamma g(T({2.5}, {1}), T({1.5}, {1}));
  CHECK(integrate([&g](const Tensor& x) { return exp(g.log_prob(x)); }, 1e-9, 40) == doctest::Approx(1.0).epsilon(1e-7));
  CHECK(S(g.entropy()) == doctest::Approx(entropy_by_quadrature(g, 1e-9, 40)).epsilon(1e-6));
  const D::Beta b(T({2.5}, {1}), T({3.5}, {1}));
  CHECK(integrate([&b](const Tensor& x) { return exp(b.log_prob(x)); }, 0, 1) == doctest::Approx(1.0).epsilon(1e-7));
  CHECK(S(b.entropy()) == doctest::Approx(entropy_by_quadrature(b, 0, 1)).epsilon(1e-6));
  CHECK(S(b.mean()) == doctest::Approx(2.5 / 6.0));
  // Dirichlet of two categories is Beta
  const D::Dirichlet dir(T({2.5, 3.5}, {2}));
  CHECK(S(dir.log_prob(T({0.3, 0.7}, {2}))) == doctest::Approx(S(b.log_prob(T({0.3}, {1})))).epsilon(1e-14));
  CHECK(S(dir.entropy()) == doctest::Approx(S(b.entropy())).epsilon(1e-14));
  CHECK(dir.event_shape() == Shape{2});
  CHECK(dir.batch_shape() == Shape{});
}

TEST_CASE("discrete distributions: probabilities sum to 1, log_prob by definition") {
  const D::Bernoulli bp = D::Bernoulli::from_probs(T({0.2, 0.9}, {2}));
  const D::Bernoulli bl = D::Bernoulli::from_logits(T({std::log(0.25), std::log(9.0)}, {2}));
  CHECK(V(bl.probs)[0] == doctest::Approx(0.2));
  CHECK(V(add(exp(bp.log_prob(T({0, 0}, {2}))), exp(bp.log_prob(T({1, 1}, {2}))))) == std::vector<double>{1.0, 1.0});
  CHECK(V(bp.log_prob(T({1, 0}, {2})))[0] == doctest::Approx(std::log(0.2)));
  CHECK(V(bp.entropy())[1] == doctest::Approx(-(0.9 * std::log(0.9) + 0.1 * std::log(0.1))));

  const D::Categorical c = D::Categorical::from_probs(T({1, 2, 3, 4, 0, 0, 1, 1}, {2, 4}));
  CHECK(c.batch_shape() == Shape{2});
  CHECK(c.num_events() == 4);
  CHECK(V(c.log_prob(T({2, 3}, {2}))) == std::vector<double>{std::log(0.3), std::log(0.5)});
  // value broadcast against the batch: (3, 1) -> (3, 2)
  CHECK(c.log_prob(T({0, 1, 2}, {3, 1})).shape() == Shape{3, 2});
  CHECK(V(c.entropy())[1] == doctest::Approx(std::log(2.0)));  // the zero categories add 0
  const D::Categorical cl = D::Categorical::from_logits(T({0.5, -1.0, 2.0}, {3}));
  CHECK(S(sum(exp(cl.logits))) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK_THROWS_AS(c.log_prob(T({4, 0}, {2})), kiln::Error);  // out of range

  const D::Poisson p(T({3.5}, {1}));
  double total = 0;
  for (int k = 0; k < 60; ++k) total += std::exp(S(p.log_prob(T({double(k)}, {1}))));
  CHECK(total == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(S(p.log_prob(T({2.0}, {1}))) == doctest::Approx(2 * std::log(3.5) - 3.5 - std::log(2.0)).epsilon(1e-15));
}

TEST_CASE("KL divergences: 0 against themselves, numerical integrals otherwise") {
  auto kl_by_quadrature = [](const D::Distribution& p, const D::Distribution& q, double a, double b) {
    return integrate([&](const Tensor& x) { return mul(exp(p.log_prob(x)), sub(p.log_prob(x), q.log_prob(x))); }, a, b);
  };
  const D::Normal n1(T({0.3}, {1}), T({1.2}, {1})), n2(T({-0.4}, {1}), T({0.7}, {1}));
  CHECK(S(D::kl_divergence(n1, n1)) == 0.0);
  CHECK(S(D::kl_divergence(n1, n2)) == doctest::Approx(kl_by_quadrature(n1, n2, -15, 15)).epsilon(1e-8));
  const D::Laplace l1(T({0.3}, {1}), T({1.2}, {1})), l2(T({-0.4}, {1}), T({0.7}, {1}));
  CHECK(S(D::kl_divergence(l1, l2)) == doctest::Approx(kl_by_quadrature(l1, l2, -40, 40)).epsilon(1e-6));
  const D::Gamma g1(T({2.0}, {1}), T({1.5}, {1})), g2(T({3.0}, {1}), T({0.8}, {1}));
  CHECK(S(D::kl_divergence(g1, g2)) == doctest::Approx(kl_by_quadrature(g1, g2, 1e-9, 50)).epsilon(1e-6));
  const D::Beta b1(T({2.0}, {1}), T({3.0}, {1})), b2(T({4.0}, {1}), T({1.5}, {1}));
  CHECK(S(D::kl_divergence(b1, b2)) == doctest::Approx(kl_by_quadrature(b1, b2, 1e-12, 1 - 1e-12)).epsilon(1e-6));
  const D::Exponential e1(T({2.0}, {1})), e2(T({0.5}, {1}));
  CHECK(S(D::kl_divergence(e1, e2)) == doctest::Approx(kl_by_quadrature(e1, e2, 0, 40)).epsilon(1e-6));
  const D::Uniform u1(T({0.0}, {1}), T({1.0}, {1})), u2(T({-1.0}, {1}), T({2.0}, {1}));
  CHECK(S(D::kl_divergence(u1, u2)) == doctest::Approx(std::log(3.0)));
  CHECK(std::isinf(S(D::kl_divergence(u2, u1))));  // q has no mass where p has
  // discrete: the sums written out; a zero of q where p has mass is inf
  const D::Categorical c1 = D::Categorical::from_probs(T({0.2, 0.3, 0.5}, {3}));
  const D::Categorical c2 = D::Categorical::from_probs(T({0.4, 0.4, 0.2}, {3}));
  CHECK(S(D::kl_divergence(c1, c2)) ==
        doctest::Approx(0.2 * std::log(0.5) + 0.3 * std::log(0.75) + 0.5 * std::log(2.5)).epsilon(1e-14));
  CHECK(std::isinf(S(D::kl_divergence(c1, D::Categorical::from_probs(T({0.5, 0.5, 0.0}, {3}))))));
  CHECK(S(D::kl_divergence(D::Categorical::from_probs(T({0.5, 0.5, 0.0}, {3})), c1)) == doctest::Approx(
                                                                                          0.5 * std::log(2.5) + 0.5 * std::log(0.5 / 0.3)));
  const D::Bernoulli q1 = D::Bernoulli::from_probs(T({0.3}, {1})), q2 = D::Bernoulli::from_probs(T({0.6}, {1}));
  CHECK(S(D::kl_divergence(q1, q2)) == doctest::Approx(0.3 * std::log(0.5) + 0.7 * std::log(0.7 / 0.4)).epsilon(1e-14));
  const D::Cauchy y1(T({0.3}, {1}), T({1.2}, {1})), y2(T({-0.4}, {1}), T({0.7}, {1}));
  CHECK(std::abs(S(D::kl_divergence(y1, y1))) < 1e-15);
  CHECK(S(D::kl_divergence(y1, y2)) ==
        doctest::Approx(kl_by_quadrature(y1, y2, -20000, 20000)).epsilon(1e-3));  // heavy tails: a wide range
  const D::LogNormal ln1(T({0.3}, {1}), T({0.6}, {1})), ln2(T({-0.2}, {1}), T({0.9}, {1}));
  CHECK(S(D::kl_divergence(ln1, ln2)) == doctest::Approx(kl_by_quadrature(ln1, ln2, 1e-9, 60)).epsilon(1e-6));
  const D::HalfNormal h1(T({1.2}, {1})), h2(T({0.7}, {1}));
  CHECK(S(D::kl_divergence(h1, h2)) == doctest::Approx(kl_by_quadrature(h1, h2, 0, 15)).epsilon(1e-7));
  const D::Gumbel gu1(T({0.3}, {1}), T({1.2}, {1})), gu2(T({-0.4}, {1}), T({0.7}, {1}));
  CHECK(std::abs(S(D::kl_divergence(gu1, gu1))) < 1e-14);
  CHECK(S(D::kl_divergence(gu1, gu2)) == doctest::Approx(kl_by_quadrature(gu1, gu2, -10, 60)).epsilon(1e-6));
  const D::Geometric ge1 = D::Geometric::from_probs(T({0.3}, {1})), ge2 = D::Geometric::from_probs(T({0.6}, {1}));
  const Tensor ks = arange(0, 300, 1, f64);
  CHECK(S(D::kl_divergence(ge1, ge2)) ==
        doctest::Approx(S(sum(mul(exp(ge1.log_prob(ks)), sub(ge1.log_prob(ks), ge2.log_prob(ks)))))).epsilon(1e-12));
  const D::Poisson p1(T({2.0}, {1})), p2(T({3.0}, {1}));
  CHECK(S(D::kl_divergence(p1, p2)) == doctest::Approx(2 * std::log(2.0 / 3.0) + 1.0).epsilon(1e-14));
}

TEST_CASE("samplers: shapes, moments, frequencies, determinism") {
  manual_seed(21);
  const int64_t n = 40000;
  // mean and variance of n draws within 5 standard errors (var of a sample variance ~ 2 s^4 / n
  // for these light tails; the kurtosis of Exponential/Gamma/Poisson gets a wider band)
  auto check_moments = [](const D::Distribution& d, double mean, double var, double band = 5.0) {
    const Tensor x = d.sample({n}).to(DType::float64);
    CHECK(x.shape() == Shape{n, 1});
    CHECK(std::fabs(S(kiln::mean(x)) - mean) < band * std::sqrt(var / double(n)));
    CHECK(std::fabs(S(kiln::var(x)) - var) < 3 * band * var * std::sqrt(2.0 / double(n)));
  };
  check_moments(D::Normal(T({0.5}, {1}), T({2.0}, {1})), 0.5, 4.0);
  check_moments(D::Uniform(T({-1.0}, {1}), T({3.0}, {1})), 1.0, 16.0 / 12);
  check_moments(D::Exponential(T({2.0}, {1})), 0.5, 0.25);
  check_moments(D::Laplace(T({1.0}, {1}), T({0.5}, {1})), 1.0, 0.5);
  check_moments(D::Gamma(T({0.4}, {1}), T({2.0}, {1})), 0.2, 0.1, 8.0);  // alpha < 1: the boosted branch
  check_moments(D::Gamma(T({5.0}, {1}), T({0.5}, {1})), 10.0, 20.0);
  check_moments(D::Beta(T({2.0}, {1}), T({5.0}, {1})), 2.0 / 7, 10.0 / (49 * 8));
  check_moments(D::Poisson(T({3.0}, {1})), 3.0, 3.0);     // multiplication of uniforms
  check_moments(D::Poisson(T({40.0}, {1})), 40.0, 40.0);  // transformed rejection
  check_moments(D::Bernoulli::from_probs(T({0.3}, {1})), 0.3, 0.21);
  // Categorical: frequencies, shape sample_shape + batch_shape
  const D::Categorical c = D::Categorical::from_probs(T({0.1, 0.6, 0.3, 0.5, 0.5, 0.0}, {2, 3}));
  const Tensor s = c.sample({n});
  CHECK(s.shape() == Shape{n, 2});
  CHECK(s.dtype() == DType::int64);
  const std::vector<double> counts = V(bincount(s.select(1, 0), {}, 3));
  CHECK(std::fabs(counts[1] / double(n) - 0.6) < 5 * std::sqrt(0.24 / double(n)));
  CHECK(max(s.select(1, 1)).item() <= 1.0);  // a zero-probability category is never drawn
  // Dirichlet draws lie on the simplex
  const Tensor dd = D::Dirichlet(T({0.5, 1.0, 2.0}, {3})).sample({100, 2});
  CHECK(dd.shape() == Shape{100, 2, 3});
  CHECK(max(abs(sub(sum(dd, {-1}), 1.0))).item() < 1e-6);
  // manual_seed repeats every sampler
  manual_seed(5);
  const Tensor a1 = D::Gamma(T({1.5}, {1}), T({1.0}, {1})).sample({8}), a2 = D::Poisson(T({20.0}, {1})).sample({8});
  manual_seed(5);
  CHECK(V(D::Gamma(T({1.5}, {1}), T({1.0}, {1})).sample({8})) == V(a1));
  CHECK(V(D::Poisson(T({20.0}, {1})).sample({8})) == V(a2));
}

TEST_CASE("rsample carries gradients to the parameters; log_prob is differentiable") {
  manual_seed(22);
  Tensor loc = T({0.5, -1.0}, {2}).requires_grad_(true), scale = T({2.0, 0.5}, {2}).requires_grad_(true);
  const D::Normal n(loc, scale);
  const Tensor x = n.rsample({1000});
  const auto g = kiln::grad({sum(x)}, {loc, scale});
  CHECK(V(g[0]) == std::vector<double>{1000.0, 1000.0});  // d x / d loc = 1
  CHECK(V(g[1])[0] == doctest::Approx(S(sum(div(sub(x.detach().select(1, 0), 0.5), 2.0)))));  // = eps
  CHECK_FALSE(n.sample().requires_grad());
  CHECK(gradcheck([](auto& t) { return D::Normal(t[0], t[1]).log_prob(t[2]); },
                  {T({0.1, 0.4}, {2}), T({1.5, 0.6}, {2}), T({0.3, -0.2}, {2})}));
  CHECK(gradcheck([](auto& t) { return D::Gamma(t[0], t[1]).log_prob(t[2]); },
                  {T({1.5, 3.0}, {2}), T({0.6, 2.0}, {2}), T({0.3, 1.2}, {2})}));
  CHECK(gradcheck([](auto& t) { return D::kl_divergence(D::Beta(t[0], t[1]), D::Beta(t[2], t[3])); },
                  {T({1.5}, {1}), T({0.6}, {1}), T({2.0}, {1}), T({3.0}, {1})}));
  CHECK(gradcheck([](auto& t) { return D::Categorical::from_logits(t[0]).entropy(); }, {randn({2, 4}, f64)}));
}

TEST_CASE("distributions: parameter checks and errors") {
  CHECK_THROWS_WITH_AS(D::Normal(T({0.0}, {1}), T({0.0}, {1})), doctest::Contains("Normal: every entry of scale must be > 0"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(D::Normal(T({0.0}, {1}), T({NAN}, {1})), doctest::Contains("scale"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::Uniform(2.0, 1.0), doctest::Contains("below high"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::Bernoulli::from_probs(T({1.2}, {1})), doctest::Contains("in [0, 1]"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::Categorical::from_probs(T({0.5}, {})), doctest::Contains("at least one dim"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::Poisson(-1.0), doctest::Contains(">= 0"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::Poisson(1.0).entropy(), doctest::Contains("no closed form"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::Poisson(1.0).rsample(), doctest::Contains("Poisson: rsample is not available"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::Normal(T({0.0, 1.0}, {2}), T({1.0, 1.0, 1.0}, {3})), doctest::Contains("Normal"), kiln::Error);
  // a Python float's dtype: float32 parameters, shape ()
  const D::Normal s(0.0, 1.0);
  CHECK(s.loc.dtype() == DType::float32);
  CHECK(s.batch_shape() == Shape{});
  CHECK(s.sample({3}).shape() == Shape{3});
}

TEST_CASE("MultivariateNormal: covariance, precision and scale_tril agree; log_prob, entropy, KL, samples") {
  manual_seed(23);
  const Tensor m = randn({2, 3, 3}, f64);
  const Tensor C = add(matmul(m, m.transpose(-2, -1)), mul(eye(3, -1, f64), 0.5));
  const Tensor loc = randn({2, 3}, f64), x = randn({4, 2, 3}, f64);
  const auto byC = D::MultivariateNormal::from_covariance(loc, C);
  const auto byP = D::MultivariateNormal::from_precision(loc, linalg::inv(C));
  const auto byL = D::MultivariateNormal::from_scale_tril(loc, linalg::cholesky(C));
  CHECK(byC.batch_shape() == Shape{2});
  CHECK(byC.event_shape() == Shape{3});
  const Tensor lp = byC.log_prob(x);
  CHECK(lp.shape() == Shape{4, 2});
  CHECK(max(abs(sub(byP.log_prob(x), lp))).item() < 1e-12);
  CHECK(max(abs(sub(byL.log_prob(x), lp))).item() == 0.0);
  CHECK(max(abs(sub(byC.covariance_matrix(), C))).item() < 1e-13);
  // the density written out: -(d^T C^-1 d + log det(2 pi C)) / 2
  const Tensor d = sub(x, loc);
  const Tensor quad = sum(mul(d, linalg::solve(C, d.unsqueeze(-1)).squeeze(-1)), {-1});
  const Tensor ref = mul(add(quad, linalg::logdet(mul(C, 2 * M_PI))), -0.5);
  CHECK(max(abs(sub(lp, ref))).item() < 1e-12);
  // a diagonal covariance is a product of Normals
  const Tensor sd = T({0.5, 1.5, 2.0}, {3});
  const auto diag = D::MultivariateNormal::from_covariance(T({0.1, -0.2, 0.3}, {3}), diag_embed_ref(mul(sd, sd)));
  const D::Normal nn(T({0.1, -0.2, 0.3}, {3}), sd);
  const Tensor v = randn({5, 3}, f64);
  CHECK(max(abs(sub(diag.log_prob(v), sum(nn.log_prob(v), {-1})))).item() < 1e-13);
  CHECK(S(diag.entropy()) == doctest::Approx(S(sum(nn.entropy()))).epsilon(1e-14));
  const auto diag2 = D::MultivariateNormal::from_covariance(T({0.0, 0.5, 0.0}, {3}), diag_embed_ref(T({1.0, 0.49, 1.44}, {3})));
  const D::Normal nn2(T({0.0, 0.5, 0.0}, {3}), T({1.0, 0.7, 1.2}, {3}));
  CHECK(S(D::kl_divergence(diag, diag2)) == doctest::Approx(S(sum(D::kl_divergence(nn, nn2)))).epsilon(1e-13));
  CHECK(max(abs(D::kl_divergence(byC, byL))).item() < 1e-13);
  // samples: mean and covariance
  const int64_t n = 40000;
  const auto one = D::MultivariateNormal::from_covariance(T({1.0, -1.0}, {2}), T({2.0, 0.6, 0.6, 0.5}, {2, 2}));
  const Tensor s = one.sample({n});
  CHECK(s.shape() == Shape{n, 2});
  const Tensor mu = mean(s, {0});
  CHECK(std::fabs(V(mu)[0] - 1.0) < 5 * std::sqrt(2.0 / double(n)));
  const Tensor c = div(matmul(sub(s, mu).transpose(0, 1), sub(s, mu)), double(n - 1));
  CHECK(std::fabs(V(c)[1] - 0.6) < 0.05);
  // rsample's gradient reaches loc and the covariance
  Tensor l2 = T({0.0, 0.0}, {2}).requires_grad_(true), c2 = T({1.0, 0.2, 0.2, 1.0}, {2, 2}).requires_grad_(true);
  const auto g = kiln::grad({sum(D::MultivariateNormal::from_covariance(l2, c2).rsample({4}))}, {l2, c2});
  CHECK(V(g[0]) == std::vector<double>{4.0, 4.0});
  CHECK(g[1].defined());
  CHECK(gradcheck([](auto& t) { return D::MultivariateNormal::from_scale_tril(t[0], tril(t[1])).log_prob(t[2]); },
                  {randn({3}, f64), add(mul(tril(randn({3, 3}, f64)), 0.3), mul(eye(3, -1, f64), 2.0)), randn({2, 3}, f64)}));
  CHECK_THROWS_WITH_AS(D::MultivariateNormal::from_covariance(loc, randn({2, 4, 4}, f64)),
                       doctest::Contains("n = loc.size(-1) = 3"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::MultivariateNormal::from_covariance(T({0, 0}, {2}), T({1, 2, 2, 1}, {2, 2})),
                       doctest::Contains("not positive-definite"), kiln::Error);
}

TEST_CASE("Gamma.rsample: the implicit reparameterisation gradient") {
  // E[d x / d alpha] = d E[x] / d alpha = 1 / rate and E[d x / d rate] = -alpha / rate^2, for
  // alpha in each of PyTorch's three approximations (Taylor series at small x, the rational
  // fit, Rice's saddle point above alpha = 8)
  manual_seed(24);
  const int64_t n = 20000;
  for (const double alpha : {0.5, 3.0, 12.0}) {
    CAPTURE(alpha);
    Tensor a = T({alpha}, {1}).requires_grad_(true), r = T({2.0}, {1}).requires_grad_(true);
    const Tensor x = D::Gamma(a, r).rsample({n});
    const auto g = kiln::grad({sum(x)}, {a, r});
    CHECK(std::fabs(S(g[0]) / double(n) - 0.5) < 0.02);
    CHECK(std::fabs(S(g[1]) / double(n) + alpha / 4.0) < 0.03 * alpha);
    CHECK(S(mean(x.detach())) == doctest::Approx(alpha / 2.0).epsilon(0.03));
  }
  CHECK_FALSE(D::Gamma(2.0, 1.0).sample({3}).requires_grad());
}

TEST_CASE("Beta.rsample and Dirichlet.rsample: the implicit reparameterisation gradient") {
  // E[d x / d a] = d E[x] / d a = b / (a + b)^2 and E[d x / d b] = -a / (a + b)^2, with (a, b)
  // in each of PyTorch's dirichlet_grad branches (near 0, near 1, both large, the rational fit)
  manual_seed(25);
  const int64_t n = 20000;
  const std::vector<std::pair<double, double>> ab = {{0.3, 2.0}, {3.0, 0.4}, {9.0, 14.0}, {1.5, 2.5}};
  for (const auto& p : ab) {
    const double a0 = p.first, b0 = p.second, t = a0 + b0;
    CAPTURE(a0);
    CAPTURE(b0);
    Tensor a = T({a0}, {1}).requires_grad_(true), b = T({b0}, {1}).requires_grad_(true);
    const Tensor x = D::Beta(a, b).rsample({n});
    const auto g = kiln::grad({sum(x)}, {a, b});
    const double sd = std::sqrt(a0 * b0 / (t * t * (t + 1)));  // scale of x: the estimates' tolerance
    CHECK(std::fabs(S(g[0]) / double(n) - b0 / (t * t)) < 0.05 * sd / std::min(a0, b0) + 0.03 * b0 / (t * t));
    CHECK(std::fabs(S(g[1]) / double(n) + a0 / (t * t)) < 0.05 * sd / std::min(a0, b0) + 0.03 * a0 / (t * t));
  }
  // Dirichlet: d E[x_i] / d alpha_j = (delta_ij S - alpha_i) / S^2; rsample draws what sample draws
  Tensor c = T({0.5, 2.0, 4.0}, {3}).requires_grad_(true);
  const Tensor x = D::Dirichlet(c).rsample({n});
  const Tensor w = T({1.0, -2.0, 0.5}, {3});
  const Tensor gc = kiln::grad({sum(mul(x, w))}, {c})[0];
  const double S0 = 6.5, cv[3] = {0.5, 2.0, 4.0}, wv[3] = {1.0, -2.0, 0.5};
  for (int j = 0; j < 3; ++j) {
    double want = 0;
    for (int i = 0; i < 3; ++i) want += wv[i] * ((i == j ? S0 : 0.0) - cv[i]) / (S0 * S0);
    CAPTURE(j);
    CHECK(std::fabs(gc.to_vector<double>()[size_t(j)] / double(n) - want) < 0.01);
  }
  manual_seed(7);
  const Tensor r1 = D::Dirichlet(c).rsample({5});
  manual_seed(7);
  const Tensor s1 = D::Dirichlet(c).sample({5});
  CHECK(max(abs(sub(r1, s1))).item() == 0.0);
  CHECK_FALSE(s1.requires_grad());
}

TEST_CASE("Cauchy, LogNormal, HalfNormal, Gumbel, Geometric, Chi2, StudentT: normalisation, entropy, moments, "
          "cdf/icdf, gradients, errors") {
  manual_seed(31);
  const double inf = std::numeric_limits<double>::infinity();
  // densities integrate to 1 and their entropies are -E[log p]
  const D::Cauchy c(T({0.4}, {1}), T({0.7}, {1}));
  CHECK(integrate([&](const Tensor& x) { return exp(c.log_prob(x)); }, -3000, 3000, 2000000) ==
        doctest::Approx(1.0).epsilon(2e-4));
  CHECK(S(c.entropy()) == doctest::Approx(std::log(4 * M_PI * 0.7)).epsilon(1e-15));
  CHECK(std::isnan(S(c.mean())));
  CHECK(std::isinf(S(c.variance())));
  const D::LogNormal ln(T({0.2}, {1}), T({0.5}, {1}));
  CHECK(integrate([&](const Tensor& x) { return exp(ln.log_prob(x)); }, 1e-9, 40) == doctest::Approx(1.0).epsilon(1e-7));
  CHECK(S(ln.entropy()) == doctest::Approx(entropy_by_quadrature(ln, 1e-9, 40)).epsilon(1e-6));
  const D::HalfNormal hn(T({1.3}, {1}));
  CHECK(integrate([&](const Tensor& x) { return exp(hn.log_prob(x)); }, 0, 15) == doctest::Approx(1.0).epsilon(1e-8));
  CHECK(S(hn.log_prob(T({-0.1}, {1}))) == -inf);
  CHECK(S(hn.entropy()) == doctest::Approx(entropy_by_quadrature(hn, 0, 15)).epsilon(1e-7));
  const D::Gumbel g(T({0.5}, {1}), T({1.5}, {1}));
  CHECK(integrate([&](const Tensor& x) { return exp(g.log_prob(x)); }, -10, 60) == doctest::Approx(1.0).epsilon(1e-8));
  CHECK(S(g.entropy()) == doctest::Approx(entropy_by_quadrature(g, -10, 60)).epsilon(1e-7));
  const D::StudentT t(T({4.0}, {1}), T({0.3}, {1}), T({2.0}, {1}));
  CHECK(integrate([&](const Tensor& x) { return exp(t.log_prob(x)); }, -4000, 4000, 2000000) ==
        doctest::Approx(1.0).epsilon(1e-5));
  CHECK(S(t.entropy()) == doctest::Approx(entropy_by_quadrature(t, -4000, 4000)).epsilon(1e-4));
  const D::Chi2 chi(T({3.0}, {1}));
  CHECK(S(chi.mean()) == doctest::Approx(3.0));
  CHECK(S(chi.variance()) == doctest::Approx(6.0));
  // Geometric: probabilities sum to 1, mean and variance
  const D::Geometric geo = D::Geometric::from_probs(T({0.3}, {1}));
  CHECK(sum(exp(geo.log_prob(arange(0, 400, 1, f64)))).item() == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(S(geo.mean()) == doctest::Approx(0.7 / 0.3));
  CHECK(S(geo.variance()) == doctest::Approx(0.7 / 0.09));
  CHECK(S(D::Geometric::from_probs(T({1.0}, {1})).log_prob(T({0.0}, {1}))) == 0.0);  // not NaN
  // StudentT's moments by df
  const D::StudentT ts(T({0.5, 1.5, 5.0}, {3}), T({1.0, 1.0, 1.0}, {3}), T({2.0, 2.0, 2.0}, {3}));
  const std::vector<double> tm = V(ts.mean()), tv = V(ts.variance());
  CHECK(std::isnan(tm[0]));
  CHECK(tm[1] == 1.0);
  CHECK(std::isnan(tv[0]));
  CHECK(tv[1] == inf);
  CHECK(tv[2] == doctest::Approx(4.0 * 5.0 / 3.0));
  // cdf and icdf invert each other
  const Tensor p = T({0.1, 0.5, 0.93}, {3});
  for (const D::Distribution* d : std::vector<const D::Distribution*>{&c, &ln, &hn, &g})
    CHECK(max(abs(sub(d->cdf(d->icdf(p)), p))).item() < 1e-12);
  // sample moments (100,000 draws)
  CHECK(S(mean(ln.sample({100000}))) == doctest::Approx(S(ln.mean())).epsilon(0.01));
  CHECK(S(mean(hn.sample({100000}))) == doctest::Approx(S(hn.mean())).epsilon(0.01));
  CHECK(S(mean(g.sample({100000}))) == doctest::Approx(S(g.mean())).epsilon(0.01));
  CHECK(S(mean(geo.sample({100000}))) == doctest::Approx(S(geo.mean())).epsilon(0.02));
  CHECK(S(mean(chi.sample({100000}))) == doctest::Approx(3.0).epsilon(0.02));
  CHECK(S(var(D::StudentT(10.0).sample({200000}))) == doctest::Approx(10.0 / 8.0).epsilon(0.03));
  CHECK(S(median(c.sample({100001}))) == doctest::Approx(0.4).epsilon(0.02));
  // gradients of log_prob, entropy and rsample in the parameters
  CHECK(gradcheck([](std::vector<Tensor>& in) { return D::Cauchy(in[0], exp(in[1])).log_prob(in[2]); },
                  {randn({3}, f64), randn({3}, f64), randn({3}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return D::LogNormal(in[0], exp(in[1])).log_prob(exp(in[2])); },
                  {randn({3}, f64), randn({3}, f64), randn({3}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return D::Gumbel(in[0], exp(in[1])).log_prob(in[2]); },
                  {randn({3}, f64), randn({3}, f64), randn({3}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return D::StudentT(add(exp(in[0]), 0.5), in[1], exp(in[2])).entropy(); },
                  {randn({3}, f64), randn({3}, f64), randn({3}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return D::Geometric::from_logits(in[0]).entropy(); }, {randn({3}, f64)}));
  Tensor sc = T({0.8}, {1}).requires_grad_();
  sum(D::HalfNormal(sc).rsample({1000})).backward();
  CHECK(sc.grad().defined());
  // errors
  CHECK_THROWS_WITH_AS(D::Cauchy(0.0, -1.0), doctest::Contains("Cauchy: every entry of scale must be > 0"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::Geometric::from_probs(T({0.0}, {1})), doctest::Contains("in (0, 1]"), kiln::Error);
  CHECK_THROWS_WITH_AS(D::StudentT(-1.0), doctest::Contains("StudentT: every entry of df"), kiln::Error);
}
