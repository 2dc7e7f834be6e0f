// kiln's bf16 GEMM (ops/cpu/sgemm_bf16.cpp, AVX512_BF16) against a float64 reference of the
// same bf16 values: every transpose, edges of the 12 x 32 tile and the pair packing (odd
// K, odd row strides), K slices over 512, beta 1, a row bias, one and two threads; for each
// of its forms: bf16 operands into a float32 C, into a bf16 C, float32 operands rounded to
// bf16 as they are packed (B also through a row table, as a convolution reads it), and A
// rounded with B's bf16 bits through a row table (bitwise the float32 B's result); and the
// two unpacked entries of the wide bf16 convolution (pair rows, A rows). Skipped (with a message naming the kernel) on a CPU without AVX512_BF16, unless
// KILN_CPU_BF16_GEMM selects the AMX kernel. The AMX kernel's loop nest runs on its C++
// model of the tile instructions (ops/cpu/sgemm_amx.cpp) on every CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>
#include "kiln/core/error.h"
#include "kiln/core/half.h"
#include "kiln/ops/cpu/sgemm.h"
#include "normal_pool.h"

using namespace kiln;

namespace {

uint16_t to_bf16(float f) {  // round to nearest even (inputs here are finite)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
double from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float beta;
  int threads;
  bool bias = false;
  int64_t a_pad = 3;  // A's row stride past its row length: odd, so pairs are unaligned loads; even
                      // (with K even) lets the AVX512_BF16 kernel read a non-transposed A in place
  int64_t a_off = 0;  // A's first element this many past an aligned one (1: pairs unaligned in place)
};

enum class Form { bf16_to_f32, bf16_to_bf16, f32_rounding, f32_rounding_rows, f32_a_bf16_b_rows };

/// amx_model: sgemm_amx's loop nest on its C++ model of the tiles, called directly; else
/// sgemm_bf16's own kernel (sgemm_bf16_kernel()).
void check_case(const Case& c, Form form = Form::bf16_to_f32, bool amx_model = false) {
  kiln::test::NormalPool nd(unsigned(c.M * 131 + c.N * 17 + c.K));
  // odd row strides: pairs are then unaligned 32-bit loads
  const int64_t lda = (c.ta ? c.M : c.K) + c.a_pad, ldb = (c.tb ? c.K : c.N) + 5, ldc = c.N + 3;
  const int64_t a_rows = c.ta ? c.K : c.M, b_rows = c.tb ? c.N : c.K;
  std::vector<float> Af(a_rows * lda), Bf(b_rows * ldb);  // float32 values, not bf16 ones
  for (auto& x : Af) x = nd();
  for (auto& x : Bf) x = nd();
  std::vector<uint16_t> Abuf(Af.size() + 1), B(Bf.size());
  uint16_t* const A = Abuf.data() + c.a_off;
  for (size_t i = 0; i < Af.size(); ++i) A[i] = to_bf16(Af[i]);
  for (size_t i = 0; i < Bf.size(); ++i) B[i] = to_bf16(Bf[i]);
  // The row table: B's stored rows in reverse order, at their offsets in Bf.
  std::vector<float> Brev(Bf.size());
  std::vector<int64_t> table(static_cast<size_t>(b_rows));
  for (int64_t r = 0; r < b_rows; ++r) {
    table[size_t(r)] = (b_rows - 1 - r) * ldb;
    std::copy_n(Bf.data() + r * ldb, ldb, Brev.data() + table[size_t(r)]);
  }
  const bool c16 = form == Form::bf16_to_bf16;
  const float beta = c16 ? 0.f : c.beta;
  std::vector<float> C(c.M * ldc), bias(c.bias && form <= Form::bf16_to_bf16 ? c.N : 0);
  for (auto& x : C) x = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : nd();
  for (auto& x : bias) x = nd();
  std::vector<uint16_t> C16(C.size(), 0x7FC0);  // NaN
  const std::vector<float> C0 = C;
  const float* bp = bias.empty() ? nullptr : bias.data();
  switch (form) {
    case Form::bf16_to_f32:
      if (amx_model) sgemm_amx(true, c.ta, c.tb, c.M, c.N, c.K, A, lda, B.data(), ldb, beta, C.data(), ldc, c.threads, bp);
      else sgemm_bf16(c.ta, c.tb, c.M, c.N, c.K, A, lda, B.data(), ldb, beta, C.data(), ldc, c.threads, bp);
      break;
    case Form::bf16_to_bf16:
      if (amx_model) sgemm_amx(true, c.ta, c.tb, c.M, c.N, c.K, A, lda, B.data(), ldb, C16.data(), ldc, c.threads, bp);
      else sgemm_bf16(c.ta, c.tb, c.M, c.N, c.K, A, lda, B.data(), ldb, C16.data(), ldc, c.threads, bp);
      for (size_t i = 0; i < C.size(); ++i) C[i] = float(from_bf16(C16[i]));
      break;
    case Form::f32_rounding:
    case Form::f32_rounding_rows: {
      const bool rows = form == Form::f32_rounding_rows;
      const float* b = rows ? Brev.data() : Bf.data();
      const int64_t* table_or_null = rows ? table.data() : nullptr;
      if (amx_model)
        sgemm_amx_rounding(true, c.ta, c.tb, c.M, c.N, c.K, Af.data(), lda, b, ldb, table_or_null, beta, C.data(), ldc,
                           c.threads);
      else
        sgemm_bf16_rounding(c.ta, c.tb, c.M, c.N, c.K, Af.data(), lda, b, ldb, table_or_null, beta, C.data(), ldc,
                            c.threads);
      break;
    }
    case Form::f32_a_bf16_b_rows: {  // B's bf16 bits through the table: bitwise the float32 B's rounding
      std::vector<uint16_t> Brev16(Brev.size());
      for (size_t i = 0; i < Brev.size(); ++i) Brev16[i] = to_bf16(Brev[i]);
      std::vector<float> Cf = C;
      if (amx_model) {
        sgemm_amx_rounding(true, c.ta, c.tb, c.M, c.N, c.K, Af.data(), lda, Brev16.data(), ldb, table.data(), beta,
                           C.data(), ldc, c.threads);
        sgemm_amx_rounding(true, c.ta, c.tb, c.M, c.N, c.K, Af.data(), lda, Brev.data(), ldb, table.data(), beta,
                           Cf.data(), ldc, c.threads);
      } else {
        sgemm_bf16_rounding(c.ta, c.tb, c.M, c.N, c.K, Af.data(), lda, Brev16.data(), ldb, table.data(), beta,
                            C.data(), ldc, c.threads);
        sgemm_bf16_rounding(c.ta, c.tb, c.M, c.N, c.K, Af.data(), lda, Brev.data(), ldb, table.data(), beta,
                            Cf.data(), ldc, c.threads);
      }
      CHECK(std::memcmp(C.data(), Cf.data(), C.size() * sizeof(float)) == 0);
      break;
    }
  }
  double worst = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double acc = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double p = from_bf16(c.ta ? A[k * lda + i] : A[i * lda + k]) * from_bf16(c.tb ? B[j * ldb + k] : B[k * ldb + j]);
        acc += p, mag += std::abs(p);
      }
      const double add = (beta == 0.f ? 0.0 : double(C0[i * ldc + j])) + (bp ? double(bias[j]) : 0.0);
      // float32 sums of K products: rounding grows with K and with the products' magnitudes;
      // a bf16 C adds one rounding of the result (half of 2^-7 relative)
      const double want = acc + add, got = C[i * ldc + j];
      const double err = (std::abs(got - want) - (c16 ? std::abs(want) * 0x1p-8 : 0.0)) / (mag + std::abs(add) + 1.0);
      if (!(err <= worst)) worst = err;  // NaN-safe
    }
  INFO("form=", int(form), " a_pad=", c.a_pad, " a_off=", c.a_off, " ta=", c.ta, " tb=", c.tb, " M=", c.M, " N=", c.N, " K=", c.K, " beta=", beta,
       " threads=", c.threads, " bias=", bool(bp));
  CHECK(worst < 1e-6 * (double(c.K) + 4.0));
  for (int64_t i = 0; i < c.M; ++i)  // the padding columns of C are never written
    for (int64_t j = c.N; j < ldc; ++j) {
      if (c16) {
        CHECK(C16[i * ldc + j] == 0x7FC0);
        continue;
      }
      const float before = C0[i * ldc + j], after = C[i * ldc + j];
      CHECK((std::isnan(before) ? std::isnan(after) : after == before));
    }
}

}  // namespace

