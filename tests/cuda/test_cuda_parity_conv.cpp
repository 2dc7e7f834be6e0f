// CUDA against CPU for the conv family and batch norm (ops/cuda/conv.cu, ops/cuda/norm.cu):
// conv2d through cuDNN (random geometries with groups, stride, padding, dilation, bias;
// float32, float64, and bf16 / fp16 under autocast; heuristic and cudnn_benchmark(true)
// algorithms), max / avg / adaptive-avg / adaptive-max pooling, batch_norm in training (running stats
// included) and eval mode, and layer_norm's two-stage weight / bias gradient on a large
// shape - forward and backward through autograd. Skipped (visibly) without a GPU.
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>
#include "gradcheck.h"
#include "parity.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(4242);
  return r;
}
int64_t rand_in(int64_t lo, int64_t hi) { return lo + int64_t(rng()() % uint32_t(hi - lo + 1)); }

// compare relative to the largest |ref| (tests/cuda/parity.h)
std::string compare(const Tensor& got, const Tensor& ref, double rtol) {
  return test::compare(got, ref, rtol, test::Scale::max);
}

double rtol_for(DType dt) {
  switch (dt) {
    case DType::float64: return 1e-10;
    case DType::float16: return 1e-2;
    case DType::bfloat16: return 3e-2;
    default: return 1e-4;
  }
}

/// A leaf tensor needing grad: a CPU copy and a GPU copy of the same values.
struct Pair {
  Tensor cpu, gpu;
};
Pair leaf_pair(const Tensor& values) {
  if (!values.defined()) return {};
  return {values.detach().clone().requires_grad_(), values.detach().to(kGpu).requires_grad_()};
}

Tensor grad_of(const Tensor& t) { return t.defined() ? t.grad() : Tensor(); }

/// A random conv2d geometry that fits: x (N, C, H, W), w (O, C/groups, kH, kW).
struct ConvCase {
  Shape x, w;
  Conv2dArgs args;
  bool bias;
  std::string str() const {
    return "x " + shape_str(x) + " w " + shape_str(w) + " stride (" + std::to_string(args.stride[0]) + "," +
           std::to_string(args.stride[1]) + ") pad (" + std::to_string(args.padding[0]) + "," +
           std::to_string(args.padding[1]) + ") dil (" + std::to_string(args.dilation[0]) + "," +
           std::to_string(args.dilation[1]) + ") groups " + std::to_string(args.groups) + (bias ? " bias" : "");
  }
};
ConvCase random_conv() {
  ConvCase c;
  const int64_t G = rand_in(1, 3), cg = rand_in(1, 3), og = rand_in(1, 3);
  const int64_t kH = rand_in(1, 3), kW = rand_in(1, 3);
  c.args.groups = G;
  c.args.stride = {rand_in(1, 2), rand_in(1, 2)};
  c.args.padding = {rand_in(0, 2), rand_in(0, 2)};
  c.args.dilation = {rand_in(1, 2), rand_in(1, 2)};
  const int64_t ekH = c.args.dilation[0] * (kH - 1) + 1, ekW = c.args.dilation[1] * (kW - 1) + 1;
  const int64_t H = std::max<int64_t>(1, ekH - 2 * c.args.padding[0] + rand_in(0, 6));
  const int64_t W = std::max<int64_t>(1, ekW - 2 * c.args.padding[1] + rand_in(0, 6));
  c.x = {rand_in(1, 3), G * cg, H, W};
  c.w = {G * og, cg, kH, kW};
  c.bias = rng()() % 3 != 0;
  return c;
}

/// conv2d forward and backward of one case on both devices in dtype dt (float32 inputs cast
/// by autocast when amp is float16 / bfloat16); checks y and the leaves' gradients.
void check_conv(const ConvCase& c, DType dt, DType amp = DType::float32) {
  CAPTURE(c.str());
  CAPTURE(std::string(dtype_name(dt)));
  CAPTURE(std::string(dtype_name(amp)));
  Pair x = leaf_pair(randn(c.x, {.dtype = dt})), w = leaf_pair(randn(c.w, {.dtype = dt}));
  Pair b = c.bias ? leaf_pair(randn({c.w[0]}, {.dtype = dt})) : Pair{};
  Tensor yc, yg;
  {
    autocast guard(amp == DType::float32 ? DType::bfloat16 : amp, amp != DType::float32);
    yc = conv2d(x.cpu, w.cpu, b.cpu, c.args);
    yg = conv2d(x.gpu, w.gpu, b.gpu, c.args);
  }
  const double tol = rtol_for(amp == DType::float32 ? dt : amp);
  CHECK(compare(yg, yc, tol) == "");
  Tensor g = randn(yc.shape(), {.dtype = DType::float64}).to(yc.dtype());
  yc.backward(g);
  yg.backward(g.to(kGpu));
  CHECK(compare(grad_of(x.gpu), grad_of(x.cpu), tol) == "");
  CHECK(compare(grad_of(w.gpu), grad_of(w.cpu), tol) == "");
  if (c.bias) CHECK(compare(grad_of(b.gpu), grad_of(b.cpu), tol) == "");
}

