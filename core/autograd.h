// The autograd tape: a graph of Nodes, one per op output that needs a gradient.
// Each Node holds edges to its inputs' producers (or to leaves) and a backward closure
// that maps the output's gradient to the inputs' gradients (micrograd's `_backward`).
// Tensor::backward() walks the graph in reverse topological order without recursion.
// Tensors a closure reads are listed as the node's saved tensors with their version,
// so a backward refuses to run on data changed in place since the forward.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "kiln/core/tensor.h"

namespace kiln {

/// Where an input's gradient goes: the node that produced it, or the leaf itself.
struct Edge {
  std::shared_ptr<Node> node;        // non-leaf input
  std::shared_ptr<TensorImpl> leaf;  // leaf input that requires grad
  bool valid() const { return node || leaf; }
};

/// backward(grad_output, needs) returns one gradient per input (undefined where
/// needs[i] is false or the input gets no gradient).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output,
                                                     const std::vector<bool>& needs)>;

/// A tensor's gradient hooks (Tensor::register_hook, register_post_accumulate_grad_hook),
/// each with the id remove_hook takes.
struct GradHooks {
  std::vector<std::pair<int64_t, std::function<Tensor(const Tensor&)>>> grad;
  std::vector<std::pair<int64_t, std::function<void(const Tensor&)>>> post_accumulate;
  /// g after every grad hook (a hook returning an undefined Tensor keeps g).
  Tensor apply(Tensor g) const;
};

/// A tensor a backward closure reads, and Tensor::version() when the forward saved it.
struct SavedTensor {
  Tensor tensor;
  uint64_t version = 0;
};

struct Node : std::enable_shared_from_this<Node> {
  std::string name;             // op name, used in error messages
  GradHooks hooks;              // hooks on the gradient of this node's output (non-leaf tensors)
  std::vector<Edge> next;       // one per input, in the op's input order
  std::vector<Shape> input_shapes;
  std::vector<DType> input_dtypes;
  BackwardFn backward;          // released (empty) after a backward without retain_graph
  std::vector<SavedTensor> saved;  // checked before backward runs; released with it
  bool released = false;
  /// The backward closure is built from recorded ops on live tensors (twice_differentiable()),
  /// so under create_graph it records a graph of its own; when false, the gradients it
  /// returns under create_graph refuse a further backward with an error naming the op.
  bool twice_differentiable = false;
  ~Node();                      // iterative: a 100,000-node chain does not recurse
};

/// Whether ops record the graph on this thread (on by default).
bool grad_mode_enabled();
void set_grad_mode(bool enabled);

/// Disables graph recording in a scope (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_mode_enabled()) { set_grad_mode(false); }
  ~NoGradGuard() { set_grad_mode(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
 private:
  bool prev_;
};
/// Sets grad mode to `enabled` in a scope (used by checkpointing to re-enable it).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(grad_mode_enabled()) { set_grad_mode(enabled); }
  ~GradModeGuard() { set_grad_mode(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;
 private:
  bool prev_;
};

/// True when grad mode is on and any input requires grad.
bool any_requires_grad(std::initializer_list<Tensor> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

/// Records `out` as produced by op `name` from `inputs`: when grad mode is on and an
/// input requires grad, gives `out` a grad_fn with `backward`. Returns out.
/// Closures never capture `out` itself (a cycle): its data is captured detached and read
/// through saved_output(). Inputs may be captured as they are (a twice-differentiable
/// formula needs them live) or detached. Every tensor the closure captures
/// must be listed in `saved` (undefined ones are skipped): their versions are recorded
/// now, and backward throws naming the op if one was changed in place in between.
/// (An initializer_list: nothing is allocated when no input needs grad.)
Tensor& record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, std::initializer_list<Tensor> saved,
               BackwardFn backward);
/// The same for a closure that captures no tensor.
Tensor& record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn backward);

/// Marks the node `record` just gave `out` (if any) as twice differentiable: its closure
/// computes every gradient with recorded ops, reading live inputs (not detached ones) and
/// its own output through saved_output(). Returns out.
Tensor& twice_differentiable(Tensor& out);

/// Inside a backward closure: the op's saved output `y` (kept detached, so the graph has
/// no cycle) as a tensor of the graph again, produced by the node now running, when
/// create_graph is on; `y` itself otherwise. (PyTorch's SavedVariable for outputs.)
Tensor saved_output(const Tensor& y);

/// How a backward runs. create_graph records the backward's own ops, so the gradients it
/// produces have a grad_fn and can be differentiated again (second derivatives, gradient
/// penalties, Hessian-vector products); it implies retain_graph.
struct BackwardOptions {
  bool retain_graph = false;
  bool create_graph = false;
};

/// Runs backward from several roots with their seed gradients at once.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, BackwardOptions opts);
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

struct GradOptions {
  std::optional<bool> retain_graph = std::nullopt;  ///< default: create_graph
  bool create_graph = false;         ///< the returned gradients get a grad_fn (double backward)
  bool allow_unused = false;         ///< an input no output depends on gets an undefined tensor, not an error
  bool input_hooks = true;           ///< false: the inputs' grad hooks do not run (activation checkpointing's
                                     ///< inner pass: they run once, when the outer backward accumulates)
};

/// The gradients of sum(outputs[i] * grad_outputs[i]) with respect to `inputs`, returned
/// instead of accumulated into any .grad (torch.autograd.grad). grad_outputs may be empty
/// when every output has one element. With create_graph the results are differentiable:
///   Tensor y = sum(x * x * x);
///   Tensor dy = kiln::grad({y}, {x}, {}, {.create_graph = true})[0];   // 3x^2
///   Tensor d2 = kiln::grad({sum(dy)}, {x})[0];                         // 6x
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, GradOptions opts = {});

