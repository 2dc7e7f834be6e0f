// Learning-rate schedulers: StepLR, WarmupCosineLR, OneCycleLR (two and three phases,
// cos and linear, momentum cycling) and LambdaLR against their formulas, several groups,
// state_dict round trips and argument errors.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>
#include "gradcheck.h"

using namespace kiln;
namespace optim = kiln::optim;

namespace {

Tensor leaf() {
  Tensor p = zeros({2});
  p.requires_grad_();
  return p;
}

// PyTorch OneCycleLR, written out independently of the implementation.
struct OneCycleRef {
  double max_lr;
  int total;
  double pct = 0.3, base_m = 0.85, max_m = 0.95, div = 25, final_div = 1e4;
  bool linear = false, three = false;
  double anneal(double a, double b, double pct_) const {
    return linear ? (b - a) * pct_ + a : b + (a - b) / 2.0 * (std::cos(std::numbers::pi * pct_) + 1);
  }
  // returns {lr, momentum}
  std::pair<double, double> at(int step) const {
    const double init = max_lr / div, mn = init / final_div;
    struct Ph { double end, lr0, lr1, m0, m1; };
    std::vector<Ph> ph;
    if (three)
      ph = {{pct * total - 1, init, max_lr, max_m, base_m}, {2 * pct * total - 2, max_lr, init, base_m, max_m},
            {double(total - 1), init, mn, max_m, max_m}};
    else
      ph = {{pct * total - 1, init, max_lr, max_m, base_m}, {double(total - 1), max_lr, mn, base_m, max_m}};
    double start = 0;
    for (size_t i = 0; i < ph.size(); ++i) {
      if (step <= ph[i].end || i + 1 == ph.size()) {
        const double p = (step - start) / (ph[i].end - start);
        return {anneal(ph[i].lr0, ph[i].lr1, p), anneal(ph[i].m0, ph[i].m1, p)};
      }
      start = ph[i].end;
    }
    return {0, 0};
  }
};

}  // namespace

TEST_CASE("StepLR alone: lr = base * gamma^(epoch / step_size), per group") {
  Tensor a = leaf(), b = leaf();
  optim::SGD opt({{.params = {a}, .lr = 0.1}, {.params = {b}, .lr = 1.0}}, {});
  optim::StepLR sched(opt, {.step_size = 3, .gamma = 0.5});
  for (int e = 0; e < 12; ++e) {
    CAPTURE(e);
    const double f = std::pow(0.5, e / 3);
    REQUIRE(sched.get_last_lr().size() == 2);
    CHECK(sched.get_last_lr()[0] == doctest::Approx(0.1 * f).epsilon(1e-14));
    CHECK(sched.get_last_lr()[1] == doctest::Approx(1.0 * f).epsilon(1e-14));
    CHECK(opt.lr(0) == sched.get_last_lr()[0]);
    CHECK(opt.lr(1) == sched.get_last_lr()[1]);
    CHECK(sched.last_epoch() == e);
    sched.step();
  }
}

