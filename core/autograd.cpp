// The backward engine: reverse topological walk with explicit stacks (no recursion),
// gradient summation across edges, accumulation into leaves, graph release.
#include "kiln/core/autograd.h"
#include <atomic>
#include <span>
#include <unordered_map>
#include "kiln/core/autocast.h"
#include "kiln/core/copy.h"
#include "kiln/ops/elementwise.h"

namespace kiln {

namespace {
thread_local bool t_grad_mode = true;
}
bool grad_mode_enabled() { return t_grad_mode; }
void set_grad_mode(bool e) { t_grad_mode = e; }

Node::~Node() {
  // Destroying the last node of a long chain would otherwise destroy its inputs
  // recursively (one stack frame per node). Unlink children we solely own first.
  std::vector<std::shared_ptr<Node>> stack;
  for (auto& e : next)
    if (e.node) stack.push_back(std::move(e.node));
  next.clear();
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) {
      for (auto& e : n->next)
        if (e.node) stack.push_back(std::move(e.node));
      n->next.clear();
    }
  }
}

bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  if (!grad_mode_enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}
bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_mode_enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {

// record() for any list of saved tensors (an op's initializer_list, a Function's vector).
Tensor& record_node(Tensor& out, const char* name, const std::vector<Tensor>& inputs, std::span<const Tensor> saved,
                    BackwardFn backward) {
  if (!any_requires_grad(inputs)) return out;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->next.resize(inputs.size());
  node->input_shapes.resize(inputs.size());
  node->input_dtypes.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    node->input_shapes[i] = t.shape();
    node->input_dtypes[i] = t.dtype();
    if (!t.requires_grad()) continue;
    if (t.grad_fn()) node->next[i].node = t.grad_fn();
    else node->next[i].leaf = t.impl_ptr();
  }
  node->backward = std::move(backward);
  node->saved.reserve(saved.size());
  for (const Tensor& t : saved)
    if (t.defined()) node->saved.push_back({t, t.version()});
  // `out` may share its TensorImpl with nothing else yet; give it the autograd fields.
  out.impl().requires_grad = true;
  out.impl().grad_fn = std::move(node);
  return out;
}

}  // namespace

Tensor& record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, std::initializer_list<Tensor> saved,
               BackwardFn backward) {
  return record_node(out, name, inputs, std::span<const Tensor>(saved.begin(), saved.size()), std::move(backward));
}

Tensor& record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn backward) {
  return record_node(out, name, inputs, {}, std::move(backward));
}

Tensor GradHooks::apply(Tensor g) const {
  for (const auto& [id, fn] : grad) {
    Tensor r = fn(g);
    if (r.defined()) {
      KILN_CHECK(r.shape() == g.shape() && r.dtype() == g.dtype() && r.device() == g.device(), "gradient hook ", id,
                 " returned a ", dtype_name(r.dtype()), " ", shape_str(r.shape()), " tensor on ", r.device().str(),
                 " for a ", dtype_name(g.dtype()), " ", shape_str(g.shape()), " gradient on ", g.device().str(),
                 ": expected the same shape, dtype and device");
      g = r;
    }
  }
  return g;
}

namespace {
std::atomic<int64_t> g_next_hook_id{1};
}

int64_t Tensor::register_hook(std::function<Tensor(const Tensor&)> fn) const {
  KILN_CHECK(requires_grad(), "register_hook: the tensor of shape ", shape_str(shape()), " does not require grad");
  const int64_t id = g_next_hook_id++;
  if (grad_fn()) {
    grad_fn()->hooks.grad.emplace_back(id, std::move(fn));
  } else {
    if (!impl().hooks) impl().hooks = std::make_shared<GradHooks>();
    impl().hooks->grad.emplace_back(id, std::move(fn));
  }
  return id;
}

int64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const {
  KILN_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: expected a leaf that requires grad "
             "(a parameter), got a ", is_leaf() ? "leaf without requires_grad" : "non-leaf", " tensor of shape ",
             shape_str(shape()));
  const int64_t id = g_next_hook_id++;
  if (!impl().hooks) impl().hooks = std::make_shared<GradHooks>();
  impl().hooks->post_accumulate.emplace_back(id, std::move(fn));
  return id;
}

void Tensor::remove_hook(int64_t id) const {
  auto drop = [id](auto& v) { std::erase_if(v, [id](const auto& h) { return h.first == id; }); };
  if (grad_fn()) drop(grad_fn()->hooks.grad);
  if (impl().hooks) {
    drop(impl().hooks->grad);
    drop(impl().hooks->post_accumulate);
  }
}

