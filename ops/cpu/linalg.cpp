// CPU kernels of the linalg op family and their registration in the dispatch table.
// float32 GEMM runs kiln's packed AVX-512 / AVX2 kernel (ops/cpu/sgemm.cpp) where the build
// has it; float64, and float32 without AVX2, go through Eigen: Eigen::Map over raw row-major
// buffers, transposes folded into the Map's storage order; big tall products split into
// one block of rows per thread, other big products on Eigen's own OpenMP threading.
// GCC 12 reports false -Wmaybe-uninitialized inside Eigen's AVX-512 paths (-march=native).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // same Eigen AVX-512 code at -O1
#include <Eigen/Core>
#include <algorithm>
#include <type_traits>
#include <vector>
#include <omp.h>
#include "kiln/core/half.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/cpu/sgemm.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

void sync_eigen_threads() {
  if (omp_in_parallel()) return;
  int nt = get_num_threads();
  if (Eigen::nbThreads() != nt) Eigen::setNbThreads(nt);
}

namespace {

/// gemm_cpu's product on the calling thread, or with Eigen's threads when called outside a
/// parallel region (Eigen runs serially inside one).
template <class T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                 const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  using Eigen::Dynamic;
  using RowMat = Eigen::Matrix<T, Dynamic, Dynamic, Eigen::RowMajor>;
  using ColMat = Eigen::Matrix<T, Dynamic, Dynamic, Eigen::ColMajor>;
  using Stride = Eigen::OuterStride<>;
  using RowMap = Eigen::Map<const RowMat, Eigen::Unaligned, Stride>;
  using ColMap = Eigen::Map<const ColMat, Eigen::Unaligned, Stride>;
  if (M <= 0 || N <= 0) return;
  Eigen::Map<RowMat, Eigen::Unaligned, Stride> c(C, M, N, Stride(ldc));  // (M, N)
  if (K <= 0) {
    if (beta == T(0)) c.setZero();
    else if (beta != T(1)) c *= beta;
    return;
  }
  auto run = [&](const auto& a, const auto& b) {
    if (beta == T(0)) {
      if (alpha == T(1)) c.noalias() = a * b;
      else c.noalias() = (alpha * a) * b;
    } else {
      if (beta != T(1)) c *= beta;
      if (alpha == T(1)) c.noalias() += a * b;
      else c.noalias() += (alpha * a) * b;
    }
  };
  // Small products run on one thread: Eigen would split a 32x128x128 GEMM over two, and
  // the fork/join and spin-waits then cost more than the product (badly so on a busy machine).
  struct SerialScope {
    int prev = 0;
    explicit SerialScope(bool on) {
      if (on && !omp_in_parallel()) { prev = Eigen::nbThreads(); Eigen::setNbThreads(1); }
    }
    ~SerialScope() { if (prev) Eigen::setNbThreads(prev); }
  } serial(double(M) * double(N) * double(K) < double(1 << 22));
  // A stored (K, M) row-major and read transposed is the same bytes as (M, K) column-major.
  if (!trans_a && !trans_b) run(RowMap(A, M, K, Stride(lda)), RowMap(B, K, N, Stride(ldb)));
  else if (!trans_a && trans_b) run(RowMap(A, M, K, Stride(lda)), ColMap(B, K, N, Stride(ldb)));
  else if (trans_a && !trans_b) run(ColMap(A, M, K, Stride(lda)), RowMap(B, K, N, Stride(ldb)));
  else run(ColMap(A, M, K, Stride(lda)), ColMap(B, K, N, Stride(ldb)));
}

/// Threads for sgemm_packed: one inside a parallel region or for products under ~2M
/// multiply-adds (~20 us on one core, less than a fork/join would save), else all.
int sgemm_threads(int64_t M, int64_t N, int64_t K) {
  const bool small = double(M) * double(N) * double(K) < double(1 << 21);
  return omp_in_parallel() || small ? 1 : get_num_threads();
}

}  // namespace

