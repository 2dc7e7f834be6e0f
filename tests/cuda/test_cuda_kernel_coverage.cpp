// Every op with a CPU kernel has a CUDA kernel too, and the fused optimizer kernels exist,
// in a build with the CUDA backend. Registration makes no CUDA call, so this runs on
// machines without a GPU: a forgotten register_cuda_<family>() line fails here, not on
// the first GPU run. Skipped (visibly) in a CPU-only build.
#include <doctest/doctest.h>
#include <string>
#include "gradcheck.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/kernels/conv.h"
#include "kiln/ops/kernels/elementwise.h"
#include "kiln/optim/update_kernels.h"

using namespace kiln;

#if defined(KILN_WITH_CUDA)
constexpr bool kCpuOnlyBuild = false;
#else
constexpr bool kCpuOnlyBuild = true;
#endif

TEST_CASE("every op with a CPU kernel has a CUDA kernel" * doctest::skip(kCpuOnlyBuild)) {
  int cpu_ops = 0;
  std::string missing;
  for (size_t i = 0; i < size_t(Op::kCount); ++i) {
    const Op op = Op(i);
    if (!supports(op, DeviceType::CPU)) continue;
    ++cpu_ops;
    if (!supports(op, DeviceType::CUDA)) missing += std::string(missing.empty() ? "" : ", ") + op_name(op);
  }
  INFO("ops without a CUDA kernel: " << missing);
  CHECK(missing.empty());
  CHECK(cpu_ops > 40);
}

TEST_CASE("CUDA kernels registered in nvcc-compiled files are found through the typed tables" *
          doctest::skip(kCpuOnlyBuild)) {
  // registration (ops/cuda/*.cu, compiled by nvcc's host compiler) and lookup (here, g++)
  // must meet in the same slot table of each kernel type: a lookup only, no launch
  CHECK((kernel<UnaryKernelFn>(Op::relu, Device::cuda(0)) != nullptr));
  CHECK((kernel<BinaryKernelFn>(Op::add, Device::cuda(0)) != nullptr));
  CHECK(kernel<Conv2dKernels>(Op::conv2d, Device::cuda(0)) != nullptr);
  CHECK(kernel<Conv2dKernels>(Op::conv2d, Device::cuda(0)) != kernel<Conv2dKernels>(Op::conv2d, Device::cpu()));
}

TEST_CASE("the fused optimizer kernels are registered for CUDA" * doctest::skip(kCpuOnlyBuild)) {
  using optim::FusedUpdate;
  for (FusedUpdate k : {FusedUpdate::sgd_multi, FusedUpdate::adam_multi, FusedUpdate::unscale_multi,
                        FusedUpdate::scale_update}) {
    INFO("kind " << int(k));
    CHECK(optim::fused_update_kernel(k, Device::cuda(0)) != nullptr);
  }
}

TEST_CASE("in a CPU-only build, a CUDA kernel lookup names the op and the device") {
  if (!kCpuOnlyBuild) {
    MESSAGE("skipped: the CUDA table is complete in this build");
    return;
  }
  const std::string e = test::error_of([] { kernel<UnaryKernelFn>(Op::relu, Device::cuda(0)); });
  CHECK(e.find("relu") != std::string::npos);
  CHECK(e.find("cuda") != std::string::npos);
}
