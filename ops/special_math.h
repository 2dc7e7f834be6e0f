// Scalar special functions shared by the CPU loops and the CUDA kernels (through the
// functors of ops/elementwise_functors.h): log-gamma and its derivatives (digamma,
// trigamma, polygamma via the Hurwitz zeta function), the inverse error function, the
// modified Bessel functions I0, I1 and their exponentially scaled forms, the normal
// distribution's inverse CDF and log CDF, sinc and mish. The algorithms are the ones
// PyTorch 2.x computes (most derived from the Cephes Math Library by Stephen L. Moshier,
// BSD-licensed: its published coefficients), so kiln's values agree with PyTorch's to a few
// ulp and the GPU gives what the CPU gives. T is float or double (a constraint, so that
// kiln::digamma(Tensor) and the others never see these as candidates).
#pragma once
#include <cmath>
#include <concepts>
#include <limits>
#include "kiln/core/macros.h"
#include "kiln/ops/math.h"

namespace kiln::math {

inline constexpr double kPi = 3.14159265358979323846264338327950288;

KILN_HD_INLINE float m_asinh(float x) { return ::asinhf(x); }
KILN_HD_INLINE double m_asinh(double x) { return ::asinh(x); }
KILN_HD_INLINE float m_acosh(float x) { return ::acoshf(x); }
KILN_HD_INLINE double m_acosh(double x) { return ::acosh(x); }
KILN_HD_INLINE float m_atanh(float x) { return ::atanhf(x); }
KILN_HD_INLINE double m_atanh(double x) { return ::atanh(x); }

/// log |Gamma(x)|: the C library's, through lgamma_r on the host (plain lgamma writes the
/// global `signgam`, a data race between OpenMP threads).
KILN_HD_INLINE float m_lgamma(float x) {
#ifdef __CUDA_ARCH__
  return ::lgammaf(x);
#else
  int sign;
  return ::lgammaf_r(x, &sign);
#endif
}
KILN_HD_INLINE double m_lgamma(double x) {
#ifdef __CUDA_ARCH__
  return ::lgamma(x);
#else
  int sign;
  return ::lgamma_r(x, &sign);
#endif
}

/// a[0] x^N + a[1] x^(N-1) + ... + a[N] (Horner; Cephes' polevl, highest power first).
template <class T, int N>
KILN_HD_INLINE T polevl(T x, const double (&a)[N]) {
  T r = T(0);
  for (int i = 0; i < N; ++i) r = r * x + T(a[i]);
  return r;
}

/// The Chebyshev series sum_i a[i] T_i(x) / 2 by Clenshaw's recurrence (Cephes' chbevl,
/// coefficients highest order first).
template <class T, int N>
KILN_HD_INLINE T chbevl(T x, const double (&a)[N]) {
  T b0 = T(a[0]), b1 = T(0), b2 = T(0);
  for (int i = 1; i < N; ++i) {
    b2 = b1;
    b1 = b0;
    b0 = x * b1 - b2 + T(a[i]);
  }
  return T(0.5) * (b0 - b2);
}

/// psi(x) = d/dx log Gamma(x): +-inf at +-0 (the sign opposite to zero's), NaN at the
/// negative integers, reflection psi(1 - x) - pi / tan(pi r) below 0 (r the fractional part,
/// in double), the recurrence psi(x) = psi(x + 1) - 1/x up to 10, then the asymptotic series.
template <std::floating_point T>
KILN_HD_INLINE T digamma_positive(T x) {  // x > 0 (or NaN)
  T result = T(0);
  while (x < T(10)) {
    result -= T(1) / x;
    x += T(1);
  }
  if (x == T(10)) return result + T(2.25175258906672110764);  // psi(10)
  static constexpr double A[] = {8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                                 -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
                                 8.33333333333333333333E-2};
  T y = T(0);
  if (x < T(1.0e17)) {
    const T z = T(1) / (x * x);
    y = z * polevl(z, A);
  }
  return result + m_log(x) - T(0.5) / x - y;
}
template <std::floating_point T>
KILN_HD_INLINE T digamma(T x) {
  if (x == T(0)) return m_copysign(std::numeric_limits<T>::infinity(), -x);
  if (x < T(0)) {
    if (x == m_trunc(x)) return std::numeric_limits<T>::quiet_NaN();
    const double r = double(x) - ::trunc(double(x));
    return digamma_positive(T(1) - x) - T(kPi / ::tan(kPi * r));
  }
  return digamma_positive(x);
}

/// psi'(x): reflection below 1/2, six recurrence steps, then the asymptotic series.
template <std::floating_point T>
KILN_HD_INLINE T trigamma(T x) {
  T sign = T(1), result = T(0);
  if (x < T(0.5)) {
    sign = T(-1);
    const T s = m_sin(T(kPi) * x);
    result -= T(kPi) * T(kPi) / (s * s);
    x = T(1) - x;
  }
  for (int i = 0; i < 6; ++i) {
    result += T(1) / (x * x);
    x += T(1);
  }
  const T ixx = T(1) / (x * x);
  result += (T(1) + T(1) / (T(2) * x) + ixx * (T(1) / T(6) - ixx * (T(1) / T(30) - ixx * (T(1) / T(42))))) / x;
  return sign * result;
}

/// The Hurwitz zeta function sum_k (k + q)^-x (x > 1), in double: terms summed until they
/// fall below machine epsilon, then the Euler-Maclaurin tail (Cephes' zeta).
KILN_HD_INLINE double hurwitz_zeta(double x, double q) {
  constexpr double kMachEp = 1.11022302462515654042E-16;
  static constexpr double A[] = {12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
                          -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
                          1.8152105401943546773e17, -7.1661652561756670113e18};
  if (x == 1.0) return std::numeric_limits<double>::infinity();
  if (x < 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (q <= 0.0) {
    if (q == ::floor(q)) return std::numeric_limits<double>::infinity();
    if (x != ::floor(x)) return std::numeric_limits<double>::quiet_NaN();
  }
  double s = ::pow(q, -x), a = q, b = 0.0;
  int i = 0;
  while (i < 9 || a <= 9.0) {
    i += 1;
    a += 1.0;
    b = ::pow(a, -x);
    s += b;
    if (-kMachEp * s < b && b < kMachEp * s) return s;
  }
  const double w = a;
  s += b * w / (x - 1.0);
  s -= 0.5 * b;
  a = 1.0;
  double k = 0.0;
  for (i = 0; i < 12; ++i) {
    a *= x + k;
    b /= w;
    const double t = a * b / A[i];
    s = s + t;
    if (::fabs(t / s) < kMachEp) return s;
    k += 1.0;
    a *= x + k;
    b /= w;
    k += 1.0;
  }
  return s;
}

/// The n-th derivative of digamma: digamma (n = 0), trigamma (1), and
/// (-1)^(n+1) n! zeta(n + 1, x) above (n >= 0; the caller checks).
template <std::floating_point T>
KILN_HD_INLINE T polygamma(int n, T x) {
  if (n == 0) return digamma(x);
  if (n == 1) return trigamma(x);
  const double f = ::exp(m_lgamma(double(n) + 1.0));
  return T((n % 2 ? 1.0 : -1.0) * f * hurwitz_zeta(double(n) + 1.0, double(x)));
}

/// The inverse of erf on [-1, 1] (+-inf at +-1, NaN outside): a rational first guess (PyTorch's
/// calc_erfinv), then two Halley steps on f(x) = erf(x) - y, f' = (2 / sqrt pi) e^(-x^2),
/// f'' = -2x f'. Where |y| > 0.7 the residual is computed as (1 - |y|) - erfc(|x|), which is
/// exact to the last bit of erfc (1 - |y| is exact there): erf(x) - y cancels near +-1, where
/// PyTorch's two Newton steps on it lose up to seven digits (1 - 1e-12: 5.0420291 against
/// 5.0420319). PyTorch's CPU erfinv (MKL's) is accurate there, as this is.
template <std::floating_point T>
KILN_HD_INLINE T erfinv(T y) {
  const T ya = m_fabs(y);
  if (ya > T(1)) return std::numeric_limits<T>::quiet_NaN();
  if (ya == T(1)) return m_copysign(std::numeric_limits<T>::infinity(), y);
  if (ya <= T(0.7)) {
    const T z = y * y;
    const T num = ((T(-0.140543331) * z + T(0.914624893)) * z + T(-1.645349621)) * z + T(0.886226899);
    const T den = (((T(0.012229801) * z + T(-0.329097515)) * z + T(1.442710462)) * z + T(-2.118377725)) * z + T(1);
    T x = y * num / den;
    for (int i = 0; i < 2; ++i) {
      const T f = m_erf(x) - y;
      x = x - f / (T(kTwoOverSqrtPi) * m_exp(-x * x) + x * f);
    }
    return x;
  }
  const T q = T(1) - ya;  // exact
  const T z = m_sqrt(-m_log(q / T(2)));
  const T num = ((T(1.641345311) * z + T(3.429567803)) * z + T(-1.624906493)) * z + T(-1.970840454);
  const T den = (T(1.637067800) * z + T(3.543889200)) * z + T(1);
  T x = num / den;  // > 0, for |y|
  for (int i = 0; i < 2; ++i) {
    const T f = q - m_erfc(x);  // erf(x) - |y|
    x = x - f / (T(kTwoOverSqrtPi) * m_exp(-x * x) + x * f);
  }
  return m_copysign(x, y);
}

/// The Chebyshev part of exp(-a) I0(a), a = |x| >= 0: the series on [0, 8], or
/// exp(-a) sqrt(a) I0(a) on (8, inf) (the caller divides by sqrt(a)); coefficients of Cephes i0.c.
template <std::floating_point T>
KILN_HD_INLINE T i0e_series(T a) {
  static constexpr double A[] = {
    -4.41534164647933937950E-18, 3.33079451882223809783E-17, -2.43127984654795469359E-16, 1.71539128555513303061E-15,
    -1.16853328779934516808E-14, 7.67618549860493561688E-14, -4.85644678311192946090E-13, 2.95505266312963983461E-12,
    -1.72682629144155570723E-11, 9.67580903537323691224E-11, -5.18979560163526290666E-10, 2.65982372468238665035E-9,
    -1.30002500998624804212E-8,  6.04699502254191894932E-8,  -2.67079385394061173391E-7, 1.11738753912010371815E-6,
    -4.41673835845875056359E-6,  1.64484480707288970893E-5,  -5.75419501008210370398E-5, 1.88502885095841655729E-4,
    -5.76375574538582365885E-4,  1.63947561694133579842E-3,  -4.32430999505057594430E-3, 1.05464603945949983183E-2,
    -2.37374148058994688156E-2,  4.93052842396707084878E-2,  -9.49010970480476444210E-2, 1.71620901522208775349E-1,
    -3.04682672343198398683E-1,  6.76795274409476084995E-1};
  static constexpr double B[] = {
    -7.23318048787475395456E-18, -4.83050448594418207126E-18, 4.46562142029675999901E-17, 3.46122286769746109310E-17,
    -2.82762398051658348494E-16, -3.42548561967721913462E-16, 1.77256013305652638360E-15, 3.81168066935262242075E-15,
    -9.55484669882830764870E-15, -4.15056934728722208663E-14, 1.54008621752140982691E-14, 3.85277838274214270114E-13,
    7.18012445138366623367E-13,  -1.79417853150680611778E-12, -1.32158118404477131188E-11, -3.14991652796324136454E-11,
    1.18891471078464383424E-11,  4.94060238822496958910E-10,  3.39623202570838634515E-9, 2.26666899049817806459E-8,
    2.04891858946906374183E-7,   2.89137052083475648297E-6,   6.88975834691682398426E-5, 3.36911647825569408990E-3,
    8.04490411014108831608E-1};
  return a <= T(8) ? chbevl(a / T(2) - T(2), A) : chbevl(T(32) / a - T(2), B);
}
/// The same for I1 (Cephes i1.c): exp(-a) I1(a) / a on [0, 8], exp(-a) sqrt(a) I1(a) above.
template <std::floating_point T>
KILN_HD_INLINE T i1e_series(T a) {
  static constexpr double A[] = {
    2.77791411276104639959E-18, -2.11142121435816608115E-17, 1.55363195773620046921E-16, -1.10559694773538630805E-15,
    7.60068429473540693410E-15, -5.04218550472791168711E-14, 3.22379336594557470981E-13, -1.98397439776494371520E-12,
    1.17361862988909016308E-11, -6.66348972350202774223E-11, 3.62559028155211703701E-10, -1.88724975172282928790E-9,
    9.38153738649577178388E-9,  -4.44505912879632808065E-8,  2.00329475355213526229E-7, -8.56872026469545474066E-7,
    3.47025130813767847674E-6,  -1.32731636560394358279E-5,  4.78156510755005422638E-5, -1.61760815825896745588E-4,
    5.12285956168575772895E-4,  -1.51357245063125314899E-3,  4.15642294431288815669E-3, -1.05640848946261981558E-2,
    2.47264490306265168283E-2,  -5.29459812080949914269E-2,  1.02643658689847095384E-1, -1.76416518357834055153E-1,
    2.52587186443633654823E-1};
  static constexpr double B[] = {
    7.51729631084210481353E-18,  4.41434832307170791151E-18,  -4.65030536848935832153E-17, -3.20952592199342395980E-17,
    2.96262899764595013876E-16,  3.30820231092092828324E-16,  -1.88035477551078244854E-15, -3.81440307243700780478E-15,
    1.04202769841288027642E-14,  4.27244001671195135429E-14,  -2.10154184277266431302E-14, -4.08355111109219731823E-13,
    -7.19855177624590851209E-13, 2.03562854414708950722E-12,  1.41258074366137813316E-11, 3.25260358301548823856E-11,
    -1.89749581235054123450E-11, -5.58974346219658380687E-10, -3.83538038596423702205E-9, -2.63146884688951950684E-8,
    -2.51223623787020892529E-7,  -3.88256480887769039346E-6,  -1.10588938762623716291E-4, -9.76109749136146840777E-3,
    7.78576235018280120474E-1};
  return a <= T(8) ? chbevl(a / T(2) - T(2), A) : chbevl(T(32) / a - T(2), B);
}

/// exp(-|x|) I0(x) (even).
template <std::floating_point T>
KILN_HD_INLINE T bessel_i0e(T x) {
  const T a = m_fabs(x);
  return a <= T(8) ? i0e_series(a) : i0e_series(a) / m_sqrt(a);
}
/// I0(x), the zeroth-order modified Bessel function of the first kind (even).
template <std::floating_point T>
KILN_HD_INLINE T bessel_i0(T x) {
  const T a = m_fabs(x);
  return a <= T(8) ? m_exp(a) * i0e_series(a) : m_exp(a) * i0e_series(a) / m_sqrt(a);
}
/// exp(-|x|) I1(x) (odd).
template <std::floating_point T>
KILN_HD_INLINE T bessel_i1e(T x) {
  const T a = m_fabs(x);
  const T r = a <= T(8) ? i1e_series(a) * a : i1e_series(a) / m_sqrt(a);
  return x < T(0) ? -r : r;
}
/// I1(x), the first-order modified Bessel function of the first kind (odd).
template <std::floating_point T>
KILN_HD_INLINE T bessel_i1(T x) {
  const T a = m_fabs(x);
  const T r = a <= T(8) ? m_exp(a) * a * i1e_series(a) : (m_exp(a) * i1e_series(a)) / m_sqrt(a);
  return x < T(0) ? -r : r;
}

/// The standard normal's inverse CDF on [0, 1] (Cephes ndtri): -inf at 0, inf at 1, NaN
/// outside; a rational function of y - 1/2 in the centre, of 1 / sqrt(-2 log y) in the tails.
template <std::floating_point T>
KILN_HD_INLINE T ndtri(T y0) {
  static constexpr double P0[] = {-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
                           1.39312609387279679503E1, -1.23916583867381258016E0};
  static constexpr double Q0[] = {1.0,
                           1.95448858338141759834E0,  4.67627912898881538453E0, 8.63602421390890590575E1,
                           -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
                           1.59056225126211695515E1,  -1.18331621121330003142E0};
  static constexpr double P1[] = {4.05544892305962419923E0,  3.15251094599893866154E1,  5.71628192246421288162E1,
                           4.40805073893200834700E1,  1.46849561928858024014E1,  2.18663306850790267539E0,
                           -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4};
  static constexpr double Q1[] = {1.0,
                           1.57799883256466749731E1,  4.53907635128879210584E1,  4.13172038254672030440E1,
                           1.50425385692907503408E1,  2.50464946208309415979E0,  -1.42182922854787788574E-1,
                           -3.80806407691578277194E-2, -9.33259480895457427372E-4};
  static constexpr double P2[] = {3.23774891776946035970E0,  6.91522889068984211695E0,  3.93881025292474443415E0,
                           1.33303460815807542389E0,  2.01485389549179081538E-1, 1.23716634817820021358E-2,
                           3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9};
  static constexpr double Q2[] = {1.0,
                           6.02427039364742014255E0,  3.67983563856160859403E0,  1.37702099489081330271E0,
                           2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
                           2.89247864745380683936E-6, 6.79019408009981274425E-9};
  constexpr double kExpM2 = 0.13533528323661269189;  // exp(-2)
  if (y0 == T(0)) return -std::numeric_limits<T>::infinity();
  if (y0 == T(1)) return std::numeric_limits<T>::infinity();
  if (!(y0 > T(0) && y0 < T(1))) return std::numeric_limits<T>::quiet_NaN();
  bool negate = true;
  T y = y0;
  if (y > T(1) - T(kExpM2)) {
    y = T(1) - y;
    negate = false;
  }
  if (y > T(kExpM2)) {
    y = y - T(0.5);
    const T y2 = y * y;
    return (y + y * (y2 * polevl(y2, P0) / polevl(y2, Q0))) * T(2.50662827463100050242);  // * sqrt(2 pi)
  }
  const T x = m_sqrt(T(-2) * m_log(y));
  const T x0 = x - m_log(x) / x;
  const T z = T(1) / x;
  const T x1 = x < T(8) ? z * polevl(z, P1) / polevl(z, Q1) : z * polevl(z, P2) / polevl(z, Q2);
  return negate ? -(x0 - x1) : x0 - x1;
}

/// Where erfc(u) is still a normal number with room to spare: u < 26 in double, 9 in float.
template <std::floating_point T>
KILN_HD_INLINE constexpr T erfc_normal_limit() {
  return sizeof(T) == sizeof(float) ? T(9) : T(26);
}

/// log of the standard normal CDF: log1p(-erfc(x / sqrt 2) / 2) from -1 up; below,
/// log(erfc(t) / 2) with t = -x / sqrt 2 while erfc(t) is a normal number, and the
/// asymptotic series of log erfc(t) = -t^2 - log(t sqrt(pi)) + log(1 - 1/(2t^2) + 3/(4t^4) - ...)
/// beyond (t >= 26 in double, 9 in float, where eight terms reach the last bit).
template <std::floating_point T>
KILN_HD_INLINE T log_ndtr(T x) {
  const T t = x * T(0.70710678118654752440);
  if (!(x < T(-1))) return m_log1p(-m_erfc(t) / T(2));
  const T u = -t;
  if (u < erfc_normal_limit<T>()) return m_log(m_erfc(u) / T(2));
  const T r = T(1) / (T(2) * u * u);
  T term = T(1), s = T(1);
  for (int k = 1; k <= 8; ++k) {
    term *= -T(2 * k - 1) * r;
    s += term;
  }
  return -u * u - m_log(u) - T(0.57236494292470008707) + m_log(s) - T(kLn2);  // log(sqrt(pi)) = 0.5724
}

/// e^(-x^2 / 2) without the rounding of x^2 magnified by exp (Cephes' expx2): x = h + l with h
/// a multiple of 1/128 (few bits below 2^19, so h^2 / 2 is exact) and exp sees the rest,
/// 2hl + l^2, separately.
template <std::floating_point T>
KILN_HD_INLINE T exp_minus_half_square(T x) {
  const T a = m_fabs(x);
  const T h = m_floor(a * T(128) + T(0.5)) / T(128);
  const T l = a - h;
  return m_exp(-(h * h) / T(2)) * m_exp(-(T(2) * h * l + l * l) / T(2));
}

/// d log_ndtr / dx = phi(x) / Phi(x) (the normal density over its CDF), without the
/// cancellation of e^(-(log_ndtr(x) + x^2 / 2)): the density through exp_minus_half_square, the
/// CDF through erfc, and for x below -26 sqrt 2 (-9 sqrt 2 in float; where both underflow) the asymptotic series
/// of Mills' ratio, phi(x) / Phi(x) = t / (1 - 1/t^2 + 3/t^4 - 15/t^6 + ...), t = -x.
template <std::floating_point T>
KILN_HD_INLINE T log_ndtr_grad(T x) {
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  const T t = x * T(0.70710678118654752440);
  if (!(x < T(-1))) return exp_minus_half_square(x) * T(kInvSqrt2Pi) / (T(1) - m_erfc(t) / T(2));
  const T u = -t;
  if (u < erfc_normal_limit<T>()) return exp_minus_half_square(x) * T(2 * kInvSqrt2Pi) / m_erfc(u);
  const T r = T(1) / (x * x);
  T term = T(1), s = T(1);
  for (int k = 1; k <= 8; ++k) {
    term *= -T(2 * k - 1) * r;
    s += term;
  }
  return -x / s;
}

/// sin(pi x) / (pi x), 1 at 0.
template <std::floating_point T>
KILN_HD_INLINE T sinc(T x) {
  if (x == T(0)) return T(1);
  const T p = T(kPi) * x;
  return m_sin(p) / p;
}
/// d sinc / dx = (pi x cos(pi x) - sin(pi x)) / (pi x^2) times g, 0 where pi x^2 is 0 (x = 0,
/// or so small that it underflows): PyTorch's sinc_backward, operation by operation.
template <std::floating_point T>
KILN_HD_INLINE T sinc_grad(T g, T x) {
  const T p = x * T(kPi), den = x * x * T(kPi);
  return den == T(0) ? T(0) : g * (p * m_cos(p) - m_sin(p)) / den;
}

/// x tanh(softplus(x)) (Misra's mish, PyTorch's formula: log1p(exp(x)), no threshold).
template <std::floating_point T>
KILN_HD_INLINE T mish(T x) {
  return x * fast_tanh(m_log1p(m_exp(x)));
}
/// tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x).
template <std::floating_point T>
KILN_HD_INLINE T mish_grad(T x) {
  const T sg = T(1) / (T(1) + m_exp(-x));
  const T ts = fast_tanh(m_log1p(m_exp(x)));
  return ts + x * sg * (T(1) - ts * ts);
}

/// -x log x: 0 at 0, -inf below 0, NaN stays (torch.special.entr).
template <std::floating_point T>
KILN_HD_INLINE T entr(T x) {
  if (x != x) return x;
  if (x > T(0)) return -x * m_log(x);
  if (x == T(0)) return T(0);
  return -std::numeric_limits<T>::infinity();
}

}  // namespace kiln::math
