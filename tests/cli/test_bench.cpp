// Tests of `kiln bench` (cli/cmd_bench.cpp, bench/workloads.cpp, bench/workload_spec.h, report.h):
// every workload runs a step on the CPU, the analytic FLOP counts, the JSON / CSV output,
// the --compare merge, and the errors for unknown workloads and unavailable devices.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>
#include "bench/workloads.h"
#include "cli/commands.h"
#include "kiln/core/cuda.h"
#include "kiln/core/json.h"
#include "gradcheck.h"

using namespace kiln;
using kiln::test::error_of;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_test_bench_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// Runs `kiln bench args...` through cmd_bench (argv[0] = kiln, argv[1] = bench).
int run_bench(std::vector<std::string> args) {
  args.insert(args.begin(), {"kiln", "bench"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cli::cmd_bench(int(argv.size()), argv.data(), 2);
}

std::vector<std::string> split_line(const std::string& line) {
  std::vector<std::string> cells;
  std::string c;
  std::istringstream in(line);
  while (std::getline(in, c, ',')) cells.push_back(c);
  if (!line.empty() && line.back() == ',') cells.push_back("");
  return cells;
}

}  // namespace

TEST_CASE("bench: every workload runs one smoke step on the CPU") {
  for (const auto& name : bench::workload_names()) {
    auto configs = bench::expand_configs({name}, false, true, {}, -1, -1, {"fp32"});
    REQUIRE(configs.size() == 1);
    CHECK(configs[0].warmup == 1);
    CHECK(configs[0].timed == 1);
    const bench::Result r = bench::run_workload(configs[0], "cpu", 1, 1e6);  // a peak no CPU step reaches
    INFO(name, ": ", r.status);
    REQUIRE(r.ok());
    REQUIRE(r.step_ms.size() == 1);
    CHECK(r.median_ms > 0.0);
    CHECK(r.min_ms == r.median_ms);
    CHECK(r.flops_per_step == bench::train_flops(configs[0]));
    CHECK(r.gflops() > 0.0);
    CHECK(std::isfinite(r.mfu()));
    CHECK(r.alloc_peak_bytes > 0);
    CHECK(r.rss_peak_bytes > 0);
    if (name == "sgemm") CHECK(std::isnan(r.items_per_s()));
    else CHECK(r.items_per_s() > 0.0);
  }
}

TEST_CASE("bench: FLOP counts match a hand computation") {
  // mlp, batch 128: forward 2*B*(784*512 + 512*512 + 512*10); the backward doubles it,
  // less the first layer's input gradient (the images need none).
  const double B = 128;
  const double fwd = 2 * B * (784.0 * 512 + 512.0 * 512 + 512.0 * 10);
  CHECK(bench::train_flops(bench::default_config("mlp", false)) == doctest::Approx(3 * fwd - 2 * B * 784 * 512));
  // sgemm: 2 n^3 for one product.
  bench::WorkloadConfig s = bench::default_config("sgemm", false);
  s.batch = 1024;
  CHECK(bench::train_flops(s) == 2.0 * 1024 * 1024 * 1024);
  // gpt: 6 * (non-embedding GEMM parameters) * tokens + attention 12 * L * T * C per token.
  bench::WorkloadConfig g = bench::default_config("gpt", false);
  const double C = 128, T = 128, L = 4, V = 96, tokens = 16 * 128;
  const double params = L * 12 * C * C + C * V;
  CHECK(bench::train_flops(g) == doctest::Approx(6 * params * tokens + 12 * L * T * C * tokens));
  // The GPU shapes are larger.
  CHECK(bench::train_flops(bench::default_config("gpt", true)) > 1000 * bench::train_flops(g));
}

TEST_CASE("bench: workload and batch lists") {
  CHECK(bench::parse_workloads("all") == bench::workload_names());
  CHECK(bench::parse_workloads("gpt,mlp") == std::vector<std::string>{"gpt", "mlp"});
  const std::string e = error_of([] { bench::parse_workloads("mlp,resnet"); });
  CHECK(e.find("unknown workload 'resnet'") != std::string::npos);
  CHECK(e.find("mlp, lenet, convnet, gpt, sgemm") != std::string::npos);
  CHECK(error_of([] { run_bench({"--workloads", "vgg", "--smoke"}); }).find("valid workloads") != std::string::npos);
  CHECK(bench::parse_batch_list("16,32,...,256") == std::vector<int64_t>{16, 32, 64, 128, 256});
  CHECK(bench::parse_batch_list("8,24") == std::vector<int64_t>{8, 24});
  CHECK_THROWS_AS(bench::parse_batch_list("16,...,64"), std::invalid_argument);
  CHECK_THROWS_AS(bench::parse_batch_list("0"), std::invalid_argument);
  // --sweep-batch repeats the model workloads; sgemm keeps its sizes.
  auto cs = bench::expand_configs({"mlp", "sgemm"}, false, false, {16, 32}, -1, 3, {"fp32"});
  REQUIRE(cs.size() == 5);
  CHECK(cs[0].batch == 16);
  CHECK(cs[1].batch == 32);
  CHECK(cs[2].batch == 256);
  CHECK(cs[4].batch == 2048);
  CHECK(cs[4].timed == 3);
}

TEST_CASE("bench: GPU peak table and MFU") {
  CHECK(bench::gpu_peak_gflops("NVIDIA H200", "bf16") == doctest::Approx(989.4e3));
  CHECK(bench::gpu_peak_gflops("NVIDIA A100-SXM4-80GB", "tf32") == doctest::Approx(156e3));
  CHECK(bench::gpu_peak_gflops("NVIDIA A10", "fp32") == doctest::Approx(31.2e3));  // not the A100
  CHECK(bench::gpu_peak_gflops("NVIDIA H100 PCIe", "fp32") == doctest::Approx(51.2e3));
  CHECK(bench::gpu_peak_gflops("NVIDIA GeForce RTX 4090", "fp32") == doctest::Approx(82.6e3));
  CHECK(std::isnan(bench::gpu_peak_gflops("Tesla V100-SXM2-16GB", "bf16")));
  CHECK(std::isnan(bench::gpu_peak_gflops("Mystery GPU 9000", "fp32")));
  bench::Result r;
  r.median_ms = 10.0;
  r.flops_per_step = 1e9;  // 100 GFLOP/s
  r.peak_gflops = NAN;
  CHECK(std::isnan(r.mfu()));
  r.peak_gflops = 400.0;
  CHECK(r.mfu() == doctest::Approx(0.25));
  // above the peak: no MFU, and the report says why instead
  r.peak_gflops = 80.0;
  CHECK(std::isnan(r.mfu()));
  CHECK(r.above_peak());
  r.framework = "kiln", r.device = "cpu", r.status = "ok";
  r.config.name = "gpt", r.config.precision = "fp32";
  bench::Report rep;
  rep.results.push_back(r);
  const std::string table = bench::format_table(rep);
  CHECK(table.find("above peak") != std::string::npos);
  CHECK(table.find("100.0 GFLOP/s is above the device's 80.0 GFLOP/s peak") != std::string::npos);
  CHECK(table.find("125") == std::string::npos);  // the would-be MFU is never printed
}

TEST_CASE("bench: the CPU peak comes from per-core rates x threads x clock, cross-checked by the FMA loop") {
  using bench::CpuFeatures;
  const CpuFeatures spr{.avx2_fma = true, .avx512f = true, .avx512_bf16 = true, .avx512_fp16 = true};
  const CpuFeatures zen4{.avx2_fma = true, .avx512f = true, .avx512_bf16 = true};
  const CpuFeatures skx{.avx2_fma = true, .avx512f = true};
  const CpuFeatures avx2{.avx2_fma = true};
  auto rates = bench::cpu_core_rates("Intel(R) Xeon(R) Processor", spr);  // a VM hiding the model: AVX512_FP16
  CHECK(rates.fp32 == 64);
  CHECK(rates.bf16 == 64);  // one VDPBF16PS per cycle: the rate of Intel's two FMA units
  CHECK(rates.fp16 == 128);
  CHECK(bench::cpu_core_rates("Intel(R) Xeon(R) Platinum 8480+", CpuFeatures{spr.avx2_fma, true, true, true, true})
            .bf16 == 1024);  // AMX granted
  rates = bench::cpu_core_rates("AMD EPYC 9654 96-Core Processor", zen4);  // Zen 4: 256-bit units
  CHECK(rates.fp32 == 32);
  CHECK(rates.bf16 == 64);
  CHECK(rates.fp16 == 32);  // no AVX512_FP16: computed in fp32
  CHECK(bench::cpu_core_rates("AMD EPYC 9755 128-Core Processor", zen4).fp32 == 64);  // Zen 5
  // a VM's bare "AMD EPYC": the CPUID family tells Zen 5 (0x1A, full-width units) from Zen 4 (0x19)
  CpuFeatures zen5 = zen4, zen4_family = zen4;
  zen5.family = 0x1A;
  zen4_family.family = 0x19;
  CHECK(bench::cpu_core_rates("AMD EPYC", zen5).fp32 == 64);
  CHECK(bench::cpu_core_rates("AMD EPYC", zen5).bf16 == 128);
  CHECK(bench::cpu_core_rates("AMD EPYC", zen4_family).fp32 == 32);
  CHECK(bench::cpu_core_rates("Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz", skx).fp32 == 32);
  CHECK(bench::cpu_core_rates("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", skx).fp32 == 64);
  CHECK(bench::cpu_core_rates("Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz", skx).fp32 == 32);
  CHECK(bench::cpu_core_rates("Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz", skx).fp32 == 64);
  rates = bench::cpu_core_rates("AMD Ryzen 9 5950X", avx2);
  CHECK(rates.fp32 == 32);
  CHECK(rates.bf16 == 32);  // no bf16 instructions: the fp32 units
  // AMD family 0x17: Zen 1 / Zen+ (models below 0x30) split a 256-bit FMA in two, Zen 2 does not
  CpuFeatures zen1 = avx2, zen2 = avx2;
  zen1.family = zen2.family = 0x17;
  zen1.model = 0x01, zen2.model = 0x31;
  CHECK(bench::cpu_core_rates("AMD EPYC 7601 32-Core Processor", zen1).fp32 == 16);
  CHECK(bench::cpu_core_rates("AMD EPYC", zen2).fp32 == 32);
  CHECK(bench::cpu_core_rates("some CPU", CpuFeatures{}).fp32 == 8);

  rates = bench::cpu_core_rates("Intel(R) Xeon(R) Processor", spr);
  // a quiet machine: the loop close to the table, the table stands
  auto p = bench::combine_cpu_peak(rates, 2, 3.0, 350.0);
  CHECK(p.fp32_gflops == doctest::Approx(384.0));
  CHECK(p.bf16_gflops == doctest::Approx(384.0));
  CHECK(p.gflops("fp16") == doctest::Approx(768.0));
  CHECK(std::isnan(p.gflops("tf32")));
  CHECK(p.note.empty());
  // a busy machine: the loop far below, the peak does not drop (MFU would rise past 100%)
  p = bench::combine_cpu_peak(rates, 2, 3.0, 115.0);
  CHECK(p.fp32_gflops == doctest::Approx(384.0));
  CHECK(p.note.find("busy") != std::string::npos);
  // the loop beats the table: the table does not know this CPU, the loop is the peak
  p = bench::combine_cpu_peak(bench::cpu_core_rates("Intel(R) Xeon(R) Silver 4214", skx), 2, 3.0, 380.0);
  CHECK(p.fp32_gflops == doctest::Approx(380.0));
  CHECK(p.note.find("does not know this CPU") != std::string::npos);
  // no clock (not x86-64): the loop
  p = bench::combine_cpu_peak(rates, 2, NAN, 300.0);
  CHECK(p.fp32_gflops == doctest::Approx(300.0));
  // measured here: finite and positive (no timing asserted)
  const double clock = bench::measure_cpu_clock_ghz(1, 2);
#if defined(__x86_64__)
  CHECK(clock > 0.0);
#else
  CHECK(std::isnan(clock));
#endif
}

TEST_CASE("bench: kiln bench writes parseable JSON and CSV, and --compare merges runs") {
  const fs::path d = temp_dir("io");
  const std::string js = (d / "k.json").string(), cs = (d / "k.csv").string();
  REQUIRE(run_bench({"--smoke", "--workloads", "mlp,sgemm", "--threads", "1", "--json", js, "--csv", cs}) == 0);
  const json::Value v = json::parse(read_text(js), js);
  CHECK(v.at("schema").as_string() == "kiln-bench/1");
  CHECK(v.at("framework").as_string() == "kiln");
  CHECK(v.at("threads").as_int() == 1);
  CHECK(v.at("cpu_peak_gflops").as_number() > 0.0);
  CHECK(v.at("cpu_peak_bf16_gflops").as_number() >= v.at("cpu_peak_gflops").as_number());
  CHECK(!v.at("cpu_isa").as_string().empty());
  const auto& results = v.at("results").as_array();
  REQUIRE(results.size() == 2);
  CHECK(results[0].at("workload").as_string() == "mlp");
  CHECK(results[0].at("status").as_string() == "ok");
  CHECK(results[0].at("batch").as_int() == 16);
  CHECK(results[0].at("median_ms").as_number() > 0.0);
  CHECK(results[0].at("step_ms").size() == 1);
  CHECK(results[1].at("workload").as_string() == "sgemm");
  CHECK(results[1].at("items_per_s").is_null());

  std::ifstream f(cs);
  std::string header, row;
  REQUIRE(std::getline(f, header));
  CHECK(header == bench::csv_header());
  const auto cols = split_line(header);
  int rows = 0;
  while (std::getline(f, row)) {
    const auto cells = split_line(row);
    REQUIRE(cells.size() == cols.size());
    CHECK(cells[0] == "kiln");
    CHECK(std::stod(cells[11]) > 0.0);  // median_ms
    ++rows;
  }
  CHECK(rows == 2);

  // A "libtorch" run of the same configs at twice the kiln time: the ratio is 0.5.
  std::string text = read_text(cs), lt = std::string(bench::csv_header()) + "\n";
  std::istringstream in(text);
  std::getline(in, row);
  while (std::getline(in, row)) {
    auto cells = split_line(row);
    cells[0] = "libtorch";
    cells[11] = bench::fmt("%.9g", 2.0 * std::stod(cells[11]));
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) line += (i ? "," : "") + cells[i];
    lt += line + "\n";
  }
  const std::string lts = (d / "t.csv").string(), merged = (d / "m.json").string();
  bench::write_text_atomic(lts, lt);
  REQUIRE(run_bench({"--compare", cs + "," + lts + "," + cs + "," + lts, "--json", merged}) == 0);
  const json::Value m = json::parse(read_text(merged), merged);
  REQUIRE(m.at("rows").size() == 2);
  for (const auto& r : m.at("rows").as_array()) {
    CHECK(r.at("ratio").as_number() == doctest::Approx(0.5).epsilon(1e-6));
    CHECK(r.at("ratio_min").as_number() == doctest::Approx(0.5).epsilon(1e-6));  // both rounds: 0.5
    CHECK(r.at("ratio_max").as_number() == doctest::Approx(0.5).epsilon(1e-6));
    CHECK(r.at("rounds_kiln").as_int() == 2);
    CHECK(r.at("libtorch_alloc_peak_bytes").as_int() > 0);
  }
  CHECK(error_of([&] { run_bench({"--compare", js}); }).find("not a bench CSV") != std::string::npos);

  // The same rows from PyTorch (bench/torch_bench.py, as on a GPU machine): it becomes the reference.
  std::string pt = lt;
  for (size_t p = pt.find("\nlibtorch,"); p != std::string::npos; p = pt.find("\nlibtorch,", p + 1))
    pt.replace(p + 1, 8, "pytorch");
  const std::string pts = (d / "p.csv").string(), mp = (d / "mp.json").string();
  bench::write_text_atomic(pts, pt);
  REQUIRE(run_bench({"--compare", cs + "," + pts, "--json", mp}) == 0);
  const json::Value pm = json::parse(read_text(mp), mp);
  for (const auto& r : pm.at("rows").as_array()) {
    CHECK(r.at("ratio").as_number() == doctest::Approx(0.5).epsilon(1e-6));
    CHECK(r.at("pytorch_median_ms").as_number() > 0.0);
  }

  // The same rows as "cuda" at a quarter of the time: --compare draws the GPU speedup chart.
  std::string cu = std::string(bench::csv_header()) + "\n";
  std::istringstream in2(text);
  std::getline(in2, row);
  while (std::getline(in2, row)) {
    auto cells = split_line(row);
    cells[2] = "cuda";
    cells[11] = bench::fmt("%.9g", 0.25 * std::stod(cells[11]));
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) line += (i ? "," : "") + cells[i];
    cu += line + "\n";
  }
  const std::string cus = (d / "cu.csv").string();
  bench::write_text_atomic(cus, cu);
  REQUIRE(run_bench({"--compare", cs + "," + cus, "--plot-dir", d.string()}) == 0);
  for (const char* png : {"step_time.png", "gpu_speedup.png"}) {
    const std::string bytes = read_text(d / png);
    INFO(png);
    REQUIRE(bytes.size() > 8);
    CHECK(bytes.substr(1, 3) == "PNG");
  }
  fs::remove_all(d);
}

TEST_CASE("bench: cuda is reported as unavailable, and is an error only when it is the only device") {
  if (bench::kiln_device_info("cuda").available) {
    MESSAGE("skipped: this build has a usable CUDA backend");
    return;
  }
  CHECK(error_of([] { run_bench({"--smoke", "--devices", "cuda"}); }).find("cuda: not available") != std::string::npos);
  const fs::path d = temp_dir("cuda");
  const std::string js = (d / "c.json").string();
  REQUIRE(run_bench({"--smoke", "--workloads", "sgemm", "--devices", "cpu,cuda", "--threads", "1", "--json", js}) == 0);
  const json::Value v = json::parse(read_text(js), js);
  REQUIRE(v.at("devices").size() == 2);
  CHECK(v.at("devices").as_array()[1].at("available").as_bool() == false);
  CHECK(v.at("results").size() == 1);  // the CPU's sgemm only
  CHECK(error_of([] { bench::kiln_device_info("tpu"); }).find("valid devices: cpu, cuda") != std::string::npos);
  fs::remove_all(d);
}
