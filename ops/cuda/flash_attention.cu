// The fused attention kernels of ops/cuda/flash_attention.h on the GPU: the tile bodies run
// in cuda::DeviceBlock with Tensor Core tile GEMMs (WMMA, float32 accumulation): 16x16x16 on
// float16 / bfloat16 inputs, 16x16x8 on float32 inputs rounded to TF32 (only when
// set_float32_matmul_precision allows TF32). ops/cuda/nn.cu calls try_forward/try_backward
// and takes its composed cuBLAS path when they decline.
#include <mma.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>
#include <type_traits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/runtime.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/cuda/block_reduce.cuh"
#include "kiln/ops/cuda/flash_attention.h"
#include "kiln/ops/linalg.h"

namespace kiln::cuda::flash {
namespace {

namespace wmma = nvcuda::wmma;

/// The fragments of input type T: the fragment element type, the type the tiles are read
/// as, and K per step. float32 is read as float into TF32 fragments (16x16x8) and each
/// element rounded to TF32 after loading, what cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 does.
template <class T> struct WmmaType;
template <> struct WmmaType<Half> {
  using frag = __half;
  using mem = __half;
  static constexpr int kK = 16;
};
template <> struct WmmaType<BFloat16> {
  using frag = __nv_bfloat16;
  using mem = __nv_bfloat16;
  static constexpr int kK = 16;
};
template <> struct WmmaType<float> {
  using frag = wmma::precision::tf32;
  using mem = float;
  static constexpr int kK = 8;
};

/// ScalarMma's contract (flash_attention.h) on Tensor Cores: warp w of the block computes
/// the 16 x 16 output fragments w, w + 4, ... of C. M, N, K are multiples of 16, leading
/// dimensions multiples of 8 (16-bit) or 4 (float), fragment addresses 32-byte aligned.
struct WmmaMma {
  template <bool TA, bool TB, class T, class Block>
  __device__ static void run(const Block&, const T* a, int lda, const T* b, int ldb, float* c, int ldc, int M, int N,
                             int K, bool accumulate) {
    using W = WmmaType<T>;
    constexpr int kK = W::kK;
    using LA = std::conditional_t<TA, wmma::col_major, wmma::row_major>;
    using LB = std::conditional_t<TB, wmma::col_major, wmma::row_major>;
    const auto* aw = reinterpret_cast<const typename W::mem*>(a);
    const auto* bw = reinterpret_cast<const typename W::mem*>(b);
    const int warp = int(threadIdx.x) / 32, warps = int(blockDim.x) / 32, fn = N / 16;
    for (int f = warp; f < (M / 16) * fn; f += warps) {
      const int m0 = (f / fn) * 16, n0 = (f % fn) * 16;
      wmma::fragment<wmma::accumulator, 16, 16, kK, float> acc;
      if (accumulate)
        wmma::load_matrix_sync(acc, c + m0 * ldc + n0, unsigned(ldc), wmma::mem_row_major);
      else
        wmma::fill_fragment(acc, 0.0f);
      for (int k0 = 0; k0 < K; k0 += kK) {
        wmma::fragment<wmma::matrix_a, 16, 16, kK, typename W::frag, LA> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, kK, typename W::frag, LB> fb;
        wmma::load_matrix_sync(fa, TA ? aw + k0 * lda + m0 : aw + m0 * lda + k0, unsigned(lda));
        wmma::load_matrix_sync(fb, TB ? bw + n0 * ldb + k0 : bw + k0 * ldb + n0, unsigned(ldb));
        if constexpr (std::is_same_v<T, float>) {
          for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
          for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
        }
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(c + m0 * ldc + n0, acc, unsigned(ldc), wmma::mem_row_major);
    }
  }
};

template <class T>
__global__ void __launch_bounds__(kThreads, 4) forward_kernel(Params<T> p) {
  extern __shared__ __align__(128) unsigned char smem[];
  forward_tile<T, WmmaMma>(cuda::DeviceBlock{}, smem, p, int64_t(blockIdx.x), int64_t(blockIdx.y));
}

template <class T>
__global__ void __launch_bounds__(kThreads, 4) backward_dq_kernel(Params<T> p) {
  extern __shared__ __align__(128) unsigned char smem[];
  backward_dq_tile<T, WmmaMma>(cuda::DeviceBlock{}, smem, p, int64_t(blockIdx.x), int64_t(blockIdx.y));
}

template <class T>
__global__ void __launch_bounds__(kThreads, 4) backward_dkv_kernel(Params<T> p) {
  extern __shared__ __align__(128) unsigned char smem[];
  backward_dkv_tile<T, WmmaMma>(cuda::DeviceBlock{}, smem, p, int64_t(blockIdx.x), int64_t(blockIdx.y));
}

/// KILN_CUDA_FLASH_ATTENTION=0 turns the fused kernels off (the composed cuBLAS path runs).
bool enabled() {
  static const bool on = [] {
    const char* e = std::getenv("KILN_CUDA_FLASH_ATTENTION");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

/// Launches `kernel` on a (B, tiles) grid with `bytes` of dynamic shared memory, raising the
/// kernel's limit first (above 48 KB it must be asked for) on each device once per size.
template <class K, class T>
void launch(K kernel, const Params<T>& p, int64_t tiles, size_t bytes) {
  static std::mutex mu;
  static std::set<std::pair<int, size_t>> raised;  // (device, bytes) this kernel may use
  int dev = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&dev));
  {
    std::lock_guard<std::mutex> lock(mu);
    if (raised.insert({dev, bytes}).second)
      KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  }
  kernel<<<dim3(unsigned(p.B), unsigned(tiles)), kThreads, bytes, cuda::current_raw_stream()>>>(p);
  KILN_CUDA_CHECK_LAUNCH();
}

/// Whether the fused kernels take this call: 16-bit (or float32 with TF32 allowed), a
/// supported head dim, a grid CUDA can launch and the shared memory of the largest of the
/// three kernels on this device.
bool usable(DType dt, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev) {
  const bool type_ok = dt == DType::float16 || dt == DType::bfloat16 ||
                       (dt == DType::float32 && float32_matmul_allows_tf32());
  if (!enabled() || !type_ok || !supported(E, Ev)) return false;
  const size_t elem = dtype_size(dt);
  const int tile = tile_rows(E, Ev, elem);
  const int64_t tiles = (std::max(Tq, Tk) + tile - 1) / tile;
  if (B > 0x7fffffff || tiles > 65535) return false;
  const int optin = cuda::max_shared_memory_optin(-1);
  for (int kind = 0; kind < 3; ++kind)
    if (SmemLayout(kind, tile, int(E), int(Ev), elem).bytes > size_t(optin)) return false;
  return true;
}

template <class F>
void dispatch_flash(DType dt, F&& f) {
  if (dt == DType::bfloat16) f.template operator()<BFloat16>();
  else if (dt == DType::float16) f.template operator()<Half>();
  else f.template operator()<float>();
}

}  // namespace

bool try_forward(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v, AttnLayout lv,
                 void* out, AttnLayout lout, float* lse, int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev,
                 double scale, bool causal) {
  if (!usable(dt, B, Tq, Tk, E, Ev)) return false;
  if (B == 0 || Tq == 0) return true;
  dispatch_flash(dt, [&]<class T>() {
    Params<T> p;
    p.q = static_cast<const T*>(q), p.k = static_cast<const T*>(k), p.v = static_cast<const T*>(v);
    p.lq = lq, p.lk = lk, p.lv = lv;
    p.o = static_cast<T*>(out), p.lo = lout, p.lse = lse;
    p.B = B, p.Tq = Tq, p.Tk = Tk, p.E = int(E), p.Ev = int(Ev), p.tile = tile_rows(E, Ev, sizeof(T));
    p.scale = float(scale), p.causal = causal;
    launch(forward_kernel<T>, p, (Tq + p.tile - 1) / p.tile, SmemLayout(0, p.tile, p.E, p.Ev, sizeof(T)).bytes);
  });
  return true;
}

bool try_backward(DType dt, const void* q, AttnLayout lq, const void* k, AttnLayout lk, const void* v, AttnLayout lv,
                  const void* out, AttnLayout lout, const float* lse, const void* dout, AttnLayout ldout, void* dq,
                  AttnLayout ldq, void* dk, AttnLayout ldk, void* dv, AttnLayout ldv, int64_t B, int64_t Tq,
                  int64_t Tk, int64_t E, int64_t Ev, double scale, bool causal) {
  if (!usable(dt, B, Tq, Tk, E, Ev)) return false;
  if (B == 0 || (!dq && !dk && !dv)) return true;
  const int tile = tile_rows(E, Ev, dtype_size(dt));
  if (Tq == 0 || Tk == 0) {  // nothing attends: every gradient is zero
    const int64_t sz = int64_t(dtype_size(dt));
    cudaStream_t st = cuda::current_raw_stream();
    auto zero_rows = [&](void* x, AttnLayout l, int64_t T, int64_t W) {
      if (!x || T == 0) return;
      for (int64_t b = 0; b < B; ++b)
        KILN_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(x) + l.offset(b) * sz, size_t(l.st * sz), 0,
                                          size_t(W * sz), size_t(T), st));
    };
    zero_rows(dq, ldq, Tq, E);
    zero_rows(dk, ldk, Tk, E);
    zero_rows(dv, ldv, Tk, Ev);
    return true;
  }
  Tensor dsum = Tensor::empty({B * Tq}, DType::float32, Device::cuda(cuda::resolve_device(-1)));
  dispatch_flash(dt, [&]<class T>() {
    Params<T> p;
    p.q = static_cast<const T*>(q), p.k = static_cast<const T*>(k), p.v = static_cast<const T*>(v);
    p.out = static_cast<const T*>(out), p.dout = static_cast<const T*>(dout);
    p.lq = lq, p.lk = lk, p.lv = lv, p.lout = lout, p.ldout = ldout;
    p.dq = static_cast<T*>(dq), p.dk = static_cast<T*>(dk), p.dv = static_cast<T*>(dv);
    p.ldq = ldq, p.ldk = ldk, p.ldv = ldv;
    p.lse = const_cast<float*>(lse), p.dsum = static_cast<float*>(dsum.raw_data());
    p.B = B, p.Tq = Tq, p.Tk = Tk, p.E = int(E), p.Ev = int(Ev), p.tile = tile;
    p.scale = float(scale), p.causal = causal;
    launch(backward_dq_kernel<T>, p, (Tq + tile - 1) / tile, SmemLayout(1, tile, p.E, p.Ev, sizeof(T)).bytes);
    if (dk || dv)
      launch(backward_dkv_kernel<T>, p, (Tk + tile - 1) / tile, SmemLayout(2, tile, p.E, p.Ev, sizeof(T)).bytes);
  });
  return true;
}

}  // namespace kiln::cuda::flash
