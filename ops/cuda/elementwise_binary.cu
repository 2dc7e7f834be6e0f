// CUDA kernels of the broadcasting binary ops (arithmetic, maximum/minimum, comparisons):
// the generic strided loop of core/cuda/loops.cuh over the operands' own strides (0 on
// broadcast dims), vectorised when all three are contiguous. Kernel type BinaryKernelFn.
#include <type_traits>
#include "core/cuda/loops.cuh"
#include "ops/cpu/elementwise_kernels.h"
#include "ops/cuda/dtype_dispatch.h"
#include "ops/cuda/elementwise_functors.h"
#include "ops/cuda/index_math.h"

namespace kiln {
namespace {
using namespace kiln::cuda;

// ---- launchers ----

template <class T>
void binary_typed(Op op, const LoopLayout<3>& L, void* const* p) {
  using C = compute_t<T>;
  switch (op) {
    case Op::add: return launch_elementwise<T, T, T>(L, p, AddF<C>{});
    case Op::sub: return launch_elementwise<T, T, T>(L, p, SubF<C>{});
    case Op::mul: return launch_elementwise<T, T, T>(L, p, MulF<C>{});
    case Op::div:
      if constexpr (std::is_integral_v<T>) return launch_elementwise<T, T, T>(L, p, IntDivF<C>{});
      else return launch_elementwise<T, T, T>(L, p, DivF<C>{});
    case Op::pow:
      if constexpr (std::is_integral_v<T>) KILN_FAIL("pow: no CUDA kernel for integer tensors (kiln::pow computes them in float32)");
      else return launch_elementwise<T, T, T>(L, p, PowF<C>{});
    case Op::maximum: return launch_elementwise<T, T, T>(L, p, MaximumF<C>{});
    case Op::minimum: return launch_elementwise<T, T, T>(L, p, MinimumF<C>{});
    case Op::eq: return launch_elementwise<bool, T, T>(L, p, EqF<C>{});
    case Op::ne: return launch_elementwise<bool, T, T>(L, p, NeF<C>{});
    case Op::lt: return launch_elementwise<bool, T, T>(L, p, LtF<C>{});
    case Op::le: return launch_elementwise<bool, T, T>(L, p, LeF<C>{});
    case Op::gt: return launch_elementwise<bool, T, T>(L, p, GtF<C>{});
    case Op::ge: return launch_elementwise<bool, T, T>(L, p, GeF<C>{});
    default: KILN_FAIL("elementwise: op ", op_name(op), " is not a binary op");
  }
}

}  // namespace

void binary_cuda(Op op, DType dt, const EwArgs& args) {
  const LoopLayout<3> L = layout_from_args<3>(args);
  if (dt == DType::bool_) {  // bool is one byte: compare the bytes
    KILN_CHECK(op == Op::eq || op == Op::ne, op_name(op), ": not supported for bool tensors");
    if (op == Op::eq) launch_elementwise<bool, uint8_t, uint8_t>(L, args.ptr, EqF<uint8_t>{});
    else launch_elementwise<bool, uint8_t, uint8_t>(L, args.ptr, NeF<uint8_t>{});
    return;
  }
  dispatch_numeric(dt, op_name(op), [&]<class T>() { binary_typed<T>(op, L, args.ptr); });
}

}  // namespace kiln
