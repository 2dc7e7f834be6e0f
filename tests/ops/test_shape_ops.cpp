// Shape ops: cat, stack, split (by size and by sizes), chunk, index_select and gather:
// values by hand (float and integer dtypes), views, gradchecks (including non-contiguous
// inputs) and errors for bad shapes, dims and indices; the rest of the family below (pad,
// tril/triu, ..., the scatters, nonzero and masked_select).
#include <doctest/doctest.h>
#include <limits>
#include "gradcheck.h"

using namespace kiln;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::max_abs_diff;
using kiln::test::T;

TEST_CASE("cat: values, dims, dtypes") {
  Tensor a = T({1, 2, 3, 4}, {2, 2}), b = T({5, 6}, {1, 2}), c = T({7, 8, 9, 10, 11, 12}, {2, 3});
  Tensor y0 = cat({a, b}, 0);
  CHECK(y0.shape() == Shape{3, 2});
  CHECK(y0.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor y1 = cat({a, c}, -1);
  CHECK(y1.shape() == Shape{2, 5});
  CHECK(y1.to_vector<double>() == std::vector<double>{1, 2, 7, 8, 9, 3, 4, 10, 11, 12});
  // int64, non-contiguous input, empty piece
  Tensor i = from_vector<int64_t>({1, 2, 3, 4}, {2, 2});
  Tensor yi = cat({i, i.t(), from_vector<int64_t>({}, {2, 0})}, 1);
  CHECK(yi.dtype() == DType::int64);
  CHECK(yi.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 1, 3, 3, 4, 2, 4});
  // promotion: int64 + float64 -> float64
  Tensor yp = cat({i, a}, 0);
  CHECK(yp.dtype() == DType::float64);
  CHECK(yp.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4});
  // bool and bfloat16 keep their dtype
  Tensor bb = from_vector<bool>({true, false});
  CHECK(cat({bb, bb}).to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 1, 0});
  Tensor h = T({1.5, -2}, {2}, DType::bfloat16);
  Tensor yh = cat({h, h});
  CHECK(yh.dtype() == DType::bfloat16);
  CHECK(yh.to_vector<double>() == std::vector<double>{1.5, -2, 1.5, -2});
  // a single tensor
  CHECK(cat({a}, 1).to_vector<double>() == a.to_vector<double>());
  // middle dim of a 3-D tensor
  Tensor x3 = arange(0, 8, 1, f64).reshape({2, 2, 2});
  CHECK(cat({x3, x3 * 10.0}, 1).to_vector<double>() ==
        std::vector<double>{0, 1, 2, 3, 0, 10, 20, 30, 4, 5, 6, 7, 40, 50, 60, 70});
}

TEST_CASE("cat: errors list the shapes") {
  Tensor a = randn({2, 3}), b = randn({2, 4});
  CHECK_THROWS_WITH_AS(cat({a, b}, 0), doctest::Contains("[2, 3], [2, 4]"), kiln::Error);
  CHECK_THROWS_WITH_AS(cat({a, randn({2, 3, 1})}, 0), doctest::Contains("[2, 3, 1]"), kiln::Error);
  CHECK_THROWS_AS(cat({a, b}, 2), kiln::Error);
  CHECK_THROWS_AS(cat({}, 0), kiln::Error);
  CHECK_THROWS_AS(cat({a, Tensor()}, 0), kiln::Error);
  CHECK_THROWS_AS(cat({scalar_tensor(1), scalar_tensor(2)}, 0), kiln::Error);
}

