// Learning-rate schedulers: StepLR, WarmupCosineLR, OneCycleLR (two and three phases,
// cos and linear, momentum cycling) and LambdaLR against their formulas, several groups,
// state_dict round trips and argument errors; PyTorch's other schedulers (MultiStepLR,
// ExponentialLR, MultiplicativeLR, ConstantLR, LinearLR, PolynomialLR, CosineAnnealingLR,
// CosineAnnealingWarmRestarts, CyclicLR, SequentialLR, ChainedScheduler, ReduceLROnPlateau)
// against their closed forms and against sequences PyTorch 2.15 printed.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>
#include "gradcheck.h"

using namespace kiln;
namespace optim = kiln::optim;
using kiln::testing::error_of;

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

namespace {
// Two groups (lr 0.1 and 0.7) on SGD with momentum 0.9, as the PyTorch script that printed
// the sequences below.
struct TwoGroups {
  Tensor a = leaf(), b = leaf();
  optim::SGD opt{std::vector<optim::ParamGroup>{{.params = {a}, .lr = 0.1}, {.params = {b}, .lr = 0.7}},
                 optim::SGDOptions{.lr = 0.1, .momentum = 0.9}};
};
// lr of `group` before each of n steps.
template <class Step>
std::vector<double> lrs_of(optim::Optimizer& opt, int n, Step step, size_t group = 0) {
  std::vector<double> v;
  for (int e = 0; e < n; ++e) {
    v.push_back(opt.lr(group));
    step(e);
  }
  return v;
}
void check_same(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-15));
  }
}
}  // namespace

TEST_CASE("chainable schedulers alone follow their closed forms") {
  auto close = [](double x, double y) { return std::fabs(x - y) <= 1e-13 * std::max(1.0, std::fabs(y)); };
  {
    TwoGroups t;
    optim::MultiStepLR s(t.opt, {.milestones = {2, 5, 5, 9}, .gamma = 0.3});
    for (int e = 0; e < 14; ++e, s.step()) {
      const int n = (e >= 2) + 2 * (e >= 5) + (e >= 9);
      CHECK(close(t.opt.lr(1), 0.7 * std::pow(0.3, n)));
    }
  }
  {
    TwoGroups t;
    optim::ExponentialLR s(t.opt, {.gamma = 0.93});
    for (int e = 0; e < 30; ++e, s.step()) CHECK(close(t.opt.lr(0), 0.1 * std::pow(0.93, e)));
  }
  {
    TwoGroups t;
    optim::ConstantLR s(t.opt, {.factor = 0.25, .total_iters = 4});
    for (int e = 0; e < 10; ++e, s.step()) CHECK(close(t.opt.lr(1), e < 4 ? 0.7 * 0.25 : 0.7));
  }
  {
    TwoGroups t;
    optim::LinearLR s(t.opt, {.start_factor = 0.1, .end_factor = 0.9, .total_iters = 7});
    for (int e = 0; e < 12; ++e, s.step()) CHECK(close(t.opt.lr(1), 0.7 * (0.1 + 0.8 * std::min(e, 7) / 7.0)));
  }
  {
    TwoGroups t;
    optim::PolynomialLR s(t.opt, {.total_iters = 8, .power = 2.0});
    for (int e = 0; e < 12; ++e, s.step()) CHECK(close(t.opt.lr(0), 0.1 * std::pow(1.0 - std::min(e, 8) / 8.0, 2.0)));
  }
  {
    TwoGroups t;
    optim::MultiplicativeLR s(t.opt, [](int64_t e) { return 1.0 - 0.01 * double(e); });
    double want = 0.7;
    for (int e = 0; e < 10; ++e, s.step()) {
      if (e > 0) want *= 1.0 - 0.01 * e;
      CHECK(close(t.opt.lr(1), want));
    }
  }
  {  // over three periods: down to eta_min at T_max, back up at 2 T_max
    TwoGroups t;
    optim::CosineAnnealingLR s(t.opt, {.T_max = 7, .eta_min = 0.01});
    for (int e = 0; e < 45; ++e, s.step()) {
      CAPTURE(e);
      CHECK(close(t.opt.lr(1), 0.01 + (0.7 - 0.01) * (1 + std::cos(std::numbers::pi * e / 7)) / 2));
    }
  }
}

