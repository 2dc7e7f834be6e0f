// The arithmetic of every elementwise op, once: one functor per row of
// ops/elementwise_ops.def, NameF for the forward and, for a unary op, NameD for its
// derivative. __host__ __device__ and free of CUDA headers, so the CPU loops
// (ops/cpu/elementwise.cpp) and the CUDA loops (ops/cuda/elementwise*.cu) run the same
// formulas in the same order, and a CPU test checks what the GPU computes. Built on the
// scalar math of ops/math.h. T is the compute type: float or double (16-bit floats are
// computed in float), or an integer type for the ops that take integers (neg, abs and the
// binary ones). A functor's members are the op's parameters, filled from p0, p1 by
// make_functor.
#pragma once
#include <cstdint>
#include <limits>
#include <type_traits>
#include "kiln/core/macros.h"
#include "kiln/ops/math.h"
#include "kiln/ops/special_math.h"

namespace kiln::elementwise {

using namespace kiln::math;

/// A row's functor with the op's parameters: F{p0, p1}, F{p0} or F{}, whichever F takes.
template <class F, class C>
KILN_HD_INLINE F make_functor(C p0, C p1) {
  if constexpr (requires { F{p0, p1}; }) return F{p0, p1};
  else if constexpr (requires { F{p0}; }) return F{p0};
  else return F{};
}

// ---------------------------------------------------------------- unary
// NameF(x) is the op; NameD(s) its derivative, where s is the input x or, for the rows that
// read y, the output y. The backward is g * NameD(s) (GradF), or NameD's own grad(g, s)
// where PyTorch selects instead of multiplying: relu, clamp and pow(x, 0) give 0, not
// 0 * g, where their derivative is 0, so an inf or NaN upstream gradient stops there.

template <class T> struct NegF { KILN_HD_INLINE T operator()(T x) const { return T(-x); } };
template <class T> struct NegD { KILN_HD_INLINE T operator()(T) const { return T(-1); } };

template <class T> struct ExpF { KILN_HD_INLINE T operator()(T x) const { return m_exp(x); } };
template <class T> struct ExpD { KILN_HD_INLINE T operator()(T y) const { return y; } };

template <class T> struct LogF { KILN_HD_INLINE T operator()(T x) const { return m_log(x); } };
template <class T> struct LogD {
  KILN_HD_INLINE T operator()(T x) const { return T(1) / x; }
  KILN_HD_INLINE T grad(T g, T x) const { return g / x; }  // PyTorch's: 1/x overflows at a subnormal x
};

template <class T> struct SqrtF { KILN_HD_INLINE T operator()(T x) const { return m_sqrt(x); } };
template <class T> struct SqrtD { KILN_HD_INLINE T operator()(T y) const { return T(0.5) / y; } };

template <class T> struct RsqrtF { KILN_HD_INLINE T operator()(T x) const { return math::rsqrt(x); } };
template <class T> struct RsqrtD { KILN_HD_INLINE T operator()(T y) const { return T(-0.5) * y * y * y; } };

/// abs of floats and of integers (an unsigned one is its own absolute value)
template <class T> struct AbsF {
  KILN_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return m_fabs(x);
    else if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? T(-x) : x;
  }
};
template <class T> struct AbsD { KILN_HD_INLINE T operator()(T x) const { return math::sign(x); } };

template <class T> struct SinF { KILN_HD_INLINE T operator()(T x) const { return m_sin(x); } };
template <class T> struct SinD { KILN_HD_INLINE T operator()(T x) const { return m_cos(x); } };

template <class T> struct CosF { KILN_HD_INLINE T operator()(T x) const { return m_cos(x); } };
template <class T> struct CosD { KILN_HD_INLINE T operator()(T x) const { return -m_sin(x); } };

template <class T> struct TanhF { KILN_HD_INLINE T operator()(T x) const { return fast_tanh(x); } };
template <class T> struct TanhD { KILN_HD_INLINE T operator()(T y) const { return tanh_grad_from_y(y); } };

template <class T> struct SigmoidF { KILN_HD_INLINE T operator()(T x) const { return math::sigmoid(x); } };
template <class T> struct SigmoidD { KILN_HD_INLINE T operator()(T y) const { return sigmoid_grad_from_y(y); } };

