// nn functions: dropout (Philox mask: repeatable, keep rate, exact scaling, backward),
// embedding (values, scatter-add backward, padding_idx, index errors) and fused scaled
// dot-product attention (values vs composed ops, causal, Tq != Tk, gradchecks, errors),
// also over a packed qkv tensor (scaled_dot_product_attention_packed); unfold / fold,
// bilinear, local_response_norm, channel_shuffle, embedding_bag, grid_sample, affine_grid.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include "gradcheck.h"
#include "kiln/ops/cpu/sgemm.h"
#include "kiln/ops/nn_math.h"
#include "kiln/ops/shape_ops.h"

using namespace kiln;
using kiln::test::allclose;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::max_abs_diff;
using kiln::test::T;

// ---------------------------------------------------------------- dropout

TEST_CASE("dropout: identity cases and argument errors") {
  Tensor x = randn({3, 4});
  CHECK(dropout(x, 0.5, false).is_same(x));
  CHECK(dropout(x, 0.0, true).is_same(x));
  CHECK_THROWS_WITH_AS(dropout(x, -0.1), doctest::Contains("-0.1"), kiln::Error);
  CHECK_THROWS_WITH_AS(dropout(x, 1.5), doctest::Contains("[3, 4]"), kiln::Error);
  CHECK_THROWS_AS(dropout(ones({3}, {.dtype = DType::int64}), 0.5), kiln::Error);
  CHECK_THROWS_AS(dropout(Tensor(), 0.5), kiln::Error);
  // p == 1 drops everything (PyTorch), gradient zero too
  Tensor xg = randn({5}, f64).requires_grad_();
  Tensor y = dropout(xg, 1.0);
  CHECK(y.to_vector<double>() == std::vector<double>(5, 0.0));
  sum(y).backward();
  CHECK(xg.grad().to_vector<double>() == std::vector<double>(5, 0.0));
}

TEST_CASE("dropout: seeded mask, keep rule, keep rate and exact scaling") {
  const double p = 0.3;
  const int64_t n = 1 << 20;
  Tensor x = ones({n});
  manual_seed(7);
  RngState s = get_rng_state();
  Tensor y1 = dropout(x, p);
  Tensor y2 = dropout(x, p);
  manual_seed(7);
  Tensor y3 = dropout(x, p);
  CHECK(max_abs_diff(y1, y3) == 0.0);   // same seed -> same mask
  CHECK(max_abs_diff(y1, y2) > 0.0);    // the generator moved on
  CHECK(get_rng_state().offset == uint64_t(n / 4));
  auto v = y1.to_vector<float>();
  const float scale = float(1.0 / (1.0 - p));
  int64_t kept = 0;
  bool exact = true, rule = true;
  for (int64_t i = 0; i < n; ++i) {
    if (v[size_t(i)] != 0.0f) {
      ++kept;
      exact = exact && v[size_t(i)] == scale;
    }
    if (i < 4096) rule = rule && ((v[size_t(i)] != 0.0f) == math::dropout_keep(s.seed, s.offset, uint64_t(i), float(p)));
  }
  CHECK(exact);
  CHECK(rule);
  CHECK(std::fabs(double(kept) / double(n) - (1 - p)) < 0.003);
}

TEST_CASE("dropout: backward, non-contiguous input and 16-bit floats") {
  manual_seed(11);
  Tensor x = randn({6, 7}, f64).requires_grad_();
  Tensor y = dropout(x, 0.4);
  Tensor g = randn({6, 7}, f64);
  y.backward(g);
  // dx = g * mask / (1 - p), the mask being where y != 0
  Tensor mask = ne(y.detach(), 0.0).to(DType::float64);
  CHECK(max_abs_diff(x.grad(), g * mask / 0.6) < 1e-12);
  CHECK(max_abs_diff(y.detach(), x.detach() * mask / 0.6) < 1e-12);

  // gradcheck: reseed inside f so every evaluation draws the same mask
  CHECK(gradcheck([](auto& in) { manual_seed(3); return dropout(in[0], 0.25); }, {randn({4, 5}, f64)}));
  CHECK(gradcheck([](auto& in) { manual_seed(3); return dropout(in[0].transpose(0, 1), 0.5); }, {randn({4, 5}, f64)}));

  // a non-contiguous input uses its logical (row-major) order
  Tensor a = randn({5, 8});
  manual_seed(5);
  Tensor ya = dropout(a.t(), 0.5);
  manual_seed(5);
  Tensor yb = dropout(a.t().contiguous(), 0.5);
  CHECK(max_abs_diff(ya, yb) == 0.0);

  Tensor h = randn({100}).to(DType::bfloat16);
  Tensor yh = dropout(h, 0.5);
  CHECK(yh.dtype() == DType::bfloat16);
  auto hv = h.to_vector<float>(), yv = yh.to_vector<float>();
  bool ok = true;
  for (size_t i = 0; i < hv.size(); ++i) ok = ok && (yv[i] == 0.0f || yv[i] == hv[i] * 2.0f);
  CHECK(ok);
}

// ---------------------------------------------------------------- embedding

TEST_CASE("embedding: values, index dtypes and shapes") {
  Tensor w = arange(0, 12, 1, f64).reshape({4, 3});  // row r = {3r, 3r+1, 3r+2}
  Tensor idx = from_vector<int64_t>({0, 3, 3, 1}, {2, 2});
  Tensor y = embedding(idx, w);
  CHECK(y.shape() == Shape{2, 2, 3});
  CHECK(y.to_vector<double>() == std::vector<double>{0, 1, 2, 9, 10, 11, 9, 10, 11, 3, 4, 5});
  Tensor y32 = embedding(from_vector<int32_t>({2, 0}, {2}), w);
  CHECK(y32.to_vector<double>() == std::vector<double>{6, 7, 8, 0, 1, 2});
  // a 0-dim index gives one row; a non-contiguous weight works
  CHECK(embedding(scalar_tensor(1, {.dtype = DType::int64}), w).shape() == Shape{3});
  Tensor wt = arange(0, 12, 1, f64).reshape({3, 4}).t();  // (4, 3), non-contiguous
  CHECK(embedding(from_vector<int64_t>({1}), wt).to_vector<double>() == std::vector<double>{1, 5, 9});
  // integer weights gather too
  Tensor wi = from_vector<int64_t>({5, 6, 7, 8}, {2, 2});
  CHECK(embedding(from_vector<int64_t>({1, 0}), wi).to_vector<int64_t>() == std::vector<int64_t>{7, 8, 5, 6});
}