TEST_CASE("CosineAnnealingWarmRestarts restarts after T_0, T_0 * T_mult, ... steps") {
  TwoGroups t;
  optim::CosineAnnealingWarmRestarts s(t.opt, {.T_0 = 3, .T_mult = 2, .eta_min = 0.001});
  int start = 0, period = 3;
  for (int e = 0; e < 60; ++e, s.step()) {
    if (e - start == period) start = e, period *= 2;
    CAPTURE(e);
    CHECK(s.period_position() == std::pair<int64_t, int64_t>{e - start, period});
    CHECK(t.opt.lr(0) == doctest::Approx(0.001 + 0.099 * (1 + std::cos(std::numbers::pi * (e - start) / period)) / 2)
                             .epsilon(1e-14));
  }
  TwoGroups u;
  optim::CosineAnnealingWarmRestarts s1(u.opt, {.T_0 = 5});
  for (int e = 0; e < 23; ++e, s1.step()) CHECK(u.opt.lr(1) == doctest::Approx(0.35 * (1 + std::cos(std::numbers::pi * (e % 5) / 5))));
}

TEST_CASE("CyclicLR: triangle between base_lr and max_lr, momentum against it") {
  TwoGroups t;
  optim::CyclicLR s(t.opt, {.base_lr = 0.01, .max_lr = 0.1, .step_size_up = 4, .step_size_down = 2});
  for (int e = 0; e < 30; ++e, s.step()) {
    const int x = e % 6;  // 4 up, 2 down
    const double f = x <= 4 ? x / 4.0 : (6 - x) / 2.0;
    CAPTURE(e);
    for (size_t g : {0, 1}) {
      CHECK(t.opt.lr(g) == doctest::Approx(0.01 + 0.09 * f).epsilon(1e-14));
      CHECK(t.opt.momentum(g) == doctest::Approx(0.9 - 0.1 * f).epsilon(1e-14));
    }
    CHECK(s.get_last_momentum() == std::vector<double>{t.opt.momentum(0), t.opt.momentum(1)});
  }
  TwoGroups u;  // a custom scale: every other cycle at half height
  optim::CyclicLR c(u.opt, {.base_lr = 0.0, .max_lr = 1.0, .step_size_up = 2,
                            .scale_fn = [](double cycle) { return int(cycle) % 2 ? 1.0 : 0.5; }, .cycle_momentum = false});
  check_same(lrs_of(u.opt, 9, [&](int) { c.step(); }), {0.0, 0.5, 1.0, 0.5, 0.0, 0.25, 0.5, 0.25, 0.0});
  CHECK(u.opt.momentum(0) == 0.9);  // untouched
}

