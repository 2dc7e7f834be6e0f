// CUDA (cuBLAS) against CPU (Eigen) for matmul, linear and linear_gelu: 2-D, batched, broadcast batch
// dims and transposed views, float32 and float64, forward and backward. Skipped (visibly,
// as doctest skips) where no GPU is available.
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <string>
#include "gradcheck.h"
#include "parity.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;

namespace {

double rtol_for(DType dt) { return dt == DType::float64 ? 1e-10 : 1e-4; }

// compare relative to the largest |ref| (tests/cuda/parity.h)
std::string compare(const Tensor& got, const Tensor& ref, double rtol) {
  return test::compare(got, ref, rtol, test::Scale::max);
}

}  // namespace

TEST_CASE("cuda parity: matmul through cuBLAS, forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(11);
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = rtol_for(dt);
    struct Case {
      Shape a, b;
      bool ta, tb, backward;
    };
    for (const Case& c : {Case{{5, 7}, {7, 3}, false, false, true}, Case{{7, 5}, {3, 7}, true, true, true},
                          Case{{4, 6, 5}, {4, 5, 2}, false, false, true}, Case{{4, 5, 6}, {4, 2, 5}, true, true, true},
                          Case{{3, 4, 6, 5}, {5, 2}, false, false, true},
                          Case{{2, 1, 6, 5}, {3, 5, 4}, false, false, true}, Case{{64, 128}, {128, 96}, false, true, true}}) {
      INFO(dtype_name(dt) << " a " << shape_str(c.a) << (c.ta ? "^T" : "") << " b " << shape_str(c.b)
                          << (c.tb ? "^T" : ""));
      Tensor a = randn(c.a, {.dtype = dt}), b = randn(c.b, {.dtype = dt});
      auto op = [&](const Tensor& x, const Tensor& y) {
        return matmul(c.ta ? x.transpose(-1, -2) : x, c.tb ? y.transpose(-1, -2) : y);
      };
      Tensor ga = a.to(kGpu).requires_grad_(), gb = b.to(kGpu).requires_grad_();
      Tensor ca = a.clone().requires_grad_(), cb = b.clone().requires_grad_();
      Tensor gy = op(ga, gb), cy = op(ca, cb);
      CHECK(compare(gy, cy, tol) == "");
      if (!c.backward) continue;
      Tensor w = randn(cy.shape(), {.dtype = dt});
      gy.backward(w.to(kGpu));  // no reduction on the GPU: the upstream gradient is given
      cy.backward(w);
      CHECK(compare(ga.grad(), ca.grad(), tol) == "");
      CHECK(compare(gb.grad(), cb.grad(), tol) == "");
    }
  }
}

TEST_CASE("cuda parity: linear through cuBLAS (bias added before the GEMM)" * doctest::skip(kNoGpu)) {
  manual_seed(12);
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = rtol_for(dt);
    for (Shape xs : {Shape{8, 16}, Shape{2, 5, 16}, Shape{16}}) {
      INFO(dtype_name(dt) << " x " << shape_str(xs));
      Tensor x = randn(xs, {.dtype = dt}), w = randn({12, 16}, {.dtype = dt}), b = randn({12}, {.dtype = dt});
      CHECK(compare(linear(x.to(kGpu), w.to(kGpu), b.to(kGpu)), linear(x, w, b), tol) == "");
      // x strided by rows (a column slice): the kernel reads it with its row stride.
      Tensor wide = randn({8, 20}, {.dtype = dt});
      CHECK(compare(linear(wide.to(kGpu).narrow(1, 2, 16), w.to(kGpu)), linear(wide.narrow(1, 2, 16), w), tol) == "");
      // Backward (the bias gradient is a CUDA sum over the rows).
      Tensor gx = x.to(kGpu).requires_grad_(), gw = w.to(kGpu).requires_grad_(), gb = b.to(kGpu).requires_grad_();
      Tensor cx = x.clone().requires_grad_(), cw = w.clone().requires_grad_(), cb = b.clone().requires_grad_();
      Tensor gy = linear(gx, gw, gb), cy = linear(cx, cw, cb);
      Tensor up = randn(cy.shape(), {.dtype = dt});
      gy.backward(up.to(kGpu));
      cy.backward(up);
      CHECK(compare(gx.grad(), cx.grad(), tol) == "");
      CHECK(compare(gw.grad(), cw.grad(), tol) == "");
      CHECK(compare(gb.grad(), cb.grad(), tol) == "");
    }
  }
}

