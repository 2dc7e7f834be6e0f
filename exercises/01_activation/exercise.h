// Exercise 1: an activation with its gradient, as a kiln::Function.
#pragma once
#include <kiln/kiln.h>

/// Mish (Misra, 2019): y = x * tanh(softplus(x)), softplus(x) = log(1 + e^x).
/// Write its forward AND backward by hand (starter.cpp): the test checks the values and
/// the gradient against central finite differences in float64.
kiln::Tensor mish(const kiln::Tensor& x);
