// nn::Module: the base of every layer and model. A module is a cheap handle (like
// Tensor) to shared state: ordered maps of parameters, buffers and child modules, and
// the training flag. Copying a module copies the handle, so copies share parameters.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>
#include "kiln/core/autograd.h"
#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/ordered_dict.h"

namespace kiln::nn {

class Module;

namespace detail {
/// Points `dst`'s TensorImpl at the contents (storage, shape, strides, dtype) of `src`, so
/// every handle to dst sees them; autograd fields are left alone. Module::to and
/// parametrizations use it.
void replace_contents(const Tensor& dst, const Tensor& src);
/// Opens and closes a scope (per thread, nested ones count) in which each parametrized
/// tensor is computed once (nn::CachedParametrizations in nn/parametrize.h).
void begin_parametrization_cache();
void end_parametrization_cache();
}  // namespace detail

/// Readable C++ type name from typeid(...).name() ("kiln::nn::" prefixes removed).
std::string demangle(const char* mangled);

/// name -> tensor, in registration order (parameters and persistent buffers).
using StateDict = OrderedDict<Tensor>;

/// Called before a module's forward with (module, input); may return a replacement input.
using ForwardPreHook = std::function<std::optional<Tensor>(Module&, const Tensor&)>;
/// Called after a module's forward with (module, input, output); may return a replacement output.
using ForwardHook = std::function<std::optional<Tensor>(Module&, const Tensor&, const Tensor&)>;

/// A registered tensor that a parametrization computes (nn/parametrize.h).
struct ParametrizedTensor {
  std::string name;                    // "weight"
  std::shared_ptr<TensorImpl> member;  // the layer's member handle's TensorImpl
  std::function<Tensor()> value;       // computes the value from the originals
  /// Keys of an older file format that load_state_dict renames when all are present
  /// (weight_norm: weight_g -> parametrizations.weight.original0, weight_v -> ...original1).
  std::vector<std::pair<std::string, std::string>> legacy_keys;
};

/// The state a module handle points to. Users go through Module.
struct ModuleState {
  bool training = true;
  OrderedDict<Tensor> parameters;
  OrderedDict<Tensor> buffers;
  std::vector<std::string> non_persistent;           // buffers left out of state_dict()
  OrderedDict<std::shared_ptr<Module>> children;     // each points to a copy of the concrete module
  std::vector<std::pair<int64_t, ForwardPreHook>> pre_hooks;  // (id, hook), in registration order
  std::vector<std::pair<int64_t, ForwardHook>> post_hooks;
  /// Registered tensors that a parametrization computes; empty for almost every module.
  std::vector<ParametrizedTensor> parametrized;
};

/// Base class of layers and models.
///
/// Writing a model (DESIGN.md section 6):
///   struct Net : nn::Module {
///     nn::Linear fc1, fc2;
///     Net() {
///       fc1 = register_module("fc1", nn::Linear(784, 128));
///       fc2 = register_module("fc2", nn::Linear(128, 10));
///     }
///     Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }
///   };
///   Net net;  auto y = net(x);  net.to(DType::float64);  auto sd = net.state_dict();
///
/// The value-handle rule. Every module object is a handle: its parameters, buffers,
/// children and training flag live in a shared ModuleState, and copies of a module share
/// that state. register_module(name, child) stores a copy of `child` (of its concrete
/// type) and returns another copy, so the returned handle and the registered child are
/// one module. For a user-defined module to behave the same way when it is copied (as
/// Sequential, ModuleList, Checkpoint and register_module do):
///   - keep parameters and buffers in members assigned from register_parameter /
///     register_buffer (Tensor handles), and submodules in members assigned from
///     register_module (module handles);
///   - other members must be configuration fixed at construction (sizes, flags); any
///     state that changes after construction belongs in a buffer;
///   - never reassign a registered member later (`fc1.weight = other` would detach the
///     member from the registered tensor); change values in place under NoGradGuard.
/// A user module may also be held through std::make_shared<Net>() and registered or
/// put in a Sequential as a shared_ptr; then no copy is made at all.
///
/// forward: modules taking one tensor override `Tensor forward(const Tensor& x)`
/// (non-const, exactly this signature); then `m(x)` works on any handle, and the module
/// can be used inside Sequential, ModuleList and Checkpoint. Modules with other
/// signatures (losses, forward(x, mask)) define their own forward/operator() (add
/// `using nn::Module::forward;` to keep -Woverloaded-virtual quiet) and cannot be put in
/// a Sequential.
class Module {
 public:
  /// A module with fresh, empty state.
  Module();
  virtual ~Module() = default;
  // Copies share state. There are deliberately no move operations (a move copies), so a
  // moved-from module is still a valid handle.
  Module(const Module&) = default;
  Module& operator=(const Module&) = default;

