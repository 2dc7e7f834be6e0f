// conv2d and pooling: values by hand and against naive loop references (stride, padding,
// dilation, groups, bias), gradchecks in float64 over several configs (including
// non-contiguous inputs), 16-bit float paths and argument errors.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include "gradcheck.h"
#include "kiln/ops/cpu/sgemm.h"
#include "kiln/ops/reference/conv2d.h"

using namespace kiln;
using kiln::test::allclose;
using kiln::test::f64;
using kiln::test::gradcheck;
using kiln::test::max_abs_diff;
using kiln::test::T;

namespace {

/// conv2d in float64 by ops/reference/conv2d.h: seven nested loops over a 4-D input.
Tensor ref_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, Conv2dArgs a) {
  const reference::Conv2dShape s{.N = x.size(0), .C = x.size(1), .H = x.size(2), .W = x.size(3), .O = w.size(0),
                                 .kH = w.size(2), .kW = w.size(3), .stride_h = a.stride[0], .stride_w = a.stride[1],
                                 .pad_h = a.padding[0], .pad_w = a.padding[1], .dil_h = a.dilation[0],
                                 .dil_w = a.dilation[1], .groups = a.groups};
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  std::vector<double> out(size_t(s.N * s.O * s.out_h() * s.out_w()));
  reference::conv2d<double>(s, xv.data(), wv.data(), b.defined() ? bv.data() : nullptr, out.data());
  return from_vector(out, {s.N, s.O, s.out_h(), s.out_w()});
}

enum class PoolKind { max, avg, avg_nopad };

/// PyTorch's pooled size, from its formula in doubles (conv.cpp computes it in integers).
int64_t ref_pooled(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double q = double(n + 2 * p - d * (k - 1) - 1) / double(s);
  int64_t out = int64_t(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  return out;
}

/// Naive pooling over (N, C, H, W) in float64; taps d apart (max only), ceil_mode's sizes.
/// idx, when given, receives the first maximum's h*W + w of each window.
Tensor ref_pool(const Tensor& x, IntPair k, IntPair s, IntPair p, PoolKind kind, IntPair d = {1, 1},
                bool ceil_mode = false, std::vector<int64_t>* idx = nullptr) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = ref_pooled(H, k[0], s[0], p[0], d[0], ceil_mode);
  const int64_t OW = ref_pooled(W, k[1], s[1], p[1], d[1], ceil_mode);
  auto xv = x.to_vector<double>();
  std::vector<double> out;
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t valid = 0, bi = -1;
        for (int64_t i = 0; i < k[0]; ++i)
          for (int64_t j = 0; j < k[1]; ++j) {
            int64_t h = oh * s[0] - p[0] + i * d[0], w = ow * s[1] - p[1] + j * d[1];
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            double v = xv[size_t((nc * H + h) * W + w)];
            if (bi < 0 || v > best || std::isnan(v)) best = v, bi = h * W + w;
            sum += v;
            ++valid;
          }
        if (idx) idx->push_back(bi);
        // count_include_pad divides by the window clipped to the padded input
        int64_t h0 = oh * s[0] - p[0], w0 = ow * s[1] - p[1];
        int64_t hp = std::min(h0 + k[0], H + p[0]) - h0, wp = std::min(w0 + k[1], W + p[1]) - w0;
        out.push_back(kind == PoolKind::max ? best : kind == PoolKind::avg ? sum / double(hp * wp) : sum / double(valid));
      }
  return from_vector(out, {N, C, OH, OW});
}

/// Naive adaptive average (or, max: maximum, first index in idx) pooling with PyTorch's bins.
Tensor ref_adaptive(const Tensor& x, IntPair os, bool max = false, std::vector<int64_t>* idx = nullptr) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  auto xv = x.to_vector<double>();
  std::vector<double> out;
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t i = 0; i < os[0]; ++i)
      for (int64_t j = 0; j < os[1]; ++j) {
        int64_t h0 = int64_t(std::floor(double(i * H) / double(os[0])));
        int64_t h1 = int64_t(std::ceil(double((i + 1) * H) / double(os[0])));
        int64_t w0 = int64_t(std::floor(double(j * W) / double(os[1])));
        int64_t w1 = int64_t(std::ceil(double((j + 1) * W) / double(os[1])));
        double s = 0, best = 0;
        int64_t bi = -1;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            const double v = xv[size_t((nc * H + h) * W + w)];
            s += v;
            if (bi < 0 || v > best || std::isnan(v)) best = v, bi = h * W + w;
          }
        if (idx) idx->push_back(bi);
        out.push_back(max ? best : s / double((h1 - h0) * (w1 - w0)));
      }
  return from_vector(out, {N, C, os[0], os[1]});
}

std::string pair_string(IntPair p) {
  std::string s = std::to_string(p[0]);  // (not "(" + ...: GCC 12 warns -Wrestrict there)
  s += ", ";
  s += std::to_string(p[1]);
  return s;
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

bool has(const std::string& s, const std::string& part) {
  if (s.find(part) == std::string::npos) {
    MESSAGE("'" << part << "' not in: " << s);
    return false;
  }
  return true;
}

struct ConvCase {
  Shape x, w;
  Conv2dArgs args;
  bool bias;
};

}  // namespace

TEST_CASE("conv2d: values by hand") {
  // 3x3 input 1..9, 2x2 kernel of ones: window sums
  Tensor x = T({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor w = ones({1, 1, 2, 2}, f64);
  Tensor y = conv2d(x, w);
  CHECK(y.shape() == Shape{1, 1, 2, 2});
  CHECK(y.to_vector<double>() == std::vector<double>{12, 16, 24, 28});
  // bias and padding 1: corners see one 2x2 block
  Tensor yb = conv2d(x, w, T({1}, {1}), {.padding = {1, 1}});
  CHECK(yb.shape() == Shape{1, 1, 4, 4});
  CHECK(yb.at({0, 0, 0, 0}) == 2.0);   // 1 + bias
  CHECK(yb.at({0, 0, 3, 3}) == 10.0);  // 9 + bias
  CHECK(yb.at({0, 0, 1, 1}) == 13.0);
  // stride 2 with padding 1 on the 3x3: picks the four corner windows
  Tensor ys = conv2d(x, w, Tensor(), {.stride = {2, 2}, .padding = {1, 1}});
  CHECK(ys.to_vector<double>() == std::vector<double>{1, 5, 11, 28});
  // dilation 2: a 2x2 kernel spans 3x3 -> the four corners 1 + 3 + 7 + 9
  Tensor yd = conv2d(x, w, Tensor(), {.dilation = {2, 2}});
  CHECK(yd.to_vector<double>() == std::vector<double>{20});
  // unbatched (C, H, W) input
  Tensor y3 = conv2d(x.reshape({1, 3, 3}), w);
  CHECK(y3.shape() == Shape{1, 2, 2});
  CHECK(y3.to_vector<double>() == std::vector<double>{12, 16, 24, 28});
}

TEST_CASE("conv2d: against the naive reference") {
  manual_seed(10);
  std::vector<ConvCase> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {}, true},
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {.padding = {1, 1}}, false},
      {{3, 2, 9, 8}, {5, 2, 3, 2}, {.stride = {2, 2}, .padding = {1, 0}}, true},
      {{2, 2, 9, 9}, {3, 2, 3, 3}, {.stride = {1, 2}, .padding = {2, 1}, .dilation = {2, 2}}, true},
      {{2, 4, 6, 5}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}, true},
      {{2, 6, 5, 5}, {6, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 6}, false},  // depthwise
      {{3, 4, 5, 6}, {8, 4, 1, 1}, {}, true},                                                   // pointwise
      {{2, 4, 5, 6}, {6, 2, 1, 1}, {.groups = 2}, false},                                       // grouped pointwise
      {{2, 4, 7, 7}, {3, 4, 1, 1}, {.stride = {2, 2}}, true},                                   // strided 1x1
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {.padding = {1, 1}}, true},                                  // N < threads
      {{5, 1, 28, 28}, {8, 1, 3, 3}, {.padding = {1, 1}}, true},                                // MNIST-like
      {{2, 3, 4, 4}, {2, 3, 4, 4}, {}, true},                                                   // kernel = input
  };
  for (const auto& c : cases) {
    CAPTURE(shape_str(c.x));
    CAPTURE(shape_str(c.w));
    for (DType dt : {DType::float64, DType::float32}) {
      Tensor x = randn(c.x, {.dtype = dt}), w = randn(c.w, {.dtype = dt});
      Tensor b = c.bias ? randn({c.w[0]}, {.dtype = dt}) : Tensor();
      Tensor y = conv2d(x, w, b, c.args);
      CHECK(y.dtype() == dt);
      CHECK(close_to_ref(y, ref_conv2d(x, w, b, c.args), dt == DType::float64 ? 1e-12 : 1e-4));
    }
  }
  // non-contiguous input and weight
  Tensor x = randn({2, 6, 5, 3}, f64).permute({0, 3, 1, 2});  // (2, 3, 6, 5)
  Tensor w = randn({4, 3, 3, 3}, f64).transpose(2, 3);
  CHECK(close_to_ref(conv2d(x, w, Tensor(), {.padding = {1, 1}}),
                     ref_conv2d(x.contiguous(), w.contiguous(), Tensor(), {.padding = {1, 1}}), 1e-12));
}

