// matmul, linear and linear_gelu: values by hand and against a naive triple-loop reference (1-D
// promotion, broadcast batch dims, transposed / sliced inputs), gradchecks in float64,
// 16-bit float paths and argument errors.
#include <doctest/doctest.h>
#include <cmath>
#include <string>
#include "gradcheck.h"
#include "kiln/ops/reference/gemm.h"

using namespace kiln;
using kiln::test::allclose;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::max_abs_diff;
using kiln::test::T;

namespace {

/// Naive torch.matmul in float64: promotes 1-D operands, broadcasts batch dims, and runs the
/// triple loop of ops/reference/gemm.h on each pair.
Tensor ref_matmul(const Tensor& a_in, const Tensor& b_in) {
  Shape as = a_in.shape(), bs = b_in.shape();
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  REQUIRE(bs[bs.size() - 2] == K);
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(ab.size(), bb.size());
  while (ab.size() < nb) ab.insert(ab.begin(), 1);
  while (bb.size() < nb) bb.insert(bb.begin(), 1);
  Shape batch(nb);
  for (size_t i = 0; i < nb; ++i) batch[i] = std::max(ab[i], bb[i]);
  auto av = a_in.to_vector<double>(), bv = b_in.to_vector<double>();  // row-major data
  const int64_t nbatch = shape_numel(batch);
  std::vector<double> out(size_t(nbatch * M * N), 0.0);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    // batch index -> offsets into a and b (row-major over their own batch shapes)
    int64_t rem = bi, aoff = 0, boff = 0, astr = 1, bstr = 1;
    for (int64_t d = int64_t(nb) - 1; d >= 0; --d) {
      int64_t idx = rem % batch[d];
      rem /= batch[d];
      aoff += (ab[d] == 1 ? 0 : idx) * astr;
      boff += (bb[d] == 1 ? 0 : idx) * bstr;
      astr *= ab[d];
      bstr *= bb[d];
    }
    reference::gemm<double>(false, false, M, N, K, av.data() + aoff * M * K, K, bv.data() + boff * K * N, N,
                            out.data() + bi * M * N, N);
  }
  Shape os = batch;
  if (!a1) os.push_back(M);
  if (!b1) os.push_back(N);
  return from_vector(out, os);
}

bool close_to_ref(const Tensor& got, const Tensor& ref, double tol) {
  if (got.shape() != ref.shape()) {
    MESSAGE("shape " << shape_str(got.shape()) << " vs reference " << shape_str(ref.shape()));
    return false;
  }
  double d = max_abs_diff(got, ref);
  if (d > tol) MESSAGE("max abs diff " << d);
  return d <= tol;
}

using kiln::test::error_of;

}  // namespace

