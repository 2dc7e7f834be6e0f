// kiln::dist on MPI (CPU tensors, launch, bootstrap) and NCCL (CUDA tensors), with a
// one-process fallback (see dist.h).
#include "kiln/core/cuda/lazy_library.h"
#include "kiln/dist/dist.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include "kiln/core/cuda.h"
#include "kiln/core/autograd.h"
#include "kiln/core/copy.h"
#include "kiln/core/error.h"
#if KILN_WITH_MPI
#include <mpi.h>
#endif
#if KILN_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace kiln::dist {

namespace {

struct Group {
  bool initialized = false;
  bool mpi = false;  // MPI_Init was called by us
  int rank = 0, world = 1, local_rank = 0;
};
Group& group() {
  static Group g;
  return g;
}

#if KILN_WITH_MPI
// The collective timeout. A blocking MPI collective records its name and start time; a
// watchdog thread (started by init() when there are several ranks) ends this process with
// the message when one has waited longer than KILN_DIST_TIMEOUT seconds (default 600):
// the rank it waits for has hung or is stuck elsewhere, and mpirun then ends every rank.
// The watchdog does not call MPI (the library runs MPI_THREAD_FUNNELED).
struct Watchdog {
  std::atomic<const char*> op{nullptr};
  std::atomic<int64_t> since_ms{0};
  double timeout_s = 600;
};
Watchdog& watchdog() {
  static Watchdog w;
  return w;
}
int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
struct Waiting {  // scope of one blocking collective
  explicit Waiting(const char* op) {
    watchdog().since_ms.store(now_ms());
    watchdog().op.store(op);
  }
  ~Waiting() { watchdog().op.store(nullptr); }
};
void start_watchdog(int rank) {
  Watchdog& w = watchdog();
  if (const char* e = std::getenv("KILN_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(e, &end);
    KILN_CHECK(end != e && *end == '\0' && v > 0, "dist::init: KILN_DIST_TIMEOUT must be a positive number of "
               "seconds, got '", e, "'");
    w.timeout_s = v;
  }
  std::thread([rank, &w] {
    const auto tick = std::chrono::milliseconds(int64_t(std::clamp(w.timeout_s * 100.0, 10.0, 1000.0)));
    for (;;) {
      std::this_thread::sleep_for(tick);
      const char* op = w.op.load();
      if (op && double(now_ms() - w.since_ms.load()) > 1000.0 * w.timeout_s) {
        std::fprintf(stderr, "[kiln] rank %d: error: dist::%s waited more than %g s for the other ranks "
                     "(KILN_DIST_TIMEOUT); a rank has hung or failed. Ending the job.\n", rank, op, w.timeout_s);
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }).detach();
}

// Started by a process manager (mpirun / srun with PMIx)? Without one, MPI is not
// initialised at all: a plain run stays a plain process.
bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}
#endif

// CUDA tensors go through NCCL, also in a one-process group (so that a single GPU still
// runs the NCCL code path); everything else of a one-process group is the identity.
bool use_nccl([[maybe_unused]] const Tensor& t) {
#if KILN_WITH_NCCL
  return t.device().is_cuda();
#else
  return false;
#endif
}

}  // namespace

void check_initialized(const char* what) {
  if (group().initialized) return;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* e = std::getenv(v); e && std::atoi(e) > 1)
      KILN_FAIL(what, ": called before dist::init() in a job of ", e, " processes (", v, "): every rank would act as "
                "rank 0 of a group of one; call dist::init() first (DistributedDataParallel calls it)");
}

namespace {

void check_defined(const Tensor& t, const char* op) {
  KILN_CHECK(t.defined(), "dist::", op, ": got an undefined tensor");
  if (!group().initialized) check_initialized((std::string("dist::") + op).c_str());
}

#if KILN_WITH_MPI
MPI_Datatype mpi_type(DType d, const char* op) {
  switch (d) {
    case DType::float32: return MPI_FLOAT;
    case DType::float64: return MPI_DOUBLE;
    case DType::int64: return MPI_INT64_T;
    case DType::int32: return MPI_INT32_T;
    case DType::uint8: return MPI_UINT8_T;
    case DType::bool_: return MPI_UINT8_T;  // max of 0/1 bytes is a logical or
    default: KILN_FAIL("dist::", op, ": no MPI type for ", dtype_name(d));
  }
}
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }
void mpi_check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  KILN_FAIL("dist::", op, ": MPI failed: ", std::string(msg, size_t(len)));
}
// MPI counts are ints: large buffers go in pieces.
constexpr int64_t kPiece = INT_MAX / 2;
#endif

