// The index math of the GPU loops, on the CPU: division by invariant integers, dim
// merging, strided offsets, and the loop bodies the kernels run (core/cuda/loops.h),
// driven over an emulated grid of (block, thread) indices. Every output element must be
// written exactly once, at the right offset, with the CPU op's value. No GPU needed.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>
#include "kiln/core/cuda/index_math.h"
#include "kiln/core/cuda/loops.h"
#include "kiln/core/strided.h"
#include "gradcheck.h"
#include "kiln/ops/elementwise_functors.h"
#include "kiln/ops/cuda/index_math.h"

using namespace kiln;
using namespace kiln::cuda;
using namespace kiln::elementwise;

namespace {

// ---------------------------------------------------------------- write counting

// Where the current emulated launch writes: counts per output element.
struct WriteLog {
  const char* base = nullptr;
  size_t elem = 1;
  std::vector<int> counts;
  int out_of_range = 0, misaligned = 0;
  void reset(const void* b, size_t e, int64_t n) {
    base = static_cast<const char*>(b);
    elem = e;
    counts.assign(size_t(n), 0);
    out_of_range = misaligned = 0;
  }
  void hit(const void* p, int k) {
    const int64_t off = static_cast<const char*>(p) - base;
    for (int j = 0; j < k; ++j) {
      int64_t i = off / int64_t(elem) + j;
      if (off % int64_t(elem) != 0 || i < 0 || i >= int64_t(counts.size())) ++out_of_range;
      else ++counts[size_t(i)];
    }
  }
  bool each_once() const {
    for (int c : counts)
      if (c != 1) return false;
    return out_of_range == 0;
  }
};
WriteLog g_log;

// The store policy of the emulated kernels: counts, checks vector alignment, then stores.
struct CountingStore {
  template <class T>
  static void store(T* p, const T& v) {
    g_log.hit(p, 1);
    *p = v;
  }
  template <class T, int VEC>
  static void store_vec(T* p, const VecOf<T, VEC>& v) {
    if (reinterpret_cast<uintptr_t>(p) % sizeof(VecOf<T, VEC>) != 0) ++g_log.misaligned;
    g_log.hit(p, VEC);
    PlainStore::store_vec(p, v);
  }
};

// Runs body(GridPos) for every (block, thread) of a launch, as the GPU would (in order).
template <class Body>
void run_grid(const LaunchConfig& c, const Body& body) {
  for (uint32_t b = 0; b < c.grid; ++b)
    for (uint32_t t = 0; t < c.block; ++t) body(GridPos{b, t, c.block, c.grid});
}

// The launch configurations every loop is tried with: the real one (many blocks) and
// small grids that make the grid-stride loop wrap several times.
std::vector<LaunchConfig> configs(int64_t items) {
  return {launch_config(items, 1056), launch_config(items, 3, 32), launch_config(items, 1, 7),
          launch_config(items, 5, 64)};
}

// Element strides of t broadcast to `shape` (0 on broadcast dims), as ops/helpers does.
Shape bstrides(const Tensor& t, const Shape& shape) {
  Shape s(shape.size(), 0);
  const size_t off = shape.size() - size_t(t.dim());
  for (size_t d = 0; d < size_t(t.dim()); ++d) s[off + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  return s;
}

// EwArgs for out and inputs broadcast to out's shape.
EwArgs ew_args(const Tensor& out, const std::vector<Tensor>& ins) {
  EwArgs a;
  a.ndim = int(out.dim());
  for (int d = 0; d < a.ndim; ++d) a.shape[d] = out.shape()[d];
  for (size_t k = 0; k <= ins.size(); ++k) {
    const Tensor& t = k == 0 ? out : ins[k - 1];
    Shape s = bstrides(t, out.shape());
    for (int d = 0; d < a.ndim; ++d) a.strides[k][d] = s[d];
    a.ptr[k] = t.raw_data();
  }
  return a;
}

bool close(double a, double b, double rtol, double atol) {
  if (a == b) return true;  // infinities too
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

// True when a (any dtype, any device-free CPU tensor) equals the reference within tolerances.
bool matches(const Tensor& got, const Tensor& ref, double rtol, double atol) {
  REQUIRE(got.shape() == ref.shape());
  std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  for (size_t i = 0; i < r.size(); ++i)
    if (!close(g[i], r[i], rtol, atol)) {
      MESSAGE("element ", i, ": loop gave ", g[i], ", CPU ", r[i]);
      return false;
    }
  return true;
}

// Runs the strided loop body of Loop (operand 0: the contiguous tensor `out`) over every
// emulated launch configuration and both index types; after each run every element must
// have been written once and `out` must match `ref`.
template <class Loop, class F>
void check_strided(const Tensor& out, const std::vector<Tensor>& ins, const F& f, const Tensor& ref, double rtol = 0,
                   double atol = 0) {
  constexpr int N = Loop::N;
  REQUIRE(out.is_contiguous());
  const EwArgs args = ew_args(out, ins);
  const LoopLayout<N> L = layout_from_args<N>(args);
  const int64_t n = out.numel();
  REQUIRE(L.numel == n);
  LoopPtrs<N> p;
  for (int k = 0; k < N; ++k) p.p[k] = args.ptr[k];
  for (const LaunchConfig& c : configs(n)) {
    for (int wide = 0; wide < 2; ++wide) {
      std::memset(out.raw_data(), 0xff, size_t(n) * out.element_size());  // NaN / garbage sentinel
      g_log.reset(out.raw_data(), sizeof(typename Loop::out_type), n);
      if (wide) {
        OffsetCalculator<N, uint64_t> calc(L);
        run_grid(c, [&](const GridPos& g) { Loop::template strided<CountingStore>(calc, uint64_t(n), p, f, g); });
      } else {
        OffsetCalculator<N, uint32_t> calc(L);
        run_grid(c, [&](const GridPos& g) { Loop::template strided<CountingStore>(calc, uint32_t(n), p, f, g); });
      }
      CHECK(g_log.each_once());
      CHECK(matches(out, ref, rtol, atol));
    }
  }
}

// The same for the contiguous body, vectorised (all operands contiguous and aligned) and
// element by element (pointers not aligned to the vector width).
template <class Loop, class F>
void check_contiguous(const Tensor& out, const std::vector<Tensor>& ins, const F& f, const Tensor& ref,
                      double rtol = 0, double atol = 0) {
  constexpr int N = Loop::N;
  LoopPtrs<N> p;
  p.p[0] = out.raw_data();
  for (int k = 1; k < N; ++k) {
    REQUIRE(ins[size_t(k - 1)].is_contiguous());
    p.p[k] = ins[size_t(k - 1)].raw_data();
  }
  const int64_t n = out.numel();
  for (const LaunchConfig& c : configs((n + Loop::kVec - 1) / Loop::kVec)) {
    std::memset(out.raw_data(), 0xff, size_t(n) * out.element_size());
    g_log.reset(out.raw_data(), sizeof(typename Loop::out_type), n);
    run_grid(c, [&](const GridPos& g) { Loop::template contiguous<CountingStore>(n, true, p, f, g); });
    CHECK(g_log.each_once());
    CHECK(g_log.misaligned == 0);
    CHECK(matches(out, ref, rtol, atol));
  }
  for (const LaunchConfig& c : configs(n)) {  // not aligned: element by element
    std::memset(out.raw_data(), 0xff, size_t(n) * out.element_size());
    g_log.reset(out.raw_data(), sizeof(typename Loop::out_type), n);
    run_grid(c, [&](const GridPos& g) { Loop::template contiguous<CountingStore>(n, false, p, f, g); });
    CHECK(g_log.each_once());
    CHECK(matches(out, ref, rtol, atol));
  }
}

}  // namespace

// ---------------------------------------------------------------- integer division

TEST_CASE("IntDivider<uint32_t> divides like / and % for every divisor kind") {
  std::mt19937 rng(1);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 300; ++d) divisors.push_back(d);
  for (uint32_t d : {511u, 512u, 513u, 65535u, 65536u, 65537u, 1000003u, (1u << 30) - 1, 1u << 30, (1u << 31) - 1})
    divisors.push_back(d);
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + rng() % ((1u << 31) - 1));
  for (uint32_t d : divisors) {
    IntDivider<uint32_t> div(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, (1u << 31) - 1, 1u << 31, 0xffffffffu};
    for (int i = 0; i < 60; ++i) ns.push_back(uint32_t(rng()));
    for (int i = 0; i < 20; ++i) ns.push_back(uint32_t(rng() % (1u << 16)));
    for (uint32_t n : ns) {
      uint32_t q, r;
      div.divmod(n, q, r);
      if (q != n / d || r != n % d) {
        FAIL_CHECK("d=", d, " n=", n, ": got q=", q, " r=", r);
        return;
      }
    }
  }
  IntDivider<uint64_t> big(uint64_t(3) << 33);
  uint64_t q, r;
  big.divmod((uint64_t(7) << 34) + 5, q, r);
  CHECK(q == ((uint64_t(7) << 34) + 5) / (uint64_t(3) << 33));
  CHECK(r == ((uint64_t(7) << 34) + 5) % (uint64_t(3) << 33));
}

