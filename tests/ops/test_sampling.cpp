// topk and multinomial (ops/sampling.h): topk against a sort on random tensors along every
// dim, largest and smallest, ties and NaN in PyTorch's order, the values' float64
// gradcheck; kthvalue, median and quantile; multinomial's frequencies, draws without
// replacement, seeding and errors.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::test::error_of;

TEST_CASE("topk: values and indices equal a sort, along every dim, largest and smallest") {
  manual_seed(3);
  const Tensor x = randn({3, 5, 4}, {.dtype = DType::float64});
  for (int64_t dim = 0; dim < 3; ++dim)
    for (bool largest : {true, false})
      for (int64_t k : {int64_t(0), int64_t(1), x.size(dim)}) {
        const auto top = topk(x, k, dim, largest);  // (no structured bindings inside CHECK: clang 14)
        const Tensor& v = top.first;
        const Tensor& i = top.second;
        Shape want = x.shape();
        want[size_t(dim)] = k;
        REQUIRE(v.shape() == want);
        REQUIRE(i.shape() == want);
        CHECK(i.dtype() == DType::int64);
        // every slice along dim: the k first of the sorted slice
        const Tensor xt = x.transpose(dim, 2).contiguous(), vt = v.transpose(dim, 2).contiguous(),
                     it = i.transpose(dim, 2).contiguous();
        const auto xs = xt.to_vector<double>(), vs = vt.to_vector<double>();
        const auto is = it.to_vector<int64_t>();
        const int64_t S = x.size(dim), R = int64_t(xs.size()) / S;
        for (int64_t r = 0; r < R; ++r) {
          std::vector<double> row(xs.begin() + r * S, xs.begin() + (r + 1) * S);
          std::vector<double> sorted = row;
          if (largest) std::sort(sorted.rbegin(), sorted.rend());
          else std::sort(sorted.begin(), sorted.end());
          for (int64_t j = 0; j < k; ++j) {
            CHECK(vs[size_t(r * k + j)] == sorted[size_t(j)]);
            CHECK(row[size_t(is[size_t(r * k + j)])] == vs[size_t(r * k + j)]);
          }
        }
      }
}

TEST_CASE("topk: ties by index, NaN counts as largest, errors") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = from_vector<double>({2, 7, nan, 7, 1}, {5});
  const auto top = topk(x, 3);
  const Tensor &v = top.first, &i = top.second;
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 1, 3});
  CHECK(std::isnan(v.to_vector<double>()[0]));
  const auto low = topk(x, 2, 0, false);
  const Tensor &vs = low.first, &is = low.second;
  CHECK(is.to_vector<int64_t>() == std::vector<int64_t>{4, 0});
  CHECK(vs.to_vector<double>() == std::vector<double>{1, 2});
  CHECK(error_of([&] { topk(x, 6); }).find("out of range") != std::string::npos);
  CHECK(error_of([&] { topk(x, -1); }).find("out of range") != std::string::npos);
  CHECK(error_of([&] { topk(scalar_tensor(1.0), 1); }).find("0-d") != std::string::npos);
  CHECK(error_of([&] { topk(x, 1, 3); }).find("topk") != std::string::npos);
}

TEST_CASE("topk: the values' gradient reaches the chosen elements (float64 gradcheck)") {
  manual_seed(4);
  CHECK(kiln::test::gradcheck([](std::vector<Tensor>& in) { return topk(in[0], 2, 1).first; },
                              {randn({3, 6}, {.dtype = DType::float64})}));
  CHECK(kiln::test::gradcheck([](std::vector<Tensor>& in) { return topk(in[0], 3, 0, false).first; },
                              {randn({5, 2}, {.dtype = DType::float64})}));
}

TEST_CASE("multinomial: frequencies, without replacement, seeding, errors") {
  manual_seed(9);
  const Tensor w = from_vector<double>({1, 0, 3, 4}, {4});  // unnormalised: 1/8, 0, 3/8, 4/8
  const int64_t n = 40000;
  const auto draws = multinomial(w, n, true).to_vector<int64_t>();
  std::vector<int64_t> count(4, 0);
  for (int64_t d : draws) ++count[size_t(d)];
  CHECK(count[1] == 0);
  // within 5 standard deviations of n p
  for (const auto& cp : std::vector<std::pair<size_t, double>>{{0, 0.125}, {2, 0.375}, {3, 0.5}}) {
    const double p = cp.second, got = double(count[cp.first]);
    CHECK(std::abs(got - double(n) * p) < 5 * std::sqrt(double(n) * p * (1 - p)));
  }

  manual_seed(10);
  const Tensor rows = rand({6, 5});
  const Tensor a = multinomial(rows, 5, false);
  CHECK(a.shape() == Shape{6, 5});
  for (int64_t r = 0; r < 6; ++r) {
    const auto v = a.select(0, r).to_vector<int64_t>();
    CHECK(std::set<int64_t>(v.begin(), v.end()).size() == 5);  // each category once
  }
  manual_seed(10);
  rand({6, 5});  // the same draws from the generator as above, then the same samples
  CHECK(max(abs(sub(multinomial(rows, 5, false), a))).item() == 0);

  CHECK(error_of([&] { multinomial(w, 4, false); }).find("without replacement") != std::string::npos);
  CHECK(error_of([&] { multinomial(from_vector<double>({1, -1}, {2}), 1); }).find(">= 0") != std::string::npos);
  CHECK(error_of([&] { multinomial(zeros({2, 3}), 1); }).find("sums to zero") != std::string::npos);
  CHECK(error_of([&] { multinomial(zeros({2, 3, 4}), 1); }).find("(N, C)") != std::string::npos);
  CHECK(error_of([&] { multinomial(from_vector<int64_t>({1, 2}, {2}), 1); }).find("floating") != std::string::npos);
  CHECK(error_of([&] { multinomial(w, 0, true); }).find("> 0") != std::string::npos);  // as PyTorch
  CHECK(error_of([&] { multinomial(zeros({2, 0}), 1); }).find("at least one category") != std::string::npos);
  CHECK(error_of([&] { multinomial(zeros({0}), 1); }).find("at least one category") != std::string::npos);
}

