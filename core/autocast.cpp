// Thread-local autocast state and the casting helpers ops call under mixed precision.
#include "kiln/core/autocast.h"

namespace kiln {

namespace {
thread_local bool t_autocast_enabled = false;
thread_local DType t_autocast_dtype = DType::bfloat16;

void check_autocast_dtype(DType dt) {
  KILN_CHECK(is_half(dt),
             "autocast: the low-precision dtype must be float16 or bfloat16, got ", dtype_name(dt));
}
}  // namespace

bool autocast_enabled() { return t_autocast_enabled; }
DType autocast_dtype() { return t_autocast_dtype; }
void set_autocast_enabled(bool enabled) { t_autocast_enabled = enabled; }
void set_autocast_dtype(DType dtype) {
  check_autocast_dtype(dtype);
  t_autocast_dtype = dtype;
}

autocast::autocast(DType dtype, bool enabled)
    : prev_enabled_(t_autocast_enabled), prev_dtype_(t_autocast_dtype) {
  check_autocast_dtype(dtype);
  t_autocast_enabled = enabled;
  if (enabled) t_autocast_dtype = dtype;
}

autocast::~autocast() {
  t_autocast_enabled = prev_enabled_;
  t_autocast_dtype = prev_dtype_;
}

// PyTorch's is_eligible: float32 and the other 16-bit dtype are cast, float64 is not
static bool casts_to_low(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::float32 || (is_half(t.dtype()) && t.dtype() != t_autocast_dtype));
}

Tensor autocast_to_low(const Tensor& t) {
  if (!t_autocast_enabled || !casts_to_low(t)) return t;
  return t.to(t_autocast_dtype);
}

Tensor autocast_to_fp32(const Tensor& t) {
  if (!t_autocast_enabled || !t.defined()) return t;
  if (!is_half(t.dtype())) return t;
  return t.to(DType::float32);
}

bool autocast_wants_low(std::initializer_list<Tensor> ts) {
  if (!t_autocast_enabled) return false;
  for (const auto& t : ts)
    if (casts_to_low(t)) return true;
  return false;
}

bool autocast_wants_fp32(std::initializer_list<Tensor> ts) {
  if (!t_autocast_enabled) return false;
  for (const auto& t : ts)
    if (t.defined() && is_half(t.dtype())) return true;
  return false;
}

}  // namespace kiln
