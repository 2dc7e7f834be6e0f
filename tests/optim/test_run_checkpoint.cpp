// Tests of the one-file training checkpoint (optim/run_checkpoint.h), its file layer
// (checksums, kept copies, stale temp files: nn/serialize, core/file_io) and the
// DivergenceGuard: round trips are exact in any order of construction, damage is found
// and an older copy used, non-finite weights are neither written nor read.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <csignal>
#include <ctime>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include "kiln/core/file_io.h"
#include "data/data_test_util.h"
#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/serialize.h"
#include "kiln/optim/divergence_guard.h"
#include "kiln/optim/run_checkpoint.h"

using namespace kiln;
using kiln::test::error_of;
using kiln_test::TempDir;

namespace {

// A model, AdamW with a warm-up cosine schedule and a GradScaler, trained a few steps.
struct Run {
  nn::Linear model{4, 3};
  optim::AdamW opt{model.parameters(), {.lr = 0.1, .weight_decay = 0.01}};
  optim::WarmupCosineLR sched{opt, {.warmup_steps = 3, .total_steps = 20, .min_lr = 0.01}};
  amp::GradScaler scaler{{.init_scale = 1024}};

  void steps(int n) {
    for (int i = 0; i < n; ++i) {
      Tensor loss = mean(mul(model(randn({5, 4})), model(randn({5, 4}))));
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      opt.zero_grad();
      sched.step();
    }
  }
  CheckpointParts parts() { return {.model = &model, .optimizer = &opt, .scheduler = &sched, .scaler = &scaler}; }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * x.element_size()) == 0;
}

template <class Dict>
void check_same(const Dict& a, const Dict& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& entry : a) {
    const std::string& k = entry.first;  // plain names: clang 14 cannot capture bindings in INFO
    INFO(k);
    const Tensor* w = nullptr;
    for (const auto& [k2, v2] : b)
      if (k2 == k) w = &v2;
    REQUIRE(w != nullptr);
    CHECK(same_bits(entry.second, *w));
  }
}

