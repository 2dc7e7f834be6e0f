// CPU kernels of the elementwise family: broadcasting binary ops, unary ops (forward and
// backward) and where. Contiguous operands take tight loops the compiler vectorises.
#include <cmath>
#include "core/strided.h"
#include "ops/cpu/elementwise_kernels.h"
#include "ops/math.h"

namespace kiln {
namespace {

template <int N>
void for_each_row_args(const EwArgs& a, const auto& row) {
  std::vector<int64_t> shape(a.shape, a.shape + a.ndim);
  std::array<std::vector<int64_t>, N> st;
  for (int k = 0; k < N; ++k) st[k].assign(a.strides[k], a.strides[k] + a.ndim);
  for_each_row<N>(shape, st, row);
}

// Runs f(out, a, b) elementwise with broadcasting; fast paths for unit-stride rows and
// a broadcast scalar operand.
template <class TO, class T, class F>
void binary_loop(const EwArgs& args, F f) {
  TO* out = static_cast<TO*>(args.ptr[0]);
  const T* a = static_cast<const T*>(args.ptr[1]);
  const T* b = static_cast<const T*>(args.ptr[2]);
  for_each_row_args<3>(args, [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& s) {
    TO* o = out + off[0];
    const T* x = a + off[1];
    const T* y = b + off[2];
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f(x[i * s[1]], y[i * s[2]]);
    }
  });
}

template <class T>
void binary_typed(Op op, const EwArgs& args) {
  switch (op) {
    case Op::add: return binary_loop<T, T>(args, [](T x, T y) { return T(x + y); });
    case Op::sub: return binary_loop<T, T>(args, [](T x, T y) { return T(x - y); });
    case Op::mul: return binary_loop<T, T>(args, [](T x, T y) { return T(x * y); });
    case Op::div:
      if constexpr (std::is_integral_v<T>) {
        return binary_loop<T, T>(args, [](T x, T y) { return y == 0 ? T(0) : T(x / y); });
      } else {
        return binary_loop<T, T>(args, [](T x, T y) { return T(x / y); });
      }
    case Op::pow: return binary_loop<T, T>(args, [](T x, T y) { return T(std::pow(x, y)); });
    case Op::maximum: return binary_loop<T, T>(args, [](T x, T y) { return (x != x || x >= y) ? x : y; });
    case Op::minimum: return binary_loop<T, T>(args, [](T x, T y) { return (x != x || x <= y) ? x : y; });
    case Op::eq: return binary_loop<bool, T>(args, [](T x, T y) { return x == y; });
    case Op::ne: return binary_loop<bool, T>(args, [](T x, T y) { return x != y; });
    case Op::lt: return binary_loop<bool, T>(args, [](T x, T y) { return x < y; });
    case Op::le: return binary_loop<bool, T>(args, [](T x, T y) { return x <= y; });
    case Op::gt: return binary_loop<bool, T>(args, [](T x, T y) { return x > y; });
    case Op::ge: return binary_loop<bool, T>(args, [](T x, T y) { return x >= y; });
    default: KILN_FAIL("elementwise: op ", op_name(op), " is not a binary op");
  }
}

void binary_cpu(Op op, DType dt, const EwArgs& args) {
  if (dt == DType::bool_) {
    KILN_CHECK(op == Op::eq || op == Op::ne, op_name(op), ": not supported for bool tensors");
    return binary_typed<uint8_t>(op, args);  // bool is stored as one byte
  }
  KILN_DISPATCH_NUMERIC(dt, op_name(op), [&]<class T>() { binary_typed<T>(op, args); });
}

template <class T, class F>
void unary_loop(const UnaryArgs& a, F f) {
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  parallel_for(0, a.n, 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = f(x[i]);
  });
}
// out = g * d(x) where d reads x (or y when from_y)
template <class T, class F>
void unary_grad_loop(const UnaryArgs& a, bool from_y, F d) {
  const T* src = static_cast<const T*>(from_y ? a.y : a.x);
  const T* g = static_cast<const T*>(a.g);
  T* out = static_cast<T*>(a.out);
  parallel_for(0, a.n, 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = g[i] * d(src[i]);
  });
}

