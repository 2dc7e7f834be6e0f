// cuBLAS, cuBLASLt, cuDNN and NCCL are opened on their first call (core/cuda/lazy_library.h):
// a CUDA build's program that runs only CPU ops never maps them. Runs without a GPU (the
// libraries load and answer status strings without a device); skipped in CPU-only builds.
#include <doctest/doctest.h>
#include <fstream>
#include <string>
#include "gradcheck.h"
#ifdef KILN_WITH_CUDA
#include "kiln/core/cuda/lazy_library.h"
#endif

using namespace kiln;
using namespace kiln::test;

#ifdef KILN_WITH_CUDA
namespace {
using kiln::cuda::lazy::Library;
// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("a CPU-only program of a CUDA build never loads cuBLAS, cuDNN or NCCL") {
  // some CPU training work: GEMMs, a convolution, a backward
  Tensor x = randn({4, 3, 8, 8}).requires_grad_();
  Tensor w = randn({5, 3, 3, 3}).requires_grad_();
  Tensor y = sum(relu(conv2d(x, w)));
  y.backward();
  Tensor m = matmul(randn({32, 16}), randn({16, 8}));
  CHECK(m.numel() == 256);
  for (Library lib : {Library::cublas, Library::cublasLt, Library::cudnn, Library::nccl})
    CHECK_FALSE(cuda::lazy::is_loaded(lib));
  CHECK_FALSE(mapped("libcublas"));
  CHECK_FALSE(mapped("libcudnn"));
  CHECK_FALSE(mapped("libnccl"));
}

TEST_CASE("the first call opens the library; a missing symbol is an error naming it") {
  using StatusString = const char* (*)(int);
  auto cublas_status = reinterpret_cast<StatusString>(cuda::lazy::symbol(Library::cublas, "cublasGetStatusString"));
  const std::string ok = cublas_status(0);  // "success" (CUDA 13) or "CUBLAS_STATUS_SUCCESS"
  CHECK((ok.find("success") != std::string::npos || ok.find("SUCCESS") != std::string::npos));
  CHECK(cuda::lazy::is_loaded(Library::cublas));
  CHECK(mapped("libcublas"));
  auto cudnn_error = reinterpret_cast<StatusString>(cuda::lazy::symbol(Library::cudnn, "cudnnGetErrorString"));
  CHECK(std::string(cudnn_error(0)) == "CUDNN_STATUS_SUCCESS");
  CHECK(mapped("libcudnn"));
  const std::string e = error_of([] { cuda::lazy::symbol(Library::cudnn, "cudnnNoSuchFunction"); });
  CHECK(e.find("cuDNN") != std::string::npos);
  CHECK(e.find("cudnnNoSuchFunction") != std::string::npos);
}
#else
TEST_CASE("lazy CUDA libraries: skipped (this build has no CUDA backend)") { MESSAGE("no CUDA backend"); }
#endif
