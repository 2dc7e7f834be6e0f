// Normalisation ops: batch_norm (training and inference, running-stat update, with and
// without affine) and layer_norm (1 and 2 normalized dims): values by hand, gradchecks
// in float64 (including non-contiguous inputs), float32/bfloat16 paths and errors.
#include <doctest/doctest.h>
#include <cmath>
#include "gradcheck.h"

using namespace kiln;
using kiln::test::allclose;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::max_abs_diff;
using kiln::test::T;

TEST_CASE("batch_norm: training values and running-stat update") {
  // x (N=2, C=2): channel 0 = {1, 3} (mean 2, biased var 1), channel 1 = {2, 6} (mean 4, var 4)
  Tensor x = T({1, 2, 3, 6}, {2, 2});
  Tensor w = T({2, 1}, {2}), b = T({0, 1}, {2});
  Tensor rm = T({0, 0}, {2}), rv = T({1, 1}, {2});
  const double eps = 1e-5;
  Tensor y = batch_norm(x, w, b, rm, rv, true, 0.1, eps);
  const double i0 = 1 / std::sqrt(1 + eps), i1 = 1 / std::sqrt(4 + eps);
  CHECK(allclose(y, T({2 * -1 * i0, -2 * i1 + 1, 2 * 1 * i0, 2 * i1 + 1}, {2, 2}), 1e-12, 1e-12));
  // running: mean 0.9*0 + 0.1*mean; var 0.9*1 + 0.1*unbiased var (2 and 8)
  CHECK(allclose(rm, T({0.2, 0.4}, {2}), 1e-12, 1e-12));
  CHECK(allclose(rv, T({1.1, 1.7}, {2}), 1e-12, 1e-12));
  // a second step keeps averaging
  batch_norm(x, w, b, rm, rv, true, 0.5, eps);
  CHECK(allclose(rm, T({0.2 * 0.5 + 1.0, 0.4 * 0.5 + 2.0}, {2}), 1e-12, 1e-12));
  CHECK(allclose(rv, T({1.1 * 0.5 + 1.0, 1.7 * 0.5 + 4.0}, {2}), 1e-12, 1e-12));

  // 4-D input, no affine: every channel of the output has mean 0 and biased var ~1
  manual_seed(1);
  Tensor x4 = randn({3, 4, 5, 6}, f64) * 3.0 + 2.0;
  Tensor y4 = batch_norm(x4, Tensor(), Tensor(), Tensor(), Tensor(), true);
  Tensor m = mean(y4, {0, 2, 3}), v = var(y4, {0, 2, 3}, false);
  CHECK(max_abs_diff(m, zeros({4}, f64)) < 1e-12);
  CHECK(max_abs_diff(v, ones({4}, f64)) < 1e-4);

  // float32 running stats with a float64 input are updated through a converted copy
  Tensor rm32 = zeros({4}), rv32 = ones({4});
  batch_norm(x4, Tensor(), Tensor(), rm32, rv32, true, 1.0);
  CHECK(max_abs_diff(rm32, mean(x4, {0, 2, 3}).to(DType::float32)) < 1e-5);
  CHECK(max_abs_diff(rv32, var(x4, {0, 2, 3}, true).to(DType::float32)) < 1e-4);
  // non-contiguous running stats
  Tensor rm_big = zeros({8}, f64);
  Tensor rm_view = rm_big.slice(0, 0, 8, 2), rv_view = ones({4}, f64);
  batch_norm(x4, Tensor(), Tensor(), rm_view, rv_view, true, 1.0);
  CHECK(max_abs_diff(rm_view, mean(x4, {0, 2, 3})) < 1e-12);
  CHECK(rm_big.at({1}) == 0.0);
}

