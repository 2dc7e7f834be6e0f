// kiln's packed float32 GEMM (ops/cpu/sgemm.cpp) against a float64 reference: every
// transpose, edge sizes around the AVX-512 12 x 32 and the AVX2 6 x 16 tiles and the
// 384 (256) / 192 (144) / 512 blocking, row strides wider than the matrix, alpha and beta, a row
// bias, one and two threads. CTest runs it again with KILN_CPU_SGEMM=avx2 (an AVX-512
// machine tests both kernels) and with KILN_CPU_SGEMM=scalar16 (the shared kernel code at
// the AVX-512 tile geometry, on any CPU).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <limits>
#include <vector>
#include "kiln/core/error.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/cpu/sgemm.h"
#include "normal_pool.h"

using namespace kiln;

namespace {

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  int threads;
  bool bias = false;   // a row bias (N values) added to every row of C
  bool table = false;  // B's stored rows found through a row table (repeating, unaligned)
};

/// Runs one case through `gemm` and checks every element against a float64 product.
template <class Gemm>
void check_case(const Case& c, const Gemm& gemm) {
  kiln::test::NormalPool nd(unsigned(c.M * 131 + c.N * 17 + c.K));
  // Row strides 3 wider than needed: the kernel must honour lda/ldb/ldc, not assume packing.
  const int64_t lda = (c.ta ? c.M : c.K) + 3, ldb = (c.tb ? c.K : c.N) + 3, ldc = c.N + 3;
  std::vector<float> A((c.ta ? c.K : c.M) * lda), B((c.tb ? c.N : c.K) * ldb), C(c.M * ldc);
  for (auto& x : A) x = nd();
  for (auto& x : B) x = nd();
  // beta == 0 must not read C: fill it with NaN, which any read would carry into the result.
  for (auto& x : C) x = c.beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : nd();
  std::vector<float> bias(c.bias ? c.N : 0);
  for (auto& x : bias) x = nd();
  // Row r of the stored B: r * ldb, or through a table that repeats rows and shifts every
  // other one by an element (a convolution's taps overlap and are not aligned).
  const int64_t stored = c.tb ? c.N : c.K;
  std::vector<int64_t> rows(c.table ? stored : 0);
  for (int64_t r = 0; r < int64_t(rows.size()); ++r) rows[r] = (r * 7 + 3) % stored * ldb + r % 2;
  auto brow = [&](int64_t r) { return B.data() + (c.table ? rows[r] : r * ldb); };
  const std::vector<float> C0 = C;
  gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.table ? rows.data() : nullptr, c.beta,
       C.data(), ldc, c.threads, c.bias ? bias.data() : nullptr);
  double worst = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < c.K; ++k)
        acc += double(c.ta ? A[k * lda + i] : A[i * lda + k]) * double(c.tb ? brow(j)[k] : brow(k)[j]);
      double want = c.alpha * acc + (c.beta == 0.f ? 0.0 : c.beta * double(C0[i * ldc + j])) +
                    (c.bias ? double(bias[j]) : 0.0);
      double err = std::abs(double(C[i * ldc + j]) - want) / (1.0 + std::abs(want));
      if (!(err <= worst)) worst = err;  // NaN-safe: a NaN makes worst NaN
    }
  INFO("ta=", c.ta, " tb=", c.tb, " M=", c.M, " N=", c.N, " K=", c.K, " alpha=", c.alpha, " beta=", c.beta,
       " threads=", c.threads, " bias=", c.bias, " table=", c.table);
  CHECK(worst < 1e-5 * std::sqrt(double(c.K) + 1.0));
  // The padding columns past N in each row of C are never written.
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = c.N; j < ldc; ++j) {
      const float before = C0[i * ldc + j], after = C[i * ldc + j];
      CHECK((std::isnan(before) ? std::isnan(after) : after == before));
    }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // Edges of the 12-row tile (4- and 8-row variants) and the 6-row one (2 and 4), the 32-
  // and 16-column tiles and their masks.
  const int64_t small[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 16, 17, 31, 33};
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int64_t m : small)
        for (int64_t n : {int64_t(1), int64_t(7), int64_t(9), int64_t(16), int64_t(17), int64_t(32), int64_t(45)})
          out.push_back({bool(ta), bool(tb), m, n, m + n, 1.f, 0.f, 1});
  // Blocking: K over 384 (256 with AVX2; equal slices), M over 192, N over 512; 16-deep
  // transposes and their remainders; both thread splits (by rows when M >= N, else by columns).
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      out.push_back({bool(ta), bool(tb), 200, 70, 600, 1.f, 0.f, 2});
      out.push_back({bool(ta), bool(tb), 100, 600, 1000, 1.f, 0.5f, 1});  // 3 (4) slices of K, 2 blocks of N
      out.push_back({bool(ta), bool(tb), 37, 530, 47, -0.5f, 1.f, 2});
      out.push_back({bool(ta), bool(tb), 64, 96, 300, 2.f, 0.5f, 1});
      out.push_back({bool(ta), bool(tb), 390, 33, 17, 1.f, 0.f, 2});
      out.push_back({bool(ta), bool(tb), 20, 700, 300, 1.f, 0.5f, 2});  // short C: B read in place
      // the linear layer's bias in the store: K slices, N blocks, both thread splits, edges
      out.push_back({bool(ta), bool(tb), 45, 600, 300, 1.f, 0.f, 2, true});
      out.push_back({bool(ta), bool(tb), 200, 33, 40, 0.5f, 1.f, 2, true});
      out.push_back({bool(ta), bool(tb), 7, 19, 5, 1.f, 0.f, 1, true});
      // deep and narrow (a weight gradient): the threads split K and sum their partial C
      out.push_back({bool(ta), bool(tb), 64, 48, 1501, 1.f, 0.5f, 2, true});
      out.push_back({bool(ta), bool(tb), 20, 40, 1100, -1.f, 0.f, 2, false, true});
      // B through a row table (a convolution's implicit im2col): direct and packed, K slices
      out.push_back({bool(ta), bool(tb), 16, 136, 150, 1.f, 0.f, 1, false, true});
      out.push_back({bool(ta), bool(tb), 64, 222, 576, 1.f, 1.f, 2, false, true});
      out.push_back({bool(ta), bool(tb), 300, 45, 37, 1.f, 0.f, 2, false, true});
    }
  return out;
}

}  // namespace

