// The dispatch tables (ops/dispatch.h): one table per kernel type, so a kernel is found
// only through the type it was registered with, and every miss is a kiln::Error naming
// the op and the device, never a call through a pointer of the wrong type.
#include <doctest/doctest.h>
#include "gradcheck.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/kernels/conv.h"
#include "kiln/ops/kernels/elementwise.h"

using namespace kiln;

TEST_CASE("dispatch: a kernel is found through its own type and no other") {
  CHECK(supports(Op::relu, DeviceType::CPU));
  CHECK((kernel<UnaryKernelFn>(Op::relu, Device::cpu()) != nullptr));
  CHECK(kernel<const Conv2dKernels>(Op::conv2d, Device::cpu()) == kernel<Conv2dKernels>(Op::conv2d, Device::cpu()));
  // relu's kernel is a UnaryKernelFn: asking for a binary or a conv kernel finds nothing
  std::string e = test::error_of([] { kernel<BinaryKernelFn>(Op::relu, Device::cpu()); });
  CHECK(e.find("relu") != std::string::npos);
  CHECK(e.find("no kernel for device cpu") != std::string::npos);
  e = test::error_of([] { kernel<Conv2dKernels>(Op::matmul, Device::cpu()); });
  CHECK(e.find("matmul") != std::string::npos);
}

TEST_CASE("dispatch: every elementwise row has a CPU kernel of its type") {
#define KILN_UNARY(name, ...) CHECK((kernel<UnaryKernelFn>(Op::name, Device::cpu()) != nullptr));
#define KILN_BINARY(name, ...) CHECK((kernel<BinaryKernelFn>(Op::name, Device::cpu()) != nullptr));
#include "kiln/ops/elementwise_ops.def"
#undef KILN_UNARY
#undef KILN_BINARY
}
