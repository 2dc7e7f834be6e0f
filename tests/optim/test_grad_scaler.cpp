// GradScaler: scaling, skipped steps and backoff on inf/NaN, growth after growth_interval
// clean steps, the scale staying positive and finite, unscale_ + clip, call-order errors,
// state_dict round trip; found_inf_and_unscale_ on every gradient layout.
#include <doctest/doctest.h>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>
#include "gradcheck.h"

using namespace kiln;
namespace optim = kiln::optim;
using Vec = std::vector<double>;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor leaf(const Vec& v) {
  Tensor p = from_vector(v, {int64_t(v.size())}).to(DType::float32);
  p.requires_grad_();
  return p;
}
void set_grad(const Tensor& p, const Vec& g) { p.set_grad(from_vector(g, {int64_t(g.size())}).to(p.dtype())); }

}  // namespace

TEST_CASE("found_inf_and_unscale_: unscales in one pass and reports inf/NaN") {
  std::vector<Tensor> gs = {from_vector(Vec{2.0, -4.0}).to(DType::float32), from_vector(Vec{8.0})};
  CHECK(!optim::found_inf_and_unscale_(gs, 0.5f));
  CHECK(gs[0].to_vector<double>() == Vec{1.0, -2.0});
  CHECK(gs[1].to_vector<double>() == Vec{4.0});
  for (double bad : {kInf, -kInf, kNaN}) {
    CAPTURE(bad);
    // fused (float32 / float64 contiguous), generic (bfloat16, non-contiguous)
    std::vector<std::vector<Tensor>> layouts = {
        {from_vector(Vec{1.0, bad, 3.0}).to(DType::float32)},
        {from_vector(Vec{1.0}), from_vector(Vec{bad, 2.0})},
        {from_vector(Vec{2.0, bad}).to(DType::bfloat16)},
        {from_vector(Vec{1.0, 2.0, bad, 4.0}, {2, 2}).to(DType::float32).t()},
    };
    const double first_after[] = {0.25, 0.25, 0.5, 0.25};  // first element * 0.25
    for (size_t i = 0; i < layouts.size(); ++i) {
      CAPTURE(i);
      CHECK(optim::found_inf_and_unscale_(layouts[i], 0.25f));
      CHECK(layouts[i][0].to_vector<double>()[0] == first_after[i]);
    }
  }
  // large tensor (several blocks, threads): one inf at the end is found
  Tensor big = ones({100000});
  {
    NoGradGuard ng;
    big.narrow(0, 99999, 1).fill_(kInf);
  }
  std::vector<Tensor> bl = {big};
  CHECK(optim::found_inf_and_unscale_(bl, 2.0f));
  CHECK(big.to_vector<float>()[5] == 2.0f);
}

TEST_CASE("GradScaler: scale() multiplies the loss by 2^16 by default") {
  optim::GradScaler scaler;
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.growth_interval() == 2000);
  CHECK(scaler.growth_factor() == 2.0);
  CHECK(scaler.backoff_factor() == 0.5);
  Tensor loss = scalar_tensor(0.75);
  CHECK(scaler.scale(loss).item() == 0.75 * 65536.0);
  Tensor half_loss = scalar_tensor(0.5, {.dtype = DType::float16});
  Tensor scaled = scaler.scale(half_loss);
  CHECK(scaled.dtype() == DType::float32);  // 2^16 would overflow float16
  CHECK(scaled.item() == 32768.0);
  kiln::amp::GradScaler alias({.enabled = false});  // the kiln::amp spelling
  CHECK(alias.get_scale() == 1.0);
  CHECK(alias.scale(loss).is_same(loss));
}

