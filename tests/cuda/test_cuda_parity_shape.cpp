// CUDA against CPU for the shape kernels (ops/cuda/shape.cu): cat, stack, split,
// index_select and gather (and the ops composed of them: pad modes, tril/triu, flip, roll,
// repeat, sort) and the scatters (scatter, scatter_add, index_add/copy/fill, masked_select,
// nonzero), forward and backward through autograd, with non-contiguous
// inputs and indices, several dtypes (copies move any dtype; the scatter-add backward runs
// in float32/float64/bfloat16). Skipped (visibly) without a GPU.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>
#include "gradcheck.h"
#include "parity.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;
using kiln::test::compare;

namespace {

double tol_for(DType dt) { return dt == DType::float64 ? 1e-12 : dt == DType::bfloat16 ? 1e-2 : 1e-6; }

// A random tensor of dtype dt; every other call a non-contiguous view (transposed last two dims).
Tensor make(const Shape& s, DType dt, bool strided) {
  if (!strided || s.size() < 2) return is_floating(dt) ? randn(s).to(dt) : randint(0, 100, s).to(dt);
  Shape t = s;
  std::swap(t[t.size() - 1], t[t.size() - 2]);
  Tensor base = is_floating(dt) ? randn(t).to(dt) : randint(0, 100, t).to(dt);
  return base.transpose(-1, -2);
}

}  // namespace

TEST_CASE("cuda parity: cat, stack and split, forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(21);
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::int64, DType::uint8, DType::bool_}) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      INFO(dtype_name(dt) << " dim " << dim);
      std::vector<Tensor> ca, cb;
      for (int i = 0; i < 4; ++i) {
        Shape s = {3, 4, 5};
        s[size_t(dim)] = i == 2 ? 0 : 1 + i;  // one empty input
        Tensor x = make(s, dt, i % 2 == 1);
        ca.push_back(is_floating(dt) ? x.clone().requires_grad_() : x);
        cb.push_back(is_floating(dt) ? x.to(kGpu).requires_grad_() : x.to(kGpu));
      }
      Tensor ya = cat(ca, dim), yb = cat(cb, dim);
      CHECK(compare(yb, ya, 0) == "");
      std::vector<Tensor> sa, sb;  // stack needs equal shapes
      for (int i = 0; i < 3; ++i) {
        Tensor x = make({2, 3, 4}, dt, i == 1);
        sa.push_back(x);
        sb.push_back(x.to(kGpu));
      }
      CHECK(compare(stack(sb, dim), stack(sa, dim), 0) == "");
      if (!is_floating(dt)) continue;
      Tensor up = randn(ya.shape()).to(dt);
      ya.backward(up);
      yb.backward(up.to(kGpu));
      for (size_t i = 0; i < ca.size(); ++i) CHECK(compare(cb[i].grad(), ca[i].grad(), tol_for(dt)) == "");
      // split of a non-contiguous tensor; pieces weighted differently, then summed
      Tensor x = make({6, 7, 8}, dt, true);
      Tensor xa = x.clone().requires_grad_(), xb = x.to(kGpu).requires_grad_();
      auto pa = split(xa, 3, dim), pb = split(xb, 3, dim);
      REQUIRE(pa.size() == pb.size());
      Tensor la = sum(pa[0] * 2.0), lb = sum(pb[0] * 2.0);
      for (size_t i = 0; i < pa.size(); ++i) {
        CHECK(compare(pb[i].contiguous(), pa[i].contiguous(), 0) == "");
        la = la + sum(pa[i] * pa[i]);
        lb = lb + sum(pb[i] * pb[i]);
      }
      la.backward();
      lb.backward();
      CHECK(compare(xb.grad(), xa.grad(), tol_for(dt)) == "");
    }
  }
  // more inputs than one launch takes (kCatChunk = 64)
  std::vector<Tensor> many;
  for (int i = 0; i < 150; ++i) many.push_back(randn({2, 1 + i % 3}));
  std::vector<Tensor> many_gpu;
  for (const Tensor& t : many) many_gpu.push_back(t.to(kGpu));
  CHECK(compare(cat(many_gpu, 1), cat(many, 1), 0) == "");
  std::vector<Tensor> same, same_gpu;
  for (int i = 0; i < 100; ++i) {
    same.push_back(randn({3, 2}));
    same_gpu.push_back(same.back().to(kGpu));
  }
  CHECK(compare(stack(same_gpu, 1), stack(same, 1), 0) == "");
}

