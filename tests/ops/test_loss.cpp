// Tests of the loss family: cross_entropy (ignore_index, label smoothing, spatial targets,
// reductions), nll_loss and mse_loss: hand-computed values, a log_softmax + pick reference,
// gradient checks and error messages.
#include <doctest/doctest.h>
#include <cmath>
#include <limits>
#include <random>
#include "gradcheck.h"

using namespace kiln;
using namespace kiln::test;

namespace {

Tensor I64(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

void check_values(const Tensor& t, const std::vector<double>& want, double tol = 1e-6) {
  auto got = t.to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
    else CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
  }
}

// Logits of three samples over three classes and their targets; losses computed in Python:
//   loss_i = logsumexp(x_i) - (1 - eps) x_i[t_i] - eps mean(x_i)
Tensor X3() { return T({1, 2, 3, 3, 1, 0.5, -1, 0, 4}, {3, 3}); }
Tensor T3() { return I64({2, 0, 1}, {3}); }

/// Reference cross entropy over (N, C, S) logits in doubles from log_softmax values:
/// per-element losses ("gather" of -log p at the target, plus the smoothing term).
std::vector<double> reference_ce(const Tensor& logits, const Tensor& target, int64_t ignore, double eps) {
  Tensor lp = log_softmax(logits.detach().to(DType::float64), 1);
  const int64_t N = logits.size(0), C = logits.size(1), S = logits.numel() / (N * C);
  auto v = lp.contiguous().to_vector<double>();
  auto t = target.to_vector<int64_t>();
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      int64_t k = t[size_t(n * S + s)];
      if (k == ignore) { out.push_back(0); continue; }
      double mean_neg = 0;
      for (int64_t c = 0; c < C; ++c) mean_neg -= v[size_t((n * C + c) * S + s)] / double(C);
      out.push_back(-(1 - eps) * v[size_t((n * C + k) * S + s)] + eps * mean_neg);
    }
  return out;
}

}  // namespace

// ================================================================ cross_entropy values

TEST_CASE("cross_entropy: hand-computed values for every reduction") {
  Tensor x = X3(), t = T3();
  CHECK(cross_entropy(x, t).dim() == 0);
  CHECK(cross_entropy(x, t).item() == doctest::Approx(1.5430283171676067));
  CHECK(cross_entropy(x, t, {.reduction = Reduction::sum}).item() == doctest::Approx(4.62908495150282));
  Tensor none = cross_entropy(x, t, {.reduction = Reduction::none});
  CHECK(none.shape() == Shape{3});
  check_values(none, {0.4076059644443806, 0.19673409691961696, 4.024744890138822});
  // float32 logits give the same numbers to float precision
  CHECK(cross_entropy(x.to(DType::float32), t).dtype() == DType::float32);
  CHECK(cross_entropy(x.to(DType::float32), t).item() == doctest::Approx(1.5430283171676067).epsilon(1e-6));
  // int32 targets are accepted
  CHECK(cross_entropy(x, t.to(DType::int32)).item() == doctest::Approx(1.5430283171676067));
  // one unbatched sample: logits (C), 0-dim target
  CHECK(cross_entropy(T({1, 2, 3}, {3}), I64({2}, {}).reshape({})).item() == doctest::Approx(0.4076059644443806));
}

TEST_CASE("float32 log_softmax and cross_entropy next to a large max match a double reference") {
  // log_softmax = (x - max) - log(sum): rounding max + log(sum) to float first gave -4.5776e-5
  // for [100, 90] and exactly 0 for [1e4, 1e4 - 10] (and a target-class gradient of 0)
  auto rel = [](double v, double eps) { return doctest::Approx(v).epsilon(eps).scale(0); };  // relative only
  const double ls = std::log1p(std::exp(-10.0));  // log sum exp(x - max), in double
  const double p1 = std::exp(-10.0 - ls);          // softmax of the smaller logit
  for (float top : {100.0f, 1e4f}) {
    CAPTURE(top);
    Tensor x = from_vector<float>({top, top - 10}, {1, 2}).requires_grad_();
    Tensor y = log_softmax(x, 1);
    CHECK(y.at({0, 0}) == rel(-ls, 1e-5));  // -4.5399e-5
    CHECK(y.at({0, 1}) == rel(-10.0 - ls, 1e-6));
    sum(y.select(1, 0)).backward();  // d y0 / dx = [1 - p0, -p1] = [p1, -p1]
    CHECK(x.grad().at({0, 0}) == rel(p1, 1e-3));
    CHECK(x.grad().at({0, 1}) == rel(-p1, 1e-3));
    x.set_grad(Tensor());
    Tensor loss = cross_entropy(x, I64({0}, {1}));
    CHECK(loss.item() == rel(ls, 1e-5));
    loss.backward();  // softmax - one_hot
    CHECK(x.grad().at({0, 0}) == rel(-p1, 1e-3));
    CHECK(x.grad().at({0, 1}) == rel(p1, 1e-3));
  }
}

TEST_CASE("cross_entropy: ignore_index and label smoothing (PyTorch semantics)") {
  Tensor x = X3();
  Tensor ti = I64({2, 0, -100}, {3});
  // mean divides by the number of non-ignored targets
  CHECK(cross_entropy(x, ti).item() == doctest::Approx(0.30217003068199877));
  check_values(cross_entropy(x, ti, {.reduction = Reduction::none}), {0.4076059644443806, 0.19673409691961696, 0});
  CHECK(cross_entropy(x, ti, {.reduction = Reduction::sum}).item() ==
        doctest::Approx(0.4076059644443806 + 0.19673409691961696));
  // custom ignore_index
  CHECK(cross_entropy(x, I64({2, 0, 1}, {3}), {.ignore_index = 1}).item() == doctest::Approx(0.30217003068199877));
  // label smoothing: (1 - eps) nll + eps mean_c(-log p_c)
  CHECK(cross_entropy(x, T3(), {.label_smoothing = 0.1}).item() == doctest::Approx(1.5930283171676063));
  CHECK(cross_entropy(x, T3(), {.label_smoothing = 0.2, .reduction = Reduction::sum}).item() ==
        doctest::Approx(4.929084951502819));
  check_values(cross_entropy(x, T3(), {.label_smoothing = 0.1, .reduction = Reduction::none}),
               {0.5076059644443803, 0.34673409691961676, 3.924744890138822});
  // smoothing and ignore together: the ignored element adds nothing, the mean is over 2
  CHECK(cross_entropy(x, ti, {.label_smoothing = 0.1}).item() == doctest::Approx(0.42717003068199855));
  CHECK(cross_entropy(x, ti, {.label_smoothing = 0.2}).item() == doctest::Approx(0.5521700306819983));
  // every target ignored: the mean is NaN (like PyTorch), the sum 0, and the gradient 0
  Tensor all_ign = I64({-100, -100, -100}, {3});
  CHECK(std::isnan(cross_entropy(x, all_ign).item()));
  CHECK(cross_entropy(x, all_ign, {.reduction = Reduction::sum}).item() == 0.0);
  Tensor leaf = x.detach().requires_grad_();
  cross_entropy(leaf, all_ign).backward();
  check_values(leaf.grad(), std::vector<double>(9, 0.0));
}