template <class T>
void unary_typed(Op op, const UnaryArgs& a) {
  using std::abs, std::cos, std::exp, std::log, std::sin, std::sqrt, std::tanh, std::pow;
  const T p0 = T(a.p0), p1 = T(a.p1);
  if (!a.backward) {
    switch (op) {
      case Op::neg: return unary_loop<T>(a, [](T x) { return -x; });
      case Op::exp: return unary_loop<T>(a, [](T x) { return math::m_exp(x); });
      case Op::log: return unary_loop<T>(a, [](T x) { return log(x); });
      case Op::sqrt: return unary_loop<T>(a, [](T x) { return sqrt(x); });
      case Op::rsqrt: return unary_loop<T>(a, [](T x) { return math::rsqrt(x); });
      case Op::abs: return unary_loop<T>(a, [](T x) { return abs(x); });
      case Op::sin: return unary_loop<T>(a, [](T x) { return sin(x); });
      case Op::cos: return unary_loop<T>(a, [](T x) { return cos(x); });
      case Op::tanh: return unary_loop<T>(a, [](T x) { return math::fast_tanh(x); });
      case Op::sigmoid: return unary_loop<T>(a, [](T x) { return math::sigmoid(x); });
      case Op::relu: return unary_loop<T>(a, [](T x) { return math::relu(x); });
      case Op::leaky_relu: return unary_loop<T>(a, [p0](T x) { return math::leaky_relu(x, p0); });
      case Op::gelu: return unary_loop<T>(a, [](T x) { return math::gelu(x); });
      case Op::gelu_tanh: return unary_loop<T>(a, [](T x) { return math::gelu_tanh(x); });
      case Op::silu: return unary_loop<T>(a, [](T x) { return math::silu(x); });
      case Op::clamp: return unary_loop<T>(a, [p0, p1](T x) { return math::clamp(x, p0, p1); });
      case Op::pow_scalar: return unary_loop<T>(a, [p0](T x) { return T(pow(x, p0)); });
      default: break;
    }
  } else {
    switch (op) {
      case Op::exp: return unary_grad_loop<T>(a, true, [](T y) { return y; });
      case Op::log: return unary_grad_loop<T>(a, false, [](T x) { return T(1) / x; });
      case Op::sqrt: return unary_grad_loop<T>(a, true, [](T y) { return T(0.5) / y; });
      case Op::rsqrt: return unary_grad_loop<T>(a, true, [](T y) { return T(-0.5) * y * y * y; });
      case Op::abs: return unary_grad_loop<T>(a, false, [](T x) { return math::sign(x); });
      case Op::sin: return unary_grad_loop<T>(a, false, [](T x) { return cos(x); });
      case Op::cos: return unary_grad_loop<T>(a, false, [](T x) { return -sin(x); });
      case Op::tanh: return unary_grad_loop<T>(a, true, [](T y) { return math::tanh_grad_from_y(y); });
      case Op::sigmoid: return unary_grad_loop<T>(a, true, [](T y) { return math::sigmoid_grad_from_y(y); });
      // relu'(x) == relu'(relu(x)) (both 1 for NaN): reads whichever of x and y it is given,
      // so the op may save its output instead of its input (frees BatchNorm outputs early).
      case Op::relu: return unary_grad_loop<T>(a, a.x == nullptr, [](T x) { return math::relu_grad(x); });
      case Op::leaky_relu: return unary_grad_loop<T>(a, false, [p0](T x) { return math::leaky_relu_grad(x, p0); });
      case Op::gelu: return unary_grad_loop<T>(a, false, [](T x) { return math::gelu_grad(x); });
      case Op::gelu_tanh: return unary_grad_loop<T>(a, false, [](T x) { return math::gelu_tanh_grad(x); });
      case Op::silu: return unary_grad_loop<T>(a, false, [](T x) { return math::silu_grad(x); });
      case Op::clamp:
        return unary_grad_loop<T>(a, false, [p0, p1](T x) { return (x >= p0 && x <= p1) ? T(1) : T(0); });
      case Op::pow_scalar:
        return unary_grad_loop<T>(a, false, [p0](T x) { return p0 == T(0) ? T(0) : p0 * T(pow(x, p0 - T(1))); });
      default: break;
    }
  }
  KILN_FAIL(op_name(op), ": no CPU unary ", a.backward ? "backward" : "forward", " kernel");
}

void unary_cpu(Op op, DType dt, const UnaryArgs& a) {
  if (op == Op::neg || op == Op::abs) {
    if (!a.backward) {
      KILN_DISPATCH_NUMERIC(dt, op_name(op), [&]<class T>() {
        if constexpr (std::is_floating_point_v<T>) unary_typed<T>(op, a);
        else if (op == Op::neg) unary_loop<T>(a, [](T x) { return T(-x); });
        else unary_loop<T>(a, [](T x) { return x < T(0) ? T(-x) : x; });
      });
      return;
    }
  }
  KILN_DISPATCH_FLOATING(dt, op_name(op), [&]<class T>() { unary_typed<T>(op, a); });
}

void where_cpu(DType dt, const EwArgs& args) {
  KILN_DISPATCH_ALL(dt, "where", [&]<class T>() {
    using S = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;
    S* out = static_cast<S*>(args.ptr[0]);
    const uint8_t* c = static_cast<const uint8_t*>(args.ptr[1]);
    const S* a = static_cast<const S*>(args.ptr[2]);
    const S* b = static_cast<const S*>(args.ptr[3]);
    for_each_row_args<4>(args, [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& s) {
      for (int64_t i = 0; i < n; ++i)
        out[off[0] + i * s[0]] = c[off[1] + i * s[1]] ? a[off[2] + i * s[2]] : b[off[3] + i * s[3]];
    });
  });
}

}  // namespace

void register_cpu_elementwise() {
  for (Op op : {Op::add, Op::sub, Op::mul, Op::div, Op::pow, Op::maximum, Op::minimum, Op::eq, Op::ne, Op::lt,
                Op::le, Op::gt, Op::ge})
    register_kernel(op, DeviceType::CPU, reinterpret_cast<void*>(&binary_cpu));
  for (Op op : {Op::neg, Op::exp, Op::log, Op::sqrt, Op::rsqrt, Op::abs, Op::sin, Op::cos, Op::tanh, Op::sigmoid,
                Op::relu, Op::leaky_relu, Op::gelu, Op::gelu_tanh, Op::silu, Op::clamp, Op::pow_scalar})
    register_kernel(op, DeviceType::CPU, reinterpret_cast<void*>(&unary_cpu));
  register_kernel(Op::where, DeviceType::CPU, reinterpret_cast<void*>(&where_cpu));
  register_kernel(Op::masked_fill, DeviceType::CPU, reinterpret_cast<void*>(&where_cpu));
}

}  // namespace kiln
