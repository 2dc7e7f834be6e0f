// CPU kernels of the shape op family (cat/stack copies, index_select and its index_add
// backward, gather and its scatter-add backward) and their registration in the dispatch
// table. Copies move elements by size, so every dtype shares one kernel.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>
#include "kiln/core/parallel.h"
#include "kiln/core/strided.h"
#include "kiln/ops/kernels/shape.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

namespace {

// Calls f.template operator()<U>() with an unsigned type U of elem_size bytes.
template <class F>
void dispatch_bytes(size_t elem_size, const F& f) {
  switch (elem_size) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    case 8: f.template operator()<uint64_t>(); return;
    default: KILN_FAIL("shape kernels: unsupported element size ", elem_size);
  }
}

// ---------------------------------------------------------------- cat / stack

void cat_forward(size_t es, const void* const* ins, const int64_t* inner, int64_t n_in, void* out, int64_t outer) {
  std::vector<int64_t> col(size_t(n_in) + 1, 0);  // element offset of each input within an output row
  for (int64_t i = 0; i < n_in; ++i) col[size_t(i) + 1] = col[size_t(i)] + inner[i];
  const int64_t total = col[size_t(n_in)];
  const int64_t avg = std::max<int64_t>(1, total / std::max<int64_t>(n_in, 1));
  char* o = static_cast<char*>(out);
  parallel_for(0, outer * n_in, std::max<int64_t>(1, 65536 / std::max<int64_t>(avg * int64_t(es), 1)),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   const int64_t r = t / n_in, i = t % n_in;
                   const size_t bytes = size_t(inner[i]) * es;
                   if (bytes == 0) continue;
                   std::memcpy(o + size_t(r * total + col[size_t(i)]) * es,
                               static_cast<const char*>(ins[i]) + size_t(r) * bytes, bytes);
                 }
               });
}

// ---------------------------------------------------------------- index_select

void index_select_forward(size_t es, const void* x, const int64_t* idx, void* out, int64_t outer, int64_t S,
                          int64_t n, int64_t inner) {
  dispatch_bytes(es, [&]<class U>() {
    const U* xp = static_cast<const U*>(x);
    U* op = static_cast<U*>(out);
    parallel_for(0, outer * n, std::max<int64_t>(1, 32768 / std::max<int64_t>(inner, 1)), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / n, k = t % n;
        const U* src = xp + (o * S + idx[k]) * inner;
        U* dst = op + t * inner;
        for (int64_t c = 0; c < inner; ++c) dst[c] = src[c];
      }
    });
  });
}

template <class T>
void index_add_t(const T* g, const int64_t* idx, T* dx, int64_t outer, int64_t S, int64_t n, int64_t inner) {
  // Tasks: (outer row, block of inner columns); each walks k in order: deterministic.
  constexpr int64_t kBlock = 256;
  const int64_t nb = (inner + kBlock - 1) / kBlock;
  parallel_for(0, outer * nb, std::max<int64_t>(1, 16384 / std::max<int64_t>(n * std::min(inner, kBlock), 1)),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   const int64_t o = t / nb, c0 = (t % nb) * kBlock, m = std::min(kBlock, inner - c0);
                   for (int64_t k = 0; k < n; ++k) {
                     const T* src = g + (o * n + k) * inner + c0;
                     T* dst = dx + (o * S + idx[k]) * inner + c0;
                     for (int64_t c = 0; c < m; ++c) dst[c] += src[c];
                   }
                 }
               });
}

void index_select_backward(DType dt, const void* g, const int64_t* idx, void* dx, int64_t outer, int64_t S,
                           int64_t n, int64_t inner) {
  KILN_DISPATCH_NUMERIC(dt, "index_add", [&]<class T>() {
    index_add_t<T>(static_cast<const T*>(g), idx, static_cast<T*>(dx), outer, S, n, inner);
  });
}

// ---------------------------------------------------------------- gather / scatter-add

// Strides of the three operands over the index shape with `dim` moved innermost; the
// indexed operand (slot 2 for gather's x, slot 0 for scatter's dx) gets stride 0 along
// dim (its offset there comes from the index).
struct GatherLayout {
  std::vector<int64_t> shape;
  std::array<std::vector<int64_t>, 3> strides;
};

