// A job where one rank never reaches a collective (CTest dist_timeout_np2): the rank
// waiting in dist::barrier must end the job with the collective timeout's message within
// seconds of KILN_DIST_TIMEOUT, never hang. Run by tests/dist/dist_timeout.sh.
#include <chrono>
#include <cstdio>
#include <thread>
#include "kiln/dist/dist.h"

int main() {
  kiln::dist::init();
  if (kiln::dist::rank() == 1) {  // the hung rank: busy elsewhere for far longer than the timeout
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  kiln::dist::barrier();
  std::puts("barrier returned: the timeout did not fire");
  return 0;
}
