// One-file training checkpoints (see run_checkpoint.h): the parts' tensors under prefixes
// in one safetensors file, the run's state as JSON in its metadata.
#include "kiln/optim/run_checkpoint.h"
#include <cmath>
#include <filesystem>
#include "kiln/core/error.h"
#include "kiln/core/file_io.h"
#include "kiln/core/rng.h"
#include "kiln/nn/serialize.h"

namespace kiln {

namespace {

constexpr const char* kStateKey = "kiln.state";
constexpr const char* kTensorParts[] = {"optimizer", "scheduler", "scaler"};  // "model" has no prefix

// The name of the first tensor holding a NaN or an infinity, or "" (floating-point ones only).
template <class Dict>
std::string first_nonfinite(const Dict& tensors, const std::string& prefix) {
  for (const auto& [name, t0] : tensors) {
    if (!t0.defined() || !t0.is_floating_point()) continue;
    const Tensor t = t0.detach().to(Device::cpu()).contiguous();
    bool finite = true;
    KILN_DISPATCH_ALL(t.dtype(), "checkpoint", [&]<class T>() {
      if constexpr (!std::is_integral_v<T>) {
        const T* p = static_cast<const T*>(t.raw_data());
        for (int64_t i = 0, n = t.numel(); i < n && finite; ++i) finite = std::isfinite(double(p[i]));
      }
    });
    if (!finite) return prefix + name;
  }
  return "";
}

int64_t get_count(const json::Value& j, const std::string& key, const std::string& where) {
  KILN_CHECK(j.contains(key) && j.at(key).is_int() && j.at(key).as_int() >= 0, where, ": \"", key,
             "\" must be a non-negative integer");
  return j.at(key).as_int();
}

uint64_t get_u64(const json::Value& j, const std::string& key, const std::string& where) {
  KILN_CHECK(j.contains(key) && j.at(key).is_string(), where, ": \"", key, "\" must be a decimal string");
  const std::string& s = j.at(key).as_string();
  KILN_CHECK(!s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos, where, ": \"",
             key, "\" = \"", s, "\" is not an unsigned 64-bit integer");
  uint64_t v = 0;
  for (char c : s) KILN_CHECK(!__builtin_mul_overflow(v, 10u, &v) && !__builtin_add_overflow(v, uint64_t(c - '0'), &v),
                              where, ": \"", key, "\" = \"", s, "\" does not fit 64 bits");
  return v;
}

}  // namespace

void save_checkpoint(const std::string& path, const CheckpointParts& parts, const TrainingState& state,
                     const CheckpointSaveOptions& options) {
  KILN_CHECK(state.step >= 0 && state.epoch >= 0, "save_checkpoint: '", path, "': step ", state.step, " and epoch ",
             state.epoch, " must be non-negative");
  nn::StateDict tensors;
  json::Value meta = json::Value::object(), part_names = json::Value::array();
  if (parts.model) {
    for (const auto& [name, t] : parts.model->state_dict()) {
      for (const char* p : kTensorParts)
        KILN_CHECK(name.rfind(std::string(p) + "/", 0) != 0, "save_checkpoint: '", path, "': model tensor '", name,
                   "' collides with the checkpoint's \"", p, "/\" names");
      tensors.insert(name, t);
    }
    part_names.push_back("model");
  }
  auto add = [&](const char* part, const optim::StateDict& sd) {
    for (const auto& [name, t] : sd) tensors.insert(std::string(part) + "/" + name, t);
    part_names.push_back(part);
  };
  if (parts.optimizer_state) add("optimizer", *parts.optimizer_state);
  else if (parts.optimizer) add("optimizer", parts.optimizer->state_dict());
  if (parts.scheduler) add("scheduler", parts.scheduler->state_dict());
  if (parts.scaler) add("scaler", parts.scaler->state_dict());
  if (!options.allow_nonfinite) {
    const std::string bad = first_nonfinite(tensors, "");
    KILN_CHECK(bad.empty(), "save_checkpoint: '", path, "': tensor '", bad, "' holds NaN or infinite values; not "
               "replacing the checkpoint (a diverged run keeps its last good one; allow_nonfinite saves anyway)");
  }
  json::Value s = json::Value::object();
  s["step"] = state.step;
  s["epoch"] = state.epoch;
  s["data"] = state.data;
  s["extra"] = state.extra;
  if (parts.rng) {
    const RngState r = get_rng_state();
    s["rng"]["seed"] = std::to_string(r.seed);
    s["rng"]["offset"] = std::to_string(r.offset);
    part_names.push_back("rng");
  }
  s["parts"] = part_names;
  std::map<std::string, std::string> metadata = options.metadata;
  KILN_CHECK(!metadata.count(kStateKey), "save_checkpoint: '", path, "': metadata key \"", kStateKey,
             "\" is kiln's own");
  metadata["format"] = "pt";  // what Python's safetensors.torch expects; the kiln.* keys are ours
  metadata[kStateKey] = s.dump();
  remove_stale_temp_files(path);
  save(tensors, path, metadata, options.keep);
}

namespace {

// Reads and verifies one file (throws kiln::Error naming it on any problem).
void read_checkpoint(const std::string& path, const CheckpointLoadOptions& options, std::map<std::string, std::string>& metadata,
                     std::map<std::string, nn::StateDict>& tensors, TrainingState& state,
                     std::vector<std::string>& parts, uint64_t& seed, uint64_t& offset) {
  nn::StateDict all = load(path);  // validates the layout and every checksum
  metadata = load_metadata(path);
  auto it = metadata.find(kStateKey);
  const std::string where = "'" + path + "': metadata \"" + kStateKey + "\"";
  KILN_CHECK(it != metadata.end(), "'", path, "' is not a kiln training checkpoint (no \"", kStateKey,
             "\" in its metadata): a plain weights file loads with kiln::load");
  const json::Value s = json::parse(it->second, where);
  KILN_CHECK(s.is_object(), where, " must be a JSON object");
  state.step = get_count(s, "step", where);
  state.epoch = get_count(s, "epoch", where);
  KILN_CHECK(s.contains("data") && s.at("data").is_object(), where, ": \"data\" must be an object");
  KILN_CHECK(s.contains("extra") && s.at("extra").is_object(), where, ": \"extra\" must be an object");
  state.data = s.at("data");
  state.extra = s.at("extra");
  KILN_CHECK(s.contains("parts") && s.at("parts").is_array(), where, ": \"parts\" must be an array");
  for (const auto& p : s.at("parts").as_array()) {
    KILN_CHECK(p.is_string(), where, ": \"parts\" must hold strings");
    const std::string& n = p.as_string();
    KILN_CHECK(n == "model" || n == "optimizer" || n == "scheduler" || n == "scaler" || n == "rng", where,
               ": unknown part \"", n, "\"");
    parts.push_back(n);
  }
  if (std::find(parts.begin(), parts.end(), "rng") != parts.end()) {
    KILN_CHECK(s.contains("rng") && s.at("rng").is_object(), where, ": \"rng\" must be an object");
    seed = get_u64(s.at("rng"), "seed", where + " rng");
    offset = get_u64(s.at("rng"), "offset", where + " rng");
  }
  for (const auto& [name, t] : all) {
    std::string part = "model", key = name;
    for (const char* p : kTensorParts)
      if (name.rfind(std::string(p) + "/", 0) == 0) part = p, key = name.substr(std::string(p).size() + 1);
    KILN_CHECK(std::find(parts.begin(), parts.end(), part) != parts.end(), "'", path, "': tensor '", name,
               "' belongs to a part (", part, ") that \"parts\" does not list");
    tensors[part].insert(key, t);
  }
  if (!options.allow_nonfinite) {
    std::string bad = first_nonfinite(tensors["model"], "");
    if (bad.empty()) bad = first_nonfinite(tensors["optimizer"], "optimizer/");
    KILN_CHECK(bad.empty(), "'", path, "': tensor '", bad, "' holds NaN or infinite values (allow_nonfinite loads it "
               "anyway)");
  }
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path, const CheckpointLoadOptions& options) {
  KILN_CHECK(options.fallback >= 0, "Checkpoint::open: fallback must be >= 0, got ", options.fallback);
  Checkpoint c;
  for (int k = 0; k <= options.fallback; ++k) {
    const std::string file = k == 0 ? path : kept_file_path(path, k);
    std::error_code ec;
    if (k > 0 && !std::filesystem::exists(file, ec)) break;
    try {
      Checkpoint t;
      read_checkpoint(file, options, t.metadata_, t.tensors_, t.state_, t.parts_, t.rng_seed_, t.rng_offset_);
      t.path_ = file;
      t.passed_over_ = std::move(c.passed_over_);
      return t;
    } catch (const Error& e) {
      c.passed_over_.push_back(e.what());
    }
  }
  std::string why;
  for (const std::string& w : c.passed_over_) why += "\n  " + w;
  KILN_FAIL("cannot load the checkpoint '", path, "'", c.passed_over_.size() > 1 ? " or any older copy of it:" : ":", why);
}

bool Checkpoint::has(const std::string& part) const {
  return std::find(parts_.begin(), parts_.end(), part) != parts_.end();
}

nn::StateDict Checkpoint::model_state() const {
  auto it = tensors_.find("model");
  return it == tensors_.end() ? nn::StateDict() : it->second;
}

void Checkpoint::restore(const CheckpointParts& parts) const {
  auto need = [&](const char* part) {
    KILN_CHECK(has(part), "'", path_, "': the checkpoint has no ", part, " state, but one was given to restore");
    auto it = tensors_.find(part);
    static const nn::StateDict empty;
    return it == tensors_.end() ? empty : it->second;
  };
  auto as_map = [](const nn::StateDict& d) {
    optim::StateDict m;
    for (const auto& [k, v] : d) m.emplace(k, v);
    return m;
  };
  // Errors from the objects' own loaders name the part; add the file.
  auto with_file = [&](const char* part, auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      KILN_FAIL("'", path_, "': restoring the ", part, ": ", e.what());
    }
  };
  if (parts.model) with_file("model", [&] { parts.model->load_state_dict(need("model")); });
  if (parts.optimizer) with_file("optimizer", [&] { parts.optimizer->load_state_dict(as_map(need("optimizer"))); });
  // after the optimizer: the scheduler writes its learning rates into it
  if (parts.scheduler) with_file("scheduler", [&] { parts.scheduler->load_state_dict(as_map(need("scheduler"))); });
  if (parts.scaler) with_file("scaler", [&] { parts.scaler->load_state_dict(as_map(need("scaler"))); });
  if (parts.rng) {
    KILN_CHECK(has("rng"), "'", path_, "': the checkpoint has no RNG state, but one was asked to restore");
    set_rng_state({rng_seed_, rng_offset_});
  }
}

TrainingState load_checkpoint(const std::string& path, const CheckpointParts& parts, const CheckpointLoadOptions& options) {
  const Checkpoint c = Checkpoint::open(path, options);
  c.restore(parts);
  return c.state();
}

}  // namespace kiln