/// relu'(x) == relu'(relu(x)), so the row reads y and the input can be freed early (a
/// BatchNorm output in a CNN).
template <class T> struct ReluF { KILN_HD_INLINE T operator()(T x) const { return math::relu(x); } };
template <class T> struct ReluD {
  KILN_HD_INLINE T operator()(T y) const { return relu_grad(y); }
  KILN_HD_INLINE T grad(T g, T y) const { return y <= T(0) ? T(0) : g; }  // threshold_backward
};

template <class T> struct LeakyReluF {
  T slope;
  KILN_HD_INLINE T operator()(T x) const { return math::leaky_relu(x, slope); }
};
template <class T> struct LeakyReluD {
  T slope;
  KILN_HD_INLINE T operator()(T x) const { return leaky_relu_grad(x, slope); }
};

template <class T> struct GeluF { KILN_HD_INLINE T operator()(T x) const { return math::gelu(x); } };
template <class T> struct GeluD { KILN_HD_INLINE T operator()(T x) const { return gelu_grad(x); } };

template <class T> struct GeluTanhF { KILN_HD_INLINE T operator()(T x) const { return math::gelu_tanh(x); } };
template <class T> struct GeluTanhD { KILN_HD_INLINE T operator()(T x) const { return gelu_tanh_grad(x); } };

template <class T> struct SiluF { KILN_HD_INLINE T operator()(T x) const { return math::silu(x); } };
template <class T> struct SiluD { KILN_HD_INLINE T operator()(T x) const { return silu_grad(x); } };

/// softplus: log(1 + e^x), and x itself above 20 (PyTorch's threshold: there the two agree
/// to the last bit of a float and e^x would overflow soon); its derivative is the sigmoid,
/// e^x / (e^x + 1), and 1 above 20.
template <class T> struct SoftplusF {
  KILN_HD_INLINE T operator()(T x) const { return x > T(20) ? x : m_log1p(m_exp(x)); }
};
template <class T> struct SoftplusD {
  KILN_HD_INLINE T operator()(T x) const {
    const T z = m_exp(x);
    return x > T(20) ? T(1) : z / (z + T(1));
  }
};

/// log_sigmoid: log(1 / (1 + e^-x)) = min(x, 0) - log1p(e^-|x|) (PyTorch's, no overflow for
/// either sign); its derivative is sigmoid(-x).
template <class T> struct LogSigmoidF {
  KILN_HD_INLINE T operator()(T x) const {
    const T a = x < T(0) ? -x : x;
    return (x < T(0) ? x : T(0)) - m_log1p(m_exp(-a));
  }
};
template <class T> struct LogSigmoidD { KILN_HD_INLINE T operator()(T x) const { return math::sigmoid(-x); } };

/// log1p(x) = log(1 + x), exact near 0; its derivative 1 / (1 + x).
template <class T> struct Log1pF { KILN_HD_INLINE T operator()(T x) const { return m_log1p(x); } };
template <class T> struct Log1pD {
  KILN_HD_INLINE T operator()(T x) const { return T(1) / (x + T(1)); }
  KILN_HD_INLINE T grad(T g, T x) const { return g / (x + T(1)); }  // PyTorch's division
};

/// expm1(x) = e^x - 1, exact near 0; its derivative e^x = y + 1.
template <class T> struct Expm1F { KILN_HD_INLINE T operator()(T x) const { return m_expm1(x); } };
template <class T> struct Expm1D { KILN_HD_INLINE T operator()(T y) const { return y + T(1); } };

/// elu: x above 0, alpha (e^x - 1) at or below (PyTorch's, through expm1); its derivative
/// alpha e^x there.
template <class T> struct EluF {
  T alpha;
  KILN_HD_INLINE T operator()(T x) const { return x > T(0) ? x : alpha * m_expm1(x); }
};
template <class T> struct EluD {
  T alpha;
  KILN_HD_INLINE T operator()(T x) const { return x > T(0) ? T(1) : alpha * m_exp(x); }
};

/// selu: scale elu(x, alpha) with PyTorch's constants (ops/math.h).
template <class T> struct SeluF {
  KILN_HD_INLINE T operator()(T x) const { return T(kSeluScale) * (x > T(0) ? x : T(kSeluAlpha) * m_expm1(x)); }
};
template <class T> struct SeluD {
  KILN_HD_INLINE T operator()(T x) const {
    return x > T(0) ? T(kSeluScale) : T(kSeluScale) * T(kSeluAlpha) * m_exp(x);
  }
};

