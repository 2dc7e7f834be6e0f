// CUDA against CPU for the optimizers (multi-tensor SGD / Adam / AdamW kernels, one launch
// per parameter group; RMSprop and the tensor-op optimizers of optim/adaptive.h) and the device-side GradScaler (unscale, skipped steps, scale
// growth and backoff). Skipped (visibly, as doctest skips) where no GPU is available.
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include "gradcheck.h"
#include "parity.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/adaptive.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/rmsprop.h"
#include "kiln/optim/sgd.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;

namespace {

// compare relative to the largest |ref| (tests/cuda/parity.h)
std::string compare(const Tensor& got, const Tensor& ref, double rtol) {
  return test::compare(got, ref, rtol, test::Scale::max);
}

// Odd sizes: smaller than a block, one chunk plus a bit, several chunks.
const std::vector<Shape> kShapes = {{7}, {13, 5}, {1}, {3, 11001}, {65537}};

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<optim::ParamGroup>&)>;

struct OptCase {
  const char* name;
  MakeOpt make;
};

std::vector<OptCase> opt_cases() {
  using namespace optim;
  return {
      {"SGD momentum+nesterov+wd", [](const auto& g) {
         return std::make_unique<SGD>(g, SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       }},
      {"SGD dampening", [](const auto& g) {
         return std::make_unique<SGD>(g, SGDOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3});
       }},
      {"SGD plain", [](const auto& g) { return std::make_unique<SGD>(g, SGDOptions{.lr = 0.1}); }},
      {"Adam wd", [](const auto& g) { return std::make_unique<Adam>(g, AdamOptions{.lr = 1e-2, .weight_decay = 0.1}); }},
      {"Adam amsgrad", [](const auto& g) {
         return std::make_unique<Adam>(g, AdamOptions{.lr = 1e-2, .betas = {0.8, 0.99}, .amsgrad = true});
       }},
      {"AdamW", [](const auto& g) { return std::make_unique<AdamW>(g, AdamWOptions{.lr = 1e-2, .weight_decay = 0.05}); }},
      // the optimizers written from tensor ops (optim/adaptive.h) and RMSprop's per-tensor path
      {"RMSprop centered", [](const auto& g) {
         return std::make_unique<RMSprop>(g, RMSpropOptions{.lr = 1e-2, .momentum = 0.5, .centered = true});
       }},
      {"Adagrad", [](const auto& g) { return std::make_unique<Adagrad>(g, AdagradOptions{.lr = 0.1, .lr_decay = 0.01}); }},
      {"Adadelta", [](const auto& g) { return std::make_unique<Adadelta>(g, AdadeltaOptions{.weight_decay = 0.01}); }},
      {"Adamax", [](const auto& g) { return std::make_unique<Adamax>(g, AdamaxOptions{.lr = 1e-2}); }},
      {"NAdam", [](const auto& g) { return std::make_unique<NAdam>(g, NAdamOptions{.lr = 1e-2, .weight_decay = 0.01}); }},
      {"RAdam", [](const auto& g) { return std::make_unique<RAdam>(g, RAdamOptions{.lr = 1e-2, .betas = {0.9, 0.9}}); }},
      {"Rprop", [](const auto& g) { return std::make_unique<Rprop>(g, RpropOptions{.lr = 1e-2}); }},
      {"ASGD", [](const auto& g) { return std::make_unique<ASGD>(g, ASGDOptions{.lr = 1e-2, .t0 = 2}); }},
      {"Adafactor", [](const auto& g) { return std::make_unique<Adafactor>(g, AdafactorOptions{.weight_decay = 0.01}); }},
  };
}

}  // namespace

TEST_CASE("cuda parity: every optimizer over several steps and two groups (multi-tensor SGD / Adam / AdamW, tensor-op others)" * doctest::skip(kNoGpu)) {
  for (const OptCase& oc : opt_cases()) {
    INFO(oc.name);
    manual_seed(21);
    std::vector<Tensor> cpu_p, gpu_p;
    for (const Shape& s : kShapes) {
      Tensor p = randn(s);
      cpu_p.push_back(p.clone().requires_grad_());
      gpu_p.push_back(p.to(kGpu).requires_grad_());
    }
    // two groups, the second with its own learning rate
    auto groups = [](const std::vector<Tensor>& p) {
      return std::vector<optim::ParamGroup>{{.params = {p[0], p[1], p[2]}}, {.params = {p[3], p[4]}, .lr = 0.02}};
    };
    auto cpu_opt = oc.make(groups(cpu_p)), gpu_opt = oc.make(groups(gpu_p));
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < kShapes.size(); ++i) {
        if (step == 1 && i == 2) {  // a parameter without a gradient this step
          cpu_p[i].set_grad(Tensor());
          gpu_p[i].set_grad(Tensor());
          continue;
        }
        Tensor g = randn(kShapes[i]);
        cpu_p[i].set_grad(g);
        gpu_p[i].set_grad(g.to(kGpu));
      }
      cpu_opt->step();
      gpu_opt->step();
    }
    for (size_t i = 0; i < kShapes.size(); ++i) {
      INFO("parameter " << i << " " << shape_str(kShapes[i]));
      CHECK(compare(gpu_p[i].detach(), cpu_p[i].detach(), 1e-5) == "");
    }
    auto cs = cpu_opt->state_dict(), gs = gpu_opt->state_dict();
    REQUIRE(cs.size() == gs.size());
    for (const auto& kv : cs) {
      const auto& k = kv.first;
      const auto& v = kv.second;
      INFO(k);
      REQUIRE(gs.count(k) == 1);
      if (k.find(".params") != std::string::npos) CHECK(gs.at(k).to_vector<double>() == v.to_vector<double>());
      else if (v.dim() == 0) CHECK(gs.at(k).item() == v.item());
      else CHECK(compare(gs.at(k), v, 1e-5) == "");
    }
  }
}