TEST_CASE("conv2d: gradcheck") {
  manual_seed(11);
  std::vector<ConvCase> cases = {
      {{2, 2, 5, 4}, {3, 2, 3, 3}, {}, true},
      {{2, 2, 5, 5}, {3, 2, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, true},
      {{1, 2, 7, 6}, {2, 2, 2, 3}, {.stride = {1, 2}, .padding = {2, 1}, .dilation = {2, 2}}, false},
      {{2, 4, 4, 4}, {4, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}, true},
      {{3, 4, 3, 3}, {2, 4, 1, 1}, {}, true},
      {{2, 2, 5, 5}, {4, 1, 3, 3}, {.stride = {2, 1}, .groups = 2}, false},
      {{2, 3, 6, 7}, {5, 3, 2, 3}, {.padding = {2, 1}, .dilation = {2, 1}}, true},  // direct, dilated
      // >= 12 input channels: the input gradient as a transposed convolution
      {{1, 12, 4, 5}, {3, 12, 3, 3}, {.padding = {1, 1}}, true},
      {{1, 24, 5, 5}, {4, 12, 2, 3}, {.padding = {1, 2}, .dilation = {2, 1}, .groups = 2}, false},
      // padding > dilation (kernel - 1): no transposed convolution, GEMM + col2im
      {{1, 2, 4, 5}, {3, 2, 3, 3}, {.padding = {3, 1}}, false},  // direct
      {{1, 12, 4, 4}, {2, 12, 3, 3}, {.padding = {3, 3}}, true},  // wide
  };
  for (const auto& c : cases) {
    CAPTURE(shape_str(c.x));
    CAPTURE(shape_str(c.w));
    Conv2dArgs a = c.args;
    if (c.bias)
      CHECK(gradcheck([a](std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], a); },
                      {randn(c.x, f64), randn(c.w, f64), randn({c.w[0]}, f64)}));
    else
      CHECK(gradcheck([a](std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), a); },
                      {randn(c.x, f64), randn(c.w, f64)}));
  }
  // non-contiguous input inside f; unbatched input
  CHECK(gradcheck(
      [](std::vector<Tensor>& in) { return conv2d(in[0].transpose(2, 3), in[1], in[2], {.padding = {1, 1}}); },
      {randn({2, 2, 4, 5}, f64), randn({3, 2, 3, 3}, f64), randn({3}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), {.stride = {2, 2}}); },
                  {randn({2, 5, 5}, f64), randn({2, 2, 2, 2}, f64)}));
}

TEST_CASE("conv2d: backward against the naive forward at sizes that take every CPU path") {
  // conv2d is bilinear, so for any upstream gradient g: <g, conv(x, w)> = <dx, x> = <dw, w>,
  // and db = the sums of g per channel. With the forward from the naive loops this checks
  // the backward of the kernel's fast paths (direct first-layer conv, the wide stride-1
  // layout over uneven sample groups, dense im2col for strided convs) at realistic batches.
  manual_seed(12);
  std::vector<ConvCase> cases = {
      {{19, 1, 28, 28}, {6, 1, 5, 5}, {.padding = {2, 2}}, true},                     // lenet conv1: direct
      {{17, 6, 14, 14}, {16, 6, 5, 5}, {}, true},                                      // lenet conv2: wide
      {{16, 1, 28, 28}, {32, 1, 3, 3}, {.padding = {1, 1}}, false},                    // convnet conv1
      {{5, 32, 14, 14}, {64, 32, 3, 3}, {.padding = {1, 1}}, false},                   // convnet conv3: wide
      {{18, 3, 11, 10}, {8, 3, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}, true},  // "same", dilated
      {{17, 4, 9, 9}, {8, 4, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, true},      // strided: im2col
      {{16, 4, 8, 8}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}, true},           // grouped
  };
  for (const auto& c : cases) {
    CAPTURE(shape_str(c.x));
    CAPTURE(shape_str(c.w));
    for (DType dt : {DType::float64, DType::float32}) {
      CAPTURE(std::string(dtype_name(dt)));
      const double tol = dt == DType::float64 ? 1e-10 : 2e-4;
      Tensor x = randn(c.x, {.dtype = dt}).requires_grad_(), w = randn(c.w, {.dtype = dt}).requires_grad_();
      Tensor b = c.bias ? randn({c.w[0]}, {.dtype = dt}).requires_grad_() : Tensor();
      Tensor y = conv2d(x, w, b, c.args);
      Tensor g = randn(y.shape(), {.dtype = dt});
      sum(y * g).backward();
      const Tensor x64 = x.detach().to(DType::float64), w64 = w.detach().to(DType::float64),
                   g64 = g.to(DType::float64);
      const double ref = sum(ref_conv2d(x64, w64, Tensor(), c.args) * g64).item();
      const double via_dx = sum(x.grad().to(DType::float64) * x64).item();
      const double via_dw = sum(w.grad().to(DType::float64) * w64).item();
      const double scale = std::sqrt(double(g.numel())) * std::sqrt(double(c.w[1] * c.w[2] * c.w[3]));
      CHECK(std::fabs(via_dx - ref) <= tol * scale);
      CHECK(std::fabs(via_dw - ref) <= tol * scale);
      if (c.bias) CHECK(allclose(b.grad().to(DType::float64), sum(g64, {0, 2, 3}), tol * 10, tol * 10));
    }
  }
}

TEST_CASE("conv2d: 16-bit floats compute in float32 and round") {
  manual_seed(12);
  Tensor x = randn({2, 3, 6, 6}), w = randn({4, 3, 3, 3}), b = randn({4});
  for (DType dt : {DType::float16, DType::bfloat16}) {
    Tensor y = conv2d(x.to(dt), w.to(dt), b.to(dt), {.padding = {1, 1}});
    CHECK(y.dtype() == dt);
    Tensor ref = conv2d(x.to(dt).to(DType::float32), w.to(dt).to(DType::float32), b.to(dt).to(DType::float32),
                        {.padding = {1, 1}})
                     .to(dt);
    CHECK(max_abs_diff(y, ref) == 0.0);
  }
}

TEST_CASE("conv2d: a 16-bit CPU convolution widened in blocks of samples has the bits of widening first") {
  // The CPU kernels read 16-bit x and dy and write y and dx a block of samples at a time
  // (about a megabyte of float32 per block): at 64 x 32 x 32 per sample the blocks hold one
  // or two samples. Outputs and gradients must be those of the float32 convolution on the
  // widened tensors, rounded once (the wide algorithm sums every GEMM in the same order).
  manual_seed(13);
  const DType f32 = DType::float32, f16 = DType::float16;
  const Tensor x16 = randn({5, 64, 32, 32}).to(f16), w16 = (randn({64, 64, 3, 3}) * 0.05).to(f16);
  const Tensor g = randn({5, 64, 32, 32}).to(f16);
  const int saved = get_num_threads();
  for (int nt : {1, 2, 3}) {  // 3: chunks of 2, 2 and 1 samples
    CAPTURE(nt);
    set_num_threads(nt);
    Tensor x = x16.clone().requires_grad_(), w = w16.clone().requires_grad_();
    Tensor x32 = x16.to(f32).requires_grad_(), w32 = w16.to(f32).requires_grad_();
    Tensor y = conv2d(x, w, Tensor(), {.padding = {1, 1}}), y32 = conv2d(x32, w32, Tensor(), {.padding = {1, 1}});
    REQUIRE(y.dtype() == f16);
    CHECK(max_abs_diff(y.to(f32), y32.detach().to(f16).to(f32)) == 0.0);
    y.backward(g);
    y32.backward(g.to(f32));
    CHECK(max_abs_diff(x.grad().to(f32), x32.grad().to(f16).to(f32)) == 0.0);
    CHECK(max_abs_diff(w.grad().to(f32), w32.grad().to(f16).to(f32)) == 0.0);
  }
  set_num_threads(saved);
}