TEST_CASE("matmul: values by hand") {
  Tensor a = T({1, 2, 3, 4}, {2, 2}), b = T({5, 6, 7, 8}, {2, 2});
  CHECK(matmul(a, b).to_vector<double>() == std::vector<double>{19, 22, 43, 50});
  // 1-D . 1-D: a 0-dim dot product
  Tensor d = matmul(T({1, 2, 3}, {3}), T({4, 5, 6}, {3}));
  CHECK(d.dim() == 0);
  CHECK(d.item() == 32.0);
  // 1-D @ 2-D and 2-D @ 1-D drop the promoted dim
  Tensor m = T({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor v = matmul(T({1, -1}, {2}), m);
  CHECK(v.shape() == Shape{3});
  CHECK(v.to_vector<double>() == std::vector<double>{-3, -3, -3});
  Tensor w = matmul(m, T({1, 0, -1}, {3}));
  CHECK(w.shape() == Shape{2});
  CHECK(w.to_vector<double>() == std::vector<double>{-2, -2});
  // float32 too
  CHECK(matmul(a.to(DType::float32), b.to(DType::float32)).dtype() == DType::float32);
  CHECK(matmul(a.to(DType::float32), b.to(DType::float32)).to_vector<double>() == std::vector<double>{19, 22, 43, 50});
  // empty inner dim gives zeros
  Tensor z = matmul(zeros({3, 0}), zeros({0, 2}));
  CHECK(z.shape() == Shape{3, 2});
  CHECK(z.to_vector<double>() == std::vector<double>(6, 0.0));
  CHECK(matmul(zeros({0, 4}), zeros({4, 2})).shape() == Shape{0, 2});
}

TEST_CASE("matmul: against the naive reference") {
  manual_seed(1);
  struct Case { Shape a, b; };
  std::vector<Case> cases = {
      {{7}, {7}},          {{5}, {5, 3}},          {{4, 5}, {5}},          {{6, 9}, {9, 4}},
      {{3, 4, 5}, {5, 2}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{3, 4}, {2, 4, 6}},    {{5}, {2, 5, 3}},
      {{2, 3, 5}, {5}},    {{16, 8, 9}, {16, 9, 7}},  {{1, 4, 3}, {6, 3, 2}}, {{2, 3, 1, 4}, {3, 4, 1}},
  };
  for (const auto& c : cases) {
    for (DType dt : {DType::float64, DType::float32}) {
      Tensor a = randn(c.a, {.dtype = dt}), b = randn(c.b, {.dtype = dt});
      CAPTURE(shape_str(c.a));
      CAPTURE(shape_str(c.b));
      CHECK(close_to_ref(matmul(a, b), ref_matmul(a, b), dt == DType::float64 ? 1e-12 : 1e-4));
    }
  }
  // bigger float32 products take Eigen's blocked (and threaded) path
  Tensor a = randn({70, 130}), b = randn({130, 90});
  CHECK(close_to_ref(matmul(a, b), ref_matmul(a, b), 1e-3));
  Tensor a3 = randn({3, 40, 64}), b3 = randn({64, 33});
  CHECK(close_to_ref(matmul(a3, b3), ref_matmul(a3, b3), 1e-3));
}

TEST_CASE("matmul: transposed and sliced inputs are read in place") {
  manual_seed(2);
  Tensor a = randn({5, 4}, f64), b = randn({6, 5}, f64);
  // a^T (4, 5) @ b^T (5, 6): both transposed views
  CHECK(close_to_ref(matmul(a.t(), b.t()), ref_matmul(a.t().contiguous(), b.t().contiguous()), 1e-12));
  CHECK(close_to_ref(matmul(a.t(), b.t().contiguous()), ref_matmul(a.t().contiguous(), b.t().contiguous()), 1e-12));
  // batched transposes and a column slice (row stride > cols)
  Tensor x = randn({3, 6, 4}, f64), y = randn({3, 6, 5}, f64);
  CHECK(close_to_ref(matmul(x.transpose(1, 2), y), ref_matmul(x.transpose(1, 2).contiguous(), y), 1e-12));
  Tensor big = randn({4, 10}, f64);
  Tensor s = big.narrow(1, 2, 5);  // (4, 5) with row stride 10
  CHECK(close_to_ref(matmul(s, b.t()), ref_matmul(s.contiguous(), b.t().contiguous()), 1e-12));
  // every other row: needs a copy (row stride 20 is fine, element stride 2 is not)
  Tensor st = big.slice(1, 0, 10, 2);  // (4, 5) with column stride 2
  CHECK(close_to_ref(matmul(st, b.t()), ref_matmul(st.contiguous(), b.t().contiguous()), 1e-12));
  // 1-D strided vector
  Tensor v = randn({10}, f64).slice(0, 0, 10, 2);
  CHECK(close_to_ref(matmul(v, a), ref_matmul(v.contiguous(), a), 1e-12));
  CHECK(close_to_ref(matmul(b, v), ref_matmul(b, v.contiguous()), 1e-12));
  // expanded (stride-0) batch dims
  Tensor e = randn({1, 4, 5}, f64).expand({3, 4, 5});
  Tensor f = randn({3, 5, 2}, f64);
  CHECK(close_to_ref(matmul(e, f), ref_matmul(e.contiguous(), f), 1e-12));
}

TEST_CASE("matmul: 16-bit floats compute in float32 and round") {
  manual_seed(3);
  Tensor a = randn({4, 8}), b = randn({8, 3});
  for (DType dt : {DType::float16, DType::bfloat16}) {
    Tensor r = matmul(a.to(dt), b.to(dt));
    CHECK(r.dtype() == dt);
    Tensor ref = matmul(a.to(dt).to(DType::float32), b.to(dt).to(DType::float32)).to(dt);
    CHECK(max_abs_diff(r, ref) == 0.0);
  }
}

TEST_CASE("matmul and linear in bf16 on the CPU: bf16 products summed in float32, rounded once") {
  // On a CPU with AVX512_BF16 these run ops/cpu/sgemm_bf16.cpp, elsewhere float32 GEMMs:
  // either way each result is the float64 product of the bf16 values to within float32
  // summation and one bf16 rounding.
  manual_seed(5);
  auto within = [](const Tensor& got, const Tensor& a, const Tensor& b, bool trans_b, Tensor add = Tensor()) {
    Tensor ref = ref_matmul(a.to(DType::float64), trans_b ? b.to(DType::float64).t().contiguous()
                                                          : b.to(DType::float64));
    if (add.defined()) ref = ref + add.to(DType::float64);
    const Tensor mag = ref_matmul(abs(a.to(DType::float64)), trans_b ? abs(b.to(DType::float64)).t().contiguous()
                                                                     : abs(b.to(DType::float64)));
    const Tensor err = abs(got.to(DType::float64) - ref) - (abs(ref) * (1.0 / 256) + mag * 1e-5);
    return max(err).item<double>() <= 0.0;
  };
  const DType bf = DType::bfloat16;
  Tensor a = randn({3, 37, 129}).to(bf), b = randn({129, 45}).to(bf);  // odd depth, batch folded into rows
  CHECK(within(matmul(a, b).reshape({111, 45}), a.reshape({111, 129}), b, false));
  Tensor p = randn({600, 64}).to(bf), q = randn({64, 50}).to(bf);  // big enough to round C on several threads
  CHECK(within(matmul(p, q), p, q, false));
  Tensor bb = randn({3, 129, 45}).to(bf);  // batched: one GEMM per entry
  for (int64_t i = 0; i < 3; ++i) CHECK(within(matmul(a, bb).select(0, i), a.select(0, i), bb.select(0, i), false));
  // linear forward and backward: x W^T + b, g W, g^T x
  Tensor x = randn({64, 96}).to(bf).requires_grad_(), w = randn({40, 96}).to(bf).requires_grad_();
  Tensor bias = randn({40}).to(bf);
  Tensor y = linear(x, w, bias);
  CHECK(y.dtype() == bf);
  CHECK(within(y, x.detach(), w.detach(), true, bias));
  Tensor g = randn({64, 40}).to(bf);
  y.backward(g);
  CHECK(x.grad().dtype() == bf);
  CHECK(within(x.grad(), g, w.detach(), false));
  CHECK(within(w.grad(), g.t().contiguous(), x.detach(), false));
  // a 2-D a times a batched b: dA sums the whole batch in float32 and rounds once (it added
  // the batch's bf16-rounded products, up to 64 ulps off where they cancel)
  Tensor a2 = randn({13, 33}).to(bf).requires_grad_(), b3 = randn({3, 33, 17}).to(bf);
  Tensor g3 = randn({3, 13, 17}).to(bf);
  matmul(a2, b3).backward(g3);
  CHECK(within(a2.grad(), g3.permute({1, 0, 2}).contiguous().reshape({13, 51}),
               b3.transpose(1, 2).contiguous().reshape({51, 33}), false));
}

TEST_CASE("matmul: gradcheck") {
  manual_seed(4);
  auto mm = [](std::vector<Tensor>& in) { return matmul(in[0], in[1]); };
  CHECK(gradcheck(mm, {randn({3, 4}, f64), randn({4, 5}, f64)}));
  CHECK(gradcheck(mm, {randn({4}, f64), randn({4}, f64)}));
  CHECK(gradcheck(mm, {randn({4}, f64), randn({4, 3}, f64)}));
  CHECK(gradcheck(mm, {randn({3, 4}, f64), randn({4}, f64)}));
  CHECK(gradcheck(mm, {randn({3}, f64), randn({2, 3, 2}, f64)}));
  CHECK(gradcheck(mm, {randn({2, 2, 3}, f64), randn({3}, f64)}));
  CHECK(gradcheck(mm, {randn({2, 3, 4}, f64), randn({4, 2}, f64)}));        // b without batch (folded)
  CHECK(gradcheck(mm, {randn({3, 4}, f64), randn({2, 4, 2}, f64)}));        // a without batch
  CHECK(gradcheck(mm, {randn({3, 4}, f64), randn({2, 3, 4, 2}, f64)}));     // ... two batch dims
  CHECK(gradcheck([](std::vector<Tensor>& in) { return matmul(in[0], in[1].transpose(1, 2)); },
                  {randn({3, 4}, f64), randn({2, 5, 4}, f64)}));             // ... b transposed
  CHECK(gradcheck(mm, {randn({2, 1, 3, 4}, f64), randn({3, 4, 2}, f64)}));  // broadcast batch dims
  CHECK(gradcheck(mm, {randn({1, 3, 2}, f64), randn({4, 2, 3}, f64)}));
  // transposed / non-contiguous inputs inside f
  CHECK(gradcheck([](std::vector<Tensor>& in) { return matmul(in[0].t(), in[1].t()); },
                  {randn({4, 3}, f64), randn({2, 4}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return matmul(in[0].transpose(1, 2), in[1]); },
                  {randn({2, 4, 3}, f64), randn({2, 4, 2}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return matmul(in[0].slice(1, 0, 6, 2), in[1].transpose(0, 1)); },
                  {randn({3, 6}, f64), randn({2, 3}, f64)}));
  // the same operand on both sides
  CHECK(gradcheck([](std::vector<Tensor>& in) { return matmul(in[0], in[0].t()); }, {randn({3, 4}, f64)}));
}

TEST_CASE("matmul: errors") {
  Tensor a = ones({2, 3}), b = ones({4, 5});
  CHECK_THROWS_AS(matmul(a, b), Error);
  std::string msg = error_of([&] { matmul(a, b); });
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[4, 5]") != std::string::npos);
  CHECK(error_of([] { matmul(ones({3}), ones({4})); }).find("[4]") != std::string::npos);
  msg = error_of([] { matmul(ones({2, 2, 3}), ones({3, 3, 4})); });  // batch 2 vs 3
  CHECK(msg.find("[2, 2, 3]") != std::string::npos);
  CHECK(msg.find("[3, 3, 4]") != std::string::npos);
  msg = error_of([] { matmul(ones({2, 2}), ones({2, 2}, f64)); });
  CHECK(msg.find("float64") != std::string::npos);
  CHECK_THROWS_AS(matmul(scalar_tensor(1.0), ones({2})), Error);
  CHECK_THROWS_WITH_AS(matmul(ones({2}, {.dtype = DType::bool_}), ones({2}, {.dtype = DType::bool_})),
                       doctest::Contains("bool"), Error);
  CHECK_THROWS_AS(matmul(ones({2}, {.dtype = DType::int64}), ones({2}, {.dtype = DType::int32})), Error);
  CHECK_THROWS_AS(matmul(Tensor(), ones({2})), Error);
}

TEST_CASE("matmul of integer tensors: exact, every rank and layout, wrapping on overflow as PyTorch") {
  manual_seed(5);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3}, {3}}, {{2, 3}, {3}}, {{3}, {3, 4}}, {{5, 3}, {3, 4}}, {{2, 1, 3, 4}, {5, 4, 6}}, {{4, 0}, {0, 3}},
      {{0, 2}, {2, 3}}, {{2, 3, 4}, {4, 2}}};
  for (DType dt : {DType::int64, DType::int32, DType::uint8}) {
    for (const auto& c : cases) {
      const Shape &sa = c.first, &sb = c.second;  // not a structured binding: clang 14's lambdas cannot capture one
      CAPTURE(dtype_name(dt));
      CAPTURE(shape_str(sa));
      const double hi = dt == DType::uint8 ? 6 : 100;  // products and sums stay exact in float64
      Tensor a = randint(dt == DType::uint8 ? 0 : -100, int64_t(hi), sa, {.dtype = dt});
      Tensor b = randint(dt == DType::uint8 ? 0 : -100, int64_t(hi), sb, {.dtype = dt});
      Tensor got = matmul(a, b);
      CHECK(got.dtype() == dt);
      Tensor ref = ref_matmul(a.to(DType::float64), b.to(DType::float64));
      CHECK(got.shape() == ref.shape());
      CHECK(got.to_vector<double>() == ref.to_vector<double>());
      if (sa.size() == 2 && sb.size() == 2) {  // transposed operands are read in place
        CHECK(matmul(b.t().contiguous().t().t(), a.t()).to_vector<double>() == ref.t().contiguous().to_vector<double>());
      }
    }
  }
  // PyTorch 2.15: uint8 [[200, 2]] @ [[2], [1]] is 146 (402 mod 256); int64 wraps mod 2^64
  CHECK(matmul(from_vector<uint8_t>({200, 2}, {1, 2}), from_vector<uint8_t>({2, 1}, {2, 1})).item<int64_t>() == 146);
  const int64_t big = std::numeric_limits<int64_t>::max();
  CHECK(matmul(from_vector<int64_t>({big, 1}), from_vector<int64_t>({2, 3})).item<int64_t>() == 1);  // 2*max+3 wraps to 1
  // linear as PyTorch 2.15: [[1, 2, 3]] with W [[1, 0, 1], [2, 2, 2]] and b [5, 6] is [[9, 18]]
  const Tensor x = from_vector<int64_t>({1, 2, 3}, {1, 3}), w = from_vector<int64_t>({1, 0, 1, 2, 2, 2}, {2, 3});
  CHECK(linear(x, w, from_vector<int64_t>({5, 6})).to_vector<int64_t>() == std::vector<int64_t>{9, 18});
  CHECK(linear(x, w).to_vector<int64_t>() == std::vector<int64_t>{4, 12});
  CHECK(linear(x, w).dtype() == DType::int64);
}

TEST_CASE("linear: values by hand") {
  Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = T({1, 0, 0, 0, 1, 1}, {2, 3});  // out 0 = x0, out 1 = x1 + x2
  Tensor b = T({10, 20}, {2});
  CHECK(linear(x, w, b).to_vector<double>() == std::vector<double>{11, 25, 14, 31});
  CHECK(linear(x, w).to_vector<double>() == std::vector<double>{1, 5, 4, 11});
  Tensor y1 = linear(T({1, 2, 3}, {3}), w, b);
  CHECK(y1.shape() == Shape{2});
  CHECK(y1.to_vector<double>() == std::vector<double>{11, 25});
  // (..., in) leading dims kept; matches matmul with W^T
  manual_seed(5);
  Tensor x3 = randn({2, 3, 4}), w3 = randn({5, 4}), b3 = randn({5});
  Tensor y3 = linear(x3, w3, b3);
  CHECK(y3.shape() == Shape{2, 3, 5});
  CHECK(close_to_ref(y3, ref_matmul(x3, w3.t().contiguous()) + b3.to(DType::float64), 1e-4));
  // non-contiguous x (transposed) and a column-sliced x
  Tensor xt = randn({4, 6}, f64).t();  // (6, 4)
  Tensor wt = randn({3, 4}, f64);
  CHECK(close_to_ref(linear(xt, wt), ref_matmul(xt.contiguous(), wt.t().contiguous()), 1e-12));
  Tensor xs = randn({5, 9}, f64).narrow(1, 3, 4);
  CHECK(close_to_ref(linear(xs, wt), ref_matmul(xs.contiguous(), wt.t().contiguous()), 1e-12));
  // 16-bit
  Tensor yb = linear(x3.to(DType::bfloat16), w3.to(DType::bfloat16), b3.to(DType::bfloat16));
  CHECK(yb.dtype() == DType::bfloat16);
  CHECK(max_abs_diff(yb, linear(x3.to(DType::bfloat16).to(DType::float32), w3.to(DType::bfloat16).to(DType::float32),
                                b3.to(DType::bfloat16).to(DType::float32))
                             .to(DType::bfloat16)) == 0.0);
}

TEST_CASE("linear: gradcheck") {
  manual_seed(6);
  auto lin = [](std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  CHECK(gradcheck(lin, {randn({4, 3}, f64), randn({2, 3}, f64), randn({2}, f64)}));
  CHECK(gradcheck(lin, {randn({2, 3, 4}, f64), randn({5, 4}, f64), randn({5}, f64)}));
  CHECK(gradcheck(lin, {randn({3}, f64), randn({2, 3}, f64), randn({2}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return linear(in[0], in[1]); },
                  {randn({4, 3}, f64), randn({2, 3}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return linear(in[0].t(), in[1], in[2]); },
                  {randn({3, 4}, f64), randn({2, 3}, f64), randn({2}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return linear(in[0], in[1].t(), in[2]); },
                  {randn({4, 3}, f64), randn({3, 2}, f64), randn({2}, f64)}));
}

TEST_CASE("linear: errors") {
  std::string msg = error_of([] { linear(ones({2, 3}), ones({4, 5})); });
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("[4, 5]") != std::string::npos);
  CHECK_THROWS_AS(linear(ones({2, 3}), ones({3})), Error);
  CHECK(error_of([] { linear(ones({2, 3}), ones({4, 3}), ones({5})); }).find("[5]") != std::string::npos);
  CHECK_THROWS_AS(linear(ones({2, 3}), ones({4, 3}, f64)), Error);
  CHECK_THROWS_AS(linear(ones({2, 3}), ones({4, 3}), ones({4}, f64)), Error);
  CHECK_THROWS_AS(linear(scalar_tensor(1.0), ones({4, 1})), Error);
}

TEST_CASE("linear_gelu: gelu(linear(x, W, b), tanh) from one node, values and gradients bit for bit on the CPU") {
  manual_seed(21);
  struct Case {
    Shape x;
    bool bias;
    bool transposed;  // x read through a transposed view
  };
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::float16})
    for (const Case& c : {Case{{2, 5, 8}, true, false}, Case{{7, 8}, false, false}, Case{{8}, true, false},
                          Case{{8, 6}, true, true}}) {
      INFO(dtype_name(dt) << " x " << shape_str(c.x) << (c.bias ? " with bias" : "") << (c.transposed ? " (x^T)" : ""));
      const Tensor x0 = randn(c.x).to(dt), w0 = randn({12, 8}).to(dt), b0 = c.bias ? randn({12}).to(dt) : Tensor();
      const Tensor g = randn({120}).to(dt);  // upstream gradients: the first y.numel() of them
      auto run = [&](bool fused) {
        Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
        Tensor b = c.bias ? b0.clone().requires_grad_() : Tensor();
        const Tensor xin = c.transposed ? x.t() : x;
        Tensor y = fused ? linear_gelu(xin, w, b) : gelu(linear(xin, w, b), GeluApprox::tanh);
        if (fused) CHECK(y.grad_fn()->name == "linear_gelu");
        const Tensor gy = g.narrow(0, 0, y.numel()).reshape(y.shape());
        y.backward(gy);
        return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), c.bias ? b.grad() : zeros({1})};
      };
      const auto fused = run(true), twoops = run(false);
      CHECK(fused[0].dtype() == dt);
      for (size_t i = 0; i < fused.size(); ++i) {
        INFO("output " << i << " (y, dx, dW, db)");
        CHECK(fused[i].shape() == twoops[i].shape());
        CHECK(max_abs_diff(fused[i], twoops[i]) == 0.0);
      }
    }
}

