// `kiln train gpt`: the character-level GPT loop (batches drawn from the text by a seeded
// generator, so resuming needs no data state), with an evaluation of the validation loss
// every --eval-every steps, progress, metrics CSV + plot, checkpoints and a sample at the end.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <spdlog/spdlog.h>
#include "kiln/monitor/progress.h"
#include "cli/run_state.h"
#include "cli/train_internal.h"
#include "kiln/data/text.h"
#include "kiln/ops/loss.h"

namespace kiln::cli {

namespace {

/// Mean cross-entropy over cfg.eval_batches fixed windows of `split`.
double estimate_loss(Trainer& t, const data::TokenDataset& split) {
  if (dist::rank() != 0) return -1;  // rank 0 of a data-parallel job evaluates
  NoGradGuard no_grad;
  t.model.module->eval();
  data::Rng rng(t.cfg.seed ^ 0x5eed, 1);  // the same windows at every estimate
  double total = 0;
  for (int64_t i = 0; i < t.cfg.eval_batches; ++i) {
    data::Batch b = split.get_batch(t.cfg.batch_size, t.cfg.context, rng);
    Tensor logits = (*t.model.module)(b.input.to(t.device));
    total += cross_entropy(logits.reshape({-1, logits.size(-1)}), b.target.to(t.device).reshape({-1})).item();
  }
  t.model.module->train();
  return total / double(std::max<int64_t>(t.cfg.eval_batches, 1));
}

}  // namespace

TrainResult run_gpt(Trainer& t, const std::optional<Checkpoint>& resumed) {
  TrainConfig& cfg = t.cfg;
  KILN_CHECK(!cfg.data.empty(), "kiln train gpt: --text FILE is required (for example a file of "
             "/usr/share/games/fortunes, or scripts/fortunes_corpus.sh's output)");
  data::CharTextOptions topt{.context = cfg.context, .val_fraction = 0.1};
  if (resumed) topt.tokenizer = tokenizer_from_metadata(resumed->metadata(), "'" + resumed->path() + "'");
  else if (cfg.tokenizer == "bpe") topt.bpe_vocab = cfg.vocab_size;  // trained on the training split
  data::CharText text(cfg.data, topt);
  const data::Tokenizer& tok = text.tokenizer();
  const char* unit = tok.is_bpe() ? "tokens" : "characters";
  KILN_CHECK(text.val().num_tokens() > cfg.context + 1, "kiln train gpt: ", cfg.data, " is too short for context ",
             cfg.context, " (", text.val().num_tokens(), " validation ", unit, ")");
  // The sample's prompt is checked now, not after hours of training.
  std::vector<int64_t> prompt_ids;
  try {
    prompt_ids = tok.encode(cfg.prompt);
  } catch (const Error& e) {
    KILN_FAIL("kiln train gpt: --prompt has a character that is not in the text's vocabulary: ", e.what());
  }
  spdlog::info("data: {} {} ({} train / {} validation), {} vocabulary of {} from {}", text.tokens().numel(), unit,
               text.train().num_tokens(), text.val().num_tokens(), tok.kind(), tok.size(), cfg.data);
  t.model = make_model(cfg, 0, 0, tok.size());
  t.model.module->to(t.device);
  t.wrap_model();
  const int W = dist::world_size();
  if (cfg.batch_auto)
    t.find_batch(
        [&](int64_t b) {
          data::Rng trial(cfg.seed, 7);
          const data::Batch batch = text.train().get_batch(b, cfg.context, trial);
          return std::make_pair(batch.input, batch.target);
        },
        int64_t(1) << 16);
  KILN_CHECK(cfg.batch_size % W == 0, "kiln train gpt: --batch-size ", cfg.batch_size, " (the global batch) must be a "
             "multiple of the ", W, " ranks");
  const int64_t rows = cfg.batch_size / W;
  t.make_optimizer(cfg.steps);  // a resumed run restores its planned schedule
  t.metadata = tokenizer_metadata(tok);
  Tally tally;
  if (resumed) {
    tally = t.restore(*resumed);
    note_schedule(t);
  }
  spdlog::info("model: gpt {} layers x {} wide, {} heads, context {} ({} parameters) on {}, {} steps of batch {} x {} "
               "accumulated, AdamW lr {:g} ({}, now {:g}), amp {}",
               cfg.layers, cfg.width, cfg.heads, cfg.context, t.model.module->num_parameters(), t.device.str(),
               cfg.steps, cfg.batch_size, cfg.accum, cfg.lr, cfg.schedule, t.opt->lr(), cfg.amp);

  const std::string csv = cfg.metrics.empty() ? default_metrics_path(cfg) : cfg.metrics;
  MetricsLog metrics(dist::rank() == 0 ? csv : "", resumed.has_value(), t.step);
  TrainResult result;
  result.first_step = t.step;
  const auto run_start = Clock::now();
  const int64_t tokens_per_step = cfg.batch_size * cfg.context * cfg.accum;
  const int64_t n_evals = (cfg.steps + cfg.eval_every - 1) / cfg.eval_every;
  double val = -1;
  bool stopped = false;  // by --stop-at
  while (t.step < cfg.steps) {
    // evaluations at multiples of --eval-every (a run resumed mid-interval finishes it)
    const int64_t end = std::min(cfg.steps, (t.step / cfg.eval_every + 1) * cfg.eval_every), first = t.step;
    ProgressBar bar("train " + std::to_string(t.epoch + 1) + "/" + std::to_string(n_evals), end - first);
    StepMeter meter(tokens_per_step, first);
    // per optimizer step, once the host has read it (every --log-every steps on a GPU)
    auto on_step = [&](const StepLog& s) {
      result.losses.push_back(s.loss);
      tally.add(s.loss, s.took);
      const double rate = meter.rate(s.step);
      if (cfg.progress) bar.update(s.step - first, s.loss, rate, "tokens/s");
      if (tally.window_n == 50 && s.step != end)  // a row per 50 steps, loss averaged over them
        metrics.append(tally.take_window(s.step, t.epoch + 1, s.lr, rate));
    };
    while (t.step < end) {
      const double lr = t.opt->lr();
      Tensor loss;  // float64 on the device, summed over the accumulation group
      for (int64_t m = 0; m < cfg.accum; ++m) {
        // The batch of (step, micro-batch) is a pure function of the seed: resuming needs no
        // data state. Under mpirun each rank takes its rows of the global batch.
        data::Rng rng(cfg.seed, uint64_t(t.step * cfg.accum + m));
        data::Batch b = text.train().get_batch(cfg.batch_size, cfg.context, rng);
        if (W > 1) b.input = b.input.narrow(0, dist::rank() * rows, rows), b.target = b.target.narrow(0, dist::rank() * rows, rows);
        const Tensor l = t.micro_step(b.input.to(t.device), b.target.to(t.device), m + 1 == cfg.accum);
        loss = loss.defined() ? loss + l : l;
      }
      t.optimizer_step(loss / double(cfg.accum), lr);
      stopped = cfg.stop_at > 0 && t.step >= cfg.stop_at && t.step < cfg.steps;  // --stop-at
      if (t.read_due(t.step == end || stopped)) t.read_steps(on_step);
      if (t.step != end && t.pending.empty() && (result.signal = t.checkpoint_point(tally))) break;
      if (stopped) break;
    }
    if (cfg.progress) bar.finish();
    if (result.signal) break;
    if (stopped && t.step != end) break;  // in the middle of an interval: no evaluation
    const double secs = meter.elapsed();
    val = estimate_loss(t, text.val());
    ++t.epoch;
    const double minutes = seconds_since(run_start) / 60.0;
    spdlog::info("step {}/{}  train loss {:.4f}  val loss {:.4f}  {:.0f} tokens/s  {:.1f} min{}", t.step, cfg.steps,
                 tally.mean_loss(), val, meter.rate(end, secs), minutes,
                 tally.skipped ? "  (" + std::to_string(tally.skipped) + " steps skipped: non-finite loss or gradients)"
                               : std::string());
    // The interval's last row: the loss of its last window of steps, and the validation loss.
    MetricsRow row = tally.take_window(t.step, t.epoch, t.opt->lr(), meter.rate(end, secs));
    row.val_loss = val;
    metrics.append(row);
    t.write_plot(metrics, "gpt on " + std::filesystem::path(cfg.data).filename().string());
    tally = Tally{};
    t.save(tally);
    if ((result.signal = t.checkpoint_point(tally)) || stopped) break;
    if (cfg.max_minutes > 0 && minutes >= cfg.max_minutes) {
      spdlog::info("stopping: --max-minutes {} reached", cfg.max_minutes);
      break;
    }
  }
  result.skipped = t.guard->skipped();
  if (stopped && !result.signal) t.stop_at_reached(tally, "step " + std::to_string(t.step));
  if (result.signal || stopped) return result;  // unfinished: no final loss, no sample
  if (val < 0) val = estimate_loss(t, text.val());
  result.val_loss = val;
  if (dist::rank() != 0) return result;
  // A sample, so the student sees what the numbers mean.
  t.model.module->eval();
  Tensor idx = from_vector(prompt_ids, {1, int64_t(prompt_ids.size())}).to(t.device);
  Tensor out = t.model.gpt->generate(idx, cfg.sample_tokens, 0.8, 20);
  result.sample = data::utf8_replace_invalid(tok.decode(out.select(0, 0).to(Device::cpu())));
  spdlog::info("final validation loss: {:.4f} nats/{} (metrics: {}{})", val, tok.is_bpe() ? "token" : "char", csv,
               result.skipped ? ", " + std::to_string(result.skipped) + " steps skipped" : std::string());
  std::printf("---- sample (temperature 0.8, top-k 20) ----\n%s\n--------------------------------------------\n",
              result.sample.c_str());
  std::fflush(stdout);
  return result;
}

}  // namespace kiln::cli
