// Exercise 3: activation checkpointing, as a kiln::Function.
#pragma once
#include <functional>
#include <kiln/kiln.h>

/// Returns f(x) without keeping the activations inside f: the backward runs f again on
/// the saved input (with grad mode on) and backpropagates through that recomputation.
/// Gradients (of x, and of any tensor f uses that requires grad) are those of f(x) itself.
kiln::Tensor checkpointed(std::function<kiln::Tensor(const kiln::Tensor&)> f, const kiln::Tensor& x);
