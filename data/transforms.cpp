// Transforms on CPU tensors: plain loops over (sample, channel, row), one allocation
// per call. Random transforms draw per sample in sample order from the given Rng.
#include "kiln/data/transforms.h"
#include <algorithm>
#include <cstring>
#include "kiln/core/error.h"

namespace kiln::data {

namespace {
void check_input(const Tensor& x, const char* op, int64_t min_dim) {
  KILN_CHECK(x.defined(), op, ": undefined input tensor");
  KILN_CHECK(x.is_cpu(), op, ": expected a CPU tensor, got one on ", x.device().str());
  KILN_CHECK(x.dim() >= min_dim, op, ": expected at least ", min_dim, " dims, got shape ", shape_str(x.shape()));
}
// Product of all dims before the trailing `keep` ones.
int64_t leading(const Tensor& x, int64_t keep) {
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim() - keep; ++d) n *= x.size(d);
  return n;
}
}  // namespace

Tensor ToTensor::operator()(const Tensor& x, Rng&) const {
  check_input(x, "ToTensor", 2);
  KILN_CHECK(x.dtype() == DType::uint8, "ToTensor: expected uint8 pixels (H, W, C), got dtype ",
             dtype_name(x.dtype()), " with shape ", shape_str(x.shape()));
  Tensor c = x.detach().contiguous();
  if (c.dim() == 2) c = c.reshape({c.size(0), c.size(1), 1});
  const int64_t H = c.size(-3), W = c.size(-2), C = c.size(-1), N = leading(c, 3);
  Shape out_shape(c.shape().begin(), c.shape().end() - 3);
  out_shape.insert(out_shape.end(), {C, H, W});
  Tensor out = Tensor::empty(out_shape, DType::float32);
  const uint8_t* src = c.data<uint8_t>();
  float* dst = out.data<float>();
  const float inv = 1.0f / 255.0f;
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* s = src + n * H * W * C;  // (H, W, C)
    float* d = dst + n * C * H * W;          // (C, H, W)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t p = 0; p < H * W; ++p) d[ch * H * W + p] = float(s[p * C + ch]) * inv;
  }
  return out;
}

Tensor Normalize::operator()(const Tensor& x, Rng&) const {
  check_input(x, "Normalize", 3);
  KILN_CHECK(x.dtype() == DType::float32 || x.dtype() == DType::float64, "Normalize: expected a float32 or "
             "float64 tensor (..., C, H, W), got dtype ", dtype_name(x.dtype()));
  const int64_t C = x.size(-3), HW = x.size(-2) * x.size(-1), N = leading(x, 3);
  KILN_CHECK(!mean.empty() && mean.size() == std.size(), "Normalize: mean (", mean.size(), " values) and std (",
             std.size(), " values) must be non-empty and of equal length");
  KILN_CHECK(mean.size() == 1 || int64_t(mean.size()) == C, "Normalize: ", mean.size(),
             " mean/std values for a tensor with ", C, " channels (shape ", shape_str(x.shape()), ")");
  for (double s : std) KILN_CHECK(s != 0.0, "Normalize: std values must be nonzero");
  Tensor c = x.detach().contiguous();
  Tensor out = Tensor::empty(c.shape(), c.dtype());
  KILN_DISPATCH_FLOATING(c.dtype(), "Normalize", [&]<class T>() {
    const T* s = static_cast<const T*>(c.raw_data());
    T* d = static_cast<T*>(out.raw_data());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ch = 0; ch < C; ++ch) {
        const size_t k = mean.size() == 1 ? 0 : size_t(ch);
        const T m = T(mean[k]), inv = T(1.0 / std[k]);
        const int64_t base = (n * C + ch) * HW;
        for (int64_t p = 0; p < HW; ++p) d[base + p] = (s[base + p] - m) * inv;
      }
  });
  return out;
}

