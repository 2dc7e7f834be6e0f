// kiln's bf16 GEMM on AMX (Intel Sapphire Rapids and later): the same three forms as the
// AVX512_BF16 kernel (ops/cpu/sgemm_bf16.cpp), C float32 or bf16 = op(A) @ op(B) [+ bias]
// with A and B bf16 (or float32 rounded to bf16 as they are packed), every product summed
// in float32. AMX adds eight *tile* registers of 16 rows x 64 bytes and one instruction,
// TDPBF16PS, that multiplies a 16 x 32 bf16 tile of A by a 32 x 16 tile of B into a
// 16 x 16 float32 tile of C: 16,384 multiply-adds, where VDPBF16PS does 32.
//
//   C tile (16 x 16 float32)  +=  A tile (16 rows x 16 bf16 pairs)  @  B tile (16 pair rows x 16 columns)
//
// B's tile holds, in row p, the 16 column pairs (B(2p, j), B(2p+1, j)): the AVX512_BF16
// kernel's packed B layout, read 16 columns of a 32-column panel at a time. A's tile holds
// in row i the pairs (A(i, 2p), A(i, 2p+1)) side by side: a row of A along K, so A is
// packed row-major. The micro-kernel keeps a 32 x 32 block of C in four tiles (tmm0-3),
// loads two A tiles (tmm4-5) and two B tiles (tmm6-7) per 16 pairs of K and issues four
// TDPBF16PS; the loop nest around it is sgemm.cpp's (slices of K, blocks of A and B in
// L2), packing here is plain C++.
//
// The tile operations come twice: `Tiles` (the instructions, used where CPUID reports
// AMX-TILE and AMX-BF16 and Linux grants the tile state) and `TileModel` (the same
// operations on arrays in C++, as the SDM defines them), so the loop nest, the packing
// and the edges run in the test suite on any CPU (KILN_CPU_BF16_GEMM=amx_model). The
// instructions have not run on a CPU with AMX yet: KILN_CPU_BF16_GEMM=amx selects them,
// the default stays the AVX512_BF16 kernel (AMD) or float32 (elsewhere) until they are
// measured (docs/benchmarks.md).
#include "kiln/ops/cpu/sgemm.h"

#include "kiln/ops/cpu/sgemm_pack.h"

#include <cstring>
#include "kiln/core/error.h"
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kiln {

bool sgemm_amx_available() {
  static const bool ok = [] {
#if defined(__x86_64__) && defined(__linux__)
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 22))) return false;  // AMX-TILE, AMX-BF16
    // Linux hands out the 8 KB tile state only to a process that asks for it
    // (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it a tile load faults.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

#if defined(KILN_SGEMM_AVX512) || defined(KILN_SGEMM_AVX2)

