// The CUDA reduce family (ops/cuda/reduce.cu) and layer_norm (ops/cuda/norm.cu): index math driven over an emulated grid
// of (block, thread) on the CPU (always runs), and CUDA-vs-CPU parity of every reduction
// and of softmax / log_softmax, forward and backward (skipped without a GPU).
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>
#include "gradcheck.h"
#include "parity.h"
#include "kiln/ops/cuda/reduce_index.h"
#include "kiln/ops/reduce_math.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;
using kiln::test::compare;
using kiln::test::Scale;

TEST_CASE("cuda reduce index math: every element of every row visited once, sums equal the CPU's") {
  manual_seed(3);
  for (Shape s : {Shape{3, 5, 4}, Shape{1, 1000, 1}, Shape{7, 1, 9}, Shape{2, 300, 3}, Shape{70000, 2, 1}}) {
    const int64_t O = s[0], R = s[1], I = s[2], rows = O * I;
    INFO("(outer, reduce, inner) = " << shape_str(s));
    Tensor x = randn(s, {.dtype = DType::float64});
    const std::vector<double> xv = x.to_vector<double>();
    std::vector<int> visits(size_t(O * R * I), 0);
    std::vector<double> sums(size_t(rows), 0.0);
    const int grid = cuda::reduce_blocks(rows);
    for (int b = 0; b < grid; ++b)                        // emulated blockIdx.x
      for (int64_t k = b; k < rows; k += grid)            // the kernel's row loop
        for (int t = 0; t < cuda::kReduceThreads; ++t)    // emulated threadIdx.x
          for (int64_t r = t; r < R; r += cuda::kReduceThreads) {
            const int64_t off = cuda::reduce_elem_offset(k, r, R, I);
            if (off < 0 || off >= O * R * I) {
              FAIL("offset " << off << " out of range for row " << k << ", r " << r);
            }
            ++visits[size_t(off)];
            sums[size_t(k)] += xv[size_t(off)];
          }
    CHECK(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; }));
    const std::vector<double> ref = sum(x, {1}).to_vector<double>();  // (O, I), row k = o * I + i
    double worst = 0;
    for (size_t k = 0; k < ref.size(); ++k) worst = std::max(worst, std::fabs(ref[k] - sums[k]));
    CHECK(worst < 1e-9);
  }
}

TEST_CASE("cuda cumsum kernel emulated: one thread per (outer, inner) line, bitwise the CPU's, both directions") {
  manual_seed(8);
  for (Shape s : {Shape{3, 5, 4}, Shape{1, 1000, 1}, Shape{7, 1, 9}, Shape{2, 30, 300}, Shape{70, 3, 1}}) {
    const int64_t O = s[0], R = s[1], I = s[2], lines = O * I;
    INFO("(outer, reduce, inner) = " << shape_str(s));
    const Tensor x = randn(s, {.dtype = DType::float64});
    const std::vector<double> xv = x.to_vector<double>();
    for (bool reverse : {false, true}) {
      std::vector<double> out(xv.size(), NAN);
      const int blocks = 3, threads = 256;                  // a grid smaller than the lines: the stride loop
      for (int b = 0; b < blocks; ++b)                      // emulated blockIdx.x
        for (int t = 0; t < threads; ++t)                   // emulated threadIdx.x
          for (int64_t k = int64_t(b) * threads + t; k < lines; k += int64_t(blocks) * threads) {
            const int64_t o = k / I, i = k - o * I;         // the kernel's body
            math::cumsum_line<double>(xv.data() + o * R * I + i, out.data() + o * R * I + i, R, I, reverse);
          }
      Tensor ref;
      if (!reverse) {
        ref = cumsum(x, 1);
      } else {  // the reversed sum is cumsum's gradient
        Tensor a = x.clone().requires_grad_(true);
        cumsum(a, 1).backward(x);
        ref = a.grad();
      }
      CHECK(out == ref.to_vector<double>());
    }
  }
}