#if KILN_WITH_NCCL
ncclDataType_t nccl_type(DType d, const char* op) {
  switch (d) {
    case DType::float32: return ncclFloat32;
    case DType::float64: return ncclFloat64;
    case DType::float16: return ncclFloat16;
    case DType::bfloat16: return ncclBfloat16;
    case DType::int64: return ncclInt64;
    case DType::int32: return ncclInt32;
    case DType::uint8: case DType::bool_: return ncclUint8;
    default: KILN_FAIL("dist::", op, ": no NCCL type for ", dtype_name(d));
  }
}
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : op == ReduceOp::avg ? ncclAvg : ncclMax; }
void nccl_check(ncclResult_t rc, const char* op) {
  KILN_CHECK(rc == ncclSuccess, "dist::", op, ": NCCL failed: ", KILN_LAZY(nccl, ncclGetErrorString)(rc));
}
// One communicator for the job, made on the first CUDA collective: rank 0's unique id
// goes to every rank through MPI.
ncclComm_t nccl_comm(const char* op) {
  static ncclComm_t comm = nullptr;
  if (comm) return comm;
  ncclUniqueId id;
  if (rank() == 0) nccl_check(KILN_LAZY(nccl, ncclGetUniqueId)(&id), op);
#if KILN_WITH_MPI
  if (world_size() > 1) mpi_check(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD), op);
#endif
  nccl_check(KILN_LAZY(nccl, ncclCommInitRank)(&comm, world_size(), id, rank()), op);
  return comm;
}
cudaStream_t stream_of(const Tensor& t) {
  return static_cast<cudaStream_t>(cuda::current_stream(t.device().index).handle());
}
#endif

// The contiguous tensor of dtype `as` a collective works on: `t` itself when it already
// is one, else a copy that finish() writes back into `t`. (Both helpers serve the MPI paths
// only: unused in a build without MPI.)
[[maybe_unused]] Tensor staging(const Tensor& t, DType as) {
  return t.is_contiguous() && t.dtype() == as ? t : t.to(as).contiguous();
}
// The result into t, after the average's division when avg: under no_grad, since a
// collective is not recorded by autograd (a leaf that requires grad may be reduced, as in
// PyTorch).
void finish(Tensor& t, Tensor& buf, bool avg) {
  NoGradGuard ng;
  if (avg) buf.mul_(1.0 / world_size());
  if (!buf.is_same(t)) t.copy_(buf);
}
// float16 / bfloat16 go through MPI as float32 (MPI has no 16-bit float types).
[[maybe_unused]] DType mpi_dtype(DType d) { return d == DType::float16 || d == DType::bfloat16 ? DType::float32 : d; }

}  // namespace

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : op == ReduceOp::avg ? "avg" : "max"; }

bool built_with_mpi() { return KILN_WITH_MPI; }
bool built_with_nccl() { return KILN_WITH_NCCL; }
bool is_initialized() { return group().initialized; }
int rank() { return group().rank; }
int world_size() { return group().world; }
int local_rank() { return group().local_rank; }

void init() {
  Group& g = group();
  if (g.initialized) return;
  g.initialized = true;
#if KILN_WITH_MPI
  if (!launched_by_mpirun()) return;
  int ready = 0;
  MPI_Initialized(&ready);
  if (!ready) {
    int provided = 0;
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
    g.mpi = true;
    std::atexit([] {
      int done = 0;
      MPI_Finalized(&done);
      if (!done) MPI_Finalize();
    });
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g.world);
  MPI_Comm node;  // the ranks sharing this node's memory: local_rank picks the GPU
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g.rank, MPI_INFO_NULL, &node), "init");
  MPI_Comm_rank(node, &g.local_rank);
  MPI_Comm_free(&node);
  if (cuda::is_available() && cuda::device_count() > 0) cuda::set_device(g.local_rank % cuda::device_count());
  if (g.world > 1) start_watchdog(g.rank);
#endif
}

struct Work::State {
  Tensor target, buf;  // buf: the contiguous (float32 for 16-bit floats) tensor being reduced
  bool avg = false;
#if KILN_WITH_MPI
  MPI_Request request = MPI_REQUEST_NULL;
#endif
  bool finished = false;
  void finish() {  // the reduction has arrived in buf
    dist::finish(target, buf, avg);
    finished = true;
  }
};

bool Work::done() {
  if (!s_ || s_->finished) return true;
#if KILN_WITH_MPI
  int flag = 0;
  mpi_check(MPI_Test(&s_->request, &flag, MPI_STATUS_IGNORE), "all_reduce_async");
  if (!flag) return false;
#endif
  s_->finish();
  return true;
}

void Work::wait() {
  if (!s_ || s_->finished) return;
#if KILN_WITH_MPI
  Waiting w("all_reduce_async");
  mpi_check(MPI_Wait(&s_->request, MPI_STATUS_IGNORE), "all_reduce_async");
#endif
  s_->finish();
}