namespace {

using namespace sgemm_detail;

constexpr int64_t TP = 16;    // pairs per tile row (64 bytes), and pair rows of a B tile
constexpr int64_t MB = 32;    // C block of the micro-kernel: 2 x 2 tiles of 16 x 16
constexpr int64_t NB = 32;
constexpr int64_t KPS = 256;  // pairs (512 depth) per K slice: an A block row 1 KiB, a B panel 32 KiB
constexpr int64_t MC = 256;   // rows of a packed A block: 256 KiB
constexpr int64_t NC = 512;   // columns of a packed B block: 512 KiB

/// The tile instructions. AT&T operand order: tdpbf16ps %tmm(B), %tmm(A), %tmm(C). Each
/// asm names memory as touched (GCC's own _tile_* macros do not), so the packing stores
/// before a tile load and the reads of C after a tile store stay in order.
struct Tiles {
  static void configure() {
    alignas(64) unsigned char cfg[64] = {};
    cfg[0] = 1;  // palette 1: 8 tiles
    for (int t = 0; t < 8; ++t) {
      const uint16_t colsb = 64;  // bytes per row
      std::memcpy(cfg + 16 + 2 * t, &colsb, 2);
      cfg[48 + t] = 16;  // rows
    }
    asm volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
  }
  static void release() { asm volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int C, int A, int B>
  static void dpbf16ps() {
    asm volatile("tdpbf16ps %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(B), "i"(A), "i"(C));
  }
};

/// The same operations on eight 16 x 16 arrays of 32-bit words, per thread. TDPBF16PS as
/// the SDM writes it: for each row m, pair k and column n, C(m, n) += A's even value times
/// B's even value, then += the odd ones (bf16 products are exact in float32). The SDM adds
/// that the instruction treats denormal inputs as zero and flushes denormal results; the
/// model does not (tests use normal values).
struct TileModel {
  struct Tile {
    uint32_t w[16][16];
  };
  static Tile* tiles() {
    thread_local Tile t[8];
    return t;
  }
  static void configure() {}
  static void release() {}
  template <int T>
  static void zero() {
    std::memset(tiles()[T].w, 0, sizeof(Tile));
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(tiles()[T].w[r], static_cast<const char*>(p) + r * stride, 64);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) std::memcpy(static_cast<char*>(p) + r * stride, tiles()[T].w[r], 64);
  }
  template <int C, int A, int B>
  static void dpbf16ps() {
    auto f = [](uint32_t bits) {
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    };
    Tile &c = tiles()[C], &a = tiles()[A], &b = tiles()[B];
    for (int m = 0; m < 16; ++m)
      for (int k = 0; k < 16; ++k) {
        const float a0 = f(a.w[m][k] << 16), a1 = f(a.w[m][k] & 0xFFFF0000u);
        for (int n = 0; n < 16; ++n) {
          float acc = f(c.w[m][n]);
          acc += a0 * f(b.w[k][n] << 16);
          acc += a1 * f(b.w[k][n] & 0xFFFF0000u);
          std::memcpy(&c.w[m][n], &acc, 4);
        }
      }
  }
};

/// Packs op(A) rows [0, mc) x depth [0, kc) into Ap[i * kpd + p] = (op(A)(i, 2p),
/// op(A)(i, 2p+1)): rows of kpd pairs (kp of them values, then zeros to a whole tile),
/// and zero rows up to a multiple of MB.
template <class E>
void pack_a(bool trans_a, const E* A, int64_t lda, int64_t mc, int64_t kc, int64_t kpd, uint32_t* Ap) {
  const int64_t kp = (kc + 1) / 2, rows = (mc + MB - 1) / MB * MB;
  for (int64_t i = 0; i < rows; ++i) {
    uint32_t* d = Ap + i * kpd;
    if (i >= mc) {
      std::fill(d, d + kpd, 0u);
      continue;
    }
    if (trans_a) {  // A stored (K, M): op(A)(i, k) = A[k * lda + i]
      for (int64_t p = 0; p < kp; ++p) {
        const uint16_t hi = 2 * p + 1 < kc ? bf16_of(A[(2 * p + 1) * lda + i]) : uint16_t(0);
        d[p] = bf16_pair(bf16_of(A[2 * p * lda + i]), hi);
      }
    } else {
      const E* s = A + i * lda;
      for (int64_t p = 0; p < kc / 2; ++p) d[p] = bf16_pair(bf16_of(s[2 * p]), bf16_of(s[2 * p + 1]));
      if (kc % 2) d[kc / 2] = bf16_pair(bf16_of(s[kc - 1]), 0);
    }
    std::fill(d + kp, d + kpd, 0u);
  }
}

/// Packs op(B) depth [0, kc) x columns [0, nc) into NB-column panels of kpd pair rows:
/// Bp[panel][p][j] = (op(B)(2p, j), op(B)(2p+1, j)), zero past kc and nc.
template <class E>
void pack_b(bool trans_b, const RowsOf<E>& B, int64_t kc, int64_t nc, int64_t kpd, uint32_t* Bp) {
  auto at = [&](int64_t k, int64_t j) { return bf16_of(trans_b ? B.row(j)[k] : B.row(k)[j]); };
  for (int64_t j0 = 0; j0 < nc; j0 += NB) {
    uint32_t* d = Bp + j0 * kpd;
    for (int64_t p = 0; p < kpd; ++p)
      for (int64_t j = 0; j < NB; ++j) {
        const int64_t col = j0 + j, k = 2 * p;
        d[p * NB + j] = col < nc && k < kc ? bf16_pair(at(k, col), k + 1 < kc ? at(k + 1, col) : uint16_t(0)) : 0u;
      }
  }
}

/// One 32 x 32 block of C (float32, row stride NB) = the two 16-row A tiles at a0 (rows of
/// kpd pairs) @ the 32-column B panel at b (kpd pair rows), kpd a multiple of 16.
template <class T>
void micro_kernel(int64_t kpd, const uint32_t* a0, const uint32_t* b, float* c) {
  T::template zero<0>();
  T::template zero<1>();
  T::template zero<2>();
  T::template zero<3>();
  const uint32_t* a1 = a0 + 16 * kpd;
  for (int64_t p = 0; p < kpd; p += TP) {
    T::template load<4>(a0 + p, kpd * 4);
    T::template load<5>(a1 + p, kpd * 4);
    T::template load<6>(b + p * NB, NB * 4);
    T::template load<7>(b + p * NB + 16, NB * 4);
    T::template dpbf16ps<0, 4, 6>();
    T::template dpbf16ps<1, 4, 7>();
    T::template dpbf16ps<2, 5, 6>();
    T::template dpbf16ps<3, 5, 7>();
  }
  T::template store<0>(c, NB * 4);
  T::template store<1>(c + 16, NB * 4);
  T::template store<2>(c + 16 * NB, NB * 4);
  T::template store<3>(c + 16 * NB + 16, NB * 4);
}

thread_local Buffer tls_a, tls_b, tls_c;

/// The loop nest on the calling thread, over the tiles T. C is float32 (beta 0 or 1) or
/// bf16 (beta 0; a product deeper than one K slice sums in a float32 buffer first and is
/// rounded once).
template <class T, class EA, class EB, class OutT>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const EA* A, int64_t lda,
                 const RowsOf<EB>& B, float beta, OutT* C, int64_t ldc, const float* bias) {
  const int64_t kslices = (K + 2 * KPS - 1) / (2 * KPS);
  if constexpr (std::is_same_v<OutT, uint16_t>) {
    if (kslices > 1) {
      float* s = tls_c.get(M * N);
      gemm_serial<T, EA, EB, float>(trans_a, trans_b, M, N, K, A, lda, B, 0.f, s, N, bias);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = float_to_bf16_bits(s[i * N + j]);
      return;
    }
  }
  const int64_t kcmax = ((K + kslices - 1) / kslices + 1) / 2 * 2;
  const int64_t kpdmax = (kcmax / 2 + TP - 1) / TP * TP;
  auto* Bp = reinterpret_cast<uint32_t*>(tls_b.get((std::min(N, NC) + NB - 1) / NB * NB * kpdmax));
  auto* Ap = reinterpret_cast<uint32_t*>(tls_a.get((std::min(M, MC) + MB - 1) / MB * MB * kpdmax));
  alignas(64) float block[MB * NB];
  T::configure();
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = std::min(NC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kcmax) {
      const int64_t kc = std::min(kcmax, K - pc), kpd = ((kc + 1) / 2 + TP - 1) / TP * TP;
      pack_b(trans_b, trans_b ? B.from_row(jc).from_col(pc) : B.from_row(pc).from_col(jc), kc, nc, kpd, Bp);
      const bool add_c = pc > 0 || beta != 0.f;  // later slices add to what the first wrote
      const float* bi = pc == 0 && bias ? bias + jc : nullptr;
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        pack_a(trans_a, trans_a ? A + pc * lda + ic : A + ic * lda + pc, lda, mc, kc, kpd, Ap);
        for (int64_t j0 = 0; j0 < nc; j0 += NB)  // one B panel stays in L1 while the A rows pass
          for (int64_t i0 = 0; i0 < mc; i0 += MB) {
            micro_kernel<T>(kpd, Ap + i0 * kpd, Bp + j0 * kpd, block);
            const int64_t mr = std::min(MB, mc - i0), nr = std::min(NB, nc - j0);
            for (int64_t i = 0; i < mr; ++i) {
              OutT* c = C + (ic + i0 + i) * ldc + jc + j0;
              const float* r = block + i * NB;
              for (int64_t j = 0; j < nr; ++j) {
                float v = r[j] + (bi ? bi[j0 + j] : 0.f);
                if constexpr (std::is_same_v<OutT, float>)
                  if (add_c) v += c[j];
                store_c(c + j, v);
              }
            }
          }
      }
    }
  }
  T::release();
}

