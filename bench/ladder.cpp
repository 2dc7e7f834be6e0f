// `kiln bench --ladder`: the kernel ladder of docs/course, timed on this machine. Each rung
// computes the same product or convolution as the one before, faster:
//   GEMM:  0 naive    the three loops of ops/reference/gemm.h
//          1 blocked  loops reordered (i, k, j) in cache blocks: the inner loop runs along
//                     rows of B and C, so it vectorises and reuses what the cache holds
//          2 packed   kiln's GotoBLAS kernel (ops/cpu/sgemm.cpp): packed panels, a 12 x 32
//                     register tile of AVX-512 FMAs (6 x 16 with AVX2)
//   conv:  0 naive    the seven loops of ops/reference/conv2d.h
//          1 im2col   copy the input's patches into a matrix, one GEMM (conv_im2col.cpp)
//          2 wide     stride 1: the GEMM reads the patches where they lie (conv_wide.cpp)
//          3 direct   few input channels: vector registers, no GEMM (conv_direct.cpp)
//   GPU (where one is visible; ops/cuda/ladder.h): GEMM naive, shared-memory tiled, cuBLAS
//   float32 / TF32 / bf16; conv2d naive, cuDNN float32 / TF32 / bf16.
// A rung that does not apply to a shape (direct needs at most 4 input channels) is not run.
// Each rung's result (from its timed runs) is checked against rung 0; times are medians.
#include "bench/ladder.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>
#include "bench/report.h"
#include "bench/system_probe.h"
#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/cuda/ladder.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/cpu/conv_algos.h"
#include "kiln/ops/cpu/sgemm.h"
#include "kiln/ops/reference/conv2d.h"
#include "kiln/ops/reference/gemm.h"