namespace {

// Adds g into a leaf's .grad. The first gradient is stored as is when nothing else can
// see it (fresh, contiguous, solely owned); otherwise it is copied, so a leaf's grad never
// aliases another tensor (optimizers and clipping change grads in place).
void accumulate_leaf(TensorImpl& leaf, const Tensor& g, bool create_graph) {
  Tensor gg = g;
  if (gg.dtype() != leaf.dtype) gg = gg.to(leaf.dtype);
  if (create_graph && (gg.requires_grad() || (leaf.grad && leaf.grad->requires_grad))) {
    // keep the gradient's graph: a copy (no aliasing), and sums out of place
    if (gg.shape() != leaf.shape) gg = gg.reshape(leaf.shape);
    leaf.grad = (leaf.grad ? add(Tensor(leaf.grad), gg) : gg.clone()).impl_ptr();
    return;
  }
  if (!leaf.grad) {
    bool owned = gg.impl_ptr().use_count() <= 2 && gg.storage().use_count() == 1 && gg.is_contiguous() &&
                 gg.offset() == 0 && !gg.requires_grad();
    Tensor stored = owned ? gg : gg.detach().clone();
    if (stored.shape() != leaf.shape) stored = stored.reshape(leaf.shape).contiguous();
    leaf.grad = stored.detach().impl_ptr();
  } else {
    Tensor(leaf.grad).add_(gg);
  }
}

// Throws when a tensor node n saved was changed in place after the forward saved it.
void check_saved(const Node& n) {
  for (const SavedTensor& s : n.saved) {
    const uint64_t now = s.tensor.version();
    KILN_CHECK(now == s.version, n.name, " backward: a tensor of shape ", shape_str(s.tensor.shape()), " saved by ",
               n.name, " for the backward was modified in place (version ", now, ", saved at version ", s.version,
               "); clone it before changing it in place, or change it after the backward");
  }
}

// a + b as a fresh tensor (gradients arriving on two edges of one node); recorded when
// the backward creates a graph. Same dtype and shape: one out-of-place add, one pass over
// a and b (a clone then add_ made two: a [16, 128, 128] float32 pair 30 -> 21 us); else
// a's dtype and shape are kept (add_ rounds into a).
Tensor add_grads(const Tensor& a, const Tensor& b, bool create_graph) {
  if (create_graph) return add(a, b);
  if (a.dtype() == b.dtype() && a.shape() == b.shape()) return add(a.detach(), b.detach());  // records nothing
  Tensor s = a.detach().clone();
  s.add_(b);
  return s;
}

// Under create_graph, a gradient returned by a node whose closure is not twice
// differentiable: the same data, with a grad_fn that refuses to run, so a second
// backward through it stops with an error instead of silently treating it as a constant.
Tensor refuse_double_backward(const Tensor& gi, const Node& from) {
  const std::string op = from.name;
  Tensor t = gi.detach();
  auto node = std::make_shared<Node>();
  node->name = op + "_backward";
  // the edges of the node it came from: what the gradient depends on (grad() runs only the
  // nodes above its inputs, so it must see that this one leads to them)
  node->next = from.next;
  node->input_shapes = from.input_shapes;
  node->input_dtypes = from.input_dtypes;
  node->backward = [op](const Tensor&, const std::vector<bool>&) -> std::vector<Tensor> {
    KILN_FAIL("double backward through '", op, "': its backward is first-order only (a kernel autograd does "
              "not differentiate), and a create_graph gradient that passed through it was differentiated "
              "again. Twice-differentiable ops: elementwise ops and activations, reductions, softmax and "
              "log_softmax, matmul and linear, views, cat and stack, the losses (docs/training.md)");
  };
  t.impl().requires_grad = true;
  t.impl().grad_fn = std::move(node);
  return t;
}

// The node whose closure runs now on this thread (for saved_output); nested backwards
// (checkpointing) restore the outer one.
thread_local Node* t_running = nullptr;
struct Running {
  Node* outer;
  explicit Running(Node* n) : outer(t_running) { t_running = n; }
  ~Running() { t_running = outer; }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
};

// Where grad() wants gradients: its inputs, by leaf or by producing node, and the results.
struct Capture {
  std::unordered_map<TensorImpl*, size_t> leaves;
  std::unordered_map<Node*, size_t> nodes;
  std::vector<Tensor> grads;
  bool hooks = true;  // run the inputs' grad hooks (GradOptions::input_hooks)
};

// A leaf's whole gradient of this backward: its grad hooks, then (backward) the
// accumulation into .grad and its post-accumulate hooks, or (grad) the captured result.
void finish_leaf(const std::shared_ptr<TensorImpl>& leaf, const Tensor& g, bool create_graph, Capture* cap) {
  const std::shared_ptr<GradHooks> hooks = leaf->hooks;  // a hook may remove hooks
  if (cap && !cap->leaves.count(leaf.get())) return;  // grad(): neither hooks nor .grad of other leaves
  const Tensor gh = hooks && (!cap || cap->hooks) ? hooks->apply(g) : g;
  if (cap) {
    auto it = cap->leaves.find(leaf.get());
    Tensor& slot = cap->grads[it->second];
    slot = slot.defined() ? add_grads(slot, gh, create_graph) : gh;  // a root that is also reached
    return;
  }
  accumulate_leaf(*leaf, gh, create_graph);
  if (hooks)
    for (const auto& [id, fn] : std::vector(hooks->post_accumulate)) fn(Tensor(leaf));
}

// The engine behind backward() (cap null: gradients go to leaves' .grad) and grad() (cap:
// gradients of its inputs are captured instead).
void run_graph(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, BackwardOptions opts,
               Capture* cap) {
  autocast no_autocast(autocast_dtype(), false);  // backward formulas run in the forward's dtypes
  const bool create = opts.create_graph, retain_graph = opts.retain_graph || create;
  GradModeGuard grad_mode(create);  // the backward's own ops are recorded only for create_graph
  // 1. Count, for every node reachable from the roots, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, Tensor> pending;  // summed gradient waiting at each node
  // Leaves: edges still to deliver, and the gradient summed so far (a leaf's hooks and
  // accumulation run once, when its last edge has delivered).
  std::unordered_map<TensorImpl*, int> leaf_deps;
  std::unordered_map<TensorImpl*, Tensor> leaf_pending;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, Tensor>> leaf_roots;  // leaves among the roots, their seeds
  std::vector<Node*> stack;
  KILN_CHECK(grads.size() == roots.size(), "backward: ", roots.size(), " tensors but ", grads.size(),
             " gradients (give one per tensor; an undefined one for a one-element tensor means ones)");
  for (size_t r = 0; r < roots.size(); ++r) {
    const Tensor& root = roots[r];
    KILN_CHECK(root.requires_grad(), "backward: tensor of shape ", shape_str(root.shape()),
               " does not require grad and has no grad_fn (did you forget requires_grad_(), "
               "or compute it under NoGradGuard?)");
    Tensor seed = grads[r];
    if (!seed.defined()) {
      KILN_CHECK(root.numel() == 1, "backward: grad can be implicitly created only for a tensor with one "
                 "element, got shape ", shape_str(root.shape()), "; pass an explicit gradient");
      seed = ones_like(root);
    } else {
      KILN_CHECK(seed.shape() == root.shape(), "backward: gradient shape ", shape_str(seed.shape()),
                 " does not match tensor shape ", shape_str(root.shape()));
      KILN_CHECK(seed.device() == root.device(), "backward: gradient on ", seed.device().str(),
                 " but tensor on ", root.device().str());
      // in the tensor's dtype, as PyTorch: kernels read the gradient as the output's type
      // (loss.backward(ones({n})) on a float64 loss passes a float32 gradient)
      if (seed.dtype() != root.dtype()) seed = seed.to(root.dtype());
    }
    if (!root.grad_fn()) {  // a leaf: its gradient is the seed (summed with what reaches it below)
      ++leaf_deps[root.impl_ptr().get()];
      leaf_roots.emplace_back(root.impl_ptr(), seed);
      continue;
    }
    Node* n = root.grad_fn().get();
    auto it = pending.find(n);
    if (it == pending.end()) pending[n] = seed;
    else it->second = add_grads(it->second, seed, create);
    if (deps.count(n)) continue;
    deps[n] = 0;
    stack.push_back(n);
    while (!stack.empty()) {
      Node* cur = stack.back();
      stack.pop_back();
      for (auto& e : cur->next) {
        if (e.leaf) ++leaf_deps[e.leaf.get()];
        if (!e.node) continue;
        auto [it2, fresh] = deps.try_emplace(e.node.get(), 0);
        ++it2->second;
        if (fresh) stack.push_back(e.node.get());
      }
    }
  }
  // A gradient (or, undefined, none) for a leaf along one of its edges.
  auto deliver_leaf = [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor& gi) {
    TensorImpl* key = leaf.get();
    if (gi.defined()) {
      auto it = leaf_pending.find(key);
      if (it == leaf_pending.end()) leaf_pending.emplace(key, gi);
      else it->second = add_grads(it->second, gi, create);
    }
    if (--leaf_deps[key] > 0) return;
    auto it = leaf_pending.find(key);
    if (it == leaf_pending.end()) return;  // no gradient reached this leaf
    Tensor g = std::move(it->second);
    leaf_pending.erase(it);
    finish_leaf(leaf, g, create, cap);
  };
  // a leaf root gets its hooks once, with its seed plus whatever else reaches it, as in PyTorch
  for (const auto& [leaf, seed] : leaf_roots) deliver_leaf(leaf, seed);
  // grad(): only the nodes from which an input is reached run their backward (the rest of
  // the graph is neither computed nor freed, and its hooks do not run), as in PyTorch.
  std::unordered_map<Node*, bool> leads;  // node -> an input lies below it
  if (cap) {
    std::vector<std::pair<Node*, size_t>> post;  // iterative post-order: (node, next edge)
    for (auto& [start, _] : deps) {
      if (leads.count(start)) continue;
      post.push_back({start, 0});
      leads[start] = false;
      while (!post.empty()) {
        auto& [cur, k] = post.back();
        if (k < cur->next.size()) {
          const Edge& e = cur->next[k++];
          if (e.leaf && cap->leaves.count(e.leaf.get())) leads[cur] = true;
          if (!e.node) continue;
          Node* m = e.node.get();
          if (cap->nodes.count(m)) leads[cur] = true;
          auto f = leads.find(m);
          if (f == leads.end()) {
            leads[m] = false;
            post.push_back({m, 0});  // cur's answer waits for m's (read again when m is done)
          } else if (f->second) {
            leads[cur] = true;
          }
          continue;
        }
        Node* done = cur;
        post.pop_back();
        if (!post.empty() && leads[done]) leads[post.back().first] = true;
      }
    }
  }
  // The edges of a node whose backward does not run deliver nothing: release the counts.
  std::vector<Node*> ready;
  auto release_below = [&](Node* m) {
    std::vector<Node*> skip{m};
    while (!skip.empty()) {
      Node* s = skip.back();
      skip.pop_back();
      for (auto& se : s->next) {
        if (se.leaf) deliver_leaf(se.leaf, Tensor());
        if (se.node && --deps[se.node.get()] == 0) {
          if (pending.count(se.node.get())) ready.push_back(se.node.get());
          else skip.push_back(se.node.get());
        }
      }
    }
  };
  // 2. Process nodes whose every consumer has delivered its gradient (Kahn's order).
  for (auto& [n, _] : pending)
    if (deps[n] == 0) ready.push_back(n);
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    const bool is_input = cap && cap->nodes.count(n);
    if (cap && !leads[n] && !is_input) {  // off every path to an input
      pending.erase(n);
      release_below(n);
      continue;
    }
    KILN_CHECK(!n->released, "backward: trying to backward through the graph a second time (node '", n->name,
               "'); its saved tensors were freed after the first backward. Pass retain_graph=true to the "
               "first backward() if you need to call it twice");
    Tensor g = std::move(pending[n]);
    pending.erase(n);
    if (!n->hooks.grad.empty()) g = n->hooks.apply(g);
    if (is_input) cap->grads[cap->nodes.at(n)] = g;
    if (cap && !leads[n]) {  // an input with no other input below it: its backward is not needed
      release_below(n);
      continue;
    }
    check_saved(*n);
    std::vector<bool> needs(n->next.size());
    for (size_t i = 0; i < n->next.size(); ++i) needs[i] = n->next[i].valid();
    std::vector<Tensor> in_grads;
    {
      Running running(n);
      in_grads = n->backward(g, needs);
    }
    KILN_CHECK(in_grads.size() == n->next.size(), "backward of '", n->name, "' returned ", in_grads.size(),
               " gradients for ", n->next.size(), " inputs");
    if (create && !n->twice_differentiable)
      for (Tensor& gi : in_grads)
        if (gi.defined()) gi = refuse_double_backward(gi, *n);
    if (!retain_graph) {
      n->backward = nullptr;
      n->saved.clear();
      n->released = true;
    }
    for (size_t i = 0; i < n->next.size(); ++i) {
      Edge& e = n->next[i];
      if (!e.valid()) continue;
      Tensor& gi = in_grads[i];
      if (gi.defined()) {
        KILN_CHECK(gi.shape() == n->input_shapes[i], "backward of '", n->name, "': gradient for input ", i,
                   " has shape ", shape_str(gi.shape()), ", expected ", shape_str(n->input_shapes[i]));
        // a gradient has its input's dtype (a float32 tensor times a float64 0-dim one is float32,
        // and the 0-dim one's gradient float64), as PyTorch's engine casts it
        if (gi.dtype() != n->input_dtypes[i]) gi = gi.to(n->input_dtypes[i]);
      }
      if (e.leaf) {
        deliver_leaf(e.leaf, gi);
        continue;
      }
      Node* m = e.node.get();
      if (gi.defined()) {
        auto it = pending.find(m);
        if (it == pending.end()) pending.emplace(m, gi);
        else it->second = add_grads(it->second, gi, create);
      }
      if (--deps[m] == 0) {
        if (pending.count(m)) ready.push_back(m);
        else release_below(m);  // no gradient reached m at all: nothing to propagate
      }
    }
  }
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, BackwardOptions opts) {
  run_graph(roots, grads, opts, nullptr);
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  run_graph(roots, grads, {.retain_graph = retain_graph}, nullptr);
}

