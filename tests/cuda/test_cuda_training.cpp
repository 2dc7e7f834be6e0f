// A few training steps of the MLP, ConvNet and GPT on the CPU and on the GPU from the same
// initial weights and batches: the losses of every step and the final weights must match.
// This is the end-to-end check that every kernel a training step uses (forward, backward,
// the fused optimizer, batch norm's running statistics, GradScaler) agrees with the CPU.
// Skipped (visibly) where no GPU is available.
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <string>
#include <vector>
#include "gradcheck.h"
#include "parity.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;
using kiln::test::allclose;

namespace {

using StepFn = std::function<Tensor(nn::Module&, const Tensor& x, const Tensor& y)>;

struct Run {
  std::vector<double> losses;
  std::map<std::string, Tensor> state;  // parameters and buffers after the last step, on the CPU
};

// `steps` optimizer steps of `model` on `device`, one fixed batch (x, y) per step index.
template <class Opt, class Options>
Run train(nn::Module& model, Device device, Options options, const std::vector<Tensor>& xs,
          const std::vector<Tensor>& ys, const StepFn& loss_of, optim::GradScaler* scaler = nullptr) {
  model.to(device);
  model.train();
  Opt opt(model.parameters(), options);
  Run r;
  for (size_t s = 0; s < xs.size(); ++s) {
    opt.zero_grad();
    Tensor loss = loss_of(model, xs[s].to(device), ys[s].to(device));
    if (scaler) {
      scaler->scale(loss).backward();
      scaler->step(opt);
      scaler->update();
    } else {
      loss.backward();
      opt.step();
    }
    r.losses.push_back(loss.to(Device::cpu()).to(DType::float64).item());
  }
  for (auto& [name, t] : model.state_dict()) r.state[name] = t.to(Device::cpu());
  return r;
}

void check_same(const Run& cpu, const Run& gpu, double rtol, double atol) {
  REQUIRE(cpu.losses.size() == gpu.losses.size());
  for (size_t s = 0; s < cpu.losses.size(); ++s) {
    INFO("step " << s << ": cpu loss " << cpu.losses[s] << ", cuda loss " << gpu.losses[s]);
    CHECK(std::fabs(cpu.losses[s] - gpu.losses[s]) <= atol + rtol * std::fabs(cpu.losses[s]));
  }
  CHECK(cpu.losses.back() < cpu.losses.front());  // it trained
  REQUIRE(cpu.state.size() == gpu.state.size());
  for (const auto& entry : cpu.state) {
    const auto& name = entry.first;
    const auto& t = entry.second;
    INFO("tensor " << name);
    REQUIRE(gpu.state.count(name));
    CHECK(allclose(gpu.state.at(name).to(DType::float64), t.to(DType::float64), rtol, atol));
  }
}

std::vector<Tensor> batches(int n, const Shape& shape) {
  std::vector<Tensor> v;
  for (int i = 0; i < n; ++i) v.push_back(randn(shape));
  return v;
}
std::vector<Tensor> labels(int n, const Shape& shape, int64_t classes) {
  std::vector<Tensor> v;
  for (int i = 0; i < n; ++i) v.push_back(randint(0, classes, shape));
  return v;
}

Tensor classify(nn::Module& m, const Tensor& x, const Tensor& y) { return cross_entropy(m(x), y); }

}  // namespace

TEST_CASE("training parity: MLP with Adam, CPU vs CUDA" * doctest::skip(kNoGpu)) {
  manual_seed(10);
  auto xs = batches(5, {64, 784});
  auto ys = labels(5, {64}, 10);
  auto make = [] { manual_seed(11); return models::MLP({.in = 784, .hidden = {256, 128}, .out = 10}); };
  models::MLP a = make(), b = make();
  // Adam's step lr * g / (|g| + eps) moves by up to lr/eps per unit change of a near-zero
  // gradient: with eps = 1e-8 the ~1e-9 rounding differences of a GPU vs CPU gradient sum
  // can move such a weight by ~1e-4 (a sign flip: 2 lr). eps = 1e-6 bounds that at ~1e-6.
  const optim::AdamOptions o{.lr = 1e-3, .eps = 1e-6};
  Run cpu = train<optim::Adam>(a, Device::cpu(), o, xs, ys, classify);
  Run gpu = train<optim::Adam>(b, kGpu, o, xs, ys, classify);
  check_same(cpu, gpu, 1e-4, 1e-5);
}

TEST_CASE("training parity: ConvNet (conv, batch norm, pooling) with SGD momentum" * doctest::skip(kNoGpu)) {
  manual_seed(20);
  auto xs = batches(4, {16, 1, 28, 28});
  auto ys = labels(4, {16}, 10);
  auto make = [] { manual_seed(21); return models::ConvNet(); };
  models::ConvNet a = make(), b = make();
  optim::SGDOptions o{.lr = 0.01, .momentum = 0.9};
  Run cpu = train<optim::SGD>(a, Device::cpu(), o, xs, ys, classify);
  Run gpu = train<optim::SGD>(b, kGpu, o, xs, ys, classify);
  // running_mean / running_var / num_batches_tracked are in the state too
  check_same(cpu, gpu, 1e-3, 1e-4);
}

TEST_CASE("training parity: GPT (embedding, attention, layer norm) with AdamW" * doctest::skip(kNoGpu)) {
  manual_seed(30);
  const models::GPTConfig cfg{.vocab = 96, .context = 64, .layers = 2, .heads = 4, .width = 64, .dropout = 0.0,
                              .tie_weights = false};
  auto xs = std::vector<Tensor>{}, ys = std::vector<Tensor>{};
  for (int i = 0; i < 4; ++i) {
    xs.push_back(randint(0, cfg.vocab, {8, 64}));
    ys.push_back(randint(0, cfg.vocab, {8, 64}));
  }
  auto lm_loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
    Tensor logits = m(x);
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
  };
  auto make = [&] { manual_seed(31); return models::GPT(cfg); };
  models::GPT a = make(), b = make();
  optim::AdamWOptions o{.lr = 1e-3, .eps = 1e-6, .weight_decay = 0.1};  // eps: see the MLP case
  Run cpu = train<optim::AdamW>(a, Device::cpu(), o, xs, ys, lm_loss);
  Run gpu = train<optim::AdamW>(b, kGpu, o, xs, ys, lm_loss);
  check_same(cpu, gpu, 1e-3, 1e-4);
}

TEST_CASE("training parity: MLP under float16 autocast with a GradScaler" * doctest::skip(kNoGpu)) {
  manual_seed(40);
  auto xs = batches(5, {64, 784});
  auto ys = labels(5, {64}, 10);
  auto amp_loss = [](nn::Module& m, const Tensor& x, const Tensor& y) {
    autocast guard(DType::float16);
    return cross_entropy(m(x), y);
  };
  auto make = [] { manual_seed(41); return models::MLP({.in = 784, .hidden = {256}, .out = 10}); };
  models::MLP a = make(), b = make();
  optim::GradScaler sa({.init_scale = 1024.0, .growth_interval = 2}), sb({.init_scale = 1024.0, .growth_interval = 2});
  Run cpu = train<optim::SGD>(a, Device::cpu(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9}, xs, ys, amp_loss, &sa);
  Run gpu = train<optim::SGD>(b, kGpu, optim::SGDOptions{.lr = 0.05, .momentum = 0.9}, xs, ys, amp_loss, &sb);
  CHECK(sa.get_scale() == sb.get_scale());  // same growth sequence (no inf with these inputs)
  check_same(cpu, gpu, 2e-2, 2e-3);         // float16 GEMM inputs on both sides, accumulation order differs
}
