// Activation checkpointing on kiln::Function: the forward keeps only the (detached)
// inputs and the RNG state; the backward restores the RNG state, recomputes with grad
// mode on from fresh leaf copies of the inputs, and returns the gradients of the inputs
// and of the parameters fn uses (kiln::grad over the recomputed graph).
#include "kiln/nn/checkpoint.h"
#include <unordered_set>
#include "kiln/core/autocast.h"
#include "kiln/core/rng.h"

namespace kiln {

namespace {
thread_local int recomputation_depth = 0;
}  // namespace

bool in_checkpoint_recomputation() { return recomputation_depth > 0; }

namespace detail {

namespace {

// Marks the current thread as recomputing for the scope's lifetime.
struct RecomputeFlag {
  RecomputeFlag() { ++recomputation_depth; }
  ~RecomputeFlag() { --recomputation_depth; }
};

// Restores the generator's state at scope exit.
struct RngRestore {
  RngState saved = get_rng_state();
  ~RngRestore() { set_rng_state(saved); }
};

struct CheckpointFunction : Function {
  CheckpointFn fn;
  size_t n_inputs = 0;  // inputs of fn
  size_t n_all = 0;     // all Function inputs: fn's inputs, then parameters
  std::vector<Tensor> params;  // the parameters (leaves fn uses): inputs n_inputs .. n_all
  RngState rng;         // generator state when fn first ran
  bool amp_enabled = false;             // autocast state when fn first ran: the
  DType amp_dtype = DType::bfloat16;    // recomputation must use the same dtypes
  Tensor precomputed;   // output of a first run done before apply (see checkpoint_impl)

  std::string name() const override { return "checkpoint"; }

  Tensor forward(const std::vector<Tensor>& in) override {
    if (precomputed.defined()) return std::exchange(precomputed, Tensor());
    return fn(std::vector<Tensor>(in.begin(), in.begin() + std::ptrdiff_t(n_inputs)));
  }

  std::vector<Tensor> backward(const Tensor& grad_output) override {
    const std::vector<Tensor>& saved_in = saved();
    std::vector<Tensor> in(n_inputs);
    for (size_t i = 0; i < n_inputs; ++i) {
      Tensor t = saved_in[i];
      if (needs_input_grad(i)) {
        t = t.detach();  // a fresh leaf: its .grad is this input's gradient
        t.requires_grad_();
      }
      in[i] = t;
    }
    Tensor out;
    {
      RecomputeFlag recomputing;
      RngRestore restore;  // put back the current state after the recomputation
      set_rng_state(rng);
      GradModeGuard grad_on(true);
      autocast amp(amp_dtype, amp_enabled);
      out = fn(in);
    }
    KILN_CHECK(out.defined() && out.shape() == grad_output.shape(), "checkpoint: the recomputed output has shape ",
               out.defined() ? shape_str(out.shape()) : std::string("(undefined)"), " but the first run gave ",
               shape_str(grad_output.shape()), "; the checkpointed function must be deterministic");
    // The gradients of the inputs and of the parameters, returned to the engine (which
    // accumulates the parameters' into .grad and runs their hooks once, or captures them
    // for kiln::grad): never written into any .grad here.
    std::vector<Tensor> wrt;
    std::vector<size_t> slot;
    for (size_t i = 0; i < n_all; ++i)
      if (needs_input_grad(i)) wrt.push_back(i < n_inputs ? in[i] : params[i - n_inputs]), slot.push_back(i);
    std::vector<Tensor> grads(n_all);
    if (out.requires_grad() && !wrt.empty()) {
      const std::vector<Tensor> g = grad({out}, wrt, {grad_output}, {.allow_unused = true, .input_hooks = false});
      for (size_t k = 0; k < slot.size(); ++k) grads[slot[k]] = g[k];
    }
    return grads;
  }
};

// Leaves that require grad reachable from out's graph (the parameters fn used).
std::vector<Tensor> leaves_of(const Tensor& out) {
  std::vector<Tensor> leaves;
  if (!out.grad_fn()) {
    leaves.push_back(out);
    return leaves;
  }
  std::unordered_set<const TensorImpl*> seen_leaf;
  std::unordered_set<const Node*> seen_node{out.grad_fn().get()};
  std::vector<const Node*> stack{out.grad_fn().get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (e.leaf && seen_leaf.insert(e.leaf.get()).second) leaves.push_back(Tensor(e.leaf));
      if (e.node && seen_node.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  return leaves;
}

}  // namespace

Tensor checkpoint_impl(CheckpointFn fn, std::vector<Tensor> inputs, const std::vector<Tensor>* params) {
  for (size_t i = 0; i < inputs.size(); ++i)
    KILN_CHECK(inputs[i].defined(), "checkpoint: input ", i, " is an undefined tensor");
  if (!grad_mode_enabled()) return fn(inputs);  // nothing will be differentiated

  auto f = std::make_shared<CheckpointFunction>();
  f->fn = std::move(fn);
  f->n_inputs = inputs.size();
  f->rng = get_rng_state();
  f->amp_enabled = autocast_enabled();
  f->amp_dtype = autocast_dtype();
  std::vector<Tensor> all = inputs;
  if (params) {
    // Parameters become extra Function inputs, whose gradients the backward returns: the
    // node exists even when no input needs grad, and kiln::grad reaches them through it.
    for (const Tensor& p : *params)
      if (p.defined() && p.requires_grad()) f->params.push_back(p);
  } else {
    // Unknown parameters: run once with grad on, from detached inputs, to see which leaves
    // fn uses; keep the result and drop the graph (its activations are freed at once, as
    // after any checkpointed forward).
    std::vector<Tensor> det;
    det.reserve(inputs.size());
    for (const Tensor& t : inputs) det.push_back(t.detach());
    Tensor out = f->fn(det);
    KILN_CHECK(out.defined(), "checkpoint: the function returned an undefined tensor");
    if (!out.requires_grad() && !any_requires_grad(inputs)) return out;
    if (out.requires_grad()) f->params = leaves_of(out);
    f->precomputed = out.detach();
  }
  all.insert(all.end(), f->params.begin(), f->params.end());
  f->n_all = all.size();
  f->save_for_backward(inputs);
  return Function::apply(f, all);
}

}  // namespace detail

namespace nn {

Tensor Checkpoint::forward(const Tensor& x) {
  KILN_CHECK(inner_ != nullptr, "nn::Checkpoint: the wrapper is empty (default-constructed)");
  std::vector<Tensor> params = inner_->parameters();
  std::shared_ptr<Module> m = inner_;
  return kiln::detail::checkpoint_impl([m](const std::vector<Tensor>& in) { return (*m)(in[0]); }, {x}, &params);
}

std::string Checkpoint::type_name() const {
  return inner_ ? "Checkpoint<" + inner_->type_name() + ">" : std::string("Checkpoint");
}
std::string Checkpoint::extra_repr() const { return inner_ ? inner_->extra_repr() : std::string(); }

Module& Checkpoint::module() const {
  KILN_CHECK(inner_ != nullptr, "nn::Checkpoint: the wrapper is empty (default-constructed)");
  return *inner_;
}

}  // namespace nn
}  // namespace kiln