TEST_CASE("stack: values and errors") {
  Tensor a = T({1, 2, 3}, {3}), b = T({4, 5, 6}, {3});
  Tensor y0 = stack({a, b});
  CHECK(y0.shape() == Shape{2, 3});
  CHECK(y0.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor y1 = stack({a, b}, 1);
  CHECK(y1.shape() == Shape{3, 2});
  CHECK(y1.to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
  Tensor ym = stack({a, b}, -1);
  CHECK(ym.shape() == Shape{3, 2});
  Tensor i = from_vector<int64_t>({1, 2, 3, 4}, {2, 2});
  Tensor yi = stack({i, i.t()}, 1);
  CHECK(yi.shape() == Shape{2, 2, 2});
  CHECK(yi.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 1, 3, 3, 4, 2, 4});
  CHECK(stack({scalar_tensor(1.0, f64), scalar_tensor(2.0, f64)}).to_vector<double>() == std::vector<double>{1, 2});

  CHECK_THROWS_WITH_AS(stack({a, randn({4})}), doctest::Contains("[3], [4]"), kiln::Error);
  CHECK_THROWS_AS(stack({a, b}, 2), kiln::Error);
  CHECK_THROWS_AS(stack({}), kiln::Error);
}

TEST_CASE("cat / stack: gradcheck") {
  manual_seed(31);
  CHECK(gradcheck([](auto& in) { return cat({in[0], in[1], in[2]}, 1); },
                  {randn({2, 3}, f64), randn({2, 1}, f64), randn({2, 4}, f64)}));
  CHECK(gradcheck([](auto& in) { return cat({in[0].t(), in[1]}, 0); }, {randn({3, 2}, f64), randn({4, 3}, f64)}));
  CHECK(gradcheck([](auto& in) { return cat({in[0], in[0] * 2.0}, -1); }, {randn({2, 2, 2}, f64)}));
  CHECK(gradcheck([](auto& in) { return stack({in[0], in[1]}, 0); }, {randn({2, 3}, f64), randn({2, 3}, f64)}));
  CHECK(gradcheck([](auto& in) { return stack({in[0].t(), in[1]}, 2); }, {randn({3, 2}, f64), randn({2, 3}, f64)}));
  // only one input needs grad
  Tensor c = randn({2, 2}, f64);
  CHECK(gradcheck([&](auto& in) { return cat({c, in[0]}, 0); }, {randn({1, 2}, f64)}));
}

TEST_CASE("split / chunk: views with the right sizes") {
  Tensor x = arange(0, 10, 1, f64).reshape({5, 2});
  auto p = split(x, 2);
  REQUIRE(p.size() == 3);
  CHECK(p[0].shape() == Shape{2, 2});
  CHECK(p[2].shape() == Shape{1, 2});
  CHECK(p[2].to_vector<double>() == std::vector<double>{8, 9});
  CHECK(p[1].storage() == x.storage());  // a view
  auto q = split(x, std::vector<int64_t>{1, 0, 4}, 0);
  REQUIRE(q.size() == 3);
  CHECK(q[1].numel() == 0);
  CHECK(q[2].to_vector<double>() == std::vector<double>{2, 3, 4, 5, 6, 7, 8, 9});
  auto r = split(x, 1, -1);
  REQUIRE(r.size() == 2);
  CHECK(r[1].to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9});
  auto c = chunk(x, 2);
  REQUIRE(c.size() == 2);
  CHECK(c[0].shape() == Shape{3, 2});
  CHECK(c[1].shape() == Shape{2, 2});
  CHECK(chunk(x, 4).size() == 3);  // sizes 2, 2, 1 like torch.chunk
  CHECK(chunk(x, 10).size() == 5);
  CHECK(chunk(zeros({0, 2}), 3).size() == 3);

  CHECK_THROWS_AS(split(x, 0), kiln::Error);
  CHECK_THROWS_WITH_AS(split(x, std::vector<int64_t>{2, 2}), doctest::Contains("[5, 2]"), kiln::Error);
  CHECK_THROWS_AS(split(x, std::vector<int64_t>{6, -1}), kiln::Error);
  // sizes whose sum overflows int64: the split's own error (UBSan: no signed overflow)
  const int64_t big = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH_AS(split(x, std::vector<int64_t>{big, big, 2}), doctest::Contains("split: sizes"), kiln::Error);
  CHECK_THROWS_AS(split(x, 1, 2), kiln::Error);
  CHECK_THROWS_AS(chunk(x, 0), kiln::Error);
}

TEST_CASE("split / chunk: gradcheck") {
  manual_seed(32);
  CHECK(gradcheck([](auto& in) { auto p = split(in[0], 2, 1); return cat({p[2], p[0] * p[1]}, 1); },
                  {randn({3, 5}, f64)}));
  CHECK(gradcheck([](auto& in) { auto p = split(in[0], std::vector<int64_t>{1, 2}, 0); return cat({p[1], p[0]}, 0); },
                  {randn({3, 2}, f64)}));
  CHECK(gradcheck([](auto& in) { auto p = chunk(in[0].t(), 3, 0); return cat({p[2], p[0]}, 0); },
                  {randn({2, 5}, f64)}));
}

TEST_CASE("index_select: values, dtypes, errors") {
  Tensor x = arange(0, 12, 1, f64).reshape({3, 4});
  Tensor i = from_vector<int64_t>({2, 0, 2});
  CHECK(index_select(x, 0, i).to_vector<double>() == std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  Tensor y1 = index_select(x, 1, from_vector<int32_t>({3, 1}));
  CHECK(y1.shape() == Shape{3, 2});
  CHECK(y1.to_vector<double>() == std::vector<double>{3, 1, 7, 5, 11, 9});
  // non-contiguous input, int64 data, middle dim, empty index
  CHECK(index_select(x.t(), 0, from_vector<int64_t>({1})).to_vector<double>() == std::vector<double>{1, 5, 9});
  Tensor xi = arange(0, 8, 1, {.dtype = DType::int64}).reshape({2, 2, 2});
  CHECK(index_select(xi, 1, from_vector<int64_t>({1, 1})).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 3, 2, 3, 6, 7, 6, 7});
  CHECK(index_select(x, 0, from_vector<int64_t>({}, {0})).shape() == Shape{0, 4});

  CHECK_THROWS_WITH_AS(index_select(x, 0, from_vector<int64_t>({3})), doctest::Contains("index 3"), kiln::Error);
  CHECK_THROWS_WITH_AS(index_select(x, 1, from_vector<int64_t>({-1})), doctest::Contains("[3, 4]"), kiln::Error);
  CHECK_THROWS_AS(index_select(x, 2, i), kiln::Error);
  CHECK_THROWS_AS(index_select(x, 0, from_vector<int64_t>({0, 1}, {1, 2})), kiln::Error);
  CHECK_THROWS_AS(index_select(x, 0, T({0}, {1})), kiln::Error);
}

