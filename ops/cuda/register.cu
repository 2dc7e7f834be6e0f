// register_cuda_kernels(): the list of CUDA op families. Adding a family: its
// register_cuda_<family>() in ops/cuda/<family>.cu, a declaration in register.h, a line here.
#include "kiln/ops/cuda/register.h"

namespace kiln {

void register_cuda_kernels() {
  register_cuda_elementwise();
  register_cuda_linalg();
  register_cuda_reduce();
  register_cuda_norm();
  register_cuda_conv();
  register_cuda_shape();
  register_cuda_nn();
  register_cuda_loss();
}

}  // namespace kiln