/// Every case, in every form, through sgemm_bf16's kernel or the AMX model.
void all_cases(bool amx_model) {
  auto all = [&](const Case& c) {
    for (Form f : {Form::bf16_to_f32, Form::bf16_to_bf16, Form::f32_rounding, Form::f32_rounding_rows,
                   Form::f32_a_bf16_b_rows})
      check_case(c, f, amx_model);
  };
  const int64_t small[] = {1, 3, 4, 5, 8, 11, 12, 13, 16, 17, 31, 33};
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      for (int64_t m : small)
        for (int64_t n : {int64_t(1), int64_t(17), int64_t(32), int64_t(45)})
          for (int64_t k : {int64_t(1), int64_t(2), m + n, int64_t(33)})  // odd and even depths, the 16-pair transpose
            all({bool(ta), bool(tb), m, n, k, 0.f, 1});
      all({bool(ta), bool(tb), 200, 70, 1100, 0.f, 2});         // K slices (equal, even), M blocks
      all({bool(ta), bool(tb), 37, 530, 47, 1.f, 2});           // N blocks, beta 1, split by columns
      all({bool(ta), bool(tb), 390, 33, 1025, 0.f, 2, true});  // odd K over slices, bias, split by rows
      all({bool(ta), bool(tb), 45, 600, 300, 1.f, 1, true});
      all({bool(ta), bool(tb), 30, 40, 1501, 1.f, 2, true});  // deep, small C: K split over threads, beta 1
      // even row strides: a non-transposed bf16 A with K even is read in place (aligned, and
      // from an odd element), odd K still packed
      for (int64_t off : {0, 1})
        for (int64_t m : {int64_t(1), int64_t(5), int64_t(12), int64_t(13), int64_t(31)})
          for (int64_t k : {int64_t(2), int64_t(32), int64_t(33), int64_t(34)})
            all({bool(ta), bool(tb), m, 45, k, 0.f, 1, false, 2, off});
      all({bool(ta), bool(tb), 200, 70, 1100, 1.f, 2, true, 2, 1});  // K slices, M blocks, beta 1, bias
      all({bool(ta), bool(tb), 390, 33, 1024, 0.f, 2, false, 2});
    }
}

