// Fuzz target: byte-level BPE tokenizers (data::BpeTokenizer: load, the JSON a GPT
// checkpoint keeps as "kiln.bpe"; encode / decode). The input is read as a tokenizer file
// (bad bytes must end in kiln::Error; one that loads must save and load back equal, and
// round-trip a fixed text), and as text for a fixed trained tokenizer, which must decode
// back to exactly the input bytes.
#include <optional>
#include "kiln/data/bpe.h"
#include "fuzz.h"

using namespace kiln;

namespace {
const data::BpeTokenizer& fixed() {
  static const data::BpeTokenizer t = data::BpeTokenizer::train(
      "the quick brown fox jumps over the lazy dog, the end. h\xc3\xa9llo w\xc3\xb6rld 1234 1234\n\n  the fox", 300);
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  kiln_fuzz::require(fixed().decode(fixed().encode(bytes)) == bytes, "decode(encode(bytes)) == bytes");
  const std::string path = kiln_fuzz::write_input("bpe.json", data, size);
  std::optional<data::BpeTokenizer> bpe;
  kiln_fuzz::expect_errors([&] { bpe = data::BpeTokenizer::load(path); });
  if (!bpe) return 0;
  const std::string again = (kiln_fuzz::scratch_dir() / "again.json").string();
  bpe->save(again);
  kiln_fuzz::require(data::BpeTokenizer::load(again) == *bpe, "a tokenizer saves and loads back equal");
  const std::string text = "the quick fox \xff\x00 h\xc3\xa9llo";
  kiln_fuzz::require(bpe->decode(bpe->encode(text)) == text, "a loaded tokenizer round-trips text");
  return 0;
}
