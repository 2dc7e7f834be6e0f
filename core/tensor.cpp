// Tensor handle: metadata, factories, copies/conversions, element access and printing.
#include "kiln/core/tensor.h"
#include <cmath>
#include <limits>
#include <cstring>
#include <functional>
#include <iomanip>
#include <sstream>
#include <type_traits>
#if defined(__AVX512F__) && !defined(__clang__)  // GCC 12's AVX-512 intrinsics start from undefined vectors (GCC bug 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "kiln/core/autograd.h"
#include "kiln/core/checked_math.h"
#include "kiln/core/copy.h"
#include "kiln/core/rng.h"
#include "kiln/core/simd_half.h"
#include "kiln/core/strided.h"

namespace kiln {

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    s[d] = acc;
    acc = checked_mul(acc, shape[d], "contiguous_strides", shape);
  }
  return s;
}

int64_t shape_numel(const Shape& shape, const char* op) {
  int64_t n = 1;
  bool empty = false;
  for (auto v : shape) {
    KILN_CHECK(v >= 0, op, ": negative size ", v, " in shape ", shape_str(shape), " (expected sizes >= 0)");
    if (v == 0) empty = true;
    else n = checked_mul(n, v, op, shape);
  }
  return empty ? 0 : n;
}

TensorImpl& Tensor::impl() const {
  KILN_CHECK(impl_ != nullptr, "use of an undefined Tensor (default-constructed or a missing gradient)");
  return *impl_;
}

// Tensor::empty with the user-facing op's name in its errors (zeros, randn, ...).
static Tensor empty_for(const char* op, const Shape& shape, DType dtype, Device device) {
  KILN_CHECK(shape.size() <= 16, op, ": at most 16 dims are supported, got shape ", shape_str(shape));
  const int64_t nbytes = checked_mul(shape_numel(shape, op), int64_t(dtype_size(dtype)), op, shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(nbytes), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty_for("empty", shape, dtype, device);
}

static int64_t wrap_dim_local(int64_t d, int64_t nd, const char* op) {
  KILN_CHECK(d >= -nd && d < nd, op, ": dim ", d, " out of range for a tensor with ", nd, " dims");
  return d < 0 ? d + nd : d;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim_local(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim_local(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != acc) return false;
    acc *= shape()[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data()) + impl().offset * int64_t(element_size());
}

Tensor& Tensor::requires_grad_(bool r) {
  KILN_CHECK(!r || is_floating_point(), "requires_grad_: only floating-point tensors can require "
             "gradients, got dtype ", dtype_name(dtype()));
  KILN_CHECK(is_leaf() || r, "requires_grad_(false): only leaves can be changed; use detach()");
  impl().requires_grad = r;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    KILN_CHECK(g.shape() == shape(), "set_grad: gradient shape ", shape_str(g.shape()),
               " does not match tensor shape ", shape_str(shape()));
    KILN_CHECK(g.device() == device(), "set_grad: gradient on ", g.device().str(), " for a tensor on ",
               device().str());
    if (g.dtype() != dtype()) {  // later backwards add into it in the tensor's dtype
      impl().grad = g.detach().to(dtype()).impl_ptr();
      return;
    }
  }
  impl().grad = g.impl_ptr();
}

Tensor Tensor::detach() const {
  auto d = std::make_shared<TensorImpl>();
  d->storage = impl().storage;
  d->shape = impl().shape;
  d->strides = impl().strides;
  d->offset = impl().offset;
  d->dtype = impl().dtype;
  return Tensor(std::move(d));
}

// ---------------------------------------------------------------- copies

namespace {
DeviceCopyFn g_device_copy = nullptr;
DeviceRangeFn g_device_range = nullptr;

/// d[0, n) = s[0, n) converted. Between float32 and a 16-bit float, 16 values per step where
/// the build has AVX-512 (8 with AVX2 + F16C), with core/simd_half.h's conversions (the
/// bits of the scalar ones). GCC does not vectorise the scalar conversions (one F16C
/// instruction per value), and autocast's casts run on every activation.
/// One element converted. A floating value an integer dtype cannot hold (NaN, inf, out of
/// range) has no C++ conversion (undefined behaviour): it becomes what PyTorch's x86 builds
/// give, the "integer indefinite" INT64_MIN / INT32_MIN, and uint8 keeps the low byte of the
/// int64 conversion.
template <class D, class S>
inline D cast_element(S v) {
  if constexpr (std::is_integral_v<D> && !std::is_same_v<D, bool> && !std::is_integral_v<S>) {
    const double x = double(v);
    const int64_t i64 = x >= -0x1p63 && x < 0x1p63 ? int64_t(x) : std::numeric_limits<int64_t>::min();
    if constexpr (std::is_same_v<D, int32_t>)
      return x > -0x1p31 - 1 && x < 0x1p31 ? int32_t(x) : std::numeric_limits<int32_t>::min();
    else if constexpr (std::is_same_v<D, int64_t>)
      return i64;
    else
      return D(uint64_t(i64));  // the low bits, as PyTorch's uint8
  } else {
    return static_cast<D>(v);
  }
}

template <class D, class S>
void convert_run(D* __restrict d, const S* __restrict s, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  using H = __m256i;  // 16 16-bit values
  if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Half>) {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(reinterpret_cast<H*>(d + i), simd::half16_from_floats(_mm512_loadu_ps(s + i)));
  } else if constexpr (std::is_same_v<S, Half> && std::is_same_v<D, float>) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(d + i, simd::floats_from_half16(_mm256_loadu_si256(reinterpret_cast<const H*>(s + i))));
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BFloat16>) {
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(reinterpret_cast<H*>(d + i), simd::bf16x16_from_floats(_mm512_loadu_ps(s + i)));
  } else if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<D, float>) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(d + i, simd::floats_from_bf16x16(_mm256_loadu_si256(reinterpret_cast<const H*>(s + i))));
  }
