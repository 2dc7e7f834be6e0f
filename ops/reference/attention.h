// The reference scaled dot-product attention: scores, softmax, weighted sum, written out
// for one (batch x head) slice at a time, the T x T score matrix materialised. kiln's CPU
// kernel (ops/cpu/nn.cpp) blocks the rows and reuses buffers; a fused GPU kernel never
// stores the scores at all. They all compute this. Oracle of the attention tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::reference {

/// For each of B slices: out (Tq, Ev) = softmax(q k^T * scale + mask) v, q (Tq, E),
/// k (Tk, E), v (Tk, Ev), contiguous, slices one after the other. `causal` masks key j > i
/// (the query's own position and earlier are kept; query i sees keys 0..i). Sums in double.
template <class T>
void attention(int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, const T* q, const T* k, const T* v,
               double scale, bool causal, T* out) {
  std::vector<double> p(static_cast<size_t>(Tk));
  for (int64_t b = 0; b < B; ++b) {
    const T* qb = q + b * Tq * E;
    const T* kb = k + b * Tk * E;
    const T* vb = v + b * Tk * Ev;
    for (int64_t i = 0; i < Tq; ++i) {
      double m = -INFINITY;
      for (int64_t j = 0; j < Tk; ++j) {
        double s = 0;
        for (int64_t e = 0; e < E; ++e) s += double(qb[i * E + e]) * double(kb[j * E + e]);
        p[size_t(j)] = causal && j > i ? -INFINITY : s * scale;
        m = std::fmax(m, p[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < Tk; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - m));
      for (int64_t e = 0; e < Ev; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < Tk; ++j) acc += p[size_t(j)] / sum * double(vb[j * Ev + e]);
        out[(b * Tq + i) * Ev + e] = T(acc);
      }
    }
  }
}

}  // namespace kiln::reference