TEST_CASE("conv2d on 16-bit CPU tensors, every algorithm: bitwise the float32 convolution of the widened tensors") {
  // The direct and wide algorithms take 16-bit x, dy, dx as they are and widen / round a
  // channel plane at a time as they copy them into and out of their buffers; im2col widens
  // blocks of samples. Every output and gradient must have the bits of the float32
  // convolution on the widened tensors, rounded once, at 1 and 3 threads. (bf16 only where
  // the bf16 GEMM is not preferred: its products are summed in another order.) 24 samples:
  // the direct weight gradient used to be summed per block of 10 widened samples, another
  // float32 order.
  manual_seed(22);
  const DType f32 = DType::float32;
  const std::vector<ConvCase> cases = {
      {{24, 1, 28, 28}, {6, 1, 5, 5}, {.padding = {2, 2}}, true},       // direct, padded; dx: wide, padded
      {{4, 3, 12, 12}, {8, 3, 3, 3}, {}, false},                         // direct, unpadded; dx: wide, unpadded
      {{5, 6, 14, 14}, {16, 6, 5, 5}, {}, true},                         // wide, unpadded (LeNet's conv2)
      {{3, 32, 14, 14}, {64, 32, 3, 3}, {.padding = {1, 1}}, false},     // wide, padded, transposed dx
      {{4, 1, 28, 28}, {32, 1, 3, 3}, {.padding = {1, 1}}, true},        // im2col forward, direct weight gradient
      {{2, 4, 9, 9}, {6, 4, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, true},  // im2col (strided)
      {{2, 8, 10, 10}, {8, 4, 3, 3}, {.padding = {1, 1}, .groups = 2}, false},     // wide, grouped
  };
  const int saved = get_num_threads();
  for (DType dt : {DType::float16, DType::bfloat16}) {
    if (dt == DType::bfloat16 && sgemm_bf16_preferred()) continue;
    for (int nt : {1, 3})
      for (const ConvCase& c : cases) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(nt);
        CAPTURE(shape_str(c.x));
        CAPTURE(shape_str(c.w));
        set_num_threads(nt);
        const Tensor x16 = randn(c.x).to(dt), w16 = (randn(c.w) * 0.2).to(dt);
        const Tensor b16 = c.bias ? randn({c.w[0]}).to(dt) : Tensor();
        Tensor x = x16.clone().requires_grad_(), w = w16.clone().requires_grad_();
        Tensor xw = x16.to(f32).requires_grad_(), ww = w16.to(f32).requires_grad_();
        Tensor b = c.bias ? b16.clone().requires_grad_() : Tensor(), bw = c.bias ? b16.to(f32).requires_grad_() : Tensor();
        const Tensor y = conv2d(x, w, b, c.args), yw = conv2d(xw, ww, bw, c.args);
        REQUIRE(y.dtype() == dt);
        auto same_bits = [&](const Tensor& got, const Tensor& want32) {
          const Tensor want = want32.detach().to(dt);
          REQUIRE(got.shape() == want.shape());
          return std::memcmp(got.contiguous().raw_data(), want.raw_data(), size_t(got.numel()) * 2) == 0;
        };
        CHECK(same_bits(y, yw));
        const Tensor g = randn(y.shape()).to(dt);
        y.backward(g);
        yw.backward(g.to(f32));
        CHECK(same_bits(x.grad(), xw.grad()));
        CHECK(same_bits(w.grad(), ww.grad()));
        if (c.bias) CHECK(same_bits(b.grad(), bw.grad()));
      }
  }
  set_num_threads(saved);
}

TEST_CASE("conv2d, conv_transpose2d: bfloat16 on the CPU, every algorithm, against float32 on the same values") {
  // A bf16 convolution on the CPU widens its operands to float32; where sgemm_bf16_preferred()
  // its GEMMs then multiply them as bf16 pairs (Conv2dGeom::bf16_products, exact products
  // summed in float32), elsewhere the float32 GEMM runs. Either way every output and
  // gradient is the float32 convolution of the same bf16 values, up to the order of the
  // float32 sums, rounded once to bf16.
  if (sgemm_bf16_preferred()) MESSAGE("bf16 products: the ", sgemm_bf16_kernel(), " GEMM ran");
  else MESSAGE("bf16 products not taken here (no AVX512_BF16, or not preferred): the float32 GEMMs ran");
  manual_seed(21);
  const std::vector<ConvCase> cases = {
      {{6, 1, 28, 28}, {6, 1, 5, 5}, {.padding = {2, 2}}, true},                     // direct
      {{5, 6, 14, 14}, {16, 6, 5, 5}, {}, true},                                      // wide
      {{4, 1, 28, 28}, {32, 1, 3, 3}, {.padding = {1, 1}}, false},                    // im2col forward
      {{3, 32, 14, 14}, {64, 32, 3, 3}, {.padding = {1, 1}}, false},                  // wide, transposed dx
      {{3, 16, 9, 9}, {16, 16, 3, 3}, {.padding = {1, 1}}, false},                    // wide, odd wide row (97)
      {{5, 3, 11, 10}, {8, 3, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}}, true},  // dilated
      {{5, 16, 9, 9}, {24, 16, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, true},   // strided: im2col
      {{4, 24, 8, 8}, {32, 12, 3, 3}, {.padding = {1, 1}, .groups = 2}, true},        // grouped
      {{3, 40, 7, 7}, {48, 40, 1, 1}, {}, true},                                      // pointwise
      // samples of a megabyte and more: the kernels widen 16-bit blocks of 1-2 samples
      {{5, 64, 32, 32}, {64, 64, 3, 3}, {.padding = {1, 1}}, false},                  // wide, blocks
      {{3, 1, 128, 128}, {32, 1, 3, 3}, {.padding = {1, 1}}, true},                   // direct, blocks
  };
  const DType bf = DType::bfloat16, f32 = DType::float32;
  // |a - b| within one bf16 rounding of b plus float32 sums over `depth` products of size ~scale
  auto close = [](const Tensor& a, const Tensor& b, double depth) {
    const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < av.size(); ++i) {
      const double e = std::fabs(av[i] - bv[i]) - std::fabs(bv[i]) * 0x1p-8;
      if (!(e <= worst)) worst = e;
    }
    return worst <= 1e-6 * depth;
  };
  for (bool transpose : {false, true})
    for (const auto& c : cases) {
      if (transpose && c.args.groups > 1) continue;  // conv_transpose2d's weight is (in, out/groups, kH, kW)
      CAPTURE(transpose);
      CAPTURE(shape_str(c.x));
      CAPTURE(shape_str(c.w));
      // conv_transpose2d(x, w) is the input gradient of conv2d: its input has the weight's out channels
      Shape xs = c.x;
      if (transpose) xs[1] = c.w[0];
      Tensor x = randn(xs).to(bf).requires_grad_(), w = randn(c.w).to(bf).requires_grad_();
      const int64_t outc = transpose ? c.w[1] : c.w[0];
      Tensor b = c.bias ? randn({outc}).to(bf).requires_grad_() : Tensor();
      Tensor x32 = x.detach().to(f32).requires_grad_(), w32 = w.detach().to(f32).requires_grad_();
      Tensor b32 = c.bias ? b.detach().to(f32).requires_grad_() : Tensor();
      ConvTranspose2dArgs targs{.stride = c.args.stride, .padding = c.args.padding, .dilation = c.args.dilation};
      auto run = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
        return transpose ? conv_transpose2d(xi, wi, bi, targs) : conv2d(xi, wi, bi, c.args);
      };
      Tensor y = run(x, w, b), y32 = run(x32, w32, b32);
      REQUIRE(y.dtype() == bf);
      if (!transpose) {  // conv2d keeps x and w in 16 bits for its backward (widened when it runs)
        REQUIRE(y.grad_fn() != nullptr);
        CHECK(y.grad_fn()->name == "conv2d");
        CHECK(y.grad_fn()->saved.size() == 2);
        for (const auto& sv : y.grad_fn()->saved) CHECK(sv.tensor.dtype() == bf);
      }
      const double depth = double(c.w[1] * c.w[2] * c.w[3]) + 8.0;
      CHECK(close(y, y32, depth * 4));
      Tensor g = randn(y.shape()).to(bf);
      sum(y * g).backward();
      sum(y32 * g.to(f32)).backward();
      REQUIRE(x.grad().dtype() == bf);
      CHECK(close(x.grad(), x32.grad(), depth * 8));
      CHECK(close(w.grad(), w32.grad(), double(y.numel() / outc) * 8));
      if (c.bias) CHECK(close(b.grad(), b32.grad(), double(y.numel() / outc) * 8));
    }
}