TEST_CASE("embedding: backward scatter-adds, padding_idx gets no gradient") {
  Tensor w = randn({5, 3}, f64).requires_grad_();
  Tensor idx = from_vector<int64_t>({1, 2, 1, 4, 1, 2}, {2, 3});
  Tensor y = embedding(idx, w, 2);
  sum(y).backward();
  // row r gets the count of r among the indices; padding row 2 and unused rows get 0
  std::vector<double> expect;
  for (double c : {0.0, 3.0, 0.0, 0.0, 1.0})
    for (int j = 0; j < 3; ++j) expect.push_back(c);
  CHECK(w.grad().to_vector<double>() == expect);
  // the forward still returns the padding row's values
  CHECK(max_abs_diff(y.select(0, 1).select(0, 2), w.detach().select(0, 2)) == 0.0);

  Tensor idx2 = from_vector<int64_t>({0, 3, 3, 1, 0, 0, 2, 3}, {2, 4});
  CHECK(gradcheck([&](auto& in) { return embedding(idx2, in[0]); }, {randn({4, 3}, f64)}));
  // with padding_idx: the same gradient except the padding row, which gets none (the
  // forward still reads that row, so a numeric check would see a slope there)
  Tensor wa = randn({4, 3}, f64).requires_grad_(), wb = wa.detach().clone().requires_grad_();
  Tensor gy = randn({2, 4, 3}, f64);
  embedding(idx2, wa).backward(gy);
  embedding(idx2, wb, 0).backward(gy);
  CHECK(max_abs_diff(wb.grad().narrow(0, 1, 3), wa.grad().narrow(0, 1, 3)) == 0.0);
  CHECK(wb.grad().select(0, 0).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(wa.grad().select(0, 0).to_vector<double>() != std::vector<double>{0, 0, 0});
  // a negative padding_idx counts from the end, as in PyTorch: -4 is row 0 of 4
  Tensor wc = wa.detach().clone().requires_grad_();
  embedding(idx2, wc, -4).backward(gy);
  CHECK(max_abs_diff(wc.grad(), wb.grad()) == 0.0);
  CHECK(gradcheck([&](auto& in) { return embedding(idx2, in[0].t()); }, {randn({70, 4}, f64)}));
  // wide rows: several column blocks in the backward
  Tensor idx3 = from_vector<int64_t>({2, 0, 2});
  CHECK(gradcheck([&](auto& in) { return embedding(idx3, in[0]); }, {randn({3, 150}, f64)}));
}

TEST_CASE("embedding: errors") {
  Tensor w = randn({5, 3});
  CHECK_THROWS_WITH_AS(embedding(from_vector<int64_t>({0, 5}), w), doctest::Contains("index 5"), kiln::Error);
  CHECK_THROWS_WITH_AS(embedding(from_vector<int64_t>({0, 5}), w), doctest::Contains("V = 5"), kiln::Error);
  CHECK_THROWS_WITH_AS(embedding(from_vector<int32_t>({-1}), w), doctest::Contains("index -1"), kiln::Error);
  CHECK_THROWS_AS(embedding(T({0, 1}, {2}), w), kiln::Error);  // float indices
  CHECK_THROWS_WITH_AS(embedding(from_vector<int64_t>({0}), randn({5})), doctest::Contains("[5]"), kiln::Error);
  CHECK_THROWS_AS(embedding(from_vector<int64_t>({0}), w, 5), kiln::Error);
  CHECK_THROWS_WITH_AS(embedding(from_vector<int64_t>({0}), w, -6), doctest::Contains("-V <= padding_idx"), kiln::Error);
  CHECK_THROWS_AS(embedding(Tensor(), w), kiln::Error);
}

// ---------------------------------------------------------------- attention

namespace {
// softmax(q k^T / sqrt(d) + mask) v from composed ops (the reference).
Tensor attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  Tensor s = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(-1))));
  if (causal) {
    std::vector<bool> m;
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j) m.push_back(j > i);
    s = masked_fill(s, from_vector<bool>(m, {Tq, Tk}), -std::numeric_limits<double>::infinity());
  }
  return matmul(softmax(s, -1), v);
}
}  // namespace

TEST_CASE("scaled_dot_product_attention: values by hand") {
  Tensor q = T({1, 0}, {1, 2}), k = T({1, 0, 0, 1}, {2, 2}), v = T({1, 2, 3, 4}, {2, 2});
  Tensor y = scaled_dot_product_attention(q, k, v);
  const double s0 = 1 / std::sqrt(2.0);
  const double p0 = std::exp(s0) / (std::exp(s0) + 1), p1 = 1 - p0;
  CHECK(allclose(y, T({p0 * 1 + p1 * 3, p0 * 2 + p1 * 4}, {1, 2}), 1e-12, 1e-12));
  // causal: query 0 sees key 0 only; query 1 sees both
  Tensor q2 = T({1, 0, 1, 0}, {2, 2});
  Tensor yc = scaled_dot_product_attention(q2, k, v, true);
  CHECK(allclose(yc, T({1, 2, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4}, {2, 2}), 1e-12, 1e-12));
}

TEST_CASE("scaled_dot_product_attention: matches composed ops (causal, Tq != Tk, batch dims)") {
  manual_seed(21);
  struct Case { Shape b; int64_t Tq, Tk, d, dv; };
  for (Case c : {Case{{2}, 5, 5, 4, 4}, Case{{2, 3}, 3, 6, 4, 5}, Case{{1}, 6, 3, 2, 3}, Case{{}, 40, 40, 16, 8}}) {
    Shape qs = c.b, ks = c.b, vs = c.b;
    qs.insert(qs.end(), {c.Tq, c.d});
    ks.insert(ks.end(), {c.Tk, c.d});
    vs.insert(vs.end(), {c.Tk, c.dv});
    Tensor q = randn(qs, f64), k = randn(ks, f64), v = randn(vs, f64);
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      CAPTURE(shape_str(qs));
      Tensor y = scaled_dot_product_attention(q, k, v, causal);
      CHECK(max_abs_diff(y, attention_ref(q, k, v, causal)) < 1e-12);
      // gradients against the reference's
      Tensor qa = q.clone().requires_grad_(), ka = k.clone().requires_grad_(), va = v.clone().requires_grad_();
      Tensor qb = q.clone().requires_grad_(), kb = k.clone().requires_grad_(), vb = v.clone().requires_grad_();
      Tensor g = randn(y.shape(), f64);
      scaled_dot_product_attention(qa, ka, va, causal).backward(g);
      attention_ref(qb, kb, vb, causal).backward(g);
      CHECK(max_abs_diff(qa.grad(), qb.grad()) < 1e-10);
      CHECK(max_abs_diff(ka.grad(), kb.grad()) < 1e-10);
      CHECK(max_abs_diff(va.grad(), vb.grad()) < 1e-10);
      // float32 kernel
      Tensor y32 = scaled_dot_product_attention(q.to(DType::float32), k.to(DType::float32), v.to(DType::float32), causal);
      CHECK(y32.dtype() == DType::float32);
      CHECK(max_abs_diff(y32, y) < 1e-5);
    }
  }
}

