// Checkpoints of `kiln train` runs: safetensors weights + JSON side file (see run_state.h).
#include "cli/run_state.h"
#include <string>
#include "core/error.h"
#include "core/file_io.h"
#include "nn/serialize.h"

namespace kiln::cli {

json::Value json_array(const std::vector<double>& values) {
  json::Value a = json::Value::array();
  for (double v : values) a.push_back(v);
  return a;
}

data::CharVocab vocab_from_json(const json::Value& v, const std::string& what) {
  std::vector<char32_t> cps;
  for (const auto& x : v.as_array()) {
    const int64_t c = x.as_int();
    KILN_CHECK(c >= 0 && c <= 0x10FFFF, what, ": vocabulary entry ", c, " is not a Unicode code point");
    cps.push_back(char32_t(c));
  }
  KILN_CHECK(!cps.empty(), what, ": empty vocabulary");
  return data::CharVocab(std::move(cps));
}

// The fields of TrainConfig, one line each, for both directions.
#define KILN_TRAIN_CONFIG_FIELDS(X)                                                                       \
  X(task) X(model) X(data) X(device) X(epochs) X(batch_size) X(lr) X(momentum) X(weight_decay) X(schedule) \
  X(threads) X(workers) X(amp) X(accum) X(checkpoint_activations) X(seed) X(limit) X(steps) X(max_minutes)  \
  X(eval_every) X(eval_batches) X(context) X(layers) X(heads) X(width) X(dropout) X(prompt) X(sample_tokens) \
  X(stop_at) X(save) X(resume) X(metrics) X(progress)

namespace {
json::Value to_json(const std::string& s) { return json::Value(s); }
json::Value to_json(bool b) { return json::Value(b); }
json::Value to_json(double d) { return json::Value(d); }
json::Value to_json(int v) { return json::Value(int64_t(v)); }
json::Value to_json(int64_t v) { return json::Value(v); }
json::Value to_json(uint64_t v) { return json::Value(std::to_string(v)); }  // beyond int64 and double
void from_json(const json::Value& j, std::string& s) { s = j.as_string(); }
void from_json(const json::Value& j, bool& b) { b = j.as_bool(); }
void from_json(const json::Value& j, double& d) { d = j.as_number(); }
void from_json(const json::Value& j, int& v) { v = int(j.as_int()); }
void from_json(const json::Value& j, int64_t& v) { v = j.as_int(); }
void from_json(const json::Value& j, uint64_t& v) { v = std::stoull(j.as_string()); }
}  // namespace

json::Value config_to_json(const TrainConfig& c) {
  json::Value j = json::Value::object();
#define X(f) j[#f] = to_json(c.f);
  KILN_TRAIN_CONFIG_FIELDS(X)
#undef X
  return j;
}

TrainConfig config_from_json(const json::Value& j, const std::string& what) {
  TrainConfig c;
  try {
#define X(f) from_json(j.at(#f), c.f);
    KILN_TRAIN_CONFIG_FIELDS(X)
#undef X
  } catch (const std::exception& e) {
    KILN_CHECK(false, what, ": bad \"config\" entry: ", e.what());
  }
  return c;
}

TrainConfig merge_resumed_config(const TrainConfig& saved, const TrainConfig& cmd) {
  TrainConfig c = saved;
  KILN_CHECK(cmd.task == saved.task, "--resume ", cmd.resume, ": the checkpoint is of a '", saved.task,
             "' run, not '", cmd.task, "'");
  if (!cmd.data.empty()) c.data = cmd.data;
  c.epochs = cmd.epochs;
  c.steps = cmd.steps;
  c.max_minutes = cmd.max_minutes;
  c.device = cmd.device;
  c.threads = cmd.threads;
  c.workers = cmd.workers;
  c.stop_at = cmd.stop_at;
  c.save = cmd.save;
  c.resume = cmd.resume;
  c.metrics = cmd.metrics;
  c.progress = cmd.progress;
  c.prompt = cmd.prompt;
  c.sample_tokens = cmd.sample_tokens;
  return c;
}

void save_run(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
              const optim::LRScheduler* sched, const amp::GradScaler& scaler, const RunState& rs,
              const std::map<std::string, std::string>& metadata, const json::Value& extra) {
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";  // what Python's safetensors.torch expects; the kiln.* keys are ours
  meta["kiln.task"] = rs.config.task;
  meta["kiln.model"] = rs.config.model;
  meta["kiln.step"] = std::to_string(rs.step);
  meta["kiln.config"] = config_to_json(rs.config).dump();
  kiln::save(model.state_dict(), path, meta);

  const RngState rng = get_rng_state();
  json::Value side = json::Value::object();
  side["format"] = "kiln.train_state";
  side["version"] = 1;
  side["weights"] = path;
  side["epoch"] = rs.epoch;
  side["step"] = rs.step;
  side["rng"]["seed"] = std::to_string(rng.seed);
  side["rng"]["offset"] = std::to_string(rng.offset);
  side["config"] = config_to_json(rs.config);
  side["optimizer"] = tensors_to_json(opt.state_dict());
  side["scheduler"] = sched ? tensors_to_json(sched->state_dict()) : json::Value();
  side["scaler"] = tensors_to_json(scaler.state_dict());
  side["extra"] = extra;
  write_file_atomic(side_file_path(path), side.dump(1));
}

RunState load_run_state(const std::string& path) {
  const std::string side_path = side_file_path(path);
  std::vector<uint8_t> bytes;
  try {
    bytes = read_file_bytes(side_path);
  } catch (const Error& e) {
    KILN_CHECK(false, "--resume ", path, ": cannot read its side file ", side_path,
               " (optimizer, scheduler and step live there): ", e.what());
  }
  json::Value j = json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), side_path);
  KILN_CHECK(j.contains("format") && j.at("format").is_string() && j.at("format").as_string() == "kiln.train_state",
             side_path, ": not a kiln training state (expected \"format\": \"kiln.train_state\")");
  RunState rs;
  try {
    rs.config = config_from_json(j.at("config"), side_path);
    rs.epoch = j.at("epoch").as_int();
    rs.step = j.at("step").as_int();
    rs.rng.seed = std::stoull(j.at("rng").at("seed").as_string());
    rs.rng.offset = std::stoull(j.at("rng").at("offset").as_string());
    rs.optimizer = j.at("optimizer");
    rs.scheduler = j.at("scheduler");
    rs.scaler = j.at("scaler");
    rs.extra = j.at("extra");
  } catch (const std::invalid_argument&) {
    KILN_CHECK(false, side_path, ": malformed \"rng\" entry");
  }
  rs.weights = path;
  const auto meta = kiln::load_metadata(path);
  auto it = meta.find("kiln.step");
  KILN_CHECK(it != meta.end() && it->second == std::to_string(rs.step), "--resume ", path, ": the weights (step ",
             it == meta.end() ? std::string("unknown") : it->second, ") and ", side_path, " (step ", rs.step,
             ") are from different moments of the run");
  return rs;
}

void restore_run(const RunState& rs, nn::Module& model, optim::Optimizer& opt, optim::LRScheduler* sched,
                 amp::GradScaler& scaler, int64_t& epoch, int64_t& step) {
  const std::string side = side_file_path(rs.weights);
  model.load_state_dict(kiln::load(rs.weights));
  opt.load_state_dict(tensors_from_json(rs.optimizer, side + " optimizer"));
  KILN_CHECK((sched != nullptr) == !rs.scheduler.is_null(), side, ": the checkpoint ",
             sched ? "has no" : "has a", " learning-rate scheduler state, unlike this run");
  if (sched) sched->load_state_dict(tensors_from_json(rs.scheduler, side + " scheduler"));
  scaler.load_state_dict(tensors_from_json(rs.scaler, side + " scaler"));
  set_rng_state(rs.rng);
  epoch = rs.epoch;
  step = rs.step;
}

}  // namespace kiln::cli