TEST_CASE("batch_norm: inference uses the running stats") {
  Tensor x = T({1, 2, 3, 6, -1, 0}, {3, 2});
  Tensor rm = T({1, 2}, {2}), rv = T({4, 0.25}, {2});
  Tensor w = T({3, -1}, {2}), b = T({0.5, 0}, {2});
  Tensor y = batch_norm(x, w, b, rm, rv, false, 0.1, 0.0);
  // channel 0: (x - 1) / 2 * 3 + 0.5 ; channel 1: (x - 2) / 0.5 * -1
  CHECK(allclose(y, T({0.5, 0, 3.5, -8, -2.5, 4}, {3, 2}), 1e-12, 1e-12));
  CHECK(rm.to_vector<double>() == std::vector<double>{1, 2});  // untouched
  CHECK(rv.to_vector<double>() == std::vector<double>{4, 0.25});
}

TEST_CASE("batch_norm: gradcheck training and eval, with and without affine") {
  manual_seed(2);
  // training, affine, 4-D
  CHECK(gradcheck([](auto& in) { return batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true); },
                  {randn({2, 3, 2, 2}, f64), randn({3}, f64), randn({3}, f64)}));
  // training, no affine, 2-D, running stats given (updated on every call; output unaffected)
  Tensor rm = zeros({4}, f64), rv = ones({4}, f64);
  CHECK(gradcheck([&](auto& in) { return batch_norm(in[0], Tensor(), Tensor(), rm, rv, true); },
                  {randn({5, 4}, f64)}));
  // training, non-contiguous input (N, C, L) built from a transpose
  CHECK(gradcheck([](auto& in) { return batch_norm(in[0].transpose(0, 2), in[1], Tensor(), Tensor(), Tensor(), true); },
                  {randn({4, 3, 2}, f64), randn({3}, f64)}));
  // eval, affine
  Tensor erm = randn({3}, f64), erv = rand({3}, f64) + 0.5;
  CHECK(gradcheck([&](auto& in) { return batch_norm(in[0], in[1], in[2], erm, erv, false); },
                  {randn({2, 3, 4}, f64), randn({3}, f64), randn({3}, f64)}));
  // eval, no affine, non-contiguous
  CHECK(gradcheck([&](auto& in) { return batch_norm(in[0].transpose(0, 1), Tensor(), Tensor(), erm, erv, false); },
                  {randn({3, 2, 2}, f64)}));
  // only weight / only bias
  CHECK(gradcheck([](auto& in) { return batch_norm(in[0], Tensor(), in[1], Tensor(), Tensor(), true); },
                  {randn({3, 2, 3}, f64), randn({2}, f64)}));
}

TEST_CASE("batch_norm: float32 and bfloat16 paths") {
  manual_seed(3);
  Tensor x = randn({4, 3, 5}, f64), w = randn({3}, f64), b = randn({3}, f64);
  Tensor ref = batch_norm(x, w, b, Tensor(), Tensor(), true);
  Tensor y32 = batch_norm(x.to(DType::float32), w.to(DType::float32), b.to(DType::float32), Tensor(), Tensor(), true);
  CHECK(y32.dtype() == DType::float32);
  CHECK(max_abs_diff(y32, ref) < 1e-5);
  Tensor y16 = batch_norm(x.to(DType::bfloat16), w.to(DType::float32), b.to(DType::float32), Tensor(), Tensor(), true);
  CHECK(y16.dtype() == DType::bfloat16);
  CHECK(max_abs_diff(y16, ref) < 0.1);
  // gradient dtypes follow the inputs
  Tensor xb = x.to(DType::bfloat16).requires_grad_();
  Tensor wf = w.to(DType::float32).requires_grad_();
  sum(batch_norm(xb, wf, Tensor(), Tensor(), Tensor(), true)).backward();
  CHECK(xb.grad().dtype() == DType::bfloat16);
  CHECK(wf.grad().dtype() == DType::float32);
}