/// Checks and threads (independent blocks of C, split_c), then the loop nest over the
/// instructions or the model.
template <class EA, class EB, class OutT>
void gemm_amx(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const EA* A, int64_t lda,
              const RowsOf<EB>& B, float beta, OutT* C, int64_t ldc, int threads, const float* bias) {
  KILN_CHECK(model || sgemm_amx_available(), "matmul (cpu bf16 gemm, amx): this CPU has no AMX-BF16, or Linux did ",
             "not grant the tile state (called for M=", M, " N=", N, " K=", K, ")");
  if (bf16_gemm_trivial("matmul (cpu bf16 gemm, amx)", M, N, K, beta, C, ldc, bias)) return;
  const int want = omp_in_parallel() ? 1 : std::max(1, threads);
  split_c(want, M, N, NB, [&](int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
    const EA* a = trans_a ? A + r0 : A + r0 * lda;
    const RowsOf<EB> b = trans_b ? B.from_row(c0) : B.from_col(c0);
    OutT* c = C + r0 * ldc + c0;
    const float* bi = bias ? bias + c0 : nullptr;
    if (model) gemm_serial<TileModel>(trans_a, trans_b, rows, cols, K, a, lda, b, beta, c, ldc, bi);
    else gemm_serial<Tiles>(trans_a, trans_b, rows, cols, K, a, lda, b, beta, c, ldc, bi);
  });
}

}  // namespace

