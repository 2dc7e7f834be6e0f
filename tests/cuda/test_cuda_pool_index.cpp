// The window / bin math of the GPU pooling kernels (ops/cuda/pool_index.h), on the CPU:
// each kernel body is driven over an emulated grid of (block, thread) indices with the
// kernels' grid-stride loop, and must write every element exactly once with the CPU
// kernel's value (max pooling bit for bit, incl. ties and NaN; the averages within a few
// ulps, though they sum in the CPU's order). No GPU needed.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>
#include "kiln/ops/kernels/conv.h"
#include "kiln/ops/cuda/pool_index.h"
#include "kiln/ops/dispatch.h"

using namespace kiln;
using namespace kiln::cuda;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(77);
  return r;
}
int64_t rand_in(int64_t lo, int64_t hi) { return lo + int64_t(rng()() % uint32_t(hi - lo + 1)); }

/// Calls body(i) for every i in [0, n) the way a grid-stride kernel of `blocks` x `threads`
/// does, and checks that each i is visited exactly once.
template <class F>
void emulate_grid(int64_t n, int blocks, int threads, const F& body) {
  std::vector<int> seen(size_t(n), 0);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t)
      for (int64_t i = int64_t(b) * threads + t; i < n; i += int64_t(blocks) * threads) {
        ++seen[size_t(i)];
        body(i);
      }
  for (int64_t i = 0; i < n; ++i)
    REQUIRE_MESSAGE(seen[size_t(i)] == 1, "element " << i << " visited " << seen[size_t(i)] << " times");
}

/// PyTorch's pooled size (ceil_mode keeps a last window that starts inside the input or its
/// left padding), and whether each window along the axis has a tap inside the input.
int64_t pooled(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = n + 2 * p - d * (k - 1) - 1;
  int64_t out = (span + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  return out;
}
bool taps_inside(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out) {
  for (int64_t o = 0; o < out; ++o) {
    bool any = false;
    for (int64_t j = 0; j < k; ++j) any |= o * s - p + j * d >= 0 && o * s - p + j * d < n;
    if (!any) return false;
  }
  return true;
}

/// A random pooling geometry with padding <= kernel/2 and a non-empty output, half of them
/// under ceil_mode; with dilated, taps 1 to 3 apart.
Pool2dGeom random_geom(bool dilated = false) {
  for (;;) {
    Pool2dGeom g{};
    g.P = rand_in(1, 4);
    g.H = rand_in(1, 13);
    g.W = rand_in(1, 13);
    g.kH = rand_in(1, std::min<int64_t>(g.H, 4));
    g.kW = rand_in(1, std::min<int64_t>(g.W, 4));
    g.sH = rand_in(1, 3);
    g.sW = rand_in(1, 3);
    g.pH = rand_in(0, g.kH / 2);
    g.pW = rand_in(0, g.kW / 2);
    g.dH = dilated ? rand_in(1, 3) : 1;
    g.dW = dilated ? rand_in(1, 3) : 1;
    if (g.H + 2 * g.pH < (g.kH - 1) * g.dH + 1 || g.W + 2 * g.pW < (g.kW - 1) * g.dW + 1) continue;
    const bool ceil_mode = rng()() % 2 == 0;
    g.OH = pooled(g.H, g.kH, g.sH, g.pH, g.dH, ceil_mode);
    g.OW = pooled(g.W, g.kW, g.sW, g.pW, g.dW, ceil_mode);
    if (taps_inside(g.H, g.kH, g.sH, g.pH, g.dH, g.OH) && taps_inside(g.W, g.kW, g.sW, g.pW, g.dW, g.OW)) return g;
  }
}

std::string geom_str(const Pool2dGeom& g) {
  return "P=" + std::to_string(g.P) + " H=" + std::to_string(g.H) + " W=" + std::to_string(g.W) +
         " k=" + std::to_string(g.kH) + "x" + std::to_string(g.kW) + " s=" + std::to_string(g.sH) + "x" +
         std::to_string(g.sW) + " p=" + std::to_string(g.pH) + "x" + std::to_string(g.pW) +
         " d=" + std::to_string(g.dH) + "x" + std::to_string(g.dW) + " out=" + std::to_string(g.OH) + "x" +
         std::to_string(g.OW);
}

/// Random values with repeats (ties for the first-max rule) and, when nan, a few NaNs.
std::vector<float> random_values(int64_t n, bool nan) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = float(rand_in(-4, 4)) * 0.5f + (rng()() % 3 == 0 ? 0.25f : 0.f);
  if (nan)
    for (int k = 0; k < 3 && n > 0; ++k) v[size_t(rand_in(0, n - 1))] = std::numeric_limits<float>::quiet_NaN();
  return v;
}

