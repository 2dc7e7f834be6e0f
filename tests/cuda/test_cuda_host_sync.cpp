// A training step that never waits for the GPU: indices and class targets are checked on
// the device (a bad one is reported at the next host read, naming the op and the value),
// arange and fill run as kernels, and a whole step of the MLP, ConvNet and GPT (forward,
// loss, backward, optimizer, GradScaler) leaves cuda::host_sync_count() unchanged.
// Skipped (visibly) where no GPU is available.
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <vector>
#include "kiln/testing.h"
#include "parity.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;

TEST_CASE("no GPU: the device-side checks and the sync count are still defined" * doctest::skip(!kNoGpu)) {
  CHECK(cuda::host_sync_count() == 0);
  CHECK_NOTHROW(cuda::raise_check_errors());  // nothing can have failed on no device
}

TEST_CASE("arange and fill on the GPU: kernels giving the CPU's values" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::float32, DType::float64, DType::float16, DType::bfloat16, DType::int64, DType::int32}) {
    INFO(dtype_name(dt));
    const bool fp = dt != DType::int64 && dt != DType::int32;
    const double start = fp ? -1.25 : -3, end = fp ? 9.8 : 17, step = fp ? 0.35 : 2;
    const Tensor c = arange(start, end, step, {.dtype = dt});
    const uint64_t before = cuda::host_sync_count();
    const Tensor g = arange(start, end, step, {.dtype = dt, .device = kGpu});
    const Tensor f = full({3, 5}, 2.5, {.dtype = dt, .device = kGpu});
    CHECK(cuda::host_sync_count() == before);  // nothing read back to build them
    CHECK(g.device() == kGpu);
    CHECK(g.to_vector<double>() == c.to_vector<double>());
    CHECK(f.to_vector<double>() == full({3, 5}, 2.5, {.dtype = dt}).to_vector<double>());
  }
}

TEST_CASE("embedding, index_select, gather: a bad GPU index fails at the next host read" * doctest::skip(kNoGpu)) {
  const Tensor w = randn({5, 3}).to(kGpu);
  const Tensor bad = from_vector<int64_t>({1, 7, 2}).to(kGpu);
  Tensor out;
  CHECK_NOTHROW(out = embedding(bad, w));  // no wait for the GPU at the call
  CHECK_THROWS_WITH_AS(out.to(Device::cpu()), doctest::Contains("embedding: index 7 is out of range for 5 rows"),
                       Error);
  // reported once; a good lookup then reads back normally and matches the CPU
  const Tensor good = from_vector<int64_t>({4, 0, 0}).to(kGpu);
  CHECK(embedding(good, w).to_vector<double>() == embedding(good.to(Device::cpu()), w.to(Device::cpu())).to_vector<double>());

  const Tensor neg = from_vector<int64_t>({0, -1}).to(kGpu);
  Tensor sel = index_select(w, 0, neg);
  CHECK_THROWS_WITH_AS(sum(sel).item(), doctest::Contains("index_select: index -1 is out of range"), Error);
  Tensor gat = gather(w, 1, from_vector<int64_t>({0, 3}, {1, 2}).to(kGpu));
  CHECK_THROWS_WITH_AS(cuda::synchronize(), doctest::Contains("gather: index 3 is out of range for 3"), Error);
}

TEST_CASE("cross_entropy and nll_loss: targets checked and counted on the GPU" * doctest::skip(kNoGpu)) {
  manual_seed(3);
  const Tensor logits = randn({6, 4});
  const Tensor tgt = from_vector<int64_t>({0, 3, -100, 1, -100, 2});
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    Tensor xc = logits.clone().requires_grad_(), xg = logits.to(kGpu).requires_grad_();
    Tensor lc = cross_entropy(xc, tgt, {.reduction = r});
    Tensor lg = cross_entropy(xg, tgt.to(kGpu), {.reduction = r});
    sum(lc).backward();
    sum(lg).backward();
    CHECK(test::compare(lg, lc, 1e-5) == "");           // the mean divides by 4 targets, not 6
    CHECK(test::compare(xg.grad(), xc.grad(), 1e-5) == "");
  }
  Tensor loss = cross_entropy(logits.to(kGpu), from_vector<int64_t>({0, 9, 1, 1, 2, 3}).to(kGpu));
  CHECK_THROWS_WITH_AS(loss.item(), doctest::Contains("cross_entropy: target value 9 is out of range for 4 classes"),
                       Error);
  Tensor nll = nll_loss(log_softmax(logits, 1).to(kGpu), from_vector<int64_t>({0, 1, 2, 3, 4, 0}).to(kGpu));
  CHECK_THROWS_WITH_AS(nll.item(), doctest::Contains("nll_loss: target value 4 is out of range for 4 classes"),
                       Error);
  // all targets ignored: the mean is NaN, as on the CPU
  const Tensor none = full({6}, -100, {.dtype = DType::int64});
  CHECK(std::isnan(cross_entropy(logits.to(kGpu), none.to(kGpu)).item()));
  CHECK(std::isnan(cross_entropy(logits, none).item()));
}

