// cuBLAS, cuBLASLt, cuDNN and NCCL are opened with dlopen on their first call instead of
// being linked: a program of a CUDA build that runs no GPU op never loads them (they are
// hundreds of MB of code and relocations), and kiln's exported CMake needs none of them.
// Every call site names its function through KILN_LAZY, which looks the symbol up once
// (a static per call site) and keeps the function's own type, so arguments are checked
// by the compiler exactly as in a direct call:
//   KILN_CUBLAS_CHECK(KILN_LAZY(cublas, cublasSetStream)(handle, stream));
#pragma once

namespace kiln::cuda::lazy {

enum class Library { cublas, cublasLt, cudnn, nccl };

/// The address of `name` in `lib`, which is opened on the first call (by its soname, so
/// LD_LIBRARY_PATH and ld.so.conf apply; then from the folder it was found in when kiln
/// was built). Throws kiln::Error naming the library, the file and the symbol when it
/// cannot be loaded or lacks the symbol.
void* symbol(Library lib, const char* name);

/// Whether `lib` has been opened in this process (for tests and diagnostics).
bool is_loaded(Library lib);

}  // namespace kiln::cuda::lazy

#define KILN_LAZY_STR_(x) #x
#define KILN_LAZY_STR(x) KILN_LAZY_STR_(x)
/// The function `fn` of library `lib` (cublas, cublasLt, cudnn or nccl), to be called with
/// fn's arguments. `fn` may be a macro (cublasCreate is cublasCreate_v2): it is expanded.
#define KILN_LAZY(lib, fn) KILN_LAZY_AS(lib, fn, decltype(&fn))
/// The same with the function pointer type spelled out, for a name the library's header
/// also overloads in C++ (cublasGemmEx): `Fn` is the type of the C function's pointer.
#define KILN_LAZY_AS(lib, fn, Fn)                                                           \
  ([] {                                                                                     \
    static const auto kiln_fn_ =                                                            \
        reinterpret_cast<Fn>(::kiln::cuda::lazy::symbol(::kiln::cuda::lazy::Library::lib, KILN_LAZY_STR(fn))); \
    return kiln_fn_;                                                                        \
  }())