TEST_CASE("cuda parity: index_select forward and index_add backward" * doctest::skip(kNoGpu)) {
  manual_seed(22);
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::int32}) {
    for (Shape s : {Shape{5, 6, 7}, Shape{40}, Shape{3, 1000}}) {
      for (int64_t dim = 0; dim < int64_t(s.size()); ++dim) {
        INFO(dtype_name(dt) << " shape " << shape_str(s) << " dim " << dim);
        Tensor x = make(s, dt, s.size() >= 2);
        Tensor idx = randint(0, s[size_t(dim)], {2 * s[size_t(dim)] + 3});  // repeats
        Tensor xa = is_floating(dt) ? x.clone().requires_grad_() : x;
        Tensor xb = is_floating(dt) ? x.to(kGpu).requires_grad_() : x.to(kGpu);
        Tensor ya = index_select(xa, dim, idx), yb = index_select(xb, dim, idx.to(kGpu));
        CHECK(compare(yb, ya, 0) == "");
        if (!is_floating(dt)) continue;
        Tensor up = randn(ya.shape()).to(dt);
        ya.backward(up);
        yb.backward(up.to(kGpu));
        CHECK(compare(xb.grad(), xa.grad(), tol_for(dt)) == "");
      }
    }
  }
}

TEST_CASE("cuda parity: gather forward and scatter-add backward, strided operands" * doctest::skip(kNoGpu)) {
  manual_seed(23);
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::int64}) {
    for (Shape s : {Shape{4, 5, 6}, Shape{9}, Shape{2, 300}}) {
      for (int64_t dim = 0; dim < int64_t(s.size()); ++dim) {
        INFO(dtype_name(dt) << " shape " << shape_str(s) << " dim " << dim);
        Tensor x = make(s, dt, s.size() >= 2);
        Shape is = s;
        is[size_t(dim)] = 2 * s[size_t(dim)];  // longer than x along dim: colliding updates
        if (is.size() >= 2) is[0] = std::max<int64_t>(1, is[0] - (dim == 0 ? 0 : 1));  // smaller elsewhere
        for (bool strided_index : {false, true}) {
          Tensor idx;
          if (strided_index && is.size() >= 2) {
            Shape t = is;
            std::swap(t[t.size() - 1], t[t.size() - 2]);
            idx = randint(0, s[size_t(dim)], t).transpose(-1, -2);
          } else {
            idx = randint(0, s[size_t(dim)], is);
          }
          Tensor xa = is_floating(dt) ? x.clone().requires_grad_() : x;
          Tensor xb = is_floating(dt) ? x.to(kGpu).requires_grad_() : x.to(kGpu);
          Tensor ya = gather(xa, dim, idx), yb = gather(xb, dim, idx.to(kGpu));
          CHECK(compare(yb, ya, 0) == "");
          if (!is_floating(dt)) continue;
          Tensor up = make(ya.shape(), dt, true);  // a non-contiguous upstream gradient
          ya.backward(up);
          yb.backward(up.to(kGpu));
          CHECK(compare(xb.grad(), xa.grad(), tol_for(dt)) == "");
        }
      }
    }
  }
}

