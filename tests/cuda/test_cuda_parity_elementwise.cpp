// CUDA against CPU for every elementwise op with a CUDA kernel (ops/cuda/elementwise*.cu):
// unary ops, binary arithmetic with broadcasting, comparisons, where / masked_fill, casts,
// fills and in-place updates, forward and backward, on random shapes with non-contiguous
// and broadcast operands, in float32, float64, float16 and bfloat16. Skipped (visibly,
// as doctest skips) where no GPU is available.
#include <doctest/doctest.h>
#include <functional>
#include <random>
#include <string>
#include <vector>
#include "gradcheck.h"
#include "parity.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;

namespace {

struct Tol {
  double rtol, atol;
};
// fp32: the GPU's exp/tanh/erf differ from the CPU's by a few ulp; 16-bit: one ulp of the
// result may flip where the float32 values straddle a rounding point.
Tol tol_for(DType dt) {
  switch (dt) {
    case DType::float64: return {1e-10, 1e-12};
    case DType::float16: return {2e-3, 1e-3};
    case DType::bfloat16: return {1e-2, 1e-2};
    default: return {1e-5, 1e-5};
  }
}

// "" when got (any device) equals ref (CPU) within tol, else the first mismatch.
std::string compare(const Tensor& got, const Tensor& ref, Tol t) {
  if (!got.defined() || !ref.defined()) return got.defined() == ref.defined() ? "" : "one side is undefined";
  if (got.shape() != ref.shape()) return "shape " + shape_str(got.shape()) + " vs " + shape_str(ref.shape());
  if (got.dtype() != ref.dtype()) return std::string("dtype ") + dtype_name(got.dtype()) + " vs " + dtype_name(ref.dtype());
  if (!got.device().is_cuda()) return "the result is not on the GPU";
  std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  for (size_t i = 0; i < r.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(r[i]);
    if (!both_nan && !(std::fabs(g[i] - r[i]) <= t.atol + t.rtol * std::fabs(r[i])))
      return "element " + std::to_string(i) + ": cuda " + std::to_string(g[i]) + " vs cpu " + std::to_string(r[i]);
  }
  return "";
}

std::mt19937& rng() {
  static std::mt19937 r(2024);
  return r;
}

Shape random_shape(int min_dims = 1, int max_dims = 4) {
  int nd = min_dims + int(rng()() % unsigned(max_dims - min_dims + 1));
  Shape s;
  for (int d = 0; d < nd; ++d) s.push_back(1 + int64_t(rng()() % 7));
  return s;
}

// A CPU tensor of `shape` in dtype dt; positive for ops defined on x > 0. When
// `strided`, the result is a transposed view (non-contiguous) of the same shape.
Tensor make_input(const Shape& shape, DType dt, bool positive, bool strided) {
  Shape s = shape;
  if (strided && s.size() >= 2) std::swap(s.front(), s.back());
  Tensor x = randn(s, {.dtype = DType::float64});
  if (positive) x = add(abs(x), 0.25);
  x = x.to(dt);
  if (strided && s.size() >= 2) x = x.transpose(0, int64_t(s.size()) - 1);
  return x;
}

// The same tensor on the GPU with the same strides (a view of an uploaded base).
Tensor to_gpu_same_layout(const Tensor& x) {
  if (x.is_contiguous()) return x.to(kGpu);
  // the only non-contiguous inputs here are transposes of contiguous tensors
  Tensor base = x.transpose(0, x.dim() - 1).contiguous().to(kGpu);
  return base.transpose(0, base.dim() - 1);
}

const DType kFloatTypes[] = {DType::float32, DType::float64, DType::float16, DType::bfloat16};

using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

// Forward and backward of a unary op on both devices. The last trial's input is a
// contiguous view one element into its storage: not aligned to the GPU loop's 16-byte
// vectors, so the kernel goes element by element.
void check_unary(const char* name, const UnaryFn& f, bool positive) {
  for (DType dt : kFloatTypes) {
    for (int trial = 0; trial < 5; ++trial) {
      Shape shape = trial == 3 ? Shape{3, 1031} : trial == 4 ? Shape{1031} : random_shape();
      const bool strided = trial % 2 == 1;
      Tensor xc, xg;
      if (trial == 4) {
        const Tensor base = make_input({1032}, dt, positive, false);
        xc = base.narrow(0, 1, 1031).detach().requires_grad_();
        xg = base.to(kGpu).narrow(0, 1, 1031).detach().requires_grad_();
      } else {
        xc = make_input(shape, dt, positive, strided).detach().requires_grad_();
        xg = to_gpu_same_layout(xc.detach()).detach().requires_grad_();
      }
      CAPTURE(name);
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(shape));
      CAPTURE(strided);
      Tensor yc = f(xc), yg = f(xg);
      CHECK(compare(yg, yc, tol_for(dt)) == "");
      Tensor g = randn(yc.shape(), {.dtype = DType::float64}).to(dt);
      yc.backward(g);
      yg.backward(g.to(kGpu));
      CHECK(compare(xg.grad(), xc.grad(), tol_for(dt)) == "");
    }
  }
}