// ---------------------------------------------------------------- layouts and offsets

namespace {
// A random strided view: a permuted, sliced (step 1 or 2) tensor, or an expanded one.
struct RandomView {
  Shape shape;
  std::vector<Shape> strides;  // per operand
};

RandomView random_view(std::mt19937& rng, int operands) {
  RandomView v;
  const int nd = 1 + int(rng() % 5);
  for (int d = 0; d < nd; ++d) v.shape.push_back(1 + int64_t(rng() % 6));
  for (int k = 0; k < operands; ++k) {
    Shape st(static_cast<size_t>(nd), 0);
    // start contiguous over a padded shape, then perturb
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; --d) {
      st[d] = acc;
      acc *= v.shape[d] + int64_t(rng() % 2);  // padding: a sliced view
    }
    for (int d = 0; d < nd; ++d) {
      int r = int(rng() % 6);
      if (r == 0) st[d] = 0;                    // broadcast
      else if (r == 1) st[d] *= 2;              // step 2
    }
    if (rng() % 3 == 0 && nd >= 2) std::swap(st[0], st[nd - 1]);  // transposed
    v.strides.push_back(st);
  }
  return v;
}
}  // namespace

TEST_CASE("merge_dims merges exactly like the CPU's StridedLayout") {
  std::mt19937 rng(2);
  for (int it = 0; it < 400; ++it) {
    RandomView v = random_view(rng, 3);
    const int64_t* sp[3] = {v.strides[0].data(), v.strides[1].data(), v.strides[2].data()};
    LoopLayout<3> L = merge_dims<3>(int(v.shape.size()), v.shape.data(), sp);
    StridedLayout<3> C(v.shape, {v.strides[0], v.strides[1], v.strides[2]});
    REQUIRE(size_t(L.ndim) == C.shape.size());
    for (int d = 0; d < L.ndim; ++d) {
      CHECK(L.sizes[d] == C.shape[size_t(d)]);
      for (int k = 0; k < 3; ++k) CHECK(L.strides[k][d] == C.strides[size_t(k)][size_t(d)]);
    }
    CHECK(L.numel == shape_numel(v.shape));
  }
  // a contiguous tensor is one dim; a scalar is one dim of size 1
  const int64_t shape[3] = {4, 5, 6}, st[3] = {30, 6, 1};
  const int64_t* sp[2] = {st, st};
  LoopLayout<2> L = merge_dims<2>(3, shape, sp);
  CHECK(L.ndim == 1);
  CHECK(L.sizes[0] == 120);
  CHECK(is_contiguous_loop(L));
  LoopLayout<2> S = merge_dims<2>(0, shape, sp);
  CHECK(S.ndim == 1);
  CHECK(S.numel == 1);
  CHECK(is_contiguous_loop(S));
}

