// Internal to ops/linalg_decomp.cpp and ops/linalg_spectral.cpp: what torch.linalg's
// factorizations share to run one float64 matrix at a time on a host copy (batch shapes,
// the copy there and back, square-matrix checks). Not part of the API.
#pragma once
#include <string>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/core/tensor.h"

namespace kiln::linalg::host {

/// Throws naming op unless A is a float32 or float64 batch of square matrices (..., n, n).
void check_square(const char* op, const Tensor& A);
/// Throws naming op unless A is a float32 or float64 batch of matrices (..., m, n).
void check_matrix(const char* op, const Tensor& A);
/// t's shape without its last `core` dims.
Shape leading(const Tensor& t, int64_t core);
/// The product of a shape's sizes.
int64_t count(const Shape& s);
/// s followed by tail.
Shape with(Shape s, std::initializer_list<int64_t> tail);
/// t's values as float64 on the host, row-major (no gradient).
std::vector<double> host64(const Tensor& t);
/// v (float64, shape s) as a tensor of t's dtype on t's device.
Tensor like(const std::vector<double>& v, const Shape& s, const Tensor& t);
/// " (matrix b of the batch)" when the batch has more than one matrix, else "".
std::string which(int64_t b, int64_t batch);
/// The transpose of the last two dims.
inline Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }
/// float64 when either is, else float32.
DType promoted(const Tensor& a, const Tensor& b);
/// v (..., n) on the diagonals of (..., n, n) zero matrices, differentiable (torch.diag_embed).
Tensor diag_embed(const Tensor& v);

}  // namespace kiln::linalg::host