TEST_CASE("scaled_dot_product_attention: gradcheck") {
  manual_seed(22);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    CHECK(gradcheck([=](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2], causal); },
                    {randn({2, 4, 3}, f64), randn({2, 4, 3}, f64), randn({2, 4, 2}, f64)}));
    // Tq != Tk both ways
    CHECK(gradcheck([=](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2], causal); },
                    {randn({3, 3}, f64), randn({5, 3}, f64), randn({5, 2}, f64)}));
    CHECK(gradcheck([=](auto& in) { return scaled_dot_product_attention(in[0], in[1], in[2], causal); },
                    {randn({1, 5, 2}, f64), randn({1, 3, 2}, f64), randn({1, 3, 3}, f64)}));
    // non-contiguous: (B, T, H, d) inputs transposed to (B, H, T, d), as in a GPT block
    CHECK(gradcheck(
        [=](auto& in) {
          return scaled_dot_product_attention(in[0].transpose(1, 2), in[1].transpose(1, 2), in[2].transpose(1, 2),
                                              causal);
        },
        {randn({1, 4, 2, 3}, f64), randn({1, 4, 2, 3}, f64), randn({1, 4, 2, 3}, f64)}));
  }
  // only some inputs need grad
  Tensor k = randn({3, 2}, f64), v = randn({3, 2}, f64);
  CHECK(gradcheck([&](auto& in) { return scaled_dot_product_attention(in[0], k, v, true); }, {randn({3, 2}, f64)}));
  Tensor q = randn({3, 2}, f64);
  CHECK(gradcheck([&](auto& in) { return scaled_dot_product_attention(q, in[0], v); }, {randn({3, 2}, f64)}));
}

TEST_CASE("scaled_dot_product_attention: 16-bit and errors") {
  Tensor q = randn({2, 4, 8}), k = randn({2, 4, 8}), v = randn({2, 4, 8});
  Tensor yb = scaled_dot_product_attention(q.to(DType::bfloat16), k.to(DType::bfloat16), v.to(DType::bfloat16), true);
  CHECK(yb.dtype() == DType::bfloat16);
  CHECK(max_abs_diff(yb, scaled_dot_product_attention(q, k, v, true)) < 0.1);

  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, randn({3, 4, 8}), v), doctest::Contains("[3, 4, 8]"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, randn({2, 4, 7}), v), doctest::Contains("[2, 4, 7]"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, randn({2, 5, 8})), doctest::Contains("[2, 5, 8]"),
                       kiln::Error);
  CHECK_THROWS_AS(scaled_dot_product_attention(randn({8}), randn({8}), randn({8})), kiln::Error);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, randn({4, 8})), kiln::Error);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k.to(DType::float64), v), kiln::Error);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, randn({2, 0, 8}), randn({2, 0, 8})), kiln::Error);
  CHECK_THROWS_AS(scaled_dot_product_attention(q.to(DType::int64), k, v), kiln::Error);
}

namespace {
/// scaled_dot_product_attention_packed as the composition it replaces.
Tensor packed_ref(const Tensor& qkv, int64_t H, bool causal) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, d = C / H;
  std::vector<Tensor> parts = split(qkv, C, 2);
  auto heads = [&](const Tensor& t) { return t.reshape({B, T, H, d}).transpose(1, 2); };
  Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), causal);
  return y.transpose(1, 2).reshape({B, T, C});
}
}  // namespace

TEST_CASE("scaled_dot_product_attention_packed: matches split + heads + attention + merge") {
  manual_seed(24);
  struct Case { int64_t B, T, H, d; };
  // T around the kernel's 32-row blocks; one head and several; float64 and float32.
  for (Case c : {Case{2, 5, 1, 4}, Case{1, 37, 3, 4}, Case{2, 70, 2, 8}, Case{1, 1, 2, 3}}) {
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      CAPTURE(c.T);
      CAPTURE(c.H);
      Tensor x = randn({c.B, c.T, 3 * c.H * c.d}, f64);
      Tensor xa = x.clone().requires_grad_(), xb = x.clone().requires_grad_();
      Tensor y = scaled_dot_product_attention_packed(xa, c.H, causal), ref = packed_ref(xb, c.H, causal);
      CHECK(y.shape() == Shape{c.B, c.T, c.H * c.d});
      CHECK(max_abs_diff(y, ref) < 1e-12);
      Tensor g = randn(y.shape(), f64);
      y.backward(g);
      ref.backward(g);
      CHECK(max_abs_diff(xa.grad(), xb.grad()) < 1e-10);
      Tensor x32 = x.to(DType::float32).requires_grad_();
      Tensor y32 = scaled_dot_product_attention_packed(x32, c.H, causal);
      y32.backward(g.to(DType::float32));
      CHECK(y32.dtype() == DType::float32);
      CHECK(max_abs_diff(y32, y) < 1e-5);
      CHECK(max_abs_diff(x32.grad(), xa.grad()) < 1e-4);
    }
  }
  // A strided input (a transposed view) is read correctly.
  Tensor xt = randn({6, 3, 2}, f64);  // viewed as (2, 3, 6)
  CHECK(max_abs_diff(scaled_dot_product_attention_packed(xt.permute({2, 1, 0}), 2, true),
                     packed_ref(xt.permute({2, 1, 0}).contiguous(), 2, true)) < 1e-12);
}

TEST_CASE("scaled_dot_product_attention_packed: gradcheck, 16-bit and errors") {
  manual_seed(25);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    CHECK(gradcheck([=](auto& in) { return scaled_dot_product_attention_packed(in[0], 2, causal); },
                    {randn({2, 4, 12}, f64)}));
    CHECK(gradcheck([=](auto& in) { return scaled_dot_product_attention_packed(in[0], 1, causal); },
                    {randn({1, 3, 6}, f64)}));
  }
  Tensor x = randn({2, 4, 24});
  Tensor yb = scaled_dot_product_attention_packed(x.to(DType::bfloat16), 2, true);
  CHECK(yb.dtype() == DType::bfloat16);
  CHECK(max_abs_diff(yb, scaled_dot_product_attention_packed(x, 2, true)) < 0.1);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention_packed(randn({2, 4, 20}), 2),
                       doctest::Contains("[2, 4, 20]"), kiln::Error);  // 20 is not 3 x (2 heads x d)
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention_packed(randn({4, 24}), 2), doctest::Contains("(B, T, 3 * C)"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention_packed(x, 0), doctest::Contains("num_heads"), kiln::Error);
  CHECK_THROWS_AS(scaled_dot_product_attention_packed(x.to(DType::int64), 2), kiln::Error);
  CHECK_THROWS_AS(scaled_dot_product_attention_packed(Tensor(), 2), kiln::Error);
  // empty batch or sequence: an empty result, no kernel call
  CHECK(scaled_dot_product_attention_packed(randn({0, 4, 24}), 2).shape() == Shape{0, 4, 8});
}

