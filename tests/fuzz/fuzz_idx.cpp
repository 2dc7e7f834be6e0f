// Fuzz target: IDX files (MNIST / Fashion-MNIST, plain or gzip) through data::read_idx.
// Bad bytes must end in kiln::Error naming the file, never a crash or a huge allocation.
#include "kiln/data/io.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln_fuzz::write_input("in-idx3-ubyte", data, size);
  kiln_fuzz::expect_errors([&] {
    const kiln::Tensor t = kiln::data::read_idx(path);
    kiln_fuzz::require(t.dim() >= 1 && t.dim() <= 8, "an IDX tensor has 1 to 8 dimensions");
  });
  return 0;
}
