// The bodies of kiln's generic GPU elementwise loops, as __host__ __device__ templates:
// out = f(in...) over a strided, broadcast index space (OffsetCalculator), or over
// contiguous arrays with one 16-byte load/store per operand per step where aligned. 16-bit
// floats are computed in float. The __global__ wrappers (core/cuda/loops.cuh) call these
// with the real grid; the CPU test (tests/cuda/test_cuda_index_math.cpp) calls the same
// code over an emulated grid. No CUDA header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/half.h"

namespace kiln::cuda {

/// The type an element is computed in: float for the 16-bit floats, else itself.
template <class T> struct ComputeType { using type = T; };
template <> struct ComputeType<Half> { using type = float; };
template <> struct ComputeType<BFloat16> { using type = float; };
template <class T> using compute_t = typename ComputeType<T>::type;

/// VEC elements loaded or stored as one aligned access (16 bytes for the loops here).
template <class T, int VEC>
struct alignas(sizeof(T) * VEC) VecOf {
  T v[VEC];
};

/// Plain stores, used by the kernels. The CPU test substitutes a store that also counts
/// how often each element is written.
struct PlainStore {
  template <class T>
  KILN_HD_INLINE static void store(T* p, const T& v) { *p = v; }
  template <class T, int VEC>
  KILN_HD_INLINE static void store_vec(T* p, const VecOf<T, VEC>& v) { *reinterpret_cast<VecOf<T, VEC>*>(p) = v; }
};

/// Operand pointers of a loop (operand 0 is the output), passed to kernels by value.
template <int N>
struct LoopPtrs {
  void* p[N];
};

/// One loaded vector per input type: VecPack<V, float, uint8_t> holds a VecOf<float, V>
/// and a VecOf<uint8_t, V>; vget<I>(pack) is the I-th.
template <int V, class... Ts> struct VecPack {};
template <int V, class T, class... Ts>
struct VecPack<V, T, Ts...> {
  VecOf<T, V> head;
  VecPack<V, Ts...> tail;
};
template <size_t I, int V, class T, class... Ts>
KILN_HD_INLINE const auto& vget(const VecPack<V, T, Ts...>& pk) {
  if constexpr (I == 0) return pk.head;
  else return vget<I - 1>(pk.tail);
}
template <size_t I, int V, class T, class... Ts>
KILN_HD_INLINE auto& vget(VecPack<V, T, Ts...>& pk) {
  if constexpr (I == 0) return pk.head;
  else return vget<I - 1>(pk.tail);
}

template <class... Ts>
constexpr size_t max_size_of() {
  size_t m = 1;
  ((m = sizeof(Ts) > m ? sizeof(Ts) : m), ...);
  return m;
}

/// out = f(in...) elementwise. TO is the output element type, TI... the input element
/// types; f takes compute_t<TI>... and returns something convertible to TO.
template <class TO, class... TI>
struct ElementwiseLoop {
  using out_type = TO;
  static constexpr int N = 1 + int(sizeof...(TI));
  /// Elements per 16-byte access of the widest operand.
  static constexpr int kVec = vec_width(max_size_of<TO, TI...>());

  /// The strided loop: every operand has its own strides (0 on broadcast dims).
  template <class Store = PlainStore, class IdxT, class F>
  KILN_HD static void strided(const OffsetCalculator<N, IdxT>& calc, IdxT n, const LoopPtrs<N>& p, const F& f,
                              const GridPos& g) {
    const GridStride<IdxT> gs(g);
    for (IdxT i = gs.first; i < n; i += gs.step) apply<Store>(p, calc.get(i), f, std::index_sequence_for<TI...>{});
  }

  /// The contiguous loop. With `aligned` (every pointer aligned to kVec of its elements; one
  /// answer for the whole launch) each step handles kVec consecutive elements with one
  /// 16-byte load per input and one store, and the last n % kVec go element by element;
  /// without, all go element by element (a view that starts inside a vector). One body, so
  /// the unary ops (always contiguous) need one kernel per op and dtype, not three.
  template <class Store = PlainStore, class F>
  KILN_HD static void contiguous(int64_t n, bool aligned, const LoopPtrs<N>& p, const F& f, const GridPos& g) {
    const GridStride<int64_t> gs(g);
    int64_t start = 0;
    if (aligned) {
      const int64_t chunks = n / kVec;
      for (int64_t c = gs.first; c < chunks; c += gs.step)
        vec_chunk<Store>(p, c * kVec, f, std::index_sequence_for<TI...>{});
      start = chunks * kVec;
    }
    for (int64_t i = start + gs.first; i < n; i += gs.step) apply<Store>(p, at(i), f, std::index_sequence_for<TI...>{});
  }

  /// Element i of every operand (all contiguous).
  KILN_HD_INLINE static Offsets<N> at(int64_t i) {
    Offsets<N> o;
    for (int k = 0; k < N; ++k) o.v[k] = i;
    return o;
  }

  template <class Store, class F, size_t... Is>
  KILN_HD_INLINE static void apply(const LoopPtrs<N>& p, const Offsets<N>& o, const F& f, std::index_sequence<Is...>) {
    Store::store(static_cast<TO*>(p.p[0]) + o.v[0],
                 static_cast<TO>(f(static_cast<compute_t<TI>>(static_cast<const TI*>(p.p[Is + 1])[o.v[Is + 1]])...)));
  }

  template <class Store, class F, size_t... Is>
  KILN_HD_INLINE static void vec_chunk(const LoopPtrs<N>& p, int64_t base, const F& f, std::index_sequence<Is...>) {
    VecPack<kVec, TI...> in;
    ((vget<Is>(in) = *reinterpret_cast<const VecOf<TI, kVec>*>(static_cast<const TI*>(p.p[Is + 1]) + base)), ...);
    VecOf<TO, kVec> out;
    KILN_UNROLL
    for (int j = 0; j < kVec; ++j) out.v[j] = static_cast<TO>(f(static_cast<compute_t<TI>>(vget<Is>(in).v[j])...));
    Store::store_vec(static_cast<TO*>(p.p[0]) + base, out);
  }
};

}  // namespace kiln::cuda
