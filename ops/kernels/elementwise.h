// Kernel signatures of the elementwise family (shared by the CPU and CUDA backends).
// Kernels get raw pointers, a shape and per-operand strides (0 on broadcast dims).
#pragma once
#include <cstdint>
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"

namespace kiln {

constexpr int kMaxDims = 16;

/// Up to 4 operands over one index space: operand 0 is the output. `dtype`: each operand's
/// storage dtype (make_args fills it from the tensors).
struct EwArgs {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[4][kMaxDims];
  void* ptr[4] = {nullptr, nullptr, nullptr, nullptr};
  DType dtype[4] = {DType::float32, DType::float32, DType::float32, DType::float32};
};

/// out = op(a, b) over a broadcast index space. `dt` is the dtype of a and b; out has dtype
/// `dt` except for comparisons (bool). ptr[0]=out, ptr[1]=a, ptr[2]=b. One exception, on the
/// CPU: with dt float32, a, b and out may be float16 / bfloat16 (args.dtype), widened as they
/// are read and rounded once as out is written (the values of converting them first).
using BinaryKernelFn = void(Op op, DType dt, const EwArgs& args);

/// Two bool tensors are bytes holding 0 or 1 and run as uint8 with PyTorch's logical
/// meaning: add and maximum are `or` (the bytes' max), mul and minimum are `and` (their
/// min), comparisons compare the bytes; pow is an error, as in PyTorch (sub refuses any bool
/// operand before it gets here, ops/elementwise.cpp).
inline Op bool_binary_op(Op op) {
  switch (op) {
    case Op::add: case Op::maximum: return Op::maximum;
    case Op::mul: case Op::minimum: return Op::minimum;
    case Op::eq: case Op::ne: case Op::lt: case Op::le: case Op::gt: case Op::ge: return op;
    default: break;
  }
  KILN_FAIL(op_name(op), ": not supported for two bool tensors (convert them to a number dtype first)");
}

/// Unary forward on contiguous arrays: out[i] = op(x[i]; p0, p1).
/// Unary backward (backward=true): out[i] = g[i] * op'(s[i]), where s is what the op's row
/// of ops/elementwise_ops.def reads: the input x, or the forward output y.
struct UnaryArgs {
  int64_t n = 0;
  const void* x = nullptr;   // (n) input (forward only)
  const void* s = nullptr;   // (n) the saved input or output the derivative reads (backward only)
  const void* g = nullptr;   // (n) output gradient (backward only)
  void* out = nullptr;       // (n)
  double p0 = 0, p1 = 0;     // op parameters (slope, clamp bounds, exponent)
  bool backward = false;
};
using UnaryKernelFn = void(Op op, DType dt, const UnaryArgs& args);

/// where / masked_fill: out = cond ? a : b with ptr[0]=out, ptr[1]=cond (bool), ptr[2]=a,
/// ptr[3]=b; `dt` is the dtype of out, a and b.
using WhereKernelFn = void(DType dt, const EwArgs& args);

}  // namespace kiln
