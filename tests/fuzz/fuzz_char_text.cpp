// Fuzz target: UTF-8 text corpora (data::CharText: plain or gzip file -> code-point
// vocabulary and tokens). Bad bytes must end in kiln::Error naming the file; a text that
// loads must decode from its tokens back to exactly its bytes.
#include "kiln/core/file_io.h"
#include "kiln/data/text.h"
#include "fuzz.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln_fuzz::write_input("in.txt", data, size);
  kiln_fuzz::expect_errors([&] {
    const data::CharText text(path, {.context = 4, .val_fraction = 0.25});
    const std::vector<uint8_t> bytes = kiln::read_file_bytes(path);
    kiln_fuzz::require(text.vocab().decode(text.tokens()) == std::string(bytes.begin(), bytes.end()),
                       "a text's tokens decode to its bytes");
    if (text.train().size() > 0) text.train().get(text.train().size() - 1);
  });
  return 0;
}