TEST_CASE("WarmupCosineLR: linear warmup from start_factor, cosine to min_lr, flat after") {
  Tensor a = leaf();
  optim::SGD opt({a}, {.lr = 1.0});
  optim::WarmupCosineLR sched(opt, {.warmup_steps = 4, .total_steps = 12, .min_lr = 0.1});
  std::vector<double> got;
  for (int e = 0; e <= 15; ++e) {
    got.push_back(opt.lr());
    sched.step();
  }
  CHECK(got[0] == 0.0);
  CHECK(got[1] == doctest::Approx(0.25));
  CHECK(got[2] == doctest::Approx(0.5));
  CHECK(got[4] == doctest::Approx(1.0));
  CHECK(got[8] == doctest::Approx(0.55));  // halfway through the cosine
  CHECK(got[12] == doctest::Approx(0.1));
  CHECK(got[15] == doctest::Approx(0.1));
  for (int e = 4; e <= 12; ++e) {
    const double ref = 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * (e - 4) / 8.0));
    CHECK(got[size_t(e)] == doctest::Approx(ref).epsilon(1e-14));
  }
  for (int e = 5; e <= 12; ++e) CHECK(got[size_t(e)] < got[size_t(e - 1)]);  // monotone decay

  Tensor b = leaf();
  optim::AdamW opt2({b}, {.lr = 2.0});
  optim::WarmupCosineLR s2(opt2, {.warmup_steps = 10, .total_steps = 20, .start_factor = 0.1});
  CHECK(opt2.lr() == doctest::Approx(0.2));
  s2.step();
  CHECK(opt2.lr() == doctest::Approx(2.0 * (0.1 + 0.9 * 0.1)));
  // no warmup: starts at base lr
  Tensor c = leaf();
  optim::SGD opt3({c}, {.lr = 0.5});
  optim::WarmupCosineLR s3(opt3, {.warmup_steps = 0, .total_steps = 10});
  CHECK(opt3.lr() == doctest::Approx(0.5));
}

TEST_CASE("OneCycleLR follows PyTorch's formula (defaults, three phases, linear) and cycles momentum") {
  {
    Tensor a = leaf();
    optim::SGD opt({a}, {.lr = 123.0, .momentum = 0.9});
    optim::OneCycleLR sched(opt, {.max_lr = 0.1, .total_steps = 20});
    OneCycleRef ref{.max_lr = 0.1, .total = 20};
    CHECK(opt.lr() == doctest::Approx(0.004));       // max_lr / div_factor
    CHECK(opt.momentum(0) == doctest::Approx(0.95));  // max_momentum
    for (int e = 0; e <= 20; ++e) {
      CAPTURE(e);
      auto [lr, m] = ref.at(e);
      CHECK(opt.lr() == doctest::Approx(lr).epsilon(1e-12));
      CHECK(opt.momentum(0) == doctest::Approx(m).epsilon(1e-12));
      CHECK(sched.get_last_momentum().at(0) == doctest::Approx(m).epsilon(1e-12));
      if (e == 5) {
        CHECK(opt.lr() == doctest::Approx(0.1));  // peak at pct_start * total - 1
        CHECK(opt.momentum(0) == doctest::Approx(0.85));
      }
      if (e == 19) CHECK(opt.lr() == doctest::Approx(0.004 / 1e4));  // min_lr at the last step
      if (e < 20) sched.step();
    }
    CHECK_THROWS_WITH_AS(sched.step(), doctest::Contains("total_steps"), kiln::Error);
  }
  {
    // Adam: beta1 is the cycled momentum; three phases and linear annealing
    Tensor a = leaf();
    optim::Adam opt({a}, {.lr = 1.0});
    optim::OneCycleLR sched(opt, {.max_lr = 0.01, .total_steps = 30, .pct_start = 0.25,
                                  .anneal_strategy = optim::AnnealStrategy::linear, .three_phase = true});
    OneCycleRef ref{.max_lr = 0.01, .total = 30, .pct = 0.25, .linear = true, .three = true};
    for (int e = 0; e < 30; ++e) {
      CAPTURE(e);
      auto [lr, m] = ref.at(e);
      CHECK(opt.lr() == doctest::Approx(lr).epsilon(1e-12));
      CHECK(opt.options().betas.first == doctest::Approx(m).epsilon(1e-12));
      CHECK(opt.options().betas.second == 0.999);
      sched.step();
    }
  }
  {
    // cycle_momentum = false leaves momentum alone
    Tensor a = leaf();
    optim::SGD opt({a}, {.lr = 1.0, .momentum = 0.5});
    optim::OneCycleLR sched(opt, {.max_lr = 1.0, .total_steps = 10, .cycle_momentum = false});
    for (int e = 0; e < 5; ++e) sched.step();
    CHECK(opt.momentum(0) == 0.5);
    CHECK(sched.get_last_momentum().empty());
  }
}