TEST_CASE("GradScaler: an inf gradient skips the step, leaves params untouched and halves the scale") {
  Tensor p = leaf({1.0, 2.0}), q = leaf({3.0});
  optim::SGD opt({p, q}, {.lr = 0.1, .momentum = 0.9});
  optim::GradScaler scaler({.init_scale = 1024.0});
  set_grad(p, {1024.0, kInf});
  set_grad(q, {512.0});
  CHECK(!scaler.step(opt));
  scaler.update();
  CHECK(p.to_vector<double>() == Vec{1.0, 2.0});
  CHECK(q.to_vector<double>() == Vec{3.0});
  CHECK(scaler.get_scale() == 512.0);
  CHECK(scaler.growth_tracker() == 0);
  CHECK(scaler.last_step_skipped());
  CHECK(opt.step_count() == 0);
  CHECK(opt.state_dict().count("state.0.momentum_buffer") == 0);  // no optimizer state touched
  // NaN too
  set_grad(p, {kNaN, 1.0});
  set_grad(q, {1.0});
  CHECK(!scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 256.0);
  // a clean step applies the unscaled gradient
  set_grad(p, {256.0, 512.0});
  set_grad(q, {-256.0});
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(!scaler.last_step_skipped());
  CHECK(p.to_vector<double>()[0] == doctest::Approx(1.0 - 0.1 * 1.0));
  CHECK(p.to_vector<double>()[1] == doctest::Approx(2.0 - 0.1 * 2.0));
  CHECK(q.item() == doctest::Approx(3.0 + 0.1));
  CHECK(scaler.growth_tracker() == 1);
}

TEST_CASE("GradScaler: growth after growth_interval consecutive clean steps; an inf resets the count") {
  Tensor p = leaf({0.0});
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  auto iter = [&](double g) {
    set_grad(p, {g});
    scaler.step(opt);
    scaler.update();
  };
  iter(1.0);
  iter(1.0);
  CHECK(scaler.get_scale() == 8.0);
  CHECK(scaler.growth_tracker() == 2);
  iter(1.0);
  CHECK(scaler.get_scale() == 16.0);
  CHECK(scaler.growth_tracker() == 0);
  iter(1.0);
  iter(1.0);
  iter(kInf);  // resets the count and backs off
  CHECK(scaler.get_scale() == 8.0);
  iter(1.0);
  iter(1.0);
  CHECK(scaler.get_scale() == 8.0);
  iter(1.0);
  CHECK(scaler.get_scale() == 16.0);
}

TEST_CASE("GradScaler: the scale never reaches 0 or inf") {
  Tensor p = leaf({0.0});
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler down;
  for (int i = 0; i < 400; ++i) {
    set_grad(p, {kInf});
    down.step(opt);
    down.update();
    REQUIRE(down.get_scale() > 0.0);
  }
  CHECK(down.get_scale() == double(FLT_MIN));
  CHECK(std::isfinite(1.0 / down.get_scale()));
  optim::GradScaler up({.growth_factor = 2.0, .growth_interval = 1});
  for (int i = 0; i < 400; ++i) {
    set_grad(p, {0.0});
    up.step(opt);
    up.update();
    REQUIRE(std::isfinite(up.get_scale()));
    REQUIRE(std::isfinite(float(up.get_scale())));
  }
  CHECK(up.get_scale() == std::ldexp(1.0, 127));  // the largest power of two a float holds
  // a clean step right after still unscales to finite values
  set_grad(p, {1.0});
  CHECK(up.step(opt));
}

TEST_CASE("GradScaler: unscale_ then clip_grad_norm_ then step unscales only once") {
  Tensor p = leaf({0.0, 0.0});
  optim::SGD opt({p}, {.lr = 1.0});
  optim::GradScaler scaler({.init_scale = 4096.0});
  // the "true" gradient is (3, 4); the scaled loss gave 4096 * (3, 4)
  set_grad(p, {3.0 * 4096, 4.0 * 4096});
  scaler.unscale_(opt);
  CHECK(p.grad().to_vector<double>() == Vec{3.0, 4.0});
  double n = optim::clip_grad_norm_({p}, 1.0);
  CHECK(n == doctest::Approx(5.0));
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(p.to_vector<double>()[0] == doctest::Approx(-0.6).epsilon(1e-5));
  CHECK(p.to_vector<double>()[1] == doctest::Approx(-0.8).epsilon(1e-5));
}

