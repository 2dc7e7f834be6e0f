// cuDNN descriptor set-up of conv2d and batch_norm, read back through cuDNN itself
// (ops/cuda/cudnn_readback.h). Descriptors need no GPU, so this runs on every CUDA build:
// for many geometries (batch, channels, kernel, stride, padding, dilation, groups) and
// dtypes, cuDNN must see the tensors kiln means, and its own output-size rule must give
// kiln's (N, O, OH, OW).
#include <doctest/doctest.h>
#if defined(KILN_WITH_CUDA)
#include <cudnn.h>
#include <array>
#include <random>
#include <string>
#include "kiln/ops/cuda/cudnn_readback.h"
#include "kiln/ops/linalg.h"

using namespace kiln;

namespace {

// PyTorch's (and kiln's) output size of one spatial axis.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

}  // namespace

TEST_CASE("conv2d: cuDNN reads back kiln's geometry, dtype and math type for random geometries") {
  std::mt19937 rng(5);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int checked = 0;
  for (DType dt : {DType::float32, DType::float64, DType::float16, DType::bfloat16})
    for (int rep = 0; rep < 60; ++rep) {
      Conv2dGeom g{};
      g.groups = pick(1, 4);
      g.N = pick(1, 8), g.C = g.groups * pick(1, 5), g.O = g.groups * pick(1, 5);
      g.kH = pick(1, 5), g.kW = pick(1, 5), g.sH = pick(1, 3), g.sW = pick(1, 3);
      g.pH = pick(0, 3), g.pW = pick(0, 3), g.dH = pick(1, 3), g.dW = pick(1, 3);
      g.H = g.dH * (g.kH - 1) + 1 + pick(0, 20) - 2 * g.pH, g.W = g.dW * (g.kW - 1) + 1 + pick(0, 20) - 2 * g.pW;
      if (g.H < 1 || g.W < 1) continue;
      g.OH = out_size(g.H, g.kH, g.sH, g.pH, g.dH), g.OW = out_size(g.W, g.kW, g.sW, g.pW, g.dW);
      const auto r = cuda::conv2d_descriptor_readback(dt, g);
      INFO("dtype " << dtype_name(dt) << " N " << g.N << " C " << g.C << " H " << g.H << " W " << g.W << " O " << g.O
                    << " k " << g.kH << "x" << g.kW << " s " << g.sH << "," << g.sW << " p " << g.pH << "," << g.pW
                    << " d " << g.dH << "," << g.dW << " groups " << g.groups);
      CHECK(r.x[0] == g.N);
      CHECK(r.x[1] == g.C);
      CHECK(r.x[2] == g.H);
      CHECK(r.x[3] == g.W);
      CHECK(r.w[0] == g.O);
      CHECK(r.w[1] == g.C / g.groups);
      CHECK(r.w[2] == g.kH);
      CHECK(r.w[3] == g.kW);
      CHECK(r.y[0] == g.N);
      CHECK(r.y[1] == g.O);
      CHECK(r.y[2] == g.OH);
      CHECK(r.y[3] == g.OW);
      // cuDNN's own output size for these descriptors is the y kiln allocates
      CHECK(r.out[0] == g.N);
      CHECK(r.out[1] == g.O);
      CHECK(r.out[2] == g.OH);
      CHECK(r.out[3] == g.OW);
      CHECK(r.pad[0] == g.pH);
      CHECK(r.pad[1] == g.pW);
      CHECK(r.stride[0] == g.sH);
      CHECK(r.stride[1] == g.sW);
      CHECK(r.dilation[0] == g.dH);
      CHECK(r.dilation[1] == g.dW);
      CHECK(r.groups == g.groups);
      CHECK(r.cross_correlation);  // deep learning's "convolution"
      const int data = dt == DType::float32    ? CUDNN_DATA_FLOAT
                       : dt == DType::float64  ? CUDNN_DATA_DOUBLE
                       : dt == DType::float16  ? CUDNN_DATA_HALF
                                               : CUDNN_DATA_BFLOAT16;
      CHECK(r.data_type == data);
      CHECK(r.compute_type == (dt == DType::float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
      ++checked;
    }
  CHECK(checked > 100);
}

TEST_CASE("conv2d: float32 math follows the matmul precision; 16-bit may use Tensor Cores") {
  const Conv2dGeom g{2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 8, 8};
  const std::string saved = float32_matmul_precision();
  set_float32_matmul_precision("highest");
  CHECK(cuda::conv2d_descriptor_readback(DType::float32, g).math == CUDNN_FMA_MATH);
  set_float32_matmul_precision("high");
  CHECK(cuda::conv2d_descriptor_readback(DType::float32, g).math == CUDNN_DEFAULT_MATH);
  set_float32_matmul_precision(saved);
  CHECK(cuda::conv2d_descriptor_readback(DType::bfloat16, g).math == CUDNN_DEFAULT_MATH);
  CHECK(cuda::conv2d_descriptor_readback(DType::float64, g).math == CUDNN_DEFAULT_MATH);
}

TEST_CASE("batch_norm: x as (N, C, S, 1) and one per-channel parameter descriptor (1, C, 1, 1)") {
  for (DType dt : {DType::float32, DType::float64, DType::float16})
    for (const auto& ncs : {std::array<int64_t, 3>{1, 1, 1}, {8, 16, 49}, {3, 64, 1}, {32, 3, 1024}}) {
      const int64_t N = ncs[0], C = ncs[1], S = ncs[2];
      const auto r = cuda::batch_norm_descriptor_readback(dt, N, C, S);
      CHECK(r.x[0] == N);
      CHECK(r.x[1] == C);
      CHECK(r.x[2] == S);
      CHECK(r.x[3] == 1);
      CHECK(r.param[0] == 1);
      CHECK(r.param[1] == C);
      CHECK(r.param[2] == 1);
      CHECK(r.param[3] == 1);
      const int want = dt == DType::float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
      CHECK(r.x_type == want);
      CHECK(r.param_type == want);
    }
}

#else
TEST_CASE("cuDNN descriptor tests need a CUDA build" * doctest::skip()) {}
#endif
