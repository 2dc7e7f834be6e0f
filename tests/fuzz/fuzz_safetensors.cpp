// Fuzz target: safetensors files through kiln::load and kiln::load_metadata (nn/serialize).
// Bad bytes must end in kiln::Error; a file that loads must save and load back to the
// same tensors (names in order, dtypes, shapes, bytes) and metadata.
#include <cstring>
#include <optional>
#include "fuzz.h"
#include "kiln/nn/serialize.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln_fuzz::write_input("in.safetensors", data, size);
  std::optional<std::map<std::string, std::string>> meta;
  kiln_fuzz::expect_errors([&] { meta = load_metadata(path); });
  std::optional<nn::StateDict> sd;
  kiln_fuzz::expect_errors([&] { sd = load(path); });
  if (!sd) return 0;
  kiln_fuzz::require(meta.has_value(), "a file that loads has readable metadata");
  const std::string again = (kiln_fuzz::scratch_dir() / "again.safetensors").string();
  std::map<std::string, std::string> user_meta = *meta;  // save writes its own checksums
  user_meta.erase(kChecksumKey);
  save(*sd, again, user_meta);
  const nn::StateDict back = load(again);
  std::map<std::string, std::string> back_meta = load_metadata(again);
  back_meta.erase(kChecksumKey);
  kiln_fuzz::require(back_meta == user_meta, "metadata survives save + load");
  kiln_fuzz::require(back.size() == sd->size(), "save + load keeps every tensor");
  auto a = sd->begin();
  for (auto b = back.begin(); b != back.end(); ++a, ++b) {
    const Tensor &x = a->second, &y = b->second;
    kiln_fuzz::require(a->first == b->first && x.dtype() == y.dtype() && x.shape() == y.shape(),
                       "save + load keeps names, order, dtypes and shapes");
    kiln_fuzz::require(std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * x.element_size()) == 0,
                       "save + load keeps the bytes");
  }
  return 0;
}
