// Tensor: a cheap, shared handle to (storage, shape, strides, offset, dtype) plus the
// autograd fields (requires_grad, grad, grad_fn). Copying a Tensor copies the handle:
// every copy sees the same data, the same .grad and the same requires_grad flag.
// Views (reshape, permute, narrow, ...) make new handles over the same Storage.
#pragma once
#include <initializer_list>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/storage.h"

namespace kiln {

using Shape = std::vector<int64_t>;
struct Node;
struct GradHooks;
class Tensor;

/// The shared state behind a Tensor handle. Users go through Tensor.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;          // in elements
  int64_t offset = 0;     // in elements
  DType dtype = DType::float32;
  // a C++ number made a 0-dim tensor by an op (PyTorch's is_wrapped_number): it ranks below
  // every tensor in result_type (ops/helpers.h)
  bool wrapped_number = false;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;     // the node that produced this tensor (null for leaves)
  std::shared_ptr<GradHooks> hooks;  // a leaf's gradient hooks (core/autograd.h), null when none
};

/// Row-major (C-order) strides for a shape.
Shape contiguous_strides(const Shape& shape);
/// Product of the sizes. Throws kiln::Error naming `op` and the shape when a size is
/// negative or the sizes (zeros left out, so every contiguous stride fits too) multiply
/// past int64: every shape that reaches a Tensor went through this check.
int64_t shape_numel(const Shape& shape, const char* op = "numel");

class Tensor {
 public:
  /// An undefined tensor (defined() is false); used for "no gradient".
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// Allocates an uninitialised contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::float32, Device device = Device::cpu());

