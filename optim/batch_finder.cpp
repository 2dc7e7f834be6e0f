// find_batch_size (see batch_finder.h).
#include "kiln/optim/batch_finder.h"
#include <string>
#include "kiln/core/allocator.h"
#include "kiln/core/autograd.h"
#include "kiln/core/cuda_memory.h"
#include "kiln/core/error.h"
#include "kiln/core/rng.h"

namespace kiln::optim {

namespace {
bool is_out_of_memory(const Error& e) { return std::string(e.what()).find("out of memory") != std::string::npos; }
}  // namespace

BatchFinderResult find_batch_size(const std::function<void(int64_t)>& step, nn::Module& model, Optimizer& opt,
                                  Device device, const BatchFinderOptions& o) {
  KILN_CHECK(o.start >= 1 && o.max >= o.start && o.multiple_of >= 1, "find_batch_size: needs 1 <= start <= max and "
             "multiple_of >= 1, got start ", o.start, ", max ", o.max, ", multiple_of ", o.multiple_of);
  KILN_CHECK(o.memory_fraction > 0 && o.memory_fraction <= 1, "find_batch_size: memory_fraction must be in (0, 1], "
             "got ", o.memory_fraction);
  BatchFinderResult r;
  r.limit_bytes = o.memory_limit;
  if (r.limit_bytes <= 0) {
    KILN_CHECK(device.is_cuda(), "find_batch_size: on the ", device.str(), " a memory limit must be given (the CPU "
               "allocator has no device memory to measure against)");
    r.limit_bytes = int64_t(o.memory_fraction * double(cuda::memory_info(device.index).total_bytes));
  }
  // what every try starts from
  nn::StateDict model_state;
  {
    NoGradGuard ng;
    for (const auto& [name, t] : model.state_dict()) model_state.insert(name, t.detach().clone());
  }
  const StateDict opt_state = opt.state_dict();
  const RngState rng = get_rng_state();
  auto restore = [&] {
    opt.zero_grad();
    model.load_state_dict(model_state);
    opt.load_state_dict(opt_state);
    set_rng_state(rng);
    empty_cache(device);
  };
  auto round = [&](int64_t b) { return std::max(o.multiple_of, b / o.multiple_of * o.multiple_of); };
  auto fits = [&](int64_t b) {
    empty_cache(device);
    reset_peak_memory_stats(device);
    BatchTry t{b, -1, false};
    try {
      step(b);
      t.peak_bytes = memory_stats(device).peak_bytes;
      t.fits = t.peak_bytes <= r.limit_bytes;
    } catch (const Error& e) {
      if (!is_out_of_memory(e)) {
        restore();
        throw;
      }
    }
    restore();
    r.tries.push_back(t);
    return t;
  };

  int64_t lo = 0, hi = 0;  // the largest batch that fitted, the smallest that did not (0: none yet)
  for (int64_t b = round(o.start);; b = round(std::min(o.max, 2 * b))) {
    const BatchTry t = fits(b);
    if (!t.fits) {
      hi = b;
      break;
    }
    lo = b;
    r.peak_bytes = t.peak_bytes;
    if (b >= round(o.max)) break;
  }
  KILN_CHECK(lo > 0, "find_batch_size: even a batch of ", round(o.start), " does not fit: its step ",
             r.tries.back().peak_bytes < 0 ? std::string("ran out of memory")
                                            : "peaked at " + std::to_string(r.tries.back().peak_bytes) + " bytes",
             ", over the target of ", r.limit_bytes, " bytes. Use gradient accumulation, activation "
             "checkpointing or mixed precision to fit, or raise the memory limit");
  while (hi > 0 && hi - lo > o.multiple_of) {  // lo fits, hi does not
    const int64_t mid = round(lo + (hi - lo) / 2);
    if (mid <= lo) break;
    const BatchTry t = fits(mid);
    if (t.fits) {
      lo = mid;
      r.peak_bytes = t.peak_bytes;
    } else {
      hi = mid;
    }
  }
  r.batch = lo;
  return r;
}

}  // namespace kiln::optim