TEST_CASE("linear_gelu: gradcheck, second derivatives, autocast, errors") {
  manual_seed(22);
  auto lg = [](std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2]); };
  CHECK(gradcheck(lg, {randn({4, 3}, f64), randn({5, 3}, f64), randn({5}, f64)}));
  CHECK(gradcheck(lg, {randn({2, 3, 4}, f64), randn({6, 4}, f64), randn({6}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return linear_gelu(in[0].t(), in[1]); },
                  {randn({3, 4}, f64), randn({2, 3}, f64)}));
  // the backward under create_graph recomputes the pre-activation from the live inputs
  CHECK(kiln::test::gradgradcheck(lg, {randn({3, 4}, f64), randn({2, 4}, f64), randn({2}, f64)}));
  {
    autocast ac(DType::bfloat16);  // a GEMM op: runs in bf16, as linear does
    Tensor x = randn({4, 8}), w = randn({6, 8}), b = randn({6});
    Tensor y = linear_gelu(x, w, b);
    CHECK(y.dtype() == DType::bfloat16);
    CHECK(max_abs_diff(y, gelu(linear(x, w, b), GeluApprox::tanh)) == 0.0);
  }
  {
    NoGradGuard ng;  // no backward: no pre-activation kept, no node
    Tensor x = randn({5, 8}).requires_grad_(), w = randn({6, 8}), b = randn({6});
    Tensor y = linear_gelu(x, w, b);
    CHECK(y.grad_fn() == nullptr);
    CHECK(max_abs_diff(y, gelu(linear(x, w, b), GeluApprox::tanh)) == 0.0);
  }
  std::string msg = error_of([] { linear_gelu(ones({2, 3}), ones({4, 5})); });
  CHECK(msg.find("linear_gelu") != std::string::npos);
  CHECK(msg.find("[4, 5]") != std::string::npos);
  CHECK(error_of([] { linear_gelu(ones({2, 3}), ones({4, 3}), ones({5})); }).find("[5]") != std::string::npos);
  CHECK(error_of([] { linear_gelu(ones({2, 3}, {.dtype = DType::int64}), ones({4, 3}, {.dtype = DType::int64})); })
            .find("linear_gelu") != std::string::npos);
  CHECK_THROWS_AS(linear_gelu(ones({2, 3}), ones({4, 3}, f64)), Error);
}

