// kiln::dist: the process group of data-parallel training. Processes are started by
// mpirun; MPI carries CPU tensors and the bootstrap, NCCL carries CUDA tensors (rank 0
// makes the ncclUniqueId, MPI broadcasts it, as llm.c does). Outside mpirun, or in a
// build without MPI, the group is this one process and every collective is the identity.
//
//   kiln::dist::init();                                   // once, at the start of main
//   kiln::dist::all_reduce(grad, kiln::dist::ReduceOp::avg);
//   if (kiln::dist::rank() == 0) save(...);
#pragma once
#include <memory>
#include <string>
#include "kiln/core/tensor.h"

namespace kiln::dist {

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

/// Joins the job mpirun started (MPI_Init_thread), or makes a one-process group when the
/// process was not started by mpirun or the build has no MPI. Idempotent; MPI is
/// finalized at exit.
void init();
bool is_initialized();
/// Whether this build has MPI (KILN_MPI) and NCCL (KILN_NCCL).
bool built_with_mpi();
bool built_with_nccl();

/// This process's rank in [0, world_size()), the number of processes, and its rank among
/// the processes of its node (the GPU it uses). 0, 1, 0 before init().
int rank();
int world_size();
int local_rank();
/// Throws a kiln::Error naming `what` when init() has not run in a job mpirun started with
/// several processes (every rank would act as rank 0 of a group of one): the collectives
/// and DistributedSampler call it; rank() and world_size() do not (0 and 1 before init()).
void check_initialized(const char* what);

/// In place: every rank ends with the element-wise sum / mean / max of all ranks' `t`.
/// Same shape and dtype on every rank. CPU tensors go through MPI, CUDA ones through NCCL
/// on kiln's current stream. float16 / bfloat16 are reduced in float32 on the CPU; avg
/// needs a floating dtype, sum of bool is refused. Non-contiguous tensors are handled (not
/// expanded ones, whose elements share memory: refused before anything is sent). A tensor
/// that requires grad may be reduced (not recorded by autograd). max of a NaN follows MPI's
/// comparison: whether a NaN wins depends on which rank holds it.
void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum);
/// A collective in flight (all_reduce_async). wait() blocks until the result is in the
/// tensor; done() polls (and so drives MPI's progress). A default Work is done.
class Work {
 public:
  Work() = default;
  bool done();
  void wait();
  struct State;

 private:
  friend Work all_reduce_async(Tensor& t, ReduceOp op);
  std::shared_ptr<State> s_;
};
/// all_reduce started without waiting for it: `t` must not be read or changed until
/// wait(). CPU: MPI_Iallreduce; CUDA: NCCL on kiln's current stream (ordered with the
/// kernels that follow, so wait() has nothing to do on the host).
Work all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::sum);

/// In place: every rank ends with root's `t`.
void broadcast(Tensor& t, int root = 0);
/// The ranks' tensors concatenated along dim 0, in rank order: (world * N, ...).
Tensor all_gather(const Tensor& t);
/// Reduces `t` (world * N, ...) over ranks and returns this rank's N rows of the result.
Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::sum);
/// Waits until every rank has reached it.
void barrier();

/// Prints `message` (with the rank) and ends every process of the job with exit status 1:
/// an error on one rank never leaves the others waiting in a collective.
[[noreturn]] void abort(const std::string& message);

}  // namespace kiln::dist
