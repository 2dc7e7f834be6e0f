// Registration of the CUDA kernels in the dispatch table, one function per op family
// (each defined in its ops/cuda/<family>.cu). register_cuda_kernels() is called once by
// ops/dispatch.cpp when the build has the CUDA backend; it makes no CUDA call, so it is
// safe on machines without a GPU.
#pragma once

namespace kiln {

/// Registers every CUDA kernel (ops/cuda/register.cu).
void register_cuda_kernels();

// One per family.
void register_cuda_elementwise();  // ops/cuda/elementwise.cu
void register_cuda_linalg();       // ops/cuda/linalg.cu (cuBLAS)
void register_cuda_reduce();       // ops/cuda/reduce.cu (reductions, softmax)
void register_cuda_norm();         // ops/cuda/norm.cu (layer_norm)
void register_cuda_conv();         // ops/cuda/conv.cu (conv2d via cuDNN, pooling)
void register_cuda_shape();        // ops/cuda/shape.cu (cat, stack, index_select, gather)
void register_cuda_nn();           // ops/cuda/nn.cu (dropout, embedding, attention)
void register_cuda_loss();         // ops/cuda/loss.cu (cross_entropy, nll_loss, mse_loss)

}  // namespace kiln
