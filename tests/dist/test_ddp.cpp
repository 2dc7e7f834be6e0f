// Tests of DistributedDataParallel: on W ranks with a batch of b each, training equals one
// process with a batch of W * b (parameters after several steps equal to 1e-12 in float64,
// within float32 rounding otherwise), with SGD and AdamW, with no_sync gradient
// accumulation, with a GradScaler and with activation checkpointing; and the same for
// ZeRO-1 (dist::ZeroRedundancyOptimizer), whose full state_dict equals the plain
// optimizer's. CTest runs it alone (W = 1) and under mpirun -np 2.
#include <doctest/doctest.h>
#include <cmath>
#include <limits>
#include "kiln/dist/ddp.h"
#include "kiln/dist/dist.h"
#include "kiln/dist/zero.h"
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::test::error_of;

namespace {

struct Init {
  Init() { dist::init(); }
} init_once;

struct Net : nn::Module {
  nn::Linear a, b, c;
  bool ckpt = false;  // recompute b's activations in backward (activation checkpointing)
  Net() {
    a = register_module("a", nn::Linear(6, 32));
    b = register_module("b", nn::Linear(32, 32));
    c = register_module("c", nn::Linear(32, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = tanh(a(x));
    h = ckpt ? kiln::checkpoint([this](const Tensor& t) { return tanh(b(t)); }, h) : tanh(b(h));
    return c(h);
  }
};

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, max(abs(sub(a[i].to(DType::float64), b[i].to(DType::float64)))).item());
  return m;
}

enum class Opt { sgd, adamw, nadam };
enum class Mode { ddp, ddp_checkpointed, zero1 };

std::unique_ptr<optim::Optimizer> make_optimizer(const std::vector<optim::ParamGroup>& groups, Opt which) {
  if (which == Opt::sgd) return std::make_unique<optim::SGD>(groups, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  if (which == Opt::nadam) return std::make_unique<optim::NAdam>(groups, optim::NAdamOptions{.lr = 0.01, .weight_decay = 0.1});
  return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
}

// Trains `steps` steps of `accum` micro-batches both ways (one process with the full
// batch; this rank with its slice, through DDP or ZeRO-1) and returns the largest
// difference between the two models' parameters.
double ddp_vs_full_batch(DType dt, Opt which, int accum, bool scaler_on, int steps = 4, Mode mode = Mode::ddp) {
  const int W = dist::world_size(), R = dist::rank();
  const int64_t b = 5;
  manual_seed(1);
  auto ref = std::make_shared<Net>();
  ref->to(dt);
  auto local = std::make_shared<Net>();  // other initial weights: DDP broadcasts rank 0's
  local->to(dt);
  {
    NoGradGuard ng;
    auto src = ref->parameters(), dst = local->parameters();
    if (R == 0)
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  local->ckpt = mode == Mode::ddp_checkpointed;
  dist::DistributedDataParallel ddp(local, {.bucket_cap_mb = 0.002});  // ~2 KiB: several buckets
  CHECK(ddp.num_buckets() > 1);
  if (mode == Mode::zero1) ddp.set_require_sync(false);  // ZeRO-1 reduces the gradients in step()
  auto opt_ref = make_optimizer(optim::single_group(ref->parameters()), which);
  std::unique_ptr<optim::Optimizer> opt;
  if (mode == Mode::zero1)
    opt = std::make_unique<dist::ZeroRedundancyOptimizer>(
        local->parameters(), [&](const std::vector<optim::ParamGroup>& shard) { return make_optimizer(shard, which); });
  else
    opt = make_optimizer(optim::single_group(local->parameters()), which);
  amp::GradScaler scaler_ref({.init_scale = 256, .enabled = scaler_on}), scaler({.init_scale = 256, .enabled = scaler_on});
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < accum; ++m) {
      manual_seed(uint64_t(100 + 10 * s + m));  // the same full batch on every rank
      const Tensor x = randn({W * b, 6}).to(dt), y = randint(0, 3, {W * b});
      Tensor loss_ref = div(cross_entropy((*ref)(x), y), double(accum));
      scaler_ref.scale(loss_ref).backward();
      Tensor loss = div(cross_entropy(ddp(x.narrow(0, R * b, b)), y.narrow(0, R * b, b)), double(accum));
      if (m + 1 < accum) {
        auto no_sync = ddp.no_sync();
        scaler.scale(loss).backward();
      } else {
        scaler.scale(loss).backward();
      }
    }
    scaler_ref.step(*opt_ref);
    scaler_ref.update();
    scaler.step(*opt);
    scaler.update();
    opt_ref->zero_grad();
    opt->zero_grad();
  }
  CHECK(scaler.get_scale() == scaler_ref.get_scale());
  if (mode == Mode::zero1 && dt == DType::float64) {  // the full state is the plain optimizer's
    const optim::StateDict full = opt->state_dict(), plain = opt_ref->state_dict();
    CHECK(full.size() == plain.size());
    double worst = 0;
    for (const auto& entry : plain) {  // (no structured binding inside REQUIRE: clang 14)
      const std::string& key = entry.first;
      REQUIRE_MESSAGE(full.count(key), "missing " << key);
      worst = std::max(worst, max(abs(sub(full.at(key).to(DType::float64), entry.second.to(DType::float64)))).item());
    }
    CHECK(worst < 1e-12);
  }
  return max_diff(ref->parameters(), local->parameters());
}

}  // namespace

