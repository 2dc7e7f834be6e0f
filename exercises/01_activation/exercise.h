// Exercise 1: an activation with its gradient, as a kiln::Function.
#pragma once
#include <kiln/kiln.h>

/// Serf (Nag and Bhattacharyya, 2021): y = x * erf(softplus(x)), softplus(x) = log(1 + e^x).
/// Write its forward AND backward by hand (starter.cpp): the test checks the values and
/// the gradient against central finite differences in float64.
kiln::Tensor serf(const kiln::Tensor& x);