TEST_CASE("cuda parity: device GradScaler skips inf steps, backs off and grows like the CPU one" *
          doctest::skip(kNoGpu)) {
  for (const OptCase& oc : opt_cases()) {
    if (std::string(oc.name) == "SGD plain") continue;
    INFO(oc.name);
    manual_seed(22);
    std::vector<Tensor> cpu_p, gpu_p, xs;
    for (const Shape& s : kShapes) {
      Tensor p = randn(s);
      cpu_p.push_back(p.clone().requires_grad_());
      gpu_p.push_back(p.to(kGpu).requires_grad_());
    }
    auto cpu_opt = oc.make(optim::single_group(cpu_p)), gpu_opt = oc.make(optim::single_group(gpu_p));
    CHECK(gpu_opt->can_skip_on_device());
    amp::GradScaler cpu_scaler({.init_scale = 1024.0, .growth_interval = 2});
    amp::GradScaler gpu_scaler({.init_scale = 1024.0, .growth_interval = 2});
    // inf on steps 0 (the very first: buffers created on a skipped step), 3 and 4 (twice in a row)
    const std::vector<int> bad = {1, 0, 0, 1, 1, 0, 0, 0, 0};
    for (size_t step = 0; step < bad.size(); ++step) {
      INFO("step " << step);
      Tensor cpu_loss = zeros({}), gpu_loss = zeros({}, {.device = kGpu});
      for (size_t i = 0; i < kShapes.size(); ++i) {
        Tensor x = randn(kShapes[i]);
        if (bad[step] && i == 3) x = mul(x, INFINITY);  // inf (and NaN where x is 0) in one gradient
        cpu_loss = add(cpu_loss, sum(mul(cpu_p[i], x)));
        gpu_loss = add(gpu_loss, sum(mul(gpu_p[i], x.to(kGpu))));
      }
      cpu_opt->zero_grad();
      gpu_opt->zero_grad();
      cpu_scaler.scale(cpu_loss).backward();
      gpu_scaler.scale(gpu_loss).backward();
      CHECK(gpu_scaler.on_device());
      const bool ran = cpu_scaler.step(*cpu_opt);
      CHECK(ran == !bad[step]);
      gpu_scaler.step(*gpu_opt);
      cpu_scaler.update();
      gpu_scaler.update();
      CHECK(gpu_scaler.last_step_skipped() == bool(bad[step]));
      CHECK(gpu_scaler.get_scale() == cpu_scaler.get_scale());
      CHECK(gpu_scaler.growth_tracker() == cpu_scaler.growth_tracker());
      for (size_t i = 0; i < kShapes.size(); ++i) CHECK(compare(gpu_p[i].detach(), cpu_p[i].detach(), 1e-5) == "");
    }
    // 1024 -> 512 (0) -> 1024 (2) -> 512 (3) -> 256 (4) -> 512 (6) -> 1024 (8)
    CHECK(gpu_scaler.get_scale() == 1024.0);
    auto cs = cpu_opt->state_dict(), gs = gpu_opt->state_dict();
    CHECK(gs.at("step_count").item() == cs.at("step_count").item());
    CHECK(gs.at("state.0.step").item() == cs.at("state.0.step").item());
    auto css = cpu_scaler.state_dict(), gss = gpu_scaler.state_dict();
    for (const auto& [k, v] : css) CHECK(gss.at(k).item() == v.item());
  }
}

TEST_CASE("cuda: GradScaler with an optimizer without a multi-tensor kernel takes the host path" *
          doctest::skip(kNoGpu)) {
  Tensor w = ones({5}, {.device = kGpu}).requires_grad_();
  optim::RMSprop opt({w}, {.lr = 0.1});
  CHECK(!opt.can_skip_on_device());
  amp::GradScaler scaler({.init_scale = 8.0});
  Tensor x = from_vector(std::vector<float>{1, 2, INFINITY, 4, 5}, {5}).to(kGpu);
  scaler.scale(sum(mul(w, x))).backward();
  CHECK(!scaler.step(opt));  // found on the host (a sync), the step did not run
  scaler.update();
  CHECK(scaler.get_scale() == 4.0);
  CHECK(w.detach().to_vector<float>() == std::vector<float>(5, 1.0f));
}