TEST_CASE("multinomial without replacement: small weights after a large one keep their odds; huge weights") {
  // after the weight 1 is drawn, 1e-17 and 3e-17 are left: 1/4 and 3/4 (the running total lost
  // them and category 1 won every time)
  manual_seed(11);
  const int64_t n = 4000;
  const Tensor w = from_vector<double>({1, 1e-17, 3e-17}).unsqueeze(0).expand({n, 3}).contiguous();
  const Tensor second = multinomial(w, 2, false).select(1, 1);
  const double ones = sum(eq(second, 1.0)).item();
  CHECK(std::abs(ones - n * 0.25) < 5 * std::sqrt(n * 0.25 * 0.75));
  // weights whose sum overflows float64 are still three equal categories (was always the last)
  const Tensor big = full({n, 3}, 1e308, {.dtype = DType::float64});
  const Tensor d = multinomial(big, 1, true);
  for (double c : {0.0, 1.0, 2.0}) CHECK(std::abs(sum(eq(d, c)).item() - n / 3.0) < 5 * std::sqrt(n * 2.0 / 9));
}

TEST_CASE("topk of int64 values above 2^53: ranked exactly") {
  const int64_t B = int64_t(1) << 53;
  const Tensor x = from_vector<int64_t>({B, B + 1, B - 1, B + 3, B + 2});
  auto [v, i] = topk(x, 3);
  CHECK(v.to_vector<int64_t>() == std::vector<int64_t>{B + 3, B + 2, B + 1});  // the third was B
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{3, 4, 1});
}

TEST_CASE("sort and argsort: stable, NaN last ascending and first descending, 0-dim, gradient") {
  const Tensor x = from_vector<double>({3, 1, NAN, 1, 2}, {5});
  auto [v, i] = sort(x);
  const auto vv = v.to_vector<double>();
  CHECK(vv[0] == 1);
  CHECK(vv[3] == 3);
  CHECK(std::isnan(vv[4]));
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 4, 0, 2});
  CHECK(argsort(x, 0, true).to_vector<int64_t>() == std::vector<int64_t>{2, 0, 4, 1, 3});
  CHECK(argsort(from_vector<int64_t>({5, 2, 9, 1}, {2, 2}), 0).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 1, 0});
  auto [sv, si] = sort(scalar_tensor(4.0));
  CHECK(sv.dim() == 0);
  CHECK(si.item() == 0);
  CHECK(kiln::test::gradcheck([](auto& in) { return sort(in[0], 1, true).first; },
                              {randn({3, 4}, {.dtype = DType::float64})}));
}

