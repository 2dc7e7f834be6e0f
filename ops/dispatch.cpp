// Which (op, device) pairs have a kernel (the typed tables are in dispatch.h), and the op name table generated from ops/op_list.def.
#include "kiln/ops/dispatch.h"
#include <array>
#include <mutex>
#ifdef KILN_WITH_CUDA
#include "kiln/ops/cuda/register.h"
#endif

namespace kiln {

namespace {
using detail::kNumOps;
const char* kOpNames[] = {
#define KILN_OP(name) #name,
#include "kiln/ops/op_list.def"
#undef KILN_OP
};
std::array<std::array<bool, kNumDeviceTypes>, kNumOps> g_registered{};
std::once_flag g_cpu_once;
}  // namespace

const char* op_name(Op op) { return size_t(op) < kNumOps ? kOpNames[size_t(op)] : "?"; }

void detail::note_registered(Op op, DeviceType dev) { g_registered[size_t(op)][size_t(dev)] = true; }

void register_cpu_kernels() {
  std::call_once(g_cpu_once, [] {
    register_cpu_elementwise();
    register_cpu_reduce();
    register_cpu_linalg();
    register_cpu_conv();
    register_cpu_norm();
    register_cpu_nn();
    register_cpu_shape();
    register_cpu_loss();
#ifdef KILN_WITH_CUDA
    register_cuda_kernels();  // ops/cuda/register.cu (makes no CUDA call)
#endif
  });
}

bool supports(Op op, DeviceType dev) {
  register_cpu_kernels();
  return g_registered[size_t(op)][size_t(dev)];
}

void detail::throw_no_kernel(Op op, Device dev) {
  KILN_FAIL(op_name(op), ": no kernel for device ", dev.str(),
            dev.is_cuda() ? " (this build has no CUDA kernel for it, or the CUDA backend is not built)" : "");
}

}  // namespace kiln
