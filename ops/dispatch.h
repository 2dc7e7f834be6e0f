// Dispatch: tables of kernels keyed by (op, device type), one table per kernel type. CPU
// kernels are registered on first use by register_cpu_kernels(), and with them, in a CUDA
// build, the CUDA ones. A missing entry throws a kiln::Error naming the op and the device.
#pragma once
#include <array>
#include <cstdint>
#include <type_traits>
#include "kiln/core/device.h"
#include "kiln/core/error.h"

namespace kiln {

enum class Op : uint16_t {
#define KILN_OP(name) name,
#include "kiln/ops/op_list.def"
#undef KILN_OP
  kCount
};

/// "relu", "matmul", ...
const char* op_name(Op op);

/// Registers every CPU kernel, and the CUDA ones in a CUDA build (idempotent; called by
/// kernel<>() and supports() on first use).
void register_cpu_kernels();

namespace detail {
constexpr size_t kNumOps = size_t(Op::kCount);
/// How a kernel of type K is held: a function type K as a function pointer, a struct of
/// function pointers (a family's kernel table) as a pointer to const.
template <class K> using KernelPtr = std::conditional_t<std::is_function_v<K>, K*, const K*>;
/// One slot table per kernel type: a kernel is registered and looked up through the same
/// type, so it can never be read back as another (a lookup with the wrong type finds an
/// empty slot and throws). Constant-initialised, filled once by register_cpu_kernels().
template <class K>
inline std::array<std::array<KernelPtr<K>, kNumDeviceTypes>, kNumOps> g_kernel_slots{};
void note_registered(Op op, DeviceType dev);
[[noreturn]] void throw_no_kernel(Op op, Device dev);
}  // namespace detail

/// Stores a kernel for (op, device type): a function (its type is the op's kernel type,
/// e.g. UnaryKernelFn) or a family's table of functions (e.g. &kConv2dCpu).
template <class Fn>
  requires std::is_function_v<Fn>
void register_kernel(Op op, DeviceType dev, Fn* fn) {
  detail::g_kernel_slots<Fn>[size_t(op)][size_t(dev)] = fn;
  detail::note_registered(op, dev);
}
template <class Table>
  requires std::is_class_v<Table>
void register_kernel(Op op, DeviceType dev, const Table* table) {
  detail::g_kernel_slots<Table>[size_t(op)][size_t(dev)] = table;
  detail::note_registered(op, dev);
}

/// True when (op, device type) has a kernel (tests use it to skip cleanly).
bool supports(Op op, DeviceType dev);

/// The kernel of type K for (op, dev): kernel<UnaryKernelFn>(Op::relu, x.device())(...),
/// kernel<Conv2dKernels>(Op::conv2d, x.device())->forward(...). Throws kiln::Error naming
/// op and device if there is none.
template <class K>
detail::KernelPtr<std::remove_cv_t<K>> kernel(Op op, Device dev) {
  register_cpu_kernels();
  const auto k = detail::g_kernel_slots<std::remove_cv_t<K>>[size_t(op)][size_t(dev.type)];
  if (k == nullptr) detail::throw_no_kernel(op, dev);
  return k;
}


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
