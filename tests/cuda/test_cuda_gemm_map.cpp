// The row-major to column-major GEMM mappings of the CUDA backend (ops/cuda/gemm_map.h),
// run on the CPU: each row-major product goes through the mapping into a naive GEMM with
// cuBLAS's column-major semantics (and one with cuBLASLt's layout semantics), and must
// equal the row-major product computed directly. Covers both transposes, padded leading
// dimensions, strided batches, broadcast (stride 0) operands, the six GEMMs of attention's
// forward and backward, and linear's two with their cuBLASLt epilogues (bias, GELU keeping
// the pre-activation, the bias gradient). No GPU needed.
#include <doctest/doctest.h>
#include <array>
#include <cmath>
#include <random>
#include <vector>
#include "kiln/ops/cuda/gemm_map.h"

using namespace kiln::cuda;

namespace {

std::mt19937 rng(11);
std::vector<double> random_buffer(int64_t n) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(size_t(std::max<int64_t>(n, 0)));
  for (double& x : v) x = u(rng);
  return v;
}

// cuBLAS <t>gemmStridedBatched: column-major, op(X)(i, l) = X[i + l ld] or, transposed, X[l + i ld].
void cublas_like(const ColMajorGemm& c, double alpha, const double* first, const double* second, double beta,
                 double* C) {
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t i = 0; i < c.m; ++i) {
        double acc = 0;
        for (int64_t l = 0; l < c.k; ++l) {
          const double f = c.trans_first ? first[b * c.stride_first + l + i * c.ld_first]
                                         : first[b * c.stride_first + i + l * c.ld_first];
          const double s = c.trans_second ? second[b * c.stride_second + j + l * c.ld_second]
                                          : second[b * c.stride_second + l + j * c.ld_second];
          acc += f * s;
        }
        double& out = C[b * c.stride_c + i + j * c.ldc];
        out = alpha * acc + beta * out;
      }
}

// cublasLtMatmul: each operand described by its stored layout (rows x cols, column-major)
// and the descriptor's transposes; checks that the layouts agree with the product's shape
// and that every leading dimension covers its rows (what cuBLASLt requires).
void lt_like(const LtGemmLayouts& l, bool trans_first, bool trans_second, double alpha, const double* first,
             const double* second, double beta, double* C, int64_t batch) {
  const int64_t m = trans_first ? l.first.cols : l.first.rows, k = trans_first ? l.first.rows : l.first.cols;
  const int64_t k2 = trans_second ? l.second.cols : l.second.rows, n = trans_second ? l.second.rows : l.second.cols;
  REQUIRE(k == k2);
  REQUIRE(l.c.rows == m);
  REQUIRE(l.c.cols == n);
  CHECK(l.first.ld >= l.first.rows);
  CHECK(l.second.ld >= l.second.rows);
  CHECK(l.c.ld >= l.c.rows);
  const ColMajorGemm c{trans_first, trans_second, m, n, k, l.first.ld, l.second.ld, l.c.ld,
                       l.first.stride, l.second.stride, l.c.stride, batch};
  cublas_like(c, alpha, first, second, beta, C);
}

// Row-major C = alpha op(A) op(B) + beta C, directly.
void row_major_direct(const RowMajorGemm& g, double alpha, const double* A, const double* B, double beta, double* C) {
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < g.K; ++l) {
          const double a = g.ta ? A[b * g.sa + l * g.lda + i] : A[b * g.sa + i * g.lda + l];
          const double x = g.tb ? B[b * g.sb + j * g.ldb + l] : B[b * g.sb + l * g.ldb + j];
          acc += a * x;
        }
        double& out = C[b * g.sc + i * g.ldc + j];
        out = alpha * acc + beta * out;
      }
}