/// hardtanh: x clamped to [lo, hi]; its gradient passes strictly inside only (PyTorch's
/// hardtanh_backward: 0 at the bounds, where clamp's passes). relu6 is hardtanh(x, 0, 6).
template <class T> struct HardtanhF {
  T lo, hi;
  KILN_HD_INLINE T operator()(T x) const { return x < lo ? lo : (x > hi ? hi : x); }
};
template <class T> struct HardtanhD {
  T lo, hi;
  KILN_HD_INLINE T operator()(T x) const { return x <= lo || x >= hi ? T(0) : T(1); }
  KILN_HD_INLINE T grad(T g, T x) const { return x <= lo || x >= hi ? T(0) : g; }
};

/// hardsigmoid: min(max(x + 3, 0), 6) / 6; gradient 1/6 strictly inside (-3, 3), else 0
/// (PyTorch's 1/6 is a float constant, in float64 too: 0.1666666716...).
template <class T> struct HardsigmoidF {
  KILN_HD_INLINE T operator()(T x) const {
    const T r = x + T(3);
    return (r < T(0) ? T(0) : (r > T(6) ? T(6) : r)) / T(6);
  }
};
template <class T> struct HardsigmoidD {
  KILN_HD_INLINE T operator()(T x) const { return x > T(-3) && x < T(3) ? T(1.0f / 6.0f) : T(0); }
  KILN_HD_INLINE T grad(T g, T x) const { return x > T(-3) && x < T(3) ? g * T(1.0f / 6.0f) : T(0); }
};

/// hardswish: x min(max(x + 3, 0), 6) / 6; derivative 0 up to -3, x / 3 + 1/2 below 3, 1 from 3
/// (PyTorch's bounds).
template <class T> struct HardswishF {
  KILN_HD_INLINE T operator()(T x) const {
    const T r = x + T(3);
    return x * (r < T(0) ? T(0) : (r > T(6) ? T(6) : r)) / T(6);
  }
};
template <class T> struct HardswishD {
  KILN_HD_INLINE T operator()(T x) const { return x <= T(-3) ? T(0) : (x < T(3) ? x / T(3) + T(0.5) : T(1)); }
  KILN_HD_INLINE T grad(T g, T x) const { return x <= T(-3) ? T(0) : (x < T(3) ? g * (x / T(3) + T(0.5)) : g); }
};

/// floor, ceil, trunc, round (half to even) and sign (0 for 0 and NaN, as PyTorch): piecewise
/// constant, so their gradient is 0 everywhere, an inf or NaN upstream gradient included
/// (PyTorch's zeros). An integer input comes back as it is (sign: -1, 0 or 1).
template <class T> struct ZeroGradD {
  KILN_HD_INLINE T operator()(T) const { return T(0); }
  KILN_HD_INLINE T grad(T, T) const { return T(0); }
};
template <class T> struct FloorF {
  KILN_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return m_floor(x);
    else return x;
  }
};
template <class T> struct CeilF {
  KILN_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return m_ceil(x);
    else return x;
  }
};
template <class T> struct TruncF {
  KILN_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return m_trunc(x);
    else return x;
  }
};
template <class T> struct RoundF {
  KILN_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return m_rint(x);
    else return x;
  }
};
template <class T> struct SignF {
  KILN_HD_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return T(x != T(0));  // (no x < 0 to test)
    else return math::sign(x);
  }
};
template <class T> struct FloorD : ZeroGradD<T> {};
template <class T> struct CeilD : ZeroGradD<T> {};
template <class T> struct TruncD : ZeroGradD<T> {};
template <class T> struct RoundD : ZeroGradD<T> {};
template <class T> struct SignD : ZeroGradD<T> {};

