// The multi-tensor optimizer launches on the CPU: the chunk list and the per-chunk bodies
// the CUDA kernels run (optim/multi_tensor_apply.h), driven over an emulated grid of
// (block, thread) indices against the CPU per-tensor kernels, plus the device scale update
// against the CPU GradScaler. No GPU needed.
#include <doctest/doctest.h>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>
#include "gradcheck.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/multi_tensor_apply.h"
#include "kiln/optim/sgd.h"
#include "kiln/optim/update_kernels.h"

using namespace kiln;
using namespace kiln::optim;

namespace {

// Element counts around the chunk size, an empty tensor and tiny ones.
const std::vector<int64_t> kSizes = {1, 7, 0, kMultiTensorChunk - 1, kMultiTensorChunk, kMultiTensorChunk + 1,
                                     2 * kMultiTensorChunk + 123};

// Runs body(slot, chunk, thread, nthreads) as the launches' grid-stride loops over their
// chunks would on a grid of `blocks` x `threads` (small launch capacities: several launches).
template <class Body>
void emulate(const std::vector<TensorSlot>& slots, int blocks, int threads, const Body& body) {
  for (const LaunchPlan& p : plan_launches(slots.data(), int64_t(slots.size()), 3, 4))
    for (int b = 0; b < blocks; ++b)
      for (int64_t c = b; c < int64_t(p.chunks.size()); c += blocks)
        for (int t = 0; t < threads; ++t) body(p.slots[size_t(p.chunks[size_t(c)].slot)], p.chunks[size_t(c)], t, threads);
}

std::vector<double> random_vec(int64_t n, unsigned seed, double lo = -1, double hi = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  unsigned s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * double(s >> 8) / double(1u << 24);
  }
  return v;
}

std::string max_diff(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  if (a.size() != b.size()) return "size";
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= tol * (1 + std::fabs(b[i]))))
      return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  return "";
}

}  // namespace

TEST_CASE("multi-tensor launches: every element of every tensor in exactly one chunk, once per tensor") {
  std::vector<TensorSlot> slots(kSizes.size());
  std::vector<float> tags(kSizes.size());  // slots are copied into launches: identify them by a pointer
  for (size_t i = 0; i < kSizes.size(); ++i) slots[i].n = kSizes[i], slots[i].skipped = &tags[i];
  // the default capacities (one launch here) and tiny ones (a tensor split across launches)
  for (auto capacity : {std::pair{kLaunchSlots, kLaunchChunks}, {2, 3}, {1, 1}, {64, 2}}) {
    const auto max_slots = capacity.first, max_chunks = capacity.second;
    INFO("capacity " << max_slots << " slots, " << max_chunks << " chunks");
    const auto plans = plan_launches(slots.data(), int64_t(slots.size()), max_slots, max_chunks);
    std::vector<std::vector<int>> seen(kSizes.size());
    std::vector<int> first_chunks(kSizes.size(), 0);
    for (size_t i = 0; i < kSizes.size(); ++i) seen[i].assign(size_t(kSizes[i]), 0);
    for (const auto& p : plans) {
      REQUIRE(!p.chunks.empty());
      CHECK(int(p.slots.size()) <= max_slots);
      CHECK(int(p.chunks.size()) <= max_chunks);
      for (const auto& c : p.chunks) {
        REQUIRE(c.slot >= 0);
        REQUIRE(c.slot < int64_t(p.slots.size()));
        const TensorSlot& s = p.slots[size_t(c.slot)];
        const size_t orig = size_t(s.skipped - tags.data());
        REQUIRE(orig < slots.size());
        CHECK(c.begin < s.n);
        if (c.begin == 0) ++first_chunks[orig];
        for (int64_t i = c.begin; i < chunk_end(c, s, kMultiTensorChunk); ++i) ++seen[orig][size_t(i)];
      }
    }
    if (max_chunks == kLaunchChunks) CHECK(plans.size() == 1);
    for (size_t i = 0; i < kSizes.size(); ++i) {
      INFO("tensor " << i << " of " << kSizes[i] << " elements");
      CHECK(first_chunks[i] == (kSizes[i] > 0 ? 1 : 0));  // a skipped step is counted once
      for (int v : seen[i]) REQUIRE(v == 1);
    }
  }
  CHECK(plan_launches(slots.data(), 0).empty());
}

