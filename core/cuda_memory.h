// Free and total memory of a GPU (cudaMemGetInfo), for memory targets such as the batch
// finder's (optim/batch_finder.h). Kept out of core/cuda.h so that its users alone depend
// on it. A build without the CUDA backend throws kiln::Error.
#pragma once
#include <cstddef>

namespace kiln::cuda {

struct DeviceMemory {
  size_t free_bytes = 0, total_bytes = 0;
};
/// Of `device` (-1: the current device).
DeviceMemory memory_info(int device = -1);

}  // namespace kiln::cuda
