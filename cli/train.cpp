// The training jobs of `kiln train`, shared part: the command line (flags, parsing), the
// models, the Trainer (one step: forward under autocast, scaled backward, accumulate,
// clip, optimizer step; checkpoints and --resume) and run_training, which hands over to
// the loop of the task: train_vision.cpp (mnist, cifar10) or train_gpt.cpp (gpt).
#include "cli/train.h"
#include "cli/train_internal.h"
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <limits>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include "cli/command_line.h"
#include "kiln/monitor/metrics.h"
#include "kiln/monitor/progress.h"
#include "cli/run_state.h"
#include "cli/signals.h"
#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/text.h"
#include "kiln/data/transforms.h"
#include "kiln/data/vision.h"
#include "kiln/dist/ddp.h"
#include "kiln/dist/dist.h"
#include "kiln/dist/sampler.h"
#include "kiln/dist/zero.h"
#include "kiln/models/models.h"
#include "kiln/nn/serialize.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/batch_finder.h"
#include "kiln/optim/grad_scaler.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/divergence_guard.h"
#include "kiln/optim/run_checkpoint.h"
#include "kiln/optim/sgd.h"
#include "kiln/core/file_io.h"

namespace kiln::cli {

Model make_model(const TrainConfig& cfg, int64_t in_channels, int64_t image_size, int64_t vocab) {
  Model m;
  const bool ckpt = cfg.checkpoint_activations;
  if (cfg.model == "convnet") {
    auto net = std::make_shared<models::ConvNet>(models::ConvNetOptions{in_channels, 10, image_size});
    net->checkpoint_activations = ckpt;
    m.module = net;
  } else if (cfg.model == "lenet") {
    KILN_CHECK(in_channels == 1 && image_size == 28, "kiln train: lenet expects 1x28x28 images, got ", in_channels,
               "x", image_size, "x", image_size);
    auto net = std::make_shared<models::LeNet5>(models::LeNet5Options{1, 10});
    net->checkpoint_activations = ckpt;
    m.module = net;
  } else if (cfg.model == "mlp") {
    KILN_CHECK(!ckpt, "kiln train: --checkpoint-activations is not available for the mlp (nothing worth dropping)");
    // Flatten (N, C, H, W) images into the MLP's (N, C*H*W) rows.
    m.module = std::make_shared<nn::Sequential>(nn::Sequential{
        nn::Flatten(), models::MLP(models::MLPOptions{in_channels * image_size * image_size, {512, 512}, 10})});
  } else if (cfg.model == "resnet20") {
    auto net = std::make_shared<models::ResNet20>(models::ResNetOptions{.in_channels = in_channels, .num_classes = 10});
    net->checkpoint_activations = ckpt;
    m.module = net;
  } else if (cfg.model == "gpt") {
    m.gpt = std::make_shared<models::GPT>(models::GPTConfig{.vocab = vocab,
                                                            .context = cfg.context,
                                                            .layers = cfg.layers,
                                                            .heads = cfg.heads,
                                                            .width = cfg.width,
                                                            .dropout = cfg.dropout,
                                                            .tie_weights = false});
    m.gpt->checkpoint_activations = ckpt;
    m.module = m.gpt;
  } else {
    KILN_CHECK(false, "kiln train ", cfg.task, ": unknown --model '", cfg.model, "'");
  }
  return m;
}

void Trainer::make_optimizer(int64_t total_steps) {
  auto make = [this](const std::vector<optim::ParamGroup>& groups) -> std::unique_ptr<optim::Optimizer> {
    if (cfg.task == "gpt")
      return std::make_unique<optim::AdamW>(groups, optim::AdamWOptions{.lr = cfg.lr, .weight_decay = cfg.weight_decay});
    return std::make_unique<optim::SGD>(
        groups, optim::SGDOptions{.lr = cfg.lr, .momentum = cfg.momentum, .weight_decay = cfg.weight_decay});
  };
  const auto params = model.module->parameters();
  if (cfg.zero) opt = std::make_unique<dist::ZeroRedundancyOptimizer>(params, make);
  else opt = make(optim::single_group(params));
  if (cfg.schedule == "cosine")
    sched = std::make_unique<optim::WarmupCosineLR>(
        *opt, optim::WarmupCosineLROptions{.warmup_steps = std::max<int64_t>(1, total_steps / 20),
                                           .total_steps = std::max<int64_t>(2, total_steps),
                                           .min_lr = cfg.lr * 0.1});
  scaler = std::make_unique<amp::GradScaler>(amp::GradScalerOptions{.enabled = cfg.amp == "fp16"});
  guard = std::make_unique<optim::DivergenceGuard>(optim::DivergenceGuardOptions{.max_consecutive_skips = cfg.max_skips});
}

Tally Trainer::restore(const Checkpoint& ck) {
  ck.restore({.model = model.module.get(), .optimizer = opt.get(), .scheduler = sched.get(), .scaler = scaler.get()});
  const TrainingState& s = ck.state();
  epoch = s.epoch;
  step = s.step;
  saved_step = step;
  saved_path = ck.path();
  const std::string where = "'" + ck.path() + "'";
  KILN_CHECK(s.extra.contains("skipped") && s.extra.at("skipped").is_int() && s.extra.at("skipped").as_int() >= 0,
             where, ": \"skipped\" must be a non-negative integer");
  guard->set_skipped(s.extra.at("skipped").as_int());
  // hyperparameters live in the optimizer's state: an override is written over them
  auto set_hparam = [&](const char* flag, const char* name, double v) {
    if (!cfg.changed.count(flag)) return;
    optim::StateDict sd = opt->state_dict();
    for (size_t g = 0; g < opt->num_groups(); ++g)
      if (auto it = sd.find("param_groups." + std::to_string(g) + "." + name); it != sd.end())
        it->second = scalar_tensor(v, {.dtype = DType::float64});
    opt->load_state_dict(sd);
  };
  set_hparam("lr", "lr", cfg.lr);
  if (cfg.task != "gpt") set_hparam("momentum", "momentum", cfg.momentum);
  set_hparam("weight-decay", "weight_decay", cfg.weight_decay);
  return s.data.contains("epoch") ? Tally::from_json(s.data.at("epoch"), where) : Tally{};
}

void Trainer::find_batch(const std::function<std::pair<Tensor, Tensor>(int64_t)>& sample, int64_t max_per_rank) {
  KILN_CHECK(max_per_rank >= 1, "kiln train: --batch-size auto: the training data has too few examples for one "
             "batch per rank and --accum step");
  KILN_CHECK(!device.is_cpu() || cfg.memory_limit > 0, "kiln train: --batch-size auto on the CPU needs "
             "--memory-limit (e.g. --memory-limit 4G): the CPU has no device memory to fill");
  make_optimizer(1);  // a stand-in with the real optimizer's state, replaced once the batch is known
  if (ddp) ddp->set_require_sync(false);  // trial steps are local: no rank waits for another
  auto step = [&](int64_t b) {
    const auto [x, y] = sample(b);
    autocast guard(cfg.amp == "fp16" ? DType::float16 : DType::bfloat16, cfg.amp != "off");
    Tensor logits = (*model.module)(x.to(device));
    const Tensor target = y.to(device);
    Tensor loss = cfg.task == "gpt" ? cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}))
                                    : cross_entropy(logits, target);
    loss.backward();
    opt->step();
  };
  const optim::BatchFinderResult r = optim::find_batch_size(
      step, *model.module, *opt, device, {.start = 1, .max = max_per_rank, .memory_limit = cfg.memory_limit});
  int64_t b = r.batch;
  if (dist::world_size() > 1) {  // the smallest over the ranks (the max of the negatives)
    Tensor v = full({1}, -double(b), {.dtype = DType::float64});
    dist::all_reduce(v, dist::ReduceOp::max);
    b = int64_t(-v.item());
  }
  cfg.batch_size = b * dist::world_size();
  cfg.batch_auto = false;
  spdlog::info("batch size auto: {} per rank (its step peaked at {:.1f} MiB of the {:.1f} MiB target; {} trial "
               "steps{})", b, double(r.peak_bytes) / (1 << 20), double(r.limit_bytes) / (1 << 20), r.tries.size(),
               b == max_per_rank ? ", stopped at the largest batch the data allows" : "");
}

