// Regression tests of issue #13's reproductions for `kiln train`: honest resume (saved
// data, configuration and save path; contradicting flags; --override), a run resumed from
// a checkpoint saved mid-epoch is bitwise equal, values read back are validated, the
// divergence guard stops a run and keeps the last good checkpoint, and bad flags.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include "kiln/monitor/metrics.h"
#include "cli/train_test_util.h"
#include "kiln/optim/run_checkpoint.h"

namespace {

struct TinyMnist {
  TempDir tmp;
  TinyMnist() {
    write_tiny_mnist(tmp.path.string(), "train", 320, 1);
    write_tiny_mnist(tmp.path.string(), "t10k", 64, 2);
  }
  // lenet, 10 steps of batch 32 per epoch
  std::vector<std::string> args(std::vector<std::string> extra) const {
    std::vector<std::string> v = {"mnist", "--model", "lenet", "--data", tmp.path.string(), "--batch-size", "32",
                                  "--threads", "2", "--no-progress", "--workers", "0", "--lr", "0.05"};
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  }
};

// The checkpoint's state with one value of its run configuration replaced, written as a
// new checkpoint (valid checksums) at `out`.
void rewrite_config(const std::string& in, const std::string& out, const std::string& key, json::Value v) {
  auto meta = kiln::load_metadata(in);
  json::Value s = json::parse(meta.at("kiln.state"), "test");
  s["extra"]["config"][key] = std::move(v);
  meta["kiln.state"] = s.dump();
  meta.erase(kChecksumKey);
  kiln::save(kiln::load(in), out, meta);
}

}  // namespace

TEST_CASE("resume restores the saved run: its data, its configuration, and it saves where it was resumed from") {
  TinyMnist d;
  const std::string ck = d.tmp / "run.safetensors";
  const TrainResult stopped = train(d.args({"--epochs", "2", "--stop-at", "1", "--save", ck, "--metrics", d.tmp / "run.csv"}));
  CHECK(stopped.losses.size() == 10);
  CHECK(stopped.accuracy < 0);  // unfinished: no final accuracy
  CHECK(Checkpoint::open(ck).state().step == 10);
  // No --data (the default folder does not exist here), no --lr, no --save: all from the checkpoint.
  TrainResult r = train({"mnist", "--resume", ck, "--no-progress", "--metrics", d.tmp / "run.csv"});
  CHECK(r.first_step == 10);
  CHECK(r.losses.size() == 10);
  CHECK(Checkpoint::open(ck).state().step == 20);  // saved to the --resume file
  // A flag that contradicts the saved run is an error naming it ...
  const std::string e = error_of([&] { train({"mnist", "--resume", ck, "--lr", "0.5", "--epochs", "3"}); });
  CHECK(e.find("--lr 0.5 contradicts the checkpoint's 0.05") != std::string::npos);
  CHECK(e.find("--override") != std::string::npos);
  // ... the model's shape never changes ...
  CHECK(error_of([&] { train({"mnist", "--resume", ck, "--model", "mlp", "--override"}); }).find("cannot change") !=
        std::string::npos);
  // ... and --override applies it: the optimizer steps with the new lr.
  TrainResult o = train({"mnist", "--resume", ck, "--lr", "0.02", "--override", "--epochs", "3", "--no-progress",
                         "--metrics", d.tmp / "run.csv"});
  CHECK(o.losses.size() == 10);
  const auto rows = read_metrics_csv(d.tmp / "run.csv");
  CHECK(rows.back().lr == doctest::Approx(0.02));
  CHECK(config_from_json(Checkpoint::open(ck).state().extra.at("config"), "t").lr == 0.02);
  CHECK(error_of([&] { train(d.args({"--override"})); }).find("--override is for --resume") != std::string::npos);
}

