// The workload configs, FLOP counts and list parsing of bench/workload_spec.h.
#include "bench/workload_spec.h"
#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace kiln::bench {

WorkloadConfig default_config(const std::string& name, bool gpu_shapes) {
  WorkloadConfig c;
  c.name = name;
  c.shape_set = gpu_shapes && name == "gpt" ? "gpt2-small" : "reference";  // others differ in batch only
  if (name == "mlp") {
    c.batch = gpu_shapes ? 4096 : 128, c.warmup = 5, c.timed = 50;
  } else if (name == "lenet") {
    c.batch = gpu_shapes ? 1024 : 64, c.warmup = 5, c.timed = 50;
  } else if (name == "convnet") {
    c.batch = gpu_shapes ? 1024 : 64, c.warmup = 3, c.timed = 20;
  } else if (name == "gpt") {
    c.warmup = 3, c.timed = 20;
    if (gpu_shapes)
      c.batch = 64, c.vocab = 50304, c.context = 256, c.layers = 12, c.heads = 12, c.width = 768;
    else
      c.batch = 16, c.vocab = 96, c.context = 128, c.layers = 4, c.heads = 4, c.width = 128;
  } else if (name == "sgemm") {
    c.batch = gpu_shapes ? 1024 : 256, c.warmup = 2, c.timed = 10;
  } else {
    std::string valid;
    for (const auto& n : workload_names()) valid += (valid.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown workload '" + name + "'; valid workloads: " + valid);
  }
  return c;
}

std::vector<int64_t> sgemm_sizes(bool gpu_shapes, bool smoke) {
  if (smoke) return {128};
  if (gpu_shapes) return {1024, 4096, 8192};
  return {256, 1024, 2048};
}

void make_smoke(WorkloadConfig& c) {
  c.warmup = 1, c.timed = 1;
  if (c.name == "mlp") c.batch = 16;
  else if (c.name == "lenet" || c.name == "convnet") c.batch = 8;
  else if (c.name == "gpt") c.batch = 2;
}

double train_flops(const WorkloadConfig& c) {
  struct Gemm {
    double m, k, n;     // (m x k) @ (k x n)
    bool input_grad;    // the backward computes a gradient for the input too
  };
  const double B = double(c.batch);
  std::vector<Gemm> g;
  if (c.name == "sgemm") return 2.0 * B * B * B;
  if (c.name == "mlp") {
    g = {{B, 784, 512, false}, {B, 512, 512, true}, {B, 512, 10, true}};
  } else if (c.name == "lenet") {  // conv as GEMM: m = N*Hout*Wout, k = Cin*kh*kw, n = Cout
    g = {{B * 28 * 28, 1 * 25, 6, false}, {B * 10 * 10, 6 * 25, 16, true},
         {B, 400, 120, true}, {B, 120, 84, true}, {B, 84, 10, true}};
  } else if (c.name == "convnet") {
    g = {{B * 28 * 28, 1 * 9, 32, false}, {B * 28 * 28, 32 * 9, 32, true}, {B * 14 * 14, 32 * 9, 64, true},
         {B * 14 * 14, 64 * 9, 64, true}, {B, 3136, 128, true}, {B, 128, 10, true}};
  } else if (c.name == "gpt") {
    const double BT = B * double(c.context), T = double(c.context), C = double(c.width);
    for (int64_t l = 0; l < c.layers; ++l) {
      g.push_back({BT, C, 3 * C, true});  // qkv projection
      g.push_back({BT, C, T, true});      // q k^T over all heads: B*H*T*T*hd = BT*T*C
      g.push_back({BT, T, C, true});      // attention weights @ v
      g.push_back({BT, C, C, true});      // output projection
      g.push_back({BT, C, 4 * C, true});  // MLP up
      g.push_back({BT, 4 * C, C, true});  // MLP down
    }
    g.push_back({BT, C, double(c.vocab), true});  // head
  } else {
    return 0.0;
  }
  double flops = 0.0;
  for (const auto& e : g) flops += 2.0 * e.m * e.k * e.n * (e.input_grad ? 3.0 : 2.0);
  return flops;
}

void summarize(Result& r) {
  if (r.step_ms.empty()) return;
  std::vector<double> v = r.step_ms;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  r.median_ms = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  r.min_ms = v.front();
  r.max_ms = v.back();
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, ','))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

std::vector<int64_t> parse_batch_list(const std::string& s) {
  const auto items = split_list(s);
  std::vector<int64_t> out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i] == "...") {
      if (out.size() < 2 || i + 1 >= items.size())
        throw std::invalid_argument("batch list '" + s + "': '...' needs two numbers before it and one after");
      const int64_t a = out[out.size() - 2], b = out.back();
      if (b <= a) throw std::invalid_argument("batch list '" + s + "': '...' needs an increasing run before it");
      const int64_t end = std::atoll(items[i + 1].c_str());
      const double ratio = double(b) / double(a);
      for (double x = double(b) * ratio; x < double(end) - 0.5; x *= ratio) out.push_back(int64_t(std::llround(x)));
      continue;
    }
    char* e = nullptr;
    const long long v = std::strtoll(items[i].c_str(), &e, 10);
    if (items[i].empty() || *e != '\0' || v < 1)
      throw std::invalid_argument("batch list '" + s + "': '" + items[i] + "' is not a positive integer");
    out.push_back(v);
  }
  if (out.empty()) throw std::invalid_argument("batch list '" + s + "' is empty");
  return out;
}

std::vector<WorkloadConfig> expand_configs(const std::vector<std::string>& names, bool gpu_shapes, bool smoke,
                                           const std::vector<int64_t>& batches, int warmup, int timed,
                                           const std::vector<std::string>& precisions) {
  std::vector<WorkloadConfig> out;
  for (const auto& n : names) {
    WorkloadConfig base = default_config(n, gpu_shapes);
    if (smoke) make_smoke(base);
    std::vector<int64_t> bs = base.is_sgemm() ? sgemm_sizes(gpu_shapes, smoke)
                                              : (batches.empty() ? std::vector<int64_t>{base.batch} : batches);
    for (const auto& p : precisions)
      for (int64_t b : bs) {
        WorkloadConfig c = base;
        c.batch = b;
        c.precision = p;
        if (warmup >= 0) c.warmup = warmup;
        if (timed >= 0) c.timed = timed;
        out.push_back(c);
      }
  }
  return out;
}

}  // namespace kiln::bench