TEST_CASE("mm, bmm, addmm, baddbmm, outer, trace, cdist: values, gradients, errors") {
  manual_seed(91);
  const Tensor a = randn({3, 4}, f64), b = randn({4, 5}, f64), in = randn({5}, f64);
  CHECK(allclose(mm(a, b), matmul(a, b)));
  CHECK(allclose(addmm(in, a, b, 0.5, 2.0), add(mul(in, 0.5), mul(matmul(a, b), 2.0))));
  // beta == 0 ignores the input, NaN included (PyTorch's rule)
  const Tensor nan_in = full({3, 5}, std::nan(""), {.dtype = DType::float64});
  CHECK(allclose(addmm(nan_in, a, b, 0.0, 1.0), matmul(a, b)));
  const Tensor ba = randn({2, 3, 4}, f64), bb = randn({2, 4, 2}, f64), bi = randn({3, 2}, f64);
  CHECK(allclose(bmm(ba, bb), matmul(ba, bb)));
  CHECK(allclose(baddbmm(bi, ba, bb, 0.3, -1.0), sub(mul(bi, 0.3), matmul(ba, bb))));
  CHECK(gradcheck([](auto& x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); }, {in, a, b}));
  CHECK(gradcheck([](auto& x) { return baddbmm(x[0], x[1], x[2], 0.3, -1.0); }, {bi, ba, bb}));
  const Tensor v = T({1, 2, 3}, {3}), w = T({4, 5}, {2});
  CHECK(outer(v, w).to_vector<double>() == std::vector<double>{4, 5, 8, 10, 12, 15});
  CHECK(gradcheck([](auto& x) { return outer(x[0], x[1]); }, {v, w}));
  const Tensor s = T({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(trace(s).item() == 6);  // 1 + 5
  CHECK(gradcheck([](auto& x) { return trace(x[0]); }, {randn({4, 3}, f64)}));
  // cdist against the pairwise definition; rows that coincide give 0 and a 0 gradient
  Tensor x1 = randn({2, 5, 3}, f64), x2 = randn({2, 4, 3}, f64);
  x2 = cat({x2.narrow(1, 0, 1), x1.narrow(1, 2, 1), x2.narrow(1, 2, 2)}, 1);
  for (double p : {2.0, 1.0, 3.0, double(INFINITY)}) {
    CAPTURE(p);
    const Tensor d = cdist(x1, x2, p);
    CHECK(d.shape() == Shape{2, 5, 4});
    CHECK(d.to_vector<double>()[2 * 4 + 1] == 0.0);
    CHECK(d.select(0, 1).select(0, 3).select(0, 2).item() ==
          doctest::Approx(vector_norm(sub(x1.select(0, 1).select(0, 3), x2.select(0, 1).select(0, 2)), p).item()));
  }
  CHECK(gradcheck([](auto& x) { return cdist(x[0], x[1]); }, {randn({4, 3}, f64), randn({2, 3}, f64)}));
  CHECK(gradcheck([](auto& x) { return cdist(x[0], x[1], 1.5); }, {randn({4, 3}, f64), randn({2, 3}, f64)}));
  CHECK_THROWS_AS(mm(ba, b), kiln::Error);
  CHECK_THROWS_AS(bmm(a, b), kiln::Error);
  CHECK_THROWS_AS(bmm(ba, randn({3, 4, 2})), kiln::Error);
  CHECK_THROWS_AS(addmm(randn({4}), a, b), kiln::Error);
  CHECK_THROWS_AS(outer(a, v), kiln::Error);
  CHECK_THROWS_AS(trace(v), kiln::Error);
  CHECK_THROWS_AS(cdist(randn({4, 3}), randn({4, 2})), kiln::Error);
}

namespace {

/// A naive einsum over letters only, with an explicit output: loops over every assignment
/// of the subscripts and adds the product of the operands' entries to the output's.
Tensor ref_einsum(const std::string& lhs, const std::string& out, const std::vector<Tensor>& ops) {
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',') terms.emplace_back();
    else terms.back().push_back(c);
  }
  std::string letters;
  std::vector<int64_t> size(128, 0);
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) {
      const char c = terms[i][d];
      if (letters.find(c) == std::string::npos) letters += c;
      size[size_t(c)] = std::max(size[size_t(c)], ops[i].size(int64_t(d)));
    }
  Shape os;
  for (char c : out) os.push_back(size[size_t(c)]);
  std::vector<double> y(size_t(shape_numel(os)), 0.0);
  std::vector<std::vector<double>> v;
  for (const Tensor& t : ops) v.push_back(t.contiguous().to_vector<double>());
  std::vector<int64_t> at(128, 0);
  for (;;) {
    double p = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      int64_t off = 0;
      for (size_t d = 0; d < terms[i].size(); ++d) {
        const int64_t s = ops[i].size(int64_t(d));
        off = off * s + (s == 1 ? 0 : at[size_t(terms[i][d])]);  // size-1 dims broadcast
      }
      p *= v[i][size_t(off)];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[size_t(c)] + at[size_t(c)];
    y[size_t(o)] += p;
    size_t k = 0;
    for (; k < letters.size(); ++k) {
      const size_t c = size_t(letters[letters.size() - 1 - k]);
      if (++at[c] < size[c]) break;
      at[c] = 0;
    }
    if (k == letters.size()) break;
  }
  return from_vector(y, os);
}

}  // namespace

