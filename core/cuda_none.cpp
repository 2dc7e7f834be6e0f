// CUDA runtime queries for a build without the CUDA backend: no devices.
#ifndef KILN_WITH_CUDA
#include "core/cuda.h"
#include "core/error.h"

namespace kiln::cuda {
bool is_available() { return false; }
int device_count() { return 0; }
int probe(int) { KILN_FAIL("cuda::probe: this build of kiln has no CUDA backend (configure with -DKILN_CUDA=ON)"); }
}  // namespace kiln::cuda
#endif