TEST_CASE("conv2d: errors") {
  Tensor x = ones({2, 3, 8, 8}), w = ones({4, 3, 3, 3});
  CHECK(has(error_of([&] { conv2d(ones({3, 8}), w); }), "[3, 8]"));                  // wrong ndim
  CHECK(has(error_of([&] { conv2d(x, ones({4, 3, 3})); }), "[4, 3, 3]"));            // weight ndim
  std::string msg = error_of([&] { conv2d(x, ones({4, 2, 3, 3})); });                 // channel mismatch
  CHECK(has(msg, "[2, 3, 8, 8]"));
  CHECK(has(msg, "[4, 2, 3, 3]"));
  CHECK(has(error_of([&] { conv2d(x, ones({4, 1, 3, 3}), Tensor(), {.groups = 2}); }), "groups"));
  CHECK(has(error_of([&] { conv2d(ones({2, 4, 8, 8}), ones({3, 2, 3, 3}), Tensor(), {.groups = 2}); }),
            "out_channels"));
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.groups = 0}), Error);
  // no input or no output channels: an error (the direct kernel used to crash on C = 0)
  for (DType dt : {DType::float32, DType::float64}) {
    CHECK(has(error_of([&] { conv2d(zeros({2, 0, 4, 4}, {.dtype = dt}), zeros({3, 0, 3, 3}, {.dtype = dt}),
                                    zeros({3}, {.dtype = dt})); }), "at least one input"));
    CHECK(has(error_of([&] { conv2d(zeros({2, 3, 4, 4}, {.dtype = dt}), zeros({0, 3, 3, 3}, {.dtype = dt})); }),
              "[0, 3, 3, 3]"));
    CHECK_THROWS_AS(conv_transpose2d(zeros({2, 0, 4, 4}, {.dtype = dt}), zeros({0, 3, 3, 3}, {.dtype = dt})), Error);
    // an empty plane is refused even when padding would make a window fit (as PyTorch): max
    // pooling read and wrote past its buffers there, the others returned zeros or the bias
    const Tensor e = zeros({1, 4, 0, 5}, {.dtype = dt});
    CHECK(has(error_of([&] { max_pool2d(e, {2, 2}, {1, 1}, {1, 1}); }), "non-empty"));
    CHECK(has(error_of([&] { avg_pool2d(zeros({1, 4, 3, 0}, {.dtype = dt}), {2, 2}, {1, 1}, {1, 1}); }), "non-empty"));
    CHECK(has(error_of([&] { conv2d(e, zeros({4, 4, 1, 1}, {.dtype = dt}), Tensor(), {.padding = {1, 1}}); }),
              "[1, 4, 0, 5]"));
    CHECK(has(error_of([&] { conv_transpose2d(e, zeros({4, 4, 1, 1}, {.dtype = dt})); }), "non-empty"));
    // an empty batch is fine
    CHECK(max_pool2d(zeros({0, 4, 4, 4}, {.dtype = dt}), {2, 2}).shape() == Shape{0, 4, 2, 2});
    CHECK(conv2d(zeros({0, 4, 4, 4}, {.dtype = dt}), zeros({3, 4, 3, 3}, {.dtype = dt})).shape() == Shape{0, 3, 2, 2});
  }
  msg = error_of([&] { conv2d(ones({1, 3, 2, 2}), w); });  // kernel larger than input
  CHECK(has(msg, "larger"));
  CHECK(has(msg, "[1, 3, 2, 2]"));
  CHECK_NOTHROW(conv2d(ones({1, 3, 2, 2}), w, Tensor(), {.padding = {1, 1}}));
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.dilation = {4, 4}}), Error);  // dilated kernel 9 > 8
  CHECK(has(error_of([&] { conv2d(x, w, Tensor(), {.stride = {0, 1}}); }), "stride"));
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.stride = {1, -1}}), Error);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.padding = {-1, 0}}), Error);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.dilation = {0, 1}}), Error);
  CHECK(has(error_of([&] { conv2d(x, w, ones({5})); }), "[5]"));               // bias shape
  CHECK(has(error_of([&] { conv2d(x, ones({4, 3, 3, 3}, f64)); }), "float64"));  // dtype mismatch
  CHECK_THROWS_AS(conv2d(x, w, ones({4}, f64)), Error);
  CHECK_THROWS_AS(conv2d(ones({2, 3, 8, 8}, {.dtype = DType::int64}), ones({4, 3, 3, 3}, {.dtype = DType::int64})),
                  Error);
  CHECK_THROWS_AS(conv2d(Tensor(), w), Error);
}

TEST_CASE("pooling: values by hand") {
  Tensor x = T({1, 2, 3, 4,  //
                5, 6, 7, 8,  //
                9, 10, 11, 12,  //
                13, 14, 15, 16},
               {1, 1, 4, 4});
  Tensor m = max_pool2d(x, {2, 2});  // stride defaults to the kernel
  CHECK(m.shape() == Shape{1, 1, 2, 2});
  CHECK(m.to_vector<double>() == std::vector<double>{6, 8, 14, 16});
  Tensor mp = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});  // padding counts as -inf
  CHECK(mp.to_vector<double>() == std::vector<double>{6, 8, 14, 16});
  Tensor mn = max_pool2d(-x, {2, 2}, {2, 2}, {1, 1});  // all-negative input: padding never wins
  CHECK(mn.to_vector<double>() == std::vector<double>{-1, -2, -4, -5, -6, -8, -13, -14, -16});
  Tensor a = avg_pool2d(x, {2, 2});
  CHECK(a.to_vector<double>() == std::vector<double>{3.5, 5.5, 11.5, 13.5});
  // padding 1, kernel 2, stride 2: corner window holds one real value
  Tensor ap = avg_pool2d(x, {2, 2}, {2, 2}, {1, 1});
  CHECK(ap.shape() == Shape{1, 1, 3, 3});
  CHECK(ap.at({0, 0, 0, 0}) == doctest::Approx(1.0 / 4));  // count_include_pad
  Tensor an = avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false);
  CHECK(an.at({0, 0, 0, 0}) == 1.0);
  CHECK(an.at({0, 0, 0, 1}) == 2.5);
  // adaptive 4 -> 2 is a 2x2 mean; 4 -> 3 has overlapping bins [0,2) [1,3) [2,4)
  CHECK(adaptive_avg_pool2d(x, {2, 2}).to_vector<double>() == std::vector<double>{3.5, 5.5, 11.5, 13.5});
  Tensor a3 = adaptive_avg_pool2d(x, {3, 1});
  CHECK(a3.shape() == Shape{1, 1, 3, 1});
  CHECK(a3.to_vector<double>() == std::vector<double>{(1 + 2 + 3 + 4 + 5 + 6 + 7 + 8) / 8.0, 8.5, 12.5});
  CHECK(adaptive_avg_pool2d(x, {1, 1}).item() == 8.5);
  // unbatched (C, H, W)
  CHECK(max_pool2d(x.reshape({1, 4, 4}), {2, 2}).shape() == Shape{1, 2, 2});
  // NaN propagates through max
  Tensor xn = x.clone();
  xn.narrow(3, 1, 1).narrow(2, 0, 1).fill_(NAN);
  CHECK(std::isnan(max_pool2d(xn, {2, 2}).at({0, 0, 0, 0})));
}

TEST_CASE("pooling: against the naive reference") {
  manual_seed(13);
  struct PoolCase {
    Shape x;
    IntPair k, s, p;
  };
  std::vector<PoolCase> cases = {
      {{2, 3, 8, 8}, {2, 2}, {2, 2}, {0, 0}}, {{2, 3, 7, 9}, {3, 3}, {2, 2}, {1, 1}},
      {{1, 2, 6, 7}, {3, 2}, {1, 2}, {1, 0}}, {{64, 32, 14, 14}, {2, 2}, {2, 2}, {0, 0}},
      {{2, 2, 5, 5}, {5, 5}, {1, 1}, {2, 2}},
  };
  for (const auto& c : cases) {
    CAPTURE(shape_str(c.x));
    for (DType dt : {DType::float64, DType::float32}) {
      Tensor x = randn(c.x, {.dtype = dt});
      double tol = dt == DType::float64 ? 1e-12 : 1e-5;
      CHECK(close_to_ref(max_pool2d(x, c.k, c.s, c.p), ref_pool(x, c.k, c.s, c.p, PoolKind::max), tol));
      CHECK(close_to_ref(avg_pool2d(x, c.k, c.s, c.p), ref_pool(x, c.k, c.s, c.p, PoolKind::avg), tol));
      CHECK(close_to_ref(avg_pool2d(x, c.k, c.s, c.p, false), ref_pool(x, c.k, c.s, c.p, PoolKind::avg_nopad), tol));
    }
  }
  for (IntPair os : {IntPair{1, 1}, IntPair{3, 2}, IntPair{5, 7}, IntPair{4, 4}}) {
    Tensor x = randn({2, 3, 7, 5}, f64);
    CHECK(close_to_ref(adaptive_avg_pool2d(x, os), ref_adaptive(x, os), 1e-12));
  }
  Tensor xt = randn({2, 7, 6, 3}, f64).permute({0, 3, 1, 2});  // non-contiguous (2, 3, 7, 6)
  CHECK(close_to_ref(max_pool2d(xt, {2, 2}), ref_pool(xt.contiguous(), {2, 2}, {2, 2}, {0, 0}, PoolKind::max), 1e-12));
  // 16-bit
  Tensor xb = randn({2, 3, 6, 6}).to(DType::bfloat16);
  CHECK(max_pool2d(xb, {2, 2}).dtype() == DType::bfloat16);
  CHECK(max_abs_diff(max_pool2d(xb, {2, 2}), max_pool2d(xb.to(DType::float32), {2, 2})) == 0.0);
  CHECK(avg_pool2d(xb, {2, 2}).dtype() == DType::bfloat16);
  CHECK(adaptive_avg_pool2d(xb.to(DType::float16), {1, 1}).dtype() == DType::float16);
}

