// Helpers every op implementation uses: dim wrapping, broadcasting, device and dtype
// checks, and sum_to (the backward of broadcasting).
#pragma once
#include <string>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

/// Maps a possibly negative dim into [0, ndim); throws naming op and shape otherwise.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
/// Sorted, unique, wrapped dims; an empty list means all dims.
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);

/// NumPy broadcasting of two shapes; throws naming op and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
/// Strides that read `t` as if expanded to `shape` (0 on broadcast dims).
Shape broadcast_strides(const Tensor& t, const Shape& shape, const char* op);

/// Sums g over broadcast dims so it has `shape` (the gradient of an implicit expand).
Tensor sum_to(const Tensor& g, const Shape& shape);

/// The dtype of a binary op's result, PyTorch's rule: promote_types of the two dtypes, except
/// that an operand of a lower tier (a dimensioned tensor > a 0-dim tensor > a wrapped number,
/// i.e. a C++ number an op made a 0-dim tensor: TensorImpl::wrapped_number) only counts when
/// its category (bool < integer < floating) is higher: float32[3] * float64 0-dim is float32,
/// int64[3] * float64 0-dim is float64, uint8 0-dim + 100.0 is uint8.
DType result_type(const Tensor& a, const Tensor& b);

/// Throws unless all defined tensors share one device (message lists them).
void check_same_device(const char* op, std::initializer_list<Tensor> ts);
/// Throws unless t is floating point.
void check_floating(const char* op, const Tensor& t, const char* what = "input");
/// Describes a tensor for messages: "float32[2, 3] on cpu".
std::string describe(const Tensor& t);

/// On the CPU, 16-bit float tensors are computed in float32 and rounded back (so autocast
/// numerics match the GPU's). Returns the dtype kernels should run in for dtype d.
inline DType cpu_compute_dtype(DType d) { return is_half(d) ? DType::float32 : d; }

/// op(x) for a unary op of ops/elementwise_ops.def through its forward kernel, not recorded
/// (a new contiguous tensor of x's dtype). ops/elementwise.cpp.
Tensor unary_raw(Op op, const Tensor& x, double p0 = 0, double p1 = 0);
/// g * op'(s) for a unary op of ops/elementwise_ops.def through its backward kernel, not
/// recorded; s is what the op's row reads (its input or output). ops/elementwise.cpp.
Tensor unary_grad(Op op, const Tensor& g, const Tensor& s, double p0, double p1);
/// op'(s) in recorded ops, for a backward under create_graph (ops with
/// has_recorded_derivative). ops/elementwise.cpp.
Tensor unary_derivative(Op op, const Tensor& s, double p0, double p1);

}  // namespace kiln