// Elements a buffer must hold for `rows` rows of length ld, `batch` times at stride s.
int64_t extent(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t s) {
  if (rows == 0 || cols == 0) return 1;
  return (batch - 1) * s + (rows - 1) * ld + cols;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Runs g both ways (and through the cuBLASLt layouts) and compares.
void check_gemm(const RowMajorGemm& g, double alpha, double beta) {
  const int64_t ar = g.ta ? g.K : g.M, ac = g.ta ? g.M : g.K, br = g.tb ? g.N : g.K, bc = g.tb ? g.K : g.N;
  const auto A = random_buffer(extent(ar, ac, g.lda, g.batch, g.sa));
  const auto B = random_buffer(extent(br, bc, g.ldb, g.batch, g.sb));
  const auto C0 = random_buffer(extent(g.M, g.N, g.ldc, g.batch, g.sc));
  auto want = C0, got = C0, got_lt = C0;
  row_major_direct(g, alpha, A.data(), B.data(), beta, want.data());
  const ColMajorGemm c = to_col_major(g);
  cublas_like(c, alpha, B.data(), A.data(), beta, got.data());
  lt_like(to_lt_layouts(g), c.trans_first, c.trans_second, alpha, B.data(), A.data(), beta, got_lt.data(), g.batch);
  INFO("ta " << g.ta << " tb " << g.tb << " M " << g.M << " N " << g.N << " K " << g.K << " lda " << g.lda << " ldb "
             << g.ldb << " ldc " << g.ldc << " batch " << g.batch << " sa " << g.sa << " sb " << g.sb);
  CHECK(max_diff(want, got) < 1e-12);
  CHECK(max_diff(want, got_lt) < 1e-12);
}

}  // namespace

TEST_CASE("to_col_major: row-major products through a column-major GEMM, every transpose and padding") {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int rep = 0; rep < 20; ++rep) {
        std::uniform_int_distribution<int64_t> dim(1, 9), pad(0, 3), bat(1, 3);
        RowMajorGemm g;
        g.ta = ta, g.tb = tb, g.M = dim(rng), g.N = dim(rng), g.K = dim(rng), g.batch = bat(rng);
        g.lda = (ta ? g.M : g.K) + pad(rng);  // row length of A as stored
        g.ldb = (tb ? g.K : g.N) + pad(rng);
        g.ldc = g.N + pad(rng);
        const int64_t arows = ta ? g.K : g.M, brows = tb ? g.N : g.K;
        g.sa = rep % 4 == 0 ? 0 : arows * g.lda + pad(rng);  // stride 0: a broadcast operand
        g.sb = rep % 5 == 0 ? 0 : brows * g.ldb + pad(rng);
        g.sc = g.M * g.ldc + pad(rng);
        check_gemm(g, rep % 3 == 0 ? 0.5 : 1.0, rep % 2 == 0 ? 0.0 : 1.0);
      }
}

TEST_CASE("the GEMMs of attention map onto column-major correctly") {
  for (auto [B, Tq, Tk, E, Ev] : std::vector<std::array<int64_t, 5>>{{1, 1, 1, 1, 1}, {2, 5, 7, 4, 3}, {3, 8, 8, 6, 6},
                                                                     {1, 3, 9, 2, 5}}) {
    check_gemm(attention_scores(B, Tq, Tk, E), 0.125, 0);
    check_gemm(attention_output(B, Tq, Tk, Ev), 1, 0);
    check_gemm(attention_dv(B, Tq, Tk, Ev), 1, 0);
    check_gemm(attention_dp(B, Tq, Tk, Ev), 1, 0);
    check_gemm(attention_dq(B, Tq, Tk, E), 1, 0);
    check_gemm(attention_dk(B, Tq, Tk, E), 1, 0);
  }
  // and they are the products attention needs: s = q k^T on contiguous (Tq, E) / (Tk, E) rows
  const RowMajorGemm s = attention_scores(2, 5, 7, 4);
  CHECK((!s.ta && s.tb && s.M == 5 && s.N == 7 && s.K == 4 && s.sa == 20 && s.sb == 28 && s.sc == 35));
  const RowMajorGemm dk = attention_dk(2, 5, 7, 4);  // dk (Tk, E) = ds^T (Tk, Tq) q (Tq, E)
  CHECK((dk.ta && !dk.tb && dk.M == 7 && dk.N == 4 && dk.K == 5 && dk.lda == 7 && dk.sc == 28));
}

