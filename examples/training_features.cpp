// kiln's three training features in one short script: gradient accumulation, activation
// checkpointing and mixed precision (fp16 autocast with dynamic loss scaling, or bf16).
// It trains a small residual MLP on a synthetic 2-class spiral and prints the accuracy.
//
//   training_features [--amp fp16|bf16|off] [--accum N] [--steps N] [--no-checkpoint]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <kiln/kiln.h>

namespace nn = kiln::nn;
namespace optim = kiln::optim;
using kiln::Tensor;

// Two spiral arms in the plane, n points each: inputs (2n, 2), labels (2n).
static kiln::data::TensorDataset make_spiral(int64_t n) {
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int c = 0; c < 2; ++c)
    for (int64_t i = 0; i < n; ++i) {
      double r = 0.1 + 0.9 * double(i) / double(n), t = 2 * M_PI * double(i) / double(n) + c * M_PI;
      xs.push_back(float(2 * r * std::cos(t)));
      xs.push_back(float(2 * r * std::sin(t)));
      ys.push_back(c);
    }
  return kiln::data::TensorDataset(kiln::from_vector(xs, {2 * n, 2}), kiln::from_vector(ys, {2 * n}));
}

// A residual block: x + W2 relu(W1 x). Its activations are what checkpointing drops.
struct Block : nn::Module {
  nn::Linear fc1, fc2;
  explicit Block(int64_t width) {
    fc1 = register_module("fc1", nn::Linear(width, width));
    fc2 = register_module("fc2", nn::Linear(width, width));
  }
  Tensor forward(const Tensor& x) override { return x + fc2(kiln::relu(fc1(x))); }
};

struct Net : nn::Module {
  nn::Linear in, out;
  Block b1{128}, b2{128};
  bool checkpoint = true;
  Net() {
    in = register_module("in", nn::Linear(2, 128));
    b1 = register_module("b1", Block(128));
    b2 = register_module("b2", Block(128));
    out = register_module("out", nn::Linear(128, 2));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = kiln::relu(in(x));
    // activation checkpointing: keep only each block's input, recompute it in backward
    h = checkpoint ? kiln::checkpoint(b1, h) : b1(h);
    h = checkpoint ? kiln::checkpoint(b2, h) : b2(h);
    return out(h);
  }
};

int main(int argc, char** argv) {
  std::string amp = "fp16";
  int accum = 4, steps = 300;
  bool use_checkpoint = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--amp" && i + 1 < argc) amp = argv[++i];
    else if (a == "--accum" && i + 1 < argc) accum = std::atoi(argv[++i]);
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--no-checkpoint") use_checkpoint = false;
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
  }
  kiln::manual_seed(0);
  auto data = make_spiral(256);
  kiln::data::DataLoader loader(data, {.batch_size = 32, .shuffle = true, .drop_last = true});

  Net model;
  model.checkpoint = use_checkpoint;
  optim::AdamW opt(model.parameters(), {.lr = 3e-3, .weight_decay = 0.01});
  optim::WarmupCosineLR sched(opt, {.warmup_steps = steps / 10, .total_steps = steps});
  // fp16 needs loss scaling (small gradients underflow in fp16); bf16 has fp32's range.
  kiln::amp::GradScaler scaler({.enabled = amp == "fp16"});
  nn::GradAccumulator acc(accum);  // one optimizer step per `accum` micro-batches

  int step = 0;
  while (step < steps) {
    for (auto& batch : loader) {
      Tensor loss;
      {
        kiln::autocast guard(amp == "bf16" ? kiln::DType::bfloat16 : kiln::DType::float16, amp != "off");
        loss = kiln::cross_entropy(model(batch.input), batch.target);  // computed in fp32
      }
      scaler.scale(acc.scale(loss)).backward();  // gradients add up in .grad
      if (!acc.count()) continue;
      scaler.unscale_(opt);                               // true gradients, for clipping
      optim::clip_grad_norm_(model.parameters(), 1.0);
      scaler.step(opt);                                   // skipped if a gradient is inf/NaN
      scaler.update();
      opt.zero_grad();
      sched.step();
      if (++step % 50 == 0) std::printf("step %4d  loss %.4f  lr %.2e\n", step, loss.item(), opt.lr(0));
      if (step == steps) break;
    }
  }
  kiln::NoGradGuard no_grad;
  model.eval();
  Tensor logits = model(data.inputs());
  double acc_v = kiln::mean(kiln::argmax(logits, 1) == data.targets()).item();
  std::printf("amp %s, accum %d, checkpoint %s: train accuracy %.1f%%\n", amp.c_str(), accum,
              use_checkpoint ? "on" : "off", 100 * acc_v);
  return acc_v > 0.9 ? 0 : 1;
}
