// Fuzz target: kiln's JSON parser (core/json: json::parse). Bad text must end in
// kiln::Error; accepted text must write out (compact and indented) as text that parses
// back to the same value.
#include <optional>
#include <string_view>
#include "kiln/core/json.h"
#include "fuzz.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<json::Value> v;
  kiln_fuzz::expect_errors([&] { v = json::parse(std::string_view(reinterpret_cast<const char*>(data), size)); });
  if (!v) return 0;
  const std::string compact = v->dump();
  kiln_fuzz::require(json::parse(compact, "compact dump").dump() == compact, "dump() parses back to the same value");
  kiln_fuzz::require(json::parse(v->dump(2), "indented dump").dump() == compact, "dump(2) parses back to the same value");
  return 0;
}