TEST_CASE("attention in bfloat16 on the CPU: forward and gradients against float64 of the same values") {
  // Where sgemm_bf16_preferred(), the CPU's bf16 kernel runs: bf16 products (probabilities
  // and score gradients rounded to bf16 as they enter theirs), float32 sums, outputs rounded
  // once. Elsewhere bf16 computes on widened float32 copies. Either way the result is the
  // float64 attention of the same bf16 values to within bf16 roundings: a few 2^-8 relative.
  if (sgemm_bf16_preferred()) MESSAGE("the bf16 attention kernel ran, on the ", sgemm_bf16_kernel(), " GEMM");
  else MESSAGE("no bf16 attention kernel here: bf16 attention computed in float32");
  manual_seed(31);
  const DType bf = DType::bfloat16;
  // |a - b| against the scale of b: within `rel` of b's largest magnitude
  auto near = [](const Tensor& a, const Tensor& b, double rel) {
    const double scale = max(abs(b.to(DType::float64))).item();
    return max_abs_diff(a.to(DType::float64), b.to(DType::float64)) <= rel * scale + 1e-6;
  };
  struct Case { int64_t B, T, H, d; };
  for (Case c : {Case{2, 5, 1, 8}, Case{1, 37, 3, 16}, Case{2, 70, 2, 32}, Case{1, 129, 4, 32}}) {
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      CAPTURE(c.T);
      const Tensor x16 = randn({c.B, c.T, 3 * c.H * c.d}).to(bf);
      Tensor xb = x16.clone().requires_grad_(), x64 = x16.to(DType::float64).requires_grad_();
      Tensor y = scaled_dot_product_attention_packed(xb, c.H, causal);
      Tensor y64 = scaled_dot_product_attention_packed(x64, c.H, causal);
      REQUIRE(y.dtype() == bf);
      CHECK(near(y, y64, 0x1p-6));
      const Tensor g = randn(y.shape()).to(bf);
      y.backward(g);
      y64.backward(g.to(DType::float64));
      REQUIRE(xb.grad().dtype() == bf);
      const int64_t C = c.H * c.d;
      for (int part = 0; part < 3; ++part) {  // q, k, v gradients, each against its own scale
        CAPTURE(part);
        CHECK(near(xb.grad().slice(2, part * C, (part + 1) * C), x64.grad().slice(2, part * C, (part + 1) * C),
                   0x1p-5));
      }
      // the unpacked op on the same values (Tq != Tk as well: the queries' last rows dropped)
      auto heads = [&](const Tensor& t, int part) {
        return t.slice(2, part * C, (part + 1) * C).reshape({c.B, c.T, c.H, c.d}).transpose(1, 2);
      };
      const Tensor q = heads(x16, 0).slice(2, 0, std::max<int64_t>(1, c.T - 3));
      const Tensor u = scaled_dot_product_attention(q, heads(x16, 1), heads(x16, 2), causal);
      const Tensor u64 = scaled_dot_product_attention(q.to(DType::float64), heads(x16, 1).to(DType::float64),
                                                      heads(x16, 2).to(DType::float64), causal);
      CHECK(near(u, u64, 0x1p-6));
    }
  }
}

TEST_CASE("attention in 16 bits without the bf16 kernel: the float32 attention of the widened values") {
  // float16 always, bfloat16 where the CPU has no AVX512_BF16: one batch entry at a time is
  // widened into float32 buffers, so the forward is bitwise the float32 kernel's result on
  // the widened tensors, rounded once (packed and unpacked, strided views included). The
  // backward reads the output as stored (16-bit, as a GPU's flash attention does; the float32
  // path reads its float32 output), so its gradients agree to a few 16-bit roundings.
  manual_seed(37);
  auto near = [](const Tensor& a, const Tensor& b, double rel) {
    const double scale = max(abs(b.to(DType::float64))).item();
    return max_abs_diff(a.to(DType::float64), b.to(DType::float64)) <= rel * scale;
  };
  for (DType dt : {DType::float16, DType::bfloat16}) {
    if (dt == DType::bfloat16 && sgemm_bf16_preferred()) continue;  // the bf16 kernel's own test above
    CAPTURE(dt);
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      const int64_t B = 3, T = 37, H = 2, d = 16, C = H * d;
      const Tensor x16 = randn({B, T, 3 * C}).to(dt), g16 = randn({B, T, C}).to(dt);
      Tensor xh = x16.clone().requires_grad_(), xf = x16.to(DType::float32).requires_grad_();
      Tensor y = scaled_dot_product_attention_packed(xh, H, causal);
      Tensor yf = scaled_dot_product_attention_packed(xf, H, causal);
      CHECK(max_abs_diff(y.to(DType::float32), yf.to(dt).to(DType::float32)) == 0.0);
      y.backward(g16);
      yf.backward(g16.to(DType::float32));
      const double rel = dt == DType::bfloat16 ? 0x1p-7 : 0x1p-10;
      CHECK(near(xh.grad(), xf.grad(), rel));
      // unpacked, on (B, H, T, d) views of the same tensor
      auto heads = [&](const Tensor& t, int part) {
        return t.slice(2, part * C, (part + 1) * C).reshape({B, T, H, d}).transpose(1, 2);
      };
      Tensor q = heads(x16, 0).clone().requires_grad_(), k = heads(x16, 1).clone().requires_grad_();
      Tensor qf = q.detach().to(DType::float32).requires_grad_(), kf = k.detach().to(DType::float32).requires_grad_();
      Tensor u = scaled_dot_product_attention(q, k, heads(x16, 2), causal);
      Tensor uf = scaled_dot_product_attention(qf, kf, heads(x16, 2).to(DType::float32), causal);
      CHECK(max_abs_diff(u.to(DType::float32), uf.to(dt).to(DType::float32)) == 0.0);
      const Tensor gu = randn(u.shape()).to(dt);
      u.backward(gu);
      uf.backward(gu.to(DType::float32));
      CHECK(near(q.grad(), qf.grad(), rel));
      CHECK(near(k.grad(), kf.grad(), rel));
    }
  }
}

