// The run configuration of `kiln train` checkpoints: JSON in and out, validation, and the
// resume rules (see run_state.h).
#include "cli/run_state.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include "kiln/core/error.h"

namespace kiln::cli {

json::Value json_array(const std::vector<double>& values) {
  json::Value a = json::Value::array();
  for (double v : values) a.push_back(v);
  return a;
}

data::CharVocab vocab_from_json(const json::Value& v, const std::string& what) {
  KILN_CHECK(v.is_array(), what, ": the vocabulary must be an array of code points");
  std::vector<char32_t> cps;
  for (const auto& x : v.as_array()) {
    KILN_CHECK(x.is_int(), what, ": vocabulary entries must be integers");
    const int64_t c = x.as_int();
    KILN_CHECK(c >= 0 && c <= 0x10FFFF, what, ": vocabulary entry ", c, " is not a Unicode code point");
    cps.push_back(char32_t(c));
  }
  KILN_CHECK(!cps.empty(), what, ": empty vocabulary");
  return data::CharVocab(std::move(cps));
}

std::map<std::string, std::string> tokenizer_metadata(const data::Tokenizer& t) {
  if (t.is_bpe()) return {{"kiln.tokenizer", "bpe"}, {"kiln.bpe", t.bpe().to_json().dump()}};
  std::vector<double> cps;
  for (char32_t c : t.chars().code_points()) cps.push_back(double(c));
  return {{"kiln.tokenizer", "char"}, {"kiln.vocab", json_array(cps).dump()}};
}

data::Tokenizer tokenizer_from_metadata(const std::map<std::string, std::string>& meta, const std::string& file) {
  auto kind = meta.find("kiln.tokenizer");
  const std::string k = kind == meta.end() ? "char" : kind->second;
  KILN_CHECK(k == "char" || k == "bpe", file, ": metadata \"kiln.tokenizer\" is '", k, "' (expected char or bpe)");
  const std::string key = k == "bpe" ? "kiln.bpe" : "kiln.vocab";
  auto it = meta.find(key);
  const std::string where = file + ": metadata \"" + key + "\"";
  KILN_CHECK(it != meta.end(), where, " is missing (not a GPT checkpoint written by kiln train gpt?)");
  const json::Value v = json::parse(it->second, where);
  if (k == "bpe") return data::Tokenizer(data::BpeTokenizer::from_json(v, where));
  return data::Tokenizer(vocab_from_json(v, where));
}

void validate_config(const TrainConfig& c, const std::string& where, bool from_flags) {
  // named as the flag ("--batch-size 0") or as the saved key ("key \"batch_size\" = 0")
  auto check = [&](bool ok, const char* flag, const auto& value, const char* expected) {
    std::string key = flag;
    std::replace(key.begin(), key.end(), '-', '_');
    KILN_CHECK(ok, where, ": ", from_flags ? "--" + std::string(flag) + " " : "key \"" + key + "\" = ", value,
               " (expected ", expected, ")");
  };
  const bool gpt = c.task == "gpt";
  check(c.task == "mnist" || c.task == "cifar10" || gpt, "task", c.task, "mnist, cifar10 or gpt");
  check(gpt ? c.model == "gpt"
            : c.task == "mnist" ? (c.model == "convnet" || c.model == "lenet" || c.model == "mlp")
                                : (c.model == "resnet20" || c.model == "convnet"),
        "model", c.model, "a model of the task: mnist convnet|lenet|mlp, cifar10 resnet20|convnet, gpt gpt");
  check(c.epochs >= 1, "epochs", c.epochs, ">= 1");
  check(c.batch_size >= 1 || (from_flags && c.batch_auto), "batch-size", c.batch_size, ">= 1 or auto");
  check(std::isfinite(c.lr) && c.lr > 0, "lr", c.lr, "a finite number > 0");
  check(std::isfinite(c.momentum) && c.momentum >= 0 && c.momentum < 1, "momentum", c.momentum, "in [0, 1)");
  check(std::isfinite(c.weight_decay) && c.weight_decay >= 0, "weight-decay", c.weight_decay, "a finite number >= 0");
  check(c.schedule == "constant" || c.schedule == "cosine", "schedule", c.schedule, "constant or cosine");
  check(c.threads >= 0 && c.threads <= 4096, "threads", c.threads, "0 (all cores) to 4096");
  check(c.workers >= 0 && c.workers <= 256, "workers", c.workers, "0 to 256");
  check(c.amp == "off" || c.amp == "bf16" || c.amp == "fp16", "amp", c.amp, "off, bf16 or fp16");
  check(c.accum >= 1, "accum", c.accum, ">= 1");
  check(c.limit >= 0, "limit", c.limit, ">= 0");
  check(c.steps >= 1, "steps", c.steps, ">= 1");
  check(std::isfinite(c.max_minutes) && c.max_minutes >= 0, "max-minutes", c.max_minutes, "a finite number >= 0");
  check(c.eval_every >= 1, "eval-every", c.eval_every, ">= 1");
  check(c.eval_batches >= 1, "eval-batches", c.eval_batches, ">= 1");
  check(c.context >= 1 && c.layers >= 1 && c.heads >= 1 && c.width >= 1 && c.width % c.heads == 0,
        "width", std::to_string(c.context) + "/" + std::to_string(c.layers) + "/" +
                                         std::to_string(c.heads) + "/" + std::to_string(c.width),
        "context/layers/heads/width all positive, width a multiple of heads");
  check(std::isfinite(c.dropout) && c.dropout >= 0 && c.dropout < 1, "dropout", c.dropout, "in [0, 1)");
  check(c.sample_tokens >= 0, "sample-tokens", c.sample_tokens, ">= 0");
  check(c.stop_at >= 0, "stop-at", c.stop_at, ">= 0");
  check(c.keep >= 1 && c.keep <= 100, "keep", c.keep, "1 to 100");
  check(c.save_every_steps >= 0, "save-every-steps", c.save_every_steps, ">= 0");
  check(std::isfinite(c.save_every_minutes) && c.save_every_minutes >= 0, "save-every-minutes",
        c.save_every_minutes, "a finite number >= 0");
  check(c.max_skips >= 1, "max-skips", c.max_skips, ">= 1");
  check(c.log_every >= 0, "log-every", c.log_every, ">= 0");
  check(c.tokenizer == "char" || c.tokenizer == "bpe", "tokenizer", c.tokenizer, "char or bpe");
  check(c.tokenizer == "char" || gpt, "tokenizer", c.tokenizer, "char: only the gpt task has a tokenizer");
  check(c.vocab_size >= 256 && c.vocab_size <= 65536, "vocab-size", c.vocab_size, "256 to 65536");
}

// The saved fields of TrainConfig, one line each, for both directions.
#define KILN_TRAIN_CONFIG_FIELDS(X)                                                                       \
  X(task) X(model) X(data) X(device) X(epochs) X(batch_size) X(lr) X(momentum) X(weight_decay) X(schedule) \
  X(threads) X(workers) X(amp) X(accum) X(checkpoint_activations) X(seed) X(limit) X(steps) X(max_minutes)  \
  X(eval_every) X(eval_batches) X(context) X(layers) X(heads) X(width) X(dropout) X(prompt) X(sample_tokens) \
  X(stop_at) X(save) X(resume) X(metrics) X(progress) X(keep) X(save_every_steps) X(save_every_minutes)     \
  X(max_skips)
// Saved fields added later: a checkpoint written before them was trained with the default.
#define KILN_TRAIN_CONFIG_LATER_FIELDS(X) X(tokenizer) X(vocab_size)

namespace {
// A string that is not valid UTF-8 (a path with Latin-1 bytes, say) is saved as
// {"hex": "<its bytes>"}: a safetensors header must be UTF-8, and a resumed run needs the
// exact bytes back to open its data again.
json::Value to_json(const std::string& s) {
  if (json::invalid_utf8_at(s) == std::string::npos) return json::Value(s);
  std::string hex;
  for (char c : s) hex += "0123456789abcdef"[uint8_t(c) >> 4], hex += "0123456789abcdef"[uint8_t(c) & 15];
  json::Value j = json::Value::object();
  j["hex"] = hex;
  return j;
}
json::Value to_json(bool b) { return json::Value(b); }
json::Value to_json(double d) { return json::Value(d); }
json::Value to_json(int v) { return json::Value(int64_t(v)); }
json::Value to_json(int64_t v) { return json::Value(v); }
json::Value to_json(uint64_t v) { return json::Value(std::to_string(v)); }  // beyond int64 and double

// Each throws a plain message; config_from_json adds where and the key.
void from_json(const json::Value& j, std::string& s) {
  if (j.is_object()) {  // {"hex": ...}: the bytes of a string that is not UTF-8
    const bool ok = j.size() == 1 && j.contains("hex") && j.at("hex").is_string() &&
                    j.at("hex").as_string().size() % 2 == 0 &&
                    j.at("hex").as_string().find_first_not_of("0123456789abcdef") == std::string::npos;
    KILN_CHECK(ok, "expected a string or {\"hex\": \"<pairs of lower-case hex digits>\"}");
    const std::string& h = j.at("hex").as_string();
    s.clear();
    for (size_t i = 0; i < h.size(); i += 2) s += char(std::stoi(h.substr(i, 2), nullptr, 16));
    return;
  }
  KILN_CHECK(j.is_string(), "expected a string, got a JSON ", json::Value::type_name(j.type()));
  s = j.as_string();
}
void from_json(const json::Value& j, bool& b) {
  KILN_CHECK(j.is_bool(), "expected true or false, got a JSON ", json::Value::type_name(j.type()));
  b = j.as_bool();
}
void from_json(const json::Value& j, double& d) {
  KILN_CHECK(j.is_number(), "expected a number, got a JSON ", json::Value::type_name(j.type()));
  d = j.as_number();
}
void from_json(const json::Value& j, int64_t& v) {
  KILN_CHECK(j.is_int(), "expected an integer, got ", j.is_number() ? j.dump() : json::Value::type_name(j.type()));
  v = j.as_int();
}
void from_json(const json::Value& j, int& v) {
  int64_t w = 0;
  from_json(j, w);
  KILN_CHECK(w >= std::numeric_limits<int>::min() && w <= std::numeric_limits<int>::max(), "integer ", w,
             " is out of range");
  v = int(w);
}
void from_json(const json::Value& j, uint64_t& v) {
  KILN_CHECK(j.is_string(), "expected an unsigned integer as a decimal string");
  const std::string& s = j.as_string();
  KILN_CHECK(!s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos, "\"", s,
             "\" is not an unsigned integer");
  uint64_t x = 0;
  for (char c : s)
    KILN_CHECK(!__builtin_mul_overflow(x, 10u, &x) && !__builtin_add_overflow(x, uint64_t(c - '0'), &x), "\"", s,
               "\" does not fit 64 bits");
  v = x;
}
}  // namespace

json::Value config_to_json(const TrainConfig& c) {
  json::Value j = json::Value::object();
#define X(f) j[#f] = to_json(c.f);
  KILN_TRAIN_CONFIG_FIELDS(X)
  KILN_TRAIN_CONFIG_LATER_FIELDS(X)
#undef X
  return j;
}

TrainConfig config_from_json(const json::Value& j, const std::string& where) {
  KILN_CHECK(j.is_object(), where, ": expected a JSON object, got a ", json::Value::type_name(j.type()));
  TrainConfig c;
#define X(f)                                                          \
  try {                                                               \
    KILN_CHECK(j.contains(#f), "missing");                           \
    from_json(j.at(#f), c.f);                                         \
  } catch (const Error& e) {                                          \
    KILN_FAIL(where, ": key \"" #f "\": ", e.what());                 \
  }
  KILN_TRAIN_CONFIG_FIELDS(X)
#undef X
#define X(f)                                                          \
  try {                                                               \
    if (j.contains(#f)) from_json(j.at(#f), c.f);                     \
  } catch (const Error& e) {                                          \
    KILN_FAIL(where, ": key \"" #f "\": ", e.what());                 \
  }
  KILN_TRAIN_CONFIG_LATER_FIELDS(X)
#undef X
  validate_config(c, where, false);
  return c;
}

namespace {

std::string str(const std::string& s) { return "'" + s + "'"; }
std::string str(bool b) { return b ? "on" : "off"; }
template <class T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

TrainConfig merge_resumed_config(const TrainConfig& saved, const TrainConfig& cmd, std::vector<std::string>& notes) {
  KILN_CHECK(cmd.task == saved.task, "--resume ", cmd.resume, ": the checkpoint is of a '", saved.task,
             "' run, not '", cmd.task, "'");
  TrainConfig c = saved;
  c.given = cmd.given;
  c.override_saved = cmd.override_saved;
  const bool gpt = saved.task == "gpt";
  // Where and how far the run goes: the command line's when given, else the saved run's.
  auto control = [&](const char* flag, auto& field, const auto& value) {
    if (cmd.given.count(flag)) field = value;
  };
  control("epochs", c.epochs, cmd.epochs);
  control("steps", c.steps, cmd.steps);
  control("device", c.device, cmd.device);
  control("threads", c.threads, cmd.threads);
  control("workers", c.workers, cmd.workers);
  control("metrics", c.metrics, cmd.metrics);
  control("prompt", c.prompt, cmd.prompt);
  control("sample-tokens", c.sample_tokens, cmd.sample_tokens);
  control("keep", c.keep, cmd.keep);
  control("max-skips", c.max_skips, cmd.max_skips);
  if (cmd.given.count("save-every")) c.save_every_steps = cmd.save_every_steps, c.save_every_minutes = cmd.save_every_minutes;
  // Only for this invocation: where to stop it, and whether to draw progress.
  c.stop_at = cmd.stop_at;
  c.max_minutes = cmd.max_minutes;
  c.progress = cmd.progress;
  c.log_every = cmd.log_every;
  c.zero = cmd.zero;  // how the ranks share the optimizer state: the checkpoint holds the full state either way
  // A resumed run goes on saving where it was resumed from unless told otherwise.
  c.save = cmd.given.count("save") ? cmd.save : cmd.resume;
  c.resume = cmd.resume;
  // Settings of the training itself: a contradiction needs --override; some never change.
  auto setting = [&](const char* flag, auto& field, const auto& value, bool changeable) {
    if (!cmd.given.count(flag) || field == value) return;
    KILN_CHECK(changeable, "--resume ", cmd.resume, ": --", flag, " ", str(value), " contradicts the checkpoint's ",
               str(field), ", and --", flag, " cannot change on resume (it shapes the model or the data); drop "
               "the flag, or start a new run");
    KILN_CHECK(cmd.override_saved, "--resume ", cmd.resume, ": --", flag, " ", str(value),
               " contradicts the checkpoint's ", str(field), "; drop the flag to continue as saved, or add "
               "--override to change it");
    notes.push_back(std::string("--") + flag + " changed from " + str(field) + " to " + str(value) + " (--override)");
    field = value;
    c.changed.insert(flag);
  };
  setting(gpt ? "text" : "data", c.data, cmd.data, true);
  setting("batch-size", c.batch_size, cmd.batch_size, true);
  setting("lr", c.lr, cmd.lr, saved.schedule == "constant");
  setting("momentum", c.momentum, cmd.momentum, true);
  setting("weight-decay", c.weight_decay, cmd.weight_decay, true);
  setting("amp", c.amp, cmd.amp, true);
  setting("accum", c.accum, cmd.accum, true);
  setting("checkpoint-activations", c.checkpoint_activations, cmd.checkpoint_activations, true);
  setting("seed", c.seed, cmd.seed, true);
  setting("eval-every", c.eval_every, cmd.eval_every, true);
  setting("eval-batches", c.eval_batches, cmd.eval_batches, true);
  setting("dropout", c.dropout, cmd.dropout, true);
  setting("model", c.model, cmd.model, false);
  setting("schedule", c.schedule, cmd.schedule, false);
  setting("limit", c.limit, cmd.limit, false);
  setting("context", c.context, cmd.context, false);
  setting("layers", c.layers, cmd.layers, false);
  setting("heads", c.heads, cmd.heads, false);
  setting("width", c.width, cmd.width, false);
  setting("tokenizer", c.tokenizer, cmd.tokenizer, false);
  setting("vocab-size", c.vocab_size, cmd.vocab_size, false);
  return c;
}

std::string describe_config(const TrainConfig& c) {
  std::ostringstream os;
  os << c.task << " " << c.model << " on " << (c.data.empty() ? "(no data)" : c.data) << ", batch " << c.batch_size
     << " x " << c.accum << ", lr " << c.lr << " (" << c.schedule << ")";
  if (c.task == "gpt")
    os << ", AdamW weight decay " << c.weight_decay << ", " << c.steps << " steps, eval every " << c.eval_every
       << ", context " << c.context << ", " << c.layers << " layers x " << c.width << ", " << c.heads
       << " heads, dropout " << c.dropout;
  else
    os << ", SGD momentum " << c.momentum << " weight decay " << c.weight_decay << ", " << c.epochs << " epochs";
  os << ", amp " << c.amp << ", seed " << c.seed;
  if (c.limit) os << ", limit " << c.limit;
  if (c.checkpoint_activations) os << ", activation checkpointing";
  return os.str();
}

}  // namespace kiln::cli