void Trainer::wrap_model() {
  if (dist::world_size() > 1) ddp = std::make_shared<dist::DistributedDataParallel>(model.module);
}

void Trainer::set_read_every() {
  read_every = cfg.log_every > 0 ? cfg.log_every : device.is_cuda() ? 10 : 1;
  if (dist::world_size() > 1 && read_every > 1) {
    if (cfg.log_every > 1) spdlog::info("--log-every {}: under mpirun the loss is read every step (the ranks agree "
                                        "on it)", cfg.log_every);
    read_every = 1;
  }
}

Tensor Trainer::micro_step(const Tensor& input, const Tensor& target, bool last) {
  if (ddp) ddp->set_require_sync(last && !cfg.zero);  // ZeRO-1 reduce-scatters in its step
  Tensor loss;
  {
    autocast guard(cfg.amp == "fp16" ? DType::float16 : DType::bfloat16, cfg.amp != "off");
    Tensor logits = ddp ? (*ddp)(input) : (*model.module)(input);
    if (cfg.task == "gpt") loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
    else loss = cross_entropy(logits, target);
  }
  Tensor scaled = scaler->scale(cfg.accum > 1 ? loss / double(cfg.accum) : loss);
  scaled.backward();
  return loss.detach().to(DType::float64);  // summed over the group in float64 (as doubles were)
}

