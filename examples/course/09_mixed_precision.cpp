// Course chapter 9 (docs/course/09-mixed-precision.md): float16 has a small range, so small
// gradients underflow to zero and large values overflow to infinity; loss scaling moves the
// gradients into range and a dynamic scaler finds the scale by itself.
#include <cmath>
#include <cstdio>
#include <vector>
#include <kiln/kiln.h>
#include <kiln/testing.h>

using kiln::DType;
using kiln::Tensor;

// The first layer's weight gradient of an MLP for loss * factor, under autocast(dtype)
// (undefined dtype: float32), optionally through a GradScaler with `scale`.
static Tensor grad_of(kiln::nn::Sequential& net, const Tensor& x, const Tensor& y, double factor,
                      std::optional<DType> dtype, double scale = 0) {
  net.zero_grad();
  Tensor loss;
  {
    kiln::autocast ac(dtype.value_or(DType::bfloat16), dtype.has_value());
    loss = kiln::mul(kiln::cross_entropy(net(x), y), factor);
  }
  if (scale > 0) {
    kiln::optim::SGD opt(net.parameters(), {.lr = 0.0});
    kiln::optim::GradScaler s({.init_scale = scale});
    s.scale(loss).backward();
    s.unscale_(opt);  // the gradients divided by the scale again, in float32
  } else {
    loss.backward();
  }
  return net.parameters()[0].grad().clone();
}

static double zeros(const Tensor& g) { return kiln::mean(kiln::eq(g, 0.0).to(DType::float64)).item(); }

int main() {
  kiln::set_num_threads(1);
  std::printf("1. the ranges: a value, then rounded to float16 and to bfloat16\n");
  for (double v : {3.14159265, 70000.0, 1e-5, 1e-8}) {
    const Tensor t = kiln::full({}, v, {.dtype = DType::float64});
    std::printf("   %-12g float16 %-12g bfloat16 %g\n", v, t.to(DType::float16).item(), t.to(DType::bfloat16).item());
  }

  kiln::manual_seed(0);
  kiln::nn::Sequential net{kiln::nn::Linear(256, 256), kiln::nn::ReLU(), kiln::nn::Linear(256, 10)};
  const Tensor x = kiln::randn({64, 256}), y = kiln::randint(0, 10, {64});
  const double factor = 1e-5;  // small gradients, as late in training
  const Tensor ref = grad_of(net, x, y, factor, std::nullopt);
  const Tensor f16 = grad_of(net, x, y, factor, DType::float16);
  const Tensor scaled = grad_of(net, x, y, factor, DType::float16, 65536.0);
  const Tensor b16 = grad_of(net, x, y, factor, DType::bfloat16);
  auto rel = [&](const Tensor& g) {
    return kiln::testing::max_abs_diff(g, ref) / kiln::max(kiln::abs(ref)).item();
  };
  std::printf("\n2. small gradients (loss x %g): the first layer's weight gradient against float32\n", factor);
  std::printf("   %-34s %14s %18s\n", "", "zero elements", "largest error");
  std::printf("   %-34s %13.1f%% %18s\n", "float32", 100 * zeros(ref), "-");
  std::printf("   %-34s %13.1f%% %17.1f%%\n", "float16 autocast", 100 * zeros(f16), 100 * rel(f16));
  std::printf("   %-34s %13.1f%% %17.1f%%\n", "float16 autocast, loss scale 2^16", 100 * zeros(scaled), 100 * rel(scaled));
  std::printf("   %-34s %13.1f%% %17.1f%%\n", "bfloat16 autocast (no scaling)", 100 * zeros(b16), 100 * rel(b16));

  std::printf("\n3. a scale that is too large: the dynamic scaler backs off by itself\n");
  kiln::optim::SGD opt(net.parameters(), {.lr = 0.01});
  kiln::optim::GradScaler scaler({.init_scale = std::pow(2.0, 24), .growth_interval = 3});
  for (int step = 1; step <= 14; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      kiln::autocast ac(DType::float16);
      loss = kiln::cross_entropy(net(x), y);
    }
    const double before = scaler.get_scale();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    std::printf("   step %2d  scale 2^%-4.0f %s\n", step, std::log2(before),
                scaler.last_step_skipped() ? "inf/NaN in the gradients: step skipped, scale halved"
                                           : "gradients finite: step taken");
  }
  const bool ok = zeros(f16) > 0.3 && zeros(scaled) < 0.01 && rel(scaled) < 0.05 && scaler.get_scale() < std::pow(2.0, 24);
  return ok ? 0 : 1;
}
