// Copies involving a GPU (registered with core/copy.h): host->device, device->host and
// device->device, any dtype to any dtype (a cast loop on the GPU), any layout (strided
// loop; broadcast sources are uploaded once and expanded on the GPU). Work goes to the
// current stream; a copy whose destination is host memory synchronises before returning.
// Also pinned host tensors (cuda::pinned_empty).
#include <cuda_runtime.h>
#include <memory>
#include <mutex>
#include "kiln/core/checked_math.h"
#include "kiln/core/copy.h"
#include "kiln/core/cuda.h"
#include "kiln/core/cuda/check.h"
#include "kiln/core/cuda/loops.cuh"
#include "kiln/core/cuda/runtime.h"

namespace kiln::cuda {
namespace {

// ---------------------------------------------------------------- pinned memory

// Shared by a pinned storage's deleter and the copies reading it: the event recorded
// after the last asynchronous copy from it, which the deleter waits for.
struct PinnedState {
  std::mutex mu;
  cudaEvent_t last_use = nullptr;
  int device = -1;
  void* registered = nullptr;  // the page-aligned range given to cudaHostRegister
};

struct PinnedDeleter {
  std::shared_ptr<PinnedState> state;
  void operator()(Storage* s) const {
    // never throws (runs wherever the last tensor handle dies, possibly at exit)
    if (state->last_use) {
      cudaEventSynchronize(state->last_use);
      cudaEventDestroy(state->last_use);
    }
    if (state->registered) cudaHostUnregister(state->registered);
    cudaGetLastError();
    delete s;
  }
};

PinnedState* pinned_state(const Tensor& t) {
  PinnedDeleter* d = std::get_deleter<PinnedDeleter>(t.storage());
  return d ? d->state.get() : nullptr;
}

// After an asynchronous copy from pinned memory was queued on `stream`: the storage may
// not be unregistered and reused before the copy has read it.
void mark_pinned_use(PinnedState* st, int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> l(st->mu);
  if (st->last_use && st->device != device) {
    KILN_CUDA_CHECK(cudaEventSynchronize(st->last_use));
    KILN_CUDA_CHECK(cudaEventDestroy(st->last_use));
    st->last_use = nullptr;
  }
  if (!st->last_use) {
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&st->last_use, cudaEventDisableTiming));
    st->device = device;
  }
  KILN_CUDA_CHECK(cudaEventRecord(st->last_use, stream));
}

// ---------------------------------------------------------------- views

// A tensor over the given storage with explicit layout (no autograd).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

// t with every broadcast (stride-0) dim shrunk to size 1: the elements it really holds.
Tensor compact(const Tensor& t) {
  Shape shape = t.shape();
  bool any = false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (t.strides()[d] == 0 && shape[d] > 1) {
      shape[d] = 1;
      any = true;
    }
  return any ? make_view(t, shape, t.strides(), t.offset()) : t;
}

// A contiguous tensor `c` of a compact shape seen with `shape` (size-1 dims broadcast).
Tensor expand_compact(const Tensor& c, const Shape& shape) {
  Shape st = contiguous_strides(c.shape());
  for (size_t d = 0; d < st.size(); ++d)
    if (c.shape()[d] == 1) st[d] = 0;
  return make_view(c, shape, st, c.offset());
}

size_t nbytes_of(const Tensor& t) { return size_t(t.numel()) * t.element_size(); }

// ---------------------------------------------------------------- GPU loops

struct IdentityF {
  template <class T>
  KILN_HD_INLINE T operator()(T x) const { return x; }
};

// An unsigned integer type of `Bytes` bytes: same-dtype copies move bits.
template <size_t Bytes> struct BitsOf;
template <> struct BitsOf<1> { using type = uint8_t; };
template <> struct BitsOf<2> { using type = uint16_t; };
template <> struct BitsOf<4> { using type = uint32_t; };
template <> struct BitsOf<8> { using type = uint64_t; };