/// Bitwise equality (NaN equals NaN).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::string& where) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      where = "element " + std::to_string(i) + ": emulated " + std::to_string(a[i]) + " vs cpu " + std::to_string(b[i]);
      return false;
    }
  return true;
}

/// Equal within a few float ulps (NaN equals NaN): the sums run in the CPU's order today, the
/// tolerance only keeps a reordered CPU loop from failing this test.
bool near_equal(const std::vector<float>& a, const std::vector<float>& b, std::string& where) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (!(std::fabs(a[i] - b[i]) <= 1e-6f * std::max(1.0f, std::fabs(b[i])))) {
      where = "element " + std::to_string(i) + ": emulated " + std::to_string(a[i]) + " vs cpu " + std::to_string(b[i]);
      return false;
    }
  }
  return true;
}

const MaxPool2dKernels* cpu_max() { return kernel<const MaxPool2dKernels>(Op::max_pool2d, Device::cpu()); }
const AvgPool2dKernels* cpu_avg() { return kernel<const AvgPool2dKernels>(Op::avg_pool2d, Device::cpu()); }
const MaxPool2dKernels* cpu_adaptive_max() {
  return kernel<const MaxPool2dKernels>(Op::adaptive_max_pool2d, Device::cpu());
}
const AdaptiveAvgPool2dKernels* cpu_adaptive() {
  return kernel<const AdaptiveAvgPool2dKernels>(Op::adaptive_avg_pool2d, Device::cpu());
}

}  // namespace

TEST_CASE("windows_containing and bins_containing list exactly the windows that cover a position") {
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = rand_in(1, 20), k = rand_in(1, std::min<int64_t>(n, 5)), s = rand_in(1, 4),
                  pad = rand_in(0, k / 2), out = (n + 2 * pad - k) / s + 1;
    for (int64_t i = 0; i < n; ++i) {
      int64_t lo, hi;
      windows_containing(i, k, s, pad, out, lo, hi);
      for (int64_t o = 0; o < out; ++o) {
        const bool covers = o * s - pad <= i && i < o * s - pad + k;
        REQUIRE_MESSAGE(covers == (o >= lo && o < hi), "n=" << n << " k=" << k << " s=" << s << " pad=" << pad
                                                           << " i=" << i << " o=" << o);
      }
    }
    const int64_t aout = rand_in(1, 2 * n);
    for (int64_t i = 0; i < n; ++i) {
      int64_t lo, hi;
      bins_containing(i, n, aout, lo, hi);
      for (int64_t o = 0; o < aout; ++o) {
        const bool covers = adaptive_start(o, n, aout) <= i && i < adaptive_end(o, n, aout);
        REQUIRE_MESSAGE(covers == (o >= lo && o < hi), "n=" << n << " out=" << aout << " i=" << i << " o=" << o);
      }
    }
  }
}

