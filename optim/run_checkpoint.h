// Training checkpoints as one file: the model's weights, the optimizer, LR-scheduler and
// GradScaler state, kiln's RNG state, and the step / epoch / data position, committed by a
// single atomic rename so a crash at any moment leaves either the old or the new checkpoint.
//
// The file is a safetensors file (Python's safetensors opens it). The model's tensors keep
// their state_dict() names; the other parts' tensors are named "optimizer/...",
// "scheduler/..." and "scaler/..."; "__metadata__" holds "kiln.state" (JSON: step, epoch,
// data, extra, rng, parts) and an XXH3 checksum per tensor (nn/serialize.h).
//
//   kiln::save_checkpoint("run.safetensors", {.model = &model, .optimizer = &opt, .scheduler = &sched,
//                          .scaler = &scaler}, {.step = step, .epoch = epoch});
//   kiln::TrainingState s = kiln::load_checkpoint("run.safetensors", {.model = &model, .optimizer = &opt,
//                                                 .scheduler = &sched, .scaler = &scaler});
// Objects may be built in any order before the load: the load restores them in the order
// that leaves every learning rate as it was when saved.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include "kiln/core/json.h"
#include "kiln/nn/module.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"

namespace kiln {

/// Where a run stands, saved beside the tensors. `data` and `extra` are the caller's.
struct TrainingState {
  int64_t step = 0;                            ///< optimizer steps completed
  int64_t epoch = 0;                           ///< epochs completed
  json::Value data = json::Value::object();    ///< data position, e.g. {"batch": 120}
  json::Value extra = json::Value::object();   ///< anything else (run configuration, vocabulary)
};

/// The objects a checkpoint holds; null ones are not saved (and not restored).
struct CheckpointParts {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  amp::GradScaler* scaler = nullptr;
  bool rng = true;  ///< kiln's global generator (dropout masks, random init)
  /// Saved instead of optimizer->state_dict() when set: the full state of a sharded
  /// optimizer (dist::ZeroRedundancyOptimizer), which every rank must gather together
  /// before the one rank that writes calls save_checkpoint. Loading ignores it.
  const optim::StateDict* optimizer_state = nullptr;
};

struct CheckpointSaveOptions {
  /// Checkpoints kept: the file itself plus keep - 1 older ones (run.1.safetensors, ...).
  int keep = 2;
  /// Extra "__metadata__" entries (strings), e.g. what inference needs.
  std::map<std::string, std::string> metadata = {};
  /// Write weights or optimizer state holding NaN/inf (refused by default, so a diverged
  /// run never replaces a good checkpoint).
  bool allow_nonfinite = false;
};

/// Writes `parts` and `state` to `path` as one file, atomically (temp file, fsync, rename,
/// folder fsync), keeping options.keep - 1 older checkpoints, and removes temp files that
/// interrupted saves to `path` left behind. Throws kiln::Error (writing nothing) when a
/// weight or optimizer value is not finite, unless options.allow_nonfinite.
void save_checkpoint(const std::string& path, const CheckpointParts& parts, const TrainingState& state,
                     const CheckpointSaveOptions& options = {});

struct CheckpointLoadOptions {
  /// Accept weights or optimizer state holding NaN/inf.
  bool allow_nonfinite = false;
  /// When the file is damaged (unreadable, a checksum mismatch, non-finite weights), try
  /// the older copies save_checkpoint kept (run.1.safetensors, ...): at most this many.
  int fallback = 9;
};

/// An opened, verified checkpoint: read whole, every checksum checked, every value of its
/// state validated. Restoring is a separate step so that a caller can first read the
/// state (e.g. the run's configuration) and then build the objects to restore into.
class Checkpoint {
 public:
  /// Opens `path`, or, when it is damaged, the newest intact older copy (see
  /// CheckpointLoadOptions::fallback); throws kiln::Error naming every file tried and why.
  static Checkpoint open(const std::string& path, const CheckpointLoadOptions& options = {});

  /// The file that was read (`path`, or an older copy).
  const std::string& path() const { return path_; }
  /// The newer files that were passed over, each with the reason ("run.safetensors: ...").
  const std::vector<std::string>& passed_over() const { return passed_over_; }
  const TrainingState& state() const { return state_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Which parts the file holds: "model", "optimizer", "scheduler", "scaler", "rng".
  bool has(const std::string& part) const;
  /// The model's tensors (state_dict names).
  nn::StateDict model_state() const;

  /// Loads the parts given (non-null) into the objects: model, optimizer, scheduler,
  /// scaler, then the RNG. A part asked for that the file lacks is an error naming the file.
  void restore(const CheckpointParts& parts) const;

 private:
  std::string path_;
  std::vector<std::string> passed_over_;
  TrainingState state_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::string> parts_;
  std::map<std::string, nn::StateDict> tensors_;  ///< part -> its tensors (without the prefix)
  uint64_t rng_seed_ = 0, rng_offset_ = 0;
};

/// Checkpoint::open(path, options).restore(parts); returns the saved state.
TrainingState load_checkpoint(const std::string& path, const CheckpointParts& parts,
                              const CheckpointLoadOptions& options = {});

}  // namespace kiln