TEST_CASE("pooling: ceil_mode, dilation, indices and adaptive max, by hand (PyTorch 2.15's values)") {
  const Tensor x = arange(1, 26, 1, {.dtype = DType::float32}).reshape({1, 1, 5, 5});
  auto v = [](const Tensor& t) { return t.to_vector<double>(); };
  // ceil_mode keeps the partial last windows; avg divides by their part inside the padded input
  CHECK(v(max_pool2d(x, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true)) ==
        std::vector<double>{7, 9, 10, 17, 19, 20, 22, 24, 25});
  CHECK(v(avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, true, true)) ==
        std::vector<double>{4, 6, 7.5, 14, 16, 17.5, 21.5, 23.5, 25});
  const Tensor a = avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, true, true);
  CHECK(a.shape() == Shape{1, 1, 3, 3});
  CHECK(a.at({0, 0, 0, 0}) == doctest::Approx(16.0 / 9));
  CHECK(a.at({0, 0, 2, 2}) == doctest::Approx(88.0 / 9));
  CHECK(v(avg_pool2d(arange(1, 7, 1, {.dtype = DType::float32}).reshape({1, 1, 1, 6}), {1, 4}, {1, 3}, {0, 1}, true,
                     true)) == std::vector<double>{1.5, 4.5, 3});
  CHECK(max_pool2d(x, {2, 2}, {2, 2}).shape() == Shape{1, 1, 2, 2});  // floor by default
  // dilation: taps 2 apart, and the indices of the maxima in each plane
  auto [y, i] = max_pool2d_with_indices(x, {2, 2}, {1, 1}, {0, 0}, {2, 2});
  CHECK(v(y) == std::vector<double>{13, 14, 15, 18, 19, 20, 23, 24, 25});
  CHECK(i.dtype() == DType::int64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{12, 13, 14, 17, 18, 19, 22, 23, 24});
  CHECK(!i.requires_grad());
  auto [yn, in] = max_pool2d_with_indices(-x, {3, 3}, {2, 2}, {1, 1}, {2, 2}, true);
  CHECK(yn.shape() == Shape{1, 1, 2, 2});
  CHECK(v(yn) == std::vector<double>{-7, -7, -7, -7});
  CHECK(in.to_vector<int64_t>() == std::vector<int64_t>{6, 6, 6, 6});
  auto [ya, ia] = adaptive_max_pool2d_with_indices(x, {3, 2});
  CHECK(v(ya) == std::vector<double>{8, 10, 18, 20, 23, 25});
  CHECK(ia.to_vector<int64_t>() == std::vector<int64_t>{7, 9, 17, 19, 22, 24});
  CHECK(v(adaptive_max_pool2d(x, {1, 1})) == std::vector<double>{25});
  // 1-D versions
  const Tensor s = T({3, 1, 4, 1, 5, 9, 2, 6}, {1, 1, 8});
  CHECK(v(max_pool1d(s, 3, 2, 1, 1, true)) == std::vector<double>{3, 4, 9, 9, 6});
  CHECK(max_pool1d(s.reshape({1, 8}), 2).shape() == Shape{1, 4});  // unbatched (C, L)
  CHECK(v(avg_pool1d(s, 4)) == std::vector<double>{9.0 / 4, 22.0 / 4});
  CHECK(v(adaptive_max_pool1d(s, 3)) == std::vector<double>{4, 9, 9});
  CHECK(v(adaptive_avg_pool1d(s, 2)) == std::vector<double>{9.0 / 4, 22.0 / 4});
  const Tensor c = conv1d(arange(1, 7, 1, {.dtype = DType::float64}).reshape({1, 1, 6}), T({1, 0, -1}, {1, 1, 3}),
                          T({0.5}, {1}), 1, 1);
  CHECK(v(c) == std::vector<double>{-1.5, -1.5, -1.5, -1.5, -1.5, 5.5});
}

TEST_CASE("pooling with ceil_mode and dilation, adaptive max: against the naive reference, indices, 16-bit") {
  manual_seed(19);
  struct Case {
    Shape x;
    IntPair k, s, p, d;
    bool ceil;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 7}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true},  // 2x2/2 on odd sizes: partial windows
      {{2, 3, 9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},  {{1, 2, 6, 7}, {3, 2}, {2, 3}, {1, 1}, {1, 1}, true},
      {{2, 2, 9, 9}, {3, 3}, {1, 1}, {1, 1}, {2, 2}, false}, {{2, 2, 10, 11}, {2, 3}, {2, 1}, {1, 1}, {3, 2}, true},
      {{1, 3, 8, 5}, {3, 2}, {3, 2}, {0, 1}, {2, 1}, true},   {{3, 2, 12, 12}, {2, 2}, {2, 2}, {0, 0}, {2, 2}, false},
  };
  for (const auto& c : cases) {
    CAPTURE(shape_str(c.x));
    CAPTURE(pair_string(c.k));
    CAPTURE(pair_string(c.d));
    CAPTURE(c.ceil);
    for (DType dt : {DType::float64, DType::float32}) {
      Tensor x = randn(c.x, {.dtype = dt});
      const double tol = dt == DType::float64 ? 1e-12 : 1e-5;
      std::vector<int64_t> want_idx;
      const Tensor want = ref_pool(x, c.k, c.s, c.p, PoolKind::max, c.d, c.ceil, &want_idx);
      auto [y, idx] = max_pool2d_with_indices(x, c.k, c.s, c.p, c.d, c.ceil);
      CHECK(close_to_ref(y, want, tol));
      CHECK(idx.to_vector<int64_t>() == want_idx);
      if (c.d == IntPair{1, 1}) {
        CHECK(close_to_ref(avg_pool2d(x, c.k, c.s, c.p, true, c.ceil),
                           ref_pool(x, c.k, c.s, c.p, PoolKind::avg, c.d, c.ceil), tol));
        CHECK(close_to_ref(avg_pool2d(x, c.k, c.s, c.p, false, c.ceil),
                           ref_pool(x, c.k, c.s, c.p, PoolKind::avg_nopad, c.d, c.ceil), tol));
      }
    }
    // 16-bit: the float32 path's bits, forward and backward
    for (DType dt : {DType::bfloat16, DType::float16}) {
      const Tensor x16 = (randn(c.x) * 4.0).to(dt);
      Tensor xh = x16.clone().requires_grad_(), xw = x16.to(DType::float32).requires_grad_();
      const Tensor yh = max_pool2d(xh, c.k, c.s, c.p, c.d, c.ceil), yw = max_pool2d(xw, c.k, c.s, c.p, c.d, c.ceil);
      CHECK(max_abs_diff(yh.to(DType::float32), yw.detach()) == 0.0);
      const Tensor g = randn(yh.shape()).to(dt);
      yh.backward(g);
      yw.backward(g.to(DType::float32));
      CHECK(max_abs_diff(xh.grad().to(DType::float32), xw.grad().to(dt).to(DType::float32)) == 0.0);
    }
  }
  for (IntPair os : {IntPair{1, 1}, IntPair{3, 2}, IntPair{5, 7}, IntPair{4, 4}, IntPair{9, 3}}) {
    CAPTURE(pair_string(os));
    Tensor x = randn({2, 3, 7, 5}, f64);
    std::vector<int64_t> want_idx;
    const Tensor want = ref_adaptive(x, os, true, &want_idx);
    auto [y, idx] = adaptive_max_pool2d_with_indices(x, os);
    CHECK(close_to_ref(y, want, 1e-15));
    CHECK(idx.to_vector<int64_t>() == want_idx);
  }
  // ties keep the first maximum, NaN wins, as max_pool2d
  Tensor t = zeros({1, 1, 3, 3});
  t.narrow(3, 2, 1).narrow(2, 1, 1).fill_(NAN);
  auto [yt, it] = adaptive_max_pool2d_with_indices(t, {2, 2});
  CHECK(it.to_vector<int64_t>() == std::vector<int64_t>{0, 5, 3, 5});
  CHECK(std::isnan(yt.at({0, 0, 1, 1})));
}