TEST_CASE("cross_entropy: hand-computed gradient with smoothing") {
  Tensor x = X3().requires_grad_();
  cross_entropy(x, T3(), {.label_smoothing = 0.1}).backward();
  auto g = x.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(0.01889907994568237));
  CHECK(g[1] == doctest::Approx(0.07046504590715476));
  CHECK(g[2] == doctest::Approx(-0.08936412585283722));
}

TEST_CASE("cross_entropy: matches a log_softmax + pick reference (spatial, ignore, smoothing)") {
  manual_seed(41);
  std::mt19937 rng(43);
  for (Shape sh : {Shape{7, 5}, Shape{3, 4, 6}, Shape{2, 3, 4, 5}, Shape{64, 1000}, Shape{2, 10, 130}}) {
    Tensor x = mul(randn(sh, {.dtype = DType::float64}), 3.0);
    Shape ts{sh[0]};
    for (size_t d = 2; d < sh.size(); ++d) ts.push_back(sh[d]);
    std::vector<int64_t> tv(size_t(shape_numel(ts)));
    for (auto& v : tv) v = rng() % 5 == 0 ? -1 : int64_t(rng() % uint32_t(sh[1]));
    Tensor t = I64(tv, ts);
    for (double eps : {0.0, 0.15}) {
      INFO("shape " << shape_str(sh) << " eps " << eps);
      auto want = reference_ce(x, t, -1, eps);
      CrossEntropyArgs args{.ignore_index = -1, .label_smoothing = eps, .reduction = Reduction::none};
      Tensor none = cross_entropy(x, t, args);
      CHECK(none.shape() == ts);
      CHECK(max_abs_diff(none, from_vector(want, ts)) < 1e-10);
      double total = 0;
      int64_t count = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        total += want[i];
        count += tv[i] != -1;
      }
      args.reduction = Reduction::mean;
      CHECK(cross_entropy(x, t, args).item() == doctest::Approx(total / double(count)));
      args.reduction = Reduction::sum;
      CHECK(cross_entropy(x, t, args).item() == doctest::Approx(total));
      // float32 agrees
      CHECK(max_abs_diff(cross_entropy(x.to(DType::float32), t, {.ignore_index = -1, .label_smoothing = eps,
                                                                   .reduction = Reduction::none}),
                         none) < 1e-4);
      // without smoothing: the same as nll_loss(log_softmax(x))
      if (eps == 0.0) {
        Tensor via_nll = nll_loss(log_softmax(x, 1), t, {.ignore_index = -1, .reduction = Reduction::none});
        CHECK(max_abs_diff(via_nll, none) < 1e-10);
      }
    }
  }
}

// ================================================================ gradients

TEST_CASE("gradcheck: cross_entropy over shapes, reductions, ignore_index, smoothing, layouts") {
  manual_seed(47);
  std::mt19937 rng(53);
  for (Shape sh : {Shape{4, 3}, Shape{2, 3, 2}, Shape{2, 4, 2, 2}, Shape{3}}) {
    Shape ts;
    if (sh.size() > 1) {
      ts.push_back(sh[0]);
      for (size_t d = 2; d < sh.size(); ++d) ts.push_back(sh[d]);
    }
    const int64_t C = sh.size() > 1 ? sh[1] : sh[0];
    std::vector<int64_t> tv(size_t(shape_numel(ts)));
    for (size_t i = 0; i < tv.size(); ++i) tv[i] = i % 3 == 1 && tv.size() > 1 ? -100 : int64_t(rng() % uint32_t(C));
    Tensor t = I64(tv, ts);
    Tensor x = randn(sh, f64);
    for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none})
      for (double eps : {0.0, 0.2}) {
        INFO("shape " << shape_str(sh) << " eps " << eps << " reduction " << int(r));
        CrossEntropyArgs args{.label_smoothing = eps, .reduction = r};
        CHECK(gradcheck([&](auto& in) { return cross_entropy(in[0], t, args); }, {x}));
        CHECK(gradcheck([&](auto& in) { return nll_loss(in[0], t, {.reduction = r}); }, {x}));
      }
  }
  // non-contiguous logits: (C, N) transposed
  Tensor xt = randn({5, 4}, f64);
  Tensor t = I64({0, 4, 2, 1}, {4});
  CHECK(gradcheck([&](auto& in) { return cross_entropy(in[0].t(), t, {.label_smoothing = 0.1}); }, {xt}));
  CHECK(gradcheck([&](auto& in) { return nll_loss(in[0].t(), t); }, {xt}));
  // through a composite: the fused backward composes with other ops
  Tensor w = randn({4, 5}, f64);
  CHECK(gradcheck([&](auto& in) { return cross_entropy(mul(in[0], in[1]), t); }, {w, randn({4, 5}, f64)}));
}

// ================================================================ nll_loss