TEST_CASE("cuda parity: reductions and softmax, forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(4);
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = dt == DType::float64 ? 1e-10 : 1e-5;
    // {3, 700}, {5000, 40} and {4, 300, 33} over dims 0 and 1: the coalesced column sums
    // (one range, ranges split over the reduced dim)
    for (Shape s : {Shape{6, 5, 4}, Shape{3, 700}, Shape{1025}, Shape{2, 3, 4, 5}, Shape{5000, 40}, Shape{4, 300, 33}}) {
      Tensor x = randn(s, {.dtype = dt});
      const int64_t last = int64_t(s.size()) - 1;
      for (int64_t dim = 0; dim <= last; ++dim) {
        INFO(dtype_name(dt) << " shape " << shape_str(s) << " dim " << dim);
        Tensor gx = x.to(kGpu);
        CHECK(compare(sum(gx, {dim}), sum(x, {dim}), tol) == "");
        CHECK(compare(mean(gx, {dim}, true), mean(x, {dim}, true), tol) == "");
        CHECK(compare(var(gx, {dim}), var(x, {dim}), tol) == "");
        CHECK(compare(logsumexp(gx, {dim}), logsumexp(x, {dim}), tol) == "");
        CHECK(compare(max(gx, dim).values, max(x, dim).values, 0) == "");
        CHECK(compare(min(gx, dim).indices, min(x, dim).indices, 0) == "");
        CHECK(compare(argmax(gx, dim), argmax(x, dim), 0) == "");
        CHECK(compare(argmin(gx, dim), argmin(x, dim), 0) == "");
        CHECK(compare(softmax(gx, dim), softmax(x, dim), tol) == "");
        CHECK(compare(log_softmax(gx, dim), log_softmax(x, dim), tol) == "");
        // Non-contiguous input: the op makes the (outer, reduce, inner) block itself.
        if (s.size() >= 2) CHECK(compare(sum(gx.transpose(0, last), {dim}), sum(x.transpose(0, last), {dim}), tol) == "");
        // Backward of softmax, log_softmax and max with a given upstream gradient.
        for (int which = 0; which < 3; ++which) {
          Tensor a = x.clone().requires_grad_(), b = x.to(kGpu).requires_grad_();
          Tensor ya = which == 0 ? softmax(a, dim) : which == 1 ? log_softmax(a, dim) : max(a, dim).values;
          Tensor yb = which == 0 ? softmax(b, dim) : which == 1 ? log_softmax(b, dim) : max(b, dim).values;
          Tensor up = randn(ya.shape(), {.dtype = dt});
          ya.backward(up);
          yb.backward(up.to(kGpu));
          CHECK(compare(b.grad(), a.grad(), tol) == "");
        }
      }
    }
  }
  // NaN wins a max, ties keep the first index (ops/reduce_math.h rules, shared with the CPU).
  Tensor t = from_vector<float>({1, 3, 3, NAN, 2, NAN}, {6});
  CHECK(argmax(t.to(kGpu), 0).item() == 3);
  CHECK(argmax(from_vector<float>({1, 3, 3, 0}, {4}).to(kGpu), 0).item() == 1);
}

TEST_CASE("cuda parity: layer_norm forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(6);
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = dt == DType::float64 ? 1e-10 : 1e-4;
    for (Shape s : {Shape{4, 7, 32}, Shape{3, 1000}, Shape{16, 768}}) {
      INFO(dtype_name(dt) << " shape " << shape_str(s));
      const int64_t D = s.back();
      Tensor x = randn(s, {.dtype = dt}), w = randn({D}, {.dtype = dt}), b = randn({D}, {.dtype = dt});
      Tensor cx = x.clone().requires_grad_(), cw = w.clone().requires_grad_(), cb = b.clone().requires_grad_();
      Tensor gx = x.to(kGpu).requires_grad_(), gw = w.to(kGpu).requires_grad_(), gb = b.to(kGpu).requires_grad_();
      Tensor cy = layer_norm(cx, {D}, cw, cb), gy = layer_norm(gx, {D}, gw, gb);
      CHECK(compare(gy, cy, tol) == "");
      Tensor up = randn(s, {.dtype = dt});
      cy.backward(up);
      gy.backward(up.to(kGpu));
      CHECK(compare(gx.grad(), cx.grad(), tol) == "");
      CHECK(compare(gw.grad(), cw.grad(), tol) == "");
      CHECK(compare(gb.grad(), cb.grad(), tol) == "");
      CHECK(compare(layer_norm(x.to(kGpu), {D}), layer_norm(x, {D}), tol) == "");  // no affine
    }
  }
}