TEST_CASE("sgemm_bf16: against a float64 reference of the bf16 values") {
  const char* kernel = sgemm_bf16_kernel();
  if (!kernel) {
    MESSAGE("skipped: no bf16 kernel can run here (no AVX512_BF16 on this CPU, or no AVX-512 in this build, and "
            "KILN_CPU_BF16_GEMM selects no AMX); bf16 matmul on the CPU computes in float32 instead");
    return;
  }
  MESSAGE("ran: sgemm_bf16 on the ", kernel, " kernel; AMX instructions ",
          sgemm_amx_available() ? "available here" : "not available here (the AMX model runs below)");
  all_cases(false);
}

TEST_CASE("sgemm_bf16_pair_rows: unpacked pairs of A and B rows at any offset, against a float64 reference") {
  if (!sgemm_bf16_pair_rows_available()) {
    MESSAGE("skipped: sgemm_bf16_pair_rows needs the AVX512_BF16 kernel, not chosen here");
    CHECK_THROWS_AS(sgemm_bf16_pair_rows(1, 1, 1, nullptr, 1, nullptr, nullptr, nullptr, 1), Error);
    return;
  }
  kiln::test::NormalPool nd(7);
  struct Shape { int64_t M, N, Kp; };
  // tile edges in M (12, 8, 4 rows) and N (32 columns), one and several depth slices (160 pairs)
  for (Shape sh : {Shape{1, 1, 1}, Shape{5, 17, 3}, Shape{12, 32, 16}, Shape{13, 45, 161}, Shape{32, 840, 144},
                   Shape{64, 70, 288}, Shape{31, 100, 400}}) {
    CAPTURE(sh.M);
    CAPTURE(sh.N);
    CAPTURE(sh.Kp);
    const int64_t lda = sh.Kp + 1;  // odd: A's rows at 4-byte offsets only
    std::vector<uint32_t> A(size_t(sh.M * lda));
    for (auto& a : A) a = uint32_t(to_bf16(nd())) | uint32_t(to_bf16(nd())) << 16;
    // B's pair rows at scattered, overlapping offsets of one buffer (as a convolution's taps)
    const int64_t span = sh.N + 3 * sh.Kp + 7;
    std::vector<uint32_t> B(static_cast<size_t>(span));
    for (auto& b : B) b = uint32_t(to_bf16(nd())) | uint32_t(to_bf16(nd())) << 16;
    std::vector<int64_t> off(size_t(sh.Kp));
    for (int64_t p = 0; p < sh.Kp; ++p) off[size_t(p)] = (p * 7) % (3 * sh.Kp + 7);
    const int64_t ldc = sh.N + 5;
    std::vector<float> C(size_t(sh.M * ldc), std::numeric_limits<float>::quiet_NaN());
    sgemm_bf16_pair_rows(sh.M, sh.N, sh.Kp, A.data(), lda, B.data(), off.data(), C.data(), ldc);
    auto lo = [](uint32_t v) { return from_bf16(uint16_t(v & 0xFFFF)); };
    auto hi = [](uint32_t v) { return from_bf16(uint16_t(v >> 16)); };
    double worst = 0;
    int untouched = 0;
    for (int64_t i = 0; i < sh.M; ++i) {
      for (int64_t j = 0; j < sh.N; ++j) {
        double acc = 0, mag = 0;
        for (int64_t p = 0; p < sh.Kp; ++p) {
          const uint32_t a = A[size_t(i * lda + p)], b = B[size_t(off[size_t(p)] + j)];
          const double t = lo(a) * lo(b) + hi(a) * hi(b);
          acc += t, mag += std::abs(lo(a) * lo(b)) + std::abs(hi(a) * hi(b));
        }
        const double err = std::abs(double(C[size_t(i * ldc + j)]) - acc) / (mag + 1.0);
        if (!(err <= worst)) worst = err;
      }
      for (int64_t j = sh.N; j < ldc; ++j) untouched += std::isnan(C[size_t(i * ldc + j)]);
    }
    CHECK(worst < 1e-6);
    CHECK(untouched == sh.M * (ldc - sh.N));  // nothing written past column N
  }
}