TEST_CASE("max pooling: emulated GPU forward and gather backward equal the CPU kernels") {
  for (int trial = 0; trial < 300; ++trial) {
    Pool2dGeom g = random_geom(trial % 2 == 1);  // odd trials dilated (the CPU's separate loop)
    if (trial % 5 == 4) {  // 2x2, stride 2, no padding on wide planes (the CPU's special-cased loop)
      g.H = rand_in(2, 40);
      g.W = rand_in(2, 70);
      g.kH = g.kW = g.sH = g.sW = 2;
      g.pH = g.pW = 0;
      g.dH = g.dW = 1;
      g.OH = trial % 10 == 9 ? (g.H + 1) / 2 : g.H / 2;  // ceil_mode: a partial last window on odd sizes
      g.OW = trial % 10 == 9 ? (g.W + 1) / 2 : g.W / 2;
    }
    CAPTURE(geom_str(g));
    const int64_t nx = g.P * g.H * g.W, ny = g.P * g.OH * g.OW;
    const std::vector<float> x = random_values(nx, trial % 3 == 0), dy = random_values(ny, false);
    const size_t sx = static_cast<size_t>(nx), sy = static_cast<size_t>(ny);
    std::vector<float> y_ref(sy), dx_ref(sx), y(sy), dx(sx);
    std::vector<int64_t> i_ref(sy), idx(sy);
    cpu_max()->forward(DType::float32, g, x.data(), y_ref.data(), i_ref.data());
    cpu_max()->backward(DType::float32, g, dy.data(), i_ref.data(), dx_ref.data());

    const int blocks = int(rand_in(1, 5)), threads = int(rand_in(1, 64));
    emulate_grid(ny, blocks, threads, [&](int64_t i) {
      int64_t p, oh, ow;
      split3(i, g.OH, g.OW, p, oh, ow);
      max_pool_out<float, float>(g, x.data() + p * g.H * g.W, oh, ow, y[size_t(i)], idx[size_t(i)]);
    });
    std::string where;
    CHECK_MESSAGE(same_bits(y, y_ref, where), "forward ", where);
    CHECK(idx == i_ref);
    emulate_grid(nx, blocks, threads, [&](int64_t i) {
      int64_t p, h, w;
      split3(i, g.H, g.W, p, h, w);
      dx[size_t(i)] = max_pool_dx<float, float>(g, dy.data() + p * g.OH * g.OW, idx.data() + p * g.OH * g.OW, h, w);
    });
    CHECK_MESSAGE(same_bits(dx, dx_ref, where), "backward ", where);
  }
}

TEST_CASE("avg pooling: emulated GPU forward and gather backward equal the CPU kernels") {
  for (int trial = 0; trial < 150; ++trial) {
    const Pool2dGeom g = random_geom();
    const bool cip = trial % 2 == 0;
    CAPTURE(geom_str(g));
    CAPTURE(cip);
    const int64_t nx = g.P * g.H * g.W, ny = g.P * g.OH * g.OW;
    const std::vector<float> x = random_values(nx, false), dy = random_values(ny, false);
    const size_t sx = static_cast<size_t>(nx), sy = static_cast<size_t>(ny);
    std::vector<float> y_ref(sy), dx_ref(sx), y(sy), dx(sx);
    cpu_avg()->forward(DType::float32, g, cip, x.data(), y_ref.data());
    cpu_avg()->backward(DType::float32, g, cip, dy.data(), dx_ref.data());

    const int blocks = int(rand_in(1, 5)), threads = int(rand_in(1, 64));
    emulate_grid(ny, blocks, threads, [&](int64_t i) {
      int64_t p, oh, ow;
      split3(i, g.OH, g.OW, p, oh, ow);
      y[size_t(i)] = avg_pool_out<float, float>(g, cip, x.data() + p * g.H * g.W, oh, ow);
    });
    std::string where;
    CHECK_MESSAGE(near_equal(y, y_ref, where), "forward ", where);
    emulate_grid(nx, blocks, threads, [&](int64_t i) {
      int64_t p, h, w;
      split3(i, g.H, g.W, p, h, w);
      dx[size_t(i)] = avg_pool_dx<float, float>(g, cip, dy.data() + p * g.OH * g.OW, h, w);
    });
    CHECK_MESSAGE(near_equal(dx, dx_ref, where), "backward ", where);
  }
}