TEST_CASE("nll_loss: hand-computed values") {
  Tensor lp = T({-0.5, -1.0, -2.0, -0.1, -3.0, -4.0}, {2, 3});
  Tensor t = I64({1, 0}, {2});
  CHECK(nll_loss(lp, t).item() == doctest::Approx(0.55));
  CHECK(nll_loss(lp, t, {.reduction = Reduction::sum}).item() == doctest::Approx(1.1));
  check_values(nll_loss(lp, t, {.reduction = Reduction::none}), {1.0, 0.1});
  CHECK(nll_loss(lp, I64({-100, 2}, {2})).item() == doctest::Approx(4.0));
  Tensor leaf = lp.detach().requires_grad_();
  nll_loss(leaf, t).backward();
  check_values(leaf.grad(), {0, -0.5, 0, -0.5, 0, 0});
  // spatial (N, C, d)
  Tensor lps = T({-1, -2, -3, -4}, {1, 2, 2});  // n=1, c=2, d=2: class0 [-1,-2], class1 [-3,-4]
  check_values(nll_loss(lps, I64({1, 0}, {1, 2}), {.reduction = Reduction::none}), {3, 2});
}

// ================================================================ mse_loss

TEST_CASE("mse_loss: values, reductions, gradients") {
  Tensor x = T({1, 2, 3}, {3}), y = T({1, 0, 5}, {3});
  CHECK(mse_loss(x, y).item() == doctest::Approx(8.0 / 3.0));
  CHECK(mse_loss(x, y, Reduction::sum).item() == doctest::Approx(8.0));
  check_values(mse_loss(x, y, Reduction::none), {0, 4, 4});
  CHECK(mse_loss(x, y, Reduction::none).shape() == Shape{3});
  Tensor xl = x.detach().requires_grad_(), yl = y.detach().requires_grad_();
  mse_loss(xl, yl).backward();
  check_values(xl.grad(), {0, 4.0 / 3.0, -4.0 / 3.0});
  check_values(yl.grad(), {0, -4.0 / 3.0, 4.0 / 3.0});
  // mixed dtypes promote; empty input gives NaN for the mean
  CHECK(mse_loss(x.to(DType::float32), y).dtype() == DType::float64);
  CHECK(std::isnan(mse_loss(zeros({0}, f64), zeros({0}, f64)).item()));
  // a large input (chunked sum)
  manual_seed(59);
  Tensor a = randn({300001}, f64), b = randn({300001}, f64);
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double ss = 0;
  for (size_t i = 0; i < va.size(); ++i) ss += (va[i] - vb[i]) * (va[i] - vb[i]);
  CHECK(mse_loss(a, b).item() == doctest::Approx(ss / 300001));
  manual_seed(61);
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    CHECK(gradcheck([&](auto& in) { return mse_loss(in[0], in[1], r); }, {randn({3, 4}, f64), randn({3, 4}, f64)}));
    CHECK(gradcheck([&](auto& in) { return mse_loss(in[0].t(), in[1], r); }, {randn({4, 3}, f64), randn({3, 4}, f64)}));
  }
}

// ================================================================ 16-bit

TEST_CASE("16-bit logits: losses are computed and returned in float32") {
  Tensor x = X3().to(DType::bfloat16);
  Tensor l = cross_entropy(x, T3());
  CHECK(l.dtype() == DType::float32);
  CHECK(l.item() == doctest::Approx(1.5430283171676067).epsilon(1e-2));
  Tensor leaf = X3().to(DType::float16).requires_grad_();
  cross_entropy(leaf, T3()).backward();
  CHECK(leaf.grad().dtype() == DType::float16);
  CHECK(nll_loss(x, T3()).dtype() == DType::float32);
  CHECK(mse_loss(x, x).dtype() == DType::float32);
  CHECK(mse_loss(x, x).item() == 0.0);
}

TEST_CASE("cross_entropy on 16-bit logits: the bits of the float32 path on the widened logits") {
  // The kernels read 16-bit logits widened and write dlogits rounded once: the loss and the
  // gradient must be those of cross_entropy on logits.to(float32) (what autocast's cast
  // computed), with no float32 copy saved (the node keeps the 16-bit logits).
  manual_seed(62);
  const DType f32 = DType::float32;
  struct Case {
    Shape x, t;
  };
  const Case cases[] = {{{37, 300}, {37}}, {{3, 11, 5, 4}, {3, 5, 4}}, {{2, 7, 70}, {2, 70}}};  // rows, spatial
  for (DType dt : {DType::bfloat16, DType::float16})
    for (const Case& c : cases)
      for (double eps : {0.0, 0.1})
        for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none})
          for (bool amp : {false, true}) {
            CAPTURE(std::string(dtype_name(dt)));
            CAPTURE(shape_str(c.x));
            CAPTURE(eps);
            CAPTURE(int(r));
            CAPTURE(amp);
            const Tensor x16 = (randn(c.x) * 3.0).to(dt);
            Tensor tg = randint(0, c.x[1], c.t);
            tg.reshape({-1}).narrow(0, 0, 1).fill_(-100.0);  // one ignored target
            Tensor x = x16.clone().requires_grad_(), xw = x16.to(f32).requires_grad_();
            const CrossEntropyArgs args{.label_smoothing = eps, .reduction = r};
            Tensor l;
            {
              autocast guard(dt, amp);
              l = cross_entropy(x, tg, args);
            }
            Tensor lw = cross_entropy(xw, tg, args);
            REQUIRE(l.dtype() == f32);
            CHECK(max_abs_diff(l, lw) == 0.0);
            REQUIRE(l.grad_fn() != nullptr);
            CHECK(l.grad_fn()->saved[0].tensor.dtype() == dt);
            const Tensor g = randn(l.shape());
            l.backward(g);
            lw.backward(g);
            REQUIRE(x.grad().dtype() == dt);
            CHECK(max_abs_diff(x.grad().to(f32), xw.grad().to(dt).to(f32)) == 0.0);
          }
  // A backward that records (create_graph) on 16-bit logits: the float32 formula, rounded
  Tensor x = (randn({6, 9}) * 2.0).to(DType::bfloat16).requires_grad_();
  Tensor tg = randint(0, 9, {6});
  Tensor gx = grad({cross_entropy(x, tg)}, {x}, {}, {.create_graph = true})[0];
  REQUIRE(gx.grad_fn() != nullptr);
  Tensor xw = x.detach().to(f32).requires_grad_();
  Tensor gw = grad({cross_entropy(xw, tg)}, {xw})[0];
  CHECK(gx.dtype() == DType::bfloat16);
  CHECK(max_abs_diff(gx.to(f32), gw) <= 1e-2 * max(abs(gw)).item());
}