TEST_CASE("sgemm_bf16_a_rows: A's rows read in place at any element offset, B transposed, against float64") {
  if (!sgemm_bf16_pair_rows_available()) {
    MESSAGE("skipped: sgemm_bf16_a_rows needs the AVX512_BF16 kernel, not chosen here");
    CHECK_THROWS_AS(sgemm_bf16_a_rows(1, 1, 1, nullptr, nullptr, nullptr, 1, 0.f, nullptr, 1), Error);
    return;
  }
  kiln::test::NormalPool nd(11);
  const uint16_t nan16 = 0x7FC0;
  struct Shape { int64_t M, N, K; bool overlap; float beta; };
  // tile edges in M (12, 8, 4 rows) and N (32 columns); odd K (the last pair's high half past
  // the row); one and several depth slices (160 pairs); beta 0 and 1; rows apart (a NaN after
  // each row: reading past K poisons the sums) and overlapping (a convolution's taps)
  for (Shape sh : {Shape{1, 1, 1, false, 0.f}, Shape{5, 17, 3, false, 1.f}, Shape{12, 32, 16, true, 0.f},
                   Shape{13, 45, 321, false, 0.f}, Shape{288, 32, 811, true, 1.f}, Shape{40, 64, 209, false, 1.f},
                   Shape{31, 100, 642, true, 0.f}}) {
    CAPTURE(sh.M);
    CAPTURE(sh.N);
    CAPTURE(sh.K);
    CAPTURE(sh.overlap);
    std::vector<int64_t> off(size_t(sh.M));
    for (int64_t i = 0; i < sh.M; ++i) off[size_t(i)] = sh.overlap ? (i * 7) % (2 * sh.M + 3) : i * (sh.K + 2) + i % 2;
    const int64_t span = *std::max_element(off.begin(), off.end()) + sh.K + (sh.overlap ? 0 : 1);
    std::vector<uint16_t> A(size_t(span), nan16);  // the gaps between rows apart stay NaN
    for (int64_t i = 0; i < sh.M; ++i)
      for (int64_t k = 0; k < sh.K; ++k) A[size_t(off[size_t(i)] + k)] = to_bf16(nd());
    const int64_t ldb = sh.K + 3, ldc = sh.N + 5;
    std::vector<float> Bt(size_t(sh.N * ldb));  // float32 values: rounded to bf16 by the packing
    for (auto& b : Bt) b = nd();
    std::vector<float> C(size_t(sh.M * ldc), std::numeric_limits<float>::quiet_NaN());
    for (int64_t i = 0; i < sh.M; ++i)
      for (int64_t j = 0; j < sh.N && sh.beta != 0.f; ++j) C[size_t(i * ldc + j)] = nd();
    const std::vector<float> C0 = C;
    sgemm_bf16_a_rows(sh.M, sh.N, sh.K, A.data(), off.data(), Bt.data(), ldb, sh.beta, C.data(), ldc);
    double worst = 0;
    int untouched = 0;
    for (int64_t i = 0; i < sh.M; ++i) {
      for (int64_t j = 0; j < sh.N; ++j) {
        double acc = sh.beta != 0.f ? double(C0[size_t(i * ldc + j)]) : 0.0, mag = std::abs(acc);
        for (int64_t k = 0; k < sh.K; ++k) {
          const double t = from_bf16(A[size_t(off[size_t(i)] + k)]) * from_bf16(to_bf16(Bt[size_t(j * ldb + k)]));
          acc += t, mag += std::abs(t);
        }
        const double err = std::abs(double(C[size_t(i * ldc + j)]) - acc) / (mag + 1.0);
        if (!(err <= worst)) worst = err;
      }
      for (int64_t j = sh.N; j < ldc; ++j) untouched += std::isnan(C[size_t(i * ldc + j)]);
    }
    CHECK(worst < 1e-6);
    CHECK(untouched == sh.M * (ldc - sh.N));  // nothing written past column N
  }
  CHECK_THROWS_AS(sgemm_bf16_a_rows(1, 1, 1, nullptr, nullptr, nullptr, 1, 0.5f, nullptr, 1), Error);  // beta 0 or 1
}