TEST_CASE("multi-tensor SGD chunks over emulated grids match the CPU per-tensor kernel") {
  auto* cpu = reinterpret_cast<SgdKernelFn*>(fused_update_kernel(FusedUpdate::sgd, Device::cpu()));
  REQUIRE(bool(cpu));
  for (bool nesterov : {false, true})
    for (int grid : {1, 3, 64}) {
      INFO("nesterov " << nesterov << ", " << grid << " blocks");
      SgdScalars s{.lr = 0.1, .momentum = 0.9, .dampening = 0, .weight_decay = 0.01, .nesterov = nesterov};
      std::vector<std::vector<double>> p, g, buf, pr, br;
      std::vector<TensorSlot> slots;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        p.push_back(random_vec(kSizes[i], unsigned(i) + 1));
        g.push_back(random_vec(kSizes[i], unsigned(i) + 50));
        buf.push_back(random_vec(kSizes[i], unsigned(i) + 99));
      }
      pr = p;
      br = buf;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        TensorSlot sl;
        sl.p = p[i].data();
        sl.g = g[i].data();
        sl.b0 = buf[i].data();
        sl.n = kSizes[i];
        sl.step = 3;
        sl.first = i == 1 ? 1 : 0;  // one tensor whose buffer starts now
        slots.push_back(sl);
      }
      emulate(slots, grid, 32, [&](const TensorSlot& sl, const ChunkRef& c, int t, int nt) {
        sgd_chunk<double>(sl, c, t, nt, s, nullptr, nullptr);
      });
      for (size_t i = 0; i < kSizes.size(); ++i) {
        SgdScalars si = s;
        si.first = i == 1;
        cpu(DType::float64, pr[i].data(), g[i].data(), br[i].data(), kSizes[i], si);
        CHECK(max_diff(p[i], pr[i], 1e-12) == "");
        CHECK(max_diff(buf[i], br[i], 1e-12) == "");
      }
    }
}

TEST_CASE("multi-tensor Adam chunks: a skipped step changes nothing and is counted once per tensor") {
  auto* cpu = reinterpret_cast<AdamKernelFn*>(fused_update_kernel(FusedUpdate::adam, Device::cpu()));
  REQUIRE(bool(cpu));
  for (bool decoupled : {false, true})
    for (bool amsgrad : {false, true}) {
      INFO("decoupled " << decoupled << ", amsgrad " << amsgrad);
      AdamScalars s{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1,
                    .decoupled = decoupled, .amsgrad = amsgrad};
      const size_t T = kSizes.size();
      std::vector<std::vector<double>> p(T), g(T), m(T), v(T), vm(T);
      for (size_t i = 0; i < T; ++i) {
        p[i] = random_vec(kSizes[i], unsigned(i) + 7);
        g[i] = random_vec(kSizes[i], unsigned(i) + 70);
        m[i].assign(size_t(kSizes[i]), 0.0);
        v[i] = m[i];
        vm[i] = m[i];
      }
      auto pr = p, mr = m, vr = v, vmr = vm;
      std::vector<float> skipped(T, 0.0f);
      std::vector<TensorSlot> slots(T);
      for (size_t i = 0; i < T; ++i) {
        slots[i].p = p[i].data();
        slots[i].g = g[i].data();
        slots[i].b0 = m[i].data();
        slots[i].b1 = v[i].data();
        slots[i].b2 = amsgrad ? vm[i].data() : nullptr;
        slots[i].n = kSizes[i];
        slots[i].skipped = &skipped[i];
      }
      const float inf_flag = 1.0f, clean = 0.0f;
      // host step 1, skipped on the "device"
      for (auto& sl : slots) sl.step = 1;
      emulate(slots, 5, 64, [&](const TensorSlot& sl, const ChunkRef& c, int t, int nt) {
        adam_chunk<double>(sl, c, t, nt, s, &inf_flag, nullptr);
      });
      for (size_t i = 0; i < T; ++i) {
        CHECK(max_diff(p[i], pr[i], 0) == "");
        CHECK(skipped[i] == (kSizes[i] > 0 ? 1.0f : 0.0f));  // an empty tensor has no chunk
        skipped[i] = 1.0f;  // what the device counter holds for every participating tensor
      }
      // host steps 2 and 3, clean: the bias corrections must be those of steps 1 and 2
      for (int64_t step = 2; step <= 3; ++step) {
        for (auto& sl : slots) sl.step = step;
        emulate(slots, 5, 64, [&](const TensorSlot& sl, const ChunkRef& c, int t, int nt) {
          adam_chunk<double>(sl, c, t, nt, s, &clean, nullptr);
        });
        const double tt = double(step - 1);
        AdamScalars sc = s;
        sc.step_size = s.lr / (1 - std::pow(s.beta1, tt));
        sc.bias_correction2_sqrt = std::sqrt(1 - std::pow(s.beta2, tt));
        for (size_t i = 0; i < T; ++i)
          if (kSizes[i] > 0)
            cpu(DType::float64, pr[i].data(), g[i].data(), mr[i].data(), vr[i].data(),
              amsgrad ? vmr[i].data() : nullptr, kSizes[i], sc);
      }
      for (size_t i = 0; i < T; ++i) {
        INFO("tensor " << i);
        CHECK(max_diff(p[i], pr[i], 1e-12) == "");
        CHECK(max_diff(m[i], mr[i], 1e-12) == "");
        CHECK(max_diff(v[i], vr[i], 1e-12) == "");
      }
    }
}