namespace {
void check_reducible(const Tensor& t, ReduceOp op, const char* name) {
  check_defined(t, name);
  KILN_CHECK(op != ReduceOp::avg || t.is_floating_point(), "dist::", name, ": avg needs a floating-point tensor, got ",
             dtype_name(t.dtype()));
  KILN_CHECK(op != ReduceOp::sum || t.dtype() != DType::bool_, "dist::", name, ": sum of a bool tensor (use max for "
             "a logical or)");
}
}  // namespace

Work all_reduce_async(Tensor& t, ReduceOp op) {
  check_reducible(t, op, "all_reduce_async");
  check_no_internal_overlap(t, "dist::all_reduce_async");  // an expanded view: refused before any rank sends
  Work w;
  if (t.numel() == 0 || (world_size() == 1 && !use_nccl(t))) return w;
#if KILN_WITH_NCCL
  if (t.device().is_cuda()) {
    all_reduce(t, op);  // stream-ordered already
    return w;
  }
#endif
  KILN_CHECK(t.is_cpu(), "dist::all_reduce_async: a ", t.device().str(), " tensor needs a build with NCCL (KILN_NCCL)");
#if KILN_WITH_MPI
  auto s = std::make_shared<Work::State>();
  s->target = t;
  s->buf = staging(t, mpi_dtype(t.dtype()));
  s->avg = op == ReduceOp::avg;
  KILN_CHECK(s->buf.numel() <= INT_MAX, "dist::all_reduce_async: ", s->buf.numel(), " elements is over MPI's limit");
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, s->buf.raw_data(), int(s->buf.numel()), mpi_type(s->buf.dtype(), "all_reduce"),
                           mpi_op(op), MPI_COMM_WORLD, &s->request),
            "all_reduce_async");
  w.s_ = std::move(s);
#endif
  return w;
}

void all_reduce(Tensor& t, ReduceOp op) {
  check_reducible(t, op, "all_reduce");
  check_no_internal_overlap(t, "dist::all_reduce");  // an expanded view: refused before any rank sends
  if (t.numel() == 0 || (world_size() == 1 && !use_nccl(t))) return;
#if KILN_WITH_NCCL
  if (t.device().is_cuda()) {
    Tensor buf = staging(t, t.dtype());
    nccl_check(KILN_LAZY(nccl, ncclAllReduce)(buf.raw_data(), buf.raw_data(), size_t(buf.numel()),
                                              nccl_type(buf.dtype(), "all_reduce"), nccl_op(op),
                                              nccl_comm("all_reduce"), stream_of(buf)),
               "all_reduce");
    finish(t, buf, false);
    return;
  }
#endif
  KILN_CHECK(t.is_cpu(), "dist::all_reduce: a ", t.device().str(), " tensor needs a build with NCCL (KILN_NCCL)");
#if KILN_WITH_MPI
  Tensor buf = staging(t, mpi_dtype(t.dtype()));
  char* p = static_cast<char*>(buf.raw_data());
  Waiting w("all_reduce");
  for (int64_t off = 0, n = buf.numel(); off < n; off += kPiece)
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, p + off * int64_t(buf.element_size()), int(std::min(kPiece, n - off)),
                            mpi_type(buf.dtype(), "all_reduce"), mpi_op(op), MPI_COMM_WORLD),
              "all_reduce");
  finish(t, buf, op == ReduceOp::avg);
#endif
}

