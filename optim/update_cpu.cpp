// CPU fused optimizer kernels: OpenMP loops over contiguous param/grad/state arrays that
// call the shared per-element functors of optim/update_math.h, and the kernel table (which
// also takes the CUDA kernels of optim/cuda/update.cu in a CUDA build).
#include <array>
#include <vector>
#include "kiln/core/parallel.h"
#include "kiln/optim/update_kernels.h"

namespace kiln::optim {

namespace {

constexpr int64_t kGrain = 32768;

// The loops below take __restrict__ pointers and compile-time flags so they vectorize; the
// per-element math is the shared functor. The Adam/RMSprop loops (sqrt) vectorize only
// when the library is built with -fno-math-errno (GCC keeps scalar sqrt calls for errno).

template <class T, bool kMomentum>
void sgd_range(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, int64_t b, int64_t e,
               const SgdCoeffs<T> c) {
  if constexpr (kMomentum) {
    for (int64_t i = b; i < e; ++i) sgd_update(p[i], g[i], buf[i], c);
  } else {
    for (int64_t i = b; i < e; ++i) {
      T dummy = T(0);
      sgd_update(p[i], g[i], dummy, c);
    }
  }
}

template <class T>
void sgd_cpu_t(T* p, const T* g, T* buf, int64_t n, const SgdScalars& s) {
  const SgdCoeffs<T> c(s);
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if (c.momentum != T(0)) sgd_range<T, true>(p, g, buf, b, e, c);
    else sgd_range<T, false>(p, g, buf, b, e, c);
  });
}

void sgd_cpu(DType dt, void* p, const void* g, void* buf, int64_t n, const SgdScalars& s) {
  KILN_DISPATCH_FLOATING(dt, "SGD", [&]<class T>() {
    sgd_cpu_t<T>(static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(buf), n, s);
  });
}

template <class T, bool kAmsgrad>
void adam_range(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                T* __restrict__ vmax, int64_t b, int64_t e, const AdamCoeffs<T> c) {
  if constexpr (kAmsgrad) {
    for (int64_t i = b; i < e; ++i) adam_update(p[i], g[i], m[i], v[i], vmax[i], c);
  } else {
    for (int64_t i = b; i < e; ++i) {
      T dummy = T(0);
      adam_update(p[i], g[i], m[i], v[i], dummy, c);
    }
  }
}

template <class T>
void adam_cpu_t(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamScalars& s) {
  const AdamCoeffs<T> c(s);
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if (c.amsgrad) adam_range<T, true>(p, g, m, v, vmax, b, e, c);
    else adam_range<T, false>(p, g, m, v, vmax, b, e, c);
  });
}

void adam_cpu(DType dt, void* p, const void* g, void* m, void* v, void* vmax, int64_t n, const AdamScalars& s) {
  KILN_CHECK(!s.amsgrad || vmax != nullptr, "Adam: amsgrad needs a max_exp_avg_sq buffer");
  KILN_DISPATCH_FLOATING(dt, "Adam", [&]<class T>() {
    adam_cpu_t<T>(static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(m), static_cast<T*>(v),
                  static_cast<T*>(vmax), n, s);
  });
}

template <class T, bool kCentered, bool kMomentum>
void rmsprop_range(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ sq, T* __restrict__ ga,
                   T* __restrict__ buf, int64_t b, int64_t e, const RmspropCoeffs<T> c) {
  for (int64_t i = b; i < e; ++i) {
    T dga = T(0), dbuf = T(0);
    rmsprop_update(p[i], g[i], sq[i], kCentered ? ga[i] : dga, kMomentum ? buf[i] : dbuf, c);
  }
}

template <class T>
void rmsprop_cpu_t(T* p, const T* g, T* sq, T* ga, T* buf, int64_t n, const RmspropScalars& s) {
  const RmspropCoeffs<T> c(s);
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if (c.centered) {
      if (c.momentum > T(0)) rmsprop_range<T, true, true>(p, g, sq, ga, buf, b, e, c);
      else rmsprop_range<T, true, false>(p, g, sq, ga, buf, b, e, c);
    } else {
      if (c.momentum > T(0)) rmsprop_range<T, false, true>(p, g, sq, ga, buf, b, e, c);
      else rmsprop_range<T, false, false>(p, g, sq, ga, buf, b, e, c);
    }
  });
}

void rmsprop_cpu(DType dt, void* p, const void* g, void* sq, void* ga, void* buf, int64_t n,
                 const RmspropScalars& s) {
  KILN_CHECK(!s.centered || ga != nullptr, "RMSprop: centered needs a grad_avg buffer");
  KILN_CHECK(s.momentum <= 0 || buf != nullptr, "RMSprop: momentum needs a momentum_buffer");
  KILN_DISPATCH_FLOATING(dt, "RMSprop", [&]<class T>() {
    rmsprop_cpu_t<T>(static_cast<T*>(p), static_cast<const T*>(g), static_cast<T*>(sq), static_cast<T*>(ga),
                     static_cast<T*>(buf), n, s);
  });
}

template <class T>
bool unscale_range(T* __restrict__ g, int64_t lo, int64_t hi, T inv) {
  unsigned bad = 0;
  for (int64_t i = lo; i < hi; ++i) bad |= unsigned(unscale_check(g[i], inv));
  return bad != 0;
}

template <class T>
bool unscale_cpu_t(T* g, int64_t n, T inv) {
  // fixed-size blocks so the result never depends on the thread count
  constexpr int64_t kBlock = 16384;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<uint8_t> bad(size_t(nb), 0);
  parallel_for(0, nb, 2, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t lo = k * kBlock, hi = lo + kBlock < n ? lo + kBlock : n;
      bad[size_t(k)] = unscale_range(g, lo, hi, inv);
    }
  });
  for (auto b : bad)
    if (b) return true;
  return false;
}

bool unscale_cpu(DType dt, void* g, int64_t n, double inv_scale) {
  return KILN_DISPATCH_FLOATING(dt, "GradScaler.unscale_", [&]<class T>() -> bool {
    return unscale_cpu_t<T>(static_cast<T*>(g), n, T(inv_scale));
  });
}

using Table = std::array<std::array<void*, kNumDeviceTypes>, size_t(FusedUpdate::kCount)>;

Table& table() {
  static Table t = [] {
    Table x{};
    x[size_t(FusedUpdate::sgd)][size_t(DeviceType::CPU)] = reinterpret_cast<void*>(&sgd_cpu);
    x[size_t(FusedUpdate::adam)][size_t(DeviceType::CPU)] = reinterpret_cast<void*>(&adam_cpu);
    x[size_t(FusedUpdate::rmsprop)][size_t(DeviceType::CPU)] = reinterpret_cast<void*>(&rmsprop_cpu);
    x[size_t(FusedUpdate::unscale)][size_t(DeviceType::CPU)] = reinterpret_cast<void*>(&unscale_cpu);
#if defined(KILN_WITH_CUDA)
    for (size_t k = 0; k < size_t(FusedUpdate::kCount); ++k)
      x[k][size_t(DeviceType::CUDA)] = cuda_optim_kernel(FusedUpdate(k));
#endif
    return x;
  }();
  return t;
}

}  // namespace

void register_fused_update(FusedUpdate kind, DeviceType dev, void* fn) {
  table()[size_t(kind)][size_t(dev)] = fn;
}

void* fused_update_kernel(FusedUpdate kind, Device dev) { return table()[size_t(kind)][size_t(dev.type)]; }

}  // namespace kiln::optim