// dst <- src on the current device (both on it, same shape, any dtypes and strides).
void copy_on_device(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), nbytes_of(dst), cudaMemcpyDeviceToDevice,
                                    current_raw_stream(-1)));
    return;
  }
  const int nd = int(dst.dim());
  KILN_CHECK(nd <= kMaxLoopDims, "copy: at most ", kMaxLoopDims, " dims are supported, got shape ",
             shape_str(dst.shape()));
  const int64_t* strides[2] = {dst.strides().data(), src.strides().data()};
  void* ptrs[2] = {dst.raw_data(), src.raw_data()};
  const LoopLayout<2> L = merge_dims<2>(nd, dst.shape().data(), strides);
  KILN_DISPATCH_ALL(dst.dtype(), "copy", [&]<class D>() {
    KILN_DISPATCH_ALL(src.dtype(), "copy", [&]<class S>() {
      if constexpr (std::is_same_v<D, S>) {
        using B = typename BitsOf<sizeof(D)>::type;
        launch_elementwise<B, B>(L, ptrs, IdentityF{});
      } else {
        launch_elementwise<D, S>(L, ptrs, IdentityF{});  // static_cast<D>(compute_t<S>), as the CPU does
      }
    });
  });
}

// ---------------------------------------------------------------- the three directions

void host_to_device(const Tensor& dst, const Tensor& src) {
  DeviceGuard g(dst.device().index);
  const cudaStream_t stream = current_raw_stream(-1);
  Tensor c = compact(src);  // upload each broadcast element once
  if (!c.is_contiguous()) {
    Tensor t = Tensor::empty(c.shape(), c.dtype(), Device::cpu());
    copy_tensor(t, c);  // CPU gather
    c = t;
  }
  PinnedState* pinned = pinned_state(c);
  const bool direct = c.numel() == dst.numel() && dst.is_contiguous() && dst.dtype() == c.dtype();
  Tensor up = direct ? dst : Tensor::empty(c.shape(), c.dtype(), dst.device());
  // From pageable memory cudaMemcpyAsync returns once the bytes are staged, so `c` may die
  // right after; from pinned memory it is truly asynchronous and the storage is marked.
  KILN_CUDA_CHECK(cudaMemcpyAsync(up.raw_data(), c.raw_data(), nbytes_of(c), cudaMemcpyHostToDevice, stream));
  if (pinned) mark_pinned_use(pinned, dst.device().index, stream);
  if (!direct) copy_on_device(dst, expand_compact(up, dst.shape()));
}

void device_to_host(const Tensor& dst, const Tensor& src) {
  DeviceGuard g(src.device().index);
  const cudaStream_t stream = current_raw_stream(-1);
  Tensor s = src;
  if (!s.is_contiguous() || s.dtype() != dst.dtype()) {  // gather and cast on the GPU
    s = Tensor::empty(src.shape(), dst.dtype(), src.device());
    copy_on_device(s, src);
  }
  note_host_sync();
  if (dst.is_contiguous()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), s.raw_data(), nbytes_of(s), cudaMemcpyDeviceToHost, stream));
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host reads dst next
    raise_check_errors(src.device().index);           // a bad index found since the last read
    return;
  }
  Tensor h = Tensor::empty(s.shape(), s.dtype(), Device::cpu());
  KILN_CUDA_CHECK(cudaMemcpyAsync(h.raw_data(), s.raw_data(), nbytes_of(s), cudaMemcpyDeviceToHost, stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  raise_check_errors(src.device().index);
  copy_tensor(dst, h);  // CPU scatter into the strided destination
}

void device_to_device(const Tensor& dst, const Tensor& src) {
  if (dst.device() == src.device()) {
    DeviceGuard g(dst.device().index);
    copy_on_device(dst, src);
    return;
  }
  // Across GPUs: compact + contiguous on the source GPU, a peer copy, then expand/cast on
  // the destination GPU.
  Tensor c = compact(src);
  {
    DeviceGuard g(src.device().index);
    if (!c.is_contiguous()) {
      Tensor t = Tensor::empty(c.shape(), c.dtype(), src.device());
      copy_on_device(t, c);
      c = t;
    }
    note_host_sync();
    KILN_CUDA_CHECK(cudaStreamSynchronize(current_raw_stream(-1)));  // c is complete
  }
  DeviceGuard g(dst.device().index);
  const bool direct = c.numel() == dst.numel() && dst.is_contiguous() && dst.dtype() == c.dtype();
  Tensor up = direct ? dst : Tensor::empty(c.shape(), c.dtype(), dst.device());
  KILN_CUDA_CHECK(cudaMemcpyPeerAsync(up.raw_data(), dst.device().index, c.raw_data(), src.device().index,
                                      nbytes_of(c), current_raw_stream(-1)));
  if (!direct) copy_on_device(dst, expand_compact(up, dst.shape()));
  note_host_sync();
  KILN_CUDA_CHECK(cudaStreamSynchronize(current_raw_stream(-1)));  // c (on the other GPU) may be freed next
}

// dst[i] = start + i * step in float64, converted as the CPU converts (fill and arange).
template <class D>
__global__ void range_kernel(D* p, int64_t n, double start, double step) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<D>(start + double(i) * step);
}