  bool defined() const { return impl_ != nullptr; }
  // ---- metadata ----
  const Shape& shape() const { return impl().shape; }
  const Shape& sizes() const { return impl().shape; }
  /// Size of dimension d (negative d counts from the end).
  int64_t size(int64_t d) const;
  const Shape& strides() const { return impl().strides; }
  int64_t stride(int64_t d) const;
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t numel() const { return shape_numel(impl().shape); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  size_t element_size() const { return dtype_size(impl().dtype); }
  Device device() const { return impl().storage->device(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  /// Pointer to the first element (storage data + offset).
  void* raw_data() const;
  /// Typed pointer to the first element; throws if T does not match dtype().
  template <class T> T* data() const {
    KILN_CHECK(dtype_v<T> == dtype(), "Tensor::data<", dtype_name(dtype_v<T>),
               ">: tensor has dtype ", dtype_name(dtype()));
    return static_cast<T*>(raw_data());
  }

  // ---- autograd ----
  bool requires_grad() const { return impl().requires_grad; }
  /// Marks a leaf as needing gradients (returns *this). Only floating tensors can.
  Tensor& requires_grad_(bool r = true);
  /// The accumulated gradient (undefined if none yet).
  Tensor grad() const;
  /// Replaces the gradient (an undefined Tensor clears it); one of another dtype is stored
  /// converted to this tensor's (a copy), one on another device is an error.
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  /// Calls fn on the gradient backward computes for this tensor, before it is used (for a
  /// leaf: summed over all its uses in the graph, before it is added to grad()). fn may
  /// return a replacement gradient, or an undefined Tensor to keep it. Returns an id for
  /// remove_hook. The tensor must require grad.
  int64_t register_hook(std::function<Tensor(const Tensor&)> fn) const;
  /// On a leaf: calls fn(leaf) once per backward, after all of that backward's gradient was
  /// added into grad() (PyTorch's register_post_accumulate_grad_hook; data-parallel
  /// training starts a bucket's all-reduce from it). Returns an id for remove_hook.
  int64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const;
  /// Removes a hook registered on this tensor (an unknown id is ignored).
  void remove_hook(int64_t id) const;
  /// Reverse-mode differentiation from this tensor. Without `grad`, the tensor must have
  /// one element and the seed is 1. Gradients accumulate into leaves' .grad.
  /// create_graph: the gradients get a grad_fn of their own (see kiln::grad, core/autograd.h).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  /// Same data, cut from the graph (requires_grad false, no grad_fn).
  Tensor detach() const;

  // ---- values ----
  /// The single value of a one-element tensor, as double.
  double item() const;
  /// The single value as an int64 (integer tensors exactly: 2^53 + 1 and INT64_MAX survive;
  /// floats truncated, NaN/out of range as Tensor::to(int64) converts them).
  int64_t item_int64() const;
  /// item() as T; integer T goes through item_int64(), so integer tensors stay exact.
  template <class T> T item() const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return static_cast<T>(item_int64());
    else return static_cast<T>(item());
  }
  /// Element at a full index, as double (for tests and debugging; slow).
  double at(std::initializer_list<int64_t> index) const;
  double at(const Shape& index) const;
  /// All elements in row-major order converted to T (copies to CPU if needed).
  template <class T> std::vector<T> to_vector() const;

  // ---- copies and conversions (differentiable) ----
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // ---- views: share storage, never copy (differentiable; defined in ops/views.cpp) ----
  Tensor view(const Shape& shape) const;      ///< needs compatible strides
  Tensor reshape(const Shape& shape) const;   ///< a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;                           ///< transpose of a 2-D tensor
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;    ///< -1 keeps a size
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;

  /// Count of in-place changes to this tensor's data, shared with its views (PyTorch's
  /// `_version`). Every in-place op bumps it; backward refuses tensors saved for it whose
  /// count moved since they were saved.
  uint64_t version() const { return impl().storage->version(); }
  /// Records an in-place change of the data. The `*_` methods call it; so must any code
  /// that writes an existing tensor through raw_data() (fused optimizer kernels, ...).
  void bump_version() const { impl().storage->bump_version(); }

  // ---- in-place (not recorded by autograd; refused on tensors that need grad while
  //      grad mode is on, except under NoGradGuard as optimizers do; each bumps version()).
  //      copy_, add_ and mul_ refuse a destination whose elements share memory (an expanded
  //      tensor), and read a source that overlaps the destination from a copy (b.add_(b.t())
  //      gives b + b^T, as PyTorch would if it did not refuse it) ----
  Tensor& zero_();
  Tensor& fill_(double value);
  /// Copies src (broadcast to this shape, any dtype/device) into this tensor.
  Tensor& copy_(const Tensor& src);
  /// this += alpha * other (other broadcast to this shape).
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(double s);

  /// Whether two elements of this tensor are one memory location (a stride 0 over a dim of
  /// size > 1, as expand makes).
  bool has_internal_overlap() const;
  /// Whether this tensor and `other` share memory without being the very same view.
  bool partially_overlaps(const Tensor& other) const;

  /// Readable printing, PyTorch-like.
  std::string str() const;

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// True when both handles share one TensorImpl.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories ----
struct TensorOptions {
  DType dtype = DType::float32;
  Device device = Device::cpu();
  bool requires_grad = false;
};
Tensor empty(const Shape& shape, TensorOptions o = {});
Tensor zeros(const Shape& shape, TensorOptions o = {});
Tensor ones(const Shape& shape, TensorOptions o = {});
Tensor full(const Shape& shape, double value, TensorOptions o = {});
/// [start, end) with step, like torch.arange (default dtype int64 when all are integral is
/// not guessed: pass the dtype you want; float32 by default).
Tensor arange(double start, double end, double step = 1.0, TensorOptions o = {});
Tensor arange(double end, TensorOptions o = {});
/// steps values from start to end, as torch.linspace (an integer dtype truncates start and
/// end first, then truncates each value: linspace(-5.5, 5.5, 4, int64) is -5, -1, 1, 5).
Tensor linspace(double start, double end, int64_t steps, TensorOptions o = {});
/// The n x m identity (ones on the main diagonal), m = n when omitted; torch.eye.
Tensor eye(int64_t n, int64_t m = -1, TensorOptions o = {});
/// Uniform [0, 1) from the global Philox generator.
Tensor rand(const Shape& shape, TensorOptions o = {});
/// Standard normal from the global Philox generator.
Tensor randn(const Shape& shape, TensorOptions o = {});
/// Uniform integers in [low, high); int64 by default.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o = {.dtype = DType::int64});
/// Copies values into a new tensor of the given shape (numel must match).
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions o = {.dtype = dtype_v<T>});
/// 1-D tensor from values.
template <class T>
Tensor from_vector(const std::vector<T>& values) { return from_vector(values, {int64_t(values.size())}); }
/// Copies numel(shape) elements of dtype src_dtype from a raw host buffer.
Tensor from_blob(const void* data, const Shape& shape, DType src_dtype, TensorOptions o = {});
/// A 0-dim tensor holding value.
Tensor scalar_tensor(double value, TensorOptions o = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);

}  // namespace kiln
