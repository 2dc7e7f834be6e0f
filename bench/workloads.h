// The reference workloads (shared/WORKLOADS.md) on kiln: builds each model from
// kiln::models, times zero_grad + forward + loss + backward + optimizer step, and fills a
// bench::Result (bench/workload_spec.h). `kiln bench` (cli/cmd_bench.cpp) drives it.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "bench/report.h"
#include "bench/system_probe.h"
#include "bench/workload_spec.h"
#include "kiln/nn/module.h"
#include "kiln/optim/optimizer.h"

namespace kiln::bench {

/// One model workload (WORKLOADS.md) built on a device: the model, its optimizer, and a
/// random batch of c.batch samples in memory. loss_of(m) runs m (the model, or a wrapper
/// of it such as dist::DistributedDataParallel) on the batch and returns the loss.
struct Trainer {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::function<Tensor(nn::Module&)> loss_of;
};
/// Throws kiln::Error for sgemm (no model) or an unknown name.
Trainer make_trainer(const WorkloadConfig& c, Device dev);

/// Whether kiln can run on "cpu" or "cuda" here: description is the CPU model / GPU name,
/// or why not ("this build of kiln has no CUDA backend ...", "no CUDA GPU found"). Any
/// other name throws kiln::Error listing cpu and cuda.
DeviceInfo kiln_device_info(const std::string& device);

/// Splits a comma-separated workload list ("all" = every workload) and checks each name;
/// an unknown name throws kiln::Error listing the valid names.
std::vector<std::string> parse_workloads(const std::string& list);

/// Runs one config on a device (which must be available): warm-up steps, then timed
/// steps, each synchronised with the device. threads sets kiln's CPU thread count;
/// peak_gflops (NaN = unknown) is stored for the MFU column. Resets the allocator's and
/// the process's (VmHWM) peaks first, so both peaks cover this workload. What kiln cannot
/// run (tf32; an op without a kernel on the device) gives status "unsupported: ...", not
/// an exception.
Result run_workload(const WorkloadConfig& config, const std::string& device, int threads, double peak_gflops);

/// True when the last run_workload could reset the process's VmHWM (Linux clear_refs),
/// i.e. RSS peaks are per workload rather than since process start.
bool rss_peak_is_per_workload();

}  // namespace kiln::bench