TEST_CASE("a checkpoint saved mid-epoch (--save-every) resumes bitwise equal") {
  TinyMnist d;
  const auto common = d.args({"--epochs", "2", "--accum", "2", "--schedule", "cosine"});
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = common;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  // 5 steps per epoch; saves at steps 2, 4, 5 (epoch end), 6, 8, 10: all kept
  TrainResult full = train(with({"--save", d.tmp / "f.safetensors", "--save-every", "2", "--keep", "10", "--metrics",
                                 d.tmp / "f.csv"}));
  REQUIRE(full.losses.size() == 10);
  std::string mid;
  for (int k = 1; k <= 9; ++k) {
    const std::string p = kept_file_path(d.tmp / "f.safetensors", k);
    if (std::filesystem::exists(p) && Checkpoint::open(p).state().step == 4) mid = p;
  }
  REQUIRE(!mid.empty());
  CHECK(Checkpoint::open(mid).state().epoch == 0);
  std::filesystem::copy_file(mid, d.tmp / "mid.safetensors");
  // the data position counts batches: their size cannot change mid-epoch
  CHECK(error_of([&] { train({"mnist", "--resume", d.tmp / "mid.safetensors", "--batch-size", "16", "--override"}); })
            .find("middle of an epoch") != std::string::npos);
  TrainResult rest = train({"mnist", "--resume", d.tmp / "mid.safetensors", "--no-progress", "--metrics", d.tmp / "m.csv"});
  REQUIRE(rest.first_step == 4);
  std::vector<double> tail(full.losses.begin() + 4, full.losses.end());
  check_bitwise_equal(tail, rest.losses);
  CHECK(rest.accuracy == full.accuracy);
  CHECK(Checkpoint::open(d.tmp / "mid.safetensors").state().step == 10);  // saved back where it was resumed from
}

TEST_CASE("values read back from a checkpoint are validated; errors name the file and the key") {
  TinyMnist d;
  const std::string ck = d.tmp / "run.safetensors";
  train(d.args({"--epochs", "1", "--save", ck, "--metrics", d.tmp / "run.csv"}));
  auto resume_error = [&](const std::string& key, json::Value v) {
    rewrite_config(ck, d.tmp / "bad.safetensors", key, std::move(v));
    return error_of([&] { train({"mnist", "--resume", d.tmp / "bad.safetensors", "--epochs", "2"}); });
  };
  for (const auto& kv : std::vector<std::pair<std::string, json::Value>>{
           {"accum", json::Value(0)}, {"eval_every", json::Value(0)}, {"eval_batches", json::Value(-1)},
           {"lr", json::Value("fast")}, {"threads", json::Value(int64_t(4294967297))}, {"seed", json::Value("-1")},
           {"batch_size", json::Value(1.5)}}) {
    const std::string key = kv.first;  // plain names: clang 14 cannot capture bindings in INFO
    const std::string e = resume_error(key, kv.second);
    INFO(key << ": " << e);
    CHECK(e.find("bad.safetensors") != std::string::npos);
    CHECK(e.find(key == "batch_size" ? "batch" : key.substr(0, 4)) != std::string::npos);
  }
  const std::string missing = [&] {
    auto meta = kiln::load_metadata(ck);
    json::Value s = json::parse(meta.at("kiln.state"), "test");
    json::Value cfg = json::Value::object();
    for (const auto& [k, v] : s.at("extra").at("config").items())
      if (k != "momentum") cfg[k] = v;
    s["extra"]["config"] = cfg;
    meta["kiln.state"] = s.dump();
    meta.erase(kChecksumKey);
    kiln::save(kiln::load(ck), d.tmp / "bad.safetensors", meta);
    return error_of([&] { train({"mnist", "--resume", d.tmp / "bad.safetensors"}); });
  }();
  CHECK(missing.find("\"momentum\": missing") != std::string::npos);
  // eval and generate read the same checks
  rewrite_config(ck, d.tmp / "bad.safetensors", "model", json::Value("vgg"));
  CHECK(error_of([&] { command(cmd_eval, {"--checkpoint", d.tmp / "bad.safetensors"}); }).find("model") !=
        std::string::npos);
}

