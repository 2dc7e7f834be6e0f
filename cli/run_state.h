// A training run's checkpoint: the model's weights in a safetensors file (which Python's
// safetensors opens) and, beside it, a JSON side file (x.state.json) with everything else
// a resumed run needs to continue bit for bit: the run's configuration, epoch and step,
// the RNG state, and the optimizer, LR-scheduler and GradScaler state dicts.
#pragma once
#include <map>
#include <string>
#include <vector>
#include "cli/train.h"
#include "core/json.h"
#include "core/rng.h"
#include "data/text.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace kiln::cli {

/// The side file's content (plus the weights' path).
struct RunState {
  TrainConfig config;
  int64_t epoch = 0;   ///< completed epochs (vision) / evaluations (gpt)
  int64_t step = 0;    ///< completed optimizer steps
  RngState rng{};      ///< kiln's global generator when saved
  json::Value optimizer, scheduler, scaler;  ///< tensors_to_json of the state dicts
  json::Value extra = json::Value::object(); ///< task data (gpt: "vocab")
  std::string weights; ///< the .safetensors path
};

/// Writes the weights (metadata: task, model, step and `metadata`) and the side file, each
/// atomically. The side file is written last and names the weights' step, so a crash
/// between the two is detected by load_run_state.
void save_run(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
              const optim::LRScheduler* sched, const amp::GradScaler& scaler, const RunState& rs,
              const std::map<std::string, std::string>& metadata, const json::Value& extra);
/// Reads a checkpoint's side file (and checks the weights file matches it).
RunState load_run_state(const std::string& path);
/// Loads the weights into `model` and the state into the optimizer, scheduler, scaler and
/// kiln's generator; sets epoch and step.
void restore_run(const RunState& rs, nn::Module& model, optim::Optimizer& opt, optim::LRScheduler* sched,
                 amp::GradScaler& scaler, int64_t& epoch, int64_t& step);
/// The saved run's configuration, with what may change on resume taken from `cmdline`
/// (epochs, steps, max-minutes, stop-at, device, threads, workers, files, progress, sampling).
TrainConfig merge_resumed_config(const TrainConfig& saved, const TrainConfig& cmdline);

json::Value config_to_json(const TrainConfig& c);
TrainConfig config_from_json(const json::Value& v, const std::string& what);
json::Value json_array(const std::vector<double>& values);
/// A vocabulary saved as an array of code points.
data::CharVocab vocab_from_json(const json::Value& v, const std::string& what);

}  // namespace kiln::cli