// ================================================================ errors

TEST_CASE("cross_entropy and nll_loss with class weights: PyTorch 2.15's values, gradcheck, errors") {
  const Tensor x = X3(), t = T3(), w = T({1, 2, 0.5}, {3});
  check_values(cross_entropy(x, t, {.reduction = Reduction::none, .weight = w}),
               {0.2038029822221902, 0.19673409691961713, 8.049489780277645}, 1e-14);
  check_values(cross_entropy(x, t, {.weight = w}), {2.4142933884055573}, 1e-14);  // sum / (0.5 + 1 + 2)
  check_values(cross_entropy(x, t, {.label_smoothing = 0.2, .weight = w}), {2.3971832313008243}, 1e-14);
  check_values(cross_entropy(x, I64({2, -100, 1}, {3}), {.weight = w}), {3.3013171049999337}, 1e-14);
  check_values(nll_loss(log_softmax(x, 1), t, {.reduction = Reduction::sum, .weight = w}), {8.45002685941945}, 1e-14);
  // all ignored: the mean is NaN, as without weights
  CHECK(std::isnan(cross_entropy(x, I64({-100, -100, -100}, {3}), {.weight = w}).item()));
  // 16-bit logits: computed in float32
  CHECK(cross_entropy(x.to(DType::bfloat16), t, {.weight = w.to(DType::float32)}).dtype() == DType::float32);
  manual_seed(41);
  const Tensor tgt = I64({0, 2, -100, 1, 3, 2}, {2, 3}), cw = rand({4}, f64) + 0.5;
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
    for (double eps : {0.0, 0.3}) {
      CAPTURE(int(r));
      CAPTURE(eps);
      CHECK(gradcheck([&](auto& in) { return cross_entropy(in[0], tgt, {.label_smoothing = eps, .reduction = r,
                                                                         .weight = cw}); },
                      {randn({2, 4, 3}, f64)}));
    }
  CHECK(gradgradcheck([&](auto& in) { return cross_entropy(in[0], tgt, {.weight = cw}); }, {randn({2, 4, 3}, f64)}));
  CHECK(error_of([&] { cross_entropy(x, t, {.weight = ones({4}, f64)}); }).find("3 class weights") !=
        std::string::npos);
  CHECK(error_of([&] { nll_loss(x, t, {.weight = ones({3, 1}, f64)}); }).find("weight") != std::string::npos);
  CHECK(error_of([&] { cross_entropy(x, I64({0, 5, 1}, {3}), {.weight = w}); }).find("5") != std::string::npos);
}

TEST_CASE("pointwise losses: values by hand (PyTorch 2.15's), every reduction") {
  const Tensor x = T({0.2, -1.5, 3.0, 0.7}, {4}), t = T({0.5, -1.0, 1.0, 2.5}, {4});
  check_values(l1_loss(x, t, Reduction::none), {0.3, 0.5, 2.0, 1.8}, 1e-15);
  check_values(l1_loss(x, t), {1.15}, 1e-15);
  check_values(l1_loss(x, t, Reduction::sum), {4.6}, 1e-15);
  check_values(smooth_l1_loss(x, t, Reduction::none), {0.045, 0.125, 1.5, 1.3}, 1e-15);
  check_values(smooth_l1_loss(x, t, Reduction::mean, 0.5), {0.91}, 1e-15);
  check_values(smooth_l1_loss(x, t, Reduction::none, 0.0), {0.3, 0.5, 2.0, 1.8}, 1e-15);  // beta 0: l1
  check_values(huber_loss(x, t, Reduction::none), {0.045, 0.125, 1.5, 1.3}, 1e-15);
  check_values(huber_loss(x, t, Reduction::sum, 0.5), {1.82}, 1e-15);
  // binary cross entropy: logs clamped at -100, so p = 0 against t = 1 costs 100
  check_values(binary_cross_entropy(T({0.1, 0.9, 0.5, 1.0}, {4}), T({0, 1, 0.25, 1}, {4}), {.reduction = Reduction::none}),
               {0.10536051565782631, 0.10536051565782628, 0.6931471805599453, 0}, 1e-15);
  check_values(binary_cross_entropy(T({0, 1}, {2}), T({1, 0}, {2})), {100}, 1e-15);
  check_values(binary_cross_entropy(T({0.1, 0.9}, {2}), T({0, 1}, {2}), {.weight = T({2, 0.5}, {2}),
                                                                         .reduction = Reduction::sum}),
               {2.5 * 0.10536051565782631}, 1e-14);
  const Tensor z = T({-2, 0.5, 3, -40}, {4}), tz = T({0, 1, 0.3, 1}, {4});
  check_values(binary_cross_entropy_with_logits(z, tz, {.reduction = Reduction::none}),
               {0.1269280110429727, 0.4740769841801067, 2.1485873515737417, 40.0}, 1e-15);
  check_values(binary_cross_entropy_with_logits(z, tz, {.pos_weight = T({2}, {1}), .reduction = Reduction::none}),
               {0.1269280110429727, 0.9481539683602134, 2.1631635570458645, 80.0}, 1e-15);
  // KL divergence: t log(t / p), 0 where t = 0; batchmean divides by the batch (2 rows)
  const Tensor lp = log(T({0.2, 0.3, 0.5, 0.6, 0.3, 0.1}, {2, 3})), tk = T({0, 0.5, 0.5, 0.1, 0.1, 0.8}, {2, 3});
  check_values(kl_div(lp, tk, {.reduction = Reduction::none}),
               {0, 0.2554128118829954, 0, -0.17917594692280547, -0.10986122886681093, 1.6635532333438687}, 1e-14);
  check_values(kl_div(lp, tk, {.reduction = Reduction::batchmean}), {0.8149644347186238}, 1e-14);
  check_values(kl_div(lp, log(tk + 0.1), {.reduction = Reduction::sum, .log_target = true}), {2.132653164603688}, 1e-14);
  // 16-bit inputs give a float32 loss; an empty mean is NaN
  CHECK(l1_loss(x.to(DType::bfloat16), t.to(DType::bfloat16)).dtype() == DType::float32);
  CHECK(std::isnan(huber_loss(zeros({0}), zeros({0})).item()));
}