// The sequences below are PyTorch 2.15's (the same schedulers, options and calls; printed by
// a script with repr()), not computed from kiln's formulas.
TEST_CASE("the new schedulers give PyTorch's sequences") {
  {
    TwoGroups t;
    optim::CosineAnnealingLR s(t.opt, {.T_max = 7, .eta_min = 0.01});
    check_same(lrs_of(t.opt, 24, [&](int) { s.step(); }),
               {0.1, 0.09554359905560886, 0.08305704108364301, 0.06501344202803415, 0.04498655797196586,
                0.026942958916356993, 0.014456400944391143, 0.01, 0.01445640094439114, 0.026942958916356986,
                0.04498655797196585, 0.06501344202803411, 0.083057041083643, 0.09554359905560887, 0.1,
                0.09554359905560889, 0.08305704108364304, 0.06501344202803414, 0.04498655797196587,
                0.026942958916357007, 0.01445640094439115, 0.01, 0.01445640094439114, 0.026942958916357132});
  }
  {
    TwoGroups t;
    optim::CosineAnnealingWarmRestarts s(t.opt, {.T_0 = 3, .T_mult = 2, .eta_min = 0.001});
    check_same(lrs_of(t.opt, 12, [&](int) { s.step(); }),
               {0.1, 0.07525000000000001, 0.025750000000000012, 0.1, 0.09336825748732973, 0.07525000000000001, 0.0505,
                0.025750000000000012, 0.007631742512670284, 0.1, 0.09831332840130888, 0.09336825748732973});
  }
  {
    TwoGroups t;
    optim::CyclicLR s(t.opt, {.base_lr = 0.01, .max_lr = 0.1, .step_size_up = 3, .mode = optim::CyclicMode::triangular2});
    std::vector<double> m;
    check_same(lrs_of(t.opt, 14, [&](int) { m.push_back(t.opt.momentum(0)); s.step(); }),
               {0.01, 0.040000000000000015, 0.06999999999999999, 0.1, 0.07000000000000003, 0.03999999999999998, 0.01,
                0.02500000000000003, 0.03999999999999998, 0.05500000000000001, 0.03999999999999998,
                0.02500000000000003, 0.01, 0.017499999999999995});
    check_same(m, {0.9, 0.8666666666666667, 0.8333333333333334, 0.8, 0.8333333333333334, 0.8666666666666667, 0.9,
                   0.8833333333333333, 0.8666666666666667, 0.8500000000000001, 0.8666666666666667, 0.8833333333333333,
                   0.9, 0.8916666666666667});
  }
  {
    TwoGroups t;
    optim::CyclicLR s(t.opt, {.base_lr = 0.01, .max_lr = 0.1, .step_size_up = 5, .step_size_down = 3,
                              .mode = optim::CyclicMode::exp_range, .gamma = 0.9, .cycle_momentum = false});
    check_same(lrs_of(t.opt, 16, [&](int) { s.step(); }, 1),
               {0.01, 0.0262, 0.03916000000000001, 0.049366000000000014, 0.05723920000000001, 0.06314410000000001,
                0.04188646000000001, 0.024348907000000003, 0.01, 0.016973568802000003, 0.022552423843600004,
                0.026945772188860004, 0.03033492662663201, 0.03287679245496101, 0.02372607547297661,
                0.016176733962839474});
  }
  {  // three schedulers; each later one starts from the base lr at its milestone
    TwoGroups t;
    optim::ConstantLR a(t.opt, {.factor = 0.5, .total_iters = 2});
    optim::CosineAnnealingLR b(t.opt, {.T_max = 5});
    optim::StepLR c(t.opt, {.step_size = 2, .gamma = 0.5});
    optim::SequentialLR s(t.opt, {a, b, c}, {4, 10});
    check_same(lrs_of(t.opt, 20, [&](int) { s.step(); }),
               {0.05, 0.05, 0.1, 0.1, 0.1, 0.09045084971874738, 0.06545084971874737, 0.03454915028125263,
                0.009549150281252633, 0.0, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025, 0.0125, 0.0125, 0.00625, 0.00625});
    CHECK(s.get_last_lr() == std::vector<double>{t.opt.lr(0), t.opt.lr(1)});
  }
  {  // a warm-up then a decay, the usual pair
    TwoGroups t;
    optim::LinearLR a(t.opt, {.start_factor = 0.1, .end_factor = 1.0, .total_iters = 3});
    optim::ExponentialLR b(t.opt, {.gamma = 0.9});
    optim::SequentialLR s(t.opt, {a, b}, {3});
    const std::vector<double> got = lrs_of(t.opt, 8, [&](int) { s.step(); });
    check_same(got, {0.010000000000000002, 0.04, 0.07, 0.1, 0.09000000000000001, 0.08100000000000002,
                     0.07290000000000002, 0.06561000000000002});
  }
  {
    TwoGroups t;
    optim::ConstantLR a(t.opt, {.factor = 0.1, .total_iters = 4});
    optim::ExponentialLR b(t.opt, {.gamma = 0.9});
    optim::ChainedScheduler s({a, b});
    check_same(lrs_of(t.opt, 10, [&](int) { s.step(); }),
               {0.010000000000000002, 0.009000000000000003, 0.008100000000000003, 0.007290000000000003,
                0.06561000000000003, 0.059049000000000025, 0.05314410000000002, 0.04782969000000002,
                0.043046721000000024, 0.03874204890000002});
  }
  {
    TwoGroups t;
    const std::vector<double> m{1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.5, 0.6, 0.6, 0.6, 0.6, NAN,
                                0.6, 0.6, 0.6, 0.6, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4};
    optim::ReduceLROnPlateau s(t.opt, {.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.01});
    check_same(lrs_of(t.opt, int(m.size()), [&](int e) { s.step(m[size_t(e)]); }),
               {0.1, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.025, 0.0125, 0.0125,
                0.0125, 0.0125, 0.0125, 0.0125, 0.01, 0.01, 0.01, 0.01});
    CHECK(s.best() == 0.4);
  }
  {
    TwoGroups t;
    const std::vector<double> m{0.1, 0.12, 0.2, 0.22, 0.24, 0.26, 0.3, 0.29, 0.28, 0.27, 0.5, 0.5, 0.5, 0.5};
    optim::ReduceLROnPlateau s(t.opt, {.mode = optim::PlateauMode::max, .factor = 0.3, .patience = 1, .threshold = 0.05,
                                       .threshold_mode = optim::ThresholdMode::abs, .min_lrs = {0.02, 0.1}});
    check_same(lrs_of(t.opt, int(m.size()), [&](int e) { s.step(m[size_t(e)]); }, 1),
               {0.7, 0.7, 0.7, 0.7, 0.7, 0.21, 0.21, 0.21, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1});
  }
  {  // a chainable scheduler carries a hand-set lr on
    TwoGroups t;
    optim::CosineAnnealingLR s(t.opt, {.T_max = 10});
    const std::vector<double> got = lrs_of(t.opt, 15, [&](int e) {
      if (e == 4) t.opt.set_lr(0, t.opt.lr(0) * 0.5);
      s.step();
    });
    CHECK(got[5] == doctest::Approx(0.05 * (1 + std::cos(std::numbers::pi * 5 / 10)) / 2));
    CHECK(got[10] == 0.0);
  }
}