TEST_CASE("pooling a 16-bit CPU input: the bits of the float32 path on the widened input") {
  // The CPU kernels pool 16-bit planes in float32 a plane at a time: outputs and input
  // gradients must be the float32 path's on the widened input, rounded once.
  manual_seed(15);
  const DType f32 = DType::float32;
  struct Geo {
    Shape x;
    IntPair k, s, p;
  };
  const Geo geos[] = {{{4, 3, 8, 8}, {2, 2}, {2, 2}, {0, 0}},   // 2x2/2 fast path
                      {{2, 5, 9, 7}, {3, 3}, {2, 2}, {1, 1}},   // padded, odd sizes
                      {{3, 2, 6, 10}, {3, 3}, {1, 1}, {1, 1}},  // overlapping windows: sums in dx
                      {{1, 70, 5, 6}, {2, 3}, {1, 2}, {0, 1}}};  // many planes through one buffer
  for (DType dt : {DType::bfloat16, DType::float16})
    for (const Geo& c : geos)
      for (int kind = 0; kind < 3; ++kind) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(kind);
        CAPTURE(shape_str(c.x));
        const Tensor x16 = (randn(c.x) * 4.0).to(dt);
        Tensor x = x16.clone().requires_grad_(), xw = x16.to(f32).requires_grad_();
        auto pool = [&](const Tensor& t) {
          if (kind == 0) return max_pool2d(t, c.k, c.s, c.p);
          if (kind == 1) return avg_pool2d(t, c.k, c.s, c.p);
          return adaptive_avg_pool2d(t, {3, 2});
        };
        Tensor y = pool(x), yw = pool(xw);
        REQUIRE(y.dtype() == dt);
        CHECK(max_abs_diff(y.to(f32), yw.detach().to(dt).to(f32)) == 0.0);
        const Tensor g = (randn(y.shape()) * 2.0).to(dt);
        y.backward(g);
        yw.backward(g.to(f32));
        REQUIRE(x.grad().dtype() == dt);
        CHECK(max_abs_diff(x.grad().to(f32), xw.grad().to(dt).to(f32)) == 0.0);
      }
}

TEST_CASE("max_pool2d 2x2/2 of a 16-bit CPU tensor: bitwise the float32 path, ties, zeros, inf and NaN") {
  // 2x2/2 pooling of a 16-bit plane without inf or NaN runs on int16 order keys (pool.cpp)
  // and copies each winner's bits: outputs and winners (seen through the gradient) must be
  // the float32 path's, ties (equal values, -0 against +0) included; a plane holding an inf
  // or NaN goes through float32. Widths below and above a block of 8 windows.
  const DType f32 = DType::float32;
  manual_seed(17);
  for (DType dt : {DType::float16, DType::bfloat16})
    for (int64_t W : {int64_t(8), int64_t(36)}) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(W);
      Tensor x16 = (randn({2, 4, 6, W}) * 3.0).to(dt).contiguous();
      uint16_t* xb = static_cast<uint16_t*>(x16.raw_data());
      const bool f16 = dt == DType::float16;
      const uint16_t one = f16 ? 0x3c00 : 0x3f80, inf = f16 ? 0x7c00 : 0x7f80, nan = f16 ? 0x7e00 : 0x7fc0;
      const int64_t P = 6 * W;
      // plane 0: the first window -0, +0 (tie: the first wins), negatives; the second all equal
      xb[0] = 0x8000, xb[1] = 0x0000, xb[W] = 0x8000 | one, xb[W + 1] = 0x8000 | one;
      xb[2] = xb[3] = xb[W + 2] = xb[W + 3] = one;
      // plane 1: equal maxima at the second and fourth places; subnormals and -0 in plane 2
      xb[P + 4] = xb[P + W + 5] = 0x5000;
      xb[2 * P + 6] = 0x0001, xb[2 * P + 7] = 0x8001, xb[2 * P + W + 6] = 0x8000, xb[2 * P + W + 7] = 0x8002;
      xb[3 * P + 1] = inf;                           // plane 3: +inf
      xb[4 * P + W] = 0x8000 | inf;                  // plane 4: -inf
      xb[5 * P + 2] = nan, xb[5 * P + 3] = 0xffff;  // plane 5: NaNs
      Tensor x = x16.clone().requires_grad_(), xw = x16.to(f32).requires_grad_();
      const Tensor y = max_pool2d(x, {2, 2}), yw = max_pool2d(xw, {2, 2});
      const Tensor ywant = yw.detach().to(dt);
      CHECK(std::memcmp(y.raw_data(), ywant.raw_data(), size_t(y.numel()) * 2) == 0);
      CHECK(static_cast<const uint16_t*>(y.raw_data())[0] == 0x8000);  // -0 came first
      const Tensor g = (randn(y.shape()) + 4.0).to(dt);  // no zeros: the gradient shows each winner
      y.backward(g);
      yw.backward(g.to(f32));
      const Tensor gwant = xw.grad().to(dt);
      CHECK(std::memcmp(x.grad().raw_data(), gwant.raw_data(), size_t(gwant.numel()) * 2) == 0);
    }
}

TEST_CASE("max_pool2d backward of a 16-bit CPU tensor, disjoint windows: bitwise the float32 path, any dy") {
  // Where windows do not overlap the 16-bit gradient is a scatter of dy's bit patterns
  // (pool.cpp); a plane whose dy holds an inf or NaN goes through float32. Both must give
  // the float32 path's bits: 0 + dy turns -0 into +0, NaNs keep float32's rules.
  const DType f32 = DType::float32;
  manual_seed(16);
  const uint16_t specials[] = {0x8000, 0x0000, 0x0001, 0x8001, 0x03ff, 0x7bff};  // zeros, subnormals, large
  for (DType dt : {DType::float16, DType::bfloat16})
    for (int odd : {0, 1}) {  // 2x2/2 on 8x8, and 2x3/(2,3) on 9x10 with padding (edge windows)
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(odd);
      const Shape xs = odd ? Shape{2, 3, 9, 10} : Shape{2, 3, 8, 8};
      const IntPair k = odd ? IntPair{2, 3} : IntPair{2, 2}, st = k, pad = odd ? IntPair{1, 1} : IntPair{0, 0};
      const Tensor x16 = randn(xs).to(dt);
      Tensor x = x16.clone().requires_grad_(), xw = x16.to(f32).requires_grad_();
      const Tensor y = max_pool2d(x, k, st, pad), yw = max_pool2d(xw, k, st, pad);
      Tensor g = randn(y.shape()).to(dt).contiguous();
      uint16_t* gb = static_cast<uint16_t*>(g.raw_data());
      const int64_t plane = y.size(2) * y.size(3);
      for (int i = 0; i < 6; ++i) gb[i] = specials[i];  // plane 0: finite specials
      gb[plane + 1] = dt == DType::float16 ? 0x7c00 : 0x7f80;      // plane 1: +inf
      gb[2 * plane + 2] = dt == DType::float16 ? 0xfc01 : 0xff81;  // plane 2: a signalling NaN
      y.backward(g);
      yw.backward(g.to(f32));
      const Tensor got = x.grad(), want = xw.grad().to(dt);
      REQUIRE(got.dtype() == dt);
      CHECK(std::memcmp(got.raw_data(), want.raw_data(), size_t(got.numel()) * 2) == 0);
      const uint16_t* gotb = static_cast<const uint16_t*>(got.raw_data());
      CHECK(std::find(gotb, gotb + got.numel(), uint16_t(0x8000)) == gotb + got.numel());  // 0 + -0 is +0
    }
}

TEST_CASE("pooling: gradcheck") {
  manual_seed(14);
  // max pooling: randn values are distinct far beyond eps, so no argmax flips
  auto spaced = [](Shape s) { return randn(s, f64); };
  CHECK(gradcheck([](std::vector<Tensor>& in) { return max_pool2d(in[0], {2, 2}); }, {spaced({2, 2, 4, 6})}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}); },
                  {spaced({1, 2, 5, 5})}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return max_pool2d(in[0], {3, 2}, {1, 1}); },  // overlapping
                  {spaced({2, 1, 4, 5})}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return max_pool2d(in[0].transpose(2, 3), {2, 2}); },
                  {spaced({1, 2, 6, 4})}));
  for (bool cip : {true, false}) {
    CHECK(gradcheck([cip](std::vector<Tensor>& in) { return avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, cip); },
                    {randn({2, 2, 5, 6}, f64)}));
    CHECK(gradcheck([cip](std::vector<Tensor>& in) { return avg_pool2d(in[0], {2, 3}, {1, 2}, {1, 1}, cip); },
                    {randn({1, 2, 4, 5}, f64)}));
  }
  CHECK(gradcheck([](std::vector<Tensor>& in) { return avg_pool2d(in[0], {2, 2}); }, {randn({2, 3, 4, 4}, f64)}));
  for (IntPair os : {IntPair{1, 1}, IntPair{3, 2}, IntPair{4, 6}})
    CHECK(gradcheck([os](std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], os); },
                    {randn({2, 2, 5, 4}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0].transpose(2, 3), {2, 3}); },
                  {randn({1, 3, 5, 4}, f64)}));
  // ceil_mode, dilation, adaptive max (overlapping bins), the 1-D versions and conv1d
  CHECK(gradcheck([](std::vector<Tensor>& in) { return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, {1, 1}, true); },
                  {spaced({1, 2, 6, 7})}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return max_pool2d(in[0], {2, 3}, {1, 2}, {1, 1}, {2, 2}, true); },
                  {spaced({2, 1, 6, 7})}));
  for (bool cip : {true, false})
    CHECK(gradcheck([cip](std::vector<Tensor>& in) { return avg_pool2d(in[0], {3, 2}, {2, 2}, {1, 1}, cip, true); },
                    {randn({1, 2, 6, 5}, f64)}));
  for (IntPair os : {IntPair{1, 1}, IntPair{3, 2}, IntPair{4, 6}})
    CHECK(gradcheck([os](std::vector<Tensor>& in) { return adaptive_max_pool2d(in[0], os); },
                    {spaced({2, 2, 5, 4})}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return max_pool1d(in[0], 3, 2, 1, 2, true); }, {spaced({2, 3, 9})}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return avg_pool1d(in[0], 3, 2, 1, false, true); },
                  {randn({2, 3, 8}, f64)}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return adaptive_max_pool1d(in[0], 3) + adaptive_avg_pool1d(in[0], 3); },
                  {spaced({2, 2, 7})}));
  CHECK(gradcheck([](std::vector<Tensor>& in) { return conv1d(in[0], in[1], in[2], 2, 1, 2, 2); },
                  {randn({2, 4, 9}, f64), randn({6, 2, 3}, f64), randn({6}, f64)}));
}

