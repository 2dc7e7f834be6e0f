// Internal to `kiln train` (cli/train.cpp, train_vision.cpp, train_gpt.cpp): what the two
// training loops share: the data position of a run (Tally) and the Trainer (model,
// optimizer, schedule, scaler, the step, checkpoints), whose functions are in train.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "kiln/monitor/metrics.h"
#include "kiln/monitor/step_meter.h"
#include "cli/train.h"
#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/core/tensor.h"
#include "kiln/dist/ddp.h"
#include "kiln/dist/dist.h"
#include "kiln/optim/divergence_guard.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/run_checkpoint.h"

namespace kiln::cli {

using namespace kiln::monitor;  // the progress bar, step meter and metrics log

/// What a run has done within its current epoch (vision) or evaluation interval (gpt):
/// saved as a checkpoint's data position, so a run saved mid-epoch resumes exactly.
struct Tally {
  int64_t micro = 0;       // micro-batches consumed (vision: the loader's position)
  int64_t done = 0;        // optimizer steps
  double loss_sum = 0;     // of the finite losses
  int64_t loss_n = 0, skipped = 0;
  double window_loss = 0;  // since the last CSV row
  int64_t window_loss_n = 0, window_n = 0, window_skipped = 0;
  int64_t world = dist::world_size();  // ranks whose batches `micro` counts

  void add(double loss, bool took) {
    ++done;
    ++window_n;
    if (!took) ++skipped, ++window_skipped;
    if (std::isfinite(loss)) loss_sum += loss, ++loss_n, window_loss += loss, ++window_loss_n;
  }
  double mean_loss() const { return loss_n ? loss_sum / double(loss_n) : NAN; }
  /// The CSV row of the window since the last one (and starts a new window).
  MetricsRow take_window(int64_t step, int64_t epoch, double lr, double rate) {
    MetricsRow r;
    r.step = step, r.epoch = epoch, r.lr = lr, r.items_per_s = rate, r.skipped = window_skipped;
    r.loss = window_loss_n ? window_loss / double(window_loss_n) : NAN;
    window_loss = 0;
    window_loss_n = window_n = window_skipped = 0;
    return r;
  }
  json::Value to_json() const {
    json::Value j = json::Value::object();
    j["micro"] = micro, j["done"] = done, j["loss_sum"] = loss_sum, j["loss_n"] = loss_n, j["skipped"] = skipped;
    j["window_loss"] = window_loss, j["window_loss_n"] = window_loss_n, j["window_n"] = window_n;
    j["window_skipped"] = window_skipped;
    j["world"] = world;
    return j;
  }
  static Tally from_json(const json::Value& j, const std::string& where) {
    Tally t;
    auto count = [&](const char* k) {
      KILN_CHECK(j.contains(k) && j.at(k).is_int() && j.at(k).as_int() >= 0, where, ": data position \"", k,
                 "\" must be a non-negative integer");
      return j.at(k).as_int();
    };
    auto number = [&](const char* k) {
      KILN_CHECK(j.contains(k) && j.at(k).is_number() && std::isfinite(j.at(k).as_number()), where,
                 ": data position \"", k, "\" must be a finite number");
      return j.at(k).as_number();
    };
    t.micro = count("micro"), t.done = count("done"), t.loss_sum = number("loss_sum"), t.loss_n = count("loss_n");
    t.skipped = count("skipped"), t.window_loss = number("window_loss"), t.window_loss_n = count("window_loss_n");
    t.window_n = count("window_n"), t.window_skipped = count("window_skipped"), t.world = count("world");
    return t;
  }
};

/// One optimizer step as the loops see it once the host has read it: its mean loss,
/// whether it was taken (not skipped for a non-finite loss or gradients), the learning
/// rate it ran with and the step count after it.
struct StepLog {
  double loss = 0;
  bool took = true;
  double lr = 0;
  int64_t step = 0;
};

/// Everything that changes as a run goes and that a checkpoint must restore.
struct Trainer {
  TrainConfig cfg;
  Device device;
  Model model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LRScheduler> sched;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<optim::DivergenceGuard> guard;
  std::shared_ptr<dist::DistributedDataParallel> ddp;  // under mpirun: averages the gradients
  int stop_sig = 0;   // a stop signal every rank agreed on (after the step that saw it)
  int64_t epoch = 0;  // completed epochs (vision) or evaluations (gpt)
  int64_t step = 0;   // completed optimizer steps
  // checkpoint contents besides the tensors
  std::map<std::string, std::string> metadata;  // what inference needs (normalisation, vocabulary)
  Clock::time_point last_save = Clock::now();
  int64_t saved_step = -1;     // step of the last checkpoint written or resumed from (-1: none)
  std::string saved_path;      // and its file
  // Steps the host has not read yet (--log-every): on a GPU the loss and the skip flag stay
  // there until read_steps() reads them all at once.
  struct Pending {
    Tensor loss, skipped;  // on the device; undefined once read
    StepLog log;
  };
  std::vector<Pending> pending;
  int64_t read_every = 1;  // cfg.log_every resolved for the device and the ranks

