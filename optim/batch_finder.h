// Finding the largest batch that fits in memory: try training steps at doubling batch
// sizes, then bisect between the last that fitted and the first that did not. A try
// fits when it raised no out-of-memory error and the allocator's peak stayed within the
// memory target. The model, the optimizer and the random generator are put back after
// every try, so finding the batch changes nothing about the run that follows.
//
//   auto r = kiln::optim::find_batch_size(
//       [&](int64_t b) { train_step(x.narrow(0, 0, b), y.narrow(0, 0, b)); }, model, opt,
//       Device::cuda(0), {.max = 4096});
//   // r.batch, r.peak_bytes, r.limit_bytes, r.tries
#pragma once
#include <cstdint>
#include <functional>
#include <vector>
#include "kiln/core/device.h"
#include "kiln/nn/module.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct BatchFinderOptions {
  int64_t start = 1;              ///< the first batch tried
  int64_t max = int64_t(1) << 20; ///< never beyond (e.g. the training set's size)
  int64_t multiple_of = 1;        ///< only multiples of this are tried (e.g. for several ranks)
  /// The memory target in bytes. 0: memory_fraction of the GPU's memory on CUDA; on the
  /// CPU (whose allocator never refuses until the OS does) a limit must be given.
  int64_t memory_limit = 0;
  double memory_fraction = 0.9;
};

struct BatchTry {
  int64_t batch;
  int64_t peak_bytes;  ///< the allocator's peak during the try (-1: out of memory)
  bool fits;
};

struct BatchFinderResult {
  int64_t batch = 0;       ///< the largest batch that fitted (0: not even `start`)
  int64_t peak_bytes = 0;  ///< its measured peak
  int64_t limit_bytes = 0; ///< the target it was measured against
  std::vector<BatchTry> tries;
};

/// Runs `step(batch)` (one training step: forward, backward, optimizer step) for the
/// batches it tries on `device`, restoring `model` (parameters and buffers), `opt` and the
/// random generator after each. Out-of-memory errors (kiln::Error) of a try count as not
/// fitting; any other error propagates. Throws kiln::Error when even options.start does
/// not fit, naming the peak and the target.
BatchFinderResult find_batch_size(const std::function<void(int64_t)>& step, nn::Module& model, Optimizer& opt,
                                  Device device, const BatchFinderOptions& options = {});

}  // namespace kiln::optim
