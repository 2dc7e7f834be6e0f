// find_batch_size (optim/batch_finder.h) on the CPU with a memory limit: the batch it
// returns fits and the next one does not, only multiples are tried when asked, the model,
// optimizer and random generator are as before, and impossible targets are clear errors.
#include <doctest/doctest.h>
#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/optim/batch_finder.h"

using namespace kiln;
using kiln::test::error_of;

namespace {

struct Setup {
  models::MLP model{models::MLPOptions{.in = 64, .hidden = {128, 128}, .out = 10}};
  optim::AdamW opt{model.parameters(), optim::AdamWOptions{.lr = 1e-3}};
  int64_t steps = 0;
  void step(int64_t b) {
    ++steps;
    const Tensor x = randn({b, 64}), y = randint(0, 10, {b});
    cross_entropy(model(x), y).backward();
    opt.step();
  }
};

}  // namespace

TEST_CASE("find_batch_size: the largest batch within the limit, and everything restored") {
  manual_seed(1);
  Setup s;
  s.step(4);  // some optimizer state to restore
  s.opt.zero_grad();
  auto step = [&](int64_t b) { s.step(b); };
  const auto params_before = s.model.state_dict();
  std::vector<Tensor> before;
  for (const auto& [k, t] : params_before) before.push_back(t.clone());
  const optim::StateDict opt_before = s.opt.state_dict();
  const RngState rng_before = get_rng_state();
  // the peak of a batch of 100 becomes the target (the peak counts every live tensor, so
  // it is measured with the copies above alive)
  const auto probe = optim::find_batch_size(step, s.model, s.opt, Device::cpu(),
                                            {.start = 100, .max = 100, .memory_limit = int64_t(1) << 40});
  REQUIRE(probe.batch == 100);
  const int64_t limit = probe.peak_bytes;

  const auto r = optim::find_batch_size(step, s.model, s.opt, Device::cpu(), {.max = 100000, .memory_limit = limit});
  MESSAGE("limit " << limit << " bytes: batch " << r.batch << " (peak " << r.peak_bytes << "), " << r.tries.size()
                   << " tries");
  CHECK(r.batch >= 100);
  CHECK(r.peak_bytes <= limit);
  CHECK(r.limit_bytes == limit);
  bool next_fails = false;
  for (const auto& t : r.tries) {
    if (t.fits) CHECK(t.peak_bytes <= limit);
    if (t.fits) CHECK(t.batch <= r.batch);
    if (t.batch == r.batch + 1) next_fails = !t.fits;
  }
  CHECK(next_fails);  // bisected down to one

  {  // nothing changed (in a scope: the copies made here would raise the next search's baseline)
    size_t i = 0;
    for (const auto& [k, t] : s.model.state_dict()) CHECK(max(abs(sub(t, before[i++]))).item() == 0);
    const optim::StateDict opt_after = s.opt.state_dict();
    REQUIRE(opt_after.size() == opt_before.size());
    for (const auto& [k, t] : opt_before)
      CHECK(max(abs(sub(opt_after.at(k).to(DType::float64), t.to(DType::float64)))).item() == 0);
  }
  CHECK(get_rng_state().seed == rng_before.seed);
  CHECK(get_rng_state().offset == rng_before.offset);
  for (const auto& p : s.model.parameters()) CHECK_FALSE(p.grad().defined());

  const auto r8 = optim::find_batch_size(step, s.model, s.opt, Device::cpu(),
                                         {.start = 8, .max = 100000, .multiple_of = 8, .memory_limit = limit});
  CHECK(r8.batch % 8 == 0);
  CHECK(r8.batch <= r.batch);
  CHECK(r8.batch > r.batch - 8);
  for (const auto& t : r8.tries) CHECK(t.batch % 8 == 0);
}

TEST_CASE("find_batch_size: clear errors") {
  Setup s;
  auto step = [&](int64_t b) { s.step(b); };
  CHECK(error_of([&] { optim::find_batch_size(step, s.model, s.opt, Device::cpu()); }).find("memory limit must be given") !=
        std::string::npos);
  const std::string e = error_of([&] {
    optim::find_batch_size(step, s.model, s.opt, Device::cpu(), {.start = 64, .memory_limit = 1000});
  });
  CHECK(e.find("even a batch of 64 does not fit") != std::string::npos);
  CHECK(e.find("1000 bytes") != std::string::npos);
  CHECK(error_of([&] { optim::find_batch_size(step, s.model, s.opt, Device::cpu(), {.start = 0, .memory_limit = 1}); })
            .find("start") != std::string::npos);
  // an error other than out-of-memory propagates (and the state is restored)
  auto bad = [&](int64_t b) {
    s.step(b);
    KILN_FAIL("a bug in the step");
  };
  CHECK(error_of([&] { optim::find_batch_size(bad, s.model, s.opt, Device::cpu(), {.memory_limit = 1 << 30}); })
            .find("a bug in the step") != std::string::npos);
}