namespace {
// A diverged run's error, naming the checkpoint that was kept.
[[noreturn]] void diverged(const Error& e, const Trainer& t) {
  KILN_FAIL(e.what(), t.saved_step >= 0 ? "; the last checkpoint, " + t.saved_path + " (step " +
                                              std::to_string(t.saved_step) + "), was kept"
                                        : std::string());
}
}  // namespace

void Trainer::optimizer_step(const Tensor& group_loss, double lr) {
  Pending p;
  p.log.lr = lr;
  if (read_every > 1 && dist::world_size() == 1 && device.is_cuda() && opt->can_skip_on_device()) {
    // nothing read: the skip is decided on the device and counted by read_steps()
    stop_sig = stop_requested();
    p.loss = group_loss;
    if (scaler->is_enabled()) {  // fp16: the scaler checks the gradients and skips
      scaler->step(*opt);
      scaler->update();
      p.skipped = scaler->last_step_skipped_flag();
    } else {
      p.skipped = guard->check_on_device(group_loss, *opt);
      opt->step_unless(p.skipped);
    }
  } else {
    double loss = group_loss.item();
    agree(loss);
    bool took = false;
    try {
      if (scaler->is_enabled()) {  // fp16: the scaler checks the gradients and skips
        scaler->step(*opt);
        scaler->update();
        took = !scaler->last_step_skipped() && std::isfinite(loss);
        guard->record(!took, std::isfinite(loss) ? "inf/NaN gradients under fp16 loss scaling (scale now " +
                                                       std::to_string(scaler->get_scale()) + ")"
                                                 : "loss " + std::to_string(loss));
      } else if ((took = guard->check(loss, *opt))) {
        opt->step();
      }
    } catch (const Error& e) {
      diverged(e, *this);
    }
    p.log.loss = loss;
    p.log.took = took;
  }
  opt->zero_grad();
  if (sched) sched->step();
  ++step;
  p.log.step = step;
  pending.push_back(std::move(p));
}

bool Trainer::read_due(bool at_end) const {
  if (pending.empty()) return false;
  return at_end || int64_t(pending.size()) >= read_every || stop_sig != 0 || stop_requested() || save_due();
}