void Tensor::backward(const Tensor& grad, bool retain_graph, bool create_graph) const {
  run_graph({*this}, {grad}, {.retain_graph = retain_graph, .create_graph = create_graph}, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions opts) {
  KILN_CHECK(!outputs.empty(), "grad: no outputs given");
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "grad: ", outputs.size(),
             " outputs but ", grad_outputs.size(), " grad_outputs (give one per output, or none)");
  Capture cap;
  cap.grads.resize(inputs.size());
  cap.hooks = opts.input_hooks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    KILN_CHECK(x.defined() && x.requires_grad(), "grad: input ", i, " (",
               x.defined() ? shape_str(x.shape()) : "undefined", ") does not require grad");
    const bool fresh = x.grad_fn() ? cap.nodes.emplace(x.grad_fn().get(), i).second
                                   : cap.leaves.emplace(x.impl_ptr().get(), i).second;
    KILN_CHECK(fresh, "grad: input ", i, " is given twice");
  }
  std::vector<Tensor> seeds = grad_outputs;
  seeds.resize(outputs.size());
  run_graph(outputs, seeds, {.retain_graph = opts.retain_graph.value_or(opts.create_graph),
                             .create_graph = opts.create_graph}, &cap);
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(cap.grads[i].defined() || opts.allow_unused, "grad: input ", i, " (shape ",
               shape_str(inputs[i].shape()), ") is not used to compute the outputs; pass allow_unused = true "
               "to get an undefined gradient for it");
    if (!opts.create_graph && cap.grads[i].defined()) cap.grads[i] = cap.grads[i].detach();
  }
  return cap.grads;
}

