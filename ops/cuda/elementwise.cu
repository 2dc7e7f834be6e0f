// CUDA kernels of the elementwise family: unary ops (forward and backward) and where /
// masked_fill, all through the one generic loop of core/cuda/loops.cuh driven by the
// functors of ops/elementwise_functors.h (the CPU loops run the same), the op switches
// generated from ops/elementwise_ops.def; the broadcasting binary ops are in
// elementwise_binary.cu. Same kernel signatures as ops/cpu/elementwise.cpp, so
// ops/elementwise.cpp dispatches to either unchanged.
#include "kiln/core/cuda/loops.cuh"
#include "kiln/ops/kernels/elementwise.h"
#include "kiln/ops/cuda/dtype_dispatch.h"
#include "kiln/ops/elementwise_functors.h"
#include "kiln/ops/cuda/index_math.h"
#include "kiln/ops/cuda/register.h"

namespace kiln {

// Defined in ops/cuda/elementwise_binary.cu.
void binary_cuda(Op op, DType dt, const EwArgs& args);

namespace {
using namespace kiln::cuda;
using namespace kiln::elementwise;

// ---- launchers ----

// out[i] = f(x[i]) over n contiguous elements of T (computed in compute_t<T>).
template <class T, class F>
void unary_loop(const UnaryArgs& a, const F& f) {
  void* ptrs[2] = {a.out, const_cast<void*>(a.x)};
  launch_contiguous<T, T>(a.n, ptrs, f);
}

// out[i] = g[i] * d(s[i]) (elementwise::unary_grad), s the saved input or output (the row's `reads`).
template <class T, class D>
void unary_grad_loop(Op op, const UnaryArgs& a, const D& d) {
  KILN_CHECK(a.s != nullptr && a.g != nullptr, op_name(op), ": the CUDA backward kernel needs the gradient and ",
             "the saved input or output");
  void* ptrs[3] = {a.out, const_cast<void*>(a.g), const_cast<void*>(a.s)};
  launch_contiguous<T, T, T>(a.n, ptrs, GradF<compute_t<T>, D>{d});
}

// The switch over the unary rows of ops/elementwise_ops.def, forward or backward.
template <class T>
void unary_typed(Op op, const UnaryArgs& a) {
  using C = compute_t<T>;
  const C p0 = C(a.p0), p1 = C(a.p1);
  switch (op) {
#define KILN_UNARY(name, Fn, reads, api)                                                     \
  case Op::name:                                                                             \
    if (a.backward) return unary_grad_loop<T>(op, a, make_functor<Fn##D<C>>(p0, p1));       \
    return unary_loop<T>(a, make_functor<Fn##F<C>>(p0, p1));
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
    default: break;
  }
  KILN_FAIL(op_name(op), ": no CUDA unary ", a.backward ? "backward" : "forward", " kernel");
}

// Integer inputs: the forward of the rows whose api is `any`.
#define KILN_UNARY_INT_float(name, Fn)
#define KILN_UNARY_INT_own(name, Fn)
#define KILN_UNARY_INT_any(name, Fn) \
  case Op::name: return unary_loop<T>(a, Fn##F<T>{});
template <class T>
void unary_int(Op op, const UnaryArgs& a) {
  switch (op) {
#define KILN_UNARY(name, Fn, reads, api) KILN_UNARY_INT_##api(name, Fn)
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
    default: KILN_FAIL(op_name(op), ": not supported for integer tensors");
  }
}

void unary_cuda(Op op, DType dt, const UnaryArgs& a) {
  if (a.n == 0) return;
  if (!is_floating(dt)) {
    KILN_CHECK(!a.backward, op_name(op), ": no backward for integer tensors");
    dispatch_int(dt, op_name(op), [&]<class T>() { unary_int<T>(op, a); });
    return;
  }
  dispatch_float(dt, op_name(op), [&]<class T>() { unary_typed<T>(op, a); });
}

void where_cuda(DType dt, const EwArgs& args) {
  const LoopLayout<4> L = layout_from_args<4>(args);
  dispatch_all(dt, "where", [&]<class T>() { launch_elementwise<T, uint8_t, T, T>(L, args.ptr, WhereF{}); });
}

}  // namespace

void register_cuda_elementwise() {
#define KILN_UNARY(name, ...) register_kernel(Op::name, DeviceType::CUDA, &unary_cuda);
#define KILN_BINARY(name, ...) register_kernel(Op::name, DeviceType::CUDA, &binary_cuda);
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
#undef KILN_BINARY
  register_kernel(Op::where, DeviceType::CUDA, &where_cuda);
  register_kernel(Op::masked_fill, DeviceType::CUDA, &where_cuda);
}

}  // namespace kiln
