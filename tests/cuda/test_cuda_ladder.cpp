// The GPU rungs of the kernel ladder (ops/cuda/ladder.h). Without a GPU: the shared-memory
// tiled GEMM's block body in blocks emulated by 256 std::threads (a barrier at each
// __syncthreads, tests/cuda/block_emulation.h) over every block of its grid, and the
// per-element functions of the naive kernels (ops/reference/), against the reference
// loops. With a GPU: the three kernels themselves against the same references.
#include <doctest/doctest.h>
#include <cmath>
#include <vector>
#include "block_emulation.h"
#include "kiln/kiln.h"
#include "kiln/ops/cuda/ladder.h"
#include "kiln/ops/reference/conv2d.h"
#include "kiln/ops/reference/gemm.h"
#include "parity.h"

using namespace kiln;
using kiln::test::EmulatedBlock;
using kiln::test::run_block;
using kiln::test::kGpu;
using kiln::test::kNoGpu;
namespace ladder = kiln::cuda::ladder;

namespace {

std::vector<float> randoms(size_t n, uint64_t seed) {
  manual_seed(seed);
  return randn({int64_t(n)}).to_vector<float>();
}

// Largest |got - want| over the largest |want|.
double rel_diff(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0, top = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::isfinite(got[i]) ? double(std::fabs(got[i] - want[i])) : INFINITY);
    top = std::max(top, double(std::fabs(want[i])));
  }
  return worst / top;
}

struct Gemm {
  int64_t M, N, K;
};
const Gemm kGemms[] = {{37, 50, 45}, {16, 16, 16}, {1, 33, 7}, {64, 8, 100}, {5, 3, 0}};

const reference::Conv2dShape kConvs[] = {
    {.N = 2, .C = 3, .H = 9, .W = 7, .O = 4, .kH = 3, .kW = 3, .pad_h = 1, .pad_w = 1},
    {.N = 1, .C = 4, .H = 11, .W = 10, .O = 6, .kH = 3, .kW = 2, .stride_h = 2, .stride_w = 1, .pad_h = 0,
     .pad_w = 1, .dil_h = 1, .dil_w = 2, .groups = 2}};

}  // namespace

TEST_CASE("ladder: the tiled GEMM's block body over emulated blocks equals the reference GEMM") {
  for (const Gemm& g : kGemms) {
    INFO("M " << g.M << " N " << g.N << " K " << g.K);
    const std::vector<float> A = randoms(size_t(g.M * g.K), 1), B = randoms(size_t(g.K * g.N), 2);
    std::vector<float> want(size_t(g.M * g.N)), C(size_t(g.M * g.N), NAN);
    reference::gemm<float>(false, false, g.M, g.N, g.K, A.data(), g.K, B.data(), g.N, want.data(), g.N);
    std::vector<float> As(ladder::kTile * ladder::kTile), Bs(ladder::kTile * ladder::kTile);
    const int64_t bms = (g.M + ladder::kTile - 1) / ladder::kTile, bns = (g.N + ladder::kTile - 1) / ladder::kTile;
    for (int64_t bm = 0; bm < bms; ++bm)
      for (int64_t bn = 0; bn < bns; ++bn)
        run_block(ladder::kTile * ladder::kTile, [&](const EmulatedBlock& b) {
          ladder::gemm_tiled_block(b, As.data(), Bs.data(), bm, bn, g.M, g.N, g.K, A.data(), B.data(), C.data());
        });
    CHECK(rel_diff(C, want) < 1e-5);  // every element written (NaN otherwise) and right
    // the naive kernel's element function
    std::vector<float> naive(want.size());
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j)
        naive[size_t(i * g.N + j)] = reference::gemm_at<float>(false, false, i, j, g.K, A.data(), g.K, B.data(), g.N);
    CHECK(rel_diff(naive, want) < 1e-5);
  }
}

TEST_CASE("ladder: the naive convolution's element function (float sums) equals the reference") {
  for (const reference::Conv2dShape& s : kConvs) {
    const std::vector<float> x = randoms(size_t(s.N * s.C * s.H * s.W), 3),
                             w = randoms(size_t(s.O * (s.C / s.groups) * s.kH * s.kW), 4);
    const int64_t OH = s.out_h(), OW = s.out_w();
    std::vector<float> want(size_t(s.N * s.O * OH * OW)), got(want.size());
    reference::conv2d<float>(s, x.data(), w.data(), nullptr, want.data());
    for (int64_t e = 0; e < int64_t(got.size()); ++e) {  // the kernel's index split
      const int64_t ow = e % OW, oh = (e / OW) % OH, o = (e / (OW * OH)) % s.O, n = e / (OW * OH * s.O);
      got[size_t(e)] =
          reference::conv2d_at<float>(s, x.data(), w.data(), static_cast<const float*>(nullptr), n, o, oh, ow);
    }
    CHECK(rel_diff(got, want) < 1e-5);
  }
}

TEST_CASE("cuda parity: the ladder's naive and tiled GEMM and naive convolution" * doctest::skip(kNoGpu)) {
  for (const Gemm& g : kGemms) {
    INFO("M " << g.M << " N " << g.N << " K " << g.K);
    const std::vector<float> A = randoms(size_t(g.M * g.K), 1), B = randoms(size_t(g.K * g.N), 2);
    std::vector<float> want(size_t(g.M * g.N));
    reference::gemm<float>(false, false, g.M, g.N, g.K, A.data(), g.K, B.data(), g.N, want.data(), g.N);
    const Tensor a = from_vector(A, {g.M, g.K}).to(kGpu), b = from_vector(B, {g.K, g.N}).to(kGpu);
    Tensor c = full({g.M, g.N}, NAN, {.device = kGpu});
    ladder::gemm_naive(g.M, g.N, g.K, a.data<float>(), b.data<float>(), c.data<float>());
    CHECK(rel_diff(c.to(Device::cpu()).to_vector<float>(), want) < 1e-5);
    c = full({g.M, g.N}, NAN, {.device = kGpu});
    ladder::gemm_tiled(g.M, g.N, g.K, a.data<float>(), b.data<float>(), c.data<float>());
    CHECK(rel_diff(c.to(Device::cpu()).to_vector<float>(), want) < 1e-5);
  }
  for (const reference::Conv2dShape& s : kConvs) {
    const std::vector<float> x = randoms(size_t(s.N * s.C * s.H * s.W), 3),
                             w = randoms(size_t(s.O * (s.C / s.groups) * s.kH * s.kW), 4);
    std::vector<float> want(size_t(s.N * s.O * s.out_h() * s.out_w()));
    reference::conv2d<float>(s, x.data(), w.data(), nullptr, want.data());
    const Tensor xg = from_vector(x).to(kGpu), wg = from_vector(w).to(kGpu);
    Tensor y = full({int64_t(want.size())}, NAN, {.device = kGpu});
    ladder::conv2d_naive(s, xg.data<float>(), wg.data<float>(), y.data<float>());
    CHECK(rel_diff(y.to(Device::cpu()).to_vector<float>(), want) < 1e-5);
  }
}
