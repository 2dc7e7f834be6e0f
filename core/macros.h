// Small portability macros shared by host C++ and CUDA code.
// KILN_HD marks functions that compile for both the CPU and the GPU.
#pragma once
#if defined(__CUDACC__)
#define KILN_HD __host__ __device__
#define KILN_HD_INLINE __host__ __device__ __forceinline__
#else
#define KILN_HD
#define KILN_HD_INLINE inline __attribute__((always_inline))
#endif
