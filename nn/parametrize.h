// Parametrizations (torch.nn.utils.parametrize and torch.nn.utils.parametrizations):
// a registered tensor of a module, such as a layer's `weight`, computed at every forward
// from "original" tensors that are the ones trained.
//
//   nn::Linear fc(20, 10);
//   nn::weight_norm(fc);        // weight = g * v / ||v|| (rows), trained through g and v
//   nn::spectral_norm(conv);    // weight = W / sigma_max(W), one power iteration a forward
//   nn::orthogonal(cell, "weight_hh");   // stays orthogonal (matrix_exp, cayley, householder)
//   auto opt = optim::Adam(model.parameters());   // parametrize before making the optimizer
//
// How it works. register_parametrization moves the tensor's value into a child module,
// `parametrizations.<name>` (a ParametrizationList), as the parameter `original` (or
// `original0`, `original1`, ... when right_inverse splits it, as weight_norm's g and v)
// followed by the parametrization modules "0", "1", ... The module's own entry for the
// tensor is removed from parameters() and state_dict(), so the keys are PyTorch's
// (`parametrizations.weight.original0`, `parametrizations.weight.0._u`, ...), and the
// tensor is recorded in the module's state. Every layer reads its parameters through
// Module::param(weight), which for a parametrized tensor calls the list: the first
// parametrization maps the originals to a value, each later one maps the value. The
// graph of that computation is recorded, so gradients reach the originals. The member
// handle (`fc.weight`) keeps the value of the latest computation (at registration, then at
// each forward), detached.
//
// Unlike PyTorch, an optimizer made before the parametrization keeps the old tensor, which
// no longer trains: parametrize first. Each Module::param call computes the value again,
// unless a CachedParametrizations guard is alive.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "kiln/nn/module.h"

namespace kiln::nn {

/// Thrown by a right_inverse that cannot invert (PyTorch's NotImplementedError there): at
/// registration the tensor is then stored as the original as it is; assign_parametrized
/// passes the error on.
class RightInverseNotImplemented : public Error {
 public:
  using Error::Error;
};

/// A parametrization: a module whose forward maps the original tensor to the value used in
/// place of the parametrized one. Subclass it and override forward(const Tensor&); for
/// several originals override forward(const std::vector<Tensor>&) and right_inverse.
///   struct Symmetric : nn::Parametrization {
///     Tensor forward(const Tensor& x) override { return add(x.triu(), x.triu(1).transpose(0, 1)); }
///   };
///   nn::register_parametrization(fc, "weight", std::make_shared<Symmetric>());
class Parametrization : public Module {
 public:
  using Module::forward;
  /// The value from the originals right_inverse made (one, unless it returns several).
  virtual Tensor forward(const std::vector<Tensor>& originals);
  /// The originals to store for a value, under NoGradGuard at registration (and when a
  /// value is assigned through assign_parametrized). Default: the value itself, one
  /// original, as PyTorch's default. May throw RightInverseNotImplemented.
  virtual std::vector<Tensor> right_inverse(const Tensor& value) { return {value}; }
};

/// The child a parametrized tensor lives in (PyTorch's ParametrizationList): the original
/// tensor(s) as parameters (or buffers, when a buffer was parametrized) and the
/// parametrizations as children "0", "1", ...
class ParametrizationList : public Module {
 public:
  ParametrizationList() = default;
  /// The parametrized value, computed now (the graph recorded when grad mode is on).
  Tensor value() const;
  /// The originals, in order.
  std::vector<Tensor> originals() const;
  /// The parametrizations, in order.
  std::vector<std::shared_ptr<Parametrization>> chain() const;
  std::string type_name() const override { return "ParametrizationList"; }

 private:
  friend struct ParametrizeAccess;
  std::vector<std::string> original_names_;
  bool originals_are_buffers_ = false;
};

/// Puts `p` on module's registered tensor `name` (a parameter or a buffer). A tensor
/// already parametrized gets `p` appended to its chain (applied to the chain's value).
/// Unless `unsafe`, checks that p keeps the tensor's shape and dtype and that its
/// right_inverse gives originals p maps back to that shape and dtype. Returns the module.
Module& register_parametrization(Module& module, const std::string& name, std::shared_ptr<Parametrization> p,
                                 bool unsafe = false);
/// Whether `name` (or, when empty, any tensor) of `module` is parametrized.
bool is_parametrized(const Module& module, const std::string& name = "");
/// Removes the parametrizations of `name`. With leave_parametrized the tensor becomes a
/// plain parameter (or buffer) holding the current value; otherwise it gets the original's
/// value, which needs a single original of the tensor's shape and dtype.
Module& remove_parametrizations(Module& module, const std::string& name, bool leave_parametrized = true);
/// The chain of `name` (throws when it is not parametrized).
ParametrizationList& parametrization_list(const Module& module, const std::string& name);
/// Sets a parametrized tensor's value (PyTorch's `module.weight = value`): stores
/// right_inverse(value) of the chain, last parametrization first, into the originals.
void assign_parametrized(Module& module, const std::string& name, const Tensor& value);

/// PyTorch's `with parametrize.cached():`. While a guard lives, each parametrized tensor is
/// computed once (with its graph, at its first use on this thread) and reused, e.g. a weight
/// an RNN cell reads at every step of a loop; the cache is dropped when the outermost guard
/// ends.
///   { nn::CachedParametrizations cached;  for (...) h = cell(x[t], h); }
class CachedParametrizations {
 public:
  CachedParametrizations() { detail::begin_parametrization_cache(); }
  ~CachedParametrizations() { detail::end_parametrization_cache(); }
  CachedParametrizations(const CachedParametrizations&) = delete;
  CachedParametrizations& operator=(const CachedParametrizations&) = delete;
};

/// torch.nn.utils.parametrizations.weight_norm: weight = g * v / ||v||, the norm over every
/// dim but `dim` (g has v's shape with 1 elsewhere); dim = nullopt or -1 takes one norm of
/// the whole tensor, as PyTorch's. Originals original0 = g, original1 = v.
Module& weight_norm(Module& module, const std::string& name = "weight", std::optional<int64_t> dim = 0);

/// torch.nn.utils.parametrizations.spectral_norm: weight / sigma, sigma the largest singular
/// value of the weight as a matrix (dim first, the rest flattened), estimated by power
/// iteration on the buffers _u and _v (n_power_iterations per forward in training mode,
/// none in eval; 15 at registration from random unit vectors). A 1-D tensor is divided by
/// its norm. dim defaults to 1 for ConvTranspose layers, 0 otherwise.
Module& spectral_norm(Module& module, const std::string& name = "weight", int64_t n_power_iterations = 1,
                      double eps = 1e-12, std::optional<int64_t> dim = std::nullopt);

/// torch.nn.utils.parametrizations.orthogonal: the matrix (or each matrix of a batch, the last
/// two dims) stays orthogonal (orthonormal columns or rows when not square). orthogonal_map
/// "matrix_exp" (the default for square matrices) or "cayley" of a skew-symmetric matrix made
/// from the original's lower triangle, or "householder" (the default otherwise): reflections
/// from its strict lower triangle. use_trivialization (default) keeps the weight's orthogonal
/// completion in the buffer `base` and multiplies it in, starting the original at -I.
Module& orthogonal(Module& module, const std::string& name = "weight",
                   std::optional<std::string> orthogonal_map = std::nullopt, bool use_trivialization = true);

}  // namespace kiln::nn
