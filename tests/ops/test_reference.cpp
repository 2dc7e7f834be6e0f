// The reference kernels of ops/reference/: first against values worked by hand (so the
// oracles of the other tests are not trusted blindly), then kiln's own softmax, layer norm
// and attention against them on random float64 inputs.
#include <doctest/doctest.h>
#include <cmath>
#include <vector>
#include "gradcheck.h"
#include "kiln/ops/reference/attention.h"
#include "kiln/ops/reference/conv2d.h"
#include "kiln/ops/reference/gemm.h"
#include "kiln/ops/reference/softmax.h"

using namespace kiln;
using kiln::test::f64;
using kiln::test::max_abs_diff;

TEST_CASE("reference kernels: values by hand") {
  // gemm: [[1 2] [3 4]] @ [[5 6] [7 8]] = [[19 22] [43 50]]; transposed operands read in place
  const double a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  double c[4];
  reference::gemm(false, false, 2, 2, 2, a, 2, b, 2, c, 2);
  CHECK(std::vector<double>(c, c + 4) == std::vector<double>{19, 22, 43, 50});
  reference::gemm(true, true, 2, 2, 2, a, 2, b, 2, c, 2);  // a^T b^T = (b a)^T = [[23 31] [34 46]]
  CHECK(std::vector<double>(c, c + 4) == std::vector<double>{23, 31, 34, 46});
  // conv2d: a 3x3 input, a 2x2 kernel of ones, bias 1, stride 1: sums of 2x2 windows + 1;
  // padding 1, stride 2: the corners' windows see one input each
  const double x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[] = {1, 1, 1, 1}, bias[] = {1};
  double y[9];
  reference::Conv2dShape s{.N = 1, .C = 1, .H = 3, .W = 3, .O = 1, .kH = 2, .kW = 2};
  reference::conv2d(s, x, w, bias, y);
  CHECK(std::vector<double>(y, y + 4) == std::vector<double>{13, 17, 25, 29});
  s.pad_h = s.pad_w = 1, s.stride_h = s.stride_w = 2;
  CHECK(s.out_h() == 2);
  reference::conv2d(s, x, w, static_cast<const double*>(nullptr), y);
  CHECK(std::vector<double>(y, y + 4) == std::vector<double>{1, 5, 11, 28});
  // softmax of (0, log 3): (1/4, 3/4); log_softmax; layer norm of (1, 3): (-1, 1) up to eps
  const double r[] = {0, std::log(3.0)};
  double p[2];
  reference::softmax(1, 2, r, p);
  CHECK(p[0] == doctest::Approx(0.25));
  CHECK(p[1] == doctest::Approx(0.75));
  reference::softmax(1, 2, r, p, true);
  CHECK(p[1] == doctest::Approx(std::log(0.75)));
  const double ln[] = {1, 3};
  reference::layer_norm(1, 2, ln, static_cast<const double*>(nullptr), static_cast<const double*>(nullptr), 0.0, p);
  CHECK(p[0] == doctest::Approx(-1.0));
  CHECK(p[1] == doctest::Approx(1.0));
  // attention, causal, one query row per position: row 0 sees only key 0, so it is v[0]
  const double q[] = {1, 0, 0, 1}, k[] = {1, 0, 0, 1}, v[] = {10, 20};
  double o[2];
  reference::attention(1, 2, 2, 2, 1, q, k, v, 1.0, true, o);
  CHECK(o[0] == 10.0);
  CHECK(o[1] == doctest::Approx((10.0 + 20.0 * std::exp(1.0)) / (1.0 + std::exp(1.0))));
}

TEST_CASE("softmax, log_softmax, layer_norm and attention match the reference kernels in float64") {
  manual_seed(21);
  Tensor x = randn({7, 33}, f64);
  std::vector<double> xv = x.to_vector<double>(), out(xv.size());
  reference::softmax(7, 33, xv.data(), out.data());
  CHECK(max_abs_diff(softmax(x, -1), from_vector(out, {7, 33})) < 1e-15);
  reference::softmax(7, 33, xv.data(), out.data(), true);
  CHECK(max_abs_diff(log_softmax(x, -1), from_vector(out, {7, 33})) < 1e-14);
  Tensor w = randn({33}, f64), b = randn({33}, f64);
  const auto wv = w.to_vector<double>(), bv = b.to_vector<double>();
  reference::layer_norm(7, 33, xv.data(), wv.data(), bv.data(), 1e-5, out.data());
  CHECK(max_abs_diff(layer_norm(x, {33}, w, b, 1e-5), from_vector(out, {7, 33})) < 1e-13);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Tensor q = randn({2, 3, 9, 8}, f64), k = randn({2, 3, 11, 8}, f64), v = randn({2, 3, 11, 5}, f64);
    const auto qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
    std::vector<double> o(size_t(2 * 3 * 9 * 5));
    reference::attention(6, 9, 11, 8, 5, qv.data(), kv.data(), vv.data(), 1.0 / std::sqrt(8.0), causal, o.data());
    CHECK(max_abs_diff(scaled_dot_product_attention(q, k, v, causal), from_vector(o, {2, 3, 9, 5})) < 1e-13);
  }
}