  /// The optimizer (AdamW for gpt, else SGD; ZeRO-1 with --zero), the schedule, the
  /// GradScaler and the divergence guard, for a run of total_steps optimizer steps.
  void make_optimizer(int64_t total_steps);
  /// Restores a checkpoint into the model, optimizer, scheduler, scaler and RNG, applies
  /// the settings --override changed, and returns the data position.
  Tally restore(const Checkpoint& ck);
  /// --batch-size auto: the largest micro-batch per rank (at most max_per_rank) whose
  /// training step stays within the memory target, found with trial steps on sample(b)
  /// (input and target of b examples; optim::find_batch_size restores everything after
  /// each), the smallest over the ranks; cfg.batch_size becomes it times the ranks.
  void find_batch(const std::function<std::pair<Tensor, Tensor>(int64_t)>& sample, int64_t max_per_rank);
  /// Wraps the model for data-parallel training when the job has several ranks.
  void wrap_model();
  /// Resolves --log-every (0: 1 on the CPU, 10 on a GPU; 1 under mpirun, whose ranks
  /// agree on the loss every step).
  void set_read_every();
  /// One forward + backward of a micro-batch; returns its (unscaled) loss, detached, as
  /// float64 on the device (not read). Under mpirun the gradients are averaged over the
  /// ranks in the backward of the group's last micro-batch only (`last`).
  Tensor micro_step(const Tensor& input, const Tensor& target, bool last = true);
  /// The optimizer step closing a group of cfg.accum micro-batches whose mean loss is
  /// `loss`, run at learning rate `lr`; queued in `pending`. Skipped when the loss or a
  /// gradient is not finite. With read_every > 1 on a GPU that decision stays on the
  /// device (DivergenceGuard::check_on_device, or the GradScaler's) and nothing is read;
  /// otherwise the loss is read and the guard decides here.
  void optimizer_step(const Tensor& loss, double lr);
  /// Whether the queued steps should be read now: read_every of them, the loop's last
  /// step (`at_end`), or a stop signal or checkpoint that needs the tallies current.
  bool read_due(bool at_end) const;
  /// Reads every queued step (one host synchronisation for all of them), counts its skip
  /// with the guard (which throws once --max-skips steps in a row were skipped) and calls
  /// on_step in step order.
  void read_steps(const std::function<void(const StepLog&)>& on_step);
  /// Under mpirun: `loss` becomes the mean of the ranks' losses (so the divergence guard
  /// decides the same everywhere), and a stop signal any rank got stops all after this step.
  void agree(double& loss);
  /// Whether --save-every asks for a checkpoint now.
  bool save_due() const;
  /// Writes the checkpoint (when --save is set) with the data position within the epoch.
  void save(const Tally& tally);
  /// After a step whose reads are done: saves when due or when a signal asks the run to
  /// stop; returns the signal.
  int checkpoint_point(const Tally& tally);
  /// --stop-at reached after `what` ("step 7", "epoch 2"), the steps read: saves (unless this
  /// step is saved already) and logs how to continue.
  void stop_at_reached(const Tally& tally, const std::string& what);
  /// Redraws the metrics plot. The plot is cosmetic: a failure to write it (a full disk) is
  /// a warning, logged once, and training goes on (the CSV and the checkpoint stay errors).
  void write_plot(const MetricsLog& metrics, const std::string& title);
  bool plot_failed = false;
};

/// runs/<task>-<model>.csv, the metrics CSV without --metrics.
std::string default_metrics_path(const TrainConfig& cfg);
/// Logs how a resumed run stands against its schedule (planned when the run started): a
/// cosine schedule that has ended keeps its final lr for steps added by --epochs / --steps.
void note_schedule(const Trainer& t);

/// The image-classification loop (mnist, cifar10): train_vision.cpp.
TrainResult run_vision(Trainer& t, const std::optional<Checkpoint>& resumed);
/// The character-level GPT loop: train_gpt.cpp.
TrainResult run_gpt(Trainer& t, const std::optional<Checkpoint>& resumed);

}  // namespace kiln::cli
