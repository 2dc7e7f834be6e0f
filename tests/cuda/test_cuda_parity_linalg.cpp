// CUDA (cuBLAS) against CPU (Eigen) for matmul and linear: 2-D, batched, broadcast batch
// dims and transposed views, float32 and float64, forward and backward. Skipped (visibly,
// as doctest skips) where no GPU is available.
#include <doctest/doctest.h>
#include <cmath>
#include <string>
#include "gradcheck.h"

using namespace kiln;

namespace {

const bool kNoGpu = !cuda::is_available();
const Device kGpu = Device::cuda(0);

double rtol_for(DType dt) { return dt == DType::float64 ? 1e-10 : 1e-4; }

// "" when got (cuda) matches ref (cpu), else the worst element.
std::string compare(const Tensor& got, const Tensor& ref, double rtol) {
  if (got.shape() != ref.shape()) return "shape " + shape_str(got.shape()) + " vs " + shape_str(ref.shape());
  if (!got.device().is_cuda()) return "the result is not on the GPU";
  auto g = got.to_vector<double>(), r = ref.to_vector<double>();
  double scale = 1e-6;
  for (double v : r) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < r.size(); ++i)
    if (!(std::fabs(g[i] - r[i]) <= rtol * scale))
      return "element " + std::to_string(i) + ": cuda " + std::to_string(g[i]) + " vs cpu " + std::to_string(r[i]);
  return "";
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
