// CUDA kernels of the elementwise family: unary ops (forward and backward) and where /
// masked_fill, all through the one generic loop of core/cuda/loops.cuh driven by the
// functors of ops/cuda/elementwise_functors.h; the broadcasting binary ops are in
// elementwise_binary.cu. Same kernel signatures as ops/cpu/elementwise.cpp, so
// ops/elementwise.cpp dispatches to either unchanged.
#include "core/cuda/loops.cuh"
#include "ops/cpu/elementwise_kernels.h"
#include "ops/cuda/dtype_dispatch.h"
#include "ops/cuda/elementwise_functors.h"
#include "ops/cuda/index_math.h"
#include "ops/cuda/register.h"

namespace kiln {

// Defined in ops/cuda/elementwise_binary.cu.
void binary_cuda(Op op, DType dt, const EwArgs& args);

namespace {
using namespace kiln::cuda;

// ---- launchers ----

// out[i] = f(x[i]) over n contiguous elements of T (computed in compute_t<T>).
template <class T, class F>
void unary_loop(const UnaryArgs& a, const F& f) {
  void* ptrs[2] = {a.out, const_cast<void*>(a.x)};
  launch_elementwise<T, T>(contiguous_layout<2>(a.n), ptrs, f);
}

// out[i] = g[i] * d(s[i]) with s = y (from_y) or x.
template <class T, class D>
void unary_grad_loop(Op op, const UnaryArgs& a, bool from_y, const D& d) {
  const void* s = from_y ? a.y : a.x;
  KILN_CHECK(s != nullptr && a.g != nullptr, op_name(op), ": the CUDA backward kernel needs the gradient and the ",
             from_y ? "forward output" : "input");
  void* ptrs[3] = {a.out, const_cast<void*>(a.g), const_cast<void*>(s)};
  launch_elementwise<T, T, T>(contiguous_layout<3>(a.n), ptrs, GradF<compute_t<T>, D>{d});
}

template <class T>
void unary_forward(Op op, const UnaryArgs& a) {
  using C = compute_t<T>;
  const C p0 = C(a.p0), p1 = C(a.p1);
  switch (op) {
    case Op::neg: return unary_loop<T>(a, NegF<C>{});
    case Op::exp: return unary_loop<T>(a, ExpF<C>{});
    case Op::log: return unary_loop<T>(a, LogF<C>{});
    case Op::sqrt: return unary_loop<T>(a, SqrtF<C>{});
    case Op::rsqrt: return unary_loop<T>(a, RsqrtF<C>{});
    case Op::abs: return unary_loop<T>(a, AbsF<C>{});
    case Op::sin: return unary_loop<T>(a, SinF<C>{});
    case Op::cos: return unary_loop<T>(a, CosF<C>{});
    case Op::tanh: return unary_loop<T>(a, TanhF<C>{});
    case Op::sigmoid: return unary_loop<T>(a, SigmoidF<C>{});
    case Op::relu: return unary_loop<T>(a, ReluF<C>{});
    case Op::leaky_relu: return unary_loop<T>(a, LeakyReluF<C>{p0});
    case Op::gelu: return unary_loop<T>(a, GeluF<C>{});
    case Op::gelu_tanh: return unary_loop<T>(a, GeluTanhF<C>{});
    case Op::silu: return unary_loop<T>(a, SiluF<C>{});
    case Op::clamp: return unary_loop<T>(a, ClampF<C>{p0, p1});
    case Op::pow_scalar: return unary_loop<T>(a, PowScalarF<C>{p0});
    default: break;
  }
  KILN_FAIL(op_name(op), ": no CUDA unary forward kernel");
}

template <class T>
void unary_backward(Op op, const UnaryArgs& a) {
  using C = compute_t<T>;
  const C p0 = C(a.p0), p1 = C(a.p1);
  switch (op) {
    case Op::exp: return unary_grad_loop<T>(op, a, true, ExpD<C>{});
    case Op::log: return unary_grad_loop<T>(op, a, false, LogD<C>{});
    case Op::sqrt: return unary_grad_loop<T>(op, a, true, SqrtD<C>{});
    case Op::rsqrt: return unary_grad_loop<T>(op, a, true, RsqrtD<C>{});
    case Op::abs: return unary_grad_loop<T>(op, a, false, AbsD<C>{});
    case Op::sin: return unary_grad_loop<T>(op, a, false, SinD<C>{});
    case Op::cos: return unary_grad_loop<T>(op, a, false, CosD<C>{});
    case Op::tanh: return unary_grad_loop<T>(op, a, true, TanhD<C>{});
    case Op::sigmoid: return unary_grad_loop<T>(op, a, true, SigmoidD<C>{});
    case Op::relu: return unary_grad_loop<T>(op, a, a.x == nullptr, ReluD<C>{});  // from x or from y
    case Op::leaky_relu: return unary_grad_loop<T>(op, a, false, LeakyReluD<C>{p0});
    case Op::gelu: return unary_grad_loop<T>(op, a, false, GeluD<C>{});
    case Op::gelu_tanh: return unary_grad_loop<T>(op, a, false, GeluTanhD<C>{});
    case Op::silu: return unary_grad_loop<T>(op, a, false, SiluD<C>{});
    case Op::clamp: return unary_grad_loop<T>(op, a, false, ClampD<C>{p0, p1});
    case Op::pow_scalar: return unary_grad_loop<T>(op, a, false, PowScalarD<C>{p0});
    default: break;
  }
  KILN_FAIL(op_name(op), ": no CUDA unary backward kernel");
}

void unary_cuda(Op op, DType dt, const UnaryArgs& a) {
  if (a.n == 0) return;
  if (!a.backward && (op == Op::neg || op == Op::abs) && !is_floating(dt)) {
    dispatch_int(dt, op_name(op), [&]<class T>() {
      if (op == Op::neg) unary_loop<T>(a, NegF<T>{});
      else unary_loop<T>(a, IntAbsF<T>{});
    });
    return;
  }
  if (a.backward) dispatch_float(dt, op_name(op), [&]<class T>() { unary_backward<T>(op, a); });
  else dispatch_float(dt, op_name(op), [&]<class T>() { unary_forward<T>(op, a); });
}

void where_cuda(DType dt, const EwArgs& args) {
  const LoopLayout<4> L = layout_from_args<4>(args);
  dispatch_all(dt, "where", [&]<class T>() { launch_elementwise<T, uint8_t, T, T>(L, args.ptr, WhereF{}); });
}

}  // namespace

void register_cuda_elementwise() {
  for (Op op : {Op::add, Op::sub, Op::mul, Op::div, Op::pow, Op::maximum, Op::minimum, Op::eq, Op::ne, Op::lt,
                Op::le, Op::gt, Op::ge})
    register_kernel(op, DeviceType::CUDA, reinterpret_cast<void*>(&binary_cuda));
  for (Op op : {Op::neg, Op::exp, Op::log, Op::sqrt, Op::rsqrt, Op::abs, Op::sin, Op::cos, Op::tanh, Op::sigmoid,
                Op::relu, Op::leaky_relu, Op::gelu, Op::gelu_tanh, Op::silu, Op::clamp, Op::pow_scalar})
    register_kernel(op, DeviceType::CUDA, reinterpret_cast<void*>(&unary_cuda));
  register_kernel(Op::where, DeviceType::CUDA, reinterpret_cast<void*>(&where_cuda));
  register_kernel(Op::masked_fill, DeviceType::CUDA, reinterpret_cast<void*>(&where_cuda));
}

}  // namespace kiln