TEST_CASE("LambdaLR scales each group's base lr") {
  Tensor a = leaf(), b = leaf();
  optim::RMSprop opt({{.params = {a}, .lr = 0.2}, {.params = {b}, .lr = 0.4}}, {});
  optim::LambdaLR sched(opt, [](int64_t e) { return std::pow(0.9, double(e)); });
  for (int e = 0; e < 5; ++e) {
    CHECK(opt.lr(0) == doctest::Approx(0.2 * std::pow(0.9, e)));
    CHECK(opt.lr(1) == doctest::Approx(0.4 * std::pow(0.9, e)));
    sched.step();
  }
}

TEST_CASE("scheduler state_dict round trip continues the same sequence") {
  auto run = [](auto make_sched, int k, int n) {
    Tensor a = leaf(), b = leaf();
    optim::SGD opt1({a}, {.lr = 0.3, .momentum = 0.9});
    auto s1 = make_sched(opt1);
    for (int e = 0; e < k; ++e) s1->step();
    auto sd = s1->state_dict();
    auto opt_sd = opt1.state_dict();
    const std::vector<double> saved_last = s1->get_last_lr();
    std::vector<double> ref;
    for (int e = k; e < n; ++e) {
      s1->step();
      ref.push_back(opt1.lr());
    }
    optim::SGD opt2({b}, {.lr = 0.3, .momentum = 0.9});
    auto s2 = make_sched(opt2);
    s2->load_state_dict(sd);
    opt2.load_state_dict(opt_sd);
    CHECK(s2->last_epoch() == k);
    CHECK(s2->get_last_lr() == saved_last);
    for (int e = k; e < n; ++e) {
      s2->step();
      CHECK(opt2.lr() == ref[size_t(e - k)]);
    }
  };
  run([](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, optim::StepLROptions{.step_size = 2}); }, 5, 12);
  run([](optim::Optimizer& o) {
    return std::make_unique<optim::WarmupCosineLR>(o, optim::WarmupCosineLROptions{.warmup_steps = 3, .total_steps = 15});
  }, 4, 15);
  run([](optim::Optimizer& o) {
    return std::make_unique<optim::OneCycleLR>(o, optim::OneCycleLROptions{.max_lr = 1.0, .total_steps = 25});
  }, 9, 25);

  // a different kind of scheduler's state is rejected
  Tensor a = leaf();
  optim::SGD opt({a}, {.lr = 0.1});
  optim::StepLR step(opt, {.step_size = 2});
  optim::OneCycleLR one(opt, {.max_lr = 1.0, .total_steps = 10});
  CHECK_THROWS_AS(step.load_state_dict(one.state_dict()), kiln::Error);
  CHECK_THROWS_AS(one.load_state_dict(optim::StateDict{}), kiln::Error);

  // saved settings that the constructor would refuse (a corrupt or hand-edited file, found
  // by fuzz_checkpoint) are errors naming the key, and the scheduler keeps its own
  auto with = [](optim::StateDict sd, const std::string& key, double v) {
    sd[key] = scalar_tensor(v, {.dtype = DType::float64});
    return sd;
  };
  const optim::StateDict good = step.state_dict();
  for (double bad : {1.09462e+189, 0.0, -3.0, 2.5, std::nan("")}) {
    const std::string e = kiln::test::error_of([&] { step.load_state_dict(with(good, "settings.step_size", bad)); });
    CHECK(e.find("step_size") != std::string::npos);
  }
  CHECK(kiln::test::error_of([&] { step.load_state_dict(with(good, "last_epoch", 1e300)); }).find("last_epoch") !=
        std::string::npos);
  CHECK(kiln::test::error_of([&] { one.load_state_dict(with(one.state_dict(), "settings.total_steps", -1)); })
            .find("total_steps") != std::string::npos);
  step.step();  // still the old step_size of 2: lr halves every 2 steps
  CHECK(step.state_dict().at("settings.step_size").item() == 2);
}

