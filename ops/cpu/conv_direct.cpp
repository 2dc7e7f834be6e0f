// conv2d on the CPU directly in vector registers, for first layers of few input channels.
// conv.cpp chooses it for stride-1, ungrouped, non-pointwise convolutions of at most 4
// input channels: the weight gradient (except a bf16 one where the bf16 GEMM runs it, see
// conv.cpp), the forward up to 16 output channels.
#include <algorithm>
#include <cstring>
#include <vector>
#include "kiln/ops/cpu/conv_algos.h"

namespace kiln::conv_cpu {

// ------------------------------------------------------------------ direct, few input channels
//
// A stride-1 convolution of 1-4 input channels (a first layer such as LeNet's 1 -> 6 or
// ConvNet's 1 -> 32) runs directly on the padded plane in the wide layout, in vector
// registers: the forward (up to 16 outputs) keeps a block of output channels times two
// vectors of a wide output row in accumulators and adds each tap's shifted input vectors
// times a broadcast weight; the weight gradient keeps a block of (output channel, tap)
// pairs, each a vector of partial sums over the wide positions, for ALL the thread's
// samples, and sums the lanes once at the end. im2col would copy the input C*kH*kW times
// (25x for a 5x5 kernel) for a GEMM of depth 25 and 6 outputs, and the weight-gradient
// GEMM (6 x 25, K = the wide row) spends its time transposing the 25 tap rows into the
// packed layout: measured 3x slower for LeNet's conv1, 2.5x for ConvNet's. The input gradient
// (only when the input needs one) is the wide layout's GEMM.

namespace {

#if defined(__AVX512F__)
constexpr int kDirectOut = 8;   // output channels per forward block (2 x 8 accumulators)
constexpr int kDirectWOut = 4;  // output channels per weight-gradient block (4 x 4 accumulators)
#else  // 16 vector registers
constexpr int kDirectOut = 6;
constexpr int kDirectWOut = 2;
#endif
constexpr int kDirectWTaps = 4;  // taps per weight-gradient block

/// Sizes of the direct kernels' per-thread buffers: the wide row rounded up to two vectors
/// (Lr), and the padded input with a zero tail that the last vectors of every tap may read.
template <class T>
struct DirectPlan {
  Wide v;
  int64_t P, Lr, xlen, ntaps;
  std::vector<int64_t> taps;  // offset of tap (c, kh, kw) in the padded planes
  explicit DirectPlan(const Conv2dGeom& g) : v(wide_of(g)) {
    P = v.Hp * v.Wp;
    Lr = (v.L2 + 2 * kVecLanes<T> - 1) / (2 * kVecLanes<T>) * (2 * kVecLanes<T>);
    taps = tap_rows(g, v);
    ntaps = int64_t(taps.size());
    xlen = std::max(g.C * P, taps.back() + Lr);
  }
  /// The padded sample in xpad (whose border and tail stay zero from its allocation).
  template <class X>
  const T* pad(const Conv2dGeom& g, const X* xn, std::vector<T>& xpad) const {
    pad_channels(xn, g, v, 0, g.C, xpad.data());
    return xpad.data();
  }
};

/// out rows [o0, o0 + OB) (O, Lr) = bias + sum over taps t of wt[t][o] * xp[taps[t] + j].
template <class T, int OB>
void direct_forward_block(const T* xp, const DirectPlan<T>& d, const T* wt, int64_t O, int64_t o0, const T* bias,
                          T* out) {
  using V = vec_t<T>;
  constexpr int64_t VL = kVecLanes<T>;
  for (int64_t j = 0; j < d.Lr; j += 2 * VL) {
    V a0[OB], a1[OB];
    for (int i = 0; i < OB; ++i) {
      a0[i] = V{} + (bias ? bias[o0 + i] : T(0));
      a1[i] = a0[i];
    }
    for (int64_t t = 0; t < d.ntaps; ++t) {
      const T* s = xp + d.taps[size_t(t)] + j;
      const V x0 = load_vec(s), x1 = load_vec(s + VL);
      const T* wr = wt + t * O + o0;
      for (int i = 0; i < OB; ++i) {
        a0[i] += wr[i] * x0;
        a1[i] += wr[i] * x1;
      }
    }
    for (int i = 0; i < OB; ++i) {
      store_vec(out + (o0 + i) * d.Lr + j, a0[i]);
      store_vec(out + (o0 + i) * d.Lr + j + VL, a1[i]);
    }
  }
}

template <class T, int OB = kDirectOut>
void direct_forward_rows(const T* xp, const DirectPlan<T>& d, const T* wt, int64_t O, int64_t o0, const T* bias,
                         T* out) {
  if constexpr (OB > 0) {
    if (O - o0 >= OB) return direct_forward_block<T, OB>(xp, d, wt, O, o0, bias, out);
    direct_forward_rows<T, OB - 1>(xp, d, wt, O, o0, bias, out);
  }
}

}  // namespace

/// Forward over samples [lo, hi): y (O, OH, OW) per sample.
template <class T, class X>
void conv2d_forward_direct(const Conv2dGeom& g, const X* x, const T* w, const T* bias, X* y, int64_t lo,
                           int64_t hi) {
  const DirectPlan<T> d(g);
  const int64_t L = g.OH * g.OW;
  std::vector<T> wt(size_t(d.ntaps * g.O));  // (taps, O): a tap's weights side by side
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t t = 0; t < d.ntaps; ++t) wt[size_t(t * g.O + o)] = w[o * d.ntaps + t];
  std::vector<T> xpad(size_t(d.xlen)), out(size_t(g.O * d.Lr));
  for (int64_t n = lo; n < hi; ++n) {
    const T* xp = d.pad(g, x + n * g.C * g.H * g.W, xpad);
    for (int64_t o0 = 0; o0 < g.O; o0 += kDirectOut)
      direct_forward_rows<T>(xp, d, wt.data(), g.O, o0, bias, out.data());
    wide_to_dense(out.data(), g, d.v.Wp, d.Lr, static_cast<const T*>(nullptr), y + n * g.O * L);
  }
}

