// CUDA kernels of the broadcasting binary ops (arithmetic, maximum/minimum, comparisons):
// the generic strided loop of core/cuda/loops.cuh over the operands' own strides (0 on
// broadcast dims), vectorised when all three are contiguous. Kernel type BinaryKernelFn.
#include "kiln/core/cuda/loops.cuh"
#include "kiln/ops/kernels/elementwise.h"
#include "kiln/ops/cuda/dtype_dispatch.h"
#include "kiln/ops/elementwise_functors.h"
#include "kiln/ops/cuda/index_math.h"

namespace kiln {
namespace {
using namespace kiln::cuda;
using namespace kiln::elementwise;

// ---- launchers ----

// The switch over the binary rows of ops/elementwise_ops.def.
template <class T>
void binary_typed(Op op, const LoopLayout<3>& L, void* const* p) {
  using C = compute_t<T>;
  using same = T;
  using bool_ = bool;
  switch (op) {
#define KILN_BINARY(name, Fn, result) \
  case Op::name: return launch_elementwise<result, T, T>(L, p, Fn##F<C>{});
#include "kiln/ops/elementwise_ops.def"
#undef KILN_BINARY
    default: KILN_FAIL("elementwise: op ", op_name(op), " is not a binary op");
  }
}

}  // namespace

void binary_cuda(Op op, DType dt, const EwArgs& args) {
  const LoopLayout<3> L = layout_from_args<3>(args);
  if (dt == DType::bool_) {  // one byte, 0 or 1 (bool_binary_op: or = max, and = min)
    binary_typed<uint8_t>(bool_binary_op(op), L, args.ptr);
    return;
  }
  dispatch_numeric(dt, op_name(op), [&]<class T>() { binary_typed<T>(op, L, args.ptr); });
}

}  // namespace kiln