TEST_CASE("nn functions: larger inputs, thread count does not change results") {
  manual_seed(23);
  const int saved = get_num_threads();
  Tensor q = randn({4, 2, 64, 16}), k = randn({4, 2, 80, 16}), v = randn({4, 2, 80, 8});
  Tensor go = randn({4, 2, 64, 8});
  Tensor w = randn({100, 200}), idx = randint(0, 100, {50, 40}), ge = randn({50, 40, 200});
  Tensor xd = randn({1 << 16});
  std::vector<std::vector<Tensor>> runs;
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    Tensor qa = q.clone().requires_grad_(), ka = k.clone().requires_grad_(), va = v.clone().requires_grad_();
    Tensor y = scaled_dot_product_attention(qa, ka, va, true);
    y.backward(go);
    Tensor wa = w.clone().requires_grad_();
    Tensor e = embedding(idx, wa, 3);
    e.backward(ge);
    manual_seed(99);
    Tensor d = dropout(xd, 0.2);
    runs.push_back({y, qa.grad(), ka.grad(), va.grad(), e, wa.grad(), d});
  }
  set_num_threads(saved);
  for (size_t i = 0; i < runs[0].size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(runs[0][i], runs[1][i]) == 0.0);
  }
  // float32 fused kernel against the float64 composed reference
  Tensor qd = q.to(DType::float64).requires_grad_(), kd = k.to(DType::float64).requires_grad_();
  Tensor vd = v.to(DType::float64).requires_grad_();
  Tensor ref = attention_ref(qd, kd, vd, true);
  ref.backward(go.to(DType::float64));
  CHECK(max_abs_diff(runs[0][0], ref) < 1e-5);
  CHECK(max_abs_diff(runs[0][1], qd.grad()) < 1e-4);
  CHECK(max_abs_diff(runs[0][2], kd.grad()) < 1e-4);
  CHECK(max_abs_diff(runs[0][3], vd.grad()) < 1e-4);
}

TEST_CASE("normalize, cosine_similarity, pairwise_distance: PyTorch 2.15's values and gradients, errors") {
  using kiln::testing::error_of;
  auto v = [](const Tensor& t) { return t.to_vector<double>(); };
  const Tensor x = T({3, 4, 0, 0}, {2, 2});
  CHECK(v(normalize(x)) == std::vector<double>{0.6, 0.8, 0, 0});  // dim 1; a zero row stays 0
  CHECK(max_abs_diff(normalize(x, 1, 0), T({1, 1, 0, 0}, {2, 2})) < 1e-15);
  CHECK(max_abs_diff(normalize(T({1e-13, 0}, {2}), 2, 0), T({0.1, 0}, {2})) < 1e-15);  // divided by eps
  {
    Tensor a = x.clone().requires_grad_(true);
    sum(normalize(a)).backward();
    CHECK(std::isfinite(a.grad().to_vector<double>()[2]));  // the zero row: finite (0 / eps)
  }
  manual_seed(53);
  CHECK(gradcheck([](auto& in) { return normalize(in[0], 2, 0); }, {randn({3, 4}, f64)}));
  CHECK(gradcheck([](auto& in) { return normalize(in[0], 3, -1); }, {randn({3, 4}, f64)}));

  CHECK(cosine_similarity(T({1, 0}, {1, 2}), T({0, 1}, {1, 2})).item() == 0.0);
  CHECK(cosine_similarity(T({1, 2}, {1, 2}), T({2, 4}, {1, 2})).item() == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(cosine_similarity(T({1, 2}, {1, 2}), T({1, 3}, {1, 2})).item() == doctest::Approx(0.98994949366116658));
  CHECK(cosine_similarity(T({1, 2, 3, 4}, {2, 2}), T({1, 0}, {1, 2})).shape() == Shape{2});  // broadcast
  CHECK(cosine_similarity(from_vector<int64_t>({1, 2}, {1, 2}), T({1, 3}, {1, 2})).dtype() == DType::float64);
  {  // a zero x1: the clamp to eps is not part of the gradient (PyTorch): dx1 = x2 / |x2| / eps
    Tensor a = T({0, 0}, {1, 2}).requires_grad_(true);
    cosine_similarity(a, T({3, 4}, {1, 2}), 1, 0.5).backward();
    CHECK(max_abs_diff(a.grad(), T({1.2, 1.6}, {1, 2})) < 1e-15);
  }
  CHECK(gradcheck([](auto& in) { return cosine_similarity(in[0], in[1], 0); },
                  {randn({3, 2}, f64), randn({3, 2}, f64)}));
  CHECK(error_of([] { cosine_similarity(from_vector<int64_t>({1}, {1}), from_vector<int64_t>({1}, {1}), 0); })
            .find("floating") != std::string::npos);

  CHECK(pairwise_distance(T({1, 2, 3}, {1, 3}), T({1, 2, 1}, {1, 3})).item() ==
        doctest::Approx(std::sqrt(2 * 1e-6 * 1e-6 + (2 + 1e-6) * (2 + 1e-6))).epsilon(1e-15));  // x1 - x2 + eps
  CHECK(pairwise_distance(T({1, 2, 3}, {1, 3}), T({1, 2, 1}, {1, 3}), 1, 0, true).to_vector<double>() ==
        std::vector<double>{2});
  CHECK(gradcheck([](auto& in) { return pairwise_distance(in[0], in[1], 3); },
                  {randn({3, 2}, f64), randn({3, 2}, f64)}));
}

// Expected values from PyTorch 2.15 where stated (torch.nn.functional, same inputs).
TEST_CASE("prelu, glu, celu, softsign, tanhshrink, softmin, hard/soft shrink, threshold: values and gradients") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = T({0.0, -0.0, 0.5, -0.5, 0.2, -0.7, 1.3, -2.2, nan}, {9});
  auto v = [](const Tensor& t) { return t.to_vector<double>(); };
  // PyTorch's zeros are +0 and NaN passes through the shrinks and threshold
  const std::vector<double> hs = v(hardshrink(x, 0.5)), ss = v(softshrink(x, 0.5)), th = v(threshold(x, 0.2, -1.5));
  for (int i : {0, 1, 2, 3, 4}) CHECK((hs[size_t(i)] == 0 && !std::signbit(hs[size_t(i)])));
  CHECK(hs[5] == -0.7);
  CHECK((ss[3] == 0 && !std::signbit(ss[3])));
  CHECK(ss[5] == doctest::Approx(-0.2));
  CHECK(ss[6] == doctest::Approx(0.8));
  CHECK(std::isnan(hs[8]));
  CHECK(std::isnan(ss[8]));
  CHECK(std::isnan(th[8]));
  CHECK(std::vector<double>(th.begin(), th.end() - 1) == std::vector<double>{-1.5, -1.5, 0.5, -1.5, -1.5, -1.5, 1.3, -1.5});
  {  // no gradient through a shrink at NaN (PyTorch's mask), but threshold passes it
    Tensor a = x.clone().requires_grad_(true);
    sum(hardshrink(a, 0.5) + softshrink(a, 0.5)).backward();
    CHECK(v(a.grad()) == std::vector<double>{0, 0, 0, 0, 0, 2, 2, 2, 0});
    Tensor b = x.clone().requires_grad_(true);
    sum(threshold(b, 0.2, -1.5)).backward();
    CHECK(v(b.grad()) == std::vector<double>{0, 0, 1, 0, 0, 0, 1, 0, 1});
  }
  CHECK(v(softsign(T({-3.0, 1.0}, {2}))) == std::vector<double>{-0.75, 0.5});
  CHECK(celu(T({-1.0}, {1}), 0.7).item() == doctest::Approx(0.7 * std::expm1(-1.0 / 0.7)));
  CHECK(tanhshrink(T({0.5}, {1})).item() == doctest::Approx(0.03788284273999021).epsilon(1e-14));  // PyTorch's
  manual_seed(81);
  const Tensor x4 = randn({2, 3, 4}, f64);
  CHECK(allclose(softmin(x4, 1), softmax(neg(x4), 1)));
  CHECK(allclose(glu(x4, 2), mul(x4.narrow(2, 0, 2), sigmoid(x4.narrow(2, 2, 2)))));
  const Tensor w = T({0.1, -0.3, 0.7}, {3});
  const Tensor p = prelu(x4, w);
  CHECK(p.to_vector<double>()[4] == (x4.to_vector<double>()[4] > 0 ? x4.to_vector<double>()[4] : -0.3 * x4.to_vector<double>()[4]));
  auto away = [](Shape s) {  // |x| in [0.2, 1.7], away from the kinks at 0 and +-0.5
    Tensor r = rand(s, f64) * 1.5 + 0.2;
    r = where(lt(abs(r - 0.5), 0.05), r + 0.2, r);
    return where(gt(rand(s, f64), 0.5), r, neg(r));
  };
  CHECK(gradcheck([](auto& in) { return prelu(in[0], in[1]); }, {away({2, 3, 4}), T({0.1, -0.3, 0.7}, {3})}));
  CHECK(gradcheck([](auto& in) { return prelu(in[0], in[1]); }, {away({5}), T({0.25}, {1})}));
  CHECK(gradcheck([](auto& in) { return glu(in[0], 1) + glu(in[0].transpose(0, 1), 0).transpose(0, 1); }, {away({3, 4})}));
  CHECK(gradcheck([](auto& in) { return celu(in[0], 0.7) + softsign(in[0]) + tanhshrink(in[0]); }, {away({6})}));
  CHECK(gradcheck([](auto& in) { return softmin(in[0], 0); }, {away({4, 3})}));
  CHECK(gradcheck([](auto& in) { return hardshrink(in[0], 0.5) + softshrink(in[0], 0.5) + threshold(in[0], 0.1, 2.0); },
                  {away({8})}));
  CHECK_THROWS_AS(prelu(x4, T({0.1, 0.2}, {2})), kiln::Error);
  CHECK_THROWS_AS(glu(x4, 1), kiln::Error);  // odd size
  CHECK_THROWS_AS(celu(x4, 0.0), kiln::Error);
  CHECK_THROWS_AS(softshrink(x4, -1.0), kiln::Error);
}