TEST_CASE("pooling: errors") {
  Tensor x = ones({2, 3, 4, 4});
  CHECK(has(error_of([] { max_pool2d(ones({4, 4}), {2, 2}); }), "[4, 4]"));  // wrong ndim
  CHECK(has(error_of([&] { max_pool2d(x, {5, 5}); }), "larger"));             // kernel > input
  CHECK(has(error_of([&] { avg_pool2d(x, {5, 2}); }), "[2, 3, 4, 4]"));
  CHECK_NOTHROW(max_pool2d(x, {5, 5}, {1, 1}, {1, 1}));  // fits once padded
  CHECK(has(error_of([&] { max_pool2d(x, {2, 2}, {-1, 1}); }), "stride"));
  CHECK_THROWS_AS(avg_pool2d(x, {2, 2}, {0, 2}), Error);
  CHECK_THROWS_AS(max_pool2d(x, {0, 2}), Error);
  CHECK_THROWS_AS(max_pool2d(x, {2, 2}, {2, 2}, {2, 2}), Error);  // padding > kernel/2
  CHECK_THROWS_AS(avg_pool2d(x, {2, 2}, {2, 2}, {-1, 0}), Error);
  CHECK(has(error_of([&] { adaptive_avg_pool2d(x, {0, 2}); }), "[2, 3, 4, 4]"));
  CHECK_THROWS_AS(adaptive_avg_pool2d(ones({3, 4}), {2, 2}), Error);
  CHECK_THROWS_AS(max_pool2d(ones({1, 1, 4, 4}, {.dtype = DType::int64}), {2, 2}), Error);
  CHECK_THROWS_AS(avg_pool2d(Tensor(), {2, 2}), Error);
  // dilation: positive; the dilated kernel must fit; no window may hold only padding
  CHECK(has(error_of([&] { max_pool2d(x, {2, 2}, {1, 1}, {0, 0}, {0, 1}); }), "dilation"));
  CHECK(has(error_of([&] { max_pool2d(x, {3, 3}, {1, 1}, {0, 0}, {2, 2}); }), "dilated to (5, 5)"));
  CHECK(has(error_of([] { max_pool2d(ones({1, 1, 1, 1}), {2, 2}, {1, 1}, {1, 1}, {2, 2}); }), "only padding"));
  CHECK(has(error_of([] { adaptive_max_pool2d(ones({1, 1, 3, 3}), {2, 0}); }), "adaptive_max_pool2d"));
  // 1-D versions name themselves
  CHECK(has(error_of([] { max_pool1d(ones({2, 3, 4, 5}), 2); }), "max_pool1d"));
  CHECK(has(error_of([] { avg_pool1d(ones({2, 3, 8}), 2, 2, 2); }), "avg_pool1d: padding"));
  CHECK(has(error_of([] { conv1d(ones({2, 3, 8}), ones({4, 3, 3, 3})); }), "conv1d"));
  CHECK(has(error_of([] { conv1d(ones({2, 3, 8}), ones({4, 3, 3}), Tensor(), 0); }), "stride"));
  CHECK(has(error_of([] { conv1d(ones({2, 2, 8}), ones({4, 3, 3})); }), "channel mismatch"));
  CHECK(has(error_of([] { adaptive_max_pool1d(ones({8}), 2); }), "adaptive_max_pool1d"));
}

namespace {
/// conv3d by its definition: a seven-deep loop (eight with groups) over a padded input.
Tensor naive_conv3d(const Tensor& x, const Tensor& w, const Conv3dArgs& a) {
  const int64_t N = x.size(0), C = x.size(1), O = w.size(0), G = a.groups, Cg = C / G, Og = O / G;
  const int64_t kd = w.size(2), kh = w.size(3), kw = w.size(4);
  const Shape in{x.size(2), x.size(3), x.size(4)};
  int64_t out[3];
  const int64_t k[3] = {kd, kh, kw};
  for (int e = 0; e < 3; ++e)
    out[e] = (in[size_t(e)] + 2 * a.padding[size_t(e)] - a.dilation[size_t(e)] * (k[e] - 1) - 1) / a.stride[size_t(e)] + 1;
  const auto xv = x.contiguous().to_vector<double>(), wv = w.contiguous().to_vector<double>();
  std::vector<double> y(size_t(N * O * out[0] * out[1] * out[2]), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t d = 0; d < out[0]; ++d)
        for (int64_t h = 0; h < out[1]; ++h)
          for (int64_t ww = 0; ww < out[2]; ++ww) {
            double s = 0;
            for (int64_t c = 0; c < Cg; ++c)
              for (int64_t i = 0; i < kd; ++i)
                for (int64_t j = 0; j < kh; ++j)
                  for (int64_t l = 0; l < kw; ++l) {
                    const int64_t zd = d * a.stride[0] - a.padding[0] + i * a.dilation[0];
                    const int64_t zh = h * a.stride[1] - a.padding[1] + j * a.dilation[1];
                    const int64_t zw = ww * a.stride[2] - a.padding[2] + l * a.dilation[2];
                    if (zd < 0 || zh < 0 || zw < 0 || zd >= in[0] || zh >= in[1] || zw >= in[2]) continue;
                    const int64_t ci = (o / Og) * Cg + c;
                    s += xv[size_t((((n * C + ci) * in[0] + zd) * in[1] + zh) * in[2] + zw)] *
                         wv[size_t((((o * Cg + c) * kd + i) * kh + j) * kw + l)];
                  }
            y[size_t((((n * O + o) * out[0] + d) * out[1] + h) * out[2] + ww)] = s;
          }
  return from_vector(y, {N, O, out[0], out[1], out[2]});
}
}  // namespace