#if defined(KILN_SIMD_BF16_ROWS)
  // the last n % 16 values through masked loads and stores (short rows are common: a bias,
  // a channel): the lanes past n are read as zeros and not written
  if (i < n) {
    const __mmask16 m = simd::lanes16(n - i);
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Half>) {
      _mm256_mask_storeu_epi16(d + i, m, simd::half16_from_floats(_mm512_maskz_loadu_ps(m, s + i)));
      return;
    } else if constexpr (std::is_same_v<S, Half> && std::is_same_v<D, float>) {
      _mm512_mask_storeu_ps(d + i, m, simd::floats_from_half16(_mm256_maskz_loadu_epi16(m, s + i)));
      return;
    } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BFloat16>) {
      _mm256_mask_storeu_epi16(d + i, m, simd::bf16x16_from_floats(_mm512_maskz_loadu_ps(m, s + i)));
      return;
    } else if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<D, float>) {
      _mm512_mask_storeu_ps(d + i, m, simd::floats_from_bf16x16(_mm256_maskz_loadu_epi16(m, s + i)));
      return;
    }
  }
#endif
#elif defined(__AVX2__) && defined(__F16C__)
  using H = __m128i;  // 8 16-bit values
  if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Half>) {
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<H*>(d + i), simd::half8_from_floats(_mm256_loadu_ps(s + i)));
  } else if constexpr (std::is_same_v<S, Half> && std::is_same_v<D, float>) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(d + i, simd::floats_from_half8(_mm_loadu_si128(reinterpret_cast<const H*>(s + i))));
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BFloat16>) {
    for (; i + 16 <= n; i += 16)  // two vectors per pack
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                          simd::bf16x16_from_floats(_mm256_loadu_ps(s + i), _mm256_loadu_ps(s + i + 8)));
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<H*>(d + i), simd::bf16x8_from_floats(_mm256_loadu_ps(s + i)));
  } else if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<D, float>) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(d + i, simd::floats_from_bf16x8(_mm_loadu_si128(reinterpret_cast<const H*>(s + i))));
  }
#endif
  for (; i < n; ++i) d[i] = cast_element<D>(s[i]);
}

