// bench_ddp: the data-parallel figures of docs/benchmarks.md (scripts/bench_ddp.sh runs it).
//
//   bench_ddp step --workload gpt|convnet [--threads T] [--timed N] [--warmup N] [--bucket-mb M]
//     Times a training step of the workload at WORKLOADS.md's batch (the global batch). Under
//     mpirun -np W every rank takes batch / W through DistributedDataParallel; rank 0 prints
//     the median step, and with W > 1 also the median time backward waited for the
//     all-reduces after its last gradient ("wait": communication not hidden, plus waiting
//     for the slower rank), the time an all-reduce of all the gradients takes on its own
//     ("comm"), and the median fraction of the buckets' all-reduce time that passed while
//     backward was still computing ("overlapped").
//   bench_ddp allreduce [--reps N]
//     float32 sum all-reduce of 4 KiB .. 64 MiB: kiln's dist::all_reduce against a bare
//     MPI_Allreduce on the same tensor's memory, interleaved (alternating which goes
//     first), as bus bandwidth 2 (W - 1) / W * bytes / time (medians).
#include <mpi.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "bench/workloads.h"
#include "kiln/dist/ddp.h"
#include "kiln/dist/dist.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 2; i + 1 < argc; ++i)
    if (argv[i] == "--" + name) return argv[i + 1];
  return fallback;
}

// The median of reps runs of fn (after one untimed run), each started together on every rank.
template <class Fn>
double median_ms(int reps, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    dist::barrier();
    const double t0 = now_ms();
    fn();
    t.push_back(now_ms() - t0);
  }
  return median(t);
}

int bench_step(int argc, char** argv) {
  const std::string name = flag(argc, argv, "workload", "gpt");
  const int threads = std::atoi(flag(argc, argv, "threads", "1").c_str());
  bench::WorkloadConfig c = bench::default_config(name, false);
  c.timed = std::atoi(flag(argc, argv, "timed", "20").c_str());
  c.warmup = std::atoi(flag(argc, argv, "warmup", "3").c_str());
  const double bucket_mb = std::atof(flag(argc, argv, "bucket-mb", "25").c_str());
  const int W = dist::world_size();
  KILN_CHECK(c.batch % W == 0, "bench_ddp: the batch of ", c.batch, " does not split over ", W, " ranks");
  const int64_t global_batch = c.batch;
  c.batch /= W;
  set_num_threads(threads);
  manual_seed(uint64_t(1 + dist::rank()));  // every rank its own batch
  bench::Trainer t = bench::make_trainer(c, Device::cpu());
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (W > 1) ddp = std::make_unique<dist::DistributedDataParallel>(t.model, dist::DistributedDataParallelOptions{
                                                                               .bucket_cap_mb = bucket_mb});
  nn::Module& run = ddp ? static_cast<nn::Module&>(*ddp) : *t.model;
  std::vector<double> step, wait, overlap;
  for (int i = 0; i < c.warmup + c.timed; ++i) {
    const double t0 = now_ms();
    t.opt->zero_grad();
    t.loss_of(run).backward();
    t.opt->step();
    if (i < c.warmup) continue;
    step.push_back(now_ms() - t0);
    if (ddp) {
      wait.push_back(1000.0 * ddp->last_wait_seconds());
      overlap.push_back(ddp->last_overlap_fraction());
    }
  }
  int64_t numel = 0;
  for (const auto& p : t.model->parameters()) numel += p.numel();
  if (!ddp) {
    std::printf("%s batch %lld, 1 rank x %d threads: step %.2f ms (median of %d)\n", name.c_str(),
                (long long)global_batch, threads, median(step), c.timed);
    return 0;
  }
  Tensor flat = zeros({numel});  // the gradients' bytes, all-reduced on their own
  const double comm = median_ms(c.timed, [&] { dist::all_reduce(flat, dist::ReduceOp::avg); });
  if (dist::rank() == 0)
    std::printf("%s batch %lld, %d ranks x %d thread(s), %zu bucket(s) of <= %g MiB: step %.2f ms, wait %.2f ms, "
                "comm %.2f ms (%.1f MB), overlapped %.0f%%\n",
                name.c_str(), (long long)global_batch, W, threads, ddp->num_buckets(), bucket_mb, median(step),
                median(wait), comm, 4e-6 * double(numel), 100.0 * median(overlap));
  return 0;
}

int bench_allreduce(int argc, char** argv) {
  const int reps = std::atoi(flag(argc, argv, "reps", "30").c_str());
  const int W = dist::world_size();
  if (dist::rank() == 0)
    std::printf("%10s %12s %12s %10s %10s %8s\n", "bytes", "kiln ms", "MPI ms", "kiln GB/s", "MPI GB/s", "ratio");
  for (int64_t bytes = 4096; bytes <= (int64_t(64) << 20); bytes *= 4) {
    // the same tensor's memory for both: the comparison is kiln's wrapper, not where the
    // allocator happened to place a buffer (separate buffers differ by up to 10% at 64 MiB)
    Tensor t = zeros({bytes / 4});
    auto with_kiln = [&] { dist::all_reduce(t, dist::ReduceOp::sum); };
    auto with_mpi = [&] {
      MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), int(t.numel()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    with_kiln();
    with_mpi();
    std::vector<double> tk, tm;  // interleaved, so drift on a shared machine hits both alike
    for (int i = 0; i < reps; ++i) {
      if (i % 2 == 0) {  // alternating which goes first
        tk.push_back(median_ms(1, with_kiln));
        tm.push_back(median_ms(1, with_mpi));
      } else {
        tm.push_back(median_ms(1, with_mpi));
        tk.push_back(median_ms(1, with_kiln));
      }
    }
    const double k = median(tk), m = median(tm);
    const double bus = 2.0 * (W - 1) / W * double(bytes) / 1e6;  // MB moved per rank; / ms = GB/s
    if (dist::rank() == 0)
      std::printf("%10lld %12.3f %12.3f %10.2f %10.2f %8.2f\n", (long long)bytes, k, m, bus / k, bus / m, m / k);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    dist::init();
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "step") return bench_step(argc, argv);
    if (mode == "allreduce") return bench_allreduce(argc, argv);
    std::fprintf(stderr, "usage: bench_ddp step --workload gpt|convnet [--threads T] [--timed N] [--warmup N] "
                         "[--bucket-mb M]\n       bench_ddp allreduce [--reps N]\n");
    return 2;
  } catch (const std::exception& e) {
    dist::abort(std::string("bench_ddp: ") + e.what());
  }
}