GatherLayout gather_layout(int64_t ndim, const int64_t* shape, const int64_t* s0, const int64_t* s1,
                           const int64_t* s2, int64_t dim, int indexed_slot) {
  GatherLayout L;
  const int64_t* src[3] = {s0, s1, s2};
  auto push = [&](int64_t d) {
    L.shape.push_back(shape[d]);
    for (int k = 0; k < 3; ++k) L.strides[k].push_back(d == dim && k == indexed_slot ? 0 : src[k][d]);
  };
  for (int64_t d = 0; d < ndim; ++d)
    if (d != dim) push(d);
  push(dim);
  return L;
}

void gather_forward(size_t es, const void* x, const int64_t* idx, void* out, int64_t ndim, const int64_t* shape,
                    const int64_t* xs, const int64_t* is, const int64_t* os, int64_t dim) {
  GatherLayout L = gather_layout(ndim, shape, os, is, xs, dim, 2);
  const int64_t sdim = xs[dim];
  dispatch_bytes(es, [&]<class U>() {
    const U* xp = static_cast<const U*>(x);
    U* op = static_cast<U*>(out);
    for_each_row<3>(L.shape, L.strides,
                    [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                      U* o = op + off[0];
                      const int64_t* ip = idx + off[1];
                      const U* xr = xp + off[2];
                      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = xr[i * st[2] + ip[i * st[1]] * sdim];
                    });
  });
}

template <class T>
void scatter_add_t(const T* g, const int64_t* idx, T* dx, const GatherLayout& L, int64_t sdim) {
  // Rows run along dim (innermost, never merged because dx's stride there is 0), so
  // every colliding update lands in one row, done by one thread in order.
  for_each_row<3>(L.shape, L.strides,
                  [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                    T* d = dx + off[0];
                    const int64_t* ip = idx + off[1];
                    const T* gr = g + off[2];
                    for (int64_t i = 0; i < n; ++i) d[i * st[0] + ip[i * st[1]] * sdim] += gr[i * st[2]];
                  });
}

void gather_backward(DType dt, const void* g, const int64_t* idx, void* dx, int64_t ndim, const int64_t* shape,
                     const int64_t* gs, const int64_t* is, const int64_t* dxs, int64_t dim) {
  GatherLayout L = gather_layout(ndim, shape, dxs, is, gs, dim, 0);
  const int64_t sdim = dxs[dim];
  KILN_DISPATCH_NUMERIC(dt, "scatter_add", [&]<class T>() {
    scatter_add_t<T>(static_cast<const T*>(g), idx, static_cast<T*>(dx), L, sdim);
  });
}

void scatter_copy(size_t es, const void* src, const int64_t* idx, void* dx, int64_t ndim, const int64_t* shape,
                  const int64_t* ss, const int64_t* is, const int64_t* dxs, int64_t dim) {
  GatherLayout L = gather_layout(ndim, shape, dxs, is, ss, dim, 0);
  const int64_t sdim = dxs[dim];
  dispatch_bytes(es, [&]<class U>() {  // rows along dim, one thread each, in order: the last duplicate wins
    const U* sp = static_cast<const U*>(src);
    U* dp = static_cast<U*>(dx);
    for_each_row<3>(L.shape, L.strides,
                    [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                      U* d = dp + off[0];
                      const int64_t* ip = idx + off[1];
                      const U* sr = sp + off[2];
                      for (int64_t i = 0; i < n; ++i) d[i * st[0] + ip[i * st[1]] * sdim] = sr[i * st[2]];
                    });
  });
}

const CatKernels kCatCpu{&cat_forward};
const IndexSelectKernels kIndexSelectCpu{&index_select_forward, &index_select_backward};
const GatherKernels kGatherCpu{&gather_forward, &gather_backward, &scatter_copy};

}  // namespace

void register_cpu_shape() {
  register_kernel(Op::cat, DeviceType::CPU, &kCatCpu);
  register_kernel(Op::stack, DeviceType::CPU, &kCatCpu);
  register_kernel(Op::index_select, DeviceType::CPU, &kIndexSelectCpu);
  register_kernel(Op::gather, DeviceType::CPU, &kGatherCpu);
}

}  // namespace kiln
