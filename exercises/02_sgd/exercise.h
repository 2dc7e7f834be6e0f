// Exercise 2: SGD with momentum and weight decay, written out.
#pragma once
#include <vector>
#include <kiln/kiln.h>

struct SgdConfig {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 1e-2;
};

/// One step of SGD over params (each with its .grad()), as torch.optim.SGD (dampening 0,
/// no Nesterov). `buffers` holds one momentum buffer per parameter, empty (undefined)
/// before the first step; the function fills and updates them. Parameters are updated in
/// place under kiln::NoGradGuard.
void sgd_step(std::vector<kiln::Tensor>& params, std::vector<kiln::Tensor>& buffers, const SgdConfig& c);
