// The fused attention kernels' tile bodies (ops/cuda/flash_attention.h) run on the CPU: each
// thread block of the GPU's grid emulated by 128 std::threads joined at every
// __syncthreads() (tests/cuda/block_emulation.h), the Tensor Core tile GEMM replaced by the
// scalar one with the same contract. Forward, both backward passes, causal and not, Tq != Tk,
// partial tiles, both tile sizes and the GPT's packed qkv layout, against kiln's CPU
// attention in float64 on the same (rounded) inputs; float32 with the tile sizes of the
// TF32 kernels (the TF32 rounding itself happens in the GPU's WMMA loads, not here). No GPU needed: the code under test is
// the kernels' own; only the WMMA calls are not (they run in the GPU check's parity test).
#include <doctest/doctest.h>
#include <cmath>
#include <vector>
#include "block_emulation.h"
#include "kiln/kiln.h"
#include "kiln/ops/cuda/flash_attention.h"

using namespace kiln;
namespace flash = kiln::cuda::flash;
using kiln::test::EmulatedBlock;
using kiln::test::run_block;

namespace {

// Largest |got - ref| / (1 + |ref|) over two tensors of one shape.
double worst(const Tensor& got, const Tensor& ref) {
  const std::vector<double> g = got.contiguous().to(DType::float64).to_vector<double>();
  const std::vector<double> r = ref.contiguous().to(DType::float64).to_vector<double>();
  REQUIRE(g.size() == r.size());
  double w = 0;
  for (size_t i = 0; i < g.size(); ++i)
    w = std::max(w, std::isfinite(g[i]) ? std::fabs(g[i] - r[i]) / (1 + std::fabs(r[i])) : INFINITY);
  return w;
}

template <class T>
double tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  else if constexpr (std::is_same_v<T, Half>) return 4e-3;
  else return 3e-2;  // bfloat16: 8 bits of mantissa in P, dS and the results
}

// Every block of one kernel's grid, one after another, each in its own emulated block.
template <class F>
void run_grid(int64_t B, int64_t tiles, int tile, int E, int Ev, int kind, size_t elem, F body) {
  std::vector<unsigned char> smem(flash::SmemLayout(kind, tile, E, Ev, elem).bytes);
  for (int64_t bh = 0; bh < B; ++bh)
    for (int64_t t = 0; t < tiles; ++t)
      run_block(flash::kThreads, [&](const EmulatedBlock& b) { body(b, smem.data(), bh, t); });
}

struct Case {
  int64_t B, Tq, Tk, E, Ev;
  bool causal;
};

// The forward's grid, then the backward's two (p holds every pointer and layout).
template <class T>
void run_kernels(const flash::Params<T>& p) {
  const int tile = p.tile;
  const int64_t qtiles = (p.Tq + tile - 1) / tile, ktiles = (p.Tk + tile - 1) / tile;
  run_grid(p.B, qtiles, tile, p.E, p.Ev, 0, sizeof(T),
           [&](const EmulatedBlock& b, unsigned char* s, int64_t bh, int64_t t) {
             flash::forward_tile<T, flash::ScalarMma>(b, s, p, bh, t);
           });
  run_grid(p.B, qtiles, tile, p.E, p.Ev, 1, sizeof(T),
           [&](const EmulatedBlock& b, unsigned char* s, int64_t bh, int64_t t) {
             flash::backward_dq_tile<T, flash::ScalarMma>(b, s, p, bh, t);
           });
  run_grid(p.B, ktiles, tile, p.E, p.Ev, 2, sizeof(T),
           [&](const EmulatedBlock& b, unsigned char* s, int64_t bh, int64_t t) {
             flash::backward_dkv_tile<T, flash::ScalarMma>(b, s, p, bh, t);
           });
}

// Params of one call: scale 1 / sqrt(E), the tile size of the GPU launcher, out = o as the
// backward's saved output.
template <class T>
flash::Params<T> params(int64_t B, int64_t Tq, int64_t Tk, int64_t E, int64_t Ev, bool causal) {
  flash::Params<T> p;
  p.B = B, p.Tq = Tq, p.Tk = Tk, p.E = int(E), p.Ev = int(Ev), p.tile = flash::tile_rows(E, Ev, sizeof(T));
  p.scale = float(1.0 / std::sqrt(double(E))), p.causal = causal;
  return p;
}