TEST_CASE("sgemm_amx: the AMX loop nest on the C++ model of the tiles, against a float64 reference") {
  // The packing (A row-major in pairs, B in 32-column pair panels, both zero-padded to
  // whole tiles), the 32 x 32 block of four C tiles, K slices, edges and threads of the
  // AMX kernel, on any CPU; the instructions themselves need one with AMX
  // (KILN_CPU_BF16_GEMM=amx).
  all_cases(true);
}

TEST_CASE("sgemm_bf16: K = 0 adds the bias to beta * C; bad beta and a missing kernel are errors") {
  // both kernels: sgemm_bf16's (where one can run) and the AMX model
  for (bool amx_model : {false, true}) {
    CAPTURE(amx_model);
    if (!amx_model && !sgemm_bf16_kernel()) {
      CHECK_THROWS_WITH_AS(sgemm_bf16(false, false, 2, 2, 2, nullptr, 2, nullptr, 2, 0.f, nullptr, 2, 1),
                           doctest::Contains("bf16"), Error);
      continue;
    }
    auto f32 = [&](int64_t K, float beta, float* C, const float* bias) {
      if (amx_model) sgemm_amx(true, false, false, 2, 2, K, nullptr, 1, nullptr, 2, beta, C, 2, 1, bias);
      else sgemm_bf16(false, false, 2, 2, K, nullptr, 1, nullptr, 2, beta, C, 2, 1, bias);
    };
    std::vector<float> C = {1, 2, 3, 4};
    const float bias[2] = {10, 20};
    f32(0, 1.f, C.data(), bias);
    CHECK(C == std::vector<float>{11, 22, 13, 24});
    CHECK_THROWS_WITH_AS(f32(2, 0.5f, C.data(), nullptr), doctest::Contains("beta must be 0 or"), Error);
    std::vector<uint16_t> C16(4, 0);  // a bf16 C: K = 0 stores the rounded bias
    if (amx_model) sgemm_amx(true, false, false, 2, 2, 0, nullptr, 1, nullptr, 2, C16.data(), 2, 1, bias);
    else sgemm_bf16(false, false, 2, 2, 0, nullptr, 1, nullptr, 2, C16.data(), 2, 1, bias);
    CHECK(C16 == std::vector<uint16_t>{0x4120, 0x41A0, 0x4120, 0x41A0});  // 10, 20
  }
  if (!sgemm_amx_available()) {  // the instructions, asked for on a CPU without them
    std::vector<float> C(4);
    CHECK_THROWS_WITH_AS(sgemm_amx(false, false, false, 2, 2, 2, nullptr, 2, nullptr, 2, 0.f, C.data(), 2, 1),
                         doctest::Contains("no AMX-BF16"), Error);
  }
}