template <class D, class S>
void copy_cast_cpu(const Tensor& dst, const Tensor& src) {
  D* dp = static_cast<D*>(dst.raw_data());
  const S* sp = static_cast<const S*>(src.raw_data());
  if (dst.is_contiguous() && src.is_contiguous()) {
    if constexpr (std::is_same_v<D, S>) {  // pieces of 256 KB or more over the threads
      parallel_for(0, dst.numel(), int64_t(262144 / sizeof(D)),
                   [&](int64_t b, int64_t e) { std::memcpy(dp + b, sp + b, size_t(e - b) * sizeof(D)); });
    } else {
      parallel_for(0, dst.numel(), 32768, [&](int64_t b, int64_t e) { convert_run(dp + b, sp + b, e - b); });
    }
    return;
  }
  for_each_row<2>(dst.shape(), {dst.strides(), src.strides()},
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                    D* d = dp + off[0];
                    const S* s = sp + off[1];
                    for (int64_t i = 0; i < n; ++i) d[i * st[0]] = cast_element<D>(s[i * st[1]]);
                  });
}
}  // namespace

void convert_floats(const float* src, Half* dst, int64_t n) { convert_run(dst, src, n); }
void convert_floats(const float* src, BFloat16* dst, int64_t n) { convert_run(dst, src, n); }
void convert_floats(const Half* src, float* dst, int64_t n) { convert_run(dst, src, n); }
void convert_floats(const BFloat16* src, float* dst, int64_t n) { convert_run(dst, src, n); }

void register_device_copy(DeviceCopyFn fn) { g_device_copy = fn; }
void register_device_range(DeviceRangeFn fn) { g_device_range = fn; }

bool fill_range_on_device(const Tensor& dst, double start, double step) {
  if (!g_device_range || dst.is_cpu() || !dst.is_contiguous()) return false;
  if (dst.numel() > 0) g_device_range(dst, start, step);
  return true;
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.shape() == src.shape(), "copy: shapes differ, destination ", shape_str(dst.shape()),
             " vs source ", shape_str(src.shape()));
  if (dst.numel() == 0) return;
  if (!dst.is_cpu() || !src.is_cpu()) {
    KILN_CHECK(g_device_copy != nullptr, "copy from ", src.device().str(), " to ", dst.device().str(),
               ": this build of kiln has no CUDA backend");
    g_device_copy(dst, src);
    return;
  }
  KILN_DISPATCH_ALL(dst.dtype(), "copy", [&]<class D>() {
    KILN_DISPATCH_ALL(src.dtype(), "copy", [&]<class S>() { copy_cast_cpu<D, S>(dst, src); });
  });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  copy_tensor(out, *this);
  return twice_differentiable(record(out, "clone", {*this}, [](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g};
  }));
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = Tensor::empty(shape(), dt, device());
  copy_tensor(out, *this);
  if (!is_floating(dt)) return out;
  DType src = dtype();
  return twice_differentiable(record(out, "to_dtype", {*this}, [src](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.to(src)};
  }));
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor out = Tensor::empty(shape(), dtype(), dev);
  copy_tensor(out, *this);
  Device src = device();
  return twice_differentiable(record(out, "to_device", {*this}, [src](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g.to(src)};
  }));
}

static void check_inplace(const Tensor& t, const char* op) {
  KILN_CHECK(!(grad_mode_enabled() && t.requires_grad()), op,
             ": in-place change of a tensor that requires grad (shape ", shape_str(t.shape()),
             ") would corrupt the graph; wrap it in kiln::NoGradGuard or use the out-of-place op");
}

bool Tensor::has_internal_overlap() const {
  if (numel() == 0) return false;  // an empty tensor's strides are arbitrary
  for (int64_t d = 0; d < dim(); ++d)
    if (size(d) > 1 && stride(d) == 0) return true;
  return false;
}

bool Tensor::partially_overlaps(const Tensor& other) const {
  if (!defined() || !other.defined() || storage() != other.storage() || numel() == 0 || other.numel() == 0)
    return false;
  if (offset() == other.offset() && shape() == other.shape() && strides() == other.strides() &&
      dtype() == other.dtype())
    return false;  // the same view: each element is read before it is written
  // byte ranges [first, last] of each view inside the storage
  auto range = [](const Tensor& t) {
    int64_t lo = t.offset(), hi = t.offset();
    for (int64_t d = 0; d < t.dim(); ++d) (t.stride(d) < 0 ? lo : hi) += (t.size(d) - 1) * t.stride(d);
    const int64_t e = int64_t(dtype_size(t.dtype()));
    return std::pair<int64_t, int64_t>{lo * e, (hi + 1) * e};
  };
  const auto [a0, a1] = range(*this);
  const auto [b0, b1] = range(other);
  return a0 < b1 && b0 < a1;
}