// lse of the float64 reference: log sum over visible keys of exp(scale q_i . k_j).
Tensor reference_lse(const Case& c, const Tensor& q, const Tensor& k) {
  Tensor s = matmul(q.to(DType::float64), k.to(DType::float64).transpose(1, 2)) * (1.0 / std::sqrt(double(c.E)));
  std::vector<double> sv = s.contiguous().to_vector<double>(), out(size_t(c.B * c.Tq));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t i = 0; i < c.Tq; ++i) {
      const int64_t n = c.causal ? std::min(i + 1, c.Tk) : c.Tk;
      const double* row = &sv[size_t((b * c.Tq + i) * c.Tk)];
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, row[j]);
      for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - m);
      out[size_t(b * c.Tq + i)] = m + std::log(sum);
    }
  return from_vector(out, {c.B, c.Tq});
}

}  // namespace

TEST_CASE("flash attention: shapes it takes, tile sizes and shared-memory layouts") {
  CHECK(flash::supported(64, 64));
  CHECK(flash::supported(16, 128));
  CHECK_FALSE(flash::supported(8, 8));    // below a Tensor Core tile
  CHECK_FALSE(flash::supported(40, 40));  // not a multiple of 16
  CHECK_FALSE(flash::supported(144, 64));
  CHECK(flash::tile_rows(64, 64) == 64);
  CHECK(flash::tile_rows(32, 16) == 64);
  CHECK(flash::tile_rows(80, 64) == 32);
  CHECK(flash::tile_rows(64, 64, 4) == 32);  // float32 (TF32) tiles take twice the bytes
  for (int E = 16; E <= flash::kMaxHeadDim; E += 16)
    for (int Ev = 16; Ev <= flash::kMaxHeadDim; Ev += 16)
      for (int kind = 0; kind < 3; ++kind)
        for (size_t elem : {size_t(2), size_t(4)}) {
          const int tile = flash::tile_rows(E, Ev, elem);
          const flash::SmemLayout L(kind, tile, E, Ev, elem);
          INFO("E " << E << " Ev " << Ev << " kind " << kind << " elem " << elem);
          // WMMA: 16-bit leading dimensions multiples of 8, float ones of 4; every array 128-byte aligned
          CHECK(L.ld_e % 8 == 0);
          CHECK(L.ld_ev % 8 == 0);
          CHECK(L.ld_t % 8 == 0);
          CHECK(L.ldf_e % 4 == 0);
          CHECK(L.ldf_ev % 4 == 0);
          CHECK(L.ldf_t % 4 == 0);
          for (size_t off : {L.q, L.k, L.v, L.dout, L.s, L.dp, L.p, L.ds, L.acc_e, L.acc_ev, L.row_a, L.row_b, L.row_c})
            CHECK((off == ~size_t(0) || off % 128 == 0));
          // every kernel fits an A100's opt-in shared memory (163 KB; an H100/H200 has 227 KB)
          CHECK(L.bytes <= size_t(163 * 1024));
        }
  // the arrays of one kernel do not overlap: the forward's are in increasing order
  const flash::SmemLayout f(0, 64, 64, 64, 2);
  CHECK(f.k >= f.q + 64 * 72 * 2);
  CHECK(f.acc_ev >= f.p + 64 * 72 * 2);
  CHECK(f.bytes >= f.row_c + 64 * 4);
}

