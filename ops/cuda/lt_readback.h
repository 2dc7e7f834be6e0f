// What cuBLASLt reads back from the descriptors linear's GEMMs set up (ops/cuda/linalg.cu),
// for tests/cuda/test_cuda_lt_desc.cpp. Creating and querying cuBLASLt descriptors needs no
// GPU (only cublasLtCreate does), so the epilogue set-up is tested on every CUDA build.
// CUDA builds only (KILN_WITH_CUDA).
#pragma once
#include <cstdint>
#include "kiln/core/dtype.h"
#include "kiln/ops/cuda/gemm_map.h"

namespace kiln::cuda {

/// One cuBLASLt GEMM's descriptors, read back through cublasLt*GetAttribute.
struct LtDescriptorReadback {
  struct Layout {
    int64_t rows = 0, cols = 0, ld = 0;
    int type = -1;  ///< cudaDataType_t
  };
  Layout a, b, c;        ///< cuBLASLt's A (the first operand of to_col_major), B, C = D
  bool trans_a = false, trans_b = false;
  int epilogue = -1;     ///< cublasLtEpilogue_t
  int compute_type = -1; ///< cublasComputeType_t
  int scale_type = -1;   ///< cudaDataType_t
  const void* bias = nullptr;
  const void* aux = nullptr;
  int64_t aux_ld = 0;
};
/// The descriptors gemm_lt builds for the row-major GEMM g in `dtype` with this epilogue
/// (a cublasLtEpilogue_t: CUBLASLT_EPILOGUE_BIAS, GELU_AUX_BIAS, GELU_BIAS, BGRADB, ...).
LtDescriptorReadback linear_lt_descriptor_readback(DType dtype, const RowMajorGemm& g, int epilogue,
                                                   const void* bias, void* aux, int64_t aux_ld);

}  // namespace kiln::cuda