void cuda_range(const Tensor& dst, double start, double step) {
  DeviceGuard g(dst.device().index);
  const LaunchConfig lc = launch_config(dst.numel(), loop_max_blocks());
  KILN_DISPATCH_ALL(dst.dtype(), "fill", [&]<class D>() {
    range_kernel<D><<<lc.grid, lc.block, 0, current_raw_stream(-1)>>>(static_cast<D*>(dst.raw_data()), dst.numel(),
                                                                      start, step);
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void cuda_copy(const Tensor& dst, const Tensor& src) {
  if (dst.device().is_cuda() && src.device().is_cuda()) device_to_device(dst, src);
  else if (dst.device().is_cuda()) host_to_device(dst, src);
  else device_to_host(dst, src);
}

}  // namespace

void register_cuda_copy() {
  register_device_copy(&cuda_copy);
  register_device_range(&cuda_range);
}

// ---------------------------------------------------------------- pinned tensors

Tensor pinned_empty(const Shape& shape, DType dtype) {
  for (int64_t v : shape)
    KILN_CHECK(v >= 0, "cuda::pinned_empty: negative size in shape ", shape_str(shape));
  KILN_CHECK(is_available(), "cuda::pinned_empty: page-locked memory needs a CUDA device, and none is available");
  const size_t nbytes = size_t(checked_mul(shape_numel(shape, "cuda::pinned_empty"), int64_t(dtype_size(dtype)),
                                           "cuda::pinned_empty", shape));
  // Register whole pages of our own: a page-aligned range inside a slightly larger block,
  // so no other allocation shares a registered page.
  constexpr size_t kPage = 4096;
  const size_t span = (nbytes + kPage - 1) / kPage * kPage;
  Storage* st = new Storage(span + kPage, Device::cpu());
  char* base = static_cast<char*>(st->data());
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kPage - 1) / kPage * kPage);
  auto state = std::make_shared<PinnedState>();
  if (span > 0) {
    cudaError_t e = cudaHostRegister(aligned, span, cudaHostRegisterDefault);
    if (e != cudaSuccess) {
      delete st;
      detail::throw_cuda_error(e, "cudaHostRegister(pinned_empty)", __FILE__, __LINE__);
    }
    state->registered = aligned;
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::shared_ptr<Storage>(st, PinnedDeleter{state});
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->offset = int64_t(aligned - base) / int64_t(dtype_size(dtype));  // 64-byte steps: a whole number of elements
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

bool is_pinned(const Tensor& t) { return t.defined() && pinned_state(t) != nullptr; }

}  // namespace kiln::cuda