namespace {
// A tiny GPT run on a text file in `dir` named `name`.
std::vector<std::string> gpt_args(const TempDir& dir, const std::string& name, std::vector<std::string> extra) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog. " + std::to_string(i % 7) + "\n";
  if (!std::filesystem::exists(dir / name)) kiln_test::write_text(dir / name, text);
  std::vector<std::string> v = {"gpt", "--text", dir / name, "--layers", "1", "--width", "16", "--heads", "2",
                                "--context", "16", "--batch-size", "4", "--dropout", "0.1", "--eval-every", "5",
                                "--eval-batches", "2", "--threads", "2", "--no-progress", "--sample-tokens", "8"};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}
}  // namespace

TEST_CASE("--stop-at N ends a gpt run right after step N, saved there, and the resumed run is bitwise equal") {
  TempDir tmp;
  const TrainResult full = train(gpt_args(tmp, "t.txt", {"--steps", "10", "--metrics", tmp / "f.csv"}));
  // step 7 is inside the second evaluation interval (steps 6 to 10)
  const TrainResult p1 = train(gpt_args(tmp, "t.txt", {"--steps", "10", "--stop-at", "7", "--save", tmp / "p.safetensors",
                                                       "--metrics", tmp / "p.csv"}));
  CHECK(p1.losses.size() == 7);
  CHECK(p1.val_loss < 0);  // unfinished: no final validation loss, no sample
  CHECK(p1.sample.empty());
  CHECK(Checkpoint::open(tmp / "p.safetensors").state().step == 7);
  const TrainResult p2 = train({"gpt", "--resume", tmp / "p.safetensors", "--no-progress", "--metrics", tmp / "p.csv"});
  CHECK(p2.first_step == 7);
  std::vector<double> joined = p1.losses;
  joined.insert(joined.end(), p2.losses.begin(), p2.losses.end());
  check_bitwise_equal(full.losses, joined);
  CHECK(full.val_loss == p2.val_loss);
  const auto f = read_metrics_csv(tmp / "f.csv"), p = read_metrics_csv(tmp / "p.csv");
  REQUIRE(f.size() == p.size());
  CHECK(f.back().loss == p.back().loss);
}

TEST_CASE("run paths that are not UTF-8 are saved as hex: Python can open the checkpoint, and it resumes") {
  TempDir tmp;
  const std::string latin1 = "caf\xE9.txt";  // a Latin-1 file name
  const std::string ck = tmp / "run.safetensors", csv = tmp / "m\xE9trics.csv";
  train(gpt_args(tmp, latin1, {"--steps", "5", "--save", ck, "--metrics", csv}));
  // the whole header is UTF-8, which Python's reader requires
  std::ifstream in(ck, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | uint8_t(bytes[size_t(k)]);
  CHECK(json::invalid_utf8_at(bytes.substr(8, n)) == std::string::npos);
  const json::Value saved = json::parse(kiln::load_metadata(ck).at("kiln.state"), "t").at("extra").at("config");
  std::string hex;  // the path's bytes, two hex digits each
  for (char c : tmp / latin1) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", unsigned(uint8_t(c)));
    hex += b;
  }
  CHECK(saved.at("data").at("hex").as_string() == hex);
  // read back byte for byte: the resumed run opens its text again and writes the same CSV
  CHECK(config_from_json(saved, "t").data == tmp / latin1);
  CHECK(config_from_json(saved, "t").metrics == csv);
  const TrainResult r = train({"gpt", "--resume", ck, "--steps", "10", "--no-progress"});
  CHECK(r.first_step == 5);
  CHECK(read_metrics_csv(csv).back().step == 10);
  CHECK(error_of([&] {
          json::Value bad = saved;
          bad["data"] = json::Value::object();
          bad["data"]["hex"] = "e";
          config_from_json(bad, "'x'");
        }).find("key \"data\": expected a string or {\"hex\"") != std::string::npos);
}