namespace {

// Runs `step` twice to warm up (cuDNN's search, the allocator's first blocks), then three
// times more, and returns the host synchronisations those three made.
uint64_t syncs_of(const std::function<void()>& step) {
  step();
  step();
  cuda::synchronize();
  const uint64_t before = cuda::host_sync_count();
  for (int i = 0; i < 3; ++i) step();
  const uint64_t n = cuda::host_sync_count() - before;
  cuda::synchronize();
  return n;
}

}  // namespace

TEST_CASE("a training step waits for the GPU zero times" * doctest::skip(kNoGpu)) {
  SUBCASE("ConvNet, SGD with momentum (conv, batch norm, pooling, cross_entropy)") {
    manual_seed(1);
    models::ConvNet m;
    m.to(kGpu);
    optim::SGD opt(m.parameters(), {.lr = 0.01, .momentum = 0.9});
    const Tensor x = randn({16, 1, 28, 28}).to(kGpu), y = randint(0, 10, {16}).to(kGpu);
    CHECK(syncs_of([&] {
            opt.zero_grad();
            cross_entropy(m(x), y).backward();
            opt.step();
          }) == 0);
  }
  SUBCASE("GPT under bf16 autocast, AdamW (embedding, positions, attention, layer norm)") {
    manual_seed(2);
    models::GPT m({.vocab = 96, .context = 64, .layers = 2, .heads = 4, .width = 64, .dropout = 0.1});
    m.to(kGpu);
    optim::AdamW opt(m.parameters(), {.lr = 1e-3, .weight_decay = 0.1});
    const Tensor x = randint(0, 96, {8, 64}).to(kGpu), y = randint(0, 96, {8, 64}).to(kGpu);
    CHECK(syncs_of([&] {
            opt.zero_grad();
            Tensor loss;
            {
              autocast guard(DType::bfloat16);
              Tensor logits = m(x);
              loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
            }
            loss.backward();
            opt.step();
          }) == 0);
  }
  SUBCASE("MLP under fp16 autocast with a GradScaler") {
    manual_seed(3);
    models::MLP m({.in = 784, .hidden = {256}, .out = 10});
    m.to(kGpu);
    optim::SGD opt(m.parameters(), {.lr = 0.05, .momentum = 0.9});
    optim::GradScaler scaler({.init_scale = 1024.0});
    const Tensor x = randn({64, 784}).to(kGpu), y = randint(0, 10, {64}).to(kGpu);
    CHECK(syncs_of([&] {
            opt.zero_grad();
            Tensor loss;
            {
              autocast guard(DType::float16);
              loss = cross_entropy(m(x), y);
            }
            scaler.scale(loss).backward();
            scaler.step(opt);
            scaler.update();
          }) == 0);
  }
}

TEST_CASE("DivergenceGuard::check_on_device: the skip decided on the GPU, counted when read" * doctest::skip(kNoGpu)) {
  manual_seed(4);
  models::MLP m({.in = 8, .hidden = {16}, .out = 3});
  m.to(kGpu);
  optim::SGD opt(m.parameters(), {.lr = 0.1});
  optim::DivergenceGuard guard({.max_consecutive_skips = 3});
  const Tensor x = randn({4, 8}).to(kGpu), y = randint(0, 3, {4}).to(kGpu);
  auto weights = [&] { return m.parameters().front().to(Device::cpu()); };
  for (int bad = 0; bad < 3; ++bad) {  // 0: a good step; 1: a NaN loss; 2: an inf gradient
    INFO("case " << bad);
    opt.zero_grad();
    Tensor loss = cross_entropy(m(x), y);
    loss.backward();
    if (bad == 1) loss = mul(loss, NAN);
    if (bad == 2) {
      NoGradGuard ng;
      m.parameters().back().grad().fill_(INFINITY);
    }
    const Tensor before = weights();
    const uint64_t syncs = cuda::host_sync_count();
    const Tensor flag = guard.check_on_device(loss.detach(), opt);
    opt.step_unless(flag);
    CHECK(cuda::host_sync_count() == syncs);  // nothing read
    CHECK((flag.item() != 0) == (bad != 0));
    const bool moved = !kiln::testing::allclose(weights(), before, 0, 0);
    CHECK(moved == (bad == 0));
    guard.record(flag.item() != 0, "test");
  }
  CHECK(guard.skipped() == 2);
  CHECK(guard.consecutive() == 2);
}