void Trainer::read_steps(const std::function<void(const StepLog&)>& on_step) {
  // one copy to the host for every loss and flag still on the device
  std::vector<Tensor> parts;
  for (const Pending& p : pending)
    if (p.loss.defined()) {
      parts.push_back(p.loss.reshape({1}));
      parts.push_back(p.skipped.reshape({1}).to(DType::float64));
    }
  const std::vector<double> v = parts.empty() ? std::vector<double>{} : cat(parts, 0).to_vector<double>();
  size_t j = 0;
  for (Pending& p : pending) {
    if (p.loss.defined()) {
      StepLog& l = p.log;
      l.loss = v[j++];
      const bool flagged = v[j++] != 0;
      l.took = !flagged && std::isfinite(l.loss);
      try {
        guard->record(!l.took, l.took                    ? std::string()
                               : !std::isfinite(l.loss) ? "loss " + std::to_string(l.loss)
                               : scaler->is_enabled() ? "inf/NaN gradients under fp16 loss scaling (scale now " +
                                                            std::to_string(scaler->get_scale()) + ")"
                                                      : std::string("an inf/NaN gradient"));
      } catch (const Error& e) {
        diverged(e, *this);
      }
    }
    on_step(p.log);
  }
  pending.clear();
}

void Trainer::agree(double& loss) {
  stop_sig = stop_requested();
  const int W = dist::world_size();
  if (W == 1) return;
  // the loss, and per stop signal how many ranks received it: every rank then stops with the
  // same one (the first of kStopSignals received anywhere), so all log it and exit alike
  constexpr size_t S = std::size(kStopSignals);
  std::vector<double> v(1 + S, 0.0);
  v[0] = loss;
  for (size_t i = 0; i < S; ++i) v[1 + i] = stop_sig == kStopSignals[i] ? 1.0 : 0.0;
  Tensor t = from_vector(v, {int64_t(1 + S)});
  dist::all_reduce(t, dist::ReduceOp::sum);
  const std::vector<double> got = t.to_vector<double>();
  loss = got[0] / W;
  stop_sig = 0;
  for (size_t i = 0; i < S && !stop_sig; ++i)
    if (got[1 + i] > 0) stop_sig = kStopSignals[i];
}

bool Trainer::save_due() const {
  if (cfg.save.empty()) return false;
  if (cfg.save_every_steps > 0 && step % cfg.save_every_steps == 0) return true;
  return cfg.save_every_minutes > 0 && seconds_since(last_save) >= 60 * cfg.save_every_minutes;
}

void Trainer::save(const Tally& tally) {
  if (cfg.save.empty()) return;
  optim::StateDict sharded;  // ZeRO-1: gathering the full optimizer state takes every rank
  if (cfg.zero) sharded = opt->state_dict();
  if (dist::rank() != 0) {  // rank 0 writes the one checkpoint of the job
    last_save = Clock::now();
    saved_step = step;
    saved_path = cfg.save;
    return;
  }
  std::map<std::string, std::string> meta = metadata;
  meta["kiln.task"] = cfg.task;
  meta["kiln.model"] = cfg.model;
  meta["kiln.step"] = std::to_string(step);
  TrainingState s{.step = step, .epoch = epoch};
  s.data["epoch"] = tally.to_json();
  s.extra["config"] = config_to_json(cfg);
  s.extra["skipped"] = guard->skipped();
  save_checkpoint(cfg.save, {.model = model.module.get(), .optimizer = opt.get(), .scheduler = sched.get(),
                             .scaler = scaler.get(), .optimizer_state = cfg.zero ? &sharded : nullptr},
                  s, {.keep = int(cfg.keep), .metadata = meta});
  last_save = Clock::now();
  saved_step = step;
  saved_path = cfg.save;
}

int Trainer::checkpoint_point(const Tally& tally) {
  const int sig = stop_sig;
  if ((sig || save_due()) && step != saved_step) save(tally);
  if (sig)
    spdlog::info("stopping after step {} ({}): {}", step, signal_name(sig),
                 cfg.save.empty() ? std::string("nothing saved (no --save)")
                                  : "saved " + cfg.save + "; --resume " + cfg.save + " continues");
  return sig;
}