TEST_CASE_TEMPLATE("flash attention: emulated blocks against the CPU's attention", T, float, Half, BFloat16) {
  manual_seed(21);
  const DType dt = dtype_v<T>;
  for (const Case& c : std::vector<Case>{{2, 70, 70, 16, 16, true},    // two query tiles, the last partial
                                         {2, 70, 70, 16, 16, false},
                                         {3, 5, 9, 32, 16, false},     // Tq != Tk, one partial tile
                                         {1, 40, 100, 16, 32, true},   // more keys than queries
                                         {1, 100, 40, 32, 16, true},   // more queries than keys
                                         {1, 45, 45, 96, 80, true}}) { // tile 32 (head dims above 64)
    INFO("B " << c.B << " Tq " << c.Tq << " Tk " << c.Tk << " E " << c.E << " Ev " << c.Ev << " causal " << c.causal);
    Tensor q = randn({c.B, c.Tq, c.E}).to(dt), k = randn({c.B, c.Tk, c.E}).to(dt), v = randn({c.B, c.Tk, c.Ev}).to(dt);
    Tensor g = randn({c.B, c.Tq, c.Ev}).to(dt);
    Tensor out = zeros({c.B, c.Tq, c.Ev}, {.dtype = dt}), dq = zeros(q.shape(), {.dtype = dt}),
           dk = zeros(k.shape(), {.dtype = dt}), dv = zeros(v.shape(), {.dtype = dt});
    Tensor lse = zeros({c.B, c.Tq}), dsum = zeros({c.B, c.Tq});
    flash::Params<T> p = params<T>(c.B, c.Tq, c.Tk, c.E, c.Ev, c.causal);
    const AttnLayout lq = AttnLayout::contiguous(c.Tq, c.E), lk = AttnLayout::contiguous(c.Tk, c.E),
                     lv = AttnLayout::contiguous(c.Tk, c.Ev), lo = AttnLayout::contiguous(c.Tq, c.Ev);
    p.q = q.data<T>(), p.k = k.data<T>(), p.v = v.data<T>(), p.lq = lq, p.lk = lk, p.lv = lv;
    p.o = out.data<T>(), p.lo = lo, p.out = out.data<T>(), p.lout = lo, p.dout = g.data<T>(), p.ldout = lo;
    p.dq = dq.data<T>(), p.dk = dk.data<T>(), p.dv = dv.data<T>(), p.ldq = lq, p.ldk = lk, p.ldv = lv;
    p.lse = lse.data<float>(), p.dsum = dsum.data<float>();
    run_kernels(p);

    Tensor q64 = q.to(DType::float64).requires_grad_(), k64 = k.to(DType::float64).requires_grad_(),
           v64 = v.to(DType::float64).requires_grad_();
    Tensor ref = scaled_dot_product_attention(q64, k64, v64, c.causal);
    ref.backward(g.to(DType::float64));
    CHECK(worst(out, ref) <= tolerance<T>());
    CHECK(worst(lse, reference_lse(c, q, k)) <= (std::is_same_v<T, float> ? 1e-6 : 1e-5));
    CHECK(worst(dsum, sum(g.to(DType::float64) * out.to(DType::float64), {2})) <= 1e-5);
    CHECK(worst(dq, q64.grad()) <= tolerance<T>());
    CHECK(worst(dk, k64.grad()) <= tolerance<T>());
    CHECK(worst(dv, v64.grad()) <= tolerance<T>());

    // without dq (pass 1 still writes D), without dk: the rest is unchanged
    Tensor dq2 = full(q.shape(), 7.0, {.dtype = dt}), dv2 = zeros(v.shape(), {.dtype = dt});
    Tensor dsum2 = zeros({c.B, c.Tq});
    p.dq = nullptr, p.dk = nullptr, p.dv = dv2.data<T>(), p.dsum = dsum2.data<float>();
    run_kernels(p);
    CHECK(worst(dsum2, dsum) == 0);
    CHECK(worst(dv2, dv) == 0);
    CHECK(worst(dq2, full(q.shape(), 7.0)) == 0);
  }
}

TEST_CASE_TEMPLATE("flash attention: the GPT's packed qkv read and written in place", T, float, BFloat16) {
  manual_seed(22);
  const DType dt = dtype_v<T>;
  for (bool causal : {true, false}) {
    const int64_t B = 2, T_ = 67, H = 3, d = 32, C = H * d;
    Tensor qkv = randn({B, T_, 3 * C}).to(dt), g = randn({B, T_, C}).to(dt);
    Tensor out = zeros({B, T_, C}, {.dtype = dt}), dx = zeros({B, T_, 3 * C}, {.dtype = dt});
    Tensor lse = zeros({B * H, T_}), dsum = zeros({B * H, T_});
    flash::Params<T> p = params<T>(B * H, T_, T_, d, d, causal);
    const AttnLayout lin{H, T_ * 3 * C, d, 3 * C}, lout{H, T_ * C, d, C};
    const T* x = qkv.data<T>();
    p.q = x, p.k = x + C, p.v = x + 2 * C, p.lq = lin, p.lk = lin, p.lv = lin;
    p.o = out.data<T>(), p.lo = lout, p.out = out.data<T>(), p.lout = lout, p.dout = g.data<T>(), p.ldout = lout;
    T* dxp = dx.data<T>();
    p.dq = dxp, p.dk = dxp + C, p.dv = dxp + 2 * C, p.ldq = lin, p.ldk = lin, p.ldv = lin;
    p.lse = lse.data<float>(), p.dsum = dsum.data<float>();
    run_kernels(p);

    Tensor x64 = qkv.to(DType::float64).requires_grad_();
    Tensor ref = scaled_dot_product_attention_packed(x64, H, causal);
    ref.backward(g.to(DType::float64));
    INFO("causal " << causal);
    CHECK(worst(out, ref) <= tolerance<T>());
    CHECK(worst(dx, x64.grad()) <= tolerance<T>());
  }
}
