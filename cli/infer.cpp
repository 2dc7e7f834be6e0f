// `kiln generate` (sample text from a GPT checkpoint) and `kiln eval` (test accuracy of an
// image classifier, or validation loss of a GPT, from a checkpoint). A checkpoint's
// safetensors metadata holds the run's configuration (and the GPT's vocabulary), so the
// weights file alone rebuilds the model.
#include <cmath>
#include <cstdio>
#include <spdlog/spdlog.h>
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/run_state.h"
#include "kiln/core/autograd.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/data/dataloader.h"
#include "kiln/data/transforms.h"
#include "kiln/data/vision.h"
#include "kiln/dist/dist.h"
#include "kiln/optim/run_checkpoint.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/reduce.h"

namespace kiln::cli {
namespace {

struct Loaded {
  TrainConfig cfg;
  Model model;
  std::map<std::string, std::string> meta;
};

std::vector<double> numbers_of(const std::map<std::string, std::string>& meta, const std::string& key,
                               const std::string& file) {
  auto it = meta.find(key);
  KILN_CHECK(it != meta.end(), file, ": metadata has no '", key, "' (not written by kiln train?)");
  std::vector<double> out;
  const json::Value values = json::parse(it->second, file + " metadata " + key);
  KILN_CHECK(values.is_array(), file, ": metadata '", key, "' must be an array of numbers");
  for (const auto& v : values.as_array()) {
    KILN_CHECK(v.is_number(), file, ": metadata '", key, "' must be an array of numbers");
    out.push_back(v.as_number());
  }
  return out;
}

/// Rebuilds the model a checkpoint was trained as, with its weights, on `device`.
Loaded load_trained(const std::string& path, Device device) {
  Loaded l;
  const Checkpoint ck = Checkpoint::open(path);
  for (const std::string& why : ck.passed_over()) spdlog::warn("warning: passed over a damaged checkpoint: {}", why);
  l.meta = ck.metadata();
  const TrainingState& s = ck.state();
  KILN_CHECK(s.extra.contains("config"), path, ": no run configuration: not a checkpoint written by kiln train");
  l.cfg = config_from_json(s.extra.at("config"), "'" + ck.path() + "': config");
  l.cfg.checkpoint_activations = false;
  if (l.cfg.task == "gpt") {
    l.model = make_model(l.cfg, 0, 0, tokenizer_from_metadata(l.meta, path).size());
  } else {
    const int64_t channels = int64_t(numbers_of(l.meta, "kiln.normalize_mean", path).size());
    auto it = l.meta.find("kiln.image_size");
    KILN_CHECK(it != l.meta.end() && !it->second.empty() && it->second.size() < 6 &&
                   it->second.find_first_not_of("0123456789") == std::string::npos,
               path, ": metadata 'kiln.image_size' must be a positive integer");
    l.model = make_model(l.cfg, channels, std::stoll(it->second), 0);
  }
  ck.restore({.model = l.model.module.get(), .rng = false});
  l.model.module->to(device);
  l.model.module->eval();
  return l;
}

data::Tokenizer tokenizer_of(const Loaded& l, const std::string& path) { return tokenizer_from_metadata(l.meta, path); }

}  // namespace

int cmd_generate(int argc, char** argv, int first) {
  std::string path, prompt = "\n", device = "auto";
  int64_t tokens = 500, top_k = 20, seed = 0;
  int threads = 0;
  double temperature = 0.8, top_p = 1;
  CLI::App app{"Sample text from a GPT checkpoint.", "kiln generate"};
  setup_app(app);
  app.add_option("--checkpoint", path, "a GPT checkpoint written by kiln train gpt --save")->required();
  app.add_option("--prompt", prompt, "text to continue")->default_str("a newline");
  app.add_option("--tokens", tokens, "tokens to generate (characters, or BPE tokens for --tokenizer bpe models)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", temperature, "softmax temperature (0: greedy)");
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", top_p, "then among the most likely tokens whose probabilities sum to p (nucleus; 1: all)");
  app.add_option("--seed", seed, "sampling seed")->check(CLI::NonNegativeNumber);
  app.add_option("--device", device, "cpu, cuda, cuda:N or auto");
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
  parse(app, argc, argv, first);
  if (threads > 0) set_num_threads(threads);
  Loaded l = load_trained(path, pick_device(device));
  KILN_CHECK(l.model.gpt != nullptr, "kiln generate: ", path, " holds a '", l.cfg.model,
             "' model; generate needs a GPT checkpoint (kiln train gpt --save F)");
  const data::Tokenizer vocab = tokenizer_of(l, path);
  KILN_CHECK(!prompt.empty(), "kiln generate: --prompt must not be empty");
  std::vector<int64_t> ids;
  try {
    ids = vocab.encode(prompt);
  } catch (const Error& e) {
    KILN_CHECK(false, "kiln generate: the prompt has a character the model never saw: ", e.what());
  }
  KILN_CHECK(std::isfinite(temperature) && temperature >= 0, "kiln generate: --temperature must be a finite number "
             ">= 0 (0: greedy), got ", temperature);
  KILN_CHECK(top_p > 0 && top_p <= 1, "kiln generate: --top-p must be in (0, 1], got ", top_p);
  manual_seed(uint64_t(seed));
  Tensor idx = from_vector(ids, {1, int64_t(ids.size())}).to(l.model.module->parameters()[0].device());
  Tensor out = l.model.gpt->generate(idx, tokens, temperature,
                                     top_k > 0 ? std::optional<int64_t>(top_k) : std::nullopt,
                                     top_p < 1 ? std::optional<double>(top_p) : std::nullopt);
  std::printf("%s\n", data::utf8_replace_invalid(vocab.decode(out.select(0, 0).to(Device::cpu()))).c_str());
  return 0;
}

int cmd_eval(int argc, char** argv, int first) {
  std::string path, data, text, device_name = "auto";
  int64_t batch_size = 16;
  int threads = 0;
  CLI::App app{"Test accuracy of an image classifier, or validation loss of a GPT, from a checkpoint.", "kiln eval"};
  setup_app(app);
  app.add_option("--checkpoint", path, "a checkpoint written by kiln train --save")->required();
  app.add_option("--data", data, "image dataset folder (default: the one it was trained on)");
  app.add_option("--text", text, "gpt: text file (default: the one it was trained on)");
  app.add_option("--batch-size", batch_size, "gpt: sequences per batch")->check(CLI::PositiveNumber);
  app.add_option("--device", device_name, "cpu, cuda, cuda:N or auto");
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
  parse(app, argc, argv, first);
  if (threads > 0) set_num_threads(threads);
  const Device device = pick_device(device_name);
  Loaded l = load_trained(path, device);
  NoGradGuard no_grad;
  if (l.cfg.task == "gpt") {
    const std::string text_path = text.empty() ? l.cfg.data : text;
    data::CharText text(text_path, {.context = l.cfg.context, .val_fraction = 0.1, .tokenizer = tokenizer_of(l, path)});
    data::DataLoader loader(text.val(), {.batch_size = batch_size});
    double total = 0;
    int64_t n = 0;
    for (auto& b : loader) {
      Tensor logits = (*l.model.module)(b.input.to(device));
      const int64_t count = b.target.numel();
      total += cross_entropy(logits.reshape({-1, logits.size(-1)}), b.target.to(device).reshape({-1})).item() *
               double(count);
      n += count;
    }
    const char* unit = l.cfg.tokenizer == "bpe" ? "token" : "char";
    KILN_CHECK(n > 0, "kiln eval: ", text_path, " has no validation window of ", l.cfg.context, " tokens");
    std::printf("validation loss of %s on %s: %.4f nats/%s over %lld %ss\n", path.c_str(), text_path.c_str(),
                total / double(n), unit, static_cast<long long>(n), unit);
    return 0;
  }
  const std::string dir = data.empty() ? l.cfg.data : data;
  auto test = std::make_shared<data::TensorDataset>(open_images(l.cfg.task, dir, data::Split::Test));
  const double acc = test_accuracy(*l.model.module, test, device, numbers_of(l.meta, "kiln.normalize_mean", path),
                                   numbers_of(l.meta, "kiln.normalize_std", path));
  std::printf("test accuracy of %s (%s) on %s: %.2f%% of %lld images\n", path.c_str(), l.cfg.model.c_str(),
              dir.c_str(), 100.0 * acc, static_cast<long long>(test->size()));
  return 0;
}

int cmd_train(int argc, char** argv, int first) {
  TrainResult r = run_training(parse_train_config(argc, argv, first));
  if (r.signal) return 128 + r.signal;  // as if the signal had ended it, after the checkpoint
  // nothing trained and nothing evaluated is a failure; ranks other than 0 never evaluate
  return dist::rank() == 0 && r.losses.empty() && r.accuracy < 0 && r.val_loss < 0 ? 1 : 0;
}

}  // namespace kiln::cli
