// The reference workloads (shared/WORKLOADS.md) on kiln: builds each model from
// kiln::models, times zero_grad + forward + loss + backward + optimizer step, and fills a
// bench::Result (bench/workload_spec.h). `kiln bench` (cli/cmd_bench.cpp) drives it.
#pragma once
#include <string>
#include <vector>
#include "bench/workload_spec.h"

namespace kiln::bench {

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