TEST_CASE("multi-tensor SGD: a buffer created on a skipped step starts from the gradient later") {
  // CPU reference: the skipped step never ran, so the next step is the buffer's first.
  SgdScalars s{.lr = 0.5, .momentum = 0.9, .dampening = 0.3};
  std::vector<double> p = random_vec(100, 3), g = random_vec(100, 4), buf(100, 0.0);
  std::vector<double> pr = p, br = buf;
  float skipped = 0;
  TensorSlot sl;
  sl.p = p.data();
  sl.g = g.data();
  sl.b0 = buf.data();
  sl.n = 100;
  sl.skipped = &skipped;
  const float inf_flag = 1, clean = 0;
  sl.step = 1;
  sl.first = 1;
  emulate({sl}, 2, 16, [&](const TensorSlot& x, const ChunkRef& c, int t, int nt) {
    sgd_chunk<double>(x, c, t, nt, s, &inf_flag, nullptr);
  });
  CHECK(skipped == 1.0f);
  sl.step = 2;
  sl.first = 0;
  emulate({sl}, 2, 16, [&](const TensorSlot& x, const ChunkRef& c, int t, int nt) {
    sgd_chunk<double>(x, c, t, nt, s, &clean, nullptr);
  });
  SgdScalars first = s;
  first.first = true;
  reinterpret_cast<SgdKernelFn*>(fused_update_kernel(FusedUpdate::sgd, Device::cpu()))(
      DType::float64, pr.data(), g.data(), br.data(), 100, first);
  CHECK(max_diff(p, pr, 1e-12) == "");
  CHECK(max_diff(buf, br, 1e-12) == "");
}

TEST_CASE("multi-tensor unscale chunks: every gradient scaled once, inf/NaN flagged") {
  for (int bad : {-1, 0, 1}) {  // none, an inf, a NaN
    INFO("bad " << bad);
    std::vector<std::vector<float>> g;
    std::vector<TensorSlot> slots;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      auto d = random_vec(kSizes[i], unsigned(i) + 11, -100, 100);
      g.emplace_back(d.begin(), d.end());
    }
    if (bad >= 0)
      g[4][size_t(kSizes[4] - 1)] = bad == 0 ? std::numeric_limits<float>::infinity()
                                             : std::numeric_limits<float>::quiet_NaN();
    const auto orig = g;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      TensorSlot sl;
      sl.g = g[i].data();
      sl.n = kSizes[i];
      slots.push_back(sl);
    }
    float found = 0.0f;
    const float inv = 1.0f / 1024.0f;
    emulate(slots, 7, 128, [&](const TensorSlot& sl, const ChunkRef& c, int t, int nt) {
      unscale_chunk<float>(sl, c, t, nt, &found, &inv);
    });
    CHECK(found == (bad >= 0 ? 1.0f : 0.0f));
    for (size_t i = 0; i < kSizes.size(); ++i)
      for (size_t j = 0; j < g[i].size(); ++j)
        if (std::isfinite(orig[i][j])) REQUIRE(g[i][j] == orig[i][j] * inv);
  }
}

TEST_CASE("device scale update (amp_update_scale) gives the CPU GradScaler's sequence of scales") {
  struct Run {
    double init;
    int64_t interval;
  };
  // ordinary values, growth that would overflow float, backoff that would underflow
  for (const Run& r : {Run{65536.0, 3}, Run{3e38, 2}, Run{2e-38, 4}}) {
    INFO("init " << r.init << ", interval " << r.interval);
    GradScaler cpu({.init_scale = r.init, .growth_interval = r.interval});
    Tensor w = zeros({3}).requires_grad_();
    SGD opt({w}, {.lr = 0.0});
    float scale = float(cpu.get_scale()), inv = float(1.0 / double(scale)), last = 0;
    int32_t tracker = 0;
    const std::vector<int> pattern = {0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};
    for (size_t k = 0; k < pattern.size(); ++k) {
      w.set_grad(pattern[k] ? from_vector(std::vector<float>{1, INFINITY, 2}, {3}) : ones({3}));
      cpu.step(opt);
      cpu.update();
      amp_update_scale(&scale, &tracker, &inv, &last, float(pattern[k]), cpu.growth_factor(), cpu.backoff_factor(),
                       cpu.growth_interval());
      INFO("step " << k);
      CHECK(double(scale) == cpu.get_scale());
      CHECK(int64_t(tracker) == cpu.growth_tracker());
      CHECK((last != 0) == cpu.last_step_skipped());
      CHECK(inv == float(1.0 / cpu.get_scale()));
    }
  }
}
