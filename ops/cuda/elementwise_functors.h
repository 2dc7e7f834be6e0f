// The functors the GPU elementwise loops run, one per op of ops/cpu/elementwise.cpp,
// built on the shared scalar math of ops/math.h with the same formulas and the same
// order of operations as the CPU loops. __host__ __device__, no CUDA header: the CPU test
// runs them too. T is the compute type (float for 16-bit floats).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include "core/macros.h"
#include "ops/math.h"

namespace kiln::cuda {

// Typed libm calls (never an unqualified call that could pick the double version).
KILN_HD_INLINE float m_log(float x) { return ::logf(x); }
KILN_HD_INLINE double m_log(double x) { return ::log(x); }
KILN_HD_INLINE float m_sin(float x) { return ::sinf(x); }
KILN_HD_INLINE double m_sin(double x) { return ::sin(x); }
KILN_HD_INLINE float m_cos(float x) { return ::cosf(x); }
KILN_HD_INLINE double m_cos(double x) { return ::cos(x); }
KILN_HD_INLINE float m_pow(float x, float y) { return ::powf(x, y); }
KILN_HD_INLINE double m_pow(double x, double y) { return ::pow(x, y); }
KILN_HD_INLINE float m_fabs(float x) { return ::fabsf(x); }
KILN_HD_INLINE double m_fabs(double x) { return ::fabs(x); }

// ---------------------------------------------------------------- unary forward

template <class T> struct NegF { KILN_HD_INLINE T operator()(T x) const { return T(-x); } };
/// abs of integers (floats use AbsF)
template <class T> struct IntAbsF {
  KILN_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? T(-x) : x;
  }
};
template <class T> struct ExpF { KILN_HD_INLINE T operator()(T x) const { return math::m_exp(x); } };
template <class T> struct LogF { KILN_HD_INLINE T operator()(T x) const { return m_log(x); } };
template <class T> struct SqrtF { KILN_HD_INLINE T operator()(T x) const { return math::m_sqrt(x); } };
template <class T> struct RsqrtF { KILN_HD_INLINE T operator()(T x) const { return math::rsqrt(x); } };
template <class T> struct AbsF { KILN_HD_INLINE T operator()(T x) const { return m_fabs(x); } };
template <class T> struct SinF { KILN_HD_INLINE T operator()(T x) const { return m_sin(x); } };
template <class T> struct CosF { KILN_HD_INLINE T operator()(T x) const { return m_cos(x); } };
template <class T> struct TanhF { KILN_HD_INLINE T operator()(T x) const { return math::fast_tanh(x); } };
template <class T> struct SigmoidF { KILN_HD_INLINE T operator()(T x) const { return math::sigmoid(x); } };
template <class T> struct ReluF { KILN_HD_INLINE T operator()(T x) const { return math::relu(x); } };
template <class T> struct LeakyReluF {
  T slope;
  KILN_HD_INLINE T operator()(T x) const { return math::leaky_relu(x, slope); }
};
template <class T> struct GeluF { KILN_HD_INLINE T operator()(T x) const { return math::gelu(x); } };
template <class T> struct GeluTanhF { KILN_HD_INLINE T operator()(T x) const { return math::gelu_tanh(x); } };
template <class T> struct SiluF { KILN_HD_INLINE T operator()(T x) const { return math::silu(x); } };
template <class T> struct ClampF {
  T lo, hi;
  KILN_HD_INLINE T operator()(T x) const { return math::clamp(x, lo, hi); }
};
template <class T> struct PowScalarF {
  T p;
  KILN_HD_INLINE T operator()(T x) const { return m_pow(x, p); }
};

// ---------------------------------------------------------------- unary derivatives
// Each is op'(s), where s is the input x or, for ops whose derivative is cheaper from
// the output (exp, sqrt, rsqrt, tanh, sigmoid), the output y. GradF multiplies by g.