TEST_CASE("index_select: gradcheck (repeated indices accumulate)") {
  manual_seed(33);
  Tensor i = from_vector<int64_t>({2, 0, 2, 2});
  CHECK(gradcheck([&](auto& in) { return index_select(in[0], 0, i); }, {randn({3, 4}, f64)}));
  CHECK(gradcheck([&](auto& in) { return index_select(in[0], 1, i); }, {randn({2, 3, 2}, f64)}));
  CHECK(gradcheck([&](auto& in) { return index_select(in[0].t(), -1, i); }, {randn({3, 2}, f64)}));
  Tensor w = randn({3, 300}, f64).requires_grad_();
  sum(index_select(w, 0, i)).backward();
  CHECK(w.grad().at({2, 299}) == 3.0);
  CHECK(w.grad().at({0, 7}) == 1.0);
  CHECK(w.grad().at({1, 0}) == 0.0);
}

TEST_CASE("gather: values, dtypes, errors") {
  Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor i1 = from_vector<int64_t>({2, 0, 1, 1}, {2, 2});
  CHECK(gather(x, 1, i1).to_vector<double>() == std::vector<double>{3, 1, 5, 5});
  Tensor i0 = from_vector<int64_t>({1, 0, 1}, {1, 3});
  CHECK(gather(x, 0, i0).to_vector<double>() == std::vector<double>{4, 2, 6});
  // index smaller than the input in a non-gather dim, int32 index, non-contiguous input
  CHECK(gather(x, 1, from_vector<int32_t>({1}, {1, 1})).to_vector<double>() == std::vector<double>{2});
  CHECK(gather(x.t(), 0, from_vector<int64_t>({1, 0}, {1, 2})).to_vector<double>() == std::vector<double>{2, 4});
  // non-contiguous index
  Tensor it = from_vector<int64_t>({0, 2, 1, 0}, {2, 2}).t();  // {{0, 1}, {2, 0}}
  CHECK(gather(x, 1, it).to_vector<double>() == std::vector<double>{1, 2, 6, 4});
  Tensor xi = from_vector<int64_t>({10, 20, 30}, {3});
  CHECK(gather(xi, 0, from_vector<int64_t>({2, 2, 0})).to_vector<int64_t>() == std::vector<int64_t>{30, 30, 10});

  CHECK_THROWS_WITH_AS(gather(x, 1, from_vector<int64_t>({3}, {1, 1})), doctest::Contains("index 3"), kiln::Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, from_vector<int64_t>({0}, {1})), doctest::Contains("[2, 3]"), kiln::Error);
  CHECK_THROWS_WITH_AS(gather(x, 1, zeros({3, 1}, {.dtype = DType::int64})), doctest::Contains("[3, 1]"),
                       kiln::Error);
  CHECK_THROWS_AS(gather(x, 2, i1), kiln::Error);
  CHECK_THROWS_AS(gather(x, 0, from_vector<int64_t>({-1}, {1, 1})), kiln::Error);
  CHECK_THROWS_AS(gather(x, 0, zeros({1, 1})), kiln::Error);

  // a 0-dim input or index counts as 1-D, as in PyTorch
  const TensorOptions i64{.dtype = DType::int64};
  Tensor s = scalar_tensor(5.0, f64).requires_grad_();
  Tensor g0 = gather(s, 0, scalar_tensor(0.0, i64));
  CHECK(g0.dim() == 0);
  CHECK(g0.item() == 5.0);
  Tensor g3 = gather(s, -1, from_vector<int64_t>({0, 0, 0}));
  CHECK(g3.shape() == Shape{3});
  g3.backward(T({1, 2, 3}, {3}));
  CHECK(s.grad().item() == 6.0);
  CHECK(gather(T({1, 2, 3}, {3}), 0, scalar_tensor(2.0, i64)).item() == 3.0);
  CHECK(gather(s, 0, zeros({0}, i64)).numel() == 0);
  CHECK_THROWS_WITH_AS(gather(s, 1, scalar_tensor(0.0, i64)), doctest::Contains("dim"), kiln::Error);
  CHECK_THROWS_WITH_AS(gather(s, 0, scalar_tensor(1.0, i64)), doctest::Contains("index 1"), kiln::Error);
  CHECK_THROWS_AS(gather(s, 0, zeros({1, 1}, i64)), kiln::Error);
  CHECK_THROWS_AS(gather(x, 0, scalar_tensor(0.0, i64)), kiln::Error);
}

TEST_CASE("gather: gradcheck (scatter-add backward)") {
  manual_seed(34);
  Tensor i = from_vector<int64_t>({0, 2, 2, 1, 1, 1}, {2, 3});
  CHECK(gradcheck([&](auto& in) { return gather(in[0], 1, i); }, {randn({2, 3}, f64)}));
  Tensor j = from_vector<int64_t>({1, 1, 0, 1}, {2, 2});
  CHECK(gradcheck([&](auto& in) { return gather(in[0], 0, j); }, {randn({2, 3}, f64)}));
  CHECK(gradcheck([&](auto& in) { return gather(in[0].t(), 1, j); }, {randn({3, 2}, f64)}));
  Tensor k = randint(0, 3, {2, 4, 2});
  CHECK(gradcheck([&](auto& in) { return gather(in[0], 1, k); }, {randn({2, 3, 2}, f64)}));
  CHECK(gradcheck([&](auto& in) { return gather(in[0], 2, k.narrow(2, 0, 1).narrow(1, 0, 3)); },
                  {randn({2, 3, 3}, f64)}));
  // index size 1 along dim
  Tensor l = from_vector<int64_t>({2, 0}, {2, 1});
  CHECK(gradcheck([&](auto& in) { return gather(in[0], 1, l); }, {randn({2, 3}, f64)}));
}

