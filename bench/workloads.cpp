// The reference workloads on kiln (see workloads.h): model construction per WORKLOADS.md,
// the timed training step, and the peak-memory readings.
#include "bench/workloads.h"
#include <algorithm>
#include <functional>
#include <memory>
#include "kiln/kiln.h"

namespace kiln::bench {

namespace {

bool g_rss_per_workload = false;

/// Waits for the device's queued work (a no-op on the CPU), so a step's time includes it.
void sync(const Tensor& t) {
  if (t.defined() && t.device().is_cuda()) cuda::synchronize(t.device().index);
}

/// The ops a workload's step cannot run without (checked on non-CPU devices before the
/// run, so a backend that lacks some says which instead of failing midway).
std::vector<Op> workload_ops(const std::string& name) {
  if (name == "sgemm") return {Op::matmul};
  if (name == "mlp") return {Op::linear, Op::relu, Op::cross_entropy};
  if (name == "lenet") return {Op::conv2d, Op::relu, Op::max_pool2d, Op::linear, Op::cross_entropy};
  if (name == "convnet")
    return {Op::conv2d, Op::batch_norm, Op::relu, Op::max_pool2d, Op::linear, Op::cross_entropy};
  return {Op::embedding, Op::add, Op::layer_norm, Op::linear, Op::scaled_dot_product_attention, Op::gelu_tanh,
          Op::cross_entropy};
}

}  // namespace

Trainer make_trainer(const WorkloadConfig& c, Device dev) {
  Trainer t;
  const int64_t B = c.batch;
  auto images = [&] { return randn({B, 1, 28, 28}).to(dev); };  // normal inputs
  auto labels = [&] { return randint(0, 10, {B}).to(dev); };    // uniform labels
  if (c.name == "mlp") {
    t.model = std::make_shared<models::MLP>(models::MLPOptions{.in = 784, .hidden = {512, 512}, .out = 10});
    t.model->to(dev);
    t.opt = std::make_unique<optim::Adam>(t.model->parameters(), optim::AdamOptions{.lr = 1e-3});
    Tensor x = randn({B, 784}).to(dev), y = labels();
    t.loss_of = [x, y](nn::Module& m) { return cross_entropy(m(x), y); };
  } else if (c.name == "lenet" || c.name == "convnet") {
    t.model = c.name == "lenet" ? std::shared_ptr<nn::Module>(std::make_shared<models::LeNet5>())
                                : std::shared_ptr<nn::Module>(std::make_shared<models::ConvNet>());
    t.model->to(dev);
    t.opt = std::make_unique<optim::SGD>(t.model->parameters(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
    Tensor x = images(), y = labels();
    t.loss_of = [x, y](nn::Module& m) { return cross_entropy(m(x), y); };
  } else if (c.name == "gpt") {
    t.model = std::make_shared<models::GPT>(models::GPTConfig{.vocab = c.vocab, .context = c.context, .layers = c.layers,
                                                              .heads = c.heads, .width = c.width, .dropout = 0.0,
                                                              .tie_weights = false});
    t.model->to(dev);
    t.opt = std::make_unique<optim::AdamW>(t.model->parameters(), optim::AdamWOptions{.lr = 3e-4, .weight_decay = 0.1});
    const int64_t T = c.context, V = c.vocab;
    Tensor idx = randint(0, V, {B, T}).to(dev), tgt = randint(0, V, {B * T}).to(dev);
    t.loss_of = [idx, tgt, B, T, V](nn::Module& m) { return cross_entropy(m(idx).reshape({B * T, V}), tgt); };
  } else {
    KILN_FAIL("kiln bench: no model for workload '", c.name, "'");
  }
  return t;
}

DeviceInfo kiln_device_info(const std::string& device) {
  DeviceInfo d;
  d.name = device;
  if (device == "cpu") {
    d.available = true;
    d.description = cpu_model_name();
  } else if (device == "cuda") {
#ifndef KILN_WITH_CUDA
    d.description = "this build of kiln has no CUDA backend; configure with -DKILN_CUDA=ON where nvcc is installed";
#else
    d.available = cuda::is_available();
    d.description = d.available ? cuda::device_name(0) : "no CUDA GPU found";  // "NVIDIA H200 (sm_90, ...)"
#endif
  } else {
    KILN_FAIL("kiln bench: unknown device '", device, "'; valid devices: cpu, cuda");
  }
  return d;
}

std::vector<std::string> parse_workloads(const std::string& list) {
  std::string valid;
  for (const auto& n : workload_names()) valid += (valid.empty() ? "" : ", ") + n;
  if (list == "all") return workload_names();
  std::vector<std::string> out = split_list(list);
  KILN_CHECK(!out.empty(), "kiln bench: empty workload list; valid workloads: ", valid);
  for (const auto& n : out) {
    const auto& names = workload_names();
    KILN_CHECK(std::find(names.begin(), names.end(), n) != names.end(), "kiln bench: unknown workload '", n,
               "'; valid workloads: ", valid, " (or all)");
  }
  return out;
}

bool rss_peak_is_per_workload() { return g_rss_per_workload; }

Result run_workload(const WorkloadConfig& c, const std::string& device, int threads, double peak_gflops) {
  Result r;
  r.framework = "kiln";
  r.config = c;
  r.device = device;
  r.threads = threads;
  r.peak_gflops = peak_gflops;
  r.flops_per_step = train_flops(c);
  // Start both peaks from this workload: free kiln's cached blocks, then reset VmHWM.
  empty_cache(Device::cpu());
  g_rss_per_workload = reset_peak_rss();
  if (c.precision == "tf32" && Device(device).is_cpu()) {
    r.status = "unsupported: tf32 is GPU-only";
    return r;
  }
  KILN_CHECK(c.precision == "fp32" || c.precision == "tf32" || c.precision == "bf16" || c.precision == "fp16",
             "kiln bench: unknown precision '", c.precision, "'; valid precisions: fp32, tf32, bf16, fp16");
  // tf32: float32 GEMMs may use TF32 tensor cores for this run; the setting is restored after
  struct PrecisionScope {
    std::string saved = float32_matmul_precision();
    explicit PrecisionScope(bool tf32) { set_float32_matmul_precision(tf32 ? "high" : "highest"); }
    ~PrecisionScope() { set_float32_matmul_precision(saved); }
  } precision_scope(c.precision == "tf32");
  KILN_CHECK(c.batch >= 1 && c.timed >= 1 && c.warmup >= 0, "kiln bench: ", c.name, " needs batch >= 1, timed >= 1 ",
             "and warmup >= 0, got batch ", c.batch, ", timed ", c.timed, ", warmup ", c.warmup);
  const Device dev(device);
  set_num_threads(threads);
  manual_seed(0);
  if (!dev.is_cpu()) {
    std::string missing;
    for (Op op : workload_ops(c.name))
      if (!supports(op, dev.type)) missing += (missing.empty() ? "" : ", ") + std::string(op_name(op));
    if (!missing.empty()) {
      r.status = "unsupported: no " + device + " kernel yet for " + missing;
      return r;
    }
    empty_cache(dev);  // its cached blocks too (the host RSS was reset above)
  }

  // bf16 and fp16: autocast to that dtype; fp16 also scales the loss (GradScaler, PyTorch's
  // fp16 recipe: scaled backward, unscale and inf check, step, scale update).
  const bool low = c.precision == "bf16" || c.precision == "fp16", fp16 = c.precision == "fp16";
  const DType low_dtype = fp16 ? DType::float16 : DType::bfloat16;
  optim::GradScaler scaler(optim::GradScalerOptions{.enabled = fp16});
  std::function<double()> step;  // one step, returns its milliseconds
  Trainer trainer;
  Tensor a, b, out;
  if (c.is_sgemm()) {
    a = randn({c.batch, c.batch}).to(dev);
    b = randn({c.batch, c.batch}).to(dev);
    step = [&] {
      out = Tensor();  // the timed product allocates its output as a loop would (block reused)
      const double t0 = now_ms();
      {
        autocast guard(low_dtype, low);
        out = matmul(a, b);
      }
      sync(out);
      return now_ms() - t0;
    };
  } else {
    trainer = make_trainer(c, dev);
    step = [&] {
      const double t0 = now_ms();
      trainer.opt->zero_grad();
      Tensor loss;
      {
        autocast guard(low_dtype, low);
        loss = trainer.loss_of(*trainer.model);
      }
      if (fp16) {
        scaler.scale(loss).backward();
        scaler.step(*trainer.opt);
        scaler.update();
      } else {
        loss.backward();
        trainer.opt->step();
      }
      sync(loss);
      return now_ms() - t0;
    };
  }
  for (int i = 0; i < c.warmup; ++i) step();
  reset_peak_memory_stats(dev);
  r.step_ms.reserve(size_t(c.timed));
  for (int i = 0; i < c.timed; ++i) r.step_ms.push_back(step());
  r.alloc_peak_bytes = memory_stats(dev).peak_bytes;
  r.rss_peak_bytes = process_peak_rss_bytes();
  summarize(r);
  return r;
}

}  // namespace kiln::bench