TEST_CASE("pixel_shuffle / pixel_unshuffle and channel dropout") {
  manual_seed(82);
  const Tensor x = randn({2, 8, 3, 2}, f64);
  const Tensor y = pixel_shuffle(x, 2);
  CHECK(y.shape() == Shape{2, 2, 6, 4});
  // PyTorch's layout: out[n, c, h r + i, w r + j] = in[n, c r^2 + i r + j, h, w]
  CHECK(y.select(0, 1).select(0, 1).select(0, 3).select(0, 2).item() ==
        x.select(0, 1).select(0, 4 + 1 * 2 + 0).select(0, 1).select(0, 1).item());
  CHECK(allclose(pixel_unshuffle(y, 2), x));
  CHECK(pixel_shuffle(randn({5, 2, 9, 1, 1}), 3).shape() == Shape{5, 2, 1, 3, 3});  // leading dims kept
  CHECK(gradcheck([](auto& in) { return pixel_shuffle(in[0], 2); }, {randn({1, 4, 2, 3}, f64)}));
  CHECK(gradcheck([](auto& in) { return pixel_unshuffle(in[0], 2); }, {randn({1, 1, 4, 2}, f64)}));
  CHECK_THROWS_AS(pixel_shuffle(randn({1, 6, 2, 2}), 2), kiln::Error);
  CHECK_THROWS_AS(pixel_unshuffle(randn({1, 1, 3, 2}), 2), kiln::Error);

  // feature dropout: each (sample, channel) kept whole (scaled by 1 / (1 - p)) or zeroed
  const Tensor ones4 = ones({16, 8, 3, 3}, {.dtype = DType::float64});
  const Tensor d = feature_dropout(ones4, 0.25, true, 2);
  const std::vector<double> dv = d.to_vector<double>();
  int64_t kept = 0;
  for (int64_t c = 0; c < 16 * 8; ++c) {
    const double first = dv[size_t(c * 9)];
    CHECK((first == 0.0 || first == doctest::Approx(1.0 / 0.75)));
    for (int k = 1; k < 9; ++k) CHECK(dv[size_t(c * 9 + k)] == first);
    kept += first != 0.0;
  }
  CHECK(kept > 128 / 2);
  CHECK(kept < 128);
  CHECK(allclose(feature_dropout(ones4, 0.5, false, 2), ones4));
  CHECK(max(abs(feature_dropout(ones4, 1.0, true, 2))).item() == 0);
  CHECK(feature_dropout(ones({3, 5}), 0.5, true, 1).shape() == Shape{3, 5});  // unbatched (C, L)
  CHECK_THROWS_AS(feature_dropout(ones({2, 3, 4, 5, 6}), 0.5, true, 2), kiln::Error);
  Tensor a = ones({2, 3, 4}, {.dtype = DType::float64}).requires_grad_(true);
  manual_seed(5);
  Tensor out = feature_dropout(a, 0.5, true, 1);
  sum(out).backward();
  CHECK(allclose(a.grad(), out.detach()));  // the gradient is the mask
}