void clear_grads(const std::vector<Tensor>& params, bool set_to_none) {
  NoGradGuard ng;
  for (const Tensor& p : params) {
    if (set_to_none) {
      p.set_grad(Tensor());
    } else if (Tensor g = p.grad(); g.defined()) {
      g.zero_();
    }
  }
}

Tensor& twice_differentiable(Tensor& out) {
  if (out.grad_fn()) out.grad_fn()->twice_differentiable = true;
  return out;
}

Tensor saved_output(const Tensor& y) {
  if (!grad_mode_enabled() || !t_running || !y.defined()) return y;
  Tensor v = y.detach();
  v.impl().requires_grad = true;
  v.impl().grad_fn = t_running->shared_from_this();
  return v;
}

Tensor Function::forward(const std::vector<Tensor>&) {
  KILN_FAIL(name(), ": override forward (one output, Function::apply) or forward_many (several outputs, "
            "Function::apply_many)");
}
std::vector<Tensor> Function::backward(const Tensor&) {
  KILN_FAIL(name(), ": override backward to go with forward");
}
std::vector<Tensor> Function::forward_many(const std::vector<Tensor>&) {
  KILN_FAIL(name(), ": override forward_many (several outputs, Function::apply_many) or forward (one output, "
            "Function::apply)");
}
std::vector<Tensor> Function::backward_many(const std::vector<Tensor>&) {
  KILN_FAIL(name(), ": override backward_many to go with forward_many");
}