TEST_CASE("the new schedulers' state_dict round trips continue the same sequence") {
  // run k steps, save, run on; a second optimizer + scheduler restored from the save must
  // give the same lrs (and momentum) after
  auto run = [](auto make, int k, int n) {
    TwoGroups t1, t2;
    auto s1 = make(t1.opt);
    for (int e = 0; e < k; ++e) s1.step();
    const optim::StateDict sd = s1.state_dict();
    std::vector<double> ref;
    for (int e = k; e < n; ++e) s1.step(), ref.push_back(t1.opt.lr(1)), ref.push_back(t1.opt.momentum(0));
    auto s2 = make(t2.opt);
    s2.load_state_dict(sd);
    for (int e = k; e < n; ++e) {
      s2.step();
      CHECK(t2.opt.lr(1) == ref[size_t(2 * (e - k))]);
      CHECK(t2.opt.momentum(0) == ref[size_t(2 * (e - k) + 1)]);
    }
  };
  run([](optim::Optimizer& o) { return optim::MultiStepLR(o, {.milestones = {3, 6, 6}, .gamma = 0.5}); }, 4, 12);
  run([](optim::Optimizer& o) { return optim::ExponentialLR(o, {.gamma = 0.9}); }, 3, 9);
  run([](optim::Optimizer& o) { return optim::ConstantLR(o, {.factor = 0.2, .total_iters = 5}); }, 3, 9);
  run([](optim::Optimizer& o) { return optim::LinearLR(o, {.start_factor = 0.2, .total_iters = 6}); }, 3, 9);
  run([](optim::Optimizer& o) { return optim::PolynomialLR(o, {.total_iters = 6, .power = 1.5}); }, 3, 9);
  run([](optim::Optimizer& o) { return optim::CosineAnnealingLR(o, {.T_max = 5, .eta_min = 0.01}); }, 7, 20);
  run([](optim::Optimizer& o) { return optim::CosineAnnealingWarmRestarts(o, {.T_0 = 2, .T_mult = 3}); }, 5, 20);
  run([](optim::Optimizer& o) {
    return optim::CyclicLR(o, {.base_lr = 0.01, .max_lr = 0.1, .step_size_up = 3, .mode = optim::CyclicMode::triangular2});
  }, 7, 20);
  {  // composites carry their schedulers' states under schedulers.<i>.
    TwoGroups t1, t2;
    optim::LinearLR a1(t1.opt, {.start_factor = 0.1, .total_iters = 3});
    optim::CosineAnnealingLR b1(t1.opt, {.T_max = 6});
    optim::SequentialLR s1(t1.opt, {a1, b1}, {3});
    for (int e = 0; e < 5; ++e) s1.step();
    const optim::StateDict sd = s1.state_dict();
    CHECK(sd.count("schedulers.1.settings.T_max") == 1);
    optim::LinearLR a2(t2.opt, {.start_factor = 0.1, .total_iters = 3});
    optim::CosineAnnealingLR b2(t2.opt, {.T_max = 6});
    optim::SequentialLR s2(t2.opt, {a2, b2}, {3});
    s2.load_state_dict(sd);
    for (int e = 0; e < 6; ++e) {
      s1.step(), s2.step();
      CHECK(t2.opt.lr(0) == t1.opt.lr(0));
    }
    // a bad child key changes nothing
    optim::StateDict bad = s2.state_dict();
    const optim::StateDict good = bad;
    bad["schedulers.1.settings.T_max"] = scalar_tensor(0.0, {.dtype = DType::float64});
    CHECK(error_of([&] { s2.load_state_dict(bad); }).find("T_max") != std::string::npos);
    bad = good;
    bad["schedulers.7.last_epoch"] = scalar_tensor(1.0, {.dtype = DType::int64});
    CHECK(error_of([&] { s2.load_state_dict(bad); }).find("scheduler 7") != std::string::npos);
    CHECK(s2.state_dict().at("schedulers.1.settings.T_max").item() == 6);
    s1.step(), s2.step();
    CHECK(t2.opt.lr(0) == t1.opt.lr(0));
  }
  {
    TwoGroups t1, t2;
    optim::ReduceLROnPlateau p1(t1.opt, {.patience = 1});
    for (double m : {1.0, 2.0}) p1.step(m);  // one bad step so far; best 1
    optim::ReduceLROnPlateau p2(t2.opt, {.patience = 1});
    CHECK(p2.best() == INFINITY);
    p2.load_state_dict(p1.state_dict());
    CHECK(p2.best() == 1.0);
    CHECK(p2.num_bad_epochs() == 1);
    p2.step(3.0);  // the second bad step in a row: reduced
    CHECK(t2.opt.lr(0) == doctest::Approx(0.01));
    optim::ReduceLROnPlateau fresh(t2.opt);
    fresh.load_state_dict(optim::ReduceLROnPlateau(t1.opt).state_dict());  // an infinite best restores
    CHECK(fresh.best() == INFINITY);
  }
}