// ---------------------------------------------------------------- 16-bit and TF32 GEMMs

TEST_CASE("cuda parity: float16/bfloat16 matmul through cuBLASLt (float32 accumulation), forward and backward" *
          doctest::skip(kNoGpu)) {
  manual_seed(13);
  for (DType dt : {DType::float16, DType::bfloat16}) {
    struct Case {
      Shape a, b;
      bool ta, tb;
    };
    for (const Case& c : {Case{{5, 7}, {7, 3}, false, false}, Case{{7, 5}, {3, 7}, true, true},
                          Case{{4, 6, 5}, {4, 5, 2}, false, false}, Case{{4, 5, 6}, {4, 2, 5}, true, false},
                          Case{{3, 4, 6, 5}, {5, 2}, false, false}, Case{{2, 1, 6, 5}, {3, 5, 4}, false, true},
                          Case{{64, 128}, {128, 96}, false, true}}) {
      INFO(dtype_name(dt) << " a " << shape_str(c.a) << (c.ta ? "^T" : "") << " b " << shape_str(c.b)
                          << (c.tb ? "^T" : ""));
      // the CPU reference runs in float32 on the same (rounded) 16-bit inputs
      Tensor a = randn(c.a).to(dt), b = randn(c.b).to(dt);
      auto op = [&](const Tensor& x, const Tensor& y) {
        return matmul(c.ta ? x.transpose(-1, -2) : x, c.tb ? y.transpose(-1, -2) : y);
      };
      Tensor ga = a.to(kGpu).requires_grad_(), gb = b.to(kGpu).requires_grad_();
      Tensor ca = a.to(DType::float32).requires_grad_(), cb = b.to(DType::float32).requires_grad_();
      Tensor gy = op(ga, gb), cy = op(ca, cb);
      CHECK(gy.dtype() == dt);
      CHECK(compare(gy.to(DType::float32), cy, 1e-2) == "");
      Tensor w = randn(cy.shape()).to(dt);
      gy.backward(w.to(kGpu));
      cy.backward(w.to(DType::float32));
      CHECK(ga.grad().dtype() == dt);
      CHECK(compare(ga.grad().to(DType::float32), ca.grad(), 1e-2) == "");
      CHECK(compare(gb.grad().to(DType::float32), cb.grad(), 1e-2) == "");
    }
  }
}

TEST_CASE("cuda parity: float16/bfloat16 linear (bias epilogue; bias gradient by the weight gradient's BGRADB "
          "epilogue), forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(14);
  for (DType dt : {DType::float16, DType::bfloat16})
    for (Shape xs : {Shape{8, 16}, Shape{2, 5, 16}, Shape{16}, Shape{33, 16}}) {
      INFO(dtype_name(dt) << " x " << shape_str(xs));
      Tensor x = randn(xs).to(dt), w = randn({12, 16}).to(dt), b = randn({12}).to(dt);
      Tensor gx = x.to(kGpu).requires_grad_(), gw = w.to(kGpu).requires_grad_(), gb = b.to(kGpu).requires_grad_();
      Tensor cx = x.to(DType::float32).requires_grad_(), cw = w.to(DType::float32).requires_grad_(),
             cb = b.to(DType::float32).requires_grad_();
      Tensor gy = linear(gx, gw, gb), cy = linear(cx, cw, cb);
      CHECK(compare(gy.to(DType::float32), cy, 1e-2) == "");
      CHECK(compare(linear(gx, gw).to(DType::float32), linear(cx, cw), 1e-2) == "");  // no bias
      Tensor wide = randn({8, 20}).to(dt);  // rows with a stride (a column slice)
      CHECK(compare(linear(wide.to(kGpu).narrow(1, 2, 16), gw, gb).to(DType::float32),
                    linear(wide.to(DType::float32).narrow(1, 2, 16), cw, cb), 1e-2) == "");
      Tensor up = randn(cy.shape()).to(dt);
      gy.backward(up.to(kGpu));
      cy.backward(up.to(DType::float32));
      CHECK(compare(gx.grad().to(DType::float32), cx.grad(), 1e-2) == "");
      CHECK(compare(gw.grad().to(DType::float32), cw.grad(), 1e-2) == "");
      CHECK(compare(gb.grad().to(DType::float32), cb.grad(), 1e-2) == "");
    }
}

