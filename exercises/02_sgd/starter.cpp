// Exercise 2 (exercises/02_sgd/README.md): complete sgd_step.
#include "exercise.h"

void sgd_step(std::vector<kiln::Tensor>& params, std::vector<kiln::Tensor>& buffers, const SgdConfig& c) {
  kiln::NoGradGuard no_grad;
  if (buffers.size() != params.size()) buffers.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    kiln::Tensor g = params[i].grad();
    // Your task: weight decay (g + wd * p), then the momentum buffer (g itself on the first
    // step, momentum * buf + g after), then p -= lr * buf.
    (void)buffers;
    params[i].add_(g, -c.lr);  // plain SGD: no decay, no momentum
  }
}