template <class T>
void gemm_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
              const T* B, int64_t ldb, T beta, T* C, int64_t ldc, const T* bias) {
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_packed_available()) {  // the bias is added as each tile of C is stored
      sgemm_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, sgemm_threads(M, N, K), bias);
      return;
    }
  }
  if (bias && M > 0) {  // Eigen: C = beta * C + bias first, then accumulate the product
    parallel_for(0, M, std::max<int64_t>(1, 32768 / std::max<int64_t>(N, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t m = lo; m < hi; ++m)
        for (int64_t n = 0; n < N; ++n) C[m * ldc + n] = (beta == T(0) ? T(0) : beta * C[m * ldc + n]) + bias[n];
    });
    beta = T(1);
  }
  // Tall products (a training step's activations: M = batch x tokens rows, N and K the
  // layer widths) run as one block of rows of C per thread, each a serial Eigen GEMM: no
  // synchronisation inside the product, where Eigen's own threading waits for the other
  // thread at every block (one microbenchmark here, 2 threads, 2048 x 128 x 384:
  // 170 -> 230 GFLOP/s). Other shapes keep Eigen's threading (it shares packed blocks).
  const int nt = omp_in_parallel() ? 1 : get_num_threads();
  if (nt > 1 && M >= 2 * N && M >= 64 * nt && double(M) * double(N) * double(K) >= double(1 << 22)) {
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T_ = omp_get_num_threads();
      const int64_t per = (M + T_ - 1) / T_;
      const int64_t m0 = std::min<int64_t>(M, t * per), m1 = std::min<int64_t>(M, m0 + per);
      if (m0 < m1)  // rows [m0, m1) of op(A) and C
        gemm_serial<T>(trans_a, trans_b, m1 - m0, N, K, alpha, trans_a ? A + m0 : A + m0 * lda, lda, B, ldb, beta,
                       C + m0 * ldc, ldc);
    }
    return;
  }
  gemm_serial<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm_rows_cpu(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, const int64_t* b_rows, T beta, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_packed_available()) {
      sgemm_packed_rows(trans_a, trans_b, M, N, K, alpha, A, lda, B, b_rows, beta, C, ldc, sgemm_threads(M, N, K));
      return;
    }
  }
  // Without the packed kernel: gather the rows (the im2col copy, into a per-thread buffer
  // kept between calls), then the plain GEMM.
  const int64_t rows = trans_b ? N : K, len = trans_b ? K : N;
  thread_local std::vector<T> dense;
  dense.resize(size_t(std::max<int64_t>(rows * len, 0)));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(B + b_rows[r], len, dense.data() + r * len);
  gemm_cpu<T>(trans_a, trans_b, M, N, K, alpha, A, lda, dense.data(), len, beta, C, ldc);
}

template void gemm_cpu<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                              int64_t, float, float*, int64_t, const float*);
template void gemm_cpu<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                               const double*, int64_t, double, double*, int64_t, const double*);
template void gemm_rows_cpu<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                   const int64_t*, float, float*, int64_t);
template void gemm_rows_cpu<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                    const double*, const int64_t*, double, double*, int64_t);

namespace {

/// One 16-bit GEMM C = op(A) @ op(B) [+ bias] with C of the operands' dtype: bf16 on the
/// AVX512_BF16 kernel where sgemm_bf16_preferred(), else (float16, and bf16 elsewhere) on
/// the float32 kernel widening each panel as it packs it.
void gemm_half_into(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                    int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, const float* bias,
                    int threads) {
  const bool bf16 = dt == DType::bfloat16;
  if (bf16 && sgemm_bf16_preferred()) sgemm_bf16(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, threads, bias);
  else sgemm_packed_half(bf16, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, threads, bias);
}

void matmul_half(DType dt, bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
                 const void* A, int64_t lda, const int64_t* a_off, const void* B, int64_t ldb, const int64_t* b_off,
                 double beta, void* C, int64_t ldc, const int64_t* c_off) {
  KILN_CHECK(alpha == 1.0 && beta == 0.0, "matmul (cpu, ", dtype_name(dt), "): alpha 1 and beta 0 only, got alpha ",
             alpha, " beta ", beta);
  const auto* a = static_cast<const uint16_t*>(A);
  const auto* b = static_cast<const uint16_t*>(B);
  auto* c = static_cast<uint16_t*>(C);
  const int nt = omp_in_parallel() ? 1 : get_num_threads();
  if (nt > 1 && batch >= 2 * nt) {  // many GEMMs: one thread each
    parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        gemm_half_into(dt, trans_a, trans_b, M, N, K, a + a_off[i], lda, b + b_off[i], ldb, c + c_off[i], ldc,
                       nullptr, 1);
    });
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    gemm_half_into(dt, trans_a, trans_b, M, N, K, a + a_off[i], lda, b + b_off[i], ldb, c + c_off[i], ldc, nullptr,
                   nt);
}