TEST_CASE("batch_norm: long channels (64-lane row sums over blocks of rows) against a float64 reference") {
  // 40 x 165 values per channel: the CPU kernels sum rows of 165 in 64 lanes, then 16, then
  // one by one, over blocks of 24 rows; the forward and both gradients against plain sums.
  manual_seed(6);
  const int64_t N = 40, C = 3, S = 165;
  Tensor x = (randn({N, C, S}, f64) * 2.0 + 5.0).requires_grad_();
  Tensor w = randn({C}, f64).requires_grad_(), b = randn({C}, f64).requires_grad_();
  const Tensor g = randn({N, C, S}, f64);
  Tensor y = batch_norm(x, w, b, Tensor(), Tensor(), true, 0.1, 1e-5);
  y.backward(g);
  const auto xv = x.detach().to_vector<double>(), gv = g.to_vector<double>(), yv = y.detach().to_vector<double>();
  const auto wv = w.detach().to_vector<double>(), bv = b.detach().to_vector<double>();
  const auto dx = x.grad().to_vector<double>(), dw = w.grad().to_vector<double>(), db = b.grad().to_vector<double>();
  double worst = 0;
  for (int64_t c = 0; c < C; ++c) {
    auto at = [&](int64_t n, int64_t i) { return size_t((n * C + c) * S + i); };
    long double sx = 0, sxx = 0, sg = 0, sgx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) sx += xv[at(n, i)];
    const long double M = N * S, mean = sx / M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const long double d = xv[at(n, i)] - mean;
        sxx += d * d, sg += gv[at(n, i)], sgx += gv[at(n, i)] * d;
      }
    const long double inv = 1 / std::sqrt(sxx / M + 1e-5L);
    worst = std::max(worst, double(std::fabs(dw[size_t(c)] - double(sgx * inv))));
    worst = std::max(worst, double(std::fabs(db[size_t(c)] - double(sg))) / 100);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const long double xh = (xv[at(n, i)] - mean) * inv;
        worst = std::max(worst, double(std::fabs(yv[at(n, i)] - double(xh * wv[size_t(c)] + bv[size_t(c)]))));
        const long double d = wv[size_t(c)] * inv * (gv[at(n, i)] - sg / M - xh * sgx * inv / M);
        worst = std::max(worst, double(std::fabs(dx[at(n, i)] - double(d))));
      }
  }
  CHECK(worst < 1e-12);
}

TEST_CASE("batch_norm on a 16-bit CPU input: the bits of the float32 path on the widened input") {
  // The CPU kernels read a 16-bit x (and its gradient) widened and write out and dx in its
  // dtype (no float32 copies): every output, running stat and gradient must be the float32
  // path's on x widened, with the 16-bit results rounded once. Autocast changes nothing:
  // batch_norm runs in its input's dtype (PyTorch's policy).
  manual_seed(4);
  const DType f32 = DType::float32;
  for (DType dt : {DType::bfloat16, DType::float16})
    for (bool training : {true, false})
      for (bool amp : {false, true}) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(training);
        CAPTURE(amp);
        // short rows, and rows of 165 (64-lane, 16-lane and scalar steps) in two blocks of rows
        const bool long_rows = training && amp;
        const int64_t N = long_rows ? 40 : 6, C = 5, S = long_rows ? 165 : 37;
        CAPTURE(S);
        const Tensor x16 = (randn({N, C, S}) * 3.0 + 1.0).to(dt);
        Tensor x = x16.clone().requires_grad_(), xw = x16.to(f32).requires_grad_();
        Tensor w = randn({C}).requires_grad_(), b = randn({C}).requires_grad_();
        Tensor w2 = w.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
        Tensor rm = randn({C}), rv = rand({C}) + 0.5, rm2 = rm.clone(), rv2 = rv.clone();
        Tensor y;
        {
          autocast guard(dt, amp);
          y = batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
        }
        Tensor yw = batch_norm(xw, w2, b2, rm2, rv2, training, 0.1, 1e-5);
        REQUIRE(y.dtype() == dt);
        CHECK(max_abs_diff(y.to(f32), yw.detach().to(dt).to(f32)) == 0.0);
        CHECK(max_abs_diff(rm, rm2) == 0.0);
        CHECK(max_abs_diff(rv, rv2) == 0.0);
        REQUIRE(y.grad_fn() != nullptr);
        CHECK(y.grad_fn()->saved[0].tensor.dtype() == dt);  // x kept in 16 bits
        const Tensor g = randn(y.shape()).to(y.dtype());
        y.backward(g);
        yw.backward(g.to(f32));  // the same values: g is 16-bit
        REQUIRE(x.grad().dtype() == dt);
        CHECK(max_abs_diff(x.grad().to(f32), xw.grad().to(dt).to(f32)) == 0.0);
        CHECK(max_abs_diff(w.grad(), w2.grad()) == 0.0);
        CHECK(max_abs_diff(b.grad(), b2.grad()) == 0.0);
      }
}