TEST_CASE("einsum: against the naive loop, implicit outputs, ellipsis, diagonals, gradients, errors") {
  manual_seed(92);
  struct Case {
    std::string lhs, out;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk", "ik", {{3, 4}, {4, 5}}},          {"bij,bjk", "bik", {{2, 3, 4}, {2, 4, 5}}},
      {"ij", "ji", {{3, 4}}},                     {"ii", "i", {{4, 4}}},
      {"ii", "", {{4, 4}}},                       {"iij", "j", {{3, 3, 2}}},
      {"i,j", "ij", {{3}, {4}}},                  {"bhqd,bhkd", "bhqk", {{2, 3, 4, 5}, {2, 3, 6, 5}}},
      {"ij,jk,kl", "il", {{2, 3}, {3, 4}, {4, 5}}}, {"ijk,ikl", "jl", {{3, 2, 4}, {3, 4, 5}}},
      {"ab,ab", "a", {{3, 4}, {3, 4}}},           {"a,b,c", "cab", {{2}, {3}, {4}}},
      {"ij,ij,ij", "ij", {{2, 3}, {2, 3}, {1, 3}}}, {"bn,anm,bm", "ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"bi,bi", "b", {{3, 1}, {1, 4}}},           {"Ab,bC", "AC", {{2, 3}, {3, 4}}},
      {"ij,jk", "ik", {{3, 1}, {4, 5}}},          {"ijk", "", {{2, 3, 4}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.lhs);
    std::vector<Tensor> ops;
    for (const Shape& s : c.shapes) ops.push_back(randn(s, f64));
    const Tensor y = einsum(c.lhs + "->" + c.out, ops);
    CHECK(close_to_ref(y, ref_einsum(c.lhs, c.out, ops), 1e-12));
    CHECK(gradcheck([&](auto& x) { return einsum(c.lhs + "->" + c.out, x); }, ops));
  }
  const Tensor a = randn({3, 4}, f64), b = randn({4, 5}, f64), sq = randn({4, 4}, f64), v = randn({4}, f64);
  // no "->": "..." then the subscripts used once, alphabetically (capitals first); spaces ignored
  CHECK(allclose(einsum("ij,jk", {a, b}), matmul(a, b)));
  CHECK(allclose(einsum("ba", {a}), a.t()));
  CHECK(allclose(einsum("ii", {sq}), trace(sq)));
  CHECK(allclose(einsum("i,i", {v, v}), sum(mul(v, v))));
  CHECK(allclose(einsum(" i j , j k -> i k ", {a, b}), matmul(a, b)));
  CHECK(allclose(einsum("bA", {b}), b.t()));  // "Ab": capitals sort first
  // "...": broadcast batch dims, right-aligned; left out of an explicit output, summed
  const Tensor x = randn({2, 1, 3, 4}, f64), w = randn({5, 4, 2}, f64);
  CHECK(allclose(einsum("...ij,...jk", {x, w}), matmul(x, w)));
  CHECK(allclose(einsum("...ij->...ji", {x}), x.transpose(-1, -2)));
  CHECK(allclose(einsum("ij...->ij", {x.permute({2, 3, 0, 1})}), sum(x, {0, 1})));
  CHECK(allclose(einsum("...,...->...", {a, v}), mul(a, v)));
  CHECK(gradcheck([](auto& t) { return einsum("...ij,...jk", t); }, {x, w}));
  // 0-dim operands and empty dims
  CHECK(einsum(",->", {T({2.0}, {}), T({3.0}, {})}).item() == 6.0);
  CHECK(einsum("i,i->", {randn({0}, f64), randn({0}, f64)}).item() == 0.0);
  CHECK(einsum("ij,jk", {randn({0, 3}, f64), randn({3, 2}, f64)}).shape() == Shape{0, 2});
  // integer operands multiply exactly (on the CPU)
  const Tensor ia = T({1, 2, 3, 4}, {2, 2}).to(DType::int64);
  CHECK(einsum("ij,jk->ik", {ia, ia}).to_vector<double>() == std::vector<double>{7, 10, 15, 22});
  auto err = [](const std::string& eq, const std::vector<Tensor>& ops) { return error_of([&] { einsum(eq, ops); }); };
  CHECK(err("ij,jk->ik", {a, a}).find("do not broadcast") != std::string::npos);
  CHECK(err("ij,jk->ik", {a}).find("names 2 operands but 1 were given") != std::string::npos);
  CHECK(err("ijk->i", {a}).find("has 2 dims") != std::string::npos);
  CHECK(err("i1->i", {v}).find("invalid subscript '1'") != std::string::npos);
  CHECK(err("ij->ii", {a}).find("only once in the output") != std::string::npos);
  CHECK(err("ij->k", {a}).find("must appear in an input") != std::string::npos);
  CHECK(err("ii->i", {a}).find("different sizes") != std::string::npos);
  CHECK(err("i..j->", {v}).find("\"...\"") != std::string::npos);
  CHECK_THROWS_AS(einsum("ij", {}), kiln::Error);
}

TEST_CASE("tensordot and kron: values, gradients, errors") {
  manual_seed(93);
  const Tensor a = randn({2, 3, 4}, f64), b = randn({3, 4, 5}, f64);
  CHECK(allclose(tensordot(a, b, 2), einsum("ijk,jkl->il", {a, b})));
  CHECK(allclose(tensordot(a, b, {2, 1}, {1, 0}), einsum("ijk,jkl->il", {a, b})));
  CHECK(allclose(tensordot(a, b, 0), einsum("ijk,lmn->ijklmn", {a, b})));
  CHECK(gradcheck([](auto& x) { return tensordot(x[0], x[1], {1}, {0}); }, {a, b}));
  CHECK_THROWS_AS(tensordot(a, b, {0}, {0}), kiln::Error);       // sizes 2 and 3
  CHECK_THROWS_AS(tensordot(a, b, {1, 1}, {0, 1}), kiln::Error);  // dim 1 twice
  CHECK_THROWS_AS(tensordot(a, b, {1}, {0, 1}), kiln::Error);
  CHECK_THROWS_AS(tensordot(a, b, 4), kiln::Error);
  // kron: [[1,2],[3,4]] (x) [[0,1],[1,0]] by hand, then a lower-rank operand
  const Tensor m = T({1, 2, 3, 4}, {2, 2}), p = T({0, 1, 1, 0}, {2, 2});
  CHECK(kron(m, p).to_vector<double>() ==
        std::vector<double>{0, 1, 0, 2, 1, 0, 2, 0, 0, 3, 0, 4, 3, 0, 4, 0});
  CHECK(kron(T({1, 2}, {2}), m).shape() == Shape{2, 4});
  CHECK(kron(T({1, 2}, {2}), m).to_vector<double>() == std::vector<double>{1, 2, 2, 4, 3, 4, 6, 8});
  CHECK(gradcheck([](auto& x) { return kron(x[0], x[1]); }, {randn({2, 3}, f64), randn({3, 1, 2}, f64)}));
}