/// Integer GEMMs (PyTorch has them on the CPU): the plain i-k-j loop, wrapping on overflow as
/// PyTorch does (the products and sums in the unsigned type of the same width).
template <class T>
void matmul_integer(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, const T* A,
                    int64_t lda, const int64_t* a_off, const T* B, int64_t ldb, const int64_t* b_off, T* C,
                    int64_t ldc, const int64_t* c_off) {
  using U = std::make_unsigned_t<T>;
  parallel_for(0, batch * M, 1, [&](int64_t lo, int64_t hi) {
    std::vector<U> row(static_cast<size_t>(N));
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t bi = r / M, i = r % M;
      const T* a = A + a_off[bi];
      const T* b = B + b_off[bi];
      std::fill(row.begin(), row.end(), U(0));
      for (int64_t k = 0; k < K; ++k) {
        const U av = U(trans_a ? a[k * lda + i] : a[i * lda + k]);
        for (int64_t j = 0; j < N; ++j) row[j] = U(row[j] + U(av * U(trans_b ? b[j * ldb + k] : b[k * ldb + j])));
      }
      for (int64_t j = 0; j < N; ++j) C[c_off[bi] + i * ldc + j] = T(row[j]);
    }
  });
}

void matmul_cpu(DType dtype, bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                double alpha, const void* A, int64_t lda, const int64_t* a_off, const void* B, int64_t ldb,
                const int64_t* b_off, double beta, void* C, int64_t ldc, const int64_t* c_off) {
  if (is_half(dtype))
    return matmul_half(dtype, trans_a, trans_b, batch, M, N, K, alpha, A, lda, a_off, B, ldb, b_off, beta, C, ldc,
                       c_off);
  if (dtype == DType::int64 || dtype == DType::int32 || dtype == DType::uint8) {
    KILN_CHECK(alpha == 1.0 && beta == 0.0, "matmul (cpu, ", dtype_name(dtype),
               "): alpha 1 and beta 0 only, got alpha ", alpha, " beta ", beta);
    return KILN_DISPATCH_NUMERIC(dtype, "matmul", [&]<class T>() {
      if constexpr (std::is_integral_v<T>)
        matmul_integer<T>(trans_a, trans_b, batch, M, N, K, static_cast<const T*>(A), lda, a_off,
                          static_cast<const T*>(B), ldb, b_off, static_cast<T*>(C), ldc, c_off);
    });
  }
  KILN_DISPATCH_FLOATING(dtype, "matmul", [&]<class T>() {
    const T* a = static_cast<const T*>(A);
    const T* b = static_cast<const T*>(B);
    T* c = static_cast<T*>(C);
    auto one = [&](int64_t i) {
      gemm_cpu<T>(trans_a, trans_b, M, N, K, T(alpha), a + a_off[i], lda, b + b_off[i], ldb, T(beta),
                  c + c_off[i], ldc);
    };
    const int nt = omp_in_parallel() ? 1 : get_num_threads();
    const double work = double(M) * double(N) * double(K);
    // Many GEMMs (or small ones): one thread per GEMM block, Eigen serial inside (it sees
    // omp_get_num_threads() > 1). Few big GEMMs: one at a time, Eigen threads each.
    bool over_batch = nt > 1 && batch >= nt && (batch >= 4 * nt || work < 256.0 * 256.0 * 256.0);
    if (over_batch) {
      parallel_for(0, batch, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) one(i);
      });
    } else {
      sync_eigen_threads();
      for (int64_t i = 0; i < batch; ++i) one(i);
    }
  });
}

void linear_cpu(DType dtype, int64_t M, int64_t O, int64_t I, const void* x, int64_t ldx, const void* w,
                const void* bias, void* y) {
  if (is_half(dtype)) {  // the bias added in float32
    const auto* b16 = static_cast<const uint16_t*>(bias);
    std::vector<float> b32(bias ? size_t(O) : 0);
    for (size_t j = 0; j < b32.size(); ++j)
      b32[j] = dtype == DType::bfloat16 ? bf16_bits_to_float(b16[j]) : half_bits_to_float(b16[j]);
    const int nt = omp_in_parallel() ? 1 : get_num_threads();
    gemm_half_into(dtype, false, true, M, O, I, static_cast<const uint16_t*>(x), ldx, static_cast<const uint16_t*>(w),
                   I, static_cast<uint16_t*>(y), O, bias ? b32.data() : nullptr, nt);
    return;
  }
  KILN_DISPATCH_FLOATING(dtype, "linear", [&]<class T>() {
    sync_eigen_threads();
    // W (O, I) row-major read transposed as (I, O): trans_b with ldb = I.
    gemm_cpu<T>(false, true, M, O, I, T(1), static_cast<const T*>(x), ldx, static_cast<const T*>(w), I, T(0),
                static_cast<T*>(y), O, static_cast<const T*>(bias));
  });
}

}  // namespace

void register_cpu_linalg() {
  register_kernel(Op::matmul, DeviceType::CPU, &matmul_cpu);
  static constexpr LinearKernels kLinearCpu{.forward = &linear_cpu};
  register_kernel(Op::linear, DeviceType::CPU, &kLinearCpu);
}

}  // namespace kiln
