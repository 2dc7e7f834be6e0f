// CUDA runtime queries: without a GPU (or without the backend) they report none and the
// probe is a clear error; with a GPU the probe kernel round-trips a value.
#include <doctest/doctest.h>
#include "kiln/kiln.h"

using namespace kiln;

TEST_CASE("cuda runtime reports devices consistently") {
  CHECK(cuda::device_count() >= 0);
  CHECK(cuda::is_available() == (cuda::device_count() > 0));
  if (!cuda::is_available()) {
    CHECK_THROWS_AS(cuda::probe(7), Error);
  }
}

TEST_CASE("cuda probe kernel runs on a GPU" * doctest::skip(!kiln::cuda::is_available())) {
  CHECK(cuda::probe(42) == 42);
}