TEST_CASE("OffsetCalculator gives every operand's offset at every linear index") {
  std::mt19937 rng(3);
  for (int it = 0; it < 300; ++it) {
    RandomView v = random_view(rng, 3);
    const int nd = int(v.shape.size());
    const int64_t* sp[3] = {v.strides[0].data(), v.strides[1].data(), v.strides[2].data()};
    LoopLayout<3> L = merge_dims<3>(nd, v.shape.data(), sp);
    OffsetCalculator<3, uint32_t> c32(L);
    OffsetCalculator<3, uint64_t> c64(L);
    for (int64_t i = 0; i < L.numel; ++i) {
      int64_t rem = i, want[3] = {0, 0, 0};
      for (int d = nd - 1; d >= 0; --d) {  // row-major multi-index of i
        int64_t idx = rem % v.shape[d];
        rem /= v.shape[d];
        for (int k = 0; k < 3; ++k) want[k] += idx * v.strides[k][d];
      }
      Offsets<3> a = c32.get(uint32_t(i)), b = c64.get(uint64_t(i));
      for (int k = 0; k < 3; ++k) {
        REQUIRE(a.v[k] == want[k]);
        REQUIRE(b.v[k] == want[k]);
      }
    }
  }
}

TEST_CASE("launch_config covers the work, caps the grid, and the grid-stride split visits each item once") {
  for (int64_t items : {int64_t(0), int64_t(1), int64_t(255), int64_t(256), int64_t(257), int64_t(100000),
                        int64_t(1) << 31}) {
    LaunchConfig c = launch_config(items, 1056);
    CHECK(c.block == uint32_t(kLoopBlock));
    CHECK(c.grid >= 1);
    CHECK(c.grid <= 1056);
    if (items <= 1056 * kLoopBlock) CHECK(int64_t(c.grid) * c.block >= items);
  }
  for (int64_t n : {1, 7, 31, 32, 33, 1000}) {
    for (const LaunchConfig& c : configs(n)) {
      std::vector<int> seen(size_t(n), 0);
      run_grid(c, [&](const GridPos& g) {
        GridStride<uint32_t> gs(g);
        for (uint32_t i = gs.first; i < uint32_t(n); i += gs.step) ++seen[i];
      });
      for (int s : seen) REQUIRE(s == 1);
    }
  }
}