TEST_CASE("cuda parity: integer and bool reductions (sum to int64, max, min, argmax, argmin)" * doctest::skip(kNoGpu)) {
  manual_seed(5);
  for (DType dt : {DType::int64, DType::int32, DType::uint8, DType::bool_}) {
    const int64_t lo = (dt == DType::int64 || dt == DType::int32) ? -50 : 0, hi = dt == DType::bool_ ? 2 : 200;
    for (Shape s : {Shape{6, 5, 4}, Shape{3, 700}, Shape{1025}}) {
      Tensor x = randint(lo, hi, s).to(dt);  // small ranges: ties are common
      Tensor gx = x.to(kGpu);
      for (int64_t dim = 0; dim < int64_t(s.size()); ++dim) {
        INFO(dtype_name(dt) << " shape " << shape_str(s) << " dim " << dim);
        CHECK(sum(gx, {dim}).dtype() == DType::int64);
        CHECK(compare(sum(gx, {dim}), sum(x, {dim}), 0) == "");
        CHECK(compare(max(gx, dim).values, max(x, dim).values, 0) == "");
        CHECK(compare(max(gx, dim).indices, max(x, dim).indices, 0) == "");
        CHECK(compare(min(gx, dim, true).values, min(x, dim, true).values, 0) == "");
        CHECK(compare(min(gx, dim).indices, min(x, dim).indices, 0) == "");
        CHECK(compare(argmax(gx, dim), argmax(x, dim), 0) == "");
        CHECK(compare(argmin(gx, dim), argmin(x, dim), 0) == "");
        CHECK(compare(mean(gx, {dim}), mean(x, {dim}), 1e-6) == "");  // integer mean: float32 from the int64 sum
      }
      INFO(dtype_name(dt) << " shape " << shape_str(s) << " (all elements)");
      CHECK(compare(sum(gx), sum(x), 0) == "");
      CHECK(compare(max(gx), max(x), 0) == "");
      CHECK(compare(min(gx), min(x), 0) == "");
    }
  }
  // int32 sums that overflow int32 are exact in the int64 result
  Tensor big = full({3000}, 2000000, {.dtype = DType::int32});
  CHECK(sum(big.to(kGpu)).item() == 6000000000.0);
}

TEST_CASE("cuda parity: cumsum, vector_norm, group_norm, normalize, cosine_similarity" * doctest::skip(kNoGpu)) {
  manual_seed(9);
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = dt == DType::float64 ? 1e-10 : 1e-4;
    for (Shape s : {Shape{6, 5, 4}, Shape{3, 700}, Shape{2, 3, 300}}) {
      Tensor x = randn(s, {.dtype = dt});
      for (int64_t dim = 0; dim < int64_t(s.size()); ++dim) {
        INFO(dtype_name(dt) << " shape " << shape_str(s) << " dim " << dim);
        for (int which = 0; which < 6; ++which) {
          const double ords[] = {0, 2, 1, 3, INFINITY, -INFINITY};
          auto f = [&](const Tensor& t) {
            return which == 0 ? cumsum(t, dim) : vector_norm(t, ords[which], {dim}, which % 2 == 0);
          };
          Tensor a = x.clone().requires_grad_(), b = x.to(kGpu).requires_grad_();
          Tensor ya = f(a), yb = f(b);
          CHECK(compare(yb, ya, tol, Scale::max) == "");
          Tensor up = randn(ya.shape(), {.dtype = dt});
          ya.backward(up);
          yb.backward(up.to(kGpu));
          CHECK(compare(b.grad(), a.grad(), tol, Scale::max) == "");
        }
        CHECK(compare(normalize(x.to(kGpu), 2, dim), normalize(x, 2, dim), tol) == "");
        const Tensor y = flip(x, {dim});
        CHECK(compare(cosine_similarity(x.to(kGpu), y.to(kGpu), dim), cosine_similarity(x, y, dim), tol) == "");
      }
    }
    for (DType it : {DType::int64, DType::int32, DType::uint8, DType::bool_}) {
      Tensor xi = randint(0, 2, {5, 40, 3}).to(it);
      CHECK(compare(cumsum(xi.to(kGpu), 1), cumsum(xi, 1), 0) == "");
    }
    Tensor x = randn({4, 6, 5, 3}, {.dtype = dt}), w = randn({6}, {.dtype = dt}), bias = randn({6}, {.dtype = dt});
    Tensor cx = x.clone().requires_grad_(), gx = x.to(kGpu).requires_grad_();
    Tensor cy = group_norm(cx, 3, w, bias), gy = group_norm(gx, 3, w.to(kGpu), bias.to(kGpu));
    CHECK(compare(gy, cy, tol) == "");
    Tensor up = randn(cy.shape(), {.dtype = dt});
    cy.backward(up);
    gy.backward(up.to(kGpu));
    CHECK(compare(gx.grad(), cx.grad(), tol) == "");
  }
}
