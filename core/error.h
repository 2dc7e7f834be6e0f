// kiln::Error, the one exception type of the framework, and the KILN_CHECK macro.
// Messages name the op, the shapes/dtypes/devices involved and what was expected.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include <cstdint>

namespace kiln {

/// The single exception type thrown for bad user input and failed runtime calls.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void stream_all(std::ostringstream&) {}
template <class T, class... R>
void stream_all(std::ostringstream& os, const T& v, const R&... r) {
  os << v;
  stream_all(os, r...);
}
template <class... A>
[[noreturn]] void throw_error(const A&... a) {
  std::ostringstream os;
  stream_all(os, a...);
  throw Error(os.str());
}
}  // namespace detail

/// "[2, 3, 4]": how shapes appear in every message.
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace kiln

/// Throws kiln::Error with the streamed message when cond is false:
///   KILN_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got shape ", shape_str(a.shape()));
#define KILN_CHECK(cond, ...)                                    \
  do {                                                           \
    if (!(cond)) ::kiln::detail::throw_error(__VA_ARGS__);       \
  } while (0)
#define KILN_FAIL(...) ::kiln::detail::throw_error(__VA_ARGS__)
