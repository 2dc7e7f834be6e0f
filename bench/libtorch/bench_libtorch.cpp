// bench_libtorch: the reference workloads (shared/WORKLOADS.md) on libtorch, the PyTorch
// C++ API, for side-by-side runs with `kiln bench` (scripts/bench.sh). Same models, batch,
// optimizer, inputs, threads and step counts, and the same table / JSON / CSV
// (bench/workload_spec.h, report.h, system_probe.h). Kept in one file: libtorch's headers are slow to compile.
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <malloc.h>  // malloc_usable_size, malloc_trim (glibc)
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include "bench/report.h"
#include "bench/system_probe.h"
#include "bench/workload_spec.h"

namespace bench = kiln::bench;
using torch::Tensor;

namespace {

// ---- a counting CPU allocator: libtorch's allocator high-water mark ----

std::atomic<int64_t> g_current{0}, g_peak{0};

/// Wraps c10's aligned alloc_cpu/free_cpu and counts malloc_usable_size() of every block
/// (the requested size rounded up by a few bytes), so every CPU tensor allocation is
/// counted; oneDNN's internal scratch memory is not. data == context, as oneDNN's
/// raw_allocate() requires.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    void* p = c10::alloc_cpu(n);
    if (p) {
      const int64_t size = int64_t(malloc_usable_size(p));
      const int64_t cur = g_current.fetch_add(size) + size;
      int64_t peak = g_peak.load();
      while (cur > peak && !g_peak.compare_exchange_weak(peak, cur)) {
      }
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  static void release(void* p) {
    if (!p) return;
    g_current.fetch_sub(int64_t(malloc_usable_size(p)));
    c10::free_cpu(p);
  }
};

CountingCpuAllocator g_counting_allocator;

// ---- the GPT of WORKLOADS.md (kiln's models::GPT / nn::TransformerBlock) ----

struct BlockImpl : torch::nn::Module {
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
  int64_t heads;
  BlockImpl(int64_t C, int64_t H) : heads(H) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
    qkv = register_module("qkv", torch::nn::Linear(C, 3 * C));
    proj = register_module("proj", torch::nn::Linear(C, C));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
    fc1 = register_module("fc1", torch::nn::Linear(C, 4 * C));
    fc2 = register_module("fc2", torch::nn::Linear(4 * C, C));
  }
  Tensor forward(Tensor x) {  // (B, T, C)
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads;
    auto parts = qkv(ln1(x)).split(C, -1);
    auto heads_of = [&](const Tensor& t) { return t.view({B, T, heads, hd}).transpose(1, 2); };  // (B, H, T, hd)
    Tensor y = std::get<0>(at::_scaled_dot_product_attention(heads_of(parts[0]), heads_of(parts[1]),
                                                             heads_of(parts[2]), {}, 0.0, false, /*is_causal=*/true));
    x = x + proj(y.transpose(1, 2).contiguous().view({B, T, C}));
    return x + fc2(torch::gelu(fc1(ln2(x)), "tanh"));
  }
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
  GptImpl(const bench::WorkloadConfig& c) {
    wte = register_module("wte", torch::nn::Embedding(c.vocab, c.width));
    wpe = register_module("wpe", torch::nn::Embedding(c.context, c.width));
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c.width, c.heads));
    register_module("blocks", blocks);
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(c.width, c.vocab).bias(false)));
  }
  Tensor forward(const Tensor& idx) {  // (B, T) -> (B, T, V)
    Tensor x = wte(idx) + wpe(torch::arange(idx.size(1), idx.options()));
    for (const auto& b : *blocks) x = b->as<Block>()->forward(x);
    return head(ln_f(x));
  }
};
TORCH_MODULE(Gpt);

/// Model, optimizer and the batch in memory for one workload.
struct Trainer {
  std::shared_ptr<torch::nn::Module> model;
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::function<Tensor()> loss;
};

