// The training jobs behind `kiln train`: image classification (mnist, cifar10) and the
// character-level GPT, with one-file checkpoints (weights, optimizer, scheduler, GradScaler,
// RNG, step and data position: optim/run_checkpoint.h) that a later run resumes exactly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <memory>
#include <set>
#include "kiln/core/device.h"
#include "kiln/data/dataset.h"
#include "kiln/data/vision.h"
#include "kiln/models/gpt.h"
#include "kiln/nn/module.h"

namespace kiln::cli {

/// Everything a training run depends on. Filled from the command line by
/// parse_train_config(); saved in the checkpoint's side file so --resume continues it.
struct TrainConfig {
  std::string task;            ///< mnist | cifar10 | gpt
  std::string model;           ///< convnet | lenet | mlp | resnet20 | gpt
  std::string data;            ///< image folder (mnist, cifar10) or UTF-8 text file (gpt)
  std::string device = "auto"; ///< cpu | cuda | cuda:N | auto (a GPU when there is one)
  int64_t epochs = 3;          ///< vision: passes over the training set
  int64_t batch_size = 64;
  double lr = 0.01;
  double momentum = 0.9;       ///< SGD (vision)
  double weight_decay = 0.0;   ///< SGD L2 (vision) / AdamW decoupled (gpt)
  std::string schedule = "constant";  ///< constant | cosine (with 5% warm-up); gpt default cosine
  int threads = 0;             ///< CPU threads (0: OpenMP's default)
  int workers = 1;             ///< DataLoader background threads (vision)
  std::string amp = "off";     ///< off | bf16 | fp16 (fp16 adds dynamic loss scaling)
  int64_t accum = 1;           ///< micro-batches per optimizer step
  bool checkpoint_activations = false;
  uint64_t seed = 0;
  int64_t limit = 0;           ///< use only the first N train/test examples (0: all)
  // gpt
  int64_t steps = 3800;        ///< optimizer steps (gpt)
  double max_minutes = 0;      ///< stop at the first evaluation after this wall time (0: none)
  int64_t eval_every = 200;    ///< steps between validation-loss estimates (gpt)
  int64_t eval_batches = 20;   ///< validation batches per estimate (gpt)
  int64_t context = 128, layers = 4, heads = 4, width = 128;
  double dropout = 0.0;
  std::string tokenizer = "char";  ///< gpt: char | bpe (byte-level BPE trained on the training text)
  int64_t vocab_size = 512;    ///< gpt --tokenizer bpe: tokens of the BPE vocabulary (256 bytes + merges)
  std::string prompt = "\n";   ///< sample printed at the end of a gpt run
  int64_t sample_tokens = 300;
  // files
  int64_t stop_at = 0;         ///< end this run after epoch / step N, as if interrupted (0: no)
  std::string save;            ///< checkpoint path (.safetensors), written every epoch / eval
  std::string resume;          ///< checkpoint to continue from
  std::string metrics;         ///< CSV path (PNG beside it); default runs/<task>-<model>.csv
  bool progress = true;        ///< live progress bar / plain progress lines
  int64_t keep = 2;            ///< checkpoints kept: --save's file and keep - 1 older ones
  int64_t save_every_steps = 0;    ///< also save every N optimizer steps (0: no)
  double save_every_minutes = 0;   ///< also save when this much time passed since the last save (0: no)
  int64_t max_skips = 25;      ///< consecutive skipped (non-finite) steps that stop the run
  // not saved: this command line's alone
  bool zero = false;           ///< under mpirun: ZeRO-1 (optimizer state sharded over the ranks)
  bool batch_auto = false;     ///< --batch-size auto: find the largest batch that fits (batch_size is then 0 until found)
  int64_t memory_limit = 0;    ///< --memory-limit in bytes for --batch-size auto (0: 90% of the GPU's memory)
  int64_t log_every = 0;       ///< optimizer steps between host reads of the loss (0: 1 on the CPU, 10 on a GPU)
  // not saved: how this command line relates to a resumed run
  std::set<std::string> given; ///< flags given on the command line (e.g. "lr")
  bool override_saved = false; ///< --override: given flags may change a resumed run's configuration
  std::set<std::string> changed; ///< flags whose values --override changed on resume
};

/// What a run produced (used by tests and by the command's exit status).
struct TrainResult {
  std::vector<double> losses;      ///< training loss of every optimizer step of this run
  int64_t first_step = 0;          ///< global step number of losses[0] (after a resume: > 0)
  double accuracy = -1;            ///< final test accuracy in [0, 1] (vision), else -1
  double val_loss = -1;            ///< final validation loss (gpt), else -1
  std::string sample;              ///< generated text (gpt)
  int64_t skipped = 0;             ///< steps skipped for a non-finite loss or gradients
  int signal = 0;                  ///< SIGTERM/SIGINT that ended the run early (after saving), else 0
};

/// A network built from a TrainConfig (cfg.model), as a Module handle; `gpt` is set too
/// for the GPT (for generate()).
struct Model {
  std::shared_ptr<nn::Module> module;
  std::shared_ptr<models::GPT> gpt;
};
/// Builds cfg.model for images of in_channels x image_size x image_size, or the GPT for a
/// vocabulary of `vocab` characters (cfg.context/layers/heads/width/dropout).
Model make_model(const TrainConfig& cfg, int64_t in_channels, int64_t image_size, int64_t vocab);

/// Parses `kiln train TASK [flags]` (argv[first] is TASK). Throws kiln::Error on a bad
/// task, flag or value.
TrainConfig parse_train_config(int argc, char** argv, int first);
/// Runs (or, with cfg.resume, continues) a training job.
TrainResult run_training(TrainConfig cfg);
/// The images of an image task: CIFAR-10 for cifar10; for mnist, Fashion-MNIST when the
/// folder's path says "fashion" (the class names differ), else MNIST.
data::TensorDataset open_images(const std::string& task, const std::string& dir, data::Split split);
/// Fraction of `test` that `model` (switched to eval mode) classifies correctly, its
/// images normalised per channel with mean / std, run on `device` in batches of 500.
double test_accuracy(nn::Module& model, const std::shared_ptr<const data::Dataset>& test, Device device,
                     const std::vector<double>& mean, const std::vector<double>& std);
/// "cpu", "cuda", "cuda:1" or "auto" -> a Device; cuda without a usable GPU is an error.
Device pick_device(const std::string& name);
/// Sends spdlog's output to the terminal and, when `log_file` is not empty, to that file.
void setup_logging(const std::string& log_file);

}  // namespace kiln::cli