void check_no_internal_overlap(const Tensor& t, const char* op) {
  KILN_CHECK(!t.has_internal_overlap(), op, ": the destination of shape ", shape_str(t.shape()), " (strides ",
             shape_str(t.strides()), ") has elements that share one memory location (an expanded tensor); "
             "write into a contiguous() copy instead");
}

Tensor& Tensor::zero_() { return fill_(0.0); }

// Writes v into every element of t (fill_ without its checks and version bump: also used
// by the factories, whose fresh tensors start at version 0).
static void fill_data(const Tensor& t, double v) {
  if (!t.is_cpu()) {
    if (fill_range_on_device(t, v, 0.0)) return;  // a kernel, nothing uploaded
    Tensor src = full({}, v, {.dtype = t.dtype()}).expand(t.shape());
    copy_tensor(t, src);
    return;
  }
  KILN_DISPATCH_ALL(t.dtype(), "fill_", [&]<class T>() {
    T* p = static_cast<T*>(t.raw_data());
    T val = static_cast<T>(v);
    if (t.is_contiguous()) {
      int64_t n = t.numel();
      parallel_for(0, n, 65536, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) p[i] = val; });
    } else {
      for_each_row<1>(t.shape(), {t.strides()}, [&](const std::array<int64_t, 1>& off, int64_t n,
                                                    const std::array<int64_t, 1>& st) {
        for (int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = val;
      });
    }
  });
}

// A fill value the dtype cannot hold is an error (PyTorch: "value cannot be converted to type
// ... without overflow"), never an undefined conversion: integers need a finite value in
// range (a fraction truncates, as PyTorch), 16-bit floats one that does not overflow.
static void check_fill_value(const char* op, DType dt, double v) {
  if (dt == DType::bool_ || dt == DType::float32 || dt == DType::float64) return;
  double lo = -0x1p63, hi = 0x1p63;  // the open range (lo - 1, hi) of whole values
  if (dt == DType::int32) lo = -0x1p31, hi = 0x1p31;
  if (dt == DType::uint8) lo = 0, hi = 256;
  if (dt == DType::float16) lo = -65520.0, hi = 65520.0;  // rounds to +-inf at and beyond
  if (dt == DType::bfloat16) lo = -0x1.ffp127, hi = 0x1.ffp127;
  const bool ok = is_floating(dt) ? !std::isfinite(v) || (v > lo && v < hi) : v > lo - 1 && v < hi;
  KILN_CHECK(ok, op, ": value ", v, " cannot be converted to ", dtype_name(dt), " without overflow");
}

Tensor& Tensor::fill_(double v) {
  check_inplace(*this, "fill_");
  check_fill_value("fill_", dtype(), v);
  bump_version();
  fill_data(*this, v);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  check_no_internal_overlap(*this, "copy_");
  bump_version();
  Tensor s = src.shape() == shape() ? src : src.expand(shape());
  if (partially_overlaps(s)) {
    NoGradGuard ng;
    s = s.clone();  // read the whole source before writing any of it
  }
  copy_tensor(*this, s);
  return *this;
}

// ---------------------------------------------------------------- values

double Tensor::item() const {
  KILN_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape_str(shape()));
  Tensor c = is_cpu() ? *this : to(Device::cpu());
  return KILN_DISPATCH_ALL(c.dtype(), "item", [&]<class T>() -> double {
    return static_cast<double>(*static_cast<const T*>(c.raw_data()));
  });
}

int64_t Tensor::item_int64() const {
  KILN_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", shape_str(shape()));
  return to_vector<int64_t>()[0];
}

double Tensor::at(std::initializer_list<int64_t> index) const { return at(Shape(index)); }