TEST_CASE("choose_loop: vectorised only when contiguous and aligned, 64-bit indices only when needed") {
  alignas(16) static float buf[64];
  const int64_t shape[2] = {4, 8}, st[2] = {8, 1}, tr[2] = {1, 4};
  const size_t sizes[2] = {4, 4};
  const int64_t* cont[2] = {st, st};
  const int64_t* trans[2] = {st, tr};
  void* aligned[2] = {buf, buf + 32};
  void* off[2] = {buf, buf + 33};
  CHECK(choose_loop(merge_dims<2>(2, shape, cont), aligned, sizes, 4) == LoopKind::Vectorized);
  CHECK(choose_loop(merge_dims<2>(2, shape, cont), off, sizes, 4) == LoopKind::Strided32);
  CHECK(choose_loop(merge_dims<2>(2, shape, trans), aligned, sizes, 4) == LoopKind::Strided32);
  const int64_t huge[2] = {int64_t(1) << 20, int64_t(1) << 12}, hst[2] = {int64_t(1) << 12, 2};
  const int64_t* hs[2] = {hst, hst};
  CHECK(choose_loop(merge_dims<2>(2, huge, hs), aligned, sizes, 4) == LoopKind::Strided64);
  CHECK(vec_width(4) == 4);
  CHECK(vec_width(2) == 8);
  CHECK(vec_width(8) == 2);
  CHECK(vec_width(1) == 16);
  CHECK(ElementwiseLoop<bool, float, float>::kVec == 4);
  CHECK(ElementwiseLoop<Half, Half>::kVec == 8);
}

// ---------------------------------------------------------------- the loops, op by op

