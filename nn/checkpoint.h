// Activation checkpointing: run a function without keeping its activations, and
// recompute them (with the same random numbers) during the backward pass. Trades one
// extra forward per checkpointed segment for the memory of its activations.
#pragma once
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/nn/module.h"

namespace kiln {

namespace detail {
using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;
/// The engine behind kiln::checkpoint. `params`: the tensors fn uses besides its inputs
/// that may need gradients (a module's parameters); nullptr when unknown.
Tensor checkpoint_impl(CheckpointFn fn, std::vector<Tensor> inputs, const std::vector<Tensor>* params);
}  // namespace detail

/// True on the thread running a checkpointed function again in the backward pass. Layers
/// with side effects check it: BatchNorm updates its running statistics only in the first
/// run, so checkpointing does not count a batch twice.
bool in_checkpoint_recomputation();

/// Calls fn(inputs...) without recording its graph and returns its result; in the
/// backward pass fn is run again (grad mode on, the RNG state of the first call restored,
/// so dropout draws the same masks) and differentiated, giving the inputs their
/// gradients and the parameters used inside fn theirs (through the engine: backward()
/// accumulates them into .grad and runs their hooks once, kiln::grad returns them and
/// leaves .grad alone, as torch.utils.checkpoint with use_reentrant=False):
///   x = kiln::checkpoint([&](const Tensor& h) { return block(h); }, x);
///   y = kiln::checkpoint([&](const Tensor& a, const Tensor& b) { return f(a, b); }, a, b);
/// fn must be deterministic given the RNG state, and must not change its inputs.
/// For a plain callable the first call runs with grad mode on to find the parameters fn
/// uses (its graph is dropped right away, so only one block's activations live at a time,
/// as in the recomputation); the result requires grad when an input or such a parameter
/// does. Pass a module (below) to skip that bookkeeping. Under NoGradGuard, checkpoint
/// just calls fn.
template <class F, class... Ts>
  requires(!std::is_base_of_v<nn::Module, std::remove_cvref_t<F>> &&
           (std::is_same_v<std::remove_cvref_t<Ts>, Tensor> && ...) && std::is_invocable_v<F&, const Ts&...>)
Tensor checkpoint(F&& fn, const Ts&... inputs) {
  auto f = std::make_shared<std::decay_t<F>>(std::forward<F>(fn));
  detail::CheckpointFn call = [f](const std::vector<Tensor>& in) -> Tensor {
    return [&]<size_t... I>(std::index_sequence<I...>) -> Tensor { return (*f)(in[I]...); }(
        std::index_sequence_for<Ts...>{});
  };
  return detail::checkpoint_impl(std::move(call), std::vector<Tensor>{inputs...}, nullptr);
}

/// Checkpoints a module's forward: `x = kiln::checkpoint(block, x);`. The module's
/// parameters are known, so no extra bookkeeping is needed when x needs no grad (tensors
/// that need grad must then be registered parameters of the module, not stray members).
template <class M>
  requires std::is_base_of_v<nn::Module, M>
Tensor checkpoint(const M& module, const Tensor& x) {
  KILN_CHECK(typeid(module) == typeid(M), "checkpoint: got a ", nn::demangle(typeid(M).name()), " reference to a ",
             nn::demangle(typeid(module).name()), "; pass the module by its own type (or wrap it in nn::Checkpoint)");
  auto m = std::make_shared<M>(module);  // a handle sharing the module's state
  std::vector<Tensor> params = module.parameters();
  return detail::checkpoint_impl([m](const std::vector<Tensor>& in) { return (*m)(in[0]); }, {x}, &params);
}

namespace nn {

/// A module wrapper whose forward is checkpointed. It shares the wrapped module's state,
/// so parameter names, state_dict() and train()/eval() are those of the wrapped module:
///   blocks.push_back(nn::Checkpoint(nn::TransformerBlock(256, 8, {.causal = true})));
class Checkpoint : public Module {
 public:
  Checkpoint() = default;
  template <class M>
    requires(std::is_base_of_v<Module, M> && !std::is_same_v<M, Checkpoint>)
  explicit Checkpoint(const M& module) {
    KILN_CHECK(typeid(module) == typeid(M), "nn::Checkpoint: got a ", demangle(typeid(M).name()),
               " reference to a ", demangle(typeid(module).name()), "; pass the module by its own type");
    inner_ = std::make_shared<M>(module);
    share_state_with(*inner_);
  }
  template <class M>
    requires std::is_base_of_v<Module, M>
  explicit Checkpoint(std::shared_ptr<M> module) : inner_(std::move(module)) {
    KILN_CHECK(inner_ != nullptr, "nn::Checkpoint: module is null");
    share_state_with(*inner_);
  }
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override;
  std::string extra_repr() const override;
  /// The wrapped module.
  Module& module() const;

 private:
  std::shared_ptr<Module> inner_;
};

}  // namespace nn
}  // namespace kiln