double Tensor::at(const Shape& index) const {
  KILN_CHECK(int64_t(index.size()) == dim(), "at: expected ", dim(), " indices for shape ",
             shape_str(shape()), ", got ", index.size());
  int64_t off = 0;
  for (int64_t d = 0; d < dim(); ++d) {
    int64_t i = index[d] < 0 ? index[d] + shape()[d] : index[d];
    KILN_CHECK(i >= 0 && i < shape()[d], "at: index ", index[d], " out of range for dim ", d,
               " of size ", shape()[d], " (shape ", shape_str(shape()), ")");
    off += i * strides()[d];
  }
  Tensor c = *this;
  if (!is_cpu()) KILN_FAIL("at: tensor is on ", device().str(), "; call .to(kiln::Device::cpu()) first");
  return KILN_DISPATCH_ALL(c.dtype(), "at", [&]<class T>() -> double {
    const T v = static_cast<const T*>(c.raw_data())[off];
    return static_cast<double>(v);
  });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detach().to(Device::cpu()).to(dtype_v<T>).contiguous();
  const T* p = static_cast<const T*>(c.raw_data());
  return std::vector<T>(p, p + c.numel());
}
#define KILN_X(e, T, n) template std::vector<T> Tensor::to_vector<T>() const;
KILN_X(f, float, 0) KILN_X(d, double, 0) KILN_X(i, int64_t, 0) KILN_X(i32, int32_t, 0) KILN_X(u, uint8_t, 0)
#undef KILN_X

// ---------------------------------------------------------------- printing

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  Tensor c = detach().to(Device::cpu()).to(is_floating_point() ? DType::float64 : DType::int64).contiguous();
  std::ostringstream os;
  const bool fl = is_floating_point();
  const size_t count = size_t(c.numel());
  auto fmt = [&](size_t i) {  // integers printed from their int64 values (a double loses 2^53 + 1)
    std::ostringstream e;
    const int64_t k = fl ? 0 : c.data<int64_t>()[i];
    const double x = fl ? c.data<double>()[i] : 0.0;
    if (dtype() == DType::bool_) e << (k != 0 ? "True" : "False");
    else if (!fl) e << k;
    else if (std::isnan(x) || std::isinf(x)) e << x;
    else e << std::fixed << std::setprecision(4) << x;
    return e.str();
  };
  const bool summarize = c.numel() > 1000;
  size_t width = 1;
  for (size_t i = 0; i < count; ++i) width = std::max(width, fmt(i).size());
  const Shape& sh = c.shape();
  const int nd = int(sh.size());
  std::string indent = "tensor(";
  // recursive print with an explicit dimension walk
  std::function<void(int, int64_t)> rec = [&](int d, int64_t base) {
    if (d == nd) { std::string s = fmt(size_t(base)); os << std::string(width - s.size(), ' ') << s; return; }
    os << "[";
    int64_t n = sh[d], stride = c.strides()[d];
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 6 && i == 3) {
        os << (d == nd - 1 ? "..., " : "...,\n" + std::string(indent.size() + d + 1, ' '));
        i = n - 3;
      }
      rec(d + 1, base + i * stride);
      if (i + 1 < n) {
        if (d == nd - 1) os << ", ";
        else os << "," << std::string(size_t(nd - d - 1), '\n') << std::string(indent.size() + d + 1, ' ');
      }
    }
    os << "]";
  };
  os << indent;
  rec(0, 0);
  if (dtype() != DType::float32 && dtype() != DType::int64) os << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device='" << device().str() << "'";
  if (grad_fn()) os << ", grad_fn=<" << grad_fn()->name << ">";
  else if (requires_grad()) os << ", requires_grad=True";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ---------------------------------------------------------------- factories

Tensor empty(const Shape& shape, TensorOptions o) {
  Tensor t = empty_for("empty", shape, o.dtype, o.device);
  if (o.requires_grad) t.requires_grad_();
  return t;
}
static Tensor full_for(const char* op, const Shape& shape, double value, TensorOptions o) {
  check_fill_value(op, o.dtype, value);
  Tensor t = empty_for(op, shape, o.dtype, o.device);
  fill_data(t, value);
  if (o.requires_grad) t.requires_grad_();
  return t;
}
Tensor full(const Shape& shape, double value, TensorOptions o) { return full_for("full", shape, value, o); }
Tensor zeros(const Shape& shape, TensorOptions o) { return full_for("zeros", shape, 0.0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return full_for("ones", shape, 1.0, o); }
Tensor scalar_tensor(double value, TensorOptions o) { return full({}, value, o); }

// Builds a CPU float64 tensor from a generator g(i), then converts to the requested options.
template <class G>
static Tensor generate(const char* op, const Shape& shape, TensorOptions o, const G& g) {
  Tensor t = empty_for(op, shape, DType::float64, Device::cpu());
  double* p = t.data<double>();
  parallel_for(0, t.numel(), 16384, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) p[i] = g(i); });
  Tensor r = t.to(o.dtype).to(o.device);
  if (o.requires_grad) r.requires_grad_();
  return r;
}