TEST_CASE("DDP equals full-batch training: SGD and AdamW, float64 to 1e-12, float32 to rounding") {
  MESSAGE("rank " << dist::rank() << " of " << dist::world_size());
  CHECK(ddp_vs_full_batch(DType::float64, Opt::sgd, 1, false) < 1e-12);
  CHECK(ddp_vs_full_batch(DType::float64, Opt::adamw, 1, false) < 1e-12);
  CHECK(ddp_vs_full_batch(DType::float32, Opt::sgd, 1, false) < 1e-5);
  CHECK(ddp_vs_full_batch(DType::float32, Opt::adamw, 1, false) < 1e-5);
}

TEST_CASE("DDP with no_sync gradient accumulation and with a GradScaler") {
  CHECK(ddp_vs_full_batch(DType::float64, Opt::sgd, 3, false) < 1e-12);
  CHECK(ddp_vs_full_batch(DType::float64, Opt::adamw, 2, true) < 1e-12);
  CHECK(ddp_vs_full_batch(DType::float32, Opt::sgd, 2, true) < 1e-5);
}

TEST_CASE("DDP: every rank starts from rank 0's weights; an unused parameter is an error") {
  manual_seed(uint64_t(7 + dist::rank()));  // different weights on every rank ...
  auto net = std::make_shared<Net>();
  dist::DistributedDataParallel ddp(net);
  Tensor w = net->a.parameters()[0].clone();
  Tensor gathered = dist::all_gather(w.reshape({1, -1}));
  for (int r = 1; r < dist::world_size(); ++r)  // ... and rank 0's after the wrap
    CHECK(max(abs(sub(gathered.select(0, r), gathered.select(0, 0)))).item() == 0);
  // a backward that does not reach every parameter leaves a bucket unreduced
  Tensor partial = sum(net->a(randn({2, 6})));
  partial.backward();
  if (ddp.num_buckets() > 0)
    CHECK(error_of([&] { ddp(randn({2, 6})); }).find("got no gradient") != std::string::npos);
}

TEST_CASE("DDP: a bucket that got no gradient at all is an error at the next forward too") {
  // one bucket per parameter: b and c's buckets get nothing (only checked where one had any)
  auto net = std::make_shared<Net>();
  dist::DistributedDataParallel ddp(net, {.bucket_cap_mb = 1e-6});
  REQUIRE(ddp.num_buckets() == 6);
  sum(net->a(randn({2, 6}))).backward();
  CHECK(error_of([&] { ddp(randn({2, 6})); }).find("got no gradient") != std::string::npos);
  // the reductions in flight were waited for and the backward forgotten: the wrapper still works
  sum(ddp(randn({2, 6}))).backward();
  CHECK_NOTHROW(ddp(randn({2, 6})));
}

TEST_CASE("DDP: a model that differs between ranks is an error on every rank, at construction") {
  struct Wide : nn::Module {
    nn::Linear a;
    explicit Wide(int64_t h) { a = register_module("a", nn::Linear(4, h)); }
    Tensor forward(const Tensor& x) override { return a(x); }
  };
  auto same = std::make_shared<Wide>(8);
  CHECK_NOTHROW(dist::DistributedDataParallel{same});
  auto differs = std::make_shared<Wide>(8 + dist::rank());  // rank 1 has 9 outputs
  if (dist::world_size() > 1)  // was a truncated broadcast on one rank and a wait on the other
    CHECK(error_of([&] { dist::DistributedDataParallel d(differs); }).find("differs between ranks") !=
          std::string::npos);
  else
    CHECK_NOTHROW(dist::DistributedDataParallel{differs});
}

TEST_CASE("DDP with activation checkpointing equals full-batch training") {
  CHECK(ddp_vs_full_batch(DType::float64, Opt::adamw, 1, false, 3, Mode::ddp_checkpointed) < 1e-12);
  CHECK(ddp_vs_full_batch(DType::float64, Opt::sgd, 2, false, 3, Mode::ddp_checkpointed) < 1e-12);
}

