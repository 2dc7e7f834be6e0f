// The choice among cuDNN's convolution algorithms (ops/cuda/conv_algo.h), on lists shaped
// like the ones cuDNN returns (algorithm, status, math type, workspace; best first). No
// GPU needed. The rule under test: the chosen row is one cuDNN reported as supported and
// runs with the math type it was listed with, so a float32 run without TF32 never gets an
// algorithm cuDNN listed only for Tensor Cores with FMA math forced onto it.
#include <doctest/doctest.h>
#include <vector>
#include "kiln/ops/cuda/conv_algo.h"

using kiln::cuda::ConvAlgoCandidate;
using kiln::cuda::kCudnnFmaMath;
using kiln::cuda::pick_conv_algo;

namespace {
constexpr int kDefault = 0, kTensorOp = 1, kTensorOpConversion = 2;  // cudnnMathType_t
const auto any_size = [](size_t) { return true; };
}  // namespace

TEST_CASE("pick_conv_algo: the first supported row that fits, in cuDNN's order") {
  // bf16 forward, heuristics: Tensor Core rows first
  const std::vector<ConvAlgoCandidate> rows = {
      {7, false, kTensorOp, 0},         // CUDNN_STATUS_NOT_SUPPORTED for this shape
      {1, true, kTensorOp, 64 << 20},   // needs 64 MiB of workspace
      {6, true, kTensorOpConversion, 1 << 20},
      {0, true, kDefault, 0},
  };
  CHECK(pick_conv_algo(rows, false, any_size) == 1);
  // the 64 MiB one does not fit: the next supported one, with its own math type
  const int i = pick_conv_algo(rows, false, [](size_t b) { return b <= (8u << 20); });
  REQUIRE(i == 2);
  CHECK(rows[size_t(i)].math == kTensorOpConversion);
  CHECK(pick_conv_algo(rows, false, [](size_t b) { return b == 0; }) == 3);
}

TEST_CASE("pick_conv_algo: float32 without TF32 takes only rows listed with FMA math") {
  // float32 forward: the fastest rows are listed for Tensor Cores (TF32), which a run at
  // "highest" float32 precision must not use; the earlier two-pass rule took row 0 and
  // forced FMA math onto it
  const std::vector<ConvAlgoCandidate> rows = {
      {1, true, kTensorOp, 0},
      {6, true, kDefault, 0},
      {1, true, kCudnnFmaMath, 4096},
      {0, true, kCudnnFmaMath, 0},
  };
  const int i = pick_conv_algo(rows, true, any_size);
  REQUIRE(i == 2);
  CHECK(rows[size_t(i)].math == kCudnnFmaMath);
  CHECK(pick_conv_algo(rows, true, [](size_t b) { return b == 0; }) == 3);
  // TF32 allowed: the first row
  CHECK(pick_conv_algo(rows, false, any_size) == 0);
}

TEST_CASE("pick_conv_algo: nothing usable is -1 (conv2d then throws naming the shape)") {
  CHECK(pick_conv_algo({}, false, any_size) == -1);
  const std::vector<ConvAlgoCandidate> unsupported = {{0, false, kCudnnFmaMath, 0}, {1, false, kDefault, 0}};
  CHECK(pick_conv_algo(unsupported, false, any_size) == -1);
  const std::vector<ConvAlgoCandidate> tensor_only = {{1, true, kTensorOp, 0}, {6, true, kDefault, 0}};
  CHECK(pick_conv_algo(tensor_only, true, any_size) == -1);  // never FMA forced onto them
  const std::vector<ConvAlgoCandidate> too_big = {{1, true, kCudnnFmaMath, 1 << 30}};
  CHECK(pick_conv_algo(too_big, true, [](size_t b) { return b < (1u << 20); }) == -1);
}