// More of PyTorch's math, each backward in PyTorch's order (derivatives.yaml).
/// 1 / x; the gradient -g y^2.
template <class T> struct ReciprocalF { KILN_HD_INLINE T operator()(T x) const { return T(1) / x; } };
template <class T> struct ReciprocalD {
  KILN_HD_INLINE T operator()(T y) const { return -(y * y); }
  KILN_HD_INLINE T grad(T g, T y) const { return -g * (y * y); }
};
/// x * x (integers too); the gradient g 2x.
template <class T> struct SquareF { KILN_HD_INLINE T operator()(T x) const { return T(x * x); } };
template <class T> struct SquareD { KILN_HD_INLINE T operator()(T x) const { return T(2) * x; } };
template <class T> struct TanF { KILN_HD_INLINE T operator()(T x) const { return m_tan(x); } };
template <class T> struct TanD { KILN_HD_INLINE T operator()(T y) const { return T(1) + y * y; } };
template <class T> struct AtanF { KILN_HD_INLINE T operator()(T x) const { return m_atan(x); } };
template <class T> struct AtanD {
  KILN_HD_INLINE T operator()(T x) const { return T(1) / (x * x + T(1)); }
  KILN_HD_INLINE T grad(T g, T x) const { return g / (x * x + T(1)); }
};
/// asin, acos: the gradient +-g / sqrt(1 - x^2) (inf at +-1, NaN outside, as PyTorch's).
template <class T> struct AsinF { KILN_HD_INLINE T operator()(T x) const { return m_asin(x); } };
template <class T> struct AsinD { KILN_HD_INLINE T operator()(T x) const { return T(1) / m_sqrt(-x * x + T(1)); } };
template <class T> struct AcosF { KILN_HD_INLINE T operator()(T x) const { return m_acos(x); } };
template <class T> struct AcosD { KILN_HD_INLINE T operator()(T x) const { return -(T(1) / m_sqrt(-x * x + T(1))); } };
template <class T> struct SinhF { KILN_HD_INLINE T operator()(T x) const { return m_sinh(x); } };
template <class T> struct SinhD { KILN_HD_INLINE T operator()(T x) const { return m_cosh(x); } };
template <class T> struct CoshF { KILN_HD_INLINE T operator()(T x) const { return m_cosh(x); } };
template <class T> struct CoshD { KILN_HD_INLINE T operator()(T x) const { return m_sinh(x); } };
/// erf, erfc: the gradient +-(2 / sqrt(pi)) e^(-x^2) g.
template <class T> struct ErfF { KILN_HD_INLINE T operator()(T x) const { return m_erf(x); } };
template <class T> struct ErfD {
  KILN_HD_INLINE T operator()(T x) const { return T(kTwoOverSqrtPi) * m_exp(-(x * x)); }
};
template <class T> struct ErfcF { KILN_HD_INLINE T operator()(T x) const { return m_erfc(x); } };
template <class T> struct ErfcD {
  KILN_HD_INLINE T operator()(T x) const { return T(-kTwoOverSqrtPi) * m_exp(-(x * x)); }
};
/// 2^x (the gradient g y ln 2); log2, log10 (g / (x ln b)).
template <class T> struct Exp2F { KILN_HD_INLINE T operator()(T x) const { return m_exp2(x); } };
template <class T> struct Exp2D {
  KILN_HD_INLINE T operator()(T y) const { return y * T(kLn2); }
  KILN_HD_INLINE T grad(T g, T y) const { return g * y * T(kLn2); }
};
template <class T> struct Log2F { KILN_HD_INLINE T operator()(T x) const { return m_log2(x); } };
template <class T> struct Log2D {
  KILN_HD_INLINE T operator()(T x) const { return T(1) / (x * T(kLn2)); }
  KILN_HD_INLINE T grad(T g, T x) const { return g / (x * T(kLn2)); }
};
template <class T> struct Log10F { KILN_HD_INLINE T operator()(T x) const { return m_log10(x); } };
template <class T> struct Log10D {
  KILN_HD_INLINE T operator()(T x) const { return T(1) / (x * T(kLn10)); }
  KILN_HD_INLINE T grad(T g, T x) const { return g / (x * T(kLn10)); }
};