TEST_CASE("pointwise losses: gradcheck in float64 for input and target, weights, saturated BCE gradients") {
  manual_seed(31);
  const Shape s{3, 4};
  auto rnd = [&] { return randn(s, f64); };
  auto prob = [&] { return rand(s, f64) * 0.8 + 0.1; };
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    CAPTURE(int(r));
    CHECK(gradcheck([r](auto& in) { return l1_loss(in[0], in[1], r); }, {rnd(), rnd()}));
    CHECK(gradcheck([r](auto& in) { return smooth_l1_loss(in[0], in[1], r, 0.7); }, {rnd(), rnd()}));
    CHECK(gradcheck([r](auto& in) { return huber_loss(in[0], in[1], r, 0.6); }, {rnd(), rnd()}));
    CHECK(gradcheck([r](auto& in) { return binary_cross_entropy(in[0], in[1], {.weight = in[2], .reduction = r}); },
                    {prob(), prob(), rand({4}, f64) + 0.5}));
    CHECK(gradcheck(
        [r](auto& in) {
          return binary_cross_entropy_with_logits(in[0], in[1], {.weight = in[2], .pos_weight = in[3], .reduction = r});
        },
        {rnd() * 3.0, prob(), rand({3, 1}, f64) + 0.5, rand({4}, f64) + 0.5}));
    CHECK(gradcheck([r](auto& in) { return kl_div(log_softmax(in[0], 1), softmax(in[1], 1), {.reduction = r}); },
                    {rnd(), rnd()}));
    CHECK(gradcheck([r](auto& in) { return kl_div(in[0], in[1], {.reduction = r, .log_target = true}); },
                    {rnd(), rnd()}));
  }
  CHECK(gradcheck([](auto& in) { return kl_div(in[0], in[1], {.reduction = Reduction::batchmean}); }, {rnd(), prob()}));
  // binary_cross_entropy's gradient at a saturated probability is PyTorch's finite
  // (p - t) / max(p (1 - p), 1e-12f), not 0 (the clamped logs have no slope there), and the
  // target's is -logit(p), infinite there as in PyTorch
  Tensor p = T({0.0, 1.0, 0.5}, {3}).requires_grad_(), tt = T({0.25, 0.75, 0.5}, {3}).requires_grad_();
  sum(binary_cross_entropy(p, tt, {.reduction = Reduction::none})).backward();
  const auto gp = p.grad().to_vector<double>(), gt = tt.grad().to_vector<double>();
  CHECK(gp[0] == doctest::Approx(-0.25 / double(1e-12f)));
  CHECK(gp[1] == doctest::Approx(0.25 / double(1e-12f)));
  CHECK(gp[2] == 0.0);
  CHECK((std::isinf(gt[0]) && gt[0] > 0));
  CHECK((std::isinf(gt[1]) && gt[1] < 0));
  // twice differentiable (a gradient penalty through a loss)
  CHECK(gradgradcheck([](auto& in) { return binary_cross_entropy(in[0], in[1]); }, {prob(), prob()}));
  CHECK(gradgradcheck([](auto& in) { return binary_cross_entropy_with_logits(in[0], in[1]); }, {rnd(), prob()}));
  CHECK(gradgradcheck([](auto& in) { return smooth_l1_loss(in[0], in[1]); }, {rnd(), rnd()}));
}

TEST_CASE("pointwise losses: errors name the op, shapes and values") {
  const Tensor a = ones({2, 3}), b = ones({2, 4});
  CHECK(error_of([&] { l1_loss(a, b); }).find("[2, 4]") != std::string::npos);
  CHECK(error_of([&] { huber_loss(a, a, Reduction::mean, 0.0); }).find("delta") != std::string::npos);
  CHECK(error_of([&] { smooth_l1_loss(a, a, Reduction::mean, -1.0); }).find("beta") != std::string::npos);
  CHECK(error_of([&] { l1_loss(a, a, Reduction::batchmean); }).find("kl_div's only") != std::string::npos);
  CHECK(error_of([&] { mse_loss(a, a, Reduction::batchmean); }).find("kl_div's only") != std::string::npos);
  CHECK(error_of([&] { cross_entropy(a, I64({0, 1}, {2}), {.reduction = Reduction::batchmean}); })
            .find("kl_div's only") != std::string::npos);
  const std::string range = error_of([&] { binary_cross_entropy(full({2, 3}, 1.5), a); });
  CHECK(range.find("[0, 1]") != std::string::npos);
  CHECK(range.find("1.5") != std::string::npos);
  CHECK(error_of([&] { binary_cross_entropy(a, full({2, 3}, -0.5)); }).find("target") != std::string::npos);
  CHECK(error_of([&] { binary_cross_entropy_with_logits(a, a, {.pos_weight = ones({2})}); }).find("pos_weight") !=
        std::string::npos);
  CHECK(error_of([&] { binary_cross_entropy(a, a, {.weight = ones({2, 3, 2})}); }).find("weight") !=
        std::string::npos);
  CHECK(error_of([&] { l1_loss(I64({1, 2}, {2}), I64({1, 2}, {2})); }).find("int64") != std::string::npos);
}