TEST_CASE("sgemm_packed: against a float64 reference") {
  if (!sgemm_packed_available()) {
    MESSAGE("skipped: this build has neither AVX-512 nor AVX2 (the float32 GEMM is Eigen's, tested through matmul)");
    return;
  }
  auto run = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, const int64_t* rows, float beta, float* C, int64_t ldc, int threads,
                const float* bias) {
    if (rows) sgemm_packed_rows(ta, tb, M, N, K, alpha, A, lda, B, rows, beta, C, ldc, threads);
    else sgemm_packed(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads, bias);
  };
  for (const Case& c : cases()) check_case(c, run);
}

TEST_CASE("gemm_cpu<float>, gemm_rows_cpu<float>: against a float64 reference, with or without the packed kernel") {
  // gemm_cpu picks the kernel (and its threads) itself; `threads` is not passed on.
  auto via_gemm_cpu = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                         int64_t lda, const float* B, int64_t ldb, const int64_t* rows, float beta, float* C,
                         int64_t ldc, int, const float* bias) {
    if (rows) gemm_rows_cpu<float>(ta, tb, M, N, K, alpha, A, lda, B, rows, beta, C, ldc);
    else gemm_cpu<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  };
  for (const Case& c : cases()) check_case(c, via_gemm_cpu);
}

TEST_CASE("sgemm_packed: K = 0 or alpha = 0 scales C by beta; empty C is a no-op") {
  if (!sgemm_packed_available()) {
    MESSAGE("skipped: this build has neither AVX-512 nor AVX2");
    return;
  }
  std::vector<float> C = {1, 2, 3, 4};
  const float a = 1.f, b = 1.f;
  sgemm_packed(false, false, 2, 2, 0, 1.f, &a, 1, &b, 1, 0.5f, C.data(), 2, 1);
  CHECK(C == std::vector<float>{0.5f, 1.f, 1.5f, 2.f});
  sgemm_packed(false, false, 2, 2, 1, 0.f, &a, 1, &b, 2, 0.f, C.data(), 2, 2);
  CHECK(C == std::vector<float>{0, 0, 0, 0});
  sgemm_packed(false, false, 0, 2, 3, 1.f, nullptr, 3, nullptr, 2, 0.f, nullptr, 2, 2);
}

TEST_CASE("sgemm_packed: a build without AVX-512 or AVX2 says so") {
  if (sgemm_packed_available()) return;
  CHECK_THROWS_WITH_AS(sgemm_packed(false, false, 2, 2, 2, 1.f, nullptr, 2, nullptr, 2, 0.f, nullptr, 2, 1),
                       doctest::Contains("not compiled into this build"), Error);
  CHECK_THROWS_WITH_AS(sgemm_packed_rows(false, false, 2, 2, 2, 1.f, nullptr, 2, nullptr, nullptr, 0.f, nullptr, 2, 1),
                       doctest::Contains("not compiled into this build"), Error);
}

TEST_CASE("sgemm_packed_isa: names the kernel that runs, as KILN_CPU_SGEMM chose it") {
  const std::string isa = sgemm_packed_isa();
  MESSAGE("packed float32 GEMM in this run: ", isa);
  if (!sgemm_packed_available()) {
    CHECK(isa == "none");
    return;
  }
  const std::string env = std::getenv("KILN_CPU_SGEMM") ? std::getenv("KILN_CPU_SGEMM") : "";
  if (env == "avx2") CHECK(isa == "AVX2");
  else if (env == "scalar16") CHECK(isa == "scalar model of AVX-512");
  else CHECK((isa == "AVX-512" || isa == "AVX2"));
}
