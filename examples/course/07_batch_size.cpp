// Course chapter 7 (docs/course/07-batch-size.md): what the batch size does to memory and
// throughput, measured on the ConvNet, and the batch finder that picks the largest batch
// within a memory target (what `kiln train --batch-size auto` does on a GPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <kiln/kiln.h>

using kiln::Tensor;

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";  // CTest: smaller sweep
  kiln::set_num_threads(2);
  kiln::manual_seed(0);
  kiln::models::ConvNet model;
  kiln::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const int64_t largest = quick ? 64 : 256;
  const Tensor x = kiln::randn({largest, 1, 28, 28}), y = kiln::randint(0, 10, {largest});
  auto step = [&](int64_t b) {
    opt.zero_grad();
    kiln::cross_entropy(model(x.narrow(0, 0, b)), y.narrow(0, 0, b)).backward();
    opt.step();
  };

  std::printf("ConvNet training steps on the CPU (2 threads), one step = forward + backward + SGD:\n\n");
  std::printf("%6s %14s %12s %16s\n", "batch", "peak memory", "step time", "samples/s");
  for (int64_t b = 1; b <= largest; b *= 4) {
    step(b);  // warm-up: the allocator's blocks, the kernels' first touches
    kiln::reset_peak_memory_stats();
    const int64_t base = kiln::memory_stats().current_bytes;
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      step(b);
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const double mib = double(kiln::memory_stats().peak_bytes - base) / (1 << 20), rate = 1000.0 * double(b) / best;
    std::printf("%6lld %10.1f MiB %9.2f ms %16.0f\n", (long long)b, mib, best, rate);
  }

  // The batch finder: the largest batch whose step stays within 40 MiB of allocations.
  const auto r = kiln::optim::find_batch_size(step, model, opt, kiln::Device::cpu(),
                                              {.start = 1, .max = largest, .memory_limit = 40 << 20});
  std::printf("\nfind_batch_size with a 40 MiB target tried:");
  for (const auto& t : r.tries) std::printf(" %lld%s", (long long)t.batch, t.fits ? "" : "(too big)");
  std::printf("\nand chose batch %lld (its step peaked at %.1f MiB)\n", (long long)r.batch,
              double(r.peak_bytes) / (1 << 20));
  return r.batch >= 1 && r.peak_bytes <= (40 << 20) ? 0 : 1;  // times are printed, never asserted
}
