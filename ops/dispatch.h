// Dispatch: a table of kernels keyed by (op, device type). CPU kernels are registered on
// first use by register_cpu_kernels(); the CUDA backend registers its own at start-up.
// A missing entry throws a kiln::Error naming the op and the device.
#pragma once
#include <cstdint>
#include "core/device.h"
#include "core/error.h"

namespace kiln {

enum class Op : uint16_t {
#define KILN_OP(name) name,
#include "ops/op_list.def"
#undef KILN_OP
  kCount
};

/// "relu", "matmul", ...
const char* op_name(Op op);

/// Stores fn (a kernel function pointer of the op's kernel type) for (op, device type).
void register_kernel(Op op, DeviceType dev, void* fn);
/// True when (op, device type) has a kernel (tests use it to skip cleanly).
bool supports(Op op, DeviceType dev);
/// The raw kernel pointer; throws kiln::Error naming op and device if there is none.
void* lookup_kernel(Op op, Device dev);

/// Typed lookup: kernel<UnaryKernel>(Op::relu, x.device())(...).
template <class Fn>
Fn* kernel(Op op, Device dev) { return reinterpret_cast<Fn*>(lookup_kernel(op, dev)); }

/// Registers every CPU kernel (idempotent; called by lookup_kernel on first use).
void register_cpu_kernels();

// One registration function per op family, defined in ops/cpu/<family>.cpp.
void register_cpu_elementwise();
void register_cpu_reduce();
void register_cpu_linalg();
void register_cpu_conv();  // and, through register_cpu_pool (ops/cpu/pool.cpp), pooling
void register_cpu_pool();
void register_cpu_norm();
void register_cpu_nn();
void register_cpu_shape();
void register_cpu_loss();

}  // namespace kiln