namespace {

/// acc[o][t] += dyw[o][j] * xp[taps[t] + j] (vectors over j) for o in [o0, o0 + OB) and
/// taps [t0, t0 + kDirectWTaps) (the tap list is padded to a multiple with dummy taps).
template <class T, int OB>
void direct_wgrad_block(const T* xp, const DirectPlan<T>& d, const int64_t* taps, int64_t ntp, const T* dyw,
                        int64_t o0, int64_t t0, vec_t<T>* acc) {
  using V = vec_t<T>;
  constexpr int TB = kDirectWTaps;
  constexpr int64_t VL = kVecLanes<T>;
  V a[OB][TB];
  for (int i = 0; i < OB; ++i)
    for (int k = 0; k < TB; ++k) a[i][k] = acc[(o0 + i) * ntp + t0 + k];
  const T* s[TB];
  for (int k = 0; k < TB; ++k) s[k] = xp + taps[t0 + k];
  for (int64_t j = 0; j < d.Lr; j += VL) {
    V xv[TB];
    for (int k = 0; k < TB; ++k) xv[k] = load_vec(s[k] + j);
    for (int i = 0; i < OB; ++i) {
      const V dv = load_vec(dyw + (o0 + i) * d.Lr + j);
      for (int k = 0; k < TB; ++k) a[i][k] += dv * xv[k];
    }
  }
  for (int i = 0; i < OB; ++i)
    for (int k = 0; k < TB; ++k) acc[(o0 + i) * ntp + t0 + k] = a[i][k];
}

template <class T, int OB = kDirectWOut>
void direct_wgrad_rows(const T* xp, const DirectPlan<T>& d, const int64_t* taps, int64_t ntp, const T* dyw,
                       int64_t O, int64_t o0, int64_t t0, vec_t<T>* acc) {
  if constexpr (OB > 0) {
    if (O - o0 >= OB) return direct_wgrad_block<T, OB>(xp, d, taps, ntp, dyw, o0, t0, acc);
    direct_wgrad_rows<T, OB - 1>(xp, d, taps, ntp, dyw, O, o0, t0, acc);
  }
}

}  // namespace

/// Weight (and bias) gradient over samples [lo, hi), added to dw (O, C*kH*kW) and db (O).
template <class T, class X>
void conv2d_wgrad_direct(const Conv2dGeom& g, const X* x, const X* dy, T* dw, T* db, int64_t lo, int64_t hi) {
  const DirectPlan<T> d(g);
  const int64_t L = g.OH * g.OW, ntp = (d.ntaps + kDirectWTaps - 1) / kDirectWTaps * kDirectWTaps;
  std::vector<int64_t> taps(d.taps);
  taps.resize(size_t(ntp), 0);  // dummy taps: read the plane's start, their sums are dropped
  std::vector<vec_t<T>> acc(size_t(g.O * ntp), vec_t<T>{});
  std::vector<T> xpad(size_t(d.xlen)), dyw(size_t(g.O * d.Lr));  // zero junk columns and tail
  for (int64_t n = lo; n < hi; ++n) {
    dense_to_wide(dy + n * g.O * L, g, d.v.Wp, d.Lr, dyw.data(), db);
    if (!dw) continue;
    const T* xp = d.pad(g, x + n * g.C * g.H * g.W, xpad);
    for (int64_t o0 = 0; o0 < g.O; o0 += kDirectWOut)
      for (int64_t t0 = 0; t0 < ntp; t0 += kDirectWTaps)
        direct_wgrad_rows<T>(xp, d, taps.data(), ntp, dyw.data(), g.O, o0, t0, acc.data());
  }
  if (dw)
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t t = 0; t < d.ntaps; ++t) {
        T lanes[kVecLanes<T>];
        std::memcpy(lanes, &acc[size_t(o * ntp + t)], sizeof lanes);
        dw[o * d.ntaps + t] += reduce_vec_lanes(lanes);
      }
}

#define KILN_DIRECT(T, X)                                                                                       \
  template void conv2d_forward_direct<T, X>(const Conv2dGeom&, const X*, const T*, const T*, X*, int64_t, int64_t); \
  template void conv2d_wgrad_direct<T, X>(const Conv2dGeom&, const X*, const X*, T*, T*, int64_t, int64_t);
KILN_DIRECT(float, float)
KILN_DIRECT(double, double)
KILN_DIRECT(float, Half)
KILN_DIRECT(float, BFloat16)
#undef KILN_DIRECT

}  // namespace kiln::conv_cpu
