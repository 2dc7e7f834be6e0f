// cuBLASLt descriptor set-up of linear's GEMMs (ops/cuda/linalg.cu), read back through
// cuBLASLt itself (ops/cuda/lt_readback.h). Creating and querying descriptors needs no GPU
// (only cublasLtCreate does), so this runs on every CUDA build: cuBLASLt must hold the
// epilogue, its bias / aux pointers and aux leading dimension, the transposes and the
// layouts of gemm_map.h's products, in each 16-bit dtype, with float32 accumulation.
// What the epilogues compute on those layouts is checked in test_cuda_gemm_map.
#include <doctest/doctest.h>
#if defined(KILN_WITH_CUDA)
#include <cublasLt.h>
#include <array>
#include <vector>
#include "kiln/ops/cuda/lt_readback.h"

using namespace kiln;
using namespace kiln::cuda;

TEST_CASE("linear's cuBLASLt descriptors: the epilogues, their pointers and the layouts read back") {
  alignas(256) static char bias_buf[256], aux_buf[256];  // never dereferenced: descriptors only
  for (DType dt : {DType::bfloat16, DType::float16})
    for (const auto& shape : std::vector<std::array<int64_t, 4>>{{4, 8, 16, 0}, {1024, 3072, 768, 0}, {5, 24, 9, 7}}) {
      const int64_t M = shape[0], O = shape[1], I = shape[2], pad = shape[3];  // (no structured bindings: INFO captures)
      const int want_type = dt == DType::bfloat16 ? CUDA_R_16BF : CUDA_R_16F;
      INFO(dtype_name(dt) << " M " << M << " O " << O << " I " << I << " pad " << pad);
      const int64_t ldx = I + pad;
      // forward with GELU_AUX_BIAS: C^T (O x M) = W (first, stored I x O, transposed) x (second, I x M)
      const auto f = linear_lt_descriptor_readback(dt, linear_forward(M, O, I, ldx), CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
                                                   bias_buf, aux_buf, O);
      CHECK(f.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
      CHECK(f.bias == bias_buf);
      CHECK(f.aux == aux_buf);
      CHECK(f.aux_ld == O);
      CHECK(f.trans_a);
      CHECK_FALSE(f.trans_b);
      CHECK(f.compute_type == CUBLAS_COMPUTE_32F);
      CHECK(f.scale_type == CUDA_R_32F);
      CHECK((f.a.rows == I && f.a.cols == O && f.a.ld == I && f.a.type == want_type));
      CHECK((f.b.rows == I && f.b.cols == M && f.b.ld == ldx && f.b.type == want_type));
      CHECK((f.c.rows == O && f.c.cols == M && f.c.ld == O && f.c.type == want_type));
      // without autograd linear_gelu keeps no pre-activation
      const auto fg = linear_lt_descriptor_readback(dt, linear_forward(M, O, I, ldx), CUBLASLT_EPILOGUE_GELU_BIAS,
                                                    bias_buf, nullptr, 0);
      CHECK(fg.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS);
      CHECK(fg.bias == bias_buf);
      CHECK(fg.aux == nullptr);
      // the bias epilogue of plain linear: same layouts, no aux
      const auto fb = linear_lt_descriptor_readback(dt, linear_forward(M, O, I, ldx), CUBLASLT_EPILOGUE_BIAS, bias_buf,
                                                    nullptr, 0);
      CHECK(fb.epilogue == CUBLASLT_EPILOGUE_BIAS);
      CHECK(fb.bias == bias_buf);
      CHECK(fb.aux == nullptr);
      // weight gradient with BGRADB: C^T (I x O) = x (first, I x M) g (second, stored O x M, transposed);
      // the bias gradient is written through the bias pointer
      const auto w = linear_lt_descriptor_readback(dt, linear_weight_grad(M, O, I, ldx), CUBLASLT_EPILOGUE_BGRADB,
                                                   bias_buf, nullptr, 0);
      CHECK(w.epilogue == CUBLASLT_EPILOGUE_BGRADB);
      CHECK(w.bias == bias_buf);
      CHECK_FALSE(w.trans_a);
      CHECK(w.trans_b);
      CHECK((w.a.rows == I && w.a.cols == M && w.a.ld == ldx));
      CHECK((w.b.rows == O && w.b.cols == M && w.b.ld == O));
      CHECK((w.c.rows == I && w.c.cols == O && w.c.ld == I));
      // no epilogue: the default
      const auto n = linear_lt_descriptor_readback(dt, linear_forward(M, O, I, ldx), CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                                                   nullptr, 0);
      CHECK(n.epilogue == CUBLASLT_EPILOGUE_DEFAULT);
      CHECK(n.bias == nullptr);
    }
}
#else
TEST_CASE("cuBLASLt descriptor tests need a CUDA build" * doctest::skip()) {}
#endif