void Function::save_for_backward(const std::vector<Tensor>& ts) {
  saved_.clear();
  for (const auto& t : ts) saved_.push_back(t.defined() ? t.detach() : Tensor());
}

void Function::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  for (const Tensor& t : outputs)
    if (t.defined()) non_diff_.push_back(t.impl_ptr());
}

bool Function::is_marked(const Tensor& t) const {
  for (const auto& p : non_diff_)
    if (p.get() == &t.impl()) return true;
  return false;
}

namespace {
// The gradients a Function's backward returned: one per input.
std::vector<Tensor> checked_grads(std::vector<Tensor> gs, size_t n, const std::string& name) {
  KILN_CHECK(gs.size() == n, name, ": backward returned ", gs.size(), " gradients for ", n, " inputs");
  return gs;
}
}  // namespace

Tensor Function::apply(std::shared_ptr<Function> fn, const std::vector<Tensor>& inputs) {
  Tensor out;
  {
    NoGradGuard g;
    out = fn->forward(inputs);
  }
  KILN_CHECK(out.defined(), fn->name(), ": forward returned an undefined tensor");
  const bool marked = fn->is_marked(out);
  fn->non_diff_.clear();
  out = out.detach();
  if (marked || !out.is_floating_point()) return out;
  record_node(out, "Function", inputs, fn->saved(), [fn](const Tensor& g, const std::vector<bool>& needs) {
    fn->needs_ = needs;
    return checked_grads(fn->backward(g), needs.size(), fn->name());
  });
  if (out.grad_fn()) out.grad_fn()->name = fn->name();
  return out;
}