template <class T> struct ExpD { KILN_HD_INLINE T operator()(T y) const { return y; } };
template <class T> struct LogD { KILN_HD_INLINE T operator()(T x) const { return T(1) / x; } };
template <class T> struct SqrtD { KILN_HD_INLINE T operator()(T y) const { return T(0.5) / y; } };
template <class T> struct RsqrtD { KILN_HD_INLINE T operator()(T y) const { return T(-0.5) * y * y * y; } };
template <class T> struct AbsD { KILN_HD_INLINE T operator()(T x) const { return math::sign(x); } };
template <class T> struct SinD { KILN_HD_INLINE T operator()(T x) const { return m_cos(x); } };
template <class T> struct CosD { KILN_HD_INLINE T operator()(T x) const { return -m_sin(x); } };
template <class T> struct TanhD { KILN_HD_INLINE T operator()(T y) const { return math::tanh_grad_from_y(y); } };
template <class T> struct SigmoidD { KILN_HD_INLINE T operator()(T y) const { return math::sigmoid_grad_from_y(y); } };
template <class T> struct ReluD { KILN_HD_INLINE T operator()(T x) const { return math::relu_grad(x); } };
template <class T> struct LeakyReluD {
  T slope;
  KILN_HD_INLINE T operator()(T x) const { return math::leaky_relu_grad(x, slope); }
};
template <class T> struct GeluD { KILN_HD_INLINE T operator()(T x) const { return math::gelu_grad(x); } };
template <class T> struct GeluTanhD { KILN_HD_INLINE T operator()(T x) const { return math::gelu_tanh_grad(x); } };
template <class T> struct SiluD { KILN_HD_INLINE T operator()(T x) const { return math::silu_grad(x); } };
template <class T> struct ClampD {
  T lo, hi;
  KILN_HD_INLINE T operator()(T x) const { return (x >= lo && x <= hi) ? T(1) : T(0); }
};
template <class T> struct PowScalarD {
  T p;
  KILN_HD_INLINE T operator()(T x) const { return p == T(0) ? T(0) : p * m_pow(x, p - T(1)); }
};

/// out = g * d(s): the backward of a unary op from its derivative functor.
template <class T, class D> struct GradF {
  D d;
  KILN_HD_INLINE T operator()(T g, T s) const { return g * d(s); }
};

// ---------------------------------------------------------------- binary

template <class T> struct AddF { KILN_HD_INLINE T operator()(T x, T y) const { return T(x + y); } };
template <class T> struct SubF { KILN_HD_INLINE T operator()(T x, T y) const { return T(x - y); } };
template <class T> struct MulF { KILN_HD_INLINE T operator()(T x, T y) const { return T(x * y); } };
template <class T> struct DivF { KILN_HD_INLINE T operator()(T x, T y) const { return T(x / y); } };
/// Integer division as the CPU does it: x / 0 is 0 (never reached through kiln::div,
/// which divides integers in float32).
template <class T> struct IntDivF { KILN_HD_INLINE T operator()(T x, T y) const { return y == 0 ? T(0) : T(x / y); } };
template <class T> struct PowF { KILN_HD_INLINE T operator()(T x, T y) const { return m_pow(x, y); } };
/// maximum / minimum propagate a NaN in x (as the CPU loops do).
template <class T> struct MaximumF {
  KILN_HD_INLINE T operator()(T x, T y) const { return (x != x || x >= y) ? x : y; }
};
template <class T> struct MinimumF {
  KILN_HD_INLINE T operator()(T x, T y) const { return (x != x || x <= y) ? x : y; }
};
template <class T> struct EqF { KILN_HD_INLINE bool operator()(T x, T y) const { return x == y; } };
template <class T> struct NeF { KILN_HD_INLINE bool operator()(T x, T y) const { return x != y; } };
template <class T> struct LtF { KILN_HD_INLINE bool operator()(T x, T y) const { return x < y; } };
template <class T> struct LeF { KILN_HD_INLINE bool operator()(T x, T y) const { return x <= y; } };
template <class T> struct GtF { KILN_HD_INLINE bool operator()(T x, T y) const { return x > y; } };
template <class T> struct GeF { KILN_HD_INLINE bool operator()(T x, T y) const { return x >= y; } };

// ---------------------------------------------------------------- selection

/// where / masked_fill: c ? a : b, the condition read as a byte.
struct WhereF {
  template <class T>
  KILN_HD_INLINE T operator()(uint8_t c, T a, T b) const { return c ? a : b; }
};

}  // namespace kiln::cuda