  /// The computation of one-input modules. The default throws (the module has none).
  virtual Tensor forward(const Tensor& x);
  /// Calls forward(x), with the forward hooks around it when there are any. Constness is
  /// shallow, as for Tensor: modules are handles.
  Tensor operator()(const Tensor& x) const {
    if (!has_forward_hooks()) return const_cast<Module*>(this)->forward(x);
    return call_with_hooks(x);
  }

  // ---- forward hooks (PyTorch's register_forward_pre_hook / register_forward_hook) ----
  /// `hook(module, input)` runs before every forward through operator() (also Sequential,
  /// ModuleList loops and checkpoint, which call it); a returned tensor replaces the
  /// input. Returns an id for remove_forward_hook. Hooks see the recomputation of a
  /// checkpointed module in the backward too (kiln::in_checkpoint_recomputation() tells).
  int64_t register_forward_pre_hook(ForwardPreHook hook);
  /// `hook(module, input, output)` runs after every forward; a returned tensor replaces the
  /// output (e.g. to record activations, or to scale them).
  int64_t register_forward_hook(ForwardHook hook);
  /// Removes a pre- or post-forward hook of this module by id (unknown ids are ignored).
  void remove_forward_hook(int64_t id);
  /// Whether any forward hook is registered on this module (not its children).
  bool has_forward_hooks() const { return !state_->pre_hooks.empty() || !state_->post_hooks.empty(); }

  /// The value a forward uses for the registered tensor `member` (a member such as
  /// `weight`): `member` itself, or, when nn::register_parametrization has put a
  /// parametrization on it (weight_norm, spectral_norm), the parametrization's output,
  /// computed now from the originals with the graph recorded (what PyTorch's
  /// `module.weight` returns). Layers read their parameters through it:
  ///   return linear(x, param(weight), param(bias));
  /// After the call `member` holds the computed value too (detached), so reading
  /// `layer.weight` shows the value of the latest forward.
  Tensor param(const Tensor& member) const {
    return state_->parametrized.empty() ? member : parametrized_value(member);
  }

  /// Re-initialises the module's own parameters (PyTorch's default schemes) under
  /// NoGradGuard. Layers override it; the default does nothing. Not recursive.
  virtual void reset_parameters() {}

  // ---- registration ----
  /// Adds a parameter (a leaf; a non-leaf is detached first) and returns a reference to
  /// the stored handle: assign it to a member (`weight = register_parameter(...)`).
  /// requires_grad=false makes a frozen parameter. An undefined tensor is allowed and is
  /// skipped by parameters() and state_dict().
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// Adds a buffer: state that is not trained (running stats, masks). Non-persistent
  /// buffers are left out of state_dict().
  Tensor& register_buffer(const std::string& name, Tensor t, bool persistent = true);
  /// Adds a child module; returns a handle that shares state with the registered child.
  /// Pass the concrete type (not a Module& referring to a derived module).
  template <class M>
  M register_module(const std::string& name, const M& child) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: child must derive from kiln::nn::Module");
    KILN_CHECK(typeid(child) == typeid(M), "register_module('", name, "'): got a ", demangle(typeid(M).name()),
               " reference to a ", demangle(typeid(child).name()),
               "; pass the module by its own type so it is not sliced");
    add_child(name, std::make_shared<M>(child));
    return child;
  }
  /// Adds a child held by shared_ptr (no copy is made).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: child must derive from kiln::nn::Module");
    KILN_CHECK(child != nullptr, "register_module('", name, "'): child is null");
    add_child(name, child);
    return child;
  }

  // ---- introspection ----
  /// All parameters of this module and its descendants (each tensor once, even when
  /// shared), in registration order.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// Parameters with dotted names ("blocks.0.attn.qkv.weight"), each tensor once.
  OrderedDict<Tensor> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  OrderedDict<Tensor> named_buffers(bool recurse = true) const;
  /// Direct children (handles to the registered concrete modules). As in PyTorch, a
  /// module registered under two names is listed once, under the first.
  std::vector<std::shared_ptr<Module>> children() const;
  OrderedDict<std::shared_ptr<Module>> named_children() const;
  /// Every descendant with its dotted name (not including this module), each module once.
  OrderedDict<std::shared_ptr<Module>> named_modules() const;
  /// Calls fn on every child's apply (each child once), then on this module: children
  /// before their parents, like PyTorch's Module.apply, e.g. for custom initialisation:
  ///   model.apply([](nn::Module& m) { if (auto* l = dynamic_cast<nn::Linear*>(&m)) ...; });
  void apply(const std::function<void(Module&)>& fn);
  /// Number of parameter elements (shared tensors counted once).
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- modes and placement (recursive) ----
  /// Sets training mode on this module and every descendant.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const;
  /// Moves every parameter and buffer (and gradient) to `device`. Handles stay valid:
  /// the tensors' contents are replaced, so `fc1.weight` and named_parameters() agree.
  Module& to(Device device);
  /// Converts floating parameters and buffers (and their gradients) to `dtype`; integer
  /// buffers (num_batches_tracked) are left alone. Handles stay valid, as for to(Device).
  Module& to(DType dtype);
  Module& to(Device device, DType dtype) { return to(device).to(dtype); }
  /// Clears every parameter's gradient: undefined (set_to_none, the default, like
  /// PyTorch) or zero-filled.
  void zero_grad(bool set_to_none = true);
  /// Sets requires_grad on every parameter of this module and its descendants (PyTorch's
  /// Module.requires_grad_): `backbone.requires_grad_(false)` freezes a part of a model.
  Module& requires_grad_(bool on = true);

  // ---- checkpoints ----
  /// Parameters and persistent buffers by dotted name, in registration order: detached
  /// tensors sharing the module's storage (as PyTorch's, keep_vars=False), so
  /// `sd.at("fc.weight").mul_(0.5)` changes the weight and no gradient is recorded.
  StateDict state_dict() const;
  /// Copies values from `sd` into the module's tensors (under NoGradGuard; dtype and
  /// device are converted). Every problem is reported at once in ONE kiln::Error: keys
  /// missing from sd and unexpected keys in sd (both only when strict) and entries whose
  /// shape differs (always). Nothing is changed when it throws.
  void load_state_dict(const StateDict& sd, bool strict = true);

  // ---- printing ----
  /// The module's type name ("Linear"; user modules: their C++ name).
  virtual std::string type_name() const;
  /// Configuration shown in the summary, e.g. "in_features=3, out_features=4, bias=true".
  virtual std::string extra_repr() const { return ""; }
  /// A summary: one line per module with its parameter count, then the total.
  std::string str() const;

 protected:
  /// Makes this handle point at `other`'s state (used by wrappers such as Checkpoint).
  void share_state_with(const Module& other) { state_ = other.state_; }
  ModuleState& state() const { return *state_; }

 private:
  Tensor call_with_hooks(const Tensor& x) const;
  Tensor parametrized_value(const Tensor& member) const;
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name, const char* what) const;
  friend struct ModuleAccess;
  friend struct ParametrizeAccess;  // nn/parametrize.cpp

  std::shared_ptr<ModuleState> state_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

