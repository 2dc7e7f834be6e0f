// Parsing the keys of an optimizer state dict ("param_groups.0.lr", "state.3.exp_avg"):
// shared by Optimizer::load_state_dict and dist::ZeroRedundancyOptimizer, which maps keys
// between the sharded and the full layout.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace kiln::optim {

/// The key split at its dots: "state.3.exp_avg" -> {"state", "3", "exp_avg"}.
inline std::vector<std::string> split_state_key(const std::string& s) {
  std::vector<std::string> parts;
  size_t b = 0;
  for (;;) {
    const size_t e = s.find('.', b);
    parts.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return parts;
}

/// A non-negative decimal index of at most 12 digits into `out`; false for anything else.
inline bool parse_state_index(const std::string& s, size_t& out) {
  if (s.empty() || s.size() > 12) return false;
  size_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + size_t(c - '0');
  }
  out = v;
  return true;
}

}  // namespace kiln::optim