TEST_CASE("kthvalue, median, quantile: values, NaN, interpolations, gradients, errors") {
  const auto V = [](const Tensor& t) { return t.to(DType::float64).contiguous().to_vector<double>(); };
  const auto D = [](std::vector<double> v, Shape s) { return from_vector(v, s); };
  const Tensor x = D({5, 1, 4, 2, 3, 9, 8, 7}, {2, 4});
  const ValuesIndices k2 = kthvalue(x, 2, 1);
  CHECK(V(k2.values) == std::vector<double>{2, 7});
  CHECK(k2.indices.to_vector<int64_t>() == std::vector<int64_t>{3, 3});
  CHECK(kthvalue(x, 1, 0, true).values.shape() == Shape{1, 4});
  // the lower median; a NaN row gives NaN at its first NaN
  CHECK(V(median(x, 1).values) == std::vector<double>{2, 7});
  CHECK(median(x).item() == 4);
  const ValuesIndices mn = median(D({3, NAN, 1, NAN, 2, 4, 1, 2, 3, 0}, {2, 5}), 1);
  CHECK(std::isnan(V(mn.values)[0]));
  CHECK(V(mn.values)[1] == 2);
  CHECK(mn.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(V(median(from_vector(std::vector<int64_t>{3, 1, 2}, {3}), 0).values) == std::vector<double>{2});
  // quantile: entry q * (n - 1) of the sorted row, between entries as asked
  const Tensor r = D({4, 1, 3, 2}, {4});
  CHECK(quantile(r, 0.5).item() == 2.5);
  CHECK(quantile(r, 1.0 / 3).item() == doctest::Approx(2.0));
  const Tensor q = D({0.25, 0.5}, {2});
  CHECK(V(quantile(r, q, std::nullopt, false, QuantileInterpolation::linear)) == std::vector<double>{1.75, 2.5});
  CHECK(V(quantile(r, q, std::nullopt, false, QuantileInterpolation::lower)) == std::vector<double>{1, 2});
  CHECK(V(quantile(r, q, std::nullopt, false, QuantileInterpolation::higher)) == std::vector<double>{2, 3});
  CHECK(V(quantile(r, q, std::nullopt, false, QuantileInterpolation::midpoint)) == std::vector<double>{1.5, 2.5});
  CHECK(V(quantile(r, q, std::nullopt, false, QuantileInterpolation::nearest)) == std::vector<double>{2, 3});
  // a 1-D q puts its dim first; keepdim keeps the reduced dim as size 1; NaN rows give NaN
  const Tensor xn = D({1, 2, 3, NAN, 4, 5, 6, 7}, {2, 4});
  const Tensor qn = quantile(xn, q, 1, true);
  CHECK(qn.shape() == Shape{2, 2, 1});
  const std::vector<double> qv = V(qn);
  CHECK(std::isnan(qv[0]));
  CHECK(qv[1] == 4.75);
  CHECK(quantile(x, 0.5, std::nullopt, true).shape() == Shape{1, 1});
  manual_seed(52);
  const Tensor g = randn({3, 5}, {.dtype = DType::float64});
  CHECK(kiln::test::gradcheck([](auto& t) { return kthvalue(t[0], 2, 1).values; }, {g}));
  CHECK(kiln::test::gradcheck([](auto& t) { return median(t[0], 0).values; }, {g}));
  CHECK(kiln::test::gradcheck([&](auto& t) { return quantile(t[0], q, 1); }, {g}));
  CHECK(error_of([&] { kthvalue(x, 5, 1); }).find("out of range") != std::string::npos);
  CHECK(error_of([&] { quantile(r, 1.5); }).find("[0, 1]") != std::string::npos);
  CHECK(error_of([&] { quantile(r, q.to(DType::float32)); }).find("dtype") != std::string::npos);
  CHECK(error_of([&] { quantile(r.to(DType::int64), 0.5); }).find("float32 or float64") != std::string::npos);
  CHECK(error_of([&] { median(zeros({2, 0}), 1); }).find("empty") != std::string::npos);
}

TEST_CASE("nanquantile, nanmedian, mode") {
  const auto V = [](const Tensor& t) { return t.to(DType::float64).contiguous().to_vector<double>(); };
  const Tensor x = from_vector(std::vector<double>{4, NAN, 1, 3, NAN, NAN, NAN, NAN}, {2, 4});
  // the non-NaN entries of row 0 are 1, 3, 4: median 3, quartiles by their count
  CHECK(V(nanmedian(x, 1).values)[0] == 3);
  CHECK(nanmedian(x, 1).indices.to_vector<int64_t>()[0] == 3);
  CHECK(std::isnan(V(nanmedian(x, 1).values)[1]));
  CHECK(nanmedian(x.select(0, 0)).item() == 3);
  const std::vector<double> nq = V(nanquantile(x, 0.75, 1));
  CHECK(nq[0] == 3.5);
  CHECK(std::isnan(nq[1]));
  CHECK(std::isnan(V(quantile(x, 0.75, 1))[0]));  // quantile: a NaN makes the row NaN
  CHECK(kiln::test::gradcheck([](auto& t) { return nanquantile(t[0], 0.3, 1); },
                              {from_vector(std::vector<double>{0.5, NAN, -1.5, 2.25, 0.75, -0.25}, {2, 3})}));
  const ValuesIndices m = mode(from_vector(std::vector<double>{3, 1, 3, 2, 1, 3, 2, 2, 1, 1, 5, 0}, {2, 6}), 1);
  CHECK(V(m.values) == std::vector<double>{3, 1});  // a tie between 2 and 1: the smaller
  CHECK(m.indices.to_vector<int64_t>() == std::vector<int64_t>{5, 3});  // the last position
  CHECK(V(mode(from_vector(std::vector<int64_t>{5, 5, 1, 1}, {4}, {.dtype = DType::int64})).values)[0] == 1);
  CHECK_THROWS_AS(mode(zeros({2, 0}), 1), kiln::Error);
  CHECK_THROWS_AS(nanquantile(x, 1.5), kiln::Error);
}