TEST_CASE("shape ops: larger inputs, thread count does not change results") {
  manual_seed(35);
  const int saved = get_num_threads();
  Tensor a = randn({64, 300}), b = randn({64, 500});
  Tensor x = randn({64, 1000}), gi = randint(0, 1000, {64, 700}), si = randint(0, 64, {1000});
  Tensor g1 = randn({64, 700}), g2 = randn({1000, 1000});
  std::vector<std::vector<Tensor>> runs;
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    Tensor c = cat({a, b}, 1), s = stack({a, a}, 1);
    Tensor xa = x.clone().requires_grad_();
    gather(xa, 1, gi).backward(g1);
    Tensor xb = x.clone().requires_grad_();
    Tensor is = index_select(xb, 0, si);
    is.backward(g2);
    Tensor xt = x.t().clone().requires_grad_();  // gather along dim 0 of a transposed view
    gather(xt.t(), 1, gi).backward(g1);
    runs.push_back({c, s, xa.grad(), is, xb.grad(), xt.grad()});
  }
  set_num_threads(saved);
  for (size_t i = 0; i < runs[0].size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(runs[0][i], runs[1][i]) == 0.0);
  }
  CHECK(max_abs_diff(runs[0][0].narrow(1, 300, 500), b) == 0.0);
  CHECK(max_abs_diff(runs[0][1].select(1, 1), a) == 0.0);
  CHECK(max_abs_diff(runs[0][5].t(), runs[0][2]) == 0.0);
  // index_select rows equal gather with the index broadcast over columns
  Tensor rows = index_select(x, 0, si.narrow(0, 0, 10));
  CHECK(max_abs_diff(rows, gather(x, 0, si.narrow(0, 0, 10).reshape({10, 1}).expand({10, 1000}))) == 0.0);
}

TEST_CASE("cat skips 1-D tensors of shape [0] beside others, as PyTorch (the acc = cat({acc, x}) idiom)") {
  Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor acc = zeros({0}, {.dtype = DType::float32});
  Tensor y = cat({acc, x}, 1);
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.dtype() == DType::float64);  // the skipped tensor still took part in promotion
  CHECK(cat({x, zeros({0}, f64), x}, 0).shape() == Shape{4, 3});
  sum(cat({acc.to(DType::float64), x, acc.to(DType::float64)}, 0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>(6, 1.0));
  CHECK(cat({zeros({0}), zeros({0})}).shape() == Shape{0});
  CHECK_THROWS_AS(cat({zeros({0, 2}), x}, 1), Error);  // only 1-D [0] is skipped
  // the skipped tensor is still an input of the graph: an empty gradient, as in PyTorch (it got
  // none, and grad() said it was unused)
  Tensor e = zeros({0}, {.dtype = DType::float32, .requires_grad = true});
  Tensor x2 = T({1, 2}, {2}).requires_grad_();
  sum(cat({e, x2}, 0)).backward();
  REQUIRE(e.grad().defined());
  CHECK(e.grad().shape() == Shape{0});
  CHECK(e.grad().dtype() == DType::float32);
  CHECK(kiln::grad({sum(cat({x2, e}, 0))}, {e})[0].shape() == Shape{0});
}