void Trainer::stop_at_reached(const Tally& tally, const std::string& what) {
  if (step != saved_step) save(tally);
  spdlog::info("stopping after {} (--stop-at): {}", what,
               cfg.save.empty() ? std::string("nothing saved (no --save)")
                                : "saved " + cfg.save + "; --resume " + cfg.save + " continues");
}

void Trainer::write_plot(const MetricsLog& metrics, const std::string& title) {
  try {
    metrics.write_plot(title);
  } catch (const Error& e) {
    if (!plot_failed) spdlog::warn("warning: the plot was not written, training goes on: {}", e.what());
    plot_failed = true;
  }
}

std::string default_metrics_path(const TrainConfig& cfg) { return "runs/" + cfg.task + "-" + cfg.model + ".csv"; }

/// Logs how a resumed run stands against its schedule (planned when the run started): a
/// cosine schedule that has ended keeps its final lr for steps added by --epochs / --steps.
void note_schedule(const Trainer& t) {
  if (!t.sched) return;
  const int64_t total = int64_t(t.sched->state_dict().at("settings.total_steps").item());
  if (t.step >= total)
    spdlog::info("note: the cosine schedule of this run ended at step {}; the remaining steps run at its final lr {:g}",
                 total, t.opt->lr());
}

data::TensorDataset open_images(const std::string& task, const std::string& dir, data::Split split) {
  if (task == "cifar10") return data::CIFAR10(dir, split);
  if (dir.find("fashion") != std::string::npos) return data::FashionMNIST(dir, split);
  return data::MNIST(dir, split);
}

double test_accuracy(nn::Module& model, const std::shared_ptr<const data::Dataset>& test, Device device,
                     const std::vector<double>& mean, const std::vector<double>& std) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(test, {.batch_size = 500, .seed = 0, .transform = data::Normalize{mean, std}});
  int64_t correct = 0, total = 0;
  for (auto& batch : loader) {
    Tensor logits = model(batch.input.to(device));
    correct += int64_t(sum(argmax(logits, 1).to(Device::cpu()) == batch.target).item());
    total += batch.target.size(0);
  }
  return total ? double(correct) / double(total) : 0.0;
}

Device pick_device(const std::string& name) {
  // auto: the GPU when there is one and this build's CUDA backend has the kernels the
  // models need (it is being built op family by op family), else the CPU.
  if (name == "auto")
    return cuda::is_available() && supports(Op::conv2d, DeviceType::CUDA) && supports(Op::matmul, DeviceType::CUDA)
               ? Device::cuda(0)
               : Device::cpu();
  Device d(name);
  if (d.is_cuda())
    KILN_CHECK(d.index < cuda::device_count(), "--device ", name, ": ",
               cuda::device_count() == 0 ? std::string("no usable CUDA GPU (or a build without the CUDA backend)")
                                         : "only " + std::to_string(cuda::device_count()) + " GPU(s)");
  return d;
}