/// A function as a module: forward(x) = fn(x), no parameters. For lambdas in a Sequential
/// (which also accepts a lambda directly) and for giving a function forward hooks:
///   nn::Sequential net{nn::Linear(784, 128), nn::Functional([](const Tensor& x) { return relu(x); }, "relu"),
///                      nn::Linear(128, 10)};
class Functional : public Module {
 public:
  explicit Functional(std::function<Tensor(const Tensor&)> fn, std::string name = "");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return name_; }

 private:
  std::function<Tensor(const Tensor&)> fn_;
  std::string name_;
};

/// A Functional module held by shared_ptr (AnyModule's lambda conversion).
std::shared_ptr<Module> make_functional(std::function<Tensor(const Tensor&)> fn);

/// Type-erased handle to any module with `Tensor forward(const Tensor&)`; what Sequential
/// and ModuleList are built from. Implicitly made from any module (copied as its
/// concrete type, so it shares state with the original) or a shared_ptr to one.
class AnyModule {
 public:
  AnyModule() = default;
  template <class M, class = std::enable_if_t<std::is_base_of_v<Module, M>>>
  AnyModule(const M& m) {
    KILN_CHECK(typeid(m) == typeid(M), "AnyModule: got a ", demangle(typeid(M).name()), " reference to a ",
               demangle(typeid(m).name()), "; pass the module by its own type so it is not sliced");
    ptr_ = std::make_shared<M>(m);
  }
  template <class M, class = std::enable_if_t<std::is_base_of_v<Module, M>>>
  AnyModule(std::shared_ptr<M> m) : ptr_(std::move(m)) {}
  /// A function Tensor(const Tensor&) (a lambda, a function pointer) as a Functional
  /// module, so that it can sit in a Sequential: Sequential{Linear(4, 8), [](const Tensor& x) { return relu(x); }}.
  template <class F, class = std::enable_if_t<!std::is_base_of_v<Module, std::remove_cvref_t<F>> &&
                                              !std::is_same_v<std::remove_cvref_t<F>, AnyModule> &&
                                              std::is_invocable_r_v<Tensor, F&, const Tensor&>>,
            class = void>
  AnyModule(F&& fn) : ptr_(make_functional(std::function<Tensor(const Tensor&)>(std::forward<F>(fn)))) {}
  const std::shared_ptr<Module>& ptr() const { return ptr_; }
  Module& operator*() const { return *ptr_; }
  Module* operator->() const { return ptr_.get(); }
  Tensor operator()(const Tensor& x) const { return (*ptr_)(x); }

 private:
  std::shared_ptr<Module> ptr_;
};

}  // namespace kiln::nn
