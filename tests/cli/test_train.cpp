// Tests of `kiln train` / `generate` / `eval` on tiny generated data: a resumed run's
// losses are bitwise equal to an uninterrupted run's (vision with SGD momentum and a
// cosine schedule; GPT with AdamW and dropout), checkpoints reload, and bad input errors.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include "cli/train_test_util.h"

TEST_CASE("kiln train mnist: resume is bitwise equal to an uninterrupted run; eval reloads the model") {
  TempDir tmp;
  write_tiny_mnist(tmp.path.string(), "train", 320, 1);
  write_tiny_mnist(tmp.path.string(), "t10k", 100, 2);
  const std::vector<std::string> common = {"mnist", "--model", "lenet", "--data", tmp.path.string(), "--batch-size",
                                           "32", "--threads", "2", "--schedule", "cosine", "--no-progress",
                                           "--workers", "1", "--accum", "2", "--lr", "0.05"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = common;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  TrainResult full = train(with({"--epochs", "3", "--save", tmp / "full.safetensors", "--metrics", tmp / "full.csv"}));
  REQUIRE(full.losses.size() == 15);  // 10 micro-batches of 32 per epoch, 2 per step, 3 epochs
  CHECK(full.losses.back() < full.losses.front());
  CHECK(full.accuracy > 0.3);  // far above chance (0.1) on this easy pattern

  TrainResult part1 = train(with({"--epochs", "3", "--stop-at", "1", "--save", tmp / "part.safetensors", "--metrics", tmp / "part.csv"}));
  TrainResult part2 = train(with({"--epochs", "3", "--resume", tmp / "part.safetensors", "--save",
                                  tmp / "part.safetensors", "--metrics", tmp / "part.csv"}));
  CHECK(part2.first_step == 5);
  std::vector<double> joined = part1.losses;
  joined.insert(joined.end(), part2.losses.begin(), part2.losses.end());
  check_bitwise_equal(full.losses, joined);
  CHECK(full.accuracy == part2.accuracy);
  CHECK(std::filesystem::exists(tmp / "full.png"));
  CHECK(!std::filesystem::exists(tmp / "full.state.json"));  // one file holds the whole checkpoint
  CHECK(std::filesystem::exists(tmp / "full.1.safetensors"));  // --keep 2: the previous one is kept

  // The weights file alone rebuilds the model: metadata carries the configuration.
  auto meta = kiln::load_metadata(tmp / "full.safetensors");
  CHECK(meta.at("kiln.model") == "lenet");
  CHECK(meta.at("kiln.step") == "15");
  CHECK(command(cmd_eval, {"--checkpoint", tmp / "full.safetensors", "--device", "cpu"}) == 0);
  CHECK_THROWS_AS(command(cmd_generate, {"--checkpoint", tmp / "full.safetensors"}), kiln::Error);
}

TEST_CASE("kiln train gpt: resume with dropout and AdamW is bitwise equal; generate samples from the checkpoint") {
  TempDir tmp;
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog. " + std::to_string(i % 7) + "\n";
  kiln_test::write_text(tmp / "text.txt", text);
  const std::vector<std::string> common = {"gpt", "--text", tmp / "text.txt", "--layers", "1", "--width", "16",
                                           "--heads", "2", "--context", "16", "--batch-size", "4", "--dropout",
                                           "0.1", "--eval-every", "5", "--eval-batches", "2", "--threads", "2",
                                           "--no-progress", "--sample-tokens", "20", "--seed", "7"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = common;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  TrainResult full = train(with({"--steps", "15", "--save", tmp / "full.safetensors", "--metrics", tmp / "m.csv"}));
  REQUIRE(full.losses.size() == 15);
  CHECK(full.val_loss > 0);
  CHECK(!full.sample.empty());
  TrainResult p1 = train(with({"--steps", "15", "--stop-at", "5", "--save", tmp / "p.safetensors", "--metrics", tmp / "p.csv"}));
  TrainResult p2 = train(with({"--steps", "15", "--resume", tmp / "p.safetensors", "--metrics", tmp / "p.csv"}));
  std::vector<double> joined = p1.losses;
  joined.insert(joined.end(), p2.losses.begin(), p2.losses.end());
  check_bitwise_equal(full.losses, joined);
  CHECK(full.val_loss == p2.val_loss);

  CHECK(command(cmd_generate, {"--checkpoint", tmp / "full.safetensors", "--prompt", "the ", "--tokens", "10"}) == 0);
  CHECK(command(cmd_eval, {"--checkpoint", tmp / "full.safetensors"}) == 0);
  CHECK_THROWS_WITH_AS(command(cmd_generate, {"--checkpoint", tmp / "full.safetensors", "--prompt", "Z"}),
                       doctest::Contains("prompt"), kiln::Error);
}

TEST_CASE("kiln train gpt --tokenizer bpe: subword tokens, saved with the checkpoint, resumed bitwise") {
  TempDir tmp;
  std::string text;
  for (int i = 0; i < 80; ++i) text += "the quick brown fox jumps over the lazy dog. " + std::to_string(i % 9) + "\n";
  kiln_test::write_text(tmp / "text.txt", text);
  const std::vector<std::string> common = {"gpt", "--text", tmp / "text.txt", "--tokenizer", "bpe", "--vocab-size",
                                           "300", "--layers", "1", "--width", "16", "--heads", "2", "--context", "8",
                                           "--batch-size", "4", "--eval-every", "4", "--eval-batches", "2",
                                           "--threads", "2", "--no-progress", "--sample-tokens", "10", "--seed", "3"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = common;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  TrainResult full = train(with({"--steps", "8", "--save", tmp / "full.safetensors", "--metrics", tmp / "m.csv"}));
  REQUIRE(full.losses.size() == 8);
  CHECK(std::isfinite(full.val_loss));
  const auto meta = kiln::load_metadata(tmp / "full.safetensors");
  CHECK(meta.at("kiln.tokenizer") == "bpe");
  const data::BpeTokenizer bpe = data::BpeTokenizer::from_json(json::parse(meta.at("kiln.bpe"), "t"), "t");
  CHECK(bpe.size() <= 300);
  CHECK(bpe.size() > 256);
  // the model's embedding has one row per BPE token
  CHECK(kiln::load(tmp / "full.safetensors").at("wte.weight").size(0) == bpe.size());
  TrainResult p1 = train(with({"--steps", "8", "--stop-at", "4", "--save", tmp / "p.safetensors", "--metrics", tmp / "p.csv"}));
  TrainResult p2 = train({"gpt", "--resume", tmp / "p.safetensors", "--steps", "8", "--no-progress", "--metrics",
                          tmp / "p.csv"});
  std::vector<double> joined = p1.losses;
  joined.insert(joined.end(), p2.losses.begin(), p2.losses.end());
  check_bitwise_equal(full.losses, joined);
  CHECK(command(cmd_generate, {"--checkpoint", tmp / "full.safetensors", "--prompt", "the ", "--tokens", "5"}) == 0);
  CHECK(command(cmd_eval, {"--checkpoint", tmp / "full.safetensors"}) == 0);
  // the tokenizer shapes the model: it cannot change on resume
  CHECK(error_of([&] {
          train({"gpt", "--resume", tmp / "p.safetensors", "--tokenizer", "char", "--override", "--no-progress"});
        }).find("--tokenizer") != std::string::npos);
  CHECK(error_of([&] { train({"gpt", "--text", tmp / "text.txt", "--vocab-size", "300"}); })
            .find("--vocab-size is for --tokenizer bpe") != std::string::npos);
  CHECK(error_of([&] { train({"gpt", "--text", tmp / "text.txt", "--tokenizer", "words"}); }).find("char or bpe") !=
        std::string::npos);
}

TEST_CASE("kiln train: bad input is a clear kiln::Error") {
  TempDir tmp;
  CHECK(error_of([&] { train({"imagenet"}); }).find("unknown task") != std::string::npos);
  CHECK(error_of([&] { train({"mnist", "--bogus", "1"}); }).find("--bogus") != std::string::npos);
  CHECK(error_of([&] { train({"mnist", "--epochs"}); }).find("--epochs: 1 required INT missing") != std::string::npos);
  CHECK(error_of([&] { train({"mnist", "--epochs", "x"}); }).find("--epochs") != std::string::npos);
  CHECK(error_of([&] { train({"mnist", "--model", "vgg"}); }).find("vgg") != std::string::npos);
  CHECK(error_of([&] { train({"mnist", "--amp", "fp8"}); }).find("--amp") != std::string::npos);
  CHECK(error_of([&] { train({"gpt"}); }).find("--text") != std::string::npos);
  CHECK(error_of([&] { train({"mnist", "--data", tmp / "nothing", "--no-progress"}); }).find("nothing") !=
        std::string::npos);
  CHECK(error_of([&] { train({"mnist", "--device", "cuda:3"}); }).find("cuda") != std::string::npos);
  write_tiny_mnist(tmp.path.string(), "train", 64, 1);
  write_tiny_mnist(tmp.path.string(), "t10k", 16, 2);
  TrainResult fp16 = train({"mnist", "--model", "mlp", "--data", tmp.path.string(), "--epochs", "1", "--batch-size",
                            "16", "--amp", "fp16", "--no-progress", "--save", tmp / "m.safetensors", "--metrics",
                            tmp / "m.csv", "--log", tmp / "m.log"});
  CHECK(fp16.losses.size() == 4);
  std::ifstream log_file(tmp / "m.log");
  const std::string log_text((std::istreambuf_iterator<char>(log_file)), std::istreambuf_iterator<char>());
  CHECK(log_text.find("final test accuracy") != std::string::npos);  // --log gets the log lines (flushed on info)
  kiln::cli::setup_logging("");
  for (double l : fp16.losses) CHECK(std::isfinite(l));
  CHECK(error_of([&] { train({"gpt", "--resume", tmp / "m.safetensors"}); }).find("'mnist' run") !=
        std::string::npos);
  // a plain weights file is not a training checkpoint: the error says so and names the file
  kiln::save(kiln::load(tmp / "m.safetensors"), tmp / "w.safetensors");
  const std::string e = error_of([&] { train({"mnist", "--resume", tmp / "w.safetensors"}); });
  CHECK(e.find("w.safetensors") != std::string::npos);
  CHECK(e.find("not a kiln training checkpoint") != std::string::npos);
}

TEST_CASE("kiln train cifar10: ResNet20 with augmentation, bf16 autocast and checkpointing runs and saves") {
  TempDir tmp;
  // Tiny CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes (R, G, B planes).
  data::Rng rng(5);
  auto batch = [&](const std::string& name, int n) {
    std::vector<uint8_t> bytes;
    for (int i = 0; i < n; ++i) {
      const int c = int(rng.below(10));
      bytes.push_back(uint8_t(c));
      for (int p = 0; p < 3072; ++p) bytes.push_back(uint8_t((p / 1024 == c % 3 ? 150 : 0) + rng.below(100)));
    }
    kiln_test::write_bytes(tmp / name, bytes);
  };
  for (int i = 1; i <= 5; ++i) batch("data_batch_" + std::to_string(i) + ".bin", 8);
  batch("test_batch.bin", 16);
  TrainResult r = train({"cifar10", "--data", tmp.path.string(), "--epochs", "2", "--batch-size", "8", "--threads",
                         "2", "--amp", "bf16", "--checkpoint-activations", "--no-progress", "--save",
                         tmp / "r.safetensors", "--metrics", tmp / "r.csv"});
  CHECK(r.losses.size() == 10);
  for (double l : r.losses) CHECK(std::isfinite(l));
  CHECK(r.accuracy >= 0);
  CHECK(kiln::load_metadata(tmp / "r.safetensors").at("kiln.model") == "resnet20");
  CHECK(command(cmd_eval, {"--checkpoint", tmp / "r.safetensors", "--device", "cpu"}) == 0);
}

TEST_CASE("kiln train --batch-size auto: the largest batch within --memory-limit, saved as a number") {
  TempDir tmp;
  write_tiny_mnist(tmp.path.string(), "train", 300, 1);
  write_tiny_mnist(tmp.path.string(), "t10k", 50, 2);
  const std::vector<std::string> base = {"mnist", "--model", "lenet", "--data", tmp.path.string(), "--epochs", "1",
                                         "--threads", "1", "--no-progress", "--metrics", tmp / "a.csv"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = base;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  // a generous limit: the whole training set is one batch
  TrainResult all = train(with({"--batch-size", "auto", "--memory-limit", "1G", "--save", tmp / "a.safetensors"}));
  CHECK(all.losses.size() == 1);
  const TrainConfig saved = config_from_json(
      json::parse(kiln::load_metadata(tmp / "a.safetensors").at("kiln.state")).at("extra").at("config"), "test");
  CHECK(saved.batch_size == 300);
  // a tight one: smaller batches, more steps
  TrainResult tight = train(with({"--batch-size", "auto", "--memory-limit", "6M"}));
  CHECK(tight.losses.size() > 1);
  CHECK(tight.losses.size() < 300);
  CHECK(error_of([&] { train(with({"--batch-size", "auto", "--memory-limit", "1K"})); }).find("does not fit") !=
        std::string::npos);
  CHECK(error_of([&] { train(with({"--batch-size", "auto"})); }).find("needs --memory-limit") != std::string::npos);
  CHECK(error_of([&] { train(with({"--batch-size", "auto", "--memory-limit", "2X"})); }).find("--memory-limit") !=
        std::string::npos);
  CHECK(error_of([&] { train(with({"--memory-limit", "2G"})); }).find("--batch-size auto") != std::string::npos);
  CHECK(error_of([&] { train(with({"--batch-size", "auto", "--memory-limit", "1G", "--resume", tmp / "a.safetensors"})); })
            .find("--resume") != std::string::npos);
}
