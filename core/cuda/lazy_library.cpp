// dlopen / dlsym behind KILN_LAZY (core/cuda/lazy_library.h). The sonames and build-time
// folders come from CMake (KILN_*_SONAME, KILN_*_DIR), read off the libraries it found.
#include "kiln/core/cuda/lazy_library.h"
#include <dlfcn.h>
#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include "kiln/core/error.h"

namespace kiln::cuda::lazy {
namespace {

struct Spec {
  const char* what;    // for messages
  const char* soname;  // libcublas.so.13
  const char* dir;     // where the build found it
};

constexpr std::array<Spec, 4> kSpecs = {{
    {"cuBLAS", KILN_CUBLAS_SONAME, KILN_CUBLAS_DIR},
    {"cuBLASLt", KILN_CUBLASLT_SONAME, KILN_CUBLASLT_DIR},
    {"cuDNN", KILN_CUDNN_SONAME, KILN_CUDNN_DIR},
    {"NCCL", KILN_NCCL_SONAME, KILN_NCCL_DIR},
}};

std::array<std::atomic<void*>, 4> g_handles{};
std::mutex g_mu;

void* open(Library lib) {
  const size_t i = size_t(lib);
  if (void* h = g_handles[i].load(std::memory_order_acquire)) return h;
  std::lock_guard<std::mutex> lock(g_mu);
  if (void* h = g_handles[i].load(std::memory_order_relaxed)) return h;
  const Spec& s = kSpecs[i];
  KILN_CHECK(s.soname[0] != '\0', s.what, ": this build of kiln was configured without it");
  void* h = dlopen(s.soname, RTLD_NOW | RTLD_LOCAL);
  std::string first_error = h ? "" : dlerror();
  if (!h && s.dir[0] != '\0') h = dlopen((std::string(s.dir) + "/" + s.soname).c_str(), RTLD_NOW | RTLD_LOCAL);
  KILN_CHECK(h != nullptr, s.what, ": cannot load ", s.soname, " (", first_error, "; nor from ", s.dir,
             "): a GPU op needs the CUDA libraries kiln was built with on the library path (LD_LIBRARY_PATH or "
             "/etc/ld.so.conf)");
  g_handles[i].store(h, std::memory_order_release);
  return h;
}

}  // namespace

void* symbol(Library lib, const char* name) {
  void* h = open(lib);
  dlerror();
  void* p = dlsym(h, name);
  KILN_CHECK(p != nullptr, kSpecs[size_t(lib)].what, ": ", kSpecs[size_t(lib)].soname, " has no symbol ", name,
             " (a library older than the headers kiln was built with?)");
  return p;
}

bool is_loaded(Library lib) { return g_handles[size_t(lib)].load(std::memory_order_acquire) != nullptr; }

}  // namespace kiln::cuda::lazy