TEST_CASE("batch_norm: errors") {
  Tensor x = randn({2, 3, 4});
  CHECK_THROWS_WITH_AS(batch_norm(x, ones({4}), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("[4]"), kiln::Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), zeros({2}), Tensor(), Tensor(), true),
                       doctest::Contains("[2, 3, 4]"), kiln::Error);
  CHECK_THROWS_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false), kiln::Error);
  CHECK_THROWS_AS(batch_norm(x, Tensor(), Tensor(), zeros({3}), Tensor(), true), kiln::Error);
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), zeros({5}), ones({5}), false),
                       doctest::Contains("[5]"), kiln::Error);
  CHECK_THROWS_WITH_AS(batch_norm(randn({3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                       doctest::Contains("[3]"), kiln::Error);
  CHECK_THROWS_AS(batch_norm(ones({2, 3}, {.dtype = DType::int64}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                  kiln::Error);
  CHECK_THROWS_AS(batch_norm(randn({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true), kiln::Error);
  CHECK_THROWS_AS(batch_norm(Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), true), kiln::Error);
  // eps = 0: refused when training (PyTorch's check; a constant channel would give 0 / 0)
  CHECK_THROWS_WITH_AS(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 0.0),
                       doctest::Contains("eps"), kiln::Error);
  CHECK_NOTHROW(batch_norm(x, Tensor(), Tensor(), zeros({3}), ones({3}), false, 0.1, 0.0));
}

TEST_CASE("batch_norm of an empty batch in training: an empty output, statistics unchanged (PyTorch)") {
  Tensor x = zeros({0, 3, 4, 4}, {.requires_grad = true});
  Tensor w = ones({3}, {.requires_grad = true}), b = zeros({3}, {.requires_grad = true});
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor y = batch_norm(x, w, b, rm, rv, true);  // was "expected more than 1 value per channel"
  CHECK(y.shape() == Shape{0, 3, 4, 4});
  CHECK(rm.to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(rv.to_vector<float>() == std::vector<float>{1, 1, 1});
  sum(y).backward();
  CHECK(x.grad().shape() == x.shape());
  CHECK(w.grad().to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(batch_norm(zeros({0, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true).shape() == Shape{0, 3});
}

TEST_CASE("layer_norm: values") {
  // rows {1, 2, 3} (mean 2, var 2/3) and {0, 0, 6} (mean 2, var 8)
  Tensor x = T({1, 2, 3, 0, 0, 6}, {2, 3});
  const double eps = 1e-5;
  Tensor y = layer_norm(x, {3}, Tensor(), Tensor(), eps);
  const double r0 = 1 / std::sqrt(2.0 / 3 + eps), r1 = 1 / std::sqrt(8 + eps);
  CHECK(allclose(y, T({-r0, 0, r0, -2 * r1, -2 * r1, 4 * r1}, {2, 3}), 1e-12, 1e-12));
  Tensor w = T({1, 2, 3}, {3}), b = T({0, 1, -1}, {3});
  Tensor yw = layer_norm(x, {3}, w, b, eps);
  CHECK(allclose(yw, T({-r0, 1, 3 * r0 - 1, -2 * r1, -4 * r1 + 1, 12 * r1 - 1}, {2, 3}), 1e-12, 1e-12));
  // two normalized dims: the whole (2, 3) block of each batch element
  Tensor x3 = stack({x, x * 2.0}, 0);  // (2, 2, 3)
  Tensor y3 = layer_norm(x3, {2, 3});
  Tensor flat = layer_norm(x3.reshape({2, 6}), {6});
  CHECK(max_abs_diff(y3.reshape({2, 6}), flat) < 1e-12);
  CHECK(std::fabs(mean(y3.select(0, 1)).item()) < 1e-12);
}

TEST_CASE("layer_norm: gradcheck") {
  manual_seed(4);
  CHECK(gradcheck([](auto& in) { return layer_norm(in[0], {5}, in[1], in[2]); },
                  {randn({3, 5}, f64), randn({5}, f64), randn({5}, f64)}));
  CHECK(gradcheck([](auto& in) { return layer_norm(in[0], {4}); }, {randn({2, 3, 4}, f64)}));
  CHECK(gradcheck([](auto& in) { return layer_norm(in[0], {3, 4}, in[1], in[2]); },
                  {randn({2, 3, 4}, f64), randn({3, 4}, f64), randn({3, 4}, f64)}));
  CHECK(gradcheck([](auto& in) { return layer_norm(in[0], {2, 3}); }, {randn({2, 2, 3}, f64)}));
  // non-contiguous input; weight only; bias only
  CHECK(gradcheck([](auto& in) { return layer_norm(in[0].transpose(0, 1), {3}, in[1]); },
                  {randn({3, 4}, f64), randn({3}, f64)}));
  CHECK(gradcheck([](auto& in) { return layer_norm(in[0], {4}, Tensor(), in[1]); },
                  {randn({3, 4}, f64), randn({4}, f64)}));
  // wide rows (several column blocks in the dweight reduction)
  CHECK(gradcheck([](auto& in) { return layer_norm(in[0], {130}, in[1], in[2]); },
                  {randn({2, 130}, f64), randn({130}, f64), randn({130}, f64)}));
}

TEST_CASE("layer_norm: float32 path and errors") {
  manual_seed(5);
  Tensor x = randn({6, 33}, f64), w = randn({33}, f64), b = randn({33}, f64);
  Tensor ref = layer_norm(x, {33}, w, b);
  CHECK(max_abs_diff(layer_norm(x.to(DType::float32), {33}, w.to(DType::float32), b.to(DType::float32)), ref) < 1e-5);
  CHECK(max_abs_diff(layer_norm(x.to(DType::bfloat16), {33}, w.to(DType::float32), b.to(DType::float32)), ref) < 0.15);

  CHECK_THROWS_WITH_AS(layer_norm(x, {32}), doctest::Contains("[6, 33]"), kiln::Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {6, 33, 1}), doctest::Contains("[6, 33, 1]"), kiln::Error);
  CHECK_THROWS_AS(layer_norm(x, {}), kiln::Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, {33}, randn({32}, f64)), doctest::Contains("[32]"), kiln::Error);
  CHECK_THROWS_AS(layer_norm(x, {33}, Tensor(), randn({3, 11}, f64)), kiln::Error);
  CHECK_THROWS_AS(layer_norm(ones({2, 3}, {.dtype = DType::int32}), {3}), kiln::Error);
}

TEST_CASE("batch_norm / layer_norm: larger inputs, thread count does not change results") {
  manual_seed(6);
  const int saved = get_num_threads();
  Tensor x = randn({8, 16, 12, 12}) * 2.0 + 1.0, w = randn({16}), b = randn({16});
  Tensor g = randn({8, 16, 12, 12});
  Tensor xl = randn({300, 130}), wl = randn({130}), bl = randn({130}), gl = randn({300, 130});
  std::vector<std::vector<Tensor>> runs;
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    Tensor xa = x.clone().requires_grad_(), wa = w.clone().requires_grad_(), ba = b.clone().requires_grad_();
    Tensor rm = zeros({16}), rv = ones({16});
    Tensor y = batch_norm(xa, wa, ba, rm, rv, true);
    y.backward(g);
    Tensor xb = xl.clone().requires_grad_(), wb = wl.clone().requires_grad_(), bb = bl.clone().requires_grad_();
    Tensor yl = layer_norm(xb, {130}, wb, bb);
    yl.backward(gl);
    runs.push_back({y, xa.grad(), wa.grad(), ba.grad(), rm, rv, yl, xb.grad(), wb.grad(), bb.grad()});
  }
  set_num_threads(saved);
  for (size_t i = 0; i < runs[0].size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(runs[0][i], runs[1][i]) == 0.0);
  }
  // against float64 references built from reductions
  Tensor xd = x.to(DType::float64);
  Tensor m = mean(xd, {0, 2, 3}, true), v = var(xd, {0, 2, 3}, false, true);
  Tensor ref = (xd - m) / sqrt(v + 1e-5) * w.to(DType::float64).reshape({1, 16, 1, 1}) +
               b.to(DType::float64).reshape({1, 16, 1, 1});
  CHECK(max_abs_diff(runs[0][0], ref) < 1e-4);
  Tensor xld = xl.to(DType::float64);
  Tensor ml = mean(xld, {1}, true), vl = var(xld, {1}, false, true);
  Tensor refl = (xld - ml) / sqrt(vl + 1e-5) * wl.to(DType::float64) + bl.to(DType::float64);
  CHECK(max_abs_diff(runs[0][6], refl) < 1e-4);
}

TEST_CASE("group_norm: the per-(sample, group) statistics, affine per channel, gradcheck, errors") {
  using kiln::testing::error_of;
  manual_seed(47);
  const Tensor x = randn({2, 6, 3, 2}, f64), w = randn({6}, f64), b = randn({6}, f64);
  // reference: mean and biased variance over each group of 2 channels and all positions
  const Tensor g = x.reshape({2, 3, 12});
  const Tensor mu = mean(g, {2}, true), var_ = var(g, {2}, false, true);
  const Tensor ref = add(mul(div(sub(g, mu), sqrt(add(var_, 1e-5))).reshape({2, 6, 3, 2}), w.reshape({1, 6, 1, 1})),
                         b.reshape({1, 6, 1, 1}));
  CHECK(max_abs_diff(group_norm(x, 3, w, b), ref) < 1e-13);
  // one group: layer_norm over (C, H, W); C groups: instance norm
  CHECK(max_abs_diff(group_norm(x, 1), layer_norm(x, {6, 3, 2})) < 1e-13);
  const Tensor inst = group_norm(x, 6);
  CHECK(max_abs_diff(mean(inst, {2, 3}), zeros({2, 6}, {.dtype = DType::float64})) < 1e-13);
  CHECK(group_norm(randn({4, 4}), 2).shape() == Shape{4, 4});  // (N, C) without spatial dims
  CHECK(gradcheck([](auto& in) { return group_norm(in[0], 2, in[1], in[2], 0.1); },
                  {randn({2, 4, 3}, f64), randn({4}, f64), randn({4}, f64)}));
  CHECK(error_of([&] { group_norm(x, 4); }).find("4 equal groups") != std::string::npos);
  CHECK(error_of([&] { group_norm(x, 3, randn({3}, f64)); }).find("weight has shape [3]") != std::string::npos);
  CHECK(error_of([&] { group_norm(randn({6}), 3); }).find("at least 2 dims") != std::string::npos);
}