TEST_CASE("unfold and fold: im2col and col2im by hand, their adjointness, gradients, errors") {
  // a 1 x 1 x 3 x 3 image, 2 x 2 blocks, stride 1: four blocks
  const Tensor x = T({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const Tensor u = unfold(x, {.kernel_size = {2, 2}});
  CHECK(u.shape() == Shape{1, 4, 4});
  CHECK(u.to_vector<double>() == std::vector<double>{1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9});
  // fold of unfold counts how many blocks cover each pixel
  const Tensor f = fold(u, {3, 3}, {.kernel_size = {2, 2}});
  CHECK(f.to_vector<double>() == std::vector<double>{1, 4, 3, 8, 20, 12, 7, 16, 9});
  // <unfold(x), c> == <x, fold(c)> for any arguments (fold is unfold's adjoint)
  manual_seed(71);
  const FoldArgs a{.kernel_size = {3, 2}, .dilation = {2, 1}, .padding = {1, 2}, .stride = {2, 3}};
  const Tensor xi = randn({2, 3, 5, 6}, f64), ux = unfold(xi, a), c = randn(ux.shape(), f64);
  CHECK(sum(mul(ux, c)).item() == doctest::Approx(sum(mul(xi, fold(c, {5, 6}, a))).item()).epsilon(1e-12));
  // unfold then a matmul is a convolution
  const Tensor w = randn({4, 3, 3, 2}, f64);
  const Tensor conv = conv2d(xi, w, Tensor(), {.stride = {2, 3}, .padding = {1, 2}, .dilation = {2, 1}});
  const Tensor viaunfold = matmul(w.reshape({4, 18}), ux).reshape(conv.shape());
  CHECK(allclose(viaunfold, conv, 1e-10, 1e-10));
  CHECK(unfold(xi.select(0, 0), a).shape() == Shape{18, 6});
  CHECK(gradcheck([&](auto& t) { return unfold(t[0], a); }, {randn({1, 2, 5, 6}, f64)}));
  CHECK(gradcheck([&](auto& t) { return fold(t[0], {5, 6}, a); }, {randn({1, 12, 6}, f64)}));
  CHECK_THROWS_WITH_AS(fold(randn({1, 12, 5}), {5, 6}, a), doctest::Contains("has 5 blocks"), kiln::Error);
  CHECK_THROWS_AS(unfold(randn({1, 1, 2, 2}), {.kernel_size = {3, 3}}), kiln::Error);
  CHECK_THROWS_AS(unfold(randn({2, 2}), {.kernel_size = {1, 1}}), kiln::Error);
}

TEST_CASE("bilinear, local_response_norm, channel_shuffle") {
  manual_seed(72);
  const Tensor x1 = randn({4, 3}, f64), x2 = randn({4, 2}, f64), w = randn({5, 3, 2}, f64), b = randn({5}, f64);
  const Tensor y = bilinear(x1, x2, w, b);
  // entry (n, o) = x1[n] . W[o] . x2[n] + b[o]
  const double y21 = sum(mul(x1.select(0, 2), matmul(w.select(0, 1), x2.select(0, 2)))).item() + b.to_vector<double>()[1];
  CHECK(y.select(0, 2).select(0, 1).item() == doctest::Approx(y21));
  CHECK(gradcheck([](auto& t) { return bilinear(t[0], t[1], t[2], t[3]); }, {x1, x2, w, b}));
  // LRN with size 1: x / (k + alpha x^2)^beta
  const Tensor l = randn({2, 3, 2}, f64);
  CHECK(allclose(local_response_norm(l, 1, 0.5, 0.75, 2.0), div(l, pow(add(mul(mul(l, l), 0.5), 2.0), 0.75))));
  CHECK(gradcheck([](auto& t) { return local_response_norm(t[0], 3, 0.1, 0.75, 2.0); }, {randn({2, 5, 3}, f64)}));
  CHECK_THROWS_AS(local_response_norm(randn({2, 3}), 2), kiln::Error);
  const Tensor cs = channel_shuffle(T({0, 1, 2, 3, 4, 5}, {1, 6, 1}), 2);
  CHECK(cs.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_AS(channel_shuffle(randn({1, 6, 1}), 4), kiln::Error);
}

TEST_CASE("embedding_bag: sum, mean, max, offsets, empty bags, padding_idx, per_sample_weights") {
  const Tensor w = T({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  const auto idx = [](std::vector<int64_t> v) { return from_vector(v, {int64_t(v.size())}, {.dtype = DType::int64}); };
  const Tensor i2 = from_vector(std::vector<int64_t>{0, 2, 3, 1}, {2, 2}, {.dtype = DType::int64});
  CHECK(embedding_bag(i2, w, {.mode = EmbeddingBagMode::sum}).to_vector<double>() == std::vector<double>{20, 22, 40, 42});
  CHECK(embedding_bag(i2, w).to_vector<double>() == std::vector<double>{10, 11, 20, 21});
  CHECK(embedding_bag(i2, w, {.mode = EmbeddingBagMode::max}).to_vector<double>() == std::vector<double>{20, 21, 30, 31});
  // offsets: bags [0, 2), [2, 2) (empty: zeros), [2, 4)
  const EmbeddingBagArgs o{.offsets = idx({0, 2, 2}), .mode = EmbeddingBagMode::max};
  CHECK(embedding_bag(idx({1, 3, 0, 2}), w, o).to_vector<double>() == std::vector<double>{30, 31, 0, 0, 20, 21});
  CHECK(embedding_bag(idx({1, 3, 0, 2}), w, {.offsets = idx({0, 2, 2, 3}), .mode = EmbeddingBagMode::sum,
                                             .include_last_offset = true})
            .to_vector<double>() == std::vector<double>{40, 42, 0, 0, 0, 1});
  // padding_idx is left out (of the mean's count too)
  CHECK(embedding_bag(idx({1, 3, 3}), w, {.offsets = idx({0}), .padding_idx = 3}).to_vector<double>() ==
        std::vector<double>{10, 11});
  const Tensor psw = T({2, -1, 0.5, 1}, {4});
  CHECK(embedding_bag(idx({1, 3, 0, 2}), w, {.offsets = idx({0, 2}), .mode = EmbeddingBagMode::sum,
                                             .per_sample_weights = psw})
            .to_vector<double>() == std::vector<double>{-10, -9, 20, 21.5});
  manual_seed(73);
  for (EmbeddingBagMode m : {EmbeddingBagMode::sum, EmbeddingBagMode::mean, EmbeddingBagMode::max})
    CHECK(gradcheck([&](auto& t) { return embedding_bag(idx({1, 3, 0, 2, 2}), t[0], {.offsets = idx({0, 2, 2}), .mode = m}); },
                    {randn({4, 3}, f64)}));
  CHECK_THROWS_WITH_AS(embedding_bag(idx({1, 4}), w, {.offsets = idx({0})}), doctest::Contains("out of range"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(embedding_bag(idx({1, 2}), w, {.offsets = idx({0}), .per_sample_weights = psw.narrow(0, 0, 2)}),
                       doctest::Contains("mode sum"), kiln::Error);
  CHECK_THROWS_AS(embedding_bag(idx({1, 2}), w), kiln::Error);          // 1-D needs offsets
  CHECK_THROWS_AS(embedding_bag(idx({1, 2}), w, {.offsets = idx({1})}), kiln::Error);  // must start at 0
}

TEST_CASE("grid_sample and affine_grid: identity, shifts, paddings, nearest, gradients, errors") {
  manual_seed(75);
  const Tensor img = randn({2, 3, 4, 5}, f64);
  const Tensor eye = T({1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0}, {2, 2, 3});
  // the identity map reads every pixel back exactly, with either corner convention
  for (bool ac : {false, true}) {
    const Tensor g = affine_grid(eye, {2, 3, 4, 5}, ac);
    CHECK(g.shape() == Shape{2, 4, 5, 2});
    CHECK(allclose(grid_sample(img, g, GridSampleMode::bilinear, GridSamplePadding::zeros, ac), img, 1e-12, 1e-12));
    CHECK(allclose(grid_sample(img, g, GridSampleMode::nearest, GridSamplePadding::zeros, ac), img, 0, 0));
  }
  // with align_corners, x = -1 + 2 k / (W - 1) is column k; halfway between two columns averages them
  const Tensor row = T({0, 10, 20}, {1, 1, 1, 3});
  const Tensor half = T({-0.5, 0}, {1, 1, 1, 2});
  CHECK(grid_sample(row, half, GridSampleMode::bilinear, GridSamplePadding::zeros, true).item() == 5.0);
  // outside the image: zeros, the border, or the reflection
  const Tensor far = T({2.0, 0}, {1, 1, 1, 2});  // pixel coordinate 3, one past the last
  CHECK(grid_sample(row, far, GridSampleMode::bilinear, GridSamplePadding::zeros, true).item() == 0.0);
  CHECK(grid_sample(row, far, GridSampleMode::bilinear, GridSamplePadding::border, true).item() == 20.0);
  CHECK(grid_sample(row, far, GridSampleMode::bilinear, GridSamplePadding::reflection, true).item() == 10.0);
  // gradients in the image and the grid (points away from pixel edges)
  const Tensor grid = mul(sub(rand({2, 3, 4, 2}, f64), 0.5), 2.4);
  for (GridSamplePadding p : {GridSamplePadding::zeros, GridSamplePadding::border, GridSamplePadding::reflection})
    CHECK(gradcheck([&](auto& t) { return grid_sample(t[0], t[1], GridSampleMode::bilinear, p, false); }, {img, grid}));
  CHECK(gradcheck([&](auto& t) { return grid_sample(t[0], grid, GridSampleMode::nearest); }, {img}));
  CHECK(gradcheck([](auto& t) { return affine_grid(t[0], {2, 1, 3, 4}); }, {randn({2, 2, 3}, f64)}));
  CHECK_THROWS_AS(grid_sample(img, randn({2, 3, 4, 3}, f64)), kiln::Error);
  CHECK_THROWS_AS(grid_sample(img, randn({2, 3, 4, 2})), kiln::Error);  // float32 grid for a float64 image
  CHECK_THROWS_AS(affine_grid(randn({2, 3, 3}), {2, 1, 3, 4}), kiln::Error);
}

TEST_CASE("interpolate: bicubic, nearest-exact, area, 1-D linear") {
  manual_seed(76);
  using M = InterpolateMode;
  // bicubic keeps a constant image constant (its weights sum to 1), edges included
  const Tensor c = full({1, 2, 4, 5}, 3.5, {.dtype = DType::float64});
  CHECK(allclose(interpolate(c, {.size = {7, 9}, .mode = M::bicubic}), full({1, 2, 7, 9}, 3.5, {.dtype = DType::float64}),
                 1e-14, 1e-14));
  // at twice the size without align_corners, output 1 of row [0, 1, 2, 3] sits at 0.25
  const Tensor r = T({0, 1, 2, 3}, {1, 1, 1, 4});
  const double t = 0.25, A = -0.75;
  const double w0 = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
  const double w1 = ((A + 2) * t - (A + 3)) * t * t + 1, w2 = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
  const double w3 = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
  const double want = w0 * 0 + w1 * 0 + w2 * 1 + w3 * 2;  // taps -1 (clamped to 0), 0, 1, 2
  CHECK(interpolate(r, {.size = {1, 8}, .mode = M::bicubic}).to_vector<double>()[1] == doctest::Approx(want));
  CHECK(gradcheck([](auto& x) { return interpolate(x[0], {.size = {5, 7}, .mode = M::bicubic}); },
                  {randn({1, 2, 3, 4}, f64)}));
  // nearest-exact: floor((dst + 0.5) in / out); 4 -> 3: sources 0, 2, 3 (nearest: 0, 1, 2)
  const Tensor row = T({10, 11, 12, 13}, {1, 1, 1, 4});
  CHECK(interpolate(row, {.size = {1, 3}, .mode = M::nearest_exact}).to_vector<double>() ==
        std::vector<double>{10, 12, 13});
  CHECK(interpolate(row, {.size = {1, 3}, .mode = M::nearest}).to_vector<double>() == std::vector<double>{10, 11, 12});
  const Tensor img = randn({2, 3, 6, 5}, f64);
  CHECK(allclose(interpolate(img, {.size = {4, 3}, .mode = M::area}), adaptive_avg_pool2d(img, {4, 3})));
  // (N, C, L): the length from the first entry; linear halfway between samples
  const Tensor seq = T({0, 10}, {1, 1, 2});
  CHECK(interpolate(seq, {.size = {3, 0}, .mode = M::linear, .align_corners = true}).to_vector<double>() ==
        std::vector<double>{0, 5, 10});
  CHECK(interpolate(seq, {.scale_factor = {2.0, 0.0}}).shape() == Shape{1, 1, 4});
  CHECK_THROWS_AS(interpolate(seq, {.size = {3, 0}, .mode = M::bicubic}), kiln::Error);
}
