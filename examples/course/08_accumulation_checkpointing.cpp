// Course chapter 8 (docs/course/08-accumulation-checkpointing.md): two ways to train with
// less memory, measured. Gradient accumulation: 4 micro-batches of 4 give the gradient of
// one batch of 16 (the losses scaled by 1/4) while only a micro-batch's activations are
// alive at a time. Activation checkpointing: each transformer block keeps only its input
// and recomputes its activations in the backward, trading time for memory.
#include <chrono>
#include <cstdio>
#include <kiln/kiln.h>
#include <kiln/testing.h>

using kiln::Tensor;

struct Result {
  double peak_mib, ms;
  std::vector<Tensor> grads;
};

// One optimizer step's worth of gradients of a small GPT on `batch` sequences, as `micro`
// micro-batches; the peak of the CPU allocator and the time (best of 3) are measured.
static Result run(int64_t batch, int64_t micro, bool checkpoint) {
  kiln::manual_seed(1);
  kiln::models::GPT gpt({.vocab = 64, .context = 128, .layers = 4, .heads = 4, .width = 128, .dropout = 0.0});
  gpt.checkpoint_activations = checkpoint;
  kiln::manual_seed(2);
  const Tensor x = kiln::randint(0, 64, {batch, 128}), y = kiln::randint(0, 64, {batch, 128});
  Result r{0, 1e30, {}};
  for (int rep = 0; rep < 3; ++rep) {
    gpt.zero_grad();  // gradients accumulate: clear the last repetition's
    kiln::reset_peak_memory_stats();
    const int64_t base = kiln::memory_stats().current_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t m = batch / micro;
    for (int64_t k = 0; k < micro; ++k) {
      Tensor logits = gpt(x.narrow(0, k * m, m));
      Tensor loss = kiln::cross_entropy(logits.reshape({-1, 64}), y.narrow(0, k * m, m).reshape({-1}));
      kiln::mul(loss, 1.0 / double(micro)).backward();  // the mean over the whole batch
    }
    r.ms = std::min(r.ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    r.peak_mib = double(kiln::memory_stats().peak_bytes - base) / (1 << 20);
  }
  for (auto& p : gpt.parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

int main() {
  kiln::set_num_threads(2);
  const Result plain = run(16, 1, false), accum = run(16, 4, false), ckpt = run(16, 1, true);
  auto diff = [&](const Result& a) {
    double worst = 0;
    for (size_t i = 0; i < a.grads.size(); ++i)
      worst = std::max(worst, kiln::testing::max_abs_diff(a.grads[i], plain.grads[i]));
    return worst;
  };
  std::printf("GPT 4 layers x 128 wide, batch 16 x 128 tokens, forward + backward on the CPU:\n\n");
  std::printf("%-34s %12s %10s %16s\n", "", "peak memory", "time", "grads vs plain");
  std::printf("%-34s %8.1f MiB %7.0f ms %16s\n", "plain (one batch of 16)", plain.peak_mib, plain.ms, "-");
  std::printf("%-34s %8.1f MiB %7.0f ms %16.2g\n", "accumulation (4 micro-batches of 4)", accum.peak_mib, accum.ms,
              diff(accum));
  std::printf("%-34s %8.1f MiB %7.0f ms %16.2g\n", "activation checkpointing", ckpt.peak_mib, ckpt.ms, diff(ckpt));
  const bool ok = accum.peak_mib < plain.peak_mib && ckpt.peak_mib < plain.peak_mib && diff(accum) < 1e-5 &&
                  diff(ckpt) < 1e-5;
  return ok ? 0 : 1;
}
