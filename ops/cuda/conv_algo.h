// The choice among the convolution algorithms cuDNN lists (ops/cuda/conv.cu), kept free of
// cuDNN types so that the CPU test tests/cuda/test_cuda_conv_algo.cpp can run it on
// recorded lists without a GPU.
//
// cuDNN returns its algorithms (heuristics, or timed with cudnn_benchmark) as rows of
// (algorithm, status, math type, workspace bytes), best first. An algorithm is known to
// work only with the math type it is listed with, so the chosen one always runs with its
// own: forcing another onto it (as an earlier version did, FMA math on an algorithm listed
// for Tensor Cores) can make cuDNN reject or mis-run it.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace kiln::cuda {

/// cudnnMathType_t's CUDNN_FMA_MATH (plain float32 FMAs: no TF32, no Tensor Cores).
constexpr int kCudnnFmaMath = 3;

/// One row of cuDNN's list (a cudnnConvolution*AlgoPerf_t), reduced to what the choice needs.
struct ConvAlgoCandidate {
  int algo = 0;
  bool supported = false;  ///< status == CUDNN_STATUS_SUCCESS
  int math = 0;            ///< the cudnnMathType_t it was listed (and must run) with
  size_t workspace = 0;    ///< bytes
};

/// The index of the algorithm to run, or -1: the first row, in cuDNN's order, that cuDNN
/// reported as supported, whose workspace `fits`, and which, when `fma_only` (float32
/// with TF32 not allowed), is listed with FMA math.
inline int pick_conv_algo(const std::vector<ConvAlgoCandidate>& rows, bool fma_only,
                          const std::function<bool(size_t)>& fits) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const ConvAlgoCandidate& r = rows[i];
    if (!r.supported || (fma_only && r.math != kCudnnFmaMath) || !fits(r.workspace)) continue;
    return int(i);
  }
  return -1;
}

}  // namespace kiln::cuda