Trainer make_trainer(const bench::WorkloadConfig& c, torch::Device dev) {
  using namespace torch::nn;
  Trainer t;
  const int64_t B = c.batch;
  auto labels = [&] { return torch::randint(0, 10, {B}, torch::kLong).to(dev); };
  auto conv_bn_relu = [](Sequential& s, int64_t in, int64_t out) {
    s->push_back(Conv2d(Conv2dOptions(in, out, 3).padding(1).bias(false)));
    s->push_back(BatchNorm2d(out));
    s->push_back(ReLU());
  };
  if (c.name == "mlp" || c.name == "lenet" || c.name == "convnet") {
    Sequential s;
    Tensor x;
    if (c.name == "mlp") {
      s = Sequential(Linear(784, 512), ReLU(), Linear(512, 512), ReLU(), Linear(512, 10));
      x = torch::randn({B, 784}).to(dev);
    } else if (c.name == "lenet") {
      s = Sequential(Conv2d(Conv2dOptions(1, 6, 5).padding(2)), ReLU(), MaxPool2d(2), Conv2d(Conv2dOptions(6, 16, 5)),
                     ReLU(), MaxPool2d(2), Flatten(), Linear(400, 120), ReLU(), Linear(120, 84), ReLU(), Linear(84, 10));
      x = torch::randn({B, 1, 28, 28}).to(dev);
    } else {
      conv_bn_relu(s, 1, 32);
      conv_bn_relu(s, 32, 32);
      s->push_back(MaxPool2d(2));
      conv_bn_relu(s, 32, 64);
      conv_bn_relu(s, 64, 64);
      s->push_back(MaxPool2d(2));
      s->push_back(Flatten());
      s->push_back(Linear(3136, 128));
      s->push_back(ReLU());
      s->push_back(Linear(128, 10));
      x = torch::randn({B, 1, 28, 28}).to(dev);
    }
    s->to(dev);
    if (c.name == "mlp")
      t.opt = std::make_unique<torch::optim::Adam>(s->parameters(), torch::optim::AdamOptions(1e-3));
    else
      t.opt = std::make_unique<torch::optim::SGD>(s->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    Tensor y = labels();
    t.model = s.ptr();
    t.loss = [s, x, y]() mutable { return torch::nn::functional::cross_entropy(s->forward(x), y); };
  } else if (c.name == "gpt") {
    Gpt m(c);
    m->to(dev);
    t.opt = std::make_unique<torch::optim::AdamW>(m->parameters(),
                                                  torch::optim::AdamWOptions(3e-4).weight_decay(0.1));
    const int64_t T = c.context, V = c.vocab;
    Tensor idx = torch::randint(0, V, {B, T}, torch::kLong).to(dev);
    Tensor tgt = torch::randint(0, V, {B * T}, torch::kLong).to(dev);
    t.model = m.ptr();
    t.loss = [m, idx, tgt, B, T, V]() mutable {
      return torch::nn::functional::cross_entropy(m->forward(idx).view({B * T, V}), tgt);
    };
  } else {
    throw std::invalid_argument("no model for workload '" + c.name + "'");
  }
  return t;
}

/// RAII CPU autocast to bfloat16 (torch.autocast("cpu", torch.bfloat16)).
struct CpuAutocast {
  bool on;
  explicit CpuAutocast(bool enable) : on(enable) {
    if (on) {
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      at::autocast::set_cpu_enabled(true);
    }
  }
  ~CpuAutocast() {
    if (on) {
      at::autocast::set_cpu_enabled(false);
      at::autocast::clear_cache();
    }
  }
};

void sync(torch::Device dev) {
  if (dev.is_cuda()) torch::cuda::synchronize();
}

bench::Result run_workload(const bench::WorkloadConfig& c, const std::string& device, int threads, double peak) {
  bench::Result r;
  r.framework = "libtorch";
  r.config = c;
  r.device = device;
  r.threads = threads;
  r.peak_gflops = peak;
  r.flops_per_step = bench::train_flops(c);
  const torch::Device dev = device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (c.precision == "tf32") {
    if (!dev.is_cuda()) {
      r.status = "unsupported: TF32 is a GPU mode";
      return r;
    }
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
  } else {
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
  }
  if (c.precision == "fp16") {  // reported, so a mixed --precision list still runs the others
    r.status = "unsupported: fp16 training needs a GradScaler, which libtorch 1.13's C++ API does not have";
    return r;
  }
  if (c.precision == "bf16" && dev.is_cuda()) {
    r.status = "unsupported: this bench has CPU autocast only";
    return r;
  }
  at::set_num_threads(threads);
  torch::manual_seed(0);
  malloc_trim(0);
  const bool rss_reset = bench::reset_peak_rss();
  (void)rss_reset;

  const bool bf16 = c.precision == "bf16";
  std::function<double()> step;
  Trainer trainer;
  Tensor a, b, out;
  if (c.is_sgemm()) {
    a = torch::randn({c.batch, c.batch}).to(dev);
    b = torch::randn({c.batch, c.batch}).to(dev);
    step = [&] {
      out = Tensor();
      const double t0 = bench::now_ms();
      {
        CpuAutocast guard(bf16);
        out = torch::mm(a, b);
      }
      sync(dev);
      return bench::now_ms() - t0;
    };
  } else {
    trainer = make_trainer(c, dev);
    auto params = trainer.model->parameters();
    step = [&, params]() mutable {
      const double t0 = bench::now_ms();
      for (auto& p : params) p.mutable_grad().reset();  // zero_grad(set_to_none=True), as kiln does
      Tensor loss;
      {
        CpuAutocast guard(bf16);
        loss = trainer.loss();
      }
      loss.backward();
      trainer.opt->step();
      sync(dev);
      return bench::now_ms() - t0;
    };
  }
  for (int i = 0; i < c.warmup; ++i) step();
  g_peak.store(g_current.load());
  for (int i = 0; i < c.timed; ++i) r.step_ms.push_back(step());
  r.alloc_peak_bytes = dev.is_cpu() ? g_peak.load() : -1;  // the CUDA caching allocator is not counted here
  r.rss_peak_bytes = bench::process_peak_rss_bytes();
  bench::summarize(r);
  return r;
}

/// The BLAS library the process loaded (libtorch's CPU GEMM), from /proc/self/maps.
std::string loaded_blas() {
  std::ifstream f("/proc/self/maps");
  std::string line;
  while (std::getline(f, line)) {
    const auto p = line.find('/');
    if (p == std::string::npos) continue;
    const std::string path = line.substr(p);
    if (path.find("libblas") != std::string::npos || path.find("openblas") != std::string::npos ||
        path.find("libmkl") != std::string::npos || path.find("blis") != std::string::npos)
      return path;
  }
  return "none found";
}

const char* kUsage =
    "usage: bench_libtorch [flags]   (the flags of `kiln bench`, same meaning)\n"
    "  --workloads LIST   mlp,lenet,convnet,gpt,sgemm or all (default all)\n"
    "  --devices LIST     cpu,cuda (default cpu)\n"
    "  --threads N        CPU threads, at::set_num_threads (default 2)\n"
    "  --precision LIST   fp32, tf32 (GPU), bf16 (CPU autocast), fp16 (reported unsupported) (default fp32)\n"
    "  --batch N | --sweep-batch LIST   batch size(s) of the model workloads\n"
    "  --warmup N --timed N             step counts (default: per workload)\n"
    "  --smoke            1 warm-up + 1 timed step at a small batch\n"
    "  --gpu-shapes | --cpu-shapes      shape set on every device (default: cuda gets GPU shapes)\n"
    "  --json F --csv F   write the results\n";

int run(int argc, char** argv) {
  std::map<std::string, std::string> opt = {{"workloads", "all"}, {"devices", "cpu"}, {"threads", "2"},
                                            {"precision", "fp32"}};
  const std::vector<std::string> valued = {"workloads", "devices", "threads", "precision", "batch", "sweep-batch",
                                           "warmup", "timed", "json", "csv"};
  const std::vector<std::string> switches = {"smoke", "gpu-shapes", "cpu-shapes", "help"};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + arg + "'\n" + kUsage);
    arg = arg.substr(2);
    if (auto eq = arg.find('='); eq != std::string::npos) value = arg.substr(eq + 1), arg = arg.substr(0, eq);
    if (std::find(switches.begin(), switches.end(), arg) != switches.end()) {
      opt[arg] = "1";
    } else if (std::find(valued.begin(), valued.end(), arg) != valued.end()) {
      if (value.empty()) {
        if (i + 1 >= argc) throw std::invalid_argument("flag --" + arg + " expects a value");
        value = argv[++i];
      }
      opt[arg] = value;
    } else {
      throw std::invalid_argument("unknown flag --" + arg + "\n" + kUsage);
    }
  }
  if (opt.count("help")) {
    std::cout << kUsage;
    return 0;
  }
  auto integer = [&](const std::string& k) {
    char* e = nullptr;
    const long long v = std::strtoll(opt[k].c_str(), &e, 10);
    if (opt[k].empty() || *e || v < 0) throw std::invalid_argument("--" + k + " expects an integer >= 0, got '" + opt[k] + "'");
    return v;
  };
  std::vector<std::string> workloads =
      opt["workloads"] == "all" ? bench::workload_names() : bench::split_list(opt["workloads"]);
  for (const auto& w : workloads) (void)bench::default_config(w, false);  // validates the name
  const int threads = int(integer("threads"));
  if (threads < 1) throw std::invalid_argument("--threads must be >= 1");
  std::vector<int64_t> batches;
  if (opt.count("batch")) batches = {integer("batch")};
  if (opt.count("sweep-batch")) batches = bench::parse_batch_list(opt["sweep-batch"]);
  const int warmup = opt.count("warmup") ? int(integer("warmup")) : -1;
  const int timed = opt.count("timed") ? int(integer("timed")) : -1;
  const bool smoke = opt.count("smoke") != 0;
  const auto precisions = bench::split_list(opt["precision"]);
  for (const auto& p : precisions)
    if (p != "fp32" && p != "tf32" && p != "bf16" && p != "fp16")
      throw std::invalid_argument("unknown precision '" + p + "'");

  c10::SetCPUAllocator(&g_counting_allocator, /*priority=*/100);
  at::set_num_threads(threads);
  at::set_num_interop_threads(1);

  bench::Report rep;
  rep.framework = "libtorch";
  rep.version = TORCH_VERSION;
  rep.backend = std::string("BLAS ") + loaded_blas() + (at::hasMKLDNN() ? ", oneDNN" : "");
  if (const char* core = std::getenv("OPENBLAS_CORETYPE"); core && *core)
    rep.backend += std::string(", OPENBLAS_CORETYPE=") + core;
  rep.date = bench::iso_date_utc();
  rep.cpu_model = bench::cpu_model_name();
  rep.threads = threads;
  bool any = false;
  for (const auto& d : bench::split_list(opt["devices"])) {
    bench::DeviceInfo info;
    info.name = d;
    if (d == "cpu") {
      info.available = true, info.description = rep.cpu_model;
    } else if (d == "cuda") {
      info.available = torch::cuda::is_available();
      const std::string gpu = bench::nvidia_gpu_name();
      info.description = info.available ? (gpu.empty() ? "unknown NVIDIA GPU" : gpu)
                                        : "this libtorch has no CUDA or no GPU is visible";
    } else {
      throw std::invalid_argument("unknown device '" + d + "'; valid devices: cpu, cuda");
    }
    if (!info.available) std::cerr << "bench_libtorch: " << d << ": not available (" << info.description << ")\n";
    any = any || info.available;
    rep.devices.push_back(info);
  }
  if (!any) throw std::runtime_error("no requested device is available");
  for (const auto& d : rep.devices)
    if (d.name == "cpu") rep.cpu_peak = bench::probe_cpu_peak(threads, smoke ? 0.01 : 0.05);
  bool failed = false;
  bool rss_per_workload = true;
  for (const auto& d : rep.devices) {
    if (!d.available) continue;
    const bool gpu_shapes = opt.count("gpu-shapes") || (d.name == "cuda" && !opt.count("cpu-shapes"));
    for (const auto& c : bench::expand_configs(workloads, gpu_shapes, smoke, batches, warmup, timed, precisions)) {
      const double peak = d.name == "cpu" ? rep.cpu_peak.gflops(c.precision)
                                          : bench::gpu_peak_gflops(d.description, c.precision);
      bench::Result r;
      try {
        r = run_workload(c, d.name, threads, peak);
      } catch (const std::exception& e) {
        r.framework = "libtorch", r.config = c, r.device = d.name, r.threads = threads;
        const std::string what = e.what();  // c10 errors carry a backtrace: keep the first line
        r.status = "error: " + what.substr(0, what.find('\n'));
        failed = true;
      }
      std::cerr << "bench_libtorch: " << c.name << " " << c.batch_label() << " " << d.name << " " << c.precision
                << ": " << (r.ok() ? bench::fmt("%.2f ms", r.median_ms) : r.status) << "\n";
      rep.results.push_back(std::move(r));
    }
  }
  rss_per_workload = bench::reset_peak_rss();
  rep.rss_scope = rss_per_workload ? "process VmHWM, reset before each workload (clear_refs)"
                                   : "process VmHWM since start (reset refused): includes earlier workloads";
  std::cout << bench::format_table(rep);
  if (opt.count("json")) bench::write_text_atomic(opt["json"], bench::to_json(rep));
  if (opt.count("csv")) bench::write_text_atomic(opt["csv"], bench::to_csv(rep));
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_libtorch: error: " << e.what() << "\n";
    return 2;
  }
}