TEST_CASE("errors: targets out of range, shape mismatches, dtypes") {
  Tensor x = X3();
  CHECK_THROWS_WITH_AS(cross_entropy(x, I64({2, 3, 0}, {3})), doctest::Contains("target value 3"), kiln::Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, I64({2, -1, 0}, {3})), doctest::Contains("target value -1"), kiln::Error);
  CHECK_THROWS_WITH_AS(nll_loss(x, I64({7, 0, 0}, {3})), doctest::Contains("target value 7"), kiln::Error);
  CHECK_THROWS_AS(cross_entropy(x, I64({2, -100, 5}, {3})), kiln::Error);
  // shapes
  CHECK_THROWS_WITH_AS(cross_entropy(x, I64({1, 2}, {2})), doctest::Contains("[3, 3]"), kiln::Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, I64({1, 2, 0}, {3, 1})), doctest::Contains("[3, 1]"), kiln::Error);
  CHECK_THROWS_AS(cross_entropy(randn({2, 3, 4}, f64), I64({0, 1}, {2})), kiln::Error);
  CHECK_THROWS_AS(cross_entropy(scalar_tensor(1.0), I64({0}, {1})), kiln::Error);
  CHECK_THROWS_AS(cross_entropy(T({1, 2}, {2}), I64({0}, {1})), kiln::Error);
  CHECK_THROWS_AS(nll_loss(x, I64({1}, {1})), kiln::Error);
  // dtypes and arguments
  CHECK_THROWS_WITH_AS(cross_entropy(x, T({2, 0, 1}, {3})), doctest::Contains("float64[3]"), kiln::Error);
  CHECK_THROWS_WITH_AS(cross_entropy(I64({1, 2, 3}, {1, 3}), I64({0}, {1})), doctest::Contains("int64[1, 3]"),
                       kiln::Error);
  CHECK_THROWS_AS(cross_entropy(x, T3(), {.label_smoothing = 1.5}), kiln::Error);
  CHECK_THROWS_AS(cross_entropy(x, Tensor()), kiln::Error);
  CHECK_THROWS_AS(cross_entropy(Tensor(), T3()), kiln::Error);
  // mse
  CHECK_THROWS_WITH_AS(mse_loss(randn({2, 3}, f64), randn({3, 2}, f64)), doctest::Contains("[3, 2]"), kiln::Error);
  CHECK_THROWS_AS(mse_loss(randn({3}, f64), randn({1}, f64)), kiln::Error);
  CHECK_THROWS_AS(mse_loss(I64({1}, {1}), I64({1}, {1})), kiln::Error);
  CHECK_THROWS_AS(mse_loss(randn({3}, f64), Tensor()), kiln::Error);
}

namespace {
// Small inputs shared by the margin and likelihood loss tests (float64).
struct MarginInputs {
  Tensor x = from_vector<double>({0.5, -1.2, 2.0, 0.3, 0.9, -0.4}, {2, 3});
  Tensor y = from_vector<double>({1, -1, 1, -1, -1, 1}, {2, 3});
  Tensor t01 = from_vector<double>({1, 0, 1, 0, 0, 1}, {2, 3});
  Tensor w = from_vector<double>({0.5, 1.0, 2.0}, {3});
  Tensor a = from_vector<double>({0.5, -1.2, 2.0}, {3}), b = from_vector<double>({0.4, 0.1, -0.7}, {3});
  Tensor r = from_vector<double>({1, -1, -1}, {3});
  Tensor e1 = from_vector<double>({1, 2, 0.5, 0.3, -0.2, 0.9}, {2, 3});
  Tensor e2 = from_vector<double>({0.8, 2.1, 0.2, 0.5, 0.4, -0.3}, {2, 3});
  Tensor ey = from_vector<double>({1, -1}, {2});
  Tensor n = from_vector<double>({0.1, 0.1, 0.3, 1.0, -1.0, 0.2}, {2, 3});
  Tensor cls = from_vector<int64_t>({2, 0}, {2});
  Tensor cnt = from_vector<double>({0, 1, 3, 2, 5, 1}, {2, 3});
  Tensor rate = from_vector<double>({0.5, 1.5, 2.0, 2.5, 4.0, 0.7}, {2, 3});
  Tensor var = from_vector<double>({0.5, 1.0, 2.0, 0.1, 1e-9, 0.3}, {2, 3});
  Tensor vs = from_vector<double>({0.5, 2.0}, {2});
};
}  // namespace

// The expected values are PyTorch 2.15's (torch.nn.functional on the same inputs, float64).
TEST_CASE("margin and likelihood losses: PyTorch's values") {
  MarginInputs m;
  auto same = [](const Tensor& got, double want) { CHECK(got.item() == doctest::Approx(want).epsilon(1e-14)); };
  same(margin_ranking_loss(m.a, m.b, m.r, 0.3), 1.0666666666666667);
  same(hinge_embedding_loss(m.x, m.y, 1.5), 1.1);
  same(soft_margin_loss(m.x, m.y), 0.6454686390269463);
  same(multilabel_soft_margin_loss(m.x, m.t01, {.weight = m.w}), 0.7080898305467144);
  same(cosine_embedding_loss(m.e1, m.e2, m.ey, 0.2), 0.0067107654991346855);
  same(triplet_margin_loss(m.e1, m.e2, m.n, {.margin = 1.0}), 0.5418367284169348);
  same(triplet_margin_loss(m.e1, m.e2, m.n, {.margin = 0.5, .p = 1, .swap = true}), 0.149999);
  same(multi_margin_loss(m.x, m.cls), 0.31666666666666665);
  same(multi_margin_loss(m.x, m.cls, {.p = 2, .margin = 0.7, .weight = m.w}), 0.14083333333333334);
  same(poisson_nll_loss(m.x, m.cnt), 0.7197922577185955);
  same(poisson_nll_loss(m.rate, m.cnt, {.log_input = false, .full = true}), 1.2490750080150674);
  same(gaussian_nll_loss(m.x, m.rate, m.var), 800836.8667720733);  // var 1e-9 clamped to 1e-6
  same(gaussian_nll_loss(m.x, m.rate, m.vs, {.full = true, .reduction = Reduction::sum}), 16.71863119922804);
  // reductions and shapes: per element, per sample, and a single sample
  CHECK(hinge_embedding_loss(m.x, m.y, 1.5, Reduction::none).shape() == Shape{2, 3});
  CHECK(multi_margin_loss(m.x, m.cls, {.reduction = Reduction::none}).shape() == Shape{2});
  CHECK(cosine_embedding_loss(m.e1, m.e2, m.ey, 0.0, Reduction::none).shape() == Shape{2});
  CHECK(multi_margin_loss(m.x.select(0, 0), m.cls.select(0, 0)).item() ==
        doctest::Approx(multi_margin_loss(m.x.narrow(0, 0, 1), m.cls.narrow(0, 0, 1)).item()));
  CHECK(sum(multilabel_soft_margin_loss(m.x, m.t01, {.reduction = Reduction::none})).item() ==
        doctest::Approx(multilabel_soft_margin_loss(m.x, m.t01, {.reduction = Reduction::sum}).item()));
  CHECK(gaussian_nll_loss(m.x, m.rate, 2.0).item() ==
        doctest::Approx(gaussian_nll_loss(m.x, m.rate, full({2, 3}, 2.0, {.dtype = DType::float64})).item()));
  // 16-bit inputs compute in float32
  CHECK(soft_margin_loss(m.x.to(DType::bfloat16), m.y.to(DType::bfloat16)).dtype() == DType::float32);
  // modules
  CHECK(nn::MarginRankingLoss({.margin = 0.3})(m.a, m.b, m.r).item() == doctest::Approx(1.0666666666666667));
  CHECK(nn::TripletMarginLoss({.margin = 1.0})(m.e1, m.e2, m.n).item() == doctest::Approx(0.5418367284169348));
  CHECK(nn::GaussianNLLLoss()(m.x, m.rate, m.var).item() == doctest::Approx(800836.8667720733));
  CHECK(nn::MultiMarginLoss()(m.x, m.cls).item() == doctest::Approx(0.31666666666666665));
  CHECK(nn::PoissonNLLLoss({.log_input = false, .full = true})(m.rate, m.cnt).item() ==
        doctest::Approx(1.2490750080150674));
  CHECK(nn::HingeEmbeddingLoss({.margin = 1.5}).extra_repr() == "margin=1.5, reduction=mean");
}