/// Clears the gradients of `params`: undefined (set_to_none, PyTorch's default) or
/// zero-filled in place (an undefined one stays undefined). Module::zero_grad and
/// Optimizer::zero_grad.
void clear_grads(const std::vector<Tensor>& params, bool set_to_none = true);

/// A user-defined differentiable function: subclass, implement forward (runs with grad
/// mode off) and backward (one gradient per input), then call Function::apply.
///   struct Cube : kiln::Function {
///     Tensor forward(const std::vector<Tensor>& in) override { save_for_backward({in[0]}); return in[0]*in[0]*in[0]; }
///     std::vector<Tensor> backward(const Tensor& g) override { auto x = saved()[0]; return {g * 3.0 * x * x}; }
///   };
///   Tensor y = kiln::Function::apply(std::make_shared<Cube>(), {x});
/// Each apply() takes a fresh object, so the object is the call's context: tensors for the
/// backward go through save_for_backward (detached, with in-place changes detected),
/// anything else (a dim, a flag, a scale, shapes) in plain members set in forward.
/// Several outputs: override forward_many / backward_many instead and call apply_many.
/// backward_many gets one gradient per output (zeros for a differentiable output that
/// received none, undefined for a non-differentiable one) and returns one per input.
/// Outputs that are not floating point (indices, counts) and those passed to
/// mark_non_differentiable in forward get no gradient; the differentiable outputs must
/// share one dtype and device.
class Function {
 public:
  virtual ~Function() = default;
  /// One output (used by apply). The default throws: override it or forward_many.
  virtual Tensor forward(const std::vector<Tensor>& inputs);
  /// The gradients of the inputs from the output's gradient (used by apply).
  virtual std::vector<Tensor> backward(const Tensor& grad_output);
  /// Several outputs (used by apply_many). The default throws: override it or forward.
  virtual std::vector<Tensor> forward_many(const std::vector<Tensor>& inputs);
  /// The gradients of the inputs from one gradient per output (used by apply_many).
  virtual std::vector<Tensor> backward_many(const std::vector<Tensor>& grad_outputs);
  /// Name used in error messages and printed graphs.
  virtual std::string name() const { return "Function"; }

  /// Keeps tensors for backward (stored detached; their versions are checked like an op's).
  void save_for_backward(const std::vector<Tensor>& ts);
  const std::vector<Tensor>& saved() const { return saved_; }
  /// Whether input i needs a gradient (valid inside backward).
  bool needs_input_grad(size_t i) const { return i < needs_.size() && needs_[i]; }
  /// Called in forward / forward_many on outputs it returns: they get no gradient (a mask,
  /// sorted indices as floats, a statistic reported alongside).
  void mark_non_differentiable(const std::vector<Tensor>& outputs);

  /// Runs fn->forward on inputs and records fn->backward on the tape.
  static Tensor apply(std::shared_ptr<Function> fn, const std::vector<Tensor>& inputs);
  /// Runs fn->forward_many on inputs and records fn->backward_many on the tape: one node
  /// for the call (named fn->name()) and one per differentiable output, whose gradients
  /// reach the call's node together, so backward_many runs once per backward.
  static std::vector<Tensor> apply_many(std::shared_ptr<Function> fn, const std::vector<Tensor>& inputs);

 private:
  bool is_marked(const Tensor& t) const;
  std::vector<Tensor> saved_;
  std::vector<bool> needs_;
  std::vector<std::shared_ptr<TensorImpl>> non_diff_;  // outputs marked in forward (cleared by apply)
};

}  // namespace kiln
