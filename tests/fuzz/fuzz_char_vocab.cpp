// Fuzz target: character vocabulary files (data::CharVocab::load, the JSON file saved
// beside a GPT's tokens). Bad bytes must end in kiln::Error naming the file; a vocabulary
// that loads must save and load back equal.
#include <optional>
#include "kiln/data/text.h"
#include "fuzz.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln_fuzz::write_input("vocab.json", data, size);
  std::optional<data::CharVocab> vocab;
  kiln_fuzz::expect_errors([&] { vocab = data::CharVocab::load(path); });
  if (!vocab) return 0;
  const std::string again = (kiln_fuzz::scratch_dir() / "again.json").string();
  vocab->save(again);
  kiln_fuzz::require(data::CharVocab::load(again) == *vocab, "a vocabulary saves and loads back equal");
  return 0;
}