void flip_last_byte(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c;
  f.read(&c, 1);
  c = char(c ^ 0x10);
  f.seekp(-1, std::ios::end);
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("save_checkpoint / load_checkpoint: model, optimizer, scheduler, scaler, RNG and state round-trip exactly") {
  TempDir tmp;
  manual_seed(3);
  Run a;
  a.steps(5);
  TrainingState st{.step = 5, .epoch = 1};
  st.data["batch"] = 17;
  st.extra["note"] = "hello";
  save_checkpoint(tmp / "run.safetensors", a.parts(), st);
  const RngState rng_saved = get_rng_state();
  randn({100});  // moves the generator on

  manual_seed(99);
  Run b;  // different initial weights
  const TrainingState got = load_checkpoint(tmp / "run.safetensors", b.parts());
  CHECK(got.step == 5);
  CHECK(got.epoch == 1);
  CHECK(got.data.at("batch").as_int() == 17);
  CHECK(got.extra.at("note").as_string() == "hello");
  check_same(a.model.state_dict(), b.model.state_dict());
  check_same(a.opt.state_dict(), b.opt.state_dict());
  check_same(a.sched.state_dict(), b.sched.state_dict());
  check_same(a.scaler.state_dict(), b.scaler.state_dict());
  CHECK(get_rng_state().seed == rng_saved.seed);
  CHECK(get_rng_state().offset == rng_saved.offset);
  CHECK(b.opt.lr() == a.opt.lr());
  // The model's tensors keep their names (Python's safetensors and kiln::load see them).
  const auto all = kiln::load(tmp / "run.safetensors");
  CHECK(all.find("weight") != nullptr);
  CHECK(all.find("optimizer/step_count") != nullptr);
  CHECK(kiln::load_metadata(tmp / "run.safetensors").count(kChecksumKey) == 1);
}

TEST_CASE("restoring the optimizer before building the scheduler keeps the saved learning rate") {
  TempDir tmp;
  manual_seed(1);
  Run a;
  a.steps(6);  // past the warm-up: lr well above 0
  save_checkpoint(tmp / "r.safetensors", a.parts(), {.step = 6});
  const Checkpoint ck = Checkpoint::open(tmp / "r.safetensors");
  nn::Linear model(4, 3);
  optim::AdamW opt(model.parameters(), {.lr = 0.1});
  ck.restore({.model = &model, .optimizer = &opt, .rng = false});          // the optimizer first ...
  optim::WarmupCosineLR sched(opt, {.warmup_steps = 3, .total_steps = 20, .min_lr = 0.01});  // lr 0 at epoch 0
  ck.restore({.scheduler = &sched, .rng = false});                            // ... the scheduler later
  CHECK(opt.lr() == a.opt.lr());
  CHECK(opt.lr() > 0.05);
  sched.step();
  a.sched.step();
  CHECK(opt.lr() == a.opt.lr());
}

TEST_CASE("checkpoint files: kept copies, checksums, fallback to an older copy, stale temp files") {
  TempDir tmp;
  const std::string path = tmp / "run.safetensors";
  manual_seed(2);
  Run a;
  for (int s = 1; s <= 4; ++s) {
    a.steps(1);
    save_checkpoint(path, a.parts(), {.step = s}, {.keep = 3});
  }
  CHECK(kept_file_path(path, 1) == tmp / "run.1.safetensors");
  CHECK(kept_file_path(tmp / "noext", 2) == tmp / "noext.2");
  CHECK(Checkpoint::open(path).state().step == 4);
  CHECK(Checkpoint::open(kept_file_path(path, 1)).state().step == 3);
  CHECK(Checkpoint::open(kept_file_path(path, 2)).state().step == 2);
  CHECK(!std::filesystem::exists(kept_file_path(path, 3)));

  // A flipped bit in a tensor is found by its checksum, naming the file and the tensor ...
  flip_last_byte(path);
  const std::string e = error_of([&] { kiln::load(path); });
  CHECK(e.find("checksum") != std::string::npos);
  CHECK(e.find("run.safetensors") != std::string::npos);
  // ... and opening the checkpoint falls back to the newest intact copy, saying why.
  const Checkpoint ck = Checkpoint::open(path);
  CHECK(ck.path() == kept_file_path(path, 1));
  CHECK(ck.state().step == 3);
  REQUIRE(ck.passed_over().size() == 1);
  CHECK(ck.passed_over()[0].find("checksum") != std::string::npos);
  CHECK(error_of([&] { Checkpoint::open(path, {.fallback = 0}); }).find("checksum") != std::string::npos);
  flip_last_byte(kept_file_path(path, 1));
  flip_last_byte(kept_file_path(path, 2));
  const std::string all_bad = error_of([&] { Checkpoint::open(path); });
  CHECK(all_bad.find("or any older copy") != std::string::npos);
  CHECK(all_bad.find("run.2.safetensors") != std::string::npos);

  // Temp files of a save killed mid-write (their process is gone) are removed by the next save.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  const std::string stale = path + ".tmp." + std::to_string(child) + ".0123456789abcdef.0";
  kiln_test::write_text(stale, "partial");
  const std::string mine = temp_file_prefix(path) + "77";  // our own write in progress: kept
  kiln_test::write_text(mine, "in progress");
  const std::string other = path + ".tmp." + std::to_string(getppid()) + ".0123456789abcdef.3";  // a live process's
  kiln_test::write_text(other, "in progress");
  save_checkpoint(path, a.parts(), {.step = 5});
  CHECK(!std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(mine));
  CHECK(std::filesystem::exists(other));
}

TEST_CASE("stale temp files: an earlier process with our pid (a container's PID 1 after a restart) is told apart") {
  TempDir tmp;
  const std::string path = tmp / "run.safetensors";
  const std::string pid = std::to_string(getpid());
  CHECK(temp_file_prefix(path).rfind(path + ".tmp." + pid + ".", 0) == 0);
  const std::string mine = temp_file_prefix(path) + "4";
  // the same pid with another nonce, and the format without a nonce: an earlier process's
  const std::string earlier[] = {path + ".tmp." + pid + ".00000000deadbeef.7", path + ".tmp." + pid + ".3.keep",
                                 path + ".tmp." + pid + ".7"};
  for (const std::string& f : earlier) kiln_test::write_text(f, "partial");
  kiln_test::write_text(mine, "in progress");
  CHECK(remove_stale_temp_files(path) == 3);
  for (const std::string& f : earlier) CHECK_MESSAGE(!std::filesystem::exists(f), f);
  CHECK(std::filesystem::exists(mine));
}

TEST_CASE("stale temp files: a killed writer not yet reaped (a zombie) and a reused pid do not keep a file") {
  TempDir tmp;
  const std::string path = tmp / "run.safetensors";
  // a zombie: the child has exited, nobody has waited for it yet (kill(pid, 0) still succeeds)
  const pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  // a live process that started after the file was written: the pid is not the writer's
  const pid_t later = fork();
  if (later == 0) {
    ::pause();
    _exit(0);
  }
  const std::string of_zombie = path + ".tmp." + std::to_string(zombie) + ".0123456789abcdef.0";
  const std::string of_reused = path + ".tmp." + std::to_string(later) + ".0123456789abcdef.1";
  const std::string of_parent = path + ".tmp." + std::to_string(getppid()) + ".0123456789abcdef.2";  // alive, older
  for (const auto* f : {&of_zombie, &of_reused, &of_parent}) kiln_test::write_text(*f, "partial");
  const struct timespec an_hour_ago[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  REQUIRE(::utimensat(AT_FDCWD, of_reused.c_str(), an_hour_ago, 0) == 0);
  for (int tries = 0; tries < 100; ++tries) {  // until the child has exited (state Z)
    std::ifstream st("/proc/" + std::to_string(zombie) + "/stat");
    std::string s((std::istreambuf_iterator<char>(st)), std::istreambuf_iterator<char>());
    if (s.find(") Z ") != std::string::npos) break;
    ::usleep(10000);
  }
  REQUIRE(::kill(zombie, 0) == 0);
  const int removed = remove_stale_temp_files(path);
  ::kill(later, SIGKILL);
  waitpid(zombie, nullptr, 0);
  waitpid(later, nullptr, 0);
  CHECK(removed == 2);
  CHECK(!std::filesystem::exists(of_zombie));
  CHECK(!std::filesystem::exists(of_reused));
  CHECK(std::filesystem::exists(of_parent));
}

TEST_CASE("kept copies: a save over a copy 1 that is a link to the file itself leaves no temp file") {
  // A kill between linking the file as copy 1 and renaming the new file over it leaves two
  // links to one file; rename() between them does nothing, and the ".keep" link stayed.
  TempDir tmp;
  const std::string path = tmp / "run.safetensors", kept = kept_file_path(path, 1);
  save({{"w", full({2}, 1.0)}}, path);
  REQUIRE(::link(path.c_str(), kept.c_str()) == 0);
  save({{"w", full({2}, 2.0)}}, path, {}, 2);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(tmp.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"run.1.safetensors", "run.safetensors"});
  CHECK(load(path).at("w").to_vector<double>() == std::vector<double>{2, 2});
  CHECK(load(kept).at("w").to_vector<double>() == std::vector<double>{1, 1});
}

TEST_CASE("non-finite weights are neither saved over a checkpoint nor loaded, unless asked for") {
  TempDir tmp;
  const std::string path = tmp / "run.safetensors";
  manual_seed(4);
  Run a;
  a.steps(1);
  save_checkpoint(path, a.parts(), {.step = 1});
  {
    NoGradGuard ng;
    a.model.parameters()[0].fill_(NAN);
  }
  const std::string e = error_of([&] { save_checkpoint(path, a.parts(), {.step = 2}); });
  CHECK(e.find("NaN or infinite") != std::string::npos);
  CHECK(e.find("weight") != std::string::npos);
  CHECK(Checkpoint::open(path).state().step == 1);  // the good one is untouched
  save_checkpoint(tmp / "nan.safetensors", a.parts(), {.step = 2}, {.keep = 1, .allow_nonfinite = true});
  CHECK(error_of([&] { Checkpoint::open(tmp / "nan.safetensors"); }).find("NaN or infinite") != std::string::npos);
  CHECK(Checkpoint::open(tmp / "nan.safetensors", {.allow_nonfinite = true}).state().step == 2);
}

TEST_CASE("Checkpoint: malformed state and missing parts are errors naming the file and the key") {
  TempDir tmp;
  const std::string path = tmp / "run.safetensors";
  manual_seed(5);
  nn::Linear model(2, 2);
  save_checkpoint(path, {.model = &model}, {.step = 3});
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  const std::string e = error_of([&] { load_checkpoint(path, {.model = &model, .optimizer = &opt}); });
  CHECK(e.find("run.safetensors") != std::string::npos);
  CHECK(e.find("no optimizer state") != std::string::npos);

  // Rewrite the state with a bad value (the checksums stay valid: only the metadata changes).
  auto rewrite = [&](const std::string& key, json::Value v) {
    auto meta = kiln::load_metadata(path);
    json::Value s = json::parse(meta.at("kiln.state"), "test");
    s[key] = std::move(v);
    meta["kiln.state"] = s.dump();
    meta.erase(kChecksumKey);
    kiln::save(kiln::load(path), tmp / "bad.safetensors", meta);
    return error_of([&] { Checkpoint::open(tmp / "bad.safetensors", {.fallback = 0}); });
  };
  CHECK(rewrite("step", json::Value(-1)).find("\"step\"") != std::string::npos);
  CHECK(rewrite("epoch", json::Value("x")).find("\"epoch\"") != std::string::npos);
  CHECK(rewrite("parts", json::Value("model")).find("\"parts\"") != std::string::npos);
  const std::string rng = rewrite("rng", json::parse("{\"seed\": \"99999999999999999999999\", \"offset\": \"0\"}", "t"));
  CHECK(rng.find("seed") != std::string::npos);
  CHECK(rng.find("bad.safetensors") != std::string::npos);
  // a plain weights file is not a checkpoint
  kiln::save(model.state_dict(), tmp / "w.safetensors");
  CHECK(error_of([&] { Checkpoint::open(tmp / "w.safetensors"); }).find("not a kiln training checkpoint") !=
        std::string::npos);
}

TEST_CASE("DivergenceGuard: skips non-finite steps, counts them, stops after too many in a row") {
  nn::Linear model(2, 1);
  optim::DivergenceGuard guard({.max_consecutive_skips = 3});
  sum(model(ones({1, 2}))).backward();
  CHECK(guard.check(0.5, model.parameters()));
  CHECK_FALSE(guard.check(NAN, model.parameters()));
  CHECK(guard.last_reason().find("nan") != std::string::npos);
  {
    NoGradGuard ng;
    model.parameters()[0].grad().fill_(INFINITY);
  }
  CHECK_FALSE(guard.check(0.5, model.parameters()));
  CHECK(guard.last_reason().find("gradient") != std::string::npos);
  CHECK(guard.consecutive() == 2);
  CHECK(guard.skipped() == 2);
  const std::string e = error_of([&] { guard.record(true, "inf/NaN gradients (GradScaler)"); });
  CHECK(e.find("diverged") != std::string::npos);
  CHECK(e.find("3 steps in a row") != std::string::npos);
  guard.record(false);
  CHECK(guard.consecutive() == 0);
  CHECK(guard.skipped() == 3);
}