TEST_CASE("views of 0-dim tensors check their dims; no-op views are new handles") {
  Tensor s = scalar_tensor(2.5, f64);
  CHECK(s.transpose(0, 0).item() == 2.5);  // used to crash
  CHECK(s.transpose(-1, 0).dim() == 0);
  CHECK(s.t().item() == 2.5);
  CHECK_THROWS_AS(s.transpose(0, 1), Error);
  CHECK_THROWS_AS(s.squeeze(3), Error);  // used to return s
  CHECK(s.squeeze(0).dim() == 0);
  CHECK_THROWS_AS(s.flatten(0, 2), Error);
  CHECK(s.flatten(0, -1).shape() == Shape{1});
  // a no-op transpose / t / expand / squeeze returns a new handle: changing its
  // requires_grad leaves the input alone, and gradients still flow
  Tensor v = T({1, 2, 3}, {3}).requires_grad_();
  for (Tensor w : {v.t(), v.transpose(0, -1), v.expand({3}), v.squeeze(0)}) {
    CHECK(!w.is_same(v));
    CHECK(w.requires_grad());
  }
  Tensor d = v.detach();
  Tensor e = d.expand({3});
  e.requires_grad_();
  CHECK(!d.requires_grad());
  sum(mul(v.t(), v.expand({3}))).backward();
  CHECK(v.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
}

TEST_CASE("pad (constant) and one_hot: PyTorch 2.15's values, gradients, errors") {
  using kiln::testing::error_of;
  const Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  auto v = [](const Tensor& t) { return t.to_vector<double>(); };
  CHECK(pad(x, {1, 2}).shape() == Shape{2, 6});
  CHECK(v(pad(x, {1, 2})) == std::vector<double>{0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0});
  CHECK(v(pad(x, {0, 0, 1, 0}, -1.0)) == std::vector<double>{-1, -1, -1, 1, 2, 3, 4, 5, 6});
  CHECK(v(pad(x, {-1, 1, 0, -1})) == std::vector<double>{2, 3, 0});  // negative amounts crop
  CHECK(pad(from_vector<int64_t>({7}, {1}), {2, 0}, 9).to_vector<int64_t>() == std::vector<int64_t>{9, 9, 7});
  CHECK(pad(x, {}).shape() == x.shape());
  CHECK(gradcheck([](auto& in) { return pad(in[0], {2, -1, 1, 1}, 0.5); }, {kiln::randn({2, 3, 4}, f64)}));
  CHECK(error_of([&] { pad(x, {1}); }).find("even") != std::string::npos);
  CHECK(error_of([&] { pad(x, {1, 1, 1, 1, 1, 1}); }).find("at most 2 per dimension") != std::string::npos);
  CHECK(error_of([&] { pad(x, {-2, -2}); }).find("negative size") != std::string::npos);

  const Tensor idx = from_vector<int64_t>({0, 2, 1, 0}, {2, 2});
  const Tensor oh = one_hot(idx);
  CHECK(oh.dtype() == DType::int64);
  CHECK(oh.shape() == Shape{2, 2, 3});
  CHECK(oh.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0});
  CHECK(one_hot(from_vector<int64_t>({1}, {1}), 4).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 0});
  CHECK(one_hot(from_vector<int64_t>({}, {0}), 3).shape() == Shape{0, 3});
  CHECK(error_of([&] { one_hot(idx, 2); }).find("class index 2") != std::string::npos);
  CHECK(error_of([&] { one_hot(from_vector<int64_t>({-1}, {1}), 3); }).find("-1") != std::string::npos);
  CHECK(error_of([&] { one_hot(x); }).find("int64") != std::string::npos);
}

