// Fuzz target: CIFAR-10 binary batches (data::CIFAR10 reading root/test_batch.bin).
// Bad bytes must end in kiln::Error naming the file; a batch that loads has one example
// per 3073-byte record with the record's label.
#include "kiln/data/vision.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string root = [] {
    std::filesystem::create_directories(kiln_fuzz::scratch_dir() / "cifar");
    return (kiln_fuzz::scratch_dir() / "cifar").string();
  }();
  kiln_fuzz::write_input("cifar/test_batch.bin", data, size);
  kiln_fuzz::expect_errors([&] {
    kiln::data::CIFAR10 ds(root, kiln::data::Split::Test);
    kiln_fuzz::require(ds.size() >= 1, "a CIFAR-10 batch that loads is not empty");
    const kiln::data::Example e = ds.get(ds.size() - 1);
    kiln_fuzz::require(e.input.shape() == kiln::Shape{3, 32, 32}, "CIFAR-10 examples are (3, 32, 32)");
    const int64_t label = e.target.item<int64_t>();
    kiln_fuzz::require(label >= 0 && label < 10, "CIFAR-10 labels are in [0, 10)");
  });
  return 0;
}
