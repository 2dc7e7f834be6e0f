// Small core tables: dtype names and sizes, promotion, device parsing, shape printing,
// threads and the global Philox generator.
#include <atomic>
#include <mutex>
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/parallel.h"
#include "kiln/core/rng.h"

namespace kiln {

size_t dtype_size(DType d) {
  switch (d) {
#define KILN_X(e, T, n) case DType::e: return sizeof(T);
    KILN_FORALL_DTYPES(KILN_X)
#undef KILN_X
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
#define KILN_X(e, T, n) case DType::e: return n;
    KILN_FORALL_DTYPES(KILN_X)
#undef KILN_X
  }
  return "?";
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType d) {
    switch (d) {
      case DType::bool_: return 0;
      case DType::uint8: return 1;
      case DType::int32: return 2;
      case DType::int64: return 3;
      case DType::bfloat16: return 4;
      case DType::float16: return 4;
      case DType::float32: return 6;
      case DType::float64: return 7;
    }
    return 0;
  };
  // float16 with bfloat16 -> float32 (as PyTorch)
  if ((a == DType::float16 && b == DType::bfloat16) || (a == DType::bfloat16 && b == DType::float16))
    return DType::float32;
  return rank(a) >= rank(b) ? a : b;
}

const char* device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

Device::Device(const std::string& s) {
  if (s == "cpu") { type = DeviceType::CPU; index = 0; return; }
  if (s.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    if (s.size() == 4) { index = 0; return; }
    if (s[4] == ':' && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos) {
      index = std::stoi(s.substr(5));
      return;
    }
  }
  KILN_FAIL("Device: cannot parse '", s, "' (expected \"cpu\", \"cuda\" or \"cuda:N\")");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
int g_threads = 0;  // 0: not set yet -> OpenMP's default
std::mutex g_rng_mu;
RngState g_rng{0x5eed, 0};
}  // namespace

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: expected n >= 1, got ", n);
  g_threads = n;
  omp_set_num_threads(n);
}
int get_num_threads() { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> l(g_rng_mu);
  g_rng = {seed, 0};
}
RngState get_rng_state() {
  std::lock_guard<std::mutex> l(g_rng_mu);
  return g_rng;
}
void set_rng_state(const RngState& s) {
  std::lock_guard<std::mutex> l(g_rng_mu);
  g_rng = s;
}
RngState rng_reserve(uint64_t n) {
  std::lock_guard<std::mutex> l(g_rng_mu);
  RngState s = g_rng;
  g_rng.offset += n;
  return s;
}

}  // namespace kiln