namespace {
const TensorOptions kF32{};
const TensorOptions kF64{.dtype = DType::float64};

// Inputs for an op's domain: positive for log/sqrt/rsqrt/pow, else standard normal.
Tensor input(const Shape& shape, bool positive, DType dt = DType::float32) {
  Tensor x = randn(shape, {.dtype = dt});
  return positive ? add(abs(x), 0.25) : x;
}

struct Identity {
  template <class T>
  T operator()(T x) const { return x; }
};

// One unary op: the forward functor over contiguous arrays against the CPU op, and the
// backward (g * d(x or y)) against the CPU autograd, for sizes around the vector width.
template <class T, class Fwd, class Der>
void check_unary(const char* name, const std::function<Tensor(const Tensor&)>& op, bool positive, bool from_y,
                 Fwd fwd, Der der, double rtol, const std::function<Tensor(const Tensor&)>& domain = {}) {
  const std::string op_name = name;
  CAPTURE(op_name);
  const DType dt = dtype_v<T>;
  using C = compute_t<T>;
  for (int64_t n : {1, 3, 4, 5, 8, 9, 37, 1000, 1027}) {
    CAPTURE(n);
    Tensor x = input({n}, positive, dt);
    if (domain) x = domain(x);  // into the op's domain: (-1, 1) for erfinv, (0, 1) for ndtri, ...
    x = x.detach().requires_grad_();
    Tensor y = op(x);
    Tensor out = Tensor::empty({n}, dt);
    check_contiguous<ElementwiseLoop<T, T>>(out, {x.detach()}, fwd, y.detach(), rtol, 1e-7);
    Tensor g = randn({n}, {.dtype = dt});
    y.backward(g);
    Tensor s = from_y ? y.detach() : x.detach();
    check_contiguous<ElementwiseLoop<T, T, T>>(out, {g, s}, GradF<C, Der>{der}, x.grad(), rtol, 1e-7);
  }
}

template <class T>
void check_all_unary(double rtol) {
  using C = compute_t<T>;
  check_unary<T>("exp", [](const Tensor& x) { return exp(x); }, false, true, ExpF<C>{}, ExpD<C>{}, rtol);
  check_unary<T>("log", [](const Tensor& x) { return log(x); }, true, false, LogF<C>{}, LogD<C>{}, rtol);
  check_unary<T>("sqrt", [](const Tensor& x) { return sqrt(x); }, true, true, SqrtF<C>{}, SqrtD<C>{}, rtol);
  check_unary<T>("rsqrt", [](const Tensor& x) { return rsqrt(x); }, true, true, RsqrtF<C>{}, RsqrtD<C>{}, rtol);
  check_unary<T>("abs", [](const Tensor& x) { return abs(x); }, false, false, AbsF<C>{}, AbsD<C>{}, rtol);
  check_unary<T>("sin", [](const Tensor& x) { return sin(x); }, false, false, SinF<C>{}, SinD<C>{}, rtol);
  check_unary<T>("cos", [](const Tensor& x) { return cos(x); }, false, false, CosF<C>{}, CosD<C>{}, rtol);
  check_unary<T>("tanh", [](const Tensor& x) { return tanh(x); }, false, true, TanhF<C>{}, TanhD<C>{}, rtol);
  check_unary<T>("sigmoid", [](const Tensor& x) { return sigmoid(x); }, false, true, SigmoidF<C>{}, SigmoidD<C>{},
                 rtol);
  check_unary<T>("relu", [](const Tensor& x) { return relu(x); }, false, false, ReluF<C>{}, ReluD<C>{}, rtol);
  check_unary<T>("leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.1); }, false, false,
                 LeakyReluF<C>{C(0.1)}, LeakyReluD<C>{C(0.1)}, rtol);
  check_unary<T>("gelu", [](const Tensor& x) { return gelu(x); }, false, false, GeluF<C>{}, GeluD<C>{}, rtol);
  check_unary<T>("gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::tanh); }, false, false,
                 GeluTanhF<C>{}, GeluTanhD<C>{}, rtol);
  check_unary<T>("silu", [](const Tensor& x) { return silu(x); }, false, false, SiluF<C>{}, SiluD<C>{}, rtol);
  check_unary<T>("softplus", [](const Tensor& x) { return softplus(x); }, false, false, SoftplusF<C>{},
                 SoftplusD<C>{}, rtol);
  check_unary<T>("log_sigmoid", [](const Tensor& x) { return log_sigmoid(x); }, false, false, LogSigmoidF<C>{},
                 LogSigmoidD<C>{}, rtol);
  check_unary<T>("log1p", [](const Tensor& x) { return log1p(x); }, true, false, Log1pF<C>{}, Log1pD<C>{}, rtol);
  check_unary<T>("expm1", [](const Tensor& x) { return expm1(x); }, false, true, Expm1F<C>{}, Expm1D<C>{}, rtol);
  check_unary<T>("elu", [](const Tensor& x) { return elu(x, 0.7); }, false, false, EluF<C>{C(0.7)}, EluD<C>{C(0.7)},
                 rtol);
  check_unary<T>("selu", [](const Tensor& x) { return selu(x); }, false, false, SeluF<C>{}, SeluD<C>{}, rtol);
  check_unary<T>("hardtanh", [](const Tensor& x) { return hardtanh(x, -0.5, 0.7); }, false, false,
                 HardtanhF<C>{C(-0.5), C(0.7)}, HardtanhD<C>{C(-0.5), C(0.7)}, rtol);
  check_unary<T>("hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }, false, false, HardsigmoidF<C>{},
                 HardsigmoidD<C>{}, rtol);
  check_unary<T>("hardswish", [](const Tensor& x) { return hardswish(x); }, false, false, HardswishF<C>{},
                 HardswishD<C>{}, rtol);
  check_unary<T>("floor", [](const Tensor& x) { return floor(x); }, false, false, FloorF<C>{}, FloorD<C>{},
                 rtol);
  check_unary<T>("round", [](const Tensor& x) { return round(x); }, false, false, RoundF<C>{}, RoundD<C>{},
                 rtol);
  check_unary<T>("sign", [](const Tensor& x) { return sign(x); }, false, false, SignF<C>{}, SignD<C>{}, rtol);
  check_unary<T>("clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, false, false,
                 ClampF<C>{C(-0.5), C(0.7)}, ClampD<C>{C(-0.5), C(0.7)}, rtol);
  check_unary<T>("pow_scalar", [](const Tensor& x) { return pow(x, 2.5); }, true, false, PowScalarF<C>{C(2.5)},
                 PowScalarD<C>{C(2.5)}, rtol);
  check_unary<T>("reciprocal", [](const Tensor& x) { return reciprocal(x); }, true, true, ReciprocalF<C>{},
                 ReciprocalD<C>{}, rtol);
  check_unary<T>("square", [](const Tensor& x) { return square(x); }, false, false, SquareF<C>{}, SquareD<C>{}, rtol);
  check_unary<T>("tan", [](const Tensor& x) { return tan(x); }, false, true, TanF<C>{}, TanD<C>{}, rtol);
  check_unary<T>("atan", [](const Tensor& x) { return atan(x); }, false, false, AtanF<C>{}, AtanD<C>{}, rtol);
  check_unary<T>("sinh", [](const Tensor& x) { return sinh(x); }, false, false, SinhF<C>{}, SinhD<C>{}, rtol);
  check_unary<T>("cosh", [](const Tensor& x) { return cosh(x); }, false, false, CoshF<C>{}, CoshD<C>{}, rtol);
  check_unary<T>("erf", [](const Tensor& x) { return erf(x); }, false, false, ErfF<C>{}, ErfD<C>{}, rtol);
  check_unary<T>("erfc", [](const Tensor& x) { return erfc(x); }, false, false, ErfcF<C>{}, ErfcD<C>{}, rtol);
  check_unary<T>("exp2", [](const Tensor& x) { return exp2(x); }, false, true, Exp2F<C>{}, Exp2D<C>{}, rtol);
  check_unary<T>("log2", [](const Tensor& x) { return log2(x); }, true, false, Log2F<C>{}, Log2D<C>{}, rtol);
  check_unary<T>("log10", [](const Tensor& x) { return log10(x); }, true, false, Log10F<C>{}, Log10D<C>{}, rtol);
  // Domains keep each derivative away from cancellation and from its zeros, where a rounding
  // difference between this file's code and the CPU kernels' (FMA contraction) is amplified.
  const auto unit = [](const Tensor& x) { return tanh(x); };  // (-1, 1)
  check_unary<T>("asinh", [](const Tensor& x) { return asinh(x); }, false, false, AsinhF<C>{}, AsinhD<C>{}, rtol);
  check_unary<T>("acosh", [](const Tensor& x) { return acosh(x); }, true, false, AcoshF<C>{}, AcoshD<C>{}, rtol,
                 [](const Tensor& x) { return add(x, 1.0); });
  check_unary<T>("atanh", [](const Tensor& x) { return atanh(x); }, false, false, AtanhF<C>{}, AtanhD<C>{}, rtol,
                 [](const Tensor& x) { return mul(tanh(x), 0.9); });
  check_unary<T>("lgamma", [](const Tensor& x) { return lgamma(x); }, true, false, LgammaF<C>{}, LgammaD<C>{}, rtol);
  check_unary<T>("digamma", [](const Tensor& x) { return digamma(x); }, true, false, DigammaF<C>{}, DigammaD<C>{},
                 rtol);
  check_unary<T>("polygamma", [](const Tensor& x) { return polygamma(3, x); }, true, false, PolygammaF<C>{C(3)},
                 PolygammaD<C>{C(3)}, rtol);
  check_unary<T>("erfinv", [](const Tensor& x) { return erfinv(x); }, false, true, ErfinvF<C>{}, ErfinvD<C>{}, rtol,
                 unit);
  check_unary<T>("i0", [](const Tensor& x) { return i0(x); }, false, false, I0F<C>{}, I0D<C>{}, rtol);
  check_unary<T>("i0e", [](const Tensor& x) { return i0e(x); }, false, false, I0eF<C>{}, I0eD<C>{}, rtol);
  check_unary<T>("i1", [](const Tensor& x) { return i1(x); }, false, false, I1F<C>{}, I1D<C>{}, rtol);
  // i1e' = i0e - i1e (sgn x + 1/x) loses a few bits near 0 on top of two 29-term Clenshaw sums,
  // which FMA contraction rounds differently: 20x the tolerance
  check_unary<T>("i1e", [](const Tensor& x) { return i1e(x); }, false, false, I1eF<C>{}, I1eD<C>{}, 20 * rtol,
                 unit);
  check_unary<T>("ndtri", [](const Tensor& x) { return ndtri(x); }, false, true, NdtriF<C>{}, NdtriD<C>{}, rtol,
                 [](const Tensor& x) { return sigmoid(x); });
  check_unary<T>("log_ndtr", [](const Tensor& x) { return log_ndtr(x); }, false, false, LogNdtrF<C>{}, LogNdtrD<C>{},
                 rtol, [](const Tensor& x) { return mul(x, 10.0); });
  check_unary<T>("sinc", [](const Tensor& x) { return sinc(x); }, false, false, SincF<C>{}, SincD<C>{}, rtol,
                 [](const Tensor& x) { return add(mul(sigmoid(x), 0.9), 0.3); });
  check_unary<T>("mish", [](const Tensor& x) { return mish(x); }, false, false, MishF<C>{}, MishD<C>{}, rtol);
  check_unary<T>("entr", [](const Tensor& x) { return entr(x); }, true, false, EntrF<C>{}, EntrD<C>{}, rtol);
}
}  // namespace