/// asinh, acosh, atanh with PyTorch's gradients: g / sqrt(x^2 + 1), g / sqrt(x^2 - 1),
/// g / (1 - x^2).
template <class T> struct AsinhF { KILN_HD_INLINE T operator()(T x) const { return m_asinh(x); } };
template <class T> struct AsinhD { KILN_HD_INLINE T operator()(T x) const { return T(1) / m_sqrt(x * x + T(1)); } };
template <class T> struct AcoshF { KILN_HD_INLINE T operator()(T x) const { return m_acosh(x); } };
template <class T> struct AcoshD { KILN_HD_INLINE T operator()(T x) const { return T(1) / m_sqrt(x * x - T(1)); } };
template <class T> struct AtanhF { KILN_HD_INLINE T operator()(T x) const { return m_atanh(x); } };
template <class T> struct AtanhD {
  KILN_HD_INLINE T operator()(T x) const { return T(1) / (T(1) - x * x); }
  KILN_HD_INLINE T grad(T g, T x) const { return g / (T(1) - x * x); }
};

// ---- special functions (ops/special_math.h), PyTorch's gradients
/// log |Gamma(x)|; its derivative math::digamma(x), whose derivative is math::polygamma(1, x); math::polygamma(n,
/// x) (n in p0) has math::polygamma(n + 1, x).
template <class T> struct LgammaF { KILN_HD_INLINE T operator()(T x) const { return m_lgamma(x); } };
template <class T> struct LgammaD { KILN_HD_INLINE T operator()(T x) const { return math::digamma(x); } };
template <class T> struct DigammaF { KILN_HD_INLINE T operator()(T x) const { return math::digamma(x); } };
template <class T> struct DigammaD { KILN_HD_INLINE T operator()(T x) const { return math::trigamma(x); } };
template <class T> struct PolygammaF {
  T n;
  KILN_HD_INLINE T operator()(T x) const { return math::polygamma(int(n), x); }
};
template <class T> struct PolygammaD {
  T n;
  KILN_HD_INLINE T operator()(T x) const { return math::polygamma(int(n) + 1, x); }
};
/// erfinv: the gradient (sqrt(pi) / 2) e^(y^2) g, read from the output y.
template <class T> struct ErfinvF { KILN_HD_INLINE T operator()(T x) const { return math::erfinv(x); } };
template <class T> struct ErfinvD {
  KILN_HD_INLINE T operator()(T y) const { return T(0.88622692545275801365) * m_exp(y * y); }
};
/// I0, I1 and exp(-|x|) I0, exp(-|x|) I1: I0' = I1, I0e' = I1e - sgn(x) I0e, I1' = I0 - I1 / x,
/// I1e' = I0e - I1e (sgn(x) + 1 / x); the last two are 1/2 where |x| <= epsilon (PyTorch's).
template <class T> struct I0F { KILN_HD_INLINE T operator()(T x) const { return math::bessel_i0(x); } };
template <class T> struct I0D { KILN_HD_INLINE T operator()(T x) const { return math::bessel_i1(x); } };
template <class T> struct I0eF { KILN_HD_INLINE T operator()(T x) const { return math::bessel_i0e(x); } };
template <class T> struct I0eD {
  KILN_HD_INLINE T operator()(T x) const { return math::bessel_i1e(x) - math::sign(x) * math::bessel_i0e(x); }
};
template <class T> struct I1F { KILN_HD_INLINE T operator()(T x) const { return math::bessel_i1(x); } };
template <class T> struct I1D {
  KILN_HD_INLINE T operator()(T x) const {
    if (!(m_fabs(x) > std::numeric_limits<T>::epsilon())) return x == x ? T(0.5) : x;
    return math::bessel_i0(x) - math::bessel_i1(x) * (T(1) / x);
  }
};
template <class T> struct I1eF { KILN_HD_INLINE T operator()(T x) const { return math::bessel_i1e(x); } };
template <class T> struct I1eD {
  KILN_HD_INLINE T operator()(T x) const {
    if (!(m_fabs(x) > std::numeric_limits<T>::epsilon())) return x == x ? T(0.5) : x;
    return math::bessel_i0e(x) - math::bessel_i1e(x) * (math::sign(x) + T(1) / x);
  }
};
/// The standard normal's inverse CDF (gradient sqrt(2 pi) e^(y^2 / 2) g, from the output) and
/// log CDF (gradient e^(-x^2 / 2 - math::log_ndtr(x)) / sqrt(2 pi) g).
template <class T> struct NdtriF { KILN_HD_INLINE T operator()(T x) const { return math::ndtri(x); } };
template <class T> struct NdtriD {
  KILN_HD_INLINE T operator()(T y) const { return T(2.50662827463100050242) * m_exp(y * y / T(2)); }
};
template <class T> struct LogNdtrF { KILN_HD_INLINE T operator()(T x) const { return math::log_ndtr(x); } };
template <class T> struct LogNdtrD {
  KILN_HD_INLINE T operator()(T x) const { return math::log_ndtr_grad(x); }
};
/// sin(pi x) / (pi x) (1 at 0; the gradient 0 there).
template <class T> struct SincF { KILN_HD_INLINE T operator()(T x) const { return math::sinc(x); } };
template <class T> struct SincD {
  KILN_HD_INLINE T operator()(T x) const { return math::sinc_grad(T(1), x); }
  KILN_HD_INLINE T grad(T g, T x) const { return math::sinc_grad(g, x); }
};
/// x tanh(softplus(x)).
template <class T> struct MishF { KILN_HD_INLINE T operator()(T x) const { return math::mish(x); } };
template <class T> struct MishD { KILN_HD_INLINE T operator()(T x) const { return math::mish_grad(x); } };
/// -x log x (torch.special.entr); the gradient -(1 + log x) g.
template <class T> struct EntrF { KILN_HD_INLINE T operator()(T x) const { return math::entr(x); } };
template <class T> struct EntrD { KILN_HD_INLINE T operator()(T x) const { return -(T(1) + m_log(x)); } };