TEST_CASE("margin and likelihood losses: float64 gradchecks of every differentiable input") {
  MarginInputs m;
  CHECK(gradcheck([&](auto& in) { return margin_ranking_loss(in[0], in[1], in[2], 0.3); }, {m.a, m.b, m.r}));
  CHECK(gradcheck([&](auto& in) { return hinge_embedding_loss(in[0], m.y, 1.5); }, {m.x}));
  CHECK(gradcheck([&](auto& in) { return soft_margin_loss(in[0], m.y); }, {m.x}));
  CHECK(gradcheck([&](auto& in) { return multilabel_soft_margin_loss(in[0], in[1], {.weight = in[2]}); },
                  {m.x, m.t01 * 0.8 + 0.1, m.w}));
  CHECK(gradcheck([&](auto& in) { return cosine_embedding_loss(in[0], in[1], m.ey, 0.0, Reduction::sum); },
                  {m.e1, m.e2}));
  CHECK(gradcheck([&](auto& in) { return triplet_margin_loss(in[0], in[1], in[2], {.margin = 2.0}); },
                  {m.e1, m.e2, m.n}));
  CHECK(gradcheck([&](auto& in) { return triplet_margin_loss(in[0], in[1], in[2], {.margin = 2.0, .p = 3, .swap = true}); },
                  {m.e1, m.e2, m.n}));
  CHECK(gradcheck([&](auto& in) { return multi_margin_loss(in[0], m.cls); }, {m.x}));
  CHECK(gradcheck([&](auto& in) { return multi_margin_loss(in[0], m.cls, {.p = 2, .margin = 0.7, .weight = m.w}); },
                  {m.x}));
  CHECK(gradcheck([&](auto& in) { return poisson_nll_loss(in[0], in[1]); }, {m.x, m.cnt + 0.5}));
  CHECK(gradcheck([&](auto& in) { return poisson_nll_loss(in[0], in[1], {.log_input = false, .full = true}); },
                  {m.rate, m.cnt + 0.5}));
  CHECK(gradcheck([&](auto& in) { return gaussian_nll_loss(in[0], in[1], in[2]); }, {m.x, m.rate, m.var + 0.2}));
  CHECK(gradcheck([&](auto& in) { return gaussian_nll_loss(in[0], in[1], in[2], {.full = true}); },
                  {m.x, m.rate, m.vs + 0.1}));
  {  // a var below eps: the value uses eps, the gradient is the unclamped formula's (PyTorch's)
    Tensor v = from_vector<double>({1e-9}, {1}).requires_grad_(true);
    Tensor x = from_vector<double>({0.5}, {1}), t = from_vector<double>({0.0}, {1});
    gaussian_nll_loss(x, t, v).backward();
    CHECK(v.grad().item() == doctest::Approx(0.5 * (1 / 1e-6 - 0.25 / (1e-6 * 1e-6))));
  }
}

TEST_CASE("margin and likelihood losses: errors name the op and what was expected") {
  MarginInputs m;
  auto err = [](auto f) { return kiln::testing::error_of(f); };
  CHECK(err([&] { multi_margin_loss(m.x, from_vector<int64_t>({3, 0}, {2})); }).find("target value 3") != std::string::npos);
  CHECK(err([&] { multi_margin_loss(m.x, m.cls, {.p = 3}); }).find("p == 1 and p == 2") != std::string::npos);
  CHECK(err([&] { multi_margin_loss(m.x, m.cls.to(DType::float64)); }).find("integer class indices") != std::string::npos);
  CHECK(err([&] { multi_margin_loss(m.x, m.cls, {.weight = m.a.narrow(0, 0, 2)}); }).find("class weights") != std::string::npos);
  CHECK(err([&] { triplet_margin_loss(m.e1, m.e2, m.n, {.margin = 0.0}); }).find("margin must be > 0") != std::string::npos);
  CHECK(err([&] { gaussian_nll_loss(m.x, m.rate, neg(m.var)); }).find("negative") != std::string::npos);
  CHECK(err([&] { gaussian_nll_loss(m.x, m.rate, m.a); }).find("does not fit") != std::string::npos);
  CHECK(err([&] { gaussian_nll_loss(m.x, m.rate, -1.0); }).find("var must be >= 0") != std::string::npos);
  CHECK(err([&] { soft_margin_loss(m.x, m.a); }).find("must match") != std::string::npos);
  CHECK(err([&] { cosine_embedding_loss(m.e1, m.e2, m.a); }).find("(N, D)") != std::string::npos);
  CHECK(err([&] { margin_ranking_loss(m.a, m.b, m.x); }).find("same number of dims") != std::string::npos);
  CHECK(err([&] { hinge_embedding_loss(m.cls, m.y); }).find("hinge_embedding_loss") != std::string::npos);
  CHECK(err([&] { soft_margin_loss(m.x, m.y, Reduction::batchmean); }).find("batchmean") != std::string::npos);
}