TEST_CASE("GradScaler: call-order errors and fp16 gradients") {
  Tensor p = leaf({0.0});
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler;
  CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("no inf checks"), kiln::Error);
  set_grad(p, {1.0});
  scaler.unscale_(opt);
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("already"), kiln::Error);
  scaler.step(opt);
  CHECK_THROWS_WITH_AS(scaler.step(opt), doctest::Contains("already"), kiln::Error);
  scaler.update();
  set_grad(p, {1.0});
  CHECK(scaler.step(opt));  // fine again after update()
  scaler.update();
  Tensor h = zeros({2}, {.dtype = DType::float16});
  h.requires_grad_();
  h.set_grad(ones({2}, {.dtype = DType::float16}));
  optim::SGD oh({h}, {.lr = 0.1});
  CHECK_THROWS_WITH_AS(scaler.unscale_(oh), doctest::Contains("float16"), kiln::Error);
  CHECK_THROWS_AS(optim::GradScaler({.init_scale = 0.0}), kiln::Error);
  CHECK_THROWS_AS(optim::GradScaler({.backoff_factor = 1.5}), kiln::Error);
  CHECK_THROWS_AS(optim::GradScaler({.growth_interval = 0}), kiln::Error);
  CHECK_THROWS_AS(scaler.update(-1.0), kiln::Error);
}

TEST_CASE("GradScaler: a disabled scaler passes everything through") {
  Tensor p = leaf({1.0});
  optim::SGD opt({p}, {.lr = 0.5});
  optim::GradScaler scaler({.enabled = false});
  set_grad(p, {2.0});
  scaler.unscale_(opt);
  CHECK(p.grad().item() == 2.0);
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(p.item() == 0.0);
  CHECK(!scaler.is_enabled());
}

TEST_CASE("GradScaler: state_dict round trip and update(new_scale)") {
  Tensor p = leaf({0.0});
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler a({.init_scale = 64.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 5});
  for (int i = 0; i < 3; ++i) {
    set_grad(p, {1.0});
    a.step(opt);
    a.update();
  }
  auto sd = a.state_dict();
  CHECK(sd.at("scale").item() == 64.0);
  CHECK(sd.at("growth_tracker").item() == 3);
  optim::GradScaler b;
  b.load_state_dict(sd);
  CHECK(b.get_scale() == 64.0);
  CHECK(b.growth_tracker() == 3);
  CHECK(b.growth_factor() == 4.0);
  CHECK(b.backoff_factor() == 0.25);
  CHECK(b.growth_interval() == 5);
  for (int i = 0; i < 2; ++i) {
    set_grad(p, {1.0});
    b.step(opt);
    b.update();
  }
  CHECK(b.get_scale() == 256.0);
  b.update(1000.0);
  CHECK(b.get_scale() == 1000.0);
  auto bad = sd;
  bad["bogus"] = scalar_tensor(1.0);
  CHECK_THROWS_AS(b.load_state_dict(bad), kiln::Error);
  bad = sd;
  bad["scale"] = scalar_tensor(0.0);
  CHECK_THROWS_AS(b.load_state_dict(bad), kiln::Error);
  // counts beyond int64 or not whole (a corrupt file) are errors, never a float-to-int overflow
  for (const char* key : {"growth_interval", "growth_tracker"})
    for (double v : {1e300, 2.5, std::numeric_limits<double>::infinity()}) {
      bad = sd;
      bad[key] = scalar_tensor(v);
      CHECK_THROWS_WITH_AS(b.load_state_dict(bad), doctest::Contains("GradScaler.load_state_dict"), kiln::Error);
    }
  bad = sd;
  bad["growth_factor"] = scalar_tensor(std::numeric_limits<double>::infinity());
  CHECK_THROWS_AS(b.load_state_dict(bad), kiln::Error);
}