void broadcast(Tensor& t, int root) {
  check_defined(t, "broadcast");
  check_no_internal_overlap(t, "dist::broadcast");  // an expanded view: refused before any rank sends
  KILN_CHECK(root >= 0 && root < world_size(), "dist::broadcast: root ", root, " is not a rank of this group of ",
             world_size());
  if (t.numel() == 0 || (world_size() == 1 && !use_nccl(t))) return;
#if KILN_WITH_NCCL
  if (t.device().is_cuda()) {
    Tensor buf = staging(t, t.dtype());
    nccl_check(KILN_LAZY(nccl, ncclBroadcast)(buf.raw_data(), buf.raw_data(), size_t(buf.numel()),
                                              nccl_type(buf.dtype(), "broadcast"), root, nccl_comm("broadcast"),
                                              stream_of(buf)),
               "broadcast");
    finish(t, buf, false);
    return;
  }
#endif
  KILN_CHECK(t.is_cpu(), "dist::broadcast: a ", t.device().str(), " tensor needs a build with NCCL (KILN_NCCL)");
#if KILN_WITH_MPI
  Tensor buf = staging(t, t.dtype());
  const int64_t bytes = buf.numel() * int64_t(buf.element_size());
  char* p = static_cast<char*>(buf.raw_data());
  Waiting w("broadcast");
  for (int64_t off = 0; off < bytes; off += kPiece)
    mpi_check(MPI_Bcast(p + off, int(std::min(kPiece, bytes - off)), MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
  finish(t, buf, false);
#endif
}

Tensor all_gather(const Tensor& t) {
  check_defined(t, "all_gather");
  KILN_CHECK(t.dim() >= 1, "dist::all_gather: expected at least one dimension, got a 0-d tensor");
  if (world_size() == 1 && !use_nccl(t)) return t.contiguous().clone();
  Shape out_shape = t.shape();
  out_shape[0] *= world_size();
  Tensor out = Tensor::empty(out_shape, t.dtype(), t.device());
  const Tensor in = t.contiguous();
  const int64_t bytes = in.numel() * int64_t(in.element_size());
  if (bytes == 0) return out;
#if KILN_WITH_NCCL
  if (t.device().is_cuda()) {
    nccl_check(KILN_LAZY(nccl, ncclAllGather)(in.raw_data(), out.raw_data(), size_t(bytes), ncclUint8,
                                              nccl_comm("all_gather"), stream_of(in)),
               "all_gather");
    return out;
  }
#endif
  KILN_CHECK(t.is_cpu(), "dist::all_gather: a ", t.device().str(), " tensor needs a build with NCCL (KILN_NCCL)");
#if KILN_WITH_MPI
  KILN_CHECK(bytes <= INT_MAX, "dist::all_gather: ", bytes, " bytes per rank is over MPI's count limit");
  Waiting w("all_gather");
  mpi_check(MPI_Allgather(in.raw_data(), int(bytes), MPI_BYTE, out.raw_data(), int(bytes), MPI_BYTE, MPI_COMM_WORLD),
            "all_gather");
#endif
  return out;
}

Tensor reduce_scatter(const Tensor& t, ReduceOp op) {
  check_defined(t, "reduce_scatter");
  KILN_CHECK(t.dim() >= 1 && t.size(0) % world_size() == 0, "dist::reduce_scatter: dim 0 of ", shape_str(t.shape()),
             " must be a multiple of the ", world_size(), " ranks");
  KILN_CHECK(op != ReduceOp::avg || t.is_floating_point(), "dist::reduce_scatter: avg needs a floating-point tensor, "
             "got ", dtype_name(t.dtype()));
  if (world_size() == 1 && !use_nccl(t)) return t.contiguous().clone();
  Shape out_shape = t.shape();
  out_shape[0] /= world_size();
  Tensor out = Tensor::empty(out_shape, t.dtype(), t.device());
  if (out.numel() == 0) return out;
#if KILN_WITH_NCCL
  if (t.device().is_cuda()) {
    const Tensor in = t.contiguous();
    nccl_check(KILN_LAZY(nccl, ncclReduceScatter)(in.raw_data(), out.raw_data(), size_t(out.numel()),
                                                  nccl_type(in.dtype(), "reduce_scatter"), nccl_op(op),
                                                  nccl_comm("reduce_scatter"), stream_of(in)),
               "reduce_scatter");
    return out;
  }
#endif
  KILN_CHECK(t.is_cpu(), "dist::reduce_scatter: a ", t.device().str(), " tensor needs a build with NCCL (KILN_NCCL)");
#if KILN_WITH_MPI
  const Tensor in = staging(t, mpi_dtype(t.dtype()));
  Tensor buf = staging(out, in.dtype());
  KILN_CHECK(buf.numel() <= INT_MAX, "dist::reduce_scatter: ", buf.numel(), " elements per rank is over MPI's limit");
  Waiting w("reduce_scatter");
  mpi_check(MPI_Reduce_scatter_block(in.raw_data(), buf.raw_data(), int(buf.numel()), mpi_type(in.dtype(), "reduce_scatter"),
                                     mpi_op(op), MPI_COMM_WORLD),
            "reduce_scatter");
  finish(out, buf, op == ReduceOp::avg);
#endif
  return out;
}

void barrier() {
  check_initialized("dist::barrier");
#if KILN_WITH_MPI
  Waiting w("barrier");
  if (world_size() > 1) mpi_check(MPI_Barrier(MPI_COMM_WORLD), "barrier");
#endif
}

void abort(const std::string& message) {
  std::fprintf(stderr, "%serror: %s\n", world_size() > 1 ? ("[rank " + std::to_string(rank()) + "] ").c_str() : "",
               message.c_str());
  std::fflush(stderr);
#if KILN_WITH_MPI
  if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::exit(1);
}

}  // namespace kiln::dist