TEST_CASE("the new schedulers' argument errors") {
  TwoGroups t;
  CHECK_THROWS_AS(optim::StepLR(t.opt, {.step_size = 0}), kiln::Error);
  CHECK_FALSE(t.opt.initial_lr(0).has_value());  // a refused scheduler does not attach
  CHECK_THROWS_AS(optim::MultiStepLR(t.opt, {.milestones = {-1}}), kiln::Error);
  CHECK_THROWS_AS(optim::ExponentialLR(t.opt, {.gamma = -0.5}), kiln::Error);
  CHECK(error_of([&] { optim::ConstantLR(t.opt, {.factor = 0.0}); }).find("divides") != std::string::npos);
  CHECK_THROWS_AS(optim::ConstantLR(t.opt, {.factor = 1.5}), kiln::Error);
  CHECK_THROWS_AS(optim::LinearLR(t.opt, {.start_factor = 0.0}), kiln::Error);
  CHECK_THROWS_AS(optim::LinearLR(t.opt, {.total_iters = 0}), kiln::Error);
  CHECK_THROWS_AS(optim::PolynomialLR(t.opt, {.total_iters = 0}), kiln::Error);
  CHECK_THROWS_AS(optim::CosineAnnealingLR(t.opt, {.T_max = 0}), kiln::Error);
  CHECK_THROWS_AS(optim::CosineAnnealingWarmRestarts(t.opt, {.T_0 = 2, .T_mult = 0}), kiln::Error);
  {
    TwoGroups fresh;  // a refused CyclicLR leaves the lrs alone (it sets them to base_lr only when accepted)
    CHECK_THROWS_AS(optim::CyclicLR(fresh.opt, {.step_size_up = 0}), kiln::Error);
    CHECK(fresh.opt.lr(1) == 0.7);
  }
  CHECK_THROWS_AS(optim::ReduceLROnPlateau(t.opt, {.factor = 1.0}), kiln::Error);
  CHECK(error_of([&] { optim::ReduceLROnPlateau(t.opt, {.min_lrs = {0.1}}); }).find("min_lrs") != std::string::npos);
  optim::ReduceLROnPlateau plateau(t.opt);
  CHECK(error_of([&] { plateau.step(); }).find("step(metric)") != std::string::npos);

  optim::LinearLR a(t.opt, {});
  optim::ExponentialLR b(t.opt, {.gamma = 0.9});
  CHECK(error_of([&] { optim::SequentialLR(t.opt, {a, b}, {}); }).find("milestone") != std::string::npos);
  CHECK(error_of([&] { optim::SequentialLR(t.opt, {a, b}, {0}); }).find("increasing") != std::string::npos);
  CHECK(error_of([&] { optim::SequentialLR(t.opt, {a, plateau}, {3}); }).find("ReduceLROnPlateau") != std::string::npos);
  TwoGroups other;
  optim::ExponentialLR c(other.opt, {.gamma = 0.9});
  CHECK(error_of([&] { optim::SequentialLR(t.opt, {a, c}, {3}); }).find("another optimizer") != std::string::npos);
  CHECK(error_of([&] { optim::ChainedScheduler({a, c}); }).find("another optimizer") != std::string::npos);
  CHECK(error_of([&] { optim::ChainedScheduler({plateau}); }).find("ReduceLROnPlateau") != std::string::npos);
  CHECK_THROWS_AS(optim::ChainedScheduler({}), kiln::Error);
}