std::vector<Tensor> Function::apply_many(std::shared_ptr<Function> fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outs;
  {
    NoGradGuard g;
    outs = fn->forward_many(inputs);
  }
  const std::string name = fn->name();
  std::vector<size_t> diff;  // the outputs that get a gradient
  for (size_t i = 0; i < outs.size(); ++i) {
    KILN_CHECK(outs[i].defined(), name, ": forward_many returned an undefined tensor as output ", i);
    if (outs[i].is_floating_point() && !fn->is_marked(outs[i])) diff.push_back(i);
  }
  fn->non_diff_.clear();
  for (Tensor& o : outs) o = o.detach();
  if (diff.empty() || !any_requires_grad(inputs)) return outs;
  // The call's node sits behind a hidden 1-D tensor as long as the differentiable outputs
  // together; output i's node hands its gradient to that node as its slice [off_i, off_i +
  // n_i) of zeros, the engine sums those, and the call's node cuts the sum back into one
  // gradient per output.
  const Tensor& first = outs[diff[0]];
  std::vector<int64_t> off, len;
  std::vector<Shape> shapes;
  int64_t total = 0;
  for (size_t i : diff) {
    const Tensor& o = outs[i];
    KILN_CHECK(o.dtype() == first.dtype() && o.device() == first.device(), name, ": the differentiable outputs "
               "must share one dtype and device, got output ", diff[0], " ", dtype_name(first.dtype()), " on ",
               first.device().str(), " and output ", i, " ", dtype_name(o.dtype()), " on ", o.device().str(),
               " (mark_non_differentiable the ones that need no gradient)");
    off.push_back(total);
    len.push_back(o.numel());
    shapes.push_back(o.shape());
    total += o.numel();
  }
  const TensorOptions opts{.dtype = first.dtype(), .device = first.device()};
  Tensor joint = zeros({}, opts).expand({total});  // a graph handle: never read, holds no memory
  const size_t n_out = outs.size();
  record_node(joint, "Function", inputs, fn->saved(),
              [fn, diff, off, len, shapes, n_out, name](const Tensor& g, const std::vector<bool>& needs) {
                fn->needs_ = needs;
                std::vector<Tensor> gos(n_out);
                const Tensor gc = g.contiguous();
                for (size_t k = 0; k < diff.size(); ++k) gos[diff[k]] = gc.narrow(0, off[k], len[k]).reshape(shapes[k]);
                return checked_grads(fn->backward_many(gos), needs.size(), name);
              });
  if (joint.grad_fn()) joint.grad_fn()->name = name;
  for (size_t k = 0; k < diff.size(); ++k) {
    const int64_t o = off[k], n = len[k];
    record_node(outs[diff[k]], "Function", {joint}, {}, [o, n, total, opts](const Tensor& g, const std::vector<bool>&) {
      Tensor packed = zeros({total}, opts);
      packed.narrow(0, o, n).copy_(g.reshape({n}));
      return std::vector<Tensor>{packed};
    });
    outs[diff[k]].grad_fn()->name = name + " output " + std::to_string(diff[k]);
  }
  return outs;
}

}  // namespace kiln