TEST_CASE("cuda parity: linear_gelu (GELU_AUX_BIAS epilogue in 16 bits, linear + gelu_tanh kernels otherwise), "
          "forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(15);
  for (DType dt : {DType::float16, DType::bfloat16, DType::float32, DType::float64})
    for (int64_t O : {24, 12})  // 24: the epilogue's aux leading dimension (a multiple of 8); 12: the two kernels
      for (bool with_bias : {true, false})
        for (Shape xs : {Shape{8, 16}, Shape{2, 5, 16}, Shape{16}}) {
          INFO(dtype_name(dt) << " O " << O << (with_bias ? " bias" : " no bias") << " x " << shape_str(xs));
          const bool half = is_half(dt);
          const DType ref = half ? DType::float32 : dt;
          const double tol = half ? 2e-2 : dt == DType::float32 ? 1e-4 : 1e-10;
          Tensor x = randn(xs).to(dt), w = mul(randn({O, 16}), 0.5).to(dt), b = randn({O}).to(dt);
          Tensor gx = x.to(kGpu).requires_grad_(), gw = w.to(kGpu).requires_grad_();
          Tensor cx = x.to(ref).requires_grad_(), cw = w.to(ref).requires_grad_();
          Tensor gb = with_bias ? b.to(kGpu).requires_grad_() : Tensor(), cb = with_bias ? b.to(ref).requires_grad_() : Tensor();
          Tensor gy = linear_gelu(gx, gw, gb), cy = gelu(linear(cx, cw, cb), GeluApprox::tanh);
          CHECK(gy.dtype() == dt);
          CHECK(compare(gy.to(ref), cy, tol) == "");
          Tensor up = randn(cy.shape()).to(dt);
          gy.backward(up.to(kGpu));
          cy.backward(up.to(ref));
          CHECK(compare(gx.grad().to(ref), cx.grad(), tol, kiln::test::Scale::max) == "");
          CHECK(compare(gw.grad().to(ref), cw.grad(), tol, kiln::test::Scale::max) == "");
          if (with_bias) CHECK(compare(gb.grad().to(ref), cb.grad(), tol, kiln::test::Scale::max) == "");
        }
}

TEST_CASE("cuda parity: float32 matmul/linear with TF32 allowed (\"high\")" * doctest::skip(kNoGpu)) {
  manual_seed(15);
  struct Restore {
    std::string saved = float32_matmul_precision();
    ~Restore() { set_float32_matmul_precision(saved); }
  } restore;
  Tensor a = randn({64, 256}), b = randn({256, 96}), b3 = randn({3, 256, 40}), a3 = randn({3, 64, 256});
  Tensor w = randn({48, 256}), bias = randn({48});
  set_float32_matmul_precision("high");
  // TF32 keeps 10 mantissa bits of each input (rounded or, on some paths, truncated): with
  // K = 256 the error reaches ~1e-3 of the largest output; PyTorch's TF32 tests use 5e-3.
  // A layout / stride bug still shows as an O(1) error.
  const double tf32 = 5e-3;
  CHECK(compare(matmul(a.to(kGpu), b.to(kGpu)), matmul(a, b), tf32) == "");
  CHECK(compare(matmul(a3.to(kGpu), b3.to(kGpu)), matmul(a3, b3), tf32) == "");  // strided-batched
  CHECK(compare(matmul(a.to(kGpu), b.to(kGpu).t().contiguous().t()), matmul(a, b), tf32) == "");
  CHECK(compare(linear(a.to(kGpu), w.to(kGpu), bias.to(kGpu)), linear(a, w, bias), tf32) == "");
  set_float32_matmul_precision("highest");  // strict float32 again
  CHECK(compare(matmul(a.to(kGpu), b.to(kGpu)), matmul(a, b), 1e-5) == "");
}