TEST_CASE("a plot that cannot be written is a warning: training goes on, the CSV and the checkpoint are written") {
  TinyMnist d;
  std::filesystem::create_directories(d.tmp / "m.png/inner");  // rename() cannot replace a non-empty folder
  const TrainResult r = train(d.args({"--epochs", "2", "--save", d.tmp / "run.safetensors", "--metrics", d.tmp / "m.csv"}));
  CHECK(r.losses.size() == 20);
  CHECK(r.accuracy >= 0);
  CHECK(read_metrics_csv(d.tmp / "m.csv").back().step == 20);
  CHECK(Checkpoint::open(d.tmp / "run.safetensors").state().step == 20);
  for (const auto& e : std::filesystem::directory_iterator(d.tmp.path))
    CHECK_MESSAGE(e.path().string().find(".tmp.") == std::string::npos, e.path().string());
}

TEST_CASE("divergence guard: a diverging run stops by itself, reports skipped steps and keeps the last good checkpoint") {
  TinyMnist d;
  const std::string ck = d.tmp / "run.safetensors";
  train(d.args({"--epochs", "1", "--save", ck, "--metrics", d.tmp / "run.csv"}));
  const int64_t good_step = Checkpoint::open(ck).state().step;
  const std::string e = error_of([&] {
    train({"mnist", "--resume", ck, "--lr", "1e4", "--override", "--epochs", "30", "--max-skips", "5", "--no-progress",
           "--metrics", d.tmp / "run.csv"});
  });
  CHECK(e.find("training diverged") != std::string::npos);
  CHECK(e.find("was kept") != std::string::npos);
  const Checkpoint after = Checkpoint::open(ck, {.fallback = 0});  // finite weights, never NaN ones
  CHECK(after.state().step >= good_step);
  for (const auto& entry : after.model_state()) {
    const double total = sum(entry.second).item();
    CHECK(std::isfinite(total));
  }
  // fp16 loss scaling that skips every step is counted and stops the run too
  const std::string e16 = error_of([&] {
    train(d.args({"--model", "mlp", "--amp", "fp16", "--lr", "1e4", "--epochs", "30", "--max-skips", "30",
                  "--metrics", d.tmp / "fp16.csv"}));
  });
  CHECK(e16.find("training diverged") != std::string::npos);
  // skipped steps reach the CSV, with NaN written as nan
  bool any_skipped = false;
  for (const auto& r : read_metrics_csv(d.tmp / "fp16.csv")) any_skipped = any_skipped || r.skipped > 0;
  CHECK(any_skipped);
}