TEST_CASE("scheduler argument errors") {
  Tensor a = leaf();
  optim::SGD opt({a}, {.lr = 0.1});
  CHECK_THROWS_AS(optim::StepLR(opt, {.step_size = 0}), kiln::Error);
  CHECK_THROWS_AS(optim::WarmupCosineLR(opt, {.warmup_steps = 10, .total_steps = 10}), kiln::Error);
  CHECK_THROWS_AS(optim::WarmupCosineLR(opt, {.warmup_steps = 1, .total_steps = 10, .start_factor = 2.0}), kiln::Error);
  CHECK_THROWS_AS(optim::OneCycleLR(opt, {.max_lr = 0.1, .total_steps = 0}), kiln::Error);
  CHECK_THROWS_AS(optim::OneCycleLR(opt, {.max_lr = 0.1, .total_steps = 10, .pct_start = 1.5}), kiln::Error);
  // a phase that spans no steps (PyTorch: ZeroDivisionError), whether or not p * T - 1 is fused
  CHECK_THROWS_AS(optim::OneCycleLR(opt, {.max_lr = 0.5, .total_steps = 4, .pct_start = 0.25, .three_phase = true}),
                  kiln::Error);
  CHECK_THROWS_AS(optim::OneCycleLR(opt, {.max_lr = 0.5, .total_steps = 10, .pct_start = 0.1}), kiln::Error);
  CHECK_THROWS_AS(optim::OneCycleLR(opt, {.max_lr = 0.5, .total_steps = 10, .pct_start = 1.0}), kiln::Error);
  CHECK_NOTHROW(optim::OneCycleLR(opt, {.max_lr = 0.5, .total_steps = 10, .pct_start = 0.0}));
}

// The sequences below are PyTorch 2.15's (torch.optim.lr_scheduler, the same calls in the
// same order), printed by a script, not computed from kiln's formulas.
TEST_CASE("several schedulers on one optimizer, and a hand-set lr, as in PyTorch") {
  Tensor a = leaf();
  auto check_seq = [](const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-15));
    }
  };
  {  // a LambdaLR warm-up and a StepLR: the StepLR's base is the initial lr 0.5, not 0.125
    optim::SGD opt({a}, {.lr = 0.5});
    optim::LambdaLR warm(opt, [](int64_t e) { return std::min(1.0, double(e + 1) / 4); });
    optim::StepLR step(opt, {.step_size = 3, .gamma = 0.1});
    CHECK(opt.initial_lr(0) == 0.5);
    std::vector<double> lrs{opt.lr(0)};
    for (int i = 0; i < 7; ++i) warm.step(), step.step(), lrs.push_back(opt.lr(0));
    check_seq(lrs, {0.125, 0.25, 0.375, 0.05, 0.5, 0.5, 0.05, 0.5});
    CHECK(step.base_lrs()[0] == 0.5);
  }
  {  // two StepLRs compose
    optim::SGD opt({a}, {.lr = 1.0});
    optim::StepLR s2(opt, {.step_size = 2, .gamma = 0.5});
    optim::StepLR s3(opt, {.step_size = 3, .gamma = 0.1});
    std::vector<double> lrs{opt.lr(0)};
    for (int i = 0; i < 7; ++i) s2.step(), s3.step(), lrs.push_back(opt.lr(0));
    check_seq(lrs, {1.0, 1.0, 0.5, 0.05, 0.025, 0.025, 0.00125, 0.00125});
  }
  {  // StepLR carries a hand-set lr on
    optim::SGD opt({a}, {.lr = 1.0});
    optim::StepLR s2(opt, {.step_size = 2, .gamma = 0.5});
    std::vector<double> lrs;
    for (int i = 0; i < 5; ++i) {
      s2.step();
      if (i == 1) opt.set_lr(3.0);
      lrs.push_back(opt.lr(0));
    }
    check_seq(lrs, {1.0, 3.0, 3.0, 1.5, 1.5});
  }
}