TEST_CASE("conv3d against its definition; max_pool3d, avg_pool3d, conv_transpose1d, max_unpool") {
  manual_seed(81);
  const Tensor x = randn({2, 4, 5, 6, 5}, f64);
  for (const Conv3dArgs& a : {Conv3dArgs{}, Conv3dArgs{.stride = {2, 1, 2}, .padding = {1, 2, 0},
                                                       .dilation = {2, 1, 1}, .groups = 2}}) {
    const Tensor w = randn({4, 4 / a.groups, 2, 3, 2}, f64);
    CHECK(allclose(conv3d(x, w, Tensor(), a), naive_conv3d(x, w, a), 1e-12, 1e-12));
  }
  CHECK(gradcheck([](auto& t) { return conv3d(t[0], t[1], t[2], {.padding = {1, 0, 1}}); },
                  {randn({1, 2, 3, 3, 3}, f64), randn({2, 2, 2, 2, 2}, f64), randn({2}, f64)}));
  CHECK(conv3d(x.select(0, 0), randn({3, 4, 1, 1, 1}, f64)).shape() == Shape{3, 5, 6, 5});
  CHECK_THROWS_AS(conv3d(x, randn({3, 3, 1, 1, 1}, f64)), kiln::Error);  // channel mismatch
  // pools: a 2x2x2 window's maximum and mean
  const Tensor cube = T({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 2, 2});
  CHECK(max_pool3d(cube, {2, 2, 2}).item() == 8);
  CHECK(avg_pool3d(cube, {2, 2, 2}).item() == 4.5);
  // padding excluded from the mean: one corner window of a 1x1x1 input padded by 1 is the value itself
  CHECK(avg_pool3d(T({6}, {1, 1, 1, 1, 1}), {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false).to_vector<double>()[0] == 6);
  CHECK(avg_pool3d(T({6}, {1, 1, 1, 1, 1}), {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, true).to_vector<double>()[0] == 0.75);
  CHECK(gradcheck([](auto& t) { return max_pool3d(t[0], {2, 2, 2}, {1, 1, 1}, {1, 0, 1}); }, {randn({1, 2, 3, 3, 3}, f64)}));
  CHECK(gradcheck([](auto& t) { return avg_pool3d(t[0], {2, 3, 2}, {1, 2, 1}, {1, 1, 0}, false); },
                  {randn({1, 2, 3, 4, 3}, f64)}));
  // conv_transpose1d is conv1d's adjoint: <conv1d(u, w), v> = <u, conv_transpose1d(v, w)>
  const Tensor u = randn({2, 3, 11}, f64), w1 = randn({4, 3, 3}, f64);
  const Tensor cu = conv1d(u, w1, Tensor(), 2, 1), v = randn(cu.shape(), f64);
  CHECK(sum(mul(cu, v)).item() == doctest::Approx(sum(mul(u, conv_transpose1d(v, w1, Tensor(), 2, 1, 0))).item()));
  CHECK(gradcheck([](auto& t) { return conv_transpose1d(t[0], t[1], t[2], 2, 1, 1); },
                  {randn({2, 4, 3}, f64), randn({4, 3, 3}, f64), randn({3}, f64)}));
  // max_unpool2d puts each maximum back where it came from
  const Tensor img = randn({2, 3, 4, 6}, f64);
  const auto pooled = max_pool2d_with_indices(img, {2, 2});
  const Tensor m = pooled.first, idx = pooled.second;  // (clang: no structured binding in the lambda below)
  const Tensor back = max_unpool2d(m, idx, {4, 6});
  CHECK(allclose(max_pool2d(back, {2, 2}), m));
  CHECK(sum(ne(back, 0.0)).item() == 2 * 3 * 2 * 3);
  CHECK(gradcheck([&](auto& t) { return max_unpool2d(t[0], idx, {4, 6}); }, {m}));
  CHECK_THROWS_AS(max_unpool2d(m, idx.narrow(3, 0, 2), {4, 6}), kiln::Error);
}

TEST_CASE("conv_transpose3d: conv3d's adjoint, its output size, gradcheck; adaptive 3-D pools by their bins") {
  manual_seed(82);
  // <conv3d(u, w), v> = <u, conv_transpose3d(v, w)>, output_padding restoring u's size
  for (const Conv3dArgs& a : {Conv3dArgs{}, Conv3dArgs{.stride = {2, 1, 2}, .padding = {1, 2, 0},
                                                       .dilation = {2, 1, 1}, .groups = 2}}) {
    const Tensor u = randn({2, 4, 6, 6, 5}, f64), w = randn({4, 4 / a.groups, 2, 3, 2}, f64);
    const Tensor cu = conv3d(u, w, Tensor(), a), v = randn(cu.shape(), f64);
    IntTriple op{};
    for (int e = 0; e < 3; ++e) {
      const size_t i = size_t(e);
      const int64_t k = w.size(2 + e);
      op[i] = u.size(2 + e) - ((cu.size(2 + e) - 1) * a.stride[i] - 2 * a.padding[i] + a.dilation[i] * (k - 1) + 1);
    }
    const Tensor t = conv_transpose3d(v, w, Tensor(), {.stride = a.stride, .padding = a.padding, .output_padding = op,
                                                       .dilation = a.dilation, .groups = a.groups});
    CHECK(t.shape() == u.shape());
    CHECK(sum(mul(cu, v)).item() == doctest::Approx(sum(mul(u, t)).item()).epsilon(1e-12));
  }
  // one input voxel spreads the kernel, stride apart
  const Tensor one = T({2}, {1, 1, 1, 1, 1}), k3 = T({1, 2, 3}, {1, 1, 3, 1, 1});
  CHECK(conv_transpose3d(one, k3).to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK(conv_transpose3d(T({1, 1}, {1, 1, 2, 1, 1}), k3, Tensor(), {.stride = {2, 1, 1}}).to_vector<double>() ==
        std::vector<double>{1, 2, 4, 2, 3});
  CHECK(gradcheck([](auto& t) {
    return conv_transpose3d(t[0], t[1], t[2], {.stride = {2, 1, 2}, .padding = {1, 0, 0}, .output_padding = {1, 0, 1}});
  }, {randn({1, 2, 3, 2, 2}, f64), randn({2, 3, 2, 2, 2}, f64), randn({3}, f64)}));
  CHECK(conv_transpose3d(randn({2, 3, 2, 2}, f64), randn({2, 3, 1, 1, 1}, f64)).shape() == Shape{3, 3, 2, 2});
  CHECK_THROWS_WITH_AS(conv_transpose3d(randn({1, 2, 2, 2, 2}, f64), randn({3, 3, 1, 1, 1}, f64)),
                       doctest::Contains("channels"), kiln::Error);
  CHECK_THROWS_WITH_AS(conv_transpose3d(randn({1, 2, 2, 2, 2}, f64), randn({2, 3, 1, 1, 1}, f64), Tensor(),
                                        {.output_padding = {1, 0, 0}}),
                       doctest::Contains("output_padding"), kiln::Error);
  // adaptive pools: PyTorch's bins [floor(i L / n), ceil((i + 1) L / n)) in each dim
  const Tensor x = randn({2, 3, 5, 4, 7}, f64);
  const Tensor avg = adaptive_avg_pool3d(x, {2, 3, 3}), mx = adaptive_max_pool3d(x, {2, 3, 3});
  CHECK(avg.shape() == Shape{2, 3, 2, 3, 3});
  auto lo = [](int64_t i, int64_t L, int64_t n) { return (i * L) / n; };
  auto hi = [](int64_t i, int64_t L, int64_t n) { return ((i + 1) * L + n - 1) / n; };
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t w = 0; w < 3; ++w) {
        const Tensor box = x.narrow(2, lo(d, 5, 2), hi(d, 5, 2) - lo(d, 5, 2))
                               .narrow(3, lo(h, 4, 3), hi(h, 4, 3) - lo(h, 4, 3))
                               .narrow(4, lo(w, 7, 3), hi(w, 7, 3) - lo(w, 7, 3));
        const Tensor got_a = avg.select(2, d).select(2, h).select(2, w), got_m = mx.select(2, d).select(2, h).select(2, w);
        CHECK(max(abs(sub(got_a, mean(box, {2, 3, 4})))).item() < 1e-15);
        CHECK(max(abs(sub(got_m, amax(box, {2, 3, 4})))).item() == 0.0);
      }
  CHECK(max(abs(sub(adaptive_avg_pool3d(x, {1, 1, 1}).reshape({2, 3}), mean(x, {2, 3, 4})))).item() < 1e-15);
  CHECK(gradcheck([](auto& t) { return adaptive_avg_pool3d(t[0], {2, 2, 3}); }, {randn({1, 2, 3, 4, 5}, f64)}));
  CHECK(gradcheck([](auto& t) { return adaptive_max_pool3d(t[0], {2, 1, 2}); }, {randn({1, 2, 3, 2, 5}, f64)}));
  CHECK(adaptive_avg_pool3d(randn({3, 4, 4, 4}, f64), {2, 2, 2}).shape() == Shape{3, 2, 2, 2});  // unbatched
  CHECK_THROWS_WITH_AS(adaptive_max_pool3d(x, {0, 1, 1}), doctest::Contains("output_size must be positive"), kiln::Error);
}

TEST_CASE("lp_pool1d / lp_pool2d: (sum x^p)^(1/p) over each window") {
  manual_seed(83);
  const Tensor x = randn({2, 3, 6, 7}, f64);
  // p = 2: the windows' Euclidean norms; p = 1 on a positive input: the windows' sums
  const Tensor l2 = lp_pool2d(x, 2.0, {2, 3});
  CHECK(l2.shape() == Shape{2, 3, 3, 2});
  // sample 0, channel 2, output (1, 1): rows 2-3, columns 3-5
  const double want = std::sqrt(sum(square(x.select(0, 0).select(0, 2).narrow(0, 2, 2).narrow(1, 3, 3))).item());
  CHECK(l2.select(0, 0).select(0, 2).select(0, 1).select(0, 1).item() == doctest::Approx(want).epsilon(1e-14));
  const Tensor px = abs(x);
  CHECK(max(abs(sub(lp_pool2d(px, 1.0, {2, 2}, {1, 1}), mul(avg_pool2d(px, {2, 2}, {1, 1}), 4.0)))).item() < 1e-14);
  CHECK(lp_pool1d(x.select(3, 0), 3.0, 3, 2, true).shape() == Shape{2, 3, 3});  // ceil_mode keeps the last window
  CHECK(gradcheck([](auto& t) { return lp_pool2d(t[0], 2.0, {2, 2}); }, {randn({1, 2, 4, 4}, f64)}));
  CHECK(gradcheck([](auto& t) { return lp_pool1d(abs(t[0]), 1.5, 2, 1); }, {add(abs(randn({1, 2, 5}, f64)), 0.5)}));
  CHECK_THROWS_WITH_AS(lp_pool1d(x.select(3, 0), 0.0, 2), doctest::Contains("norm_type"), kiln::Error);
}