// A pair of broadcast-compatible shapes: b's shape drops leading dims and sets some to 1.
std::pair<Shape, Shape> broadcast_pair() {
  Shape a = random_shape(2, 4), b;
  size_t drop = rng()() % 2;
  for (size_t d = drop; d < a.size(); ++d) b.push_back(rng()() % 3 == 0 ? 1 : a[d]);
  if (rng()() % 2) std::swap(a, b);
  return {a, b};
}

// Forward (same shapes, broadcast, non-contiguous) and backward of a binary op. The
// backward of a broadcast needs a reduction (sum_to), checked only when CUDA has one.
void check_binary(const char* name, const BinaryFn& f, bool positive_a, bool comparison = false) {
  const bool reduce_on_gpu = supports(Op::sum, DeviceType::CUDA);
  for (DType dt : kFloatTypes) {
    for (int trial = 0; trial < 5; ++trial) {
      Shape sa, sb;
      if (trial < 2) sa = sb = trial == 0 ? random_shape() : Shape{5, 1029};
      else std::tie(sa, sb) = broadcast_pair();
      const bool strided = trial == 1 || trial == 4;
      const bool broadcast = sa != sb;
      CAPTURE(name);
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(sa));
      CAPTURE(shape_str(sb));
      CAPTURE(strided);
      Tensor ac = make_input(sa, dt, positive_a, strided), bc = make_input(sb, dt, false, false);
      if (comparison) bc = where(gt(randn(sb), 0.0), ac.numel() == bc.numel() ? ac.reshape(sb) : bc, bc);  // ties
      const bool grads = !comparison && (!broadcast || reduce_on_gpu);
      if (grads) {
        ac = ac.detach().requires_grad_();
        bc = bc.detach().requires_grad_();
      }
      Tensor ag = to_gpu_same_layout(ac.detach()), bg = bc.detach().to(kGpu);
      if (grads) {
        ag = ag.detach().requires_grad_();
        bg = bg.detach().requires_grad_();
      }
      Tensor yc = f(ac, bc), yg = f(ag, bg);
      CHECK(compare(yg, yc, comparison ? Tol{0, 0} : tol_for(dt)) == "");
      if (!grads) continue;
      Tensor g = randn(yc.shape(), {.dtype = DType::float64}).to(yc.dtype());
      yc.backward(g);
      yg.backward(g.to(kGpu));
      CHECK(compare(ag.grad(), ac.grad(), tol_for(dt)) == "");
      CHECK(compare(bg.grad(), bc.grad(), tol_for(dt)) == "");
    }
  }
}

}  // namespace