/// Turns cudnn_benchmark on for a scope.
struct BenchmarkOn {
  BenchmarkOn() { cudnn_benchmark(true); }
  ~BenchmarkOn() { cudnn_benchmark(false); }
};

/// Values on a coarse grid (many ties for max pooling's first-max rule).
Tensor coarse(const Shape& s, DType dt) {
  std::vector<double> v(size_t(shape_numel(s)));
  for (double& e : v) e = double(rand_in(-6, 6)) * 0.5;
  return from_vector(v, s, {.dtype = dt});
}

}  // namespace

TEST_CASE("cudnn_benchmark is a plain flag, also without a GPU") {
  CHECK_FALSE(cudnn_benchmark_enabled());
  {
    BenchmarkOn on;
    CHECK(cudnn_benchmark_enabled());
  }
  CHECK_FALSE(cudnn_benchmark_enabled());
}

TEST_CASE("cuda parity: conv2d through cuDNN, float32 and float64" * doctest::skip(kNoGpu)) {
  manual_seed(5);
  for (DType dt : {DType::float32, DType::float64})
    for (int trial = 0; trial < 10; ++trial) check_conv(random_conv(), dt);
  // A non-contiguous input (a transposed view) and a 3-D (C, H, W) input.
  Pair x = leaf_pair(randn({2, 4, 7, 9})), w = leaf_pair(randn({6, 2, 3, 3}));
  Conv2dArgs a;
  a.groups = 2;
  a.padding = {1, 1};
  Tensor yc = conv2d(x.cpu.transpose(2, 3), w.cpu, Tensor(), a);
  Tensor yg = conv2d(x.gpu.transpose(2, 3), w.gpu, Tensor(), a);
  CHECK(compare(yg, yc, 1e-4) == "");
  sum(yc).backward();
  sum(yg).backward();
  CHECK(compare(grad_of(x.gpu), grad_of(x.cpu), 1e-4) == "");
  CHECK(compare(grad_of(w.gpu), grad_of(w.cpu), 1e-4) == "");
  Tensor x3 = randn({3, 8, 8});
  Tensor w3 = randn({5, 3, 3, 3});
  CHECK(compare(conv2d(x3.to(kGpu), w3.to(kGpu)), conv2d(x3, w3), 1e-4) == "");
}

TEST_CASE("cuda parity: conv2d under autocast (bfloat16, float16)" * doctest::skip(kNoGpu)) {
  manual_seed(6);
  for (DType amp : {DType::bfloat16, DType::float16})
    for (int trial = 0; trial < 6; ++trial) check_conv(random_conv(), DType::float32, amp);
}

TEST_CASE("cuda parity: conv2d with cudnn_benchmark(true) (timed algorithms)" * doctest::skip(kNoGpu)) {
  manual_seed(7);
  BenchmarkOn on;
  for (DType dt : {DType::float32, DType::float64})
    for (int trial = 0; trial < 6; ++trial) check_conv(random_conv(), dt);
  // Same shapes twice: the second call takes the cached algorithms and agrees with the first.
  Tensor x = randn({4, 8, 16, 16}).to(kGpu), w = randn({16, 8, 3, 3}).to(kGpu);
  Conv2dArgs a;
  a.padding = {1, 1};
  Tensor y1 = conv2d(x, w, Tensor(), a), y2 = conv2d(x, w, Tensor(), a);
  CHECK(compare(y2, y1, 1e-6) == "");
}