void sgemm_amx(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc, int threads,
               const float* bias) {
  gemm_amx(model, trans_a, trans_b, M, N, K, A, lda, RowsOf<uint16_t>{B, ldb}, beta, C, ldc, threads, bias);
}

void sgemm_amx(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, uint16_t* C, int64_t ldc, int threads,
               const float* bias) {
  gemm_amx(model, trans_a, trans_b, M, N, K, A, lda, RowsOf<uint16_t>{B, ldb}, 0.f, C, ldc, threads, bias);
}

void sgemm_amx_rounding(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                        int64_t lda, const float* B, int64_t ldb, const int64_t* b_rows, float beta, float* C,
                        int64_t ldc, int threads) {
  gemm_amx(model, trans_a, trans_b, M, N, K, A, lda, RowsOf<float>{B, ldb, b_rows}, beta, C, ldc, threads,
           nullptr);
}

void sgemm_amx_rounding(bool model, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                        int64_t lda, const uint16_t* B, int64_t ldb, const int64_t* b_rows, float beta, float* C,
                        int64_t ldc, int threads) {
  gemm_amx(model, trans_a, trans_b, M, N, K, A, lda, RowsOf<uint16_t>{B, ldb, b_rows}, beta, C, ldc, threads,
           nullptr);
}

#else  // no packed kernels in this build (KILN_CPU_BF16_GEMM offers no AMX choice then)

namespace {
[[noreturn]] void not_compiled(int64_t M, int64_t N, int64_t K) {
  KILN_FAIL("matmul (cpu bf16 gemm, amx): the AMX GEMM is not compiled into this build (it needs the packed kernels: "
            "AVX2 or AVX-512, KILN_NATIVE on such a CPU); called for M=", M, " N=", N, " K=", K);
}
}  // namespace

void sgemm_amx(bool, bool, bool, int64_t M, int64_t N, int64_t K, const uint16_t*, int64_t, const uint16_t*, int64_t,
               float, float*, int64_t, int, const float*) {
  not_compiled(M, N, K);
}
void sgemm_amx(bool, bool, bool, int64_t M, int64_t N, int64_t K, const uint16_t*, int64_t, const uint16_t*, int64_t,
               uint16_t*, int64_t, int, const float*) {
  not_compiled(M, N, K);
}
void sgemm_amx_rounding(bool, bool, bool, int64_t M, int64_t N, int64_t K, const float*, int64_t, const float*,
                        int64_t, const int64_t*, float, float*, int64_t, int) {
  not_compiled(M, N, K);
}
void sgemm_amx_rounding(bool, bool, bool, int64_t M, int64_t N, int64_t K, const float*, int64_t, const uint16_t*,
                        int64_t, const int64_t*, float, float*, int64_t, int) {
  not_compiled(M, N, K);
}

#endif

}  // namespace kiln
