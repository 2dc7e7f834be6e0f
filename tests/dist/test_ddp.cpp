// Tests of DistributedDataParallel: on W ranks with a batch of b each, training equals one
// process with a batch of W * b (parameters after several steps equal to 1e-12 in float64,
// within float32 rounding otherwise), with SGD and AdamW, with no_sync gradient
// accumulation and with a GradScaler. CTest runs it alone (W = 1) and under mpirun -np 2.
#include <doctest/doctest.h>
#include <cmath>
#include "dist/ddp.h"
#include "dist/dist.h"
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
  Net() {
    a = register_module("a", nn::Linear(6, 32));
    b = register_module("b", nn::Linear(32, 32));
    c = register_module("c", nn::Linear(32, 3));
  }
  Tensor forward(const Tensor& x) override { return c(tanh(b(tanh(a(x))))); }
};

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, max(abs(sub(a[i].to(DType::float64), b[i].to(DType::float64)))).item());
  return m;
}

enum class Opt { sgd, adamw };

// Trains `steps` steps of `accum` micro-batches both ways and returns the largest
// difference between the two models' parameters.
double ddp_vs_full_batch(DType dt, Opt which, int accum, bool scaler_on, int steps = 4) {
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
  dist::DistributedDataParallel ddp(local, {.bucket_cap_mb = 0.002});  // ~2 KiB: several buckets
  CHECK(ddp.num_buckets() > 1);
  auto make = [&](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
    if (which == Opt::sgd) return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
  };
  auto opt_ref = make(*ref), opt = make(*local);
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