// PyTorch's arange: ceil((end - start) / step) values in double; an integer dtype steps from
// the truncated start by the truncated step (arange(-3.5, 2, 1.5, int64) is -3, -2, -1, 0).
Tensor arange(double start, double end, double step, TensorOptions o) {
  KILN_CHECK(o.dtype != DType::bool_, "arange: not defined for bool tensors");
  KILN_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ", start, ", end ",
             end, " and step ", step, " must be finite");
  KILN_CHECK(step != 0, "arange: step must be nonzero");
  KILN_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), "arange: the range [", start, ", ", end,
             ") is inconsistent with the sign of step ", step);
  const double span = std::ceil((end - start) / step);
  KILN_CHECK(span < 0x1p62, "arange: [", start, ", ", end, ") with step ", step,
             " has too many elements (expected fewer than 2^62)");
  const int64_t n = int64_t(span);
  if (!is_floating(o.dtype)) {
    const double a = std::trunc(start), d = std::trunc(step);
    return generate("arange", {n}, o, [&](int64_t i) { return a + double(i) * d; });
  }
  if (!o.device.is_cpu()) {  // computed on the device: the same float64 values, nothing uploaded
    Tensor t = empty_for("arange", {n}, o.dtype, o.device);
    if (fill_range_on_device(t, start, step)) {
      if (o.requires_grad) t.requires_grad_();
      return t;
    }
  }
  return generate("arange", {n}, o, [&](int64_t i) { return start + double(i) * step; });
}
Tensor arange(double end, TensorOptions o) { return arange(0.0, end, 1.0, o); }

// PyTorch's linspace: from both ends (the first half from start, the second from end), in
// float32 arithmetic for float32 tensors and float64 otherwise; one step gives start.
Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  KILN_CHECK(steps >= 0, "linspace: steps must be >= 0, got ", steps);
  KILN_CHECK(o.dtype != DType::bool_, "linspace: not defined for bool tensors");
  if (!is_floating(o.dtype)) {  // PyTorch converts the ends to the integer type first
    KILN_CHECK(std::isfinite(start) && std::isfinite(end), "linspace: start ", start, " and end ", end,
               " must be finite for ", dtype_name(o.dtype));
    start = std::trunc(start);
    end = std::trunc(end);
  }
  if (steps == 1) return full({1}, start, o);
  const int64_t half = steps / 2;
  if (o.dtype == DType::float32) {
    const float a = float(start), b = float(end), h = steps > 1 ? (b - a) / float(steps - 1) : 0.0f;
    return generate("linspace", {steps}, o, [&](int64_t i) {
      return double(i < half ? a + h * float(i) : b - h * float(steps - 1 - i));
    });
  }
  const double h = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  return generate("linspace", {steps}, o, [&](int64_t i) {
    return i < half ? start + h * double(i) : end - h * double(steps - 1 - i);
  });
}

Tensor eye(int64_t n, int64_t m, TensorOptions o) {
  if (m == -1) m = n;
  KILN_CHECK(n >= 0 && m >= 0, "eye: expected n >= 0 and m >= 0, got n = ", n, ", m = ", m);
  return generate("eye", {n, m}, o, [m](int64_t i) { return i / m == i % m ? 1.0 : 0.0; });
}

// Random factories draw in the target precision's bits: float32 tensors use 24-bit
// uniforms (4 per Philox block), float64 53-bit ones (2 per block).
Tensor rand(const Shape& shape, TensorOptions o) {
  KILN_CHECK(is_floating(o.dtype), "rand: expected a floating dtype, got ", dtype_name(o.dtype),
             " (randint draws integers)");
  int64_t n = shape_numel(shape, "rand");
  if (o.dtype == DType::float64) {
    RngState s = rng_reserve(uint64_t((n + 1) / 2));
    return generate("rand", shape, o, [&](int64_t i) {
      Philox4 r = philox4x32(s.offset + uint64_t(i / 2), 0, s.seed);
      int w = int(i % 2) * 2;
      return uint_to_uniform_double(r.x[w], r.x[w + 1]);
    });
  }
  RngState s = rng_reserve(uint64_t((n + 3) / 4));
  // 16-bit dtypes keep their own precision's top bits (11 for float16, 8 for bfloat16):
  // rounding a 24-bit uniform to them would give 1.0 now and then, outside [0, 1)
  const double keep = o.dtype == DType::float16 ? 0x1p11 : o.dtype == DType::bfloat16 ? 0x1p8 : 0.0;
  return generate("rand", shape, o, [&](int64_t i) {
    Philox4 r = philox4x32(s.offset + uint64_t(i / 4), 0, s.seed);
    const double u = double(uint_to_uniform_float(r.x[i % 4]));
    return keep > 0 ? std::floor(u * keep) / keep : u;
  });
}

