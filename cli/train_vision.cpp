// `kiln train mnist|cifar10`: the image-classification loop, the one a PyTorch user would
// write (zero_grad, forward under autocast, scaled backward, accumulate, step) with what a
// long run needs around it: progress, metrics CSV + plot, test accuracy per epoch,
// checkpoints mid-epoch and at its end.
#include <algorithm>
#include <cmath>
#include <memory>
#include <spdlog/spdlog.h>
#include "kiln/monitor/progress.h"
#include "cli/run_state.h"
#include "cli/train_internal.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/transforms.h"
#include "kiln/data/vision.h"
#include "kiln/dist/sampler.h"

namespace kiln::cli {

namespace {

struct VisionData {
  std::shared_ptr<data::TensorDataset> train, test;
  std::vector<double> mean, std;  // per channel, of the training images
  int64_t channels = 1, size = 28;
};

std::shared_ptr<data::TensorDataset> limited(const data::TensorDataset& ds, int64_t limit) {
  if (limit <= 0 || limit >= ds.size()) return std::make_shared<data::TensorDataset>(ds);
  const bool u8 = ds.inputs().dtype() == DType::uint8;
  return std::make_shared<data::TensorDataset>(
      ds.inputs().narrow(0, 0, limit).contiguous(), ds.targets().narrow(0, 0, limit).contiguous(),
      data::TensorDatasetOptions{.input_dtype = DType::float32, .input_scale = u8 ? 1.0 / 255.0 : 1.0});
}

VisionData load_vision(const TrainConfig& cfg) {
  VisionData d;
  d.train = limited(open_images(cfg.task, cfg.data, data::Split::Train), cfg.limit);
  d.test = limited(open_images(cfg.task, cfg.data, data::Split::Test), cfg.limit);
  // Per-channel mean and standard deviation of the stored training pixels, for Normalize:
  // one pass over the uint8 bytes with exact integer-valued double sums, no float copy.
  const Tensor raw = d.train->inputs().contiguous();  // (N, C, H, W) uint8
  KILN_CHECK(raw.dtype() == DType::uint8 && raw.dim() == 4, "kiln train: expected uint8 images (N, C, H, W), got ",
             dtype_name(raw.dtype()), " ", shape_str(raw.shape()));
  d.channels = raw.size(1);
  d.size = raw.size(2);
  const int64_t N = raw.size(0), C = d.channels, HW = raw.size(2) * raw.size(3);
  const uint8_t* p = raw.data<uint8_t>();
  std::vector<double> s(size_t(C), 0.0), ss(size_t(C), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (const uint8_t* q = p + (n * C + c) * HW; q < p + (n * C + c + 1) * HW; ++q) {
        s[size_t(c)] += *q;
        ss[size_t(c)] += double(*q) * *q;
      }
  const double count = double(std::max<int64_t>(N * HW, 1));
  for (int64_t c = 0; c < C; ++c) {
    const double m = s[size_t(c)] / count, v = std::max(ss[size_t(c)] / count - m * m, 0.0);
    d.mean.push_back(m / 255.0);
    d.std.push_back(std::sqrt(v) / 255.0);
  }
  return d;
}

/// Fraction of correctly classified test examples (rank 0 of a data-parallel job
/// evaluates; the others return -1).
double evaluate_accuracy(Trainer& t, const VisionData& d) {
  if (dist::rank() != 0) return -1;
  const double acc = test_accuracy(*t.model.module, d.test, t.device, d.mean, d.std);
  t.model.module->train();
  return acc;
}

}  // namespace

TrainResult run_vision(Trainer& t, const std::optional<Checkpoint>& resumed) {
  TrainConfig& cfg = t.cfg;
  VisionData d = load_vision(cfg);
  spdlog::info("data: {} training / {} test images of {}x{}x{} from {}", d.train->size(), d.test->size(), d.channels,
               d.size, d.size, cfg.data);
  t.model = make_model(cfg, d.channels, d.size, 0);
  t.model.module->to(t.device);
  t.wrap_model();
  data::Transform transform = data::Normalize{d.mean, d.std};
  if (cfg.task == "cifar10")
    transform = data::Compose{data::RandomCrop{d.size, d.size, 4}, data::RandomHorizontalFlip{}, data::Normalize{d.mean, d.std}};
  // Under mpirun --batch-size is the global batch: each rank takes its share of every
  // epoch (DistributedSampler) in batches of batch-size / ranks.
  const int W = dist::world_size();
  if (cfg.batch_auto)
    t.find_batch(
        [&](int64_t b) {
          data::DataLoader first(d.train, {.batch_size = b, .transform = transform});
          const data::Batch batch = *first.begin();
          return std::make_pair(batch.input, batch.target);
        },
        d.train->size() / (W * cfg.accum));
  KILN_CHECK(cfg.batch_size % W == 0, "kiln train: --batch-size ", cfg.batch_size, " (the global batch) must be a "
             "multiple of the ", W, " ranks");
  std::shared_ptr<dist::DistributedSampler> sampler;
  if (W > 1) sampler = std::make_shared<dist::DistributedSampler>(dist::DistributedSamplerOptions{.seed = cfg.seed, .drop_last = true});
  data::DataLoader loader(d.train, {.batch_size = cfg.batch_size / W,
                                    .shuffle = W == 1,
                                    .sampler = sampler,
                                    .seed = cfg.seed,
                                    .drop_last = true,
                                    .workers = cfg.workers,
                                    .pin_memory = t.device.is_cuda(),
                                    .transform = transform});
  const int64_t micro_per_epoch = loader.size(), steps_per_epoch = micro_per_epoch / cfg.accum;
  KILN_CHECK(steps_per_epoch >= 1, "kiln train: ", micro_per_epoch, " batches of ", cfg.batch_size,
             " per epoch are fewer than --accum ", cfg.accum);
  t.make_optimizer(steps_per_epoch * cfg.epochs);  // a resumed run restores its planned schedule
  t.metadata = {{"kiln.normalize_mean", json_array(d.mean).dump()},
                {"kiln.normalize_std", json_array(d.std).dump()},
                {"kiln.image_size", std::to_string(d.size)},
                {"kiln.channels", std::to_string(d.channels)}};
  Tally tally;
  if (resumed) {
    tally = t.restore(*resumed);
    KILN_CHECK(tally.micro == 0 || !cfg.given.count("batch-size"), "--resume ", resumed->path(),
               ": it was saved in the middle of an epoch, so --batch-size cannot change (resume from a checkpoint "
               "saved at the end of an epoch)");
    KILN_CHECK(tally.micro == 0 || tally.world == W, "--resume ", resumed->path(), ": it was saved in the middle of "
               "an epoch by ", tally.world, " rank(s); resume it on as many (or from a checkpoint saved at the end of "
               "an epoch, which any number of ranks can continue)");
    KILN_CHECK(tally.done <= steps_per_epoch && tally.micro <= micro_per_epoch, "--resume ", resumed->path(),
               ": its data position (", tally.micro, " batches into epoch ", t.epoch + 1, ") is past this run's ",
               micro_per_epoch, " batches per epoch");
    note_schedule(t);
  }
  spdlog::info("model: {} ({} parameters) on {}, {} epochs of {} steps, batch {} x {} accumulated, lr {:g} ({}, "
               "now {:g}), amp {}",
               cfg.model, t.model.module->num_parameters(), t.device.str(), cfg.epochs, steps_per_epoch,
               cfg.batch_size, cfg.accum, cfg.lr, cfg.schedule, t.opt->lr(), cfg.amp);

  const std::string csv = cfg.metrics.empty() ? default_metrics_path(cfg) : cfg.metrics;
  MetricsLog metrics(dist::rank() == 0 ? csv : "", resumed.has_value(), t.step);
  TrainResult result;
  result.first_step = t.step;
  double accuracy = -1;
  bool stopped = false;  // by --stop-at
  for (; t.epoch < cfg.epochs; ) {
    loader.set_epoch(t.epoch);
    loader.set_start_batch(tally.micro);  // 0, or where a checkpoint saved mid-epoch stopped
    ProgressBar bar("epoch " + std::to_string(t.epoch + 1) + "/" + std::to_string(cfg.epochs), steps_per_epoch);
    StepMeter meter(cfg.batch_size * cfg.accum, tally.done);
    // per optimizer step, once the host has read it (every --log-every steps on a GPU)
    auto on_step = [&](const StepLog& s) {
      result.losses.push_back(s.loss);
      tally.add(s.loss, s.took);
      if (cfg.progress) bar.update(tally.done, s.loss, meter.rate(tally.done));
      if (tally.window_n == 50 && tally.done < steps_per_epoch) {  // a row per 50 steps; the epoch's last below
        metrics.append(tally.take_window(s.step, t.epoch + 1, s.lr, meter.window_rate(tally.window_n)));
        meter.new_window();
      }
    };
    Tensor group_loss;  // float64 on the device, summed over the accumulation group
    for (auto& batch : loader) {
      const int64_t queued = tally.done + int64_t(t.pending.size());
      if (queued == steps_per_epoch) break;  // a partial accumulation group at the end is dropped
      const Tensor loss = t.micro_step(batch.input.to(t.device), batch.target.to(t.device),
                                       (tally.micro + 1) % cfg.accum == 0);
      group_loss = group_loss.defined() ? group_loss + loss : loss;
      if (++tally.micro % cfg.accum) continue;
      t.optimizer_step(group_loss / double(cfg.accum), t.opt->lr());
      group_loss = Tensor();
      const bool last = queued + 1 == steps_per_epoch;
      if (t.read_due(last)) t.read_steps(on_step);
      if (!last && t.pending.empty() && (result.signal = t.checkpoint_point(tally))) break;
    }
    t.read_steps(on_step);  // the loader ran out before the last read
    if (cfg.progress) bar.finish();
    if (result.signal) break;
    const double secs = meter.elapsed();
    const double window_rate = meter.window_rate(tally.window_n);
    accuracy = evaluate_accuracy(t, d);
    ++t.epoch;
    spdlog::info("epoch {}/{}  train loss {:.4f}  test accuracy {:.2f}%  {:.0f} samples/s  {:.1f} s{}", t.epoch,
                 cfg.epochs, tally.mean_loss(), 100 * accuracy,
                 meter.rate(tally.done, secs), secs,
                 tally.skipped ? "  (" + std::to_string(tally.skipped) + " steps skipped: non-finite loss or gradients)"
                               : std::string());
    // The epoch's last row: the loss of its last window of steps, and the test accuracy.
    MetricsRow row = tally.take_window(t.step, t.epoch, t.opt->lr(), window_rate);
    row.accuracy = accuracy;
    metrics.append(row);
    t.write_plot(metrics, cfg.task + " " + cfg.model);
    tally = Tally{};
    t.save(tally);
    if ((result.signal = t.checkpoint_point(tally))) break;
    if ((stopped = cfg.stop_at > 0 && t.epoch >= cfg.stop_at && t.epoch < cfg.epochs)) break;  // --stop-at
  }
  result.skipped = t.guard->skipped();
  if (stopped) t.stop_at_reached(tally, "epoch " + std::to_string(t.epoch));
  if (result.signal || stopped) return result;  // unfinished: no final accuracy
  if (accuracy < 0) accuracy = evaluate_accuracy(t, d);  // resumed a finished run
  result.accuracy = accuracy;
  spdlog::info("final test accuracy: {:.2f}%  (metrics: {}{})", 100 * accuracy, csv,
               result.skipped ? ", " + std::to_string(result.skipped) + " steps skipped" : std::string());
  if (!cfg.save.empty()) spdlog::info("saved {}", cfg.save);
  return result;
}

}  // namespace kiln::cli
