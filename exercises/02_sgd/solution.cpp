// Exercise 2, a solution: torch.optim.SGD's update, one parameter at a time.
#include "exercise.h"

void sgd_step(std::vector<kiln::Tensor>& params, std::vector<kiln::Tensor>& buffers, const SgdConfig& c) {
  kiln::NoGradGuard no_grad;
  if (buffers.size() != params.size()) buffers.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    kiln::Tensor g = params[i].grad() + params[i] * c.weight_decay;  // L2 weight decay
    kiln::Tensor& buf = buffers[i];
    buf = buf.defined() ? buf * c.momentum + g : g.clone();          // first step: the gradient itself
    params[i].add_(buf, -c.lr);
  }
}