TEST_CASE("cuda parity: max (ceil_mode, dilation), avg, adaptive avg and max pooling, forward and backward" *
          doctest::skip(kNoGpu)) {
  manual_seed(8);
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::float16}) {
    for (int trial = 0; trial < 8; ++trial) {
      const int64_t kH = rand_in(1, 3), kW = rand_in(1, 3);
      const IntPair k{kH, kW}, s{rand_in(1, 3), rand_in(1, 3)}, p{rand_in(0, kH / 2), rand_in(0, kW / 2)};
      const Shape shape{rand_in(1, 3), rand_in(1, 4), rand_in(2 * kH, 12), rand_in(2 * kW, 12)};
      const bool cip = trial % 2 == 0, ceil_mode = trial % 4 < 2;
      const IntPair d{1 + trial % 2, 2 - trial % 2};  // dilated windows fit: H >= 2 kH
      CAPTURE(ceil_mode);
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(shape));
      CAPTURE(kH);
      CAPTURE(kW);
      CAPTURE(s[0]);
      CAPTURE(s[1]);
      CAPTURE(p[0]);
      CAPTURE(p[1]);
      const IntPair out{rand_in(1, 2 * shape[2]), rand_in(1, 2 * shape[3])};
      const Tensor values = coarse(shape, dt);
      struct PoolOp {
        const char* name;
        std::function<Tensor(const Tensor&)> f;
      };
      const PoolOp ops[] = {
          {"max_pool2d", [&](const Tensor& x) { return max_pool2d(x, k, s, p, {1, 1}, ceil_mode); }},
          {"max_pool2d dilated", [&](const Tensor& x) { return max_pool2d(x, k, s, p, d, ceil_mode); }},
          {"avg_pool2d", [&](const Tensor& x) { return avg_pool2d(x, k, s, p, cip, ceil_mode); }},
          {"adaptive_avg_pool2d", [&](const Tensor& x) { return adaptive_avg_pool2d(x, out); }},
          {"adaptive_max_pool2d", [&](const Tensor& x) { return adaptive_max_pool2d(x, out); }},
      };
      for (const PoolOp& op : ops) {
        CAPTURE(op.name);
        Pair x = leaf_pair(values);
        Tensor yc = op.f(x.cpu), yg = op.f(x.gpu);
        // The GPU kernels sum in the CPU's order: equal up to 16-bit rounding of the input cast.
        const double tol = dt == DType::float64 ? 1e-12 : dt == DType::float32 ? 1e-6 : 1e-2;
        CHECK(compare(yg, yc, tol) == "");
        Tensor g = coarse(yc.shape(), dt);
        yc.backward(g);
        yg.backward(g.to(kGpu));
        CHECK(compare(grad_of(x.gpu), grad_of(x.cpu), tol) == "");
      }
    }
  }
}

TEST_CASE("cuda parity: the 3-D compositions (conv3d, conv_transpose3d, max/avg/adaptive 3-D pools, lp_pool2d)" *
          doctest::skip(kNoGpu)) {
  manual_seed(6);
  for (DType dt : {DType::float32, DType::float64}) {
    INFO(dtype_name(dt));
    const double tol = dt == DType::float64 ? 1e-10 : 1e-4;
    const Tensor x5 = randn({2, 4, 5, 6, 5}, {.dtype = dt}), w = randn({4, 2, 2, 3, 2}, {.dtype = dt});
    const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
        {"conv3d", [](const Tensor& x, const Tensor& k) { return conv3d(x, k, Tensor(), {.stride = {2, 1, 1}, .groups = 2}); }},
        {"conv_transpose3d", [](const Tensor& x, const Tensor& k) {
           return conv_transpose3d(x, k, Tensor(), {.stride = {2, 1, 2}, .padding = {1, 0, 0}, .output_padding = {1, 0, 1}});
         }},
        {"max_pool3d", [](const Tensor& x, const Tensor&) { return max_pool3d(x, {2, 2, 2}, {1, 2, 1}, {1, 0, 1}); }},
        {"avg_pool3d", [](const Tensor& x, const Tensor&) { return avg_pool3d(x, {2, 3, 2}, {1, 1, 2}, {1, 1, 0}, false); }},
        {"adaptive_avg_pool3d", [](const Tensor& x, const Tensor&) { return adaptive_avg_pool3d(x, {2, 4, 3}); }},
        {"adaptive_max_pool3d", [](const Tensor& x, const Tensor&) { return adaptive_max_pool3d(x, {3, 2, 2}); }},
        {"lp_pool2d", [](const Tensor& x, const Tensor&) { return lp_pool2d(x.select(2, 0), 2.0, {2, 3}, {1, 2}, true); }},
    };
    for (const auto& op : ops) {  // (no structured binding: clang refuses one captured by INFO)
      INFO(op.first);
      Tensor xc = x5.clone().requires_grad_(), xg = x5.to(kGpu).requires_grad_();
      Tensor wc = w.clone().requires_grad_(), wg = w.to(kGpu).requires_grad_();
      const Tensor yc = op.second(xc, wc), yg = op.second(xg, wg);
      CHECK(compare(yg, yc, tol) == "");
      const Tensor r = randn(yc.shape(), {.dtype = dt});
      sum(mul(yc, r)).backward();
      sum(mul(yg, r.to(kGpu))).backward();
      CHECK(compare(xg.grad(), xc.grad(), tol) == "");
      if (wc.grad().defined()) CHECK(compare(wg.grad(), wc.grad(), tol) == "");
    }
  }
}