TEST_CASE("sgemm_packed_half: float16 and bfloat16 operands widened per panel, against float64, and bitwise the "
          "float32 kernel's sums rounded once") {
  if (!sgemm_packed_available()) {
    CHECK_THROWS_WITH_AS(sgemm_packed_half(false, false, false, 2, 2, 2, nullptr, 2, nullptr, 2, nullptr, 2, 1),
                         doctest::Contains("not compiled"), Error);
    return;
  }
  for (bool bf16 : {false, true})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const Case& c : std::vector<Case>{{false, false, 1, 1, 1, 0.f, 1, false},
                                               {false, false, 5, 17, 3, 0.f, 1, true},
                                               {false, false, 13, 33, 31, 0.f, 2, false},
                                               {false, false, 12, 32, 16, 0.f, 1, true},
                                               {false, false, 70, 45, 300, 0.f, 2, true},
                                               {false, false, 200, 530, 70, 0.f, 2, false},
                                               {false, false, 37, 20, 600, 0.f, 2, true},
                                               {false, false, 50, 21, 1100, 0.f, 2, true},  // K split over threads
                                               {false, false, 4, 3, 0, 0.f, 1, true}}) {
          const int64_t M = c.M, N = c.N, K = c.K;
          const int threads = c.threads;
          const bool with_bias = c.bias;
          kiln::test::NormalPool nd(unsigned(M * 7 + N * 3 + K));
          const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
          auto to16 = [&](float f) { return bf16 ? to_bf16(f) : float_to_half_bits(f); };
          auto from16 = [&](uint16_t h) { return bf16 ? from_bf16(h) : double(half_bits_to_float(h)); };
          std::vector<uint16_t> A((ta ? K : M) * lda), B((tb ? N : K) * ldb), C(M * ldc, 0x7E00);
          for (auto& x : A) x = to16(nd());
          for (auto& x : B) x = to16(nd());
          std::vector<float> bias(with_bias ? N : 0);
          for (auto& x : bias) x = nd();
          sgemm_packed_half(bf16, ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc, threads,
                            with_bias ? bias.data() : nullptr);
          // The float32 kernel on the same values sums in the same order (slices of K, the
          // thread split): the 16-bit result is its float32 result rounded once.
          std::vector<float> Af(A.size()), Bf(B.size()), Cf(M * N);
          for (size_t i = 0; i < A.size(); ++i) Af[i] = float(from16(A[i]));
          for (size_t i = 0; i < B.size(); ++i) Bf[i] = float(from16(B[i]));
          sgemm_packed(ta, tb, M, N, K, 1.f, Af.data(), lda, Bf.data(), ldb, 0.f, Cf.data(), N, threads,
                       with_bias ? bias.data() : nullptr);
          int64_t differ = 0;
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) differ += C[i * ldc + j] != to16(Cf[i * N + j]);
          double worst = 0;
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              double acc = with_bias ? bias[j] : 0.0, mag = std::abs(acc);
              for (int64_t k = 0; k < K; ++k) {
                const double p = from16(ta ? A[k * lda + i] : A[i * lda + k]) * from16(tb ? B[j * ldb + k] : B[k * ldb + j]);
                acc += p, mag += std::abs(p);
              }
              // one rounding of the float32 sum to the 16-bit C (2^-8 relative for bf16, 2^-11 for fp16)
              const double e = (std::abs(from16(C[i * ldc + j]) - acc) - std::abs(acc) * (bf16 ? 0x1p-8 : 0x1p-11)) /
                               (mag + 1.0);
              if (!(e <= worst)) worst = e;
            }
            for (int64_t j = N; j < ldc; ++j) CHECK(C[i * ldc + j] == 0x7E00);  // never written
          }
          INFO("bf16=", bf16, " ta=", ta, " tb=", tb, " M=", M, " N=", N, " K=", K, " threads=", threads);
          CHECK(worst < 1e-6 * double(K + 4));
          CHECK(differ == 0);
        }
}