TEST_CASE("cuda parity: linalg solvers and factorizations on CUDA tensors (a host copy) and their backward" * doctest::skip(kNoGpu)) {
  manual_seed(12);
  for (DType dt : {DType::float32, DType::float64}) {
    INFO(dtype_name(dt));
    const double tol = rtol_for(dt);
    const Tensor m = randn({2, 4, 4}, {.dtype = dt});
    const Tensor A = add(matmul(m, m.transpose(-2, -1)), mul(eye(4, -1, {.dtype = dt}), 4.0));
    const Tensor B = randn({2, 4, 3}, {.dtype = dt});
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
        {"cholesky", [](const Tensor& a, const Tensor&) { return linalg::cholesky(a); }},
        {"solve", [](const Tensor& a, const Tensor& b) { return linalg::solve(a, b); }},
        {"solve_triangular", [](const Tensor& a, const Tensor& b) { return linalg::solve_triangular(tril(a), b, false); }},
        {"inv", [](const Tensor& a, const Tensor&) { return linalg::inv(a); }},
        {"det", [](const Tensor& a, const Tensor&) { return linalg::det(a); }},
        {"logdet", [](const Tensor& a, const Tensor&) { return linalg::logdet(a); }},
        {"eigvalsh", [](const Tensor& a, const Tensor&) { return linalg::eigvalsh(a); }},
        {"eigh", [](const Tensor& a, const Tensor&) { const Tensor v = linalg::eigh(a).eigenvectors; return mul(v, v); }},
        {"svdvals", [](const Tensor&, const Tensor& b) { return linalg::svdvals(b); }},
        {"svd", [](const Tensor& a, const Tensor&) { const linalg::SVD r = linalg::svd(a, false); return matmul(r.U, r.Vh); }},
        {"qr", [](const Tensor&, const Tensor& b) { return linalg::qr(b).Q; }},
        {"pinv", [](const Tensor&, const Tensor& b) { return linalg::pinv(b); }},
        {"lstsq", [](const Tensor& a, const Tensor& b) { return linalg::lstsq(a, b).solution; }},
        {"matrix_exp", [](const Tensor& a, const Tensor&) { return linalg::matrix_exp(mul(a, 0.1)); }},
        {"matrix_power", [](const Tensor& a, const Tensor&) { return linalg::matrix_power(a, -3); }},
        {"matrix_norm", [](const Tensor&, const Tensor& b) { return linalg::matrix_norm(b, "nuc"); }},
        {"cholesky_solve", [](const Tensor& a, const Tensor& b) { return linalg::cholesky_solve(b, linalg::cholesky(a)); }},
        {"lu_factor", [](const Tensor& a, const Tensor&) { return linalg::lu_factor(a).LU; }},
        {"cond", [](const Tensor& a, const Tensor&) { return linalg::cond(a, "fro"); }},
        {"norm", [](const Tensor&, const Tensor& b) { return linalg::norm(b, 1.0, {1, 2}); }},
        {"vander", [](const Tensor&, const Tensor& b) { return linalg::vander(b); }},
        {"lu_solve", [](const Tensor& a, const Tensor& b) {
           const linalg::LUFactor f = linalg::lu_factor(a);
           return linalg::lu_solve(f.LU, f.pivots, b);
         }},
        {"householder_product", [](const Tensor& a, const Tensor& b) {
           return linalg::householder_product(a.narrow(-1, 0, 3), b.narrow(-2, 0, 1).squeeze(-2));
         }},
    };
    for (const auto& op : ops) {  // no structured binding: clang refuses one captured by INFO
      const auto& f = op.second;
      INFO(op.first);
      Tensor ga = A.to(kGpu).requires_grad_(), gb = B.to(kGpu).requires_grad_();
      Tensor ca = A.clone().requires_grad_(), cb = B.clone().requires_grad_();
      Tensor gy = f(ga, gb), cy = f(ca, cb);
      CHECK(gy.device() == ga.device());
      CHECK(compare(gy, cy, tol) == "");
      Tensor w = randn(cy.shape(), {.dtype = dt});
      gy.backward(w.to(kGpu));
      cy.backward(w);
      CHECK(compare(ga.grad(), ca.grad(), tol) == "");
    }
  }
}

TEST_CASE("set_float32_matmul_precision: valid values round-trip, others are rejected by name") {
  const std::string saved = float32_matmul_precision();
  CHECK(saved == "highest");  // the default
  for (const char* p : {"high", "medium", "highest"}) {
    set_float32_matmul_precision(p);
    CHECK(float32_matmul_precision() == p);
    CHECK(float32_matmul_allows_tf32() == (std::string(p) != "highest"));
  }
  const std::string msg = test::error_of([] { set_float32_matmul_precision("tf32"); });
  CHECK(msg.find("'tf32'") != std::string::npos);
  for (const char* valid : {"highest", "high", "medium"}) CHECK(msg.find(std::string("\"") + valid + "\"") != std::string::npos);
  CHECK(float32_matmul_precision() == "highest");  // unchanged by the rejected call
  set_float32_matmul_precision(saved);
}