TEST_CASE("pad modes reflect, replicate, circular: PyTorch 2.15's values (cropping too), gradients, errors") {
  using kiln::testing::error_of;
  const Tensor x = T({0, 1, 2, 3, 4}, {1, 5});
  auto v = [](const Tensor& t) { return t.to_vector<double>(); };
  using V = std::vector<double>;
  CHECK(v(pad(x, {4, 4}, PadMode::reflect)) == V{4, 3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1, 0});
  CHECK(v(pad(x, {-2, 3}, PadMode::reflect)) == V{2, 3, 4, 3, 2, 1});  // reflects the uncropped dim
  CHECK(v(pad(x, {3, -2}, PadMode::reflect)) == V{3, 2, 1, 0, 1, 2});
  CHECK(v(pad(x, {2, -1}, PadMode::replicate)) == V{0, 0, 0, 1, 2, 3});
  CHECK(v(pad(x, {-4, 5}, PadMode::replicate)) == V{4, 4, 4, 4, 4, 4});
  CHECK(v(pad(x, {5, 5}, PadMode::circular)) == V{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4});
  CHECK(v(pad(x, {-2, 3}, PadMode::circular)) == V{2, 3, 4, 2, 3, 4});  // wraps the cropped dim
  CHECK(v(pad(x, {3, -2}, PadMode::circular)) == V{0, 1, 2, 0, 1, 2});
  const Tensor m = T({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  CHECK(v(pad(m, {1, 1, 1, 0}, PadMode::reflect)) == V{5, 4, 5, 6, 5, 2, 1, 2, 3, 2, 5, 4, 5, 6, 5});
  CHECK(v(pad(m, {0, 1, 0, 1}, PadMode::replicate)) == V{1, 2, 3, 3, 4, 5, 6, 6, 4, 5, 6, 6});
  CHECK(pad(from_vector<int64_t>({7, 8}, {1, 2}), {1, 1}, PadMode::circular).to_vector<int64_t>() ==
        std::vector<int64_t>{8, 7, 8, 7});
  CHECK(pad(x, {1, 1}, PadMode::constant, 2.0).to_vector<double>() == V{2, 0, 1, 2, 3, 4, 2});
  for (PadMode mode : {PadMode::reflect, PadMode::replicate, PadMode::circular})
    CHECK(gradcheck([mode](auto& in) { return pad(in[0], {2, -1, 1, 2}, mode); }, {kiln::randn({2, 3, 4}, f64)}));
  CHECK(error_of([&] { pad(x, {5, 0}, PadMode::reflect); }).find("less than its size 5") != std::string::npos);
  CHECK(error_of([&] { pad(x, {-3, -2}, PadMode::reflect); }).find("empty") != std::string::npos);
  CHECK(error_of([&] { pad(T({}, {1, 0}), {1, 1}, PadMode::replicate); }).find("non-empty") != std::string::npos);
  CHECK(error_of([&] { pad(x, {6, 0}, PadMode::circular); }).find("more than once") != std::string::npos);
  CHECK(error_of([&] { pad(x, {4, -2}, PadMode::circular); }).find("size 3 after cropping") != std::string::npos);
  CHECK(error_of([&] { pad(x, {1, 1}, PadMode::reflect, 1.0); }).find("no fill value") != std::string::npos);
}

TEST_CASE("tril, triu, flip, roll, repeat: PyTorch 2.15's values, gradients, errors") {
  using kiln::testing::error_of;
  auto v = [](const Tensor& t) { return t.to_vector<double>(); };
  using V = std::vector<double>;
  const Tensor a = T({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  CHECK(v(tril(a)) == V{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  CHECK(v(tril(a, 1)) == V{1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12});
  CHECK(v(tril(a, -2)) == V{0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0});
  CHECK(v(triu(a)) == V{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(v(triu(a, 2)) == V{0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0});
  CHECK(v(triu(a, -1)) == V{1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12});
  CHECK(tril(ones({2, 2, 2}, {.dtype = DType::bool_})).to_vector<double>() == V{1, 0, 1, 1, 1, 0, 1, 1});
  CHECK(gradcheck([](auto& in) { return tril(in[0], -1); }, {kiln::randn({2, 3, 4}, f64)}));
  CHECK(gradcheck([](auto& in) { return triu(in[0], 1); }, {kiln::randn({4, 3}, f64)}));
  CHECK(error_of([] { tril(T({1, 2}, {2})); }).find("at least 2 dims") != std::string::npos);

  CHECK(v(flip(a, {0})) == V{9, 10, 11, 12, 5, 6, 7, 8, 1, 2, 3, 4});
  CHECK(v(flip(a, {-1, 0})) == V{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1});
  CHECK(v(flip(a, {})) == v(a));
  CHECK(flip(scalar_tensor(3.0), {0}).item() == 3.0);
  CHECK(gradcheck([](auto& in) { return flip(in[0], {0, 2}); }, {kiln::randn({2, 3, 4}, f64)}));
  CHECK(error_of([&] { flip(a, {0, -2}); }).find("twice") != std::string::npos);

  CHECK(v(roll(a, {1}, {1})) == V{4, 1, 2, 3, 8, 5, 6, 7, 12, 9, 10, 11});
  CHECK(v(roll(a, {-1, 5}, {0, 1})) == V{8, 5, 6, 7, 12, 9, 10, 11, 4, 1, 2, 3});
  CHECK(v(roll(a, {1})) == V{12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});  // flattened
  CHECK(gradcheck([](auto& in) { return roll(in[0], {2, -1}, {2, 0}); }, {kiln::randn({2, 3, 4}, f64)}));
  CHECK(error_of([&] { roll(a, {1, 2}, {0}); }).find("one shift per dim") != std::string::npos);

  const Tensor r = T({1, 2, 3}, {3});
  CHECK(v(repeat(r, {2})) == V{1, 2, 3, 1, 2, 3});
  CHECK(repeat(r, {2, 2}).shape() == Shape{2, 6});
  CHECK(v(repeat(T({1, 2}, {2, 1}), {1, 3})) == V{1, 1, 1, 2, 2, 2});
  CHECK(repeat(r, {2, 0}).shape() == Shape{2, 0});
  CHECK(gradcheck([](auto& in) { return repeat(in[0], {2, 1, 3}); }, {kiln::randn({3, 2}, f64)}));
  CHECK(error_of([&] { repeat(a, {2}); }).find("at least as many repeats") != std::string::npos);
}

TEST_CASE("movedim, unbind, diag, meshgrid, diff: PyTorch's layouts, gradients, errors") {
  manual_seed(92);
  const Tensor x = randn({2, 3, 4}, f64);
  CHECK(movedim(x, {0, 2}, {2, 0}).shape() == Shape{4, 3, 2});
  CHECK(movedim(x, 0, -1).shape() == Shape{3, 4, 2});
  CHECK(movedim(x, 0, -1).select(2, 1).select(0, 2).select(0, 3).item() == x.select(0, 1).select(0, 2).select(0, 3).item());
  CHECK(movedim(x, std::vector<int64_t>{1}, std::vector<int64_t>{0}).shape() == Shape{3, 2, 4});  // the list form
  CHECK_THROWS_AS(movedim(x, {0, 0}, {1, 2}), kiln::Error);
  const std::vector<Tensor> parts = unbind(x, 1);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].shape() == Shape{2, 4});
  CHECK(max_abs_diff(stack(parts, 1), x) == 0);
  // diag: a matrix's k-th diagonal, and a vector placed on one
  const Tensor m = T({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4});
  CHECK(diag(m).to_vector<double>() == std::vector<double>{1, 6, 11});
  CHECK(diag(m, 1).to_vector<double>() == std::vector<double>{2, 7, 12});
  CHECK(diag(m, 3).to_vector<double>() == std::vector<double>{4});
  CHECK(diag(m, -2).to_vector<double>() == std::vector<double>{9});
  CHECK(diag(m, 5).numel() == 0);
  const Tensor v = T({1, 2}, {2});
  CHECK(diag(v).to_vector<double>() == std::vector<double>{1, 0, 0, 2});
  CHECK(diag(v, 1).to_vector<double>() == std::vector<double>{0, 1, 0, 0, 0, 2, 0, 0, 0});
  CHECK(diag(v, -1).to_vector<double>() == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 2, 0});
  CHECK(diag(T({std::nan("")}, {1}), 1).to_vector<double>()[0] == 0);  // zeros stay zeros beside a NaN
  CHECK(gradcheck([](auto& in) { return diag(in[0], -1); }, {randn({4, 3}, f64)}));
  CHECK(gradcheck([](auto& in) { return diag(in[0], 2); }, {randn({3}, f64)}));
  CHECK_THROWS_AS(diag(x), kiln::Error);
  // meshgrid
  const Tensor a = T({1, 2, 3}, {3}), b = T({10, 20}, {2});
  const auto ij = meshgrid({a, b});
  CHECK(ij[0].shape() == Shape{3, 2});
  CHECK(ij[0].contiguous().to_vector<double>() == std::vector<double>{1, 1, 2, 2, 3, 3});
  CHECK(ij[1].contiguous().to_vector<double>() == std::vector<double>{10, 20, 10, 20, 10, 20});
  const auto xy = meshgrid({a, b}, MeshIndexing::xy);
  CHECK(xy[0].shape() == Shape{2, 3});
  CHECK(xy[0].contiguous().to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(xy[1].contiguous().to_vector<double>() == std::vector<double>{10, 10, 10, 20, 20, 20});
  CHECK(gradcheck([](auto& in) { return meshgrid({in[0], in[1]})[1] * meshgrid({in[0], in[1]})[0]; },
                  {randn({3}, f64), randn({2}, f64)}));
  // diff
  const Tensor s = T({1, 4, 9, 16, 25}, {5});
  CHECK(diff(s).to_vector<double>() == std::vector<double>{3, 5, 7, 9});
  CHECK(diff(s, 2).to_vector<double>() == std::vector<double>{2, 2, 2});
  CHECK(diff(s, 1, 0, T({0}, {1}), T({36}, {1})).to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9, 11});
  CHECK(diff(s, 9).numel() == 0);
  CHECK(diff(from_vector<int64_t>({1, 1, 0}, {3}).to(DType::bool_)).to(DType::int64).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1});  // bool: xor, as PyTorch
  CHECK(gradcheck([](auto& in) { return diff(in[0], 2, 0); }, {randn({5, 3}, f64)}));
  CHECK_THROWS_AS(diff(s, -1), kiln::Error);
}

TEST_CASE("scatter, scatter_add, index_add, index_copy, index_fill: values by hand, duplicates, gradients, errors") {
  const auto I = [](std::vector<int64_t> v, Shape s) { return from_vector(v, s, {.dtype = DType::int64}); };
  const Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor src = T({10, 20, 30, 40}, {2, 2});
  // scatter_add along dim 1: row 0 gets 10 at col 2 and 20 at col 0; row 1 gets 30 + 40 at col 1
  const Tensor ia = I({2, 0, 1, 1}, {2, 2});
  CHECK(scatter_add(x, 1, ia, src).to_vector<double>() == std::vector<double>{21, 2, 13, 4, 75, 6});
  // scatter: of two writes to one position the last along dim wins
  CHECK(scatter(x, 1, ia, src).to_vector<double>() == std::vector<double>{20, 2, 10, 4, 40, 6});
  CHECK(scatter(x, 0, I({1, 0}, {1, 2}), 9.0).to_vector<double>() == std::vector<double>{1, 9, 3, 9, 5, 6});
  // an index smaller than src: only its extent is read
  CHECK(scatter_add(x, 0, I({1}, {1, 1}), src).to_vector<double>() == std::vector<double>{1, 2, 3, 14, 5, 6});
  // x itself is untouched (out of place)
  CHECK(x.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  // index_add with duplicates and alpha; index_copy; index_fill
  CHECK(index_add(x, 1, I({2, 2}, {2}), src, 0.5).to_vector<double>() == std::vector<double>{1, 2, 18, 4, 5, 41});
  CHECK(index_copy(x, 0, I({1}, {1}), T({7, 8, 9}, {1, 3})).to_vector<double>() ==
        std::vector<double>{1, 2, 3, 7, 8, 9});
  CHECK(index_fill(x, 1, I({0, 2}, {2}), -1.0).to_vector<double>() == std::vector<double>{-1, 2, -1, -1, 5, -1});
  CHECK(index_fill(x, 0, I({1}, {}), 0.0).to_vector<double>() == std::vector<double>{1, 2, 3, 0, 0, 0});
  // integers stay integers, exactly
  const Tensor xi = x.to(DType::int64), si = src.to(DType::int64);
  const Tensor yi = scatter_add(xi, 1, ia, si);
  CHECK(yi.dtype() == DType::int64);
  CHECK(yi.to_vector<int64_t>() == std::vector<int64_t>{21, 2, 13, 4, 75, 6});
  CHECK(index_add(xi.to(DType::int32), 1, I({1, 1}, {2}), si.to(DType::int32), 2).to_vector<double>() ==
        std::vector<double>{1, 62, 3, 4, 145, 6});
  CHECK(scatter(xi.to(DType::uint8), 1, ia, si.to(DType::uint8)).to_vector<double>() ==
        std::vector<double>{20, 2, 10, 4, 40, 6});
  // bfloat16 sums run in float32 and round once
  const Tensor yb = scatter_add(x.to(DType::bfloat16), 1, ia, src.to(DType::bfloat16));
  CHECK(yb.dtype() == DType::bfloat16);
  CHECK(yb.to_vector<double>() == std::vector<double>{21, 2, 13, 4, 75, 6});
  // gradients (float64): x and the source; the index may be smaller than src
  manual_seed(41);
  const Tensor gx = randn({4, 5}, f64), gs = randn({3, 6}, f64), gi = randint(0, 4, {3, 5});
  CHECK(gradcheck([&](auto& t) { return scatter_add(t[0], 0, gi, t[1]); }, {gx, gs}));
  const Tensor distinct = argsort(randn({4, 5}), 0).narrow(0, 0, 3);
  CHECK(gradcheck([&](auto& t) { return scatter(t[0], 0, distinct, t[1]); }, {gx, gs}));
  CHECK(gradcheck([&](auto& t) { return scatter(t[0], 0, distinct, 3.0); }, {gx}));
  CHECK(gradcheck([&](auto& t) { return index_add(t[0], 1, I({4, 0, 4}, {3}), t[1], -2.0); },
                  {gx, randn({4, 3}, f64)}));
  CHECK(gradcheck([&](auto& t) { return index_copy(t[0], 1, I({4, 0}, {2}), t[1]); }, {gx, randn({4, 2}, f64)}));
  CHECK(gradcheck([&](auto& t) { return index_fill(t[0], 0, I({2}, {1}), 1.0); }, {gx}));
  // the value written over gets no gradient; the source's entries outside the index get 0
  Tensor xg = gx.clone().requires_grad_(), sg = gs.clone().requires_grad_();
  sum(scatter(xg, 0, distinct, sg)).backward();
  CHECK(sum(xg.grad()).item() == 20.0 - 15.0);
  CHECK(sum(sg.grad()).item() == 15.0);
  // errors
  CHECK_THROWS_WITH_AS(scatter_add(x, 1, I({3}, {1, 1}), src), doctest::Contains("out of range"), kiln::Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 1, I({0, 1}, {2}), src), doctest::Contains("as many dims"), kiln::Error);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, I({0, 0, 0, 0, 0, 0}, {3, 2}), src), doctest::Contains("no larger"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(scatter(x, 1, ia, src.to(DType::float32)), doctest::Contains("dtype"), kiln::Error);
  CHECK_THROWS_WITH_AS(index_add(x, 1, I({0}, {1}), src), doctest::Contains("source must have"), kiln::Error);
  CHECK_THROWS_WITH_AS(index_add(xi, 1, I({0, 1}, {2}), si, 0.5), doctest::Contains("alpha"), kiln::Error);
  CHECK_THROWS_WITH_AS(index_copy(x, 0, I({0, 1}, {1, 2}), x), doctest::Contains("0-D or 1-D"), kiln::Error);
  CHECK_THROWS_WITH_AS(index_fill(x, 2, I({0}, {1}), 1.0), doctest::Contains("dim"), kiln::Error);
  CHECK_THROWS_AS(scatter(x, 1, ia.to(DType::float64), src), kiln::Error);
}

TEST_CASE("nonzero and masked_select: row-major positions, broadcast masks, gradients, errors") {
  const Tensor z = T({0, 1, 0, 2, 0, 3}, {2, 3});
  const Tensor nz = nonzero(z);
  CHECK(nz.dtype() == DType::int64);
  CHECK(nz.shape() == Shape{3, 2});
  CHECK(nz.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 0, 1, 2});
  CHECK(nonzero(zeros({2, 2})).shape() == Shape{0, 2});
  CHECK(nonzero(T({5}, {})).shape() == Shape{1, 0});
  CHECK(nonzero(T({0}, {})).shape() == Shape{0, 0});
  // the mask (2, 1) broadcasts against x (2, 3): all of row 1
  const Tensor m = gt(T({-1, 1}, {2, 1}), 0.0);
  CHECK(masked_select(T({1, 2, 3, 4, 5, 6}, {2, 3}), m).to_vector<double>() == std::vector<double>{4, 5, 6});
  const Tensor m2 = gt(T({1, -1, 1, 1, -1, -1}, {2, 3}), 0.0);
  CHECK(masked_select(T({1, 2, 3, 4, 5, 6}, {2, 3}).t(), m2.t()).to_vector<double>() ==
        std::vector<double>{1, 4, 3});
  CHECK(gradcheck([&](auto& t) { return masked_select(t[0], m2); }, {randn({2, 3}, f64)}));
  CHECK(gradcheck([&](auto& t) { return masked_select(t[0], m); }, {randn({1, 3}, f64)}));  // x broadcast too
  CHECK_THROWS_WITH_AS(masked_select(z, z), doctest::Contains("must be bool"), kiln::Error);
  CHECK_THROWS_AS(masked_select(z, gt(randn({3, 2}), 0.0)), kiln::Error);
}