TEST_CASE("multilabel_margin_loss: by hand, -1 ends the list, reductions, gradient, errors") {
  // classes {0, 3} of 4: pairs (j, i) with j in {0, 3}, i in {1, 2}
  const Tensor x = from_vector(std::vector<double>{0.1, 0.2, 0.4, 0.8}, {1, 4});
  const Tensor t = from_vector(std::vector<int64_t>{3, 0, -1, 1}, {1, 4}, {.dtype = DType::int64});
  const double want = (std::max(0.0, 1 - (0.8 - 0.2)) + std::max(0.0, 1 - (0.8 - 0.4)) + std::max(0.0, 1 - (0.1 - 0.2)) +
                       std::max(0.0, 1 - (0.1 - 0.4))) / 4;
  CHECK(multilabel_margin_loss(x, t).item() == doctest::Approx(want));
  CHECK(multilabel_margin_loss(x.select(0, 0), t.select(0, 0)).item() == doctest::Approx(want));
  const Tensor t2 = from_vector(std::vector<int64_t>{3, 0, -1, 1, -1, 0, 0, 0}, {2, 4}, {.dtype = DType::int64});
  const Tensor x2 = cat({x, x}, 0);
  CHECK(multilabel_margin_loss(x2, t2, Reduction::none).to_vector<double>()[1] == 0.0);  // an empty list: 0
  CHECK(multilabel_margin_loss(x2, t2, Reduction::sum).item() == doctest::Approx(want));
  manual_seed(91);
  CHECK(kiln::test::gradcheck([&](auto& a) { return multilabel_margin_loss(a[0], t2); },
                              {randn({2, 4}, {.dtype = DType::float64})}));
  CHECK_THROWS_AS(multilabel_margin_loss(x, from_vector(std::vector<int64_t>{4, -1, 0, 0}, {1, 4},
                                                         {.dtype = DType::int64})), kiln::Error);
  CHECK_THROWS_AS(multilabel_margin_loss(x, t.to(DType::float64)), kiln::Error);
  nn::MultiLabelMarginLoss mod({.reduction = Reduction::sum});
  CHECK(mod(x2, t2).item() == doctest::Approx(want));
}

TEST_CASE("ctc_loss: paths by hand, impossible alignments, reductions, gradient, errors") {
  const auto I = [](std::vector<int64_t> v, Shape s) { return from_vector(v, s, {.dtype = DType::int64}); };
  // T = 2, classes {blank, a}, target "a": the paths aa, -a, a- (each frame's probabilities p)
  const Tensor p = from_vector(std::vector<double>{0.4, 0.6, 0.7, 0.3}, {2, 1, 2});
  const double want = -std::log(0.6 * 0.3 + 0.4 * 0.3 + 0.6 * 0.7);
  const Tensor l = ctc_loss(log(p), I({1}, {1, 1}), I({2}, {1}), I({1}, {1}), {.reduction = Reduction::sum});
  CHECK(l.item() == doctest::Approx(want));
  // unbatched (T, C) and 1-D targets
  CHECK(ctc_loss(log(p.squeeze(1)), I({1}, {1}), I({2}, {}), I({1}, {}), {.reduction = Reduction::sum}).item() ==
        doctest::Approx(want));
  // "aa" needs a blank between: impossible in 2 frames -> inf, or 0 with zero_infinity
  const Tensor aa = I({1, 1}, {1, 2});
  CHECK(std::isinf(ctc_loss(log(p), aa, I({2}, {1}), I({2}, {1}), {.reduction = Reduction::sum}).item()));
  CHECK(ctc_loss(log(p), aa, I({2}, {1}), I({2}, {1}), {.reduction = Reduction::sum, .zero_infinity = true}).item() == 0);
  // no input frames: 0 for an empty target (PyTorch's), inf for a non-empty one
  const Tensor none_l = ctc_loss(log(cat({p, p}, 1)), I({1, 1}, {2, 1}), I({0, 0}, {2}), I({0, 1}, {2}),
                                 {.reduction = Reduction::none});
  CHECK(none_l.to_vector<double>()[0] == 0.0);
  CHECK(std::isinf(none_l.to_vector<double>()[1]));
  // an empty target: all blanks; mean divides by max(target length, 1)
  CHECK(ctc_loss(log(p), I({0}, {1, 1}), I({2}, {1}), I({0}, {1})).item() == doctest::Approx(-std::log(0.4 * 0.7)));
  // the gradient through log_softmax (where PyTorch's exp term cancels) is the true one
  manual_seed(92);
  const Tensor logits = randn({6, 2, 4}, {.dtype = DType::float64});
  CHECK(kiln::test::gradcheck([&](auto& t) {
    return ctc_loss(log_softmax(t[0], 2), I({1, 2, 3, 3, 0, 0}, {2, 3}), I({6, 5}, {2}), I({2, 1}, {2}));
  }, {logits}));
  nn::CTCLoss mod({.blank = 0, .reduction = Reduction::none});
  CHECK(mod(log(p), I({1}, {1, 1}), I({2}, {1}), I({1}, {1})).shape() == Shape{1});
  CHECK_THROWS_WITH_AS(ctc_loss(log(p), I({0}, {1, 1}), I({2}, {1}), I({1}, {1})), doctest::Contains("blank"), kiln::Error);
  CHECK_THROWS_AS(ctc_loss(log(p), I({1}, {1, 1}), I({3}, {1}), I({1}, {1})), kiln::Error);  // input length > T
  CHECK_THROWS_AS(ctc_loss(log(p), I({1}, {1, 1}), I({2, 2}, {2}), I({1}, {1})), kiln::Error);
  CHECK_THROWS_AS(ctc_loss(log(p), I({1}, {1, 1}), I({2}, {1}), I({2}, {1})), kiln::Error);  // longer than the targets
}