template <class T> struct ClampF {
  T lo, hi;
  KILN_HD_INLINE T operator()(T x) const { return math::clamp(x, lo, hi); }
};
template <class T> struct ClampD {
  T lo, hi;
  // PyTorch's rule: 1 strictly inside the bounds (0 at a bound and for NaN); an absent bound
  // (an infinite one) passes every x, -inf and +inf included
  KILN_HD_INLINE T operator()(T x) const {
    const T inf = std::numeric_limits<T>::infinity();
    return ((x > lo || lo == -inf) && (x < hi || hi == inf) && x == x) ? T(1) : T(0);
  }
  KILN_HD_INLINE T grad(T g, T x) const { return (*this)(x) != T(0) ? g : T(0); }
};

/// x^p with PyTorch's special exponents (0; 2, 3, -1, -2 as products; +-0.5 as square roots:
/// pow(-0, 0.5) is -0 and pow(-inf, 0.5) NaN, as sqrt gives), else the C library's pow.
template <class T> KILN_HD_INLINE T pow_scalar(T x, T p) {
  if (p == T(0)) return T(1);  // a signalling NaN too
  if (p == T(2)) return x * x;
  if (p == T(3)) return x * x * x;
  if (p == T(0.5)) return m_sqrt(x);
  if (p == T(-0.5)) return T(1) / m_sqrt(x);
  if (p == T(-1)) return T(1) / x;
  if (p == T(-2)) return T(1) / (x * x);
  return m_pow(x, p);
}
template <class T> struct PowScalarF {
  T p;
  KILN_HD_INLINE T operator()(T x) const { return pow_scalar(x, p); }
};
template <class T> struct PowScalarD {
  T p;
  KILN_HD_INLINE T operator()(T x) const { return p == T(0) ? T(0) : p * pow_scalar(x, p - T(1)); }
  KILN_HD_INLINE T grad(T g, T x) const { return p == T(0) ? T(0) : g * (*this)(x); }
};

/// The backward of a unary op at one element: d.grad(g, s) where the derivative functor
/// selects, else g * d(s).
template <class T, class D>
KILN_HD_INLINE T unary_grad(const D& d, T g, T s) {
  if constexpr (requires { d.grad(g, s); }) return d.grad(g, s);
  else return g * d(s);
}

/// out = unary_grad(d, g, s): the backward of a unary op from its derivative functor.
template <class T, class D> struct GradF {
  D d;
  KILN_HD_INLINE T operator()(T g, T s) const { return unary_grad(d, g, s); }
};

// ---------------------------------------------------------------- binary

