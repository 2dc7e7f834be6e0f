// Activation-checkpointing benchmark on the reference `gpt` workload (shared/WORKLOADS.md):
// vocab 96, context 128, 4 pre-LN blocks, width 128, 4 heads, batch 16, AdamW lr 3e-4
// wd 0.1. Runs the training step with and without checkpointing every block, interleaved
// (A B A B ...), and reports median step time and peak allocator memory of each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include "kiln/kiln.h"

using namespace kiln;

namespace {

struct Gpt : nn::Module {
  nn::Embedding tok, pos;
  nn::ModuleList blocks;
  nn::LayerNorm ln_f;
  nn::Linear head;
  bool ckpt = false;
  Gpt(int64_t vocab, int64_t ctx, int64_t width, int64_t heads, int64_t layers) {
    tok = register_module("tok", nn::Embedding(vocab, width));
    pos = register_module("pos", nn::Embedding(ctx, width));
    nn::ModuleList list;
    for (int64_t i = 0; i < layers; ++i)
      list.push_back(nn::TransformerBlock(width, heads, {.causal = true}));
    blocks = register_module("blocks", list);
    ln_f = register_module("ln_f", nn::LayerNorm(width));
    head = register_module("head", nn::Linear(width, vocab, {.bias = false}));
  }
  Tensor forward(const Tensor& idx) override {  // (B, T) int64 -> (B, T, vocab)
    int64_t T = idx.size(1);
    Tensor x = tok(idx) + pos(arange(0, double(T), 1, {.dtype = DType::int64}));
    for (size_t i = 0; i < blocks.size(); ++i) {
      auto block = blocks.get<nn::TransformerBlock>(int64_t(i));
      x = ckpt ? kiln::checkpoint(block, x) : block(x);
    }
    return head(ln_f(x));
  }
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  set_num_threads(threads);
  const int64_t B = 16, T = 128, V = 96;
  const int warmup = 3, timed = 20;
  manual_seed(0);
  Gpt plain(V, T, 128, 4, 4), ckpt(V, T, 128, 4, 4);
  ckpt.load_state_dict(plain.state_dict());
  ckpt.ckpt = true;
  optim::AdamW opt_plain(plain.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  optim::AdamW opt_ckpt(ckpt.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  Tensor idx = randint(0, V, {B, T}), tgt = randint(0, V, {B, T});
  auto step = [&](Gpt& m, optim::AdamW& opt, double& peak) {
    MemoryStats before = memory_stats();
    reset_peak_memory_stats();
    double t0 = now_ms();
    opt.zero_grad();
    Tensor loss = cross_entropy(m(idx).reshape({B * T, V}), tgt.reshape({B * T}));
    loss.backward();
    opt.step();
    double dt = now_ms() - t0;
    peak = double(memory_stats().peak_bytes - before.current_bytes);
    return dt;
  };
  std::vector<double> tp, tc;
  double pp = 0, pc = 0, peak_plain = 0, peak_ckpt = 0;
  for (int i = 0; i < warmup + timed; ++i) {
    double a = step(plain, opt_plain, pp), b = step(ckpt, opt_ckpt, pc);
    if (i >= warmup) {
      tp.push_back(a);
      tc.push_back(b);
      peak_plain = std::max(peak_plain, pp);
      peak_ckpt = std::max(peak_ckpt, pc);
    }
  }
  double mp = median(tp), mc = median(tc);
  std::printf("bench_checkpoint: gpt workload (B=%lld T=%lld, 4 blocks, width 128), %d threads, %d warm-up + %d timed, interleaved\n",
              (long long)B, (long long)T, threads, warmup, timed);
  std::printf("%-22s %12s %16s\n", "config", "median ms", "step peak MiB");
  std::printf("%-22s %12.1f %16.1f\n", "no checkpointing", mp, peak_plain / 1048576.0);
  std::printf("%-22s %12.1f %16.1f\n", "checkpoint per block", mc, peak_ckpt / 1048576.0);
  std::printf("peak memory cut: %.1f%%   time cost: %+.1f%%\n", 100.0 * (1.0 - peak_ckpt / peak_plain),
              100.0 * (mc / mp - 1.0));
  return 0;
}