TEST_CASE("cuda parity: scatter, scatter_add, index_add, index_copy, index_fill, masked_select, nonzero" *
          doctest::skip(kNoGpu)) {
  manual_seed(24);
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::int64, DType::int32}) {
    INFO(dtype_name(dt));
    const bool fl = is_floating(dt);
    const Tensor x = make({5, 6}, dt, true), src = make({7, 4}, dt, true);
    const Tensor idx = randint(0, 5, {7, 4});               // colliding positions along dim 0
    const Tensor perm = argsort(randn({5, 4}), 0).narrow(0, 0, 3);  // distinct along dim 0
    const Tensor ii = randint(0, 6, {9}), src1 = make({5, 9}, dt, false);
    const Tensor iu = argsort(randn({6})).narrow(0, 0, 4), src2 = make({5, 4}, dt, true);
    for (int which = 0; which < 6; ++which) {
      INFO("case " << which);
      auto f = [&](const Tensor& a, const Tensor& s, Device dev) {
        switch (which) {
          case 0: return scatter_add(a, 0, idx.to(dev), s);
          case 1: return scatter(a, 0, perm.to(dev), s.narrow(0, 0, 3));
          case 2: return scatter(a, 1, perm.t().contiguous().to(dev), 2.0);
          case 3: return index_add(a, 1, ii.to(dev), src1.to(dev), fl ? -0.5 : 3.0);
          case 4: return index_copy(a, 1, iu.to(dev), src2.to(dev));
          default: return index_fill(a, 1, iu.to(dev), -1.0);
        }
      };
      Tensor xa = fl ? x.clone().requires_grad_() : x, sa = fl ? src.clone().requires_grad_() : src;
      Tensor xb = fl ? x.to(kGpu).requires_grad_() : x.to(kGpu), sb = fl ? src.to(kGpu).requires_grad_() : src.to(kGpu);
      Tensor ya = f(xa, sa, Device::cpu()), yb = f(xb, sb, kGpu);
      CHECK(compare(yb, ya, fl ? tol_for(dt) : 0) == "");
      if (!fl) continue;
      Tensor up = make(ya.shape(), dt, true);
      ya.backward(up);
      yb.backward(up.to(kGpu));
      CHECK(compare(xb.grad(), xa.grad(), tol_for(dt)) == "");
      if (sa.grad().defined()) CHECK(compare(sb.grad(), sa.grad(), tol_for(dt)) == "");
    }
    const Tensor mask = gt(randn({5, 1}), 0.0);
    CHECK(compare(masked_select(x.to(kGpu), mask.to(kGpu)), masked_select(x, mask), 0) == "");
    CHECK(compare(nonzero(x.to(kGpu)), nonzero(x), 0) == "");
  }
}

TEST_CASE("cuda parity: pad modes, tril, triu, flip, roll, repeat, sort, forward and backward" *
          doctest::skip(kNoGpu)) {
  manual_seed(12);
  for (DType dt : {DType::float32, DType::float64}) {
    const Tensor x = make({3, 4, 5}, dt, true);
    for (int which = 0; which < 9; ++which) {
      INFO(dtype_name(dt) << " case " << which);
      auto f = [&](const Tensor& t) {
        switch (which) {
          case 0: return pad(t, {2, -1, 3, 1}, PadMode::reflect);
          case 1: return pad(t, {4, 2, -2, 1}, PadMode::replicate);
          case 2: return pad(t, {-1, 3, 2, 2}, PadMode::circular);
          case 3: return tril(t, 1);
          case 4: return triu(t, -1);
          case 5: return flip(t, {0, 2});
          case 6: return roll(t, {2, -7}, {1, 2});
          case 7: return repeat(t, {2, 1, 1, 3});
          default: return sort(t, 1, true).first;
        }
      };
      Tensor a = x.detach().clone().requires_grad_(), b = x.detach().to(kGpu).requires_grad_();
      Tensor ya = f(a), yb = f(b);
      CHECK(compare(yb, ya, 0) == "");
      Tensor up = randn(ya.shape()).to(dt);
      ya.backward(up);
      yb.backward(up.to(kGpu));
      CHECK(compare(b.grad(), a.grad(), tol_for(dt)) == "");
    }
  }
  const Tensor i = randint(0, 9, {4, 6});
  CHECK(compare(argsort(i.to(kGpu), 1), argsort(i, 1), 0) == "");
  CHECK(compare(tril(i.to(kGpu)), tril(i), 0) == "");
}