void setup_logging(const std::string& log_file) {
  std::vector<spdlog::sink_ptr> sinks{std::make_shared<spdlog::sinks::stdout_sink_mt>()};
  if (!log_file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file));
    } catch (const spdlog::spdlog_ex& e) {
      KILN_CHECK(false, "--log ", log_file, ": cannot open the log file (", e.what(), ")");
    }
  }
  auto logger = std::make_shared<spdlog::logger>("kiln", sinks.begin(), sinks.end());
  logger->set_pattern("[%H:%M:%S] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

namespace {

/// --save-every: "N" steps or "Nm" minutes.
void parse_save_every(const std::string& v, TrainConfig& c) {
  const bool minutes = !v.empty() && v.back() == 'm';
  const std::string num = minutes ? v.substr(0, v.size() - 1) : v;
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(num.c_str(), &end);
  KILN_CHECK(!num.empty() && *end == '\0' && errno == 0 && std::isfinite(x) && x >= 0 && (minutes || x == std::floor(x)),
             "kiln train: --save-every '", v, "' must be a number of steps (500) or of minutes with an m suffix (10m)");
  if (minutes) c.save_every_minutes = x;
  else c.save_every_steps = int64_t(x);
}

/// --memory-limit: bytes, or a number with a K, M or G suffix (powers of 1024): 512M, 1.5G.
int64_t parse_memory_size(const std::string& v) {
  double scale = 1;
  std::string num = v;
  if (!v.empty()) {
    const char s = char(std::toupper(static_cast<unsigned char>(v.back())));
    if (s == 'K' || s == 'M' || s == 'G') {
      scale = s == 'K' ? 1024.0 : s == 'M' ? 1024.0 * 1024 : 1024.0 * 1024 * 1024;
      num.pop_back();
    }
  }
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(num.c_str(), &end);
  KILN_CHECK(!num.empty() && *end == '\0' && errno == 0 && std::isfinite(x) && x > 0 && x * scale < 9.0e18,
             "kiln train: --memory-limit '", v, "' must be a positive size in bytes or with a K, M or G suffix (e.g. 2G)");
  return int64_t(x * scale);
}

}  // namespace

TrainConfig parse_train_config(int argc, char** argv, int first) {
  KILN_CHECK(first < argc, "kiln train: expected a task: mnist, cifar10 or gpt");
  TrainConfig c;
  c.task = argv[first];
  KILN_CHECK(c.task == "mnist" || c.task == "cifar10" || c.task == "gpt", "kiln train: unknown task '", c.task,
             "'; expected mnist, cifar10 or gpt");
  const bool gpt = c.task == "gpt";
  // the task's defaults, set before the flags are bound so that --help shows them
  if (gpt) c.model = "gpt", c.batch_size = 16, c.lr = 1e-3, c.weight_decay = 0.01, c.schedule = "cosine";
  else c.model = c.task == "cifar10" ? "resnet20" : "convnet";
  std::string data = c.task == "mnist" ? "/usr/share/datasets/fashion-mnist" : "", text;
  std::string batch = std::to_string(c.batch_size), memory_limit, save_every = "0", log;
  bool no_progress = false;

  CLI::App app{"Train a network (kiln train mnist|cifar10|gpt).", "kiln train " + c.task};
  setup_app(app);
  app.add_option("--model", c.model, "mnist: convnet|lenet|mlp; cifar10: resnet20|convnet");
  app.add_option("--data", data, "mnist/cifar10: folder of the dataset files");
  app.add_option("--text", text, "gpt: UTF-8 text file to train on");
  app.add_option("--device", c.device, "cpu, cuda, cuda:N or auto");
  app.add_option("--epochs", c.epochs, "passes over the training set (vision)");
  app.add_option("--batch-size", batch, "examples per micro-batch, or auto: the largest that fits the memory "
                 "target (--memory-limit; on a GPU 90% of its memory)");
  app.add_option("--memory-limit", memory_limit, "with --batch-size auto: the memory target, in bytes or with a K, M "
                 "or G suffix (needed on the CPU)");
  app.add_option("--lr", c.lr, "learning rate (vision SGD, gpt AdamW)");
  app.add_option("--momentum", c.momentum, "SGD momentum (vision)");
  app.add_option("--weight-decay", c.weight_decay, "SGD L2 (vision) or AdamW decoupled decay (gpt)");
  app.add_option("--schedule", c.schedule, "learning-rate schedule: constant or cosine (5% linear warm-up)");
  app.add_option("--threads", c.threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
  app.add_option("--workers", c.workers, "DataLoader background threads (vision)")->check(CLI::Range(0, 256));
  app.add_option("--amp", c.amp, "mixed precision: off, bf16 or fp16 (fp16 uses dynamic loss scaling)");
  app.add_option("--accum", c.accum, "micro-batches accumulated per optimizer step");
  app.add_flag("--checkpoint-activations", c.checkpoint_activations, "recompute activations in backward to save memory");
  app.add_option("--seed", c.seed, "seed of initialisation, shuffling, dropout and sampling")
      ->check(CLI::Range(uint64_t(0), uint64_t(std::numeric_limits<int64_t>::max())));
  app.add_option("--limit", c.limit, "use only the first N training and test examples (vision; 0: all)");
  app.add_option("--steps", c.steps, "optimizer steps (gpt)");
  app.add_option("--max-minutes", c.max_minutes, "gpt: stop at the first evaluation after this many minutes (0: no "
                 "limit)");
  app.add_option("--eval-every", c.eval_every, "gpt: steps between validation-loss estimates");
  app.add_option("--eval-batches", c.eval_batches, "gpt: batches per validation-loss estimate");
  app.add_option("--context", c.context, "gpt: context length");
  app.add_option("--layers", c.layers, "gpt: transformer blocks");
  app.add_option("--heads", c.heads, "gpt: attention heads");
  app.add_option("--width", c.width, "gpt: embedding width");
  app.add_option("--dropout", c.dropout, "gpt: dropout probability");
  app.add_option("--tokenizer", c.tokenizer, "gpt: char (one token per character) or bpe (byte-level BPE trained on "
                 "the training text)");
  app.add_option("--vocab-size", c.vocab_size, "gpt --tokenizer bpe: tokens in the BPE vocabulary (256 bytes + "
                 "merges)");
  app.add_option("--prompt", c.prompt, "gpt: prompt of the sample printed at the end")->default_str("a newline");
  app.add_option("--sample-tokens", c.sample_tokens, "gpt: tokens sampled at the end");
  app.add_option("--stop-at", c.stop_at, "end this run after epoch N (vision) or step N (gpt) as if interrupted; "
                 "--resume continues it");
  app.add_option("--save", c.save, "checkpoint file (.safetensors): written after every epoch / evaluation, and on "
                 "SIGTERM, SIGINT, SIGUSR1 or SIGUSR2 (under mpirun: SIGUSR1 to mpirun)");
  app.add_option("--save-every", save_every, "also save every N steps, or every N minutes with an m suffix (e.g. 500 "
                 "or 10m; 0: no)");
  app.add_option("--keep", c.keep, "checkpoints kept: the --save file and keep-1 older ones (run.1.safetensors, ...)");
  app.add_option("--max-skips", c.max_skips, "stop the run after this many consecutive steps skipped for a "
                 "non-finite loss or gradients");
  app.add_option("--resume", c.resume, "continue the run saved in this checkpoint (its configuration; --save "
                 "defaults to it)");
  app.add_flag("--override", c.override_saved, "with --resume: flags that contradict the saved run's settings change "
               "them instead of being an error");
  app.add_option("--metrics", c.metrics, "metrics CSV (a PNG plot is written beside it); default runs/TASK-MODEL.csv");
  app.add_option("--log", log, "also write the log to this file");
  app.add_flag("--no-progress", no_progress, "no progress bar or progress lines, only the per-epoch log");
  app.add_option("--log-every", c.log_every, "optimizer steps between reads of the loss from the device (progress, "
                 "metrics and the divergence guard's count; a read waits for the GPU); 0: 1 on the CPU, 10 on a GPU");
  app.add_flag("--zero", c.zero, "under mpirun: ZeRO-1, each rank keeps 1/ranks of the optimizer state (gradients "
               "reduce-scattered, weights all-gathered at the step)");
  parse(app, argc, argv, first + 1);
  c.given = given_flags(app);
  auto given = [&](const char* flag) { return c.given.count(flag) != 0; };

  KILN_CHECK(gpt || !given("text"), "kiln train ", c.task, ": --text is for gpt; use --data DIR");
  KILN_CHECK(!gpt || !given("data"), "kiln train gpt: use --text FILE");
  c.data = gpt ? text : data;
  KILN_CHECK(!c.data.empty() || !c.resume.empty(), "kiln train ", c.task, ": ", gpt ? "--text FILE" : "--data DIR",
             " is required");
  c.batch_auto = batch == "auto";
  if (!c.batch_auto) {
    char* end = nullptr;
    errno = 0;
    const long long b = std::strtoll(batch.c_str(), &end, 10);
    KILN_CHECK(!batch.empty() && *end == '\0' && errno == 0,
               "kiln train: --batch-size expects an integer or auto, got '", batch, "'");
    c.batch_size = b;
  } else {
    c.batch_size = 0;
  }
  if (given("memory-limit")) c.memory_limit = parse_memory_size(memory_limit);
  KILN_CHECK(!given("memory-limit") || c.batch_auto, "kiln train: --memory-limit is for --batch-size auto");
  KILN_CHECK(!c.batch_auto || c.resume.empty(), "kiln train: --batch-size auto cannot be used with --resume (the run "
             "keeps the batch size it was saved with)");
  KILN_CHECK(!given("vocab-size") || c.tokenizer == "bpe", "kiln train: --vocab-size is for --tokenizer bpe");
  c.progress = !no_progress;
  parse_save_every(save_every, c);
  KILN_CHECK(!c.override_saved || !c.resume.empty(), "kiln train: --override is for --resume");
  if (!log.empty()) setup_logging(log);
  validate_config(c, "kiln train " + c.task, true);
  return c;
}

TrainResult run_training(TrainConfig cfg) {
  if (dist::rank() != 0) spdlog::set_level(spdlog::level::warn);  // rank 0 alone logs
  std::optional<Checkpoint> resumed;
  if (!cfg.resume.empty()) {
    resumed = Checkpoint::open(cfg.resume);
    for (const std::string& why : resumed->passed_over())
      spdlog::warn("warning: passed over a damaged checkpoint: {}", why);
    const TrainingState& s = resumed->state();
    KILN_CHECK(s.extra.contains("config"), "--resume ", resumed->path(), ": no run configuration in its state (was it "
               "written by kiln train?)");
    const TrainConfig saved = config_from_json(s.extra.at("config"), "'" + resumed->path() + "': config");
    std::vector<std::string> notes;
    cfg = merge_resumed_config(saved, cfg, notes);
    spdlog::info("resuming from {} (epoch {}, step {}): {}", resumed->path(), s.epoch, s.step, describe_config(cfg));
    for (const std::string& n : notes) spdlog::info("  {}", n);
  }
  if (cfg.threads > 0) set_num_threads(cfg.threads);
  manual_seed(cfg.seed);
  if (dist::rank() != 0) {  // rank 0 alone draws progress, writes metrics and checkpoints
    cfg.progress = false;
  } else if (dist::world_size() > 1) {
    spdlog::info("data-parallel: {} ranks (MPI{}{}), global batch {} = {} per rank", dist::world_size(),
                 dist::built_with_nccl() ? " + NCCL" : "", cfg.zero ? ", ZeRO-1" : "", cfg.batch_size,
                 cfg.batch_size / dist::world_size());
  }
  Trainer t;
  t.cfg = cfg;
  t.device = pick_device(cfg.device);
  t.set_read_every();
  if (!cfg.save.empty()) {
    const auto dir = std::filesystem::path(cfg.save).parent_path();
    KILN_CHECK(dir.empty() || std::filesystem::is_directory(dir), "--save ", cfg.save, ": folder ", dir.string(),
               " does not exist");
    if (int n = dist::rank() == 0 ? remove_stale_temp_files(cfg.save) : 0)
      spdlog::info("removed {} temporary file(s) of an interrupted save of {}", n, cfg.save);
  }
  const std::string csv = cfg.metrics.empty() ? default_metrics_path(cfg) : cfg.metrics;
  if (auto dir = std::filesystem::path(csv).parent_path(); !dir.empty()) std::filesystem::create_directories(dir);
  install_stop_handlers();
  return cfg.task == "gpt" ? run_gpt(t, resumed) : run_vision(t, resumed);
}

}  // namespace kiln::cli