TEST_CASE("adaptive avg pooling: emulated GPU forward and gather backward equal the CPU kernels") {
  for (int trial = 0; trial < 150; ++trial) {
    Pool2dGeom g{};
    g.P = rand_in(1, 4);
    g.H = rand_in(1, 14);
    g.W = rand_in(1, 14);
    g.OH = rand_in(1, 2 * g.H);  // bins may overlap (OH < H) or repeat rows (OH > H)
    g.OW = rand_in(1, 2 * g.W);
    CAPTURE(geom_str(g));
    const int64_t nx = g.P * g.H * g.W, ny = g.P * g.OH * g.OW;
    const std::vector<float> x = random_values(nx, false), dy = random_values(ny, false);
    const size_t sx = static_cast<size_t>(nx), sy = static_cast<size_t>(ny);
    std::vector<float> y_ref(sy), dx_ref(sx), y(sy), dx(sx);
    cpu_adaptive()->forward(DType::float32, g, x.data(), y_ref.data());
    cpu_adaptive()->backward(DType::float32, g, dy.data(), dx_ref.data());

    const int blocks = int(rand_in(1, 5)), threads = int(rand_in(1, 64));
    emulate_grid(ny, blocks, threads, [&](int64_t i) {
      int64_t p, oh, ow;
      split3(i, g.OH, g.OW, p, oh, ow);
      y[size_t(i)] = adaptive_avg_out<float, float>(g, x.data() + p * g.H * g.W, oh, ow);
    });
    std::string where;
    CHECK_MESSAGE(near_equal(y, y_ref, where), "forward ", where);
    emulate_grid(nx, blocks, threads, [&](int64_t i) {
      int64_t p, h, w;
      split3(i, g.H, g.W, p, h, w);
      dx[size_t(i)] = adaptive_avg_dx<float, float>(g, dy.data() + p * g.OH * g.OW, h, w);
    });
    CHECK_MESSAGE(near_equal(dx, dx_ref, where), "backward ", where);
  }
}

TEST_CASE("adaptive max pooling: emulated GPU forward and gather backward equal the CPU kernels") {
  for (int trial = 0; trial < 150; ++trial) {
    Pool2dGeom g{};
    g.P = rand_in(1, 4);
    g.H = rand_in(1, 14);
    g.W = rand_in(1, 14);
    g.OH = rand_in(1, 2 * g.H);  // bins may overlap (OH < H): an input can win several bins
    g.OW = rand_in(1, 2 * g.W);
    CAPTURE(geom_str(g));
    const int64_t nx = g.P * g.H * g.W, ny = g.P * g.OH * g.OW;
    const std::vector<float> x = random_values(nx, trial % 3 == 0), dy = random_values(ny, false);
    const size_t sx = static_cast<size_t>(nx), sy = static_cast<size_t>(ny);
    std::vector<float> y_ref(sy), dx_ref(sx), y(sy), dx(sx);
    std::vector<int64_t> i_ref(sy), idx(sy);
    cpu_adaptive_max()->forward(DType::float32, g, x.data(), y_ref.data(), i_ref.data());
    cpu_adaptive_max()->backward(DType::float32, g, dy.data(), i_ref.data(), dx_ref.data());

    const int blocks = int(rand_in(1, 5)), threads = int(rand_in(1, 64));
    emulate_grid(ny, blocks, threads, [&](int64_t i) {
      int64_t p, oh, ow;
      split3(i, g.OH, g.OW, p, oh, ow);
      adaptive_max_out<float, float>(g, x.data() + p * g.H * g.W, oh, ow, y[size_t(i)], idx[size_t(i)]);
    });
    std::string where;
    CHECK_MESSAGE(same_bits(y, y_ref, where), "forward ", where);
    CHECK(idx == i_ref);
    emulate_grid(nx, blocks, threads, [&](int64_t i) {
      int64_t p, h, w;
      split3(i, g.H, g.W, p, h, w);
      dx[size_t(i)] =
          adaptive_max_dx<float, float>(g, dy.data() + p * g.OH * g.OW, idx.data() + p * g.OH * g.OW, h, w);
    });
    CHECK_MESSAGE(same_bits(dx, dx_ref, where), "backward ", where);
  }
}
