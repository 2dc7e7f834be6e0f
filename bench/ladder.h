// `kiln bench --ladder`: the kernel ladder (bench/ladder.cpp), GEMM and convolution from the
// reference loops of ops/reference/ to kiln's tuned kernels, each rung timed on this CPU (and GPU).
#pragma once
#include <string>

namespace kiln::bench {

/// Runs every rung (each result checked against the reference) and returns the table; the
/// GPU rungs too where a GPU is visible.
/// smoke: tiny shapes and one timed call each (CI).
std::string run_ladder(int threads, bool smoke);

}  // namespace kiln::bench