TEST_CASE("cuda parity: unary ops, forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(1);
  check_unary("neg", [](const Tensor& x) { return neg(x); }, false);
  check_unary("exp", [](const Tensor& x) { return exp(x); }, false);
  check_unary("log", [](const Tensor& x) { return log(x); }, true);
  check_unary("sqrt", [](const Tensor& x) { return sqrt(x); }, true);
  check_unary("rsqrt", [](const Tensor& x) { return rsqrt(x); }, true);
  check_unary("abs", [](const Tensor& x) { return abs(x); }, false);
  check_unary("sin", [](const Tensor& x) { return sin(x); }, false);
  check_unary("cos", [](const Tensor& x) { return cos(x); }, false);
  check_unary("tanh", [](const Tensor& x) { return tanh(x); }, false);
  check_unary("sigmoid", [](const Tensor& x) { return sigmoid(x); }, false);
  check_unary("relu", [](const Tensor& x) { return relu(x); }, false);
  check_unary("leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }, false);
  check_unary("gelu", [](const Tensor& x) { return gelu(x); }, false);
  check_unary("gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::tanh); }, false);
  check_unary("silu", [](const Tensor& x) { return silu(x); }, false);
  check_unary("clamp", [](const Tensor& x) { return clamp(x, -0.6, 0.9); }, false);
  check_unary("pow_scalar", [](const Tensor& x) { return pow(x, 1.7); }, true);
  check_unary("scalar arithmetic", [](const Tensor& x) { return sub(mul(add(x, 2.0), 3.0), 1.0) / 4.0; }, false);
  check_unary("reciprocal", [](const Tensor& x) { return 1.0 / x; }, true);
  check_unary("x * x (gradients summed on two edges)", [](const Tensor& x) { return mul(x, x); }, false);
  check_unary("log1p", [](const Tensor& x) { return log1p(x); }, true);
  check_unary("expm1", [](const Tensor& x) { return expm1(x); }, false);
  check_unary("softplus", [](const Tensor& x) { return softplus(x); }, false);
  check_unary("log_sigmoid", [](const Tensor& x) { return log_sigmoid(x); }, false);
  check_unary("elu", [](const Tensor& x) { return elu(x, 0.7); }, false);
  check_unary("selu", [](const Tensor& x) { return selu(x); }, false);
  check_unary("hardtanh", [](const Tensor& x) { return hardtanh(x, -0.5, 0.8); }, false);
  check_unary("hardswish", [](const Tensor& x) { return hardswish(mul(x, 3.0)); }, false);
  check_unary("round", [](const Tensor& x) { return round(mul(x, 3.0)); }, false);
  check_unary("reciprocal (row)", [](const Tensor& x) { return reciprocal(x); }, true);
  check_unary("square", [](const Tensor& x) { return square(x); }, false);
  check_unary("tan", [](const Tensor& x) { return kiln::tan(mul(x, 0.4)); }, false);
  check_unary("atan", [](const Tensor& x) { return kiln::atan(x); }, false);
  check_unary("asin", [](const Tensor& x) { return kiln::asin(mul(x, 0.2)); }, false);
  check_unary("acos", [](const Tensor& x) { return kiln::acos(mul(x, 0.2)); }, false);
  check_unary("sinh", [](const Tensor& x) { return kiln::sinh(x); }, false);
  check_unary("cosh", [](const Tensor& x) { return kiln::cosh(x); }, false);
  check_unary("erf", [](const Tensor& x) { return kiln::erf(x); }, false);
  check_unary("erfc", [](const Tensor& x) { return kiln::erfc(x); }, false);
  check_unary("exp2", [](const Tensor& x) { return kiln::exp2(x); }, false);
  check_unary("log2", [](const Tensor& x) { return kiln::log2(x); }, true);
  check_unary("log10", [](const Tensor& x) { return kiln::log10(x); }, true);
  check_unary("asinh", [](const Tensor& x) { return kiln::asinh(x); }, false);
  check_unary("acosh", [](const Tensor& x) { return kiln::acosh(add(x, 1.0)); }, true);
  check_unary("atanh", [](const Tensor& x) { return kiln::atanh(mul(x, 0.2)); }, false);
  check_unary("lgamma", [](const Tensor& x) { return kiln::lgamma(x); }, true);
  check_unary("digamma", [](const Tensor& x) { return kiln::digamma(x); }, true);
  check_unary("polygamma", [](const Tensor& x) { return kiln::polygamma(2, x); }, true);
  check_unary("erfinv", [](const Tensor& x) { return kiln::erfinv(mul(x, 0.2)); }, false);
  check_unary("i0", [](const Tensor& x) { return kiln::i0(x); }, false);
  check_unary("i0e", [](const Tensor& x) { return kiln::i0e(x); }, false);
  check_unary("i1", [](const Tensor& x) { return kiln::i1(x); }, false);
  check_unary("i1e", [](const Tensor& x) { return kiln::i1e(x); }, false);
  check_unary("ndtri", [](const Tensor& x) { return kiln::ndtri(sigmoid(x)); }, false);
  check_unary("log_ndtr", [](const Tensor& x) { return kiln::log_ndtr(mul(x, 10.0)); }, false);
  check_unary("sinc", [](const Tensor& x) { return kiln::sinc(x); }, false);
  check_unary("mish", [](const Tensor& x) { return kiln::mish(x); }, false);
  check_unary("entr", [](const Tensor& x) { return kiln::entr(x); }, true);
  check_unary("mvlgamma", [](const Tensor& x) { return kiln::mvlgamma(add(x, 1.0), 3); }, true);
  check_unary("ndtr", [](const Tensor& x) { return kiln::ndtr(x); }, false);
  check_unary("frac", [](const Tensor& x) { return kiln::frac(mul(x, 3.0)); }, false);
}

TEST_CASE("cuda parity: binary ops with broadcasting, forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(2);
  if (!supports(Op::sum, DeviceType::CUDA))
    MESSAGE("no CUDA reduction yet: gradients of broadcast binary ops are not compared (forward is)");
  check_binary("add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, false);
  check_binary("sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, false);
  check_binary("mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, false);
  check_binary("div", [](const Tensor& a, const Tensor& b) { return div(a, add(abs(b), 0.5)); }, false);
  check_binary("pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true);
  check_binary("maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, false);
  check_binary("minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, false);
  check_binary("fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, add(abs(b), 0.5)); }, false);
  check_binary("remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }, false);
  check_binary("floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); }, false);
  check_binary("atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }, false);
  check_binary("hypot", [](const Tensor& a, const Tensor& b) { return hypot(a, b); }, false);
  check_binary("xlog1py", [](const Tensor& a, const Tensor& b) { return xlog1py(a, b); }, true);
  check_binary("logaddexp2", [](const Tensor& a, const Tensor& b) { return logaddexp2(a, b); }, false);
  check_binary("logaddexp", [](const Tensor& a, const Tensor& b) { return logaddexp(a, b); }, false);
  check_binary("xlogy", [](const Tensor& a, const Tensor& b) { return xlogy(a, add(abs(b), 0.5)); }, false);
  check_binary("where(a > b, a, b)", [](const Tensor& a, const Tensor& b) { return where(gt(a, b), a, b); }, false);
  check_binary("masked_fill", [](const Tensor& a, const Tensor& b) { return masked_fill(add(a, b), lt(b, 0.0), -2.0); },
               false);
  for (auto [name, fn] : std::vector<std::pair<const char*, BinaryFn>>{
           {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
           {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
           {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
           {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
           {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
           {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }}})
    check_binary(name, fn, false, true);
}

TEST_CASE("cuda parity: integer and bool elementwise ops" * doctest::skip(kNoGpu)) {
  manual_seed(3);
  Tensor a = randint(-20, 20, {7, 33}), b = randint(1, 9, {33});
  Tensor ag = a.to(kGpu), bg = b.to(kGpu);
  CHECK(compare(add(ag, bg), add(a, b), {0, 0}) == "");
  CHECK(compare(sub(ag, bg), sub(a, b), {0, 0}) == "");
  CHECK(compare(mul(ag, bg), mul(a, b), {0, 0}) == "");
  CHECK(compare(div(ag, bg), div(a, b), {0, 0}) == "");  // true division, in float32
  CHECK(compare(maximum(ag, bg), maximum(a, b), {0, 0}) == "");
  CHECK(compare(fmod(ag, bg), fmod(a, b), {0, 0}) == "");
  CHECK(compare(remainder(neg(ag), bg), remainder(neg(a), b), {0, 0}) == "");
  CHECK(compare(floor_divide(neg(ag), bg), floor_divide(neg(a), b), {0, 0}) == "");
  CHECK(compare(neg(ag), neg(a), {0, 0}) == "");
  CHECK(compare(abs(ag), abs(a), {0, 0}) == "");
  CHECK(compare(lt(ag, bg), lt(a, b), {0, 0}) == "");
  Tensor m = gt(a, 0.0), mg = m.to(kGpu);
  CHECK(compare(eq(mg, gt(bg, 4.0)), eq(m, gt(b, 4.0)), {0, 0}) == "");
  CHECK(compare(where(mg, ag, bg), where(m, a, b), {0, 0}) == "");
  Tensor a32 = a.to(DType::int32), a8 = abs(a).to(DType::uint8);
  CHECK(compare(add(a32.to(kGpu), 3.0), add(a32, 3.0), {0, 0}) == "");
  CHECK(compare(mul(a8.to(kGpu), a8.to(kGpu)), mul(a8, a8), {0, 0}) == "");
}

TEST_CASE("cuda parity: dtype casts between every pair, from strided sources" * doctest::skip(kNoGpu)) {
  manual_seed(4);
  const DType all[] = {DType::float32, DType::float64, DType::float16, DType::bfloat16,
                       DType::int64,   DType::int32,   DType::uint8,   DType::bool_};
  Tensor base = mul(randn({6, 37}, {.dtype = DType::float64}), 8.0);
  base = where(gt(abs(base), 4.0), base, zeros_like(base));  // zeros for the bool casts
  for (DType from : all) {
    for (DType to : all) {
      // negative or large floats -> uint8 is undefined in C++ (the GPU saturates): keep those in range
      const bool unsigned_range = to == DType::uint8 || from == DType::uint8;
      Tensor src = (unsigned_range ? abs(base) : base).to(from);
      Tensor src_g = src.to(kGpu);
      CAPTURE(std::string(dtype_name(from)));
      CAPTURE(std::string(dtype_name(to)));
      CHECK(compare(src_g.to(to), src.to(to), {0, 0}) == "");                               // contiguous
      CHECK(compare(src_g.t().to(to), src.t().contiguous().to(to), {0, 0}) == "");           // transposed
      CHECK(compare(src_g.slice(1, 1, 37, 3).to(to), src.slice(1, 1, 37, 3).to(to), {0, 0}) == "");  // sliced
    }
  }
}

TEST_CASE("cuda parity: fills, copies into views, broadcast copies and in-place updates" * doctest::skip(kNoGpu)) {
  manual_seed(5);
  for (DType dt : kFloatTypes) {
    CAPTURE(std::string(dtype_name(dt)));
    Tensor c = zeros({4, 9}, {.dtype = dt}), g = zeros({4, 9}, {.dtype = dt, .device = kGpu});
    CHECK(compare(g, c, {0, 0}) == "");
    c.fill_(2.5);
    g.fill_(2.5);
    CHECK(compare(g, c, {0, 0}) == "");
    Tensor row = randn({9}).to(dt);
    c.slice(0, 1, 4, 2).copy_(row);  // broadcast into a strided view, from the CPU
    g.slice(0, 1, 4, 2).copy_(row);
    CHECK(compare(g, c, {0, 0}) == "");
    Tensor col = randn({4, 1}).to(dt);
    c.slice(1, 0, 9, 4).copy_(col);  // from the GPU, broadcast on the GPU
    g.slice(1, 0, 9, 4).copy_(col.to(kGpu));
    CHECK(compare(g, c, {0, 0}) == "");
    Tensor other = randn({4, 9}).to(dt);
    {
      NoGradGuard ng;
      c.add_(other, 0.5);
      g.add_(other.to(kGpu), 0.5);
      CHECK(compare(g, c, tol_for(dt)) == "");
      c.mul_(-3.0);
      g.mul_(-3.0);
      CHECK(compare(g, c, tol_for(dt)) == "");
    }
    CHECK(compare(g.t().contiguous(), c.t().contiguous(), tol_for(dt)) == "");
    CHECK(compare(g.clone(), c.clone(), tol_for(dt)) == "");
  }
}