TEST_CASE("cuda parity: batch_norm in training (running stats) and eval mode" * doctest::skip(kNoGpu)) {
  manual_seed(9);
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = dt == DType::float64 ? 1e-9 : 1e-4;
    for (int trial = 0; trial < 8; ++trial) {
      const int64_t C = rand_in(1, 6);
      const Shape shape =
          trial % 4 == 3 ? Shape{rand_in(2, 9), C} : Shape{rand_in(1, 4), C, rand_in(1, 7), rand_in(2, 7)};
      const bool training = trial % 2 == 0, affine = trial % 3 != 2;
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(shape));
      CAPTURE(training);
      CAPTURE(affine);
      Pair x = leaf_pair(randn(shape, {.dtype = dt}) * 3.0 + 1.0);
      Pair w = affine ? leaf_pair(randn({C}, {.dtype = dt})) : Pair{};
      Pair b = affine ? leaf_pair(randn({C}, {.dtype = dt})) : Pair{};
      Tensor rm_c = randn({C}, {.dtype = dt}), rv_c = rand({C}, {.dtype = dt}) + 0.5;
      Tensor rm_g = rm_c.to(kGpu), rv_g = rv_c.to(kGpu);
      Tensor yc = batch_norm(x.cpu, w.cpu, b.cpu, rm_c, rv_c, training, 0.3, 1e-3);
      Tensor yg = batch_norm(x.gpu, w.gpu, b.gpu, rm_g, rv_g, training, 0.3, 1e-3);
      CHECK(compare(yg, yc, tol) == "");
      CHECK(compare(rm_g, rm_c, tol) == "");
      CHECK(compare(rv_g, rv_c, tol) == "");
      Tensor g = randn(shape, {.dtype = dt});
      yc.backward(g);
      yg.backward(g.to(kGpu));
      CHECK(compare(grad_of(x.gpu), grad_of(x.cpu), tol) == "");
      if (affine) {
        CHECK(compare(grad_of(w.gpu), grad_of(w.cpu), tol) == "");
        CHECK(compare(grad_of(b.gpu), grad_of(b.cpu), tol) == "");
      }
    }
  }
  // Training without running stats, only the weight needing grad.
  Tensor x = randn({4, 3, 5, 5}), w = randn({3});
  Pair wp = leaf_pair(w);
  Tensor yc = batch_norm(x, wp.cpu, Tensor(), Tensor(), Tensor(), true);
  Tensor yg = batch_norm(x.to(kGpu), wp.gpu, Tensor(), Tensor(), Tensor(), true);
  CHECK(compare(yg, yc, 1e-4) == "");
  sum(yc).backward();
  sum(yg).backward();
  CHECK(compare(grad_of(wp.gpu), grad_of(wp.cpu), 1e-4) == "");
}

TEST_CASE("cuda parity: layer_norm backward on a large shape (two-stage dweight / dbias)" * doctest::skip(kNoGpu)) {
  manual_seed(10);
  for (auto rd : {std::pair<int64_t, int64_t>{4096, 768}, {37, 1000}, {3, 5}}) {
    const int64_t R = rd.first, D = rd.second;
    CAPTURE(R);
    CAPTURE(D);
    Pair x = leaf_pair(randn({R, D})), w = leaf_pair(randn({D})), b = leaf_pair(randn({D}));
    Tensor yc = layer_norm(x.cpu, {D}, w.cpu, b.cpu), yg = layer_norm(x.gpu, {D}, w.gpu, b.gpu);
    CHECK(compare(yg, yc, 1e-4) == "");
    Tensor g = randn({R, D});
    yc.backward(g);
    yg.backward(g.to(kGpu));
    CHECK(compare(grad_of(x.gpu), grad_of(x.cpu), 1e-4) == "");
    CHECK(compare(grad_of(w.gpu), grad_of(w.cpu), 1e-4) == "");
    CHECK(compare(grad_of(b.gpu), grad_of(b.cpu), 1e-4) == "");
  }
}
