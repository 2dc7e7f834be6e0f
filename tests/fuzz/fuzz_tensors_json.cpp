// Fuzz target: the JSON form of tensor maps (kiln::tensors_from_json on json::parse's
// result, nn/serialize). Bad input must end in kiln::Error; accepted tensors must round
// trip through tensors_to_json bitwise.
#include <cstring>
#include <optional>
#include <string_view>
#include "fuzz.h"
#include "kiln/nn/serialize.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<std::map<std::string, Tensor>> tensors;
  kiln_fuzz::expect_errors([&] {
    const json::Value v = json::parse(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
    tensors = tensors_from_json(v, "fuzz input");
  });
  if (!tensors) return 0;
  const auto back = tensors_from_json(json::parse(tensors_to_json(*tensors).dump(1), "round trip"), "round trip");
  kiln_fuzz::require(back.size() == tensors->size(), "tensors_to_json keeps every tensor");
  for (const auto& [name, x] : *tensors) {
    const Tensor& y = back.at(name);
    kiln_fuzz::require(x.dtype() == y.dtype() && x.shape() == y.shape(), "tensors_to_json keeps dtypes and shapes");
    kiln_fuzz::require(std::memcmp(x.raw_data(), y.raw_data(), size_t(x.numel()) * x.element_size()) == 0,
                       "tensors_to_json keeps the bytes");
  }
  return 0;
}