template <class T> struct AddF { KILN_HD_INLINE T operator()(T x, T y) const { return T(x + y); } };
template <class T> struct SubF { KILN_HD_INLINE T operator()(T x, T y) const { return T(x - y); } };
template <class T> struct MulF { KILN_HD_INLINE T operator()(T x, T y) const { return T(x * y); } };
/// Integers divide with x / 0 = 0 (never reached through kiln::div, which divides integers
/// in float32, but defined rather than a crash).
template <class T> struct DivF {
  KILN_HD_INLINE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) return y == 0 ? T(0) : T(x / y);
    else return T(x / y);
  }
};
/// Integers are raised exactly (by squaring, wrapping on overflow as integer products do),
/// as PyTorch: a negative exponent gives 0, except for bases 1 and -1.
template <class T> struct PowF {
  KILN_HD_INLINE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>)
        if (y < 0) return x == T(1) ? T(1) : x == T(-1) ? ((y & 1) ? T(-1) : T(1)) : T(0);
      using U = std::make_unsigned_t<T>;
      U r = 1, b = U(x);
      for (T e = y; e != 0; e = T(e >> 1)) {
        if (e & 1) r = U(r * b);
        b = U(b * b);
      }
      return T(r);
    } else {
      return m_pow(x, y);
    }
  }
};
/// maximum / minimum propagate a NaN in x.
template <class T> struct MaximumF {
  KILN_HD_INLINE T operator()(T x, T y) const { return (x != x || x >= y) ? x : y; }
};
template <class T> struct MinimumF {
  KILN_HD_INLINE T operator()(T x, T y) const { return (x != x || x <= y) ? x : y; }
};
/// fmod: the remainder of truncated division, with x's sign (C's fmod); integers x % y.
/// Integer division by zero never reaches a kernel (kiln::fmod refuses it first); it is
/// defined here as 0, as is min % -1 (which overflows in C++).
template <class T> struct FmodF {
  KILN_HD_INLINE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if (y == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>)
        if (y == T(-1)) return T(0);
      return T(x % y);
    } else {
      return m_fmod(x, y);
    }
  }
};
/// remainder: Python's %, with y's sign: fmod, plus y where the remainder and y differ in
/// sign (PyTorch's order: remainder(-5.0, inf) is inf).
template <class T> struct RemainderF {
  KILN_HD_INLINE T operator()(T x, T y) const {
    T r = FmodF<T>{}(x, y);
    if constexpr (!std::is_unsigned_v<T>)
      if (r != T(0) && ((r < T(0)) != (y < T(0)))) r = T(r + y);
    return r;
  }
};
/// floor_divide: division rounded toward -inf (Python's //). Floating point as PyTorch's
/// div_floor: (x - fmod(x, y)) / y, corrected by one where the signs differ, then rounded to
/// the nearest whole number (so 5.1 // 0.1 is 50, not floor(51.0...)); x / y for y == 0;
/// zero keeps the sign of x / y. Integers: truncated quotient, minus one where the signs
/// differ and the remainder is not 0; min // -1 wraps.
template <class T> struct FloorDivideF {
  KILN_HD_INLINE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if (y == T(0)) return T(0);
      if constexpr (std::is_signed_v<T>) {
        using U = std::make_unsigned_t<T>;
        if (y == T(-1)) return T(U(0) - U(x));
        const T q = T(x / y);
        return (x % y != T(0) && ((x < T(0)) != (y < T(0)))) ? T(q - T(1)) : q;
      } else {
        return T(x / y);
      }
    } else {
      if (y == T(0)) return x / y;
      const T mod = m_fmod(x, y);
      T div = (x - mod) / y;
      if (mod != T(0) && ((y < T(0)) != (mod < T(0)))) div -= T(1);
      if (div == T(0)) return m_copysign(T(0), x / y);
      T fl = m_floor(div);
      if (div - fl > T(0.5)) fl += T(1);
      return fl;
    }
  }
};
/// atan2(y, x): the angle of the point (x, y), in (-pi, pi]; integers are promoted to float32
/// before a kernel runs (kiln::atan2), so the integral branch is never reached.
template <class T> struct Atan2F {
  KILN_HD_INLINE T operator()(T y, T x) const {
    if constexpr (std::is_integral_v<T>) return T(m_atan2(double(y), double(x)));
    else return m_atan2(y, x);
  }
};
/// hypot: sqrt(x^2 + y^2) without overflow or underflow on the way (C's hypot); integers are
/// promoted to float32 first (kiln::hypot).
template <class T> struct HypotF {
  KILN_HD_INLINE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) return T(m_hypot(double(x), double(y)));
    else return m_hypot(x, y);
  }
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

}  // namespace kiln::elementwise