Tensor RandomCrop::operator()(const Tensor& x, Rng& rng) const {
  check_input(x, "RandomCrop", 2);
  const int64_t H = x.size(-2), W = x.size(-1), P = padding;
  KILN_CHECK(height > 0 && width > 0 && P >= 0, "RandomCrop: expected height, width > 0 and padding >= 0, got ",
             height, "x", width, " padding ", P);
  KILN_CHECK(height <= H + 2 * P && width <= W + 2 * P, "RandomCrop: crop ", height, "x", width,
             " is larger than the padded image ", H + 2 * P, "x", W + 2 * P, " (input shape ", shape_str(x.shape()), ")");
  // samples: everything before (C, H, W); images with 2 dims are one sample of one channel
  const int64_t per = x.dim() >= 3 ? 3 : 2;
  const int64_t N = leading(x, per), C = per == 3 ? x.size(-3) : 1;
  Tensor c = x.detach().contiguous();
  Shape out_shape = c.shape();
  out_shape[out_shape.size() - 2] = height;
  out_shape[out_shape.size() - 1] = width;
  Tensor out = zeros(out_shape, {.dtype = c.dtype()});
  const size_t es = c.element_size();
  const char* src = static_cast<const char*>(c.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t n = 0; n < N; ++n) {
    // window top-left in padded coordinates
    const int64_t top = rng.randint(0, H + 2 * P - height + 1), left = rng.randint(0, W + 2 * P - width + 1);
    // the part of the window that overlaps the real image
    const int64_t x0 = std::max<int64_t>(left, P), x1 = std::min<int64_t>(left + width, P + W);
    for (int64_t ch = 0; ch < C; ++ch) {
      const char* s = src + size_t((n * C + ch) * H * W) * es;
      char* d = dst + size_t((n * C + ch) * height * width) * es;
      if (x1 <= x0) continue;
      for (int64_t r = 0; r < height; ++r) {
        const int64_t sr = top + r - P;
        if (sr < 0 || sr >= H) continue;
        std::memcpy(d + size_t(r * width + (x0 - left)) * es, s + size_t(sr * W + (x0 - P)) * es,
                    size_t(x1 - x0) * es);
      }
    }
  }
  return out;
}

namespace {
template <class E>
void flip_rows(E* p, int64_t rows, int64_t W) {
  for (int64_t r = 0; r < rows; ++r) {
    E* row = p + r * W;
    for (int64_t i = 0, j = W - 1; i < j; ++i, --j) std::swap(row[i], row[j]);
  }
}
}  // namespace

Tensor RandomHorizontalFlip::operator()(const Tensor& x, Rng& rng) const {
  check_input(x, "RandomHorizontalFlip", 2);
  KILN_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: p must be in [0, 1], got ", p);
  const int64_t per = x.dim() >= 3 ? 3 : 2;
  const int64_t N = leading(x, per), W = x.size(-1);
  const int64_t rows = x.numel() / (N ? N : 1) / (W ? W : 1);  // C * H rows per sample
  Tensor out = x.detach().clone();
  char* base = static_cast<char*>(out.raw_data());
  const size_t es = out.element_size();
  for (int64_t n = 0; n < N; ++n) {
    if (!rng.bernoulli(p)) continue;
    char* s = base + size_t(n * rows * W) * es;
    switch (es) {
      case 1: flip_rows(reinterpret_cast<uint8_t*>(s), rows, W); break;
      case 2: flip_rows(reinterpret_cast<uint16_t*>(s), rows, W); break;
      case 4: flip_rows(reinterpret_cast<uint32_t*>(s), rows, W); break;
      default: flip_rows(reinterpret_cast<uint64_t*>(s), rows, W); break;
    }
  }
  return out;
}

Compose& Compose::push_back(Transform t) {
  ts_.push_back(std::move(t));
  return *this;
}

Tensor Compose::operator()(const Tensor& x, Rng& rng) const {
  Tensor y = x;
  for (const auto& t : ts_) {
    KILN_CHECK(t != nullptr, "Compose: empty transform in the pipeline");
    y = t(y, rng);
  }
  return y;
}

}  // namespace kiln::data