TEST_CASE("linear's cuBLASLt GEMMs: y = gelu(x W^T + b) with its pre-activation, dW = g^T x and db by BGRADB") {
  // cuBLASLt's epilogues, by their documented meaning on its column-major D = op(A) op(B)
  // (m x n, k summed): BIAS and GELU_AUX_BIAS add bias[i] to row i of D, keep D + bias in
  // aux (ld aux_ld) and write gelu_tanh of it; BGRADB writes bias[j] = sum over l of op(B)(l, j).
  // A is to_col_major's first operand, B its second, as ops/cuda/linalg.cu passes them.
  auto gelu_tanh = [](double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); };
  for (const auto& shape : std::vector<std::array<int64_t, 4>>{{1, 1, 1, 0}, {6, 8, 5, 0}, {7, 16, 9, 3}, {3, 24, 4, 1}}) {
    const int64_t M = shape[0], O = shape[1], I = shape[2], pad = shape[3];  // (no structured bindings: INFO captures)
    INFO("M " << M << " O " << O << " I " << I << " x row padding " << pad);
    const int64_t ldx = I + pad;
    const auto x = random_buffer(M * ldx), w = random_buffer(O * I), b = random_buffer(O), g = random_buffer(M * O);
    // forward: D (O x M, ld O) is y^T; aux the same layout
    const RowMajorGemm f = linear_forward(M, O, I, ldx);
    const ColMajorGemm cf = to_col_major(f);
    std::vector<double> d(size_t(M * O), 0.0), pre(size_t(M * O)), y(size_t(M * O));
    lt_like(to_lt_layouts(f), cf.trans_first, cf.trans_second, 1.0, w.data(), x.data(), 0.0, d.data(), 1);
    const int64_t aux_ld = O;  // what linear_gelu_cuda passes
    for (int64_t j = 0; j < cf.n; ++j)
      for (int64_t i = 0; i < cf.m; ++i) {
        pre[size_t(i + j * aux_ld)] = d[size_t(i + j * cf.ldc)] + b[size_t(i)];
        y[size_t(i + j * cf.ldc)] = gelu_tanh(pre[size_t(i + j * aux_ld)]);
      }
    double err_y = 0, err_pre = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o = 0; o < O; ++o) {
        double acc = b[size_t(o)];
        for (int64_t i = 0; i < I; ++i) acc += x[size_t(m * ldx + i)] * w[size_t(o * I + i)];
        err_pre = std::max(err_pre, std::abs(pre[size_t(m * O + o)] - acc));  // row-major (M, O)
        err_y = std::max(err_y, std::abs(y[size_t(m * O + o)] - gelu_tanh(acc)));
      }
    CHECK(err_pre < 1e-12);
    CHECK(err_y < 1e-12);
    // weight gradient: D (I x O, ld I) is dW^T; BGRADB sums op(B) = g's (M x O) over k = M
    const RowMajorGemm wg = linear_weight_grad(M, O, I, ldx);
    const ColMajorGemm cw = to_col_major(wg);
    std::vector<double> dw(size_t(O * I), 0.0), db(size_t(cw.n), 0.0);
    lt_like(to_lt_layouts(wg), cw.trans_first, cw.trans_second, 1.0, x.data(), g.data(), 0.0, dw.data(), 1);
    for (int64_t j = 0; j < cw.n; ++j)
      for (int64_t l = 0; l < cw.k; ++l)
        db[size_t(j)] += cw.trans_second ? g[size_t(j + l * cw.ld_second)] : g[size_t(l + j * cw.ld_second)];
    REQUIRE(cw.n == O);  // one bias gradient per output feature
    double err_dw = 0, err_db = 0;
    for (int64_t o = 0; o < O; ++o) {
      double sb = 0;
      for (int64_t m = 0; m < M; ++m) sb += g[size_t(m * O + o)];
      err_db = std::max(err_db, std::abs(db[size_t(o)] - sb));
      for (int64_t i = 0; i < I; ++i) {
        double acc = 0;
        for (int64_t m = 0; m < M; ++m) acc += g[size_t(m * O + o)] * x[size_t(m * ldx + i)];
        err_dw = std::max(err_dw, std::abs(dw[size_t(o * I + i)] - acc));  // row-major (O, I)
      }
    }
    CHECK(err_dw < 1e-12);
    CHECK(err_db < 1e-12);
  }
}

TEST_CASE("evenly_spaced: one strided batch only for evenly spaced offsets") {
  int64_t s = -1;
  const int64_t even[] = {4, 10, 16, 22}, bcast[] = {3, 3, 3}, uneven[] = {0, 5, 11};
  CHECK(evenly_spaced(even, 4, s));
  CHECK(s == 6);
  CHECK(evenly_spaced(bcast, 3, s));
  CHECK(s == 0);
  CHECK_FALSE(evenly_spaced(uneven, 3, s));
  CHECK(evenly_spaced(even, 1, s));
  CHECK(s == 0);
}