TEST_CASE("unary loops (forward and backward, vectorised with tails) match the CPU ops: float32") {
  manual_seed(11);
  check_all_unary<float>(1e-6);
}

TEST_CASE("unary loops match the CPU ops: float64, and float16/bfloat16 computed in float") {
  manual_seed(12);
  check_all_unary<double>(1e-12);
  // 16-bit: the CPU also computes in float32 and rounds once, so the results agree to the
  // last bit up to float32 rounding differences in the formulas (one 16-bit ulp at most)
  check_all_unary<Half>(2e-3);
  check_all_unary<BFloat16>(1e-2);
  // integer neg / abs
  Tensor xi = randint(-50, 50, {37});
  Tensor out = Tensor::empty({37}, DType::int64);
  check_contiguous<ElementwiseLoop<int64_t, int64_t>>(out, {xi}, NegF<int64_t>{}, neg(xi));
  check_contiguous<ElementwiseLoop<int64_t, int64_t>>(out, {xi}, AbsF<int64_t>{}, abs(xi));
}

namespace {
// One binary op over broadcast, non-contiguous operands: a is (5, 6) transposed from
// (6, 5), b is (6) broadcast over rows; plus a (4, 1, 3) x (2, 3) broadcast of both.
template <class T, class F>
void check_binary(const char* name, const std::function<Tensor(const Tensor&, const Tensor&)>& op, F f,
                  bool positive, bool compare) {
  CAPTURE(name);
  const DType dt = dtype_v<T>;
  const DType out_dt = compare ? DType::bool_ : dt;
  const double tol = dt == DType::float16 || dt == DType::bfloat16 ? 0.0 : 1e-6;
  {
    Tensor a = input({6, 5}, positive, dt).t();
    Tensor b = input({6}, false, dt);
    if (compare) b = where(gt(randn({6}), 0.0), a.select(0, 2), b);  // some ties
    Tensor out = Tensor::empty({5, 6}, out_dt);
    if (compare) check_strided<ElementwiseLoop<bool, T, T>>(out, {a, b}, f, op(a, b));
    else check_strided<ElementwiseLoop<T, T, T>>(out, {a, b}, f, op(a, b), tol, tol);
  }
  {
    Tensor a = input({4, 1, 3}, positive, dt);
    Tensor b = input({2, 3}, false, dt);
    Tensor out = Tensor::empty({4, 2, 3}, out_dt);
    if (compare) check_strided<ElementwiseLoop<bool, T, T>>(out, {a, b}, f, op(a, b));
    else check_strided<ElementwiseLoop<T, T, T>>(out, {a, b}, f, op(a, b), tol, tol);
  }
  {  // contiguous, same shape: the vectorised body, odd size
    Tensor a = input({3, 67}, positive, dt), b = input({3, 67}, false, dt);
    Tensor out = Tensor::empty({3, 67}, out_dt);
    if (compare) check_contiguous<ElementwiseLoop<bool, T, T>>(out, {a, b}, f, op(a, b));
    else check_contiguous<ElementwiseLoop<T, T, T>>(out, {a, b}, f, op(a, b), tol, tol);
  }
}

template <class T>
void check_all_binary() {
  using C = compute_t<T>;
  check_binary<T>("add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, AddF<C>{}, false, false);
  check_binary<T>("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, SubF<C>{}, false, false);
  check_binary<T>("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, MulF<C>{}, false, false);
  check_binary<T>("div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, DivF<C>{}, false, false);
  check_binary<T>("pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, PowF<C>{}, true, false);
  check_binary<T>("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, MaximumF<C>{}, false,
                  false);
  check_binary<T>("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, MinimumF<C>{}, false,
                  false);
  check_binary<T>("fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }, FmodF<C>{}, false, false);
  check_binary<T>("remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }, RemainderF<C>{},
                  false, false);
  check_binary<T>("floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); },
                  FloorDivideF<C>{}, false, false);
  check_binary<T>("atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }, Atan2F<C>{}, false, false);
  check_binary<T>("hypot", [](const Tensor& a, const Tensor& b) { return hypot(a, b); }, HypotF<C>{}, false, false);
  check_binary<T>("eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, EqF<C>{}, false, true);
  check_binary<T>("ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, NeF<C>{}, false, true);
  check_binary<T>("lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, LtF<C>{}, false, true);
  check_binary<T>("le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, LeF<C>{}, false, true);
  check_binary<T>("gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, GtF<C>{}, false, true);
  check_binary<T>("ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, GeF<C>{}, false, true);
}
}  // namespace

TEST_CASE("binary loops over broadcast and non-contiguous operands match the CPU ops") {
  manual_seed(13);
  check_all_binary<float>();
  check_all_binary<double>();
  check_all_binary<Half>();
  check_all_binary<BFloat16>();
  // integers
  Tensor a = randint(-9, 9, {5, 4}), b = randint(1, 9, {4});
  Tensor out = Tensor::empty({5, 4}, DType::int64);
  check_strided<ElementwiseLoop<int64_t, int64_t, int64_t>>(out, {a, b}, AddF<int64_t>{}, add(a, b));
  check_strided<ElementwiseLoop<int64_t, int64_t, int64_t>>(out, {a, b}, MaximumF<int64_t>{}, maximum(a, b));
  Tensor c = randint(-9, 9, {4});  // negative divisors too (no zero: refused before a kernel)
  c = add(c, mul(eq(c, 0.0).to(DType::int64), 5.0));
  check_strided<ElementwiseLoop<int64_t, int64_t, int64_t>>(out, {a, c}, FmodF<int64_t>{}, fmod(a, c));
  check_strided<ElementwiseLoop<int64_t, int64_t, int64_t>>(out, {a, c}, RemainderF<int64_t>{}, remainder(a, c));
  check_strided<ElementwiseLoop<int64_t, int64_t, int64_t>>(out, {a, c}, FloorDivideF<int64_t>{}, floor_divide(a, c));
}

TEST_CASE("where over four broadcast operands, and dtype casts over strided sources, match the CPU") {
  manual_seed(14);
  Tensor cond = gt(randn({4, 1, 5}), 0.0);
  Tensor a = randn({3, 5}), b = randn({4, 3, 1});
  Tensor out = Tensor::empty({4, 3, 5});
  check_strided<ElementwiseLoop<float, uint8_t, float, float>>(out, {cond, a, b}, WhereF{}, where(cond, a, b));
  Tensor ah = a.to(DType::float16), bh = b.to(DType::float16);
  Tensor outh = Tensor::empty({4, 3, 5}, DType::float16);
  check_strided<ElementwiseLoop<Half, uint8_t, Half, Half>>(outh, {cond, ah, bh}, WhereF{}, where(cond, ah, bh));

  // casts (the copy kernels): transposed and sliced sources
  Tensor src = randn({7, 9}).t().slice(0, 1, 9, 2);  // (4, 7), strides (2, 9)
  Tensor to_h = Tensor::empty(src.shape(), DType::float16);
  check_strided<ElementwiseLoop<Half, float>>(to_h, {src}, Identity{}, src.to(DType::float16));
  Tensor src64 = mul(randn({5, 6}, kF64), 1000.0).t();
  Tensor to_bf = Tensor::empty(src64.shape(), DType::bfloat16);
  check_strided<ElementwiseLoop<BFloat16, double>>(to_bf, {src64}, Identity{}, src64.to(DType::bfloat16));
  Tensor to_i = Tensor::empty(src64.shape(), DType::int64);
  check_strided<ElementwiseLoop<int64_t, double>>(to_i, {src64}, Identity{}, src64.to(DType::int64));
  Tensor to_b = Tensor::empty(src.shape(), DType::bool_);
  Tensor srcz = where(gt(src, 0.0), src, zeros_like(src));
  check_strided<ElementwiseLoop<bool, float>>(to_b, {srcz}, Identity{}, srcz.to(DType::bool_));
  Tensor hsrc = randn({33}).to(DType::float16);
  Tensor h2f = Tensor::empty({33});
  check_contiguous<ElementwiseLoop<float, Half>>(h2f, {hsrc}, Identity{}, hsrc.to(DType::float32));
  (void)kF32;
}