namespace kiln::bench {

namespace {

/// Median milliseconds of `reps` calls of f after one warm-up call.
double median_ms(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_ms();
    f();
    t.push_back(now_ms() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Rung 1: C = A B with the loops in (i, k, j) order, blocked so a block of B (kBk x kBn)
/// stays in cache while the rows of A pass; the j loop is contiguous in B and C, and the
/// compiler vectorises it. Single-threaded, no packing, no register tile.
void gemm_blocked(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  constexpr int64_t kBk = 128, kBn = 512;
  std::fill(C, C + M * N, 0.f);
  for (int64_t k0 = 0; k0 < K; k0 += kBk)
    for (int64_t j0 = 0; j0 < N; j0 += kBn) {
      const int64_t k1 = std::min(K, k0 + kBk), j1 = std::min(N, j0 + kBn);
      for (int64_t i = 0; i < M; ++i) {
        float* __restrict c = C + i * N;
        for (int64_t k = k0; k < k1; ++k) {
          const float a = A[i * K + k];
          const float* __restrict b = B + k * N;
          for (int64_t j = j0; j < j1; ++j) c[j] += a * b[j];
        }
      }
    }
}

double max_rel_diff(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (float w : want) scale = std::max(scale, double(std::abs(w)));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
  return worst / std::max(scale, 1e-30);
}

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(g);
  return v;
}

std::string threads_label(int n) { return std::to_string(n) + (n == 1 ? " thread" : " threads"); }

struct Row {
  std::string kernel, shape, rung, note;
  double ms, gflop;
  double peak = NAN;  ///< GPU rungs: the GPU's peak GFLOP/s in the rung's precision (NaN: unknown)
  bool gpu = false;
};

/// Median milliseconds per call of f on the GPU: one warm-up call, then `reps` calls between
/// two CUDA events (the GPU's own clock), `rounds` times.
double gpu_median_ms(int reps, const std::function<void()>& f) {
  f();
  cuda::synchronize();
  std::vector<double> t;
  for (int round = 0; round < 5; ++round) {
    cuda::Event start, end;
    start.record();
    for (int r = 0; r < reps; ++r) f();
    end.record();
    t.push_back(double(start.elapsed_ms(end)) / reps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> host(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::float32).contiguous().to_vector<float>();
}

/// The GPU rungs (ops/cuda/ladder.h): GEMM naive, tiled, cuBLAS float32 / TF32 / bf16;
/// conv2d naive, cuDNN float32 / TF32 / bf16. Each checked against the GPU's rung 0.
void run_gpu_rungs(bool smoke, const std::string& gpu, std::vector<Row>& rows) {
  const Device dev = Device::cuda(0);
  const int reps = smoke ? 1 : 10;
  const std::string before = float32_matmul_precision();
  struct Restore {  // the precision switch and benchmark flag as they were, even on an error
    std::string precision;
    bool bench;
    ~Restore() {
      set_float32_matmul_precision(precision);
      cudnn_benchmark(bench);
    }
  } restore{before, cudnn_benchmark_enabled()};
  auto add = [&](const std::string& kernel, const std::string& shape, const std::string& rung, double gflop,
                 double ms, const char* precision) {
    Row r{kernel, shape, rung + " (GPU)", "", ms, gflop};
    r.gpu = true, r.peak = gpu_peak_gflops(gpu, precision);
    rows.push_back(r);
  };
  auto check = [](const char* what, const std::vector<float>& got, const std::vector<float>& want, double tol) {
    const double d = max_rel_diff(got, want);
    KILN_CHECK(d < tol, "kiln bench --ladder: GPU rung ", what, " disagrees with the naive kernel (", d, ")");
  };

  // ---- GEMM n x n x n
  const int64_t n = smoke ? 256 : 4096;
  const Tensor A = from_vector(random_floats(size_t(n * n), 5), {n, n}).to(dev),
               B = from_vector(random_floats(size_t(n * n), 6), {n, n}).to(dev);
  Tensor C = Tensor::empty({n, n}, DType::float32, dev);
  const std::string gshape = std::to_string(n) + "^3";
  const double gflop = 2.0 * double(n) * double(n) * double(n) * 1e-9;
  const float *a = A.data<float>(), *b = B.data<float>();
  float* c = C.data<float>();
  add("gemm", gshape, "0 naive", gflop,
      gpu_median_ms(smoke ? 1 : 2, [&] { cuda::ladder::gemm_naive(n, n, n, a, b, c); }), "fp32");
  const std::vector<float> want = host(C);
  add("gemm", gshape, "1 tiled (shared memory)", gflop,
      gpu_median_ms(reps, [&] { cuda::ladder::gemm_tiled(n, n, n, a, b, c); }), "fp32");
  check("1 tiled", host(C), want, 1e-4);
  Tensor out;
  set_float32_matmul_precision("highest");
  add("gemm", gshape, "2 cuBLAS float32", gflop, gpu_median_ms(reps, [&] { out = matmul(A, B); }), "fp32");
  check("2 cuBLAS float32", host(out), want, 1e-4);
  set_float32_matmul_precision("high");
  add("gemm", gshape, "3 cuBLAS TF32", gflop, gpu_median_ms(reps, [&] { out = matmul(A, B); }), "tf32");
  check("3 cuBLAS TF32", host(out), want, 1e-2);
  set_float32_matmul_precision("highest");
  const Tensor Ah = A.to(DType::bfloat16), Bh = B.to(DType::bfloat16);
  add("gemm", gshape, "4 cuBLAS bf16 (Tensor Cores)", gflop, gpu_median_ms(reps, [&] { out = matmul(Ah, Bh); }),
      "bf16");
  check("4 cuBLAS bf16", host(out), want, 5e-2);

  // ---- conv2d: the ConvNet's second layer at a GPU batch
  const reference::Conv2dShape r{.N = smoke ? 2 : 256, .C = 32, .H = 28, .W = 28, .O = 64, .kH = 3, .kW = 3,
                                 .pad_h = 1, .pad_w = 1};
  const std::string cshape = "32->64 3x3 28x28, batch " + std::to_string(r.N);
  const double cflop = 2.0 * double(r.N * r.O * r.out_h() * r.out_w()) * double(r.C * r.kH * r.kW) * 1e-9;
  const Tensor x = from_vector(random_floats(size_t(r.N * r.C * r.H * r.W), 7), {r.N, r.C, r.H, r.W}).to(dev),
               w = from_vector(random_floats(size_t(r.O * r.C * r.kH * r.kW), 8), {r.O, r.C, r.kH, r.kW}).to(dev);
  Tensor y = Tensor::empty({r.N, r.O, r.out_h(), r.out_w()}, DType::float32, dev);
  add("conv2d", cshape, "0 naive", cflop,
      gpu_median_ms(smoke ? 1 : 2,
                    [&] { cuda::ladder::conv2d_naive(r, x.data<float>(), w.data<float>(), y.data<float>()); }),
      "fp32");
  const std::vector<float> ywant = host(y);
  const Conv2dArgs args{.padding = {1, 1}};
  cudnn_benchmark(true);  // the fastest algorithm cuDNN finds for the shape (chapter 10)
  add("conv2d", cshape, "1 cuDNN float32", cflop, gpu_median_ms(reps, [&] { out = conv2d(x, w, Tensor(), args); }),
      "fp32");
  check("1 cuDNN float32", host(out), ywant, 1e-4);
  set_float32_matmul_precision("high");
  add("conv2d", cshape, "2 cuDNN TF32", cflop, gpu_median_ms(reps, [&] { out = conv2d(x, w, Tensor(), args); }),
      "tf32");
  check("2 cuDNN TF32", host(out), ywant, 1e-2);
  set_float32_matmul_precision("highest");
  const Tensor xh = x.to(DType::bfloat16), wh = w.to(DType::bfloat16);
  add("conv2d", cshape, "3 cuDNN bf16", cflop, gpu_median_ms(reps, [&] { out = conv2d(xh, wh, Tensor(), args); }),
      "bf16");
  check("3 cuDNN bf16", host(out), ywant, 5e-2);
}

}  // namespace

std::string run_ladder(int threads, bool smoke) {
  set_num_threads(threads);
  const CpuPeak peak = probe_cpu_peak(threads, smoke ? 0.01 : 0.05);
  const int reps = smoke ? 1 : 5;
  std::vector<Row> rows;
  auto add = [&](const std::string& kernel, const std::string& shape, const std::string& rung, double gflop,
                 double ms, const std::string& note) { rows.push_back({kernel, shape, rung, note, ms, gflop}); };

  // ---- GEMM: C (n x n) = A B
  const int64_t n = smoke ? 64 : 512;
  const auto A = random_floats(size_t(n * n), 1), B = random_floats(size_t(n * n), 2);
  std::vector<float> want(size_t(n * n)), C(size_t(n * n));
  const double gemm_gflop = 2.0 * double(n) * double(n) * double(n) * 1e-9;
  const std::string gshape = std::to_string(n) + "^3";
  add("gemm", gshape, "0 naive (1 thread)", gemm_gflop,
      median_ms(smoke ? 1 : 2, [&] { reference::gemm<float>(false, false, n, n, n, A.data(), n, B.data(), n,
                                                             want.data(), n); }),
      "");
  add("gemm", gshape, "1 blocked (1 thread)", gemm_gflop,
      median_ms(reps, [&] { gemm_blocked(n, n, n, A.data(), B.data(), C.data()); }), "");
  KILN_CHECK(max_rel_diff(C, want) < 1e-4, "kiln bench --ladder: the blocked GEMM disagrees with the reference");
  if (sgemm_packed_available()) {
    add("gemm", gshape, "2 packed (" + threads_label(threads) + ")", gemm_gflop,
        median_ms(reps, [&] { sgemm_packed(false, false, n, n, n, 1.f, A.data(), n, B.data(), n, 0.f, C.data(), n,
                                           threads); }),
        "");
    KILN_CHECK(max_rel_diff(C, want) < 1e-4, "kiln bench --ladder: the packed GEMM disagrees with the reference");
  } else {
    add("gemm", gshape, "2 packed", gemm_gflop, NAN, "not in this build (no AVX-512 or AVX2)");
  }

  // ---- convolution: ConvNet's second layer (stride 1: im2col, wide) and first (1 channel: direct)
  struct ConvShape {
    const char* name;
    int64_t N, C, H, W, O, k, pad;
  };
  const ConvShape shapes[] = {{"32->64 3x3 28x28", smoke ? 1 : 8, 32, 28, 28, 64, 3, 1},
                              {"1->32 3x3 28x28", smoke ? 1 : 8, 1, 28, 28, 32, 3, 1}};
  for (const ConvShape& s : shapes) {
    Conv2dGeom g{s.N, s.C, s.H, s.W, s.O, s.k, s.k, 1, 1, s.pad, s.pad, 1, 1, 1, 0, 0};
    const reference::Conv2dShape r{.N = s.N, .C = s.C, .H = s.H, .W = s.W, .O = s.O, .kH = s.k, .kW = s.k,
                                   .pad_h = s.pad, .pad_w = s.pad};
    g.OH = r.out_h(), g.OW = r.out_w();
    const auto x = random_floats(size_t(s.N * s.C * s.H * s.W), 3), w = random_floats(size_t(s.O * s.C * s.k * s.k), 4);
    std::vector<float> y0(size_t(s.N * s.O * g.OH * g.OW)), y(y0.size());
    const double gflop = 2.0 * double(s.N * s.O * g.OH * g.OW) * double(s.C * s.k * s.k) * 1e-9;
    add("conv2d", s.name, "0 naive (1 thread)", gflop,
        median_ms(1, [&] { reference::conv2d<float>(r, x.data(), w.data(), nullptr, y0.data()); }), "");
    auto rung = [&](const std::string& name, bool applies, const char* why, const std::function<void()>& f) {
      if (!applies) return add("conv2d", s.name, name, gflop, NAN, why);
      add("conv2d", s.name, name + " (" + threads_label(threads) + ")", gflop, median_ms(reps, f), "");
      KILN_CHECK(max_rel_diff(y, y0) < 1e-4, "kiln bench --ladder: conv2d rung ", name, " disagrees with the reference");
    };
    // the algorithms take samples [lo, hi) and a thread count over channels (1: over samples here)
    auto over_samples = [&](const std::function<void(int64_t, int64_t)>& f) {
      parallel_for(0, s.N, 1, [&](int64_t lo, int64_t hi) { f(lo, hi); });
    };
    rung("1 im2col", true, "", [&] {
      over_samples([&](int64_t lo, int64_t hi) {
        conv_cpu::conv2d_forward_im2col<float>(1, g, x.data(), w.data(), nullptr, y.data(), lo, hi);
      });
    });
    rung("2 wide", conv_cpu::use_wide(g), "stride 1 and a layout it pays for only", [&] {
      over_samples([&](int64_t lo, int64_t hi) {
        conv_cpu::conv2d_forward_wide<float>(1, g, x.data(), w.data(), nullptr, y.data(), lo, hi);
      });
    });
    rung("3 direct", s.C <= 4, "at most 4 input channels", [&] {
      over_samples([&](int64_t lo, int64_t hi) {
        conv_cpu::conv2d_forward_direct<float>(g, x.data(), w.data(), nullptr, y.data(), lo, hi);
      });
    });
  }

  const std::string gpu = cuda::is_available() ? cuda::device_name() : "";
  if (!gpu.empty()) run_gpu_rungs(smoke, gpu, rows);

  std::vector<std::vector<std::string>> table = {{"kernel", "shape", "rung", "median ms", "GFLOP/s", "of peak",
                                                  "speed-up", "note"}};
  double base = NAN;
  std::string last_key;
  for (const Row& r : rows) {
    if (r.kernel + r.shape != last_key) base = r.ms, last_key = r.kernel + r.shape;
    const double gfs = r.gflop / (r.ms * 1e-3);
    // the single-thread rungs against one core's peak, the others against all threads';
    // the GPU's against its data-sheet peak in the rung's precision
    const double pk =
        r.gpu ? r.peak : peak.fp32_gflops / (r.rung.find("(1 thread)") != std::string::npos ? threads : 1);
    table.push_back({r.kernel, r.shape, r.rung, std::isfinite(r.ms) ? fmt("%.3f", r.ms) : "-",
                     std::isfinite(r.ms) ? fmt("%.1f", gfs) : "-",
                     std::isfinite(r.ms) && gfs <= pk ? fmt("%.1f%%", 100.0 * gfs / pk) : "-",
                     std::isfinite(r.ms) ? fmt("%.1fx", base / r.ms) : "-", r.note});
  }
  std::string out = "kernel ladder on " + cpu_model_name() + ", " + threads_label(threads) + "\n";
  out += format_columns(table, 3);
  out += "cpu peak: " + peak.method + " = " + fmt("%.1f", peak.fp32_gflops) + " GFLOP/s fp32" +
         (peak.note.empty() ? "" : "\nnote: " + peak.note) + "\n";
  out += "each rung's result checked against rung 0; speed-up against rung 0 of the same shape; "
         "one-thread rungs against one core's peak\n";
  out += gpu.empty() ? "no GPU visible: the GPU rungs (naive, shared-memory tiled, cuBLAS / cuDNN) were not run\n"
                     : "GPU rungs on " + gpu + ": medians of CUDA-event timings, against its data-sheet peak in the "
                       "rung's precision (\"-\" where kiln's table lacks the GPU)\n";
  return out;
}

}  // namespace kiln::bench
