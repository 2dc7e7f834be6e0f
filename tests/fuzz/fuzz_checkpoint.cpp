// Fuzz target: training checkpoints through kiln::Checkpoint::open (optim/run_checkpoint:
// safetensors, checksums, the "kiln.state" JSON and its fields), the `kiln` command's
// reading of the saved run configuration (cli/run_state: config_from_json), and a
// restore into a small model, optimizer, scheduler and GradScaler. Bad bytes must end in
// kiln::Error: never a crash, and never a state restored half-way without an error.
#include <optional>
#include "cli/run_state.h"
#include "fuzz.h"
#include "kiln/kiln.h"
#include "kiln/optim/run_checkpoint.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln_fuzz::write_input("in.safetensors", data, size);
  std::optional<Checkpoint> ck;
  kiln_fuzz::expect_errors([&] { ck = Checkpoint::open(path, {.fallback = 0}); });
  if (!ck) return 0;
  if (ck->state().extra.contains("config"))
    kiln_fuzz::expect_errors([&] { cli::config_from_json(ck->state().extra.at("config"), "fuzz"); });
  nn::Linear model(2, 2);
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::StepLR sched(opt, {.step_size = 2});
  amp::GradScaler scaler;
  kiln_fuzz::expect_errors([&] {
    ck->restore({.model = &model, .optimizer = &opt, .scheduler = &sched, .scaler = &scaler, .rng = false});
  });
  return 0;
}