Tensor randn(const Shape& shape, TensorOptions o) {
  KILN_CHECK(is_floating(o.dtype), "randn: expected a floating dtype, got ", dtype_name(o.dtype));
  int64_t n = shape_numel(shape, "randn");
  RngState s = rng_reserve(uint64_t(n));
  return generate("randn", shape, o, [&](int64_t i) {
    // Box-Muller on two uniforms from this element's own Philox block
    Philox4 r = philox4x32(s.offset + uint64_t(i), 0, s.seed);
    double u1 = uint_to_uniform_double(r.x[0], r.x[1]);
    double u2 = uint_to_uniform_double(r.x[2], r.x[3]);
    u1 = u1 < 1e-300 ? 1e-300 : u1;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o) {
  KILN_CHECK(high > low, "randint: expected high > low, got low=", low, " high=", high);
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();  // [lo, hi]
  if (o.dtype == DType::int32) lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  if (o.dtype == DType::uint8) lo = 0, hi = 255;
  if (o.dtype == DType::bool_) lo = 0, hi = 1;
  KILN_CHECK(low >= lo && high - 1 <= hi, "randint: [", low, ", ", high, ") does not fit ", dtype_name(o.dtype));
  int64_t n = shape_numel(shape, "randint");
  RngState s = rng_reserve(uint64_t((n + 1) / 2));
  const uint64_t range = uint64_t(high) - uint64_t(low);  // wraps, never overflows
  // drawn in int64 (exact; through float64 the largest ranges lost bits), then converted
  Tensor t = empty_for("randint", shape, DType::int64, Device::cpu());
  int64_t* p = t.data<int64_t>();
  parallel_for(0, t.numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Philox4 r = philox4x32(s.offset + uint64_t(i / 2), 0, s.seed);
      int w = int(i % 2) * 2;
      uint64_t v = (uint64_t(r.x[w]) << 32) | r.x[w + 1];
      p[i] = int64_t(uint64_t(low) + v % range);
    }
  });
  Tensor out = t.to(o.dtype).to(o.device);
  if (o.requires_grad) out.requires_grad_();
  return out;
}

Tensor from_blob(const void* data, const Shape& shape, DType src_dtype, TensorOptions o) {
  Tensor src = empty_for("from_blob", shape, src_dtype, Device::cpu());
  if (src.numel() > 0) std::memcpy(src.raw_data(), data, size_t(src.numel()) * dtype_size(src_dtype));
  Tensor r = src.to(o.dtype).to(o.device);
  if (o.requires_grad) r.requires_grad_();
  return r;
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions o) {
  KILN_CHECK(int64_t(values.size()) == shape_numel(shape, "from_vector"), "from_vector: ", values.size(),
             " values do not fill shape ", shape_str(shape), " (", shape_numel(shape), " elements)");
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> b(values.begin(), values.end());
    return from_blob(b.data(), shape, DType::bool_, o);
  } else {
    return from_blob(values.data(), shape, dtype_v<T>, o);
  }
}
#define KILN_X(T) template Tensor from_vector<T>(const std::vector<T>&, const Shape&, TensorOptions);
KILN_X(float) KILN_X(double) KILN_X(int64_t) KILN_X(int32_t) KILN_X(uint8_t) KILN_X(bool)
#undef KILN_X

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {t.dtype(), t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {t.dtype(), t.device()}); }
Tensor full_like(const Tensor& t, double v) { return full(t.shape(), v, {t.dtype(), t.device()}); }
Tensor rand_like(const Tensor& t) { return rand(t.shape(), {t.dtype(), t.device()}); }
Tensor randn_like(const Tensor& t) { return randn(t.shape(), {t.dtype(), t.device()}); }

}  // namespace kiln