TEST_CASE("ZeRO-1 equals full-batch training: SGD, AdamW, NAdam, accumulation, GradScaler; its state is the plain one") {
  CHECK(ddp_vs_full_batch(DType::float64, Opt::sgd, 1, false, 4, Mode::zero1) < 1e-12);
  CHECK(ddp_vs_full_batch(DType::float64, Opt::adamw, 1, false, 4, Mode::zero1) < 1e-12);
  CHECK(ddp_vs_full_batch(DType::float64, Opt::nadam, 1, false, 4, Mode::zero1) < 1e-12);  // per-parameter mu_product
  CHECK(ddp_vs_full_batch(DType::float64, Opt::adamw, 3, true, 4, Mode::zero1) < 1e-12);
  CHECK(ddp_vs_full_batch(DType::float32, Opt::adamw, 2, true, 4, Mode::zero1) < 1e-5);
}

TEST_CASE("ZeRO-1 shards the optimizer state, and its state_dict moves to and from plain optimizers") {
  const int W = dist::world_size(), R = dist::rank();
  manual_seed(3);
  auto net = std::make_shared<Net>();
  net->to(DType::float64);
  auto adamw = [](const std::vector<optim::ParamGroup>& g) { return make_optimizer(g, Opt::adamw); };
  dist::ZeroRedundancyOptimizer zero(net->parameters(), adamw);
  auto train_step = [&](optim::Optimizer& opt, nn::Module& m, uint64_t seed) {
    manual_seed(seed);
    const Tensor x = randn({4, 6}, {.dtype = DType::float64}), y = randint(0, 3, {4});
    cross_entropy(m(x), y).backward();  // the same batch on every rank: the mean is that gradient
    opt.step();
    opt.zero_grad();
  };
  for (int s = 0; s < 3; ++s) train_step(zero, *net, uint64_t(40 + s));
  // memory: this rank holds its 1/W of AdamW's two buffers (plus at most W - 1 padding elements)
  int64_t numel = 0;
  for (const auto& p : net->parameters()) numel += p.numel();
  const int64_t full_bytes = 2 * numel * 8;
  MESSAGE("AdamW state: " << full_bytes << " bytes unsharded, " << zero.state_bytes() << " on rank " << R << " of " << W);
  CHECK(zero.state_bytes() <= 2 * 8 * ((numel + W - 1) / W));
  CHECK(zero.state_bytes() >= 2 * 8 * (numel / W));

  // its full state loads into a plain AdamW on a copy of the model, and both then step alike
  const optim::StateDict sd = zero.state_dict();
  auto copy = std::make_shared<Net>();
  copy->to(DType::float64);
  {
    NoGradGuard ng;
    auto src = net->parameters(), dst = copy->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  auto plain = make_optimizer(optim::single_group(copy->parameters()), Opt::adamw);
  plain->load_state_dict(sd);
  CHECK(plain->step_count() == 3);
  train_step(zero, *net, 50);
  train_step(*plain, *copy, 50);
  CHECK(max_diff(net->parameters(), copy->parameters()) < 1e-12);

  // and a plain state loads into a ZeRO-1 optimizer built before the weights were loaded
  // (a resume: the model's weights, not the ones at construction, are stepped)
  manual_seed(99);
  auto fresh = std::make_shared<Net>();
  fresh->to(DType::float64);
  dist::ZeroRedundancyOptimizer again(fresh->parameters(), adamw);
  fresh->load_state_dict(copy->state_dict());
  again.load_state_dict(plain->state_dict());
  train_step(zero, *net, 51);
  train_step(again, *fresh, 51);
  CHECK(max_diff(net->parameters(), fresh->parameters()) < 1e-12);
  CHECK(error_of([&] {
          auto sd2 = plain->state_dict();
          sd2["state.0.exp_avg"] = zeros({2, 2}, {.dtype = DType::float64});
          again.load_state_dict(sd2);
        }).find("has shape") != std::string::npos);
}

TEST_CASE("ZeRO-1 with a GradScaler: an inf on one rank skips the step on every rank") {
  const int W = dist::world_size(), R = dist::rank();
  manual_seed(5);
  auto net = std::make_shared<Net>();
  dist::ZeroRedundancyOptimizer opt(net->parameters(), [](const std::vector<optim::ParamGroup>& g) {
    return make_optimizer(g, Opt::sgd);
  });
  amp::GradScaler scaler({.init_scale = 1024});
  const Tensor before = net->a.parameters()[0].clone();
  manual_seed(uint64_t(60 + R));
  scaler.scale(cross_entropy((*net)(randn({4, 6})), randint(0, 3, {4}))).backward();
  if (R == W - 1) {  // only the last rank's local gradient overflows
    NoGradGuard ng;
    net->c.parameters()[0].grad().narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
  }
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(scaler.last_step_skipped());
  CHECK(scaler.get_scale() == 512);
  CHECK(max(abs(sub(net->a.parameters()[0], before))).item() == 0);
}
