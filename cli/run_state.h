// What `kiln train` keeps in a checkpoint besides the tensors (optim/run_checkpoint.h
// holds the rest): the run's configuration as JSON, checked value by value when read back,
// and the rules by which a resumed run's command line may (or may not) change it.
#pragma once
#include <map>
#include <string>
#include <vector>
#include "cli/train.h"
#include "kiln/core/json.h"
#include "kiln/data/text.h"

namespace kiln::cli {

/// Checks every value of a configuration the way its flag is checked (ranges, finite
/// numbers, known names); `where` starts the message ("kiln train", or the checkpoint
/// file), which names the value by its flag (from_flags) or by its saved key.
void validate_config(const TrainConfig& c, const std::string& where, bool from_flags);

/// The saved fields of a configuration (not `given` / `override_saved`).
json::Value config_to_json(const TrainConfig& c);
/// Inverse of config_to_json; a missing key or a value of the wrong type or range is a
/// kiln::Error naming `where` and the key.
TrainConfig config_from_json(const json::Value& v, const std::string& where);

/// The configuration of a resumed run: the saved one, with what this command line gave.
/// How far and where the run goes (--epochs, --steps, --device, --threads, --workers,
/// --save, --metrics, --keep, --save-every, --max-skips, sampling) may always change (and
/// stay as saved when not given); --stop-at, --max-minutes, --no-progress and --zero are this
/// command line's alone. A flag that contradicts a training setting of the saved run
/// is an error unless cmdline.override_saved (--override); the model's shape, the task,
/// --schedule and --limit never change. `notes` receives one line per value changed.
TrainConfig merge_resumed_config(const TrainConfig& saved, const TrainConfig& cmdline, std::vector<std::string>& notes);

/// One line naming the settings that define a run (for the log of a resumed run).
std::string describe_config(const TrainConfig& c);

json::Value json_array(const std::vector<double>& values);
/// A vocabulary saved as an array of code points.
data::CharVocab vocab_from_json(const json::Value& v, const std::string& what);
/// A GPT checkpoint's tokenizer metadata: "kiln.tokenizer" ("char" or "bpe") with
/// "kiln.vocab" (the code points) or "kiln.bpe" (the merges, data::BpeTokenizer's JSON).
std::map<std::string, std::string> tokenizer_metadata(const data::Tokenizer& t);
/// Reads it back (a checkpoint without "kiln.tokenizer" is a character one); errors name
/// `file` and the key.
data::Tokenizer tokenizer_from_metadata(const std::map<std::string, std::string>& meta, const std::string& file);

}  // namespace kiln::cli
