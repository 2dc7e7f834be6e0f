// CPU threading: kiln::set_num_threads and a parallel_for over an index range (OpenMP).
#pragma once
#include <cstdint>
#include <omp.h>

namespace kiln {

/// Number of OpenMP threads CPU kernels use.
void set_num_threads(int n);
int get_num_threads();

/// Calls f(begin, end) on chunks of [begin, end) in parallel; runs serially when the
/// range is shorter than `grain` (so small tensors pay no thread start-up).
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
  int nt = get_num_threads();
  if (n <= grain || nt <= 1 || omp_in_parallel()) { f(begin, end); return; }
  int64_t chunks = n / (grain > 0 ? grain : 1);
  if (chunks < nt) nt = int(chunks < 1 ? 1 : chunks);
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    int64_t per = (n + T - 1) / T;
    int64_t b = begin + t * per, e = b + per < end ? b + per : end;
    if (b < e) f(b, e);
  }
}

}  // namespace kiln