TEST_CASE("--log-every N: the loop reads the loss every N steps and trains, logs and saves exactly as with 1") {
  TinyMnist d;
  // 10 steps of 2 micro-batches per epoch, checkpoints every 3 steps (a read comes first)
  auto run = [&](const std::string& every, const std::string& name) {
    return train(d.args({"--epochs", "2", "--accum", "2", "--log-every", every, "--save", d.tmp / (name + ".safetensors"),
                         "--save-every", "3", "--metrics", d.tmp / (name + ".csv")}));
  };
  const TrainResult a = run("1", "a"), b = run("4", "b");
  check_bitwise_equal(a.losses, b.losses);
  CHECK(a.accuracy == b.accuracy);
  const auto ra = read_metrics_csv(d.tmp / "a.csv"), rb = read_metrics_csv(d.tmp / "b.csv");
  REQUIRE(ra.size() == rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    INFO("row " << i);
    CHECK(ra[i].step == rb[i].step);
    CHECK(ra[i].loss == rb[i].loss);
    CHECK(ra[i].lr == rb[i].lr);
    CHECK(ra[i].skipped == rb[i].skipped);
  }
  const TrainingState sa = Checkpoint::open(d.tmp / "a.safetensors").state();
  const TrainingState sb = Checkpoint::open(d.tmp / "b.safetensors").state();
  CHECK(sa.step == sb.step);
  CHECK(sa.data.dump() == sb.data.dump());  // the same tallies and data position
  // a mid-epoch checkpoint of the N = 4 run (step 3) resumes to the same losses
  std::string mid;
  for (int k = 0; k <= 2; ++k) {
    const std::string p = k ? kept_file_path(d.tmp / "b.safetensors", k) : std::string(d.tmp / "b.safetensors");
    if (std::filesystem::exists(p) && Checkpoint::open(p).state().step % 10 != 0) mid = p;
  }
  REQUIRE(!mid.empty());
  std::filesystem::copy_file(mid, d.tmp / "mid.safetensors");
  const TrainResult rest = train({"mnist", "--resume", d.tmp / "mid.safetensors", "--log-every", "4", "--no-progress",
                                  "--metrics", d.tmp / "m.csv"});
  const std::vector<double> tail(a.losses.begin() + rest.first_step, a.losses.end());
  check_bitwise_equal(tail, rest.losses);
  // the divergence guard still stops a run, counting skips when it reads them
  CHECK(error_of([&] {
          train(d.args({"--lr", "1e4", "--epochs", "30", "--max-skips", "5", "--log-every", "7", "--metrics",
                        d.tmp / "div.csv"}));
        }).find("training diverged") != std::string::npos);
  CHECK(error_of([&] { train(d.args({"--log-every", "-1"})); }).find("log-every") != std::string::npos);
}

TEST_CASE("bad flags of train and generate are errors, found before any training") {
  TinyMnist d;
  CHECK(error_of([&] { train(d.args({"--lr", "inf"})); }).find("lr") != std::string::npos);
  CHECK(error_of([&] { train(d.args({"--lr", "nan"})); }).find("lr") != std::string::npos);
  const std::string threads = error_of([&] { train(d.args({"--threads", "4294967297"})); });
  CHECK(threads.find("--threads") != std::string::npos);
  CHECK(threads.find("4294967297") != std::string::npos);
  CHECK(error_of([&] { train(d.args({"--max-minutes", "nan"})); }).find("max-minutes") != std::string::npos);
  CHECK(error_of([&] { train(d.args({"--save-every", "5x"})); }).find("--save-every") != std::string::npos);
  CHECK(error_of([&] { train(d.args({"--keep", "0"})); }).find("keep") != std::string::npos);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog\n";
  kiln_test::write_text(d.tmp / "t.txt", text);
  const std::vector<std::string> gpt = {"gpt", "--text", d.tmp / "t.txt", "--layers", "1", "--width", "16", "--heads",
                                        "2", "--context", "16", "--batch-size", "2", "--steps", "4", "--eval-every",
                                        "2", "--eval-batches", "1", "--no-progress", "--sample-tokens", "5",
                                        "--metrics", d.tmp / "g.csv"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> v = gpt;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };
  const std::string p = error_of([&] { train(with({"--prompt", "Z"})); });
  CHECK(p.find("--prompt") != std::string::npos);
  train(with({"--save", d.tmp / "g.safetensors"}));
  for (const char* t : {"-1", "nan", "inf"})
    CHECK(error_of([&] {
            command(cmd_generate, {"--checkpoint", d.tmp / "g.safetensors", "--temperature", t, "--tokens", "3"});
          }).find("--temperature") != std::string::npos);
  CHECK(error_of([&] { command(cmd_generate, {"--checkpoint", d.tmp / "g.safetensors", "--threads", "4294967297"}); })
            .find("--threads") != std::string::npos);
  CHECK(command(cmd_generate, {"--checkpoint", d.tmp / "g.safetensors", "--temperature", "0", "--tokens", "3"}) == 0);
}
