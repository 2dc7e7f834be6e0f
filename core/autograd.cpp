// The backward engine: reverse topological walk with explicit stacks (no recursion),
// gradient summation across edges, accumulation into leaves, graph release.
#include "core/autograd.h"
#include <span>
#include <unordered_map>
#include "core/autocast.h"
#include "core/copy.h"

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

namespace {

// Adds g into a leaf's .grad. The first gradient is stored as is when nothing else can
// see it (fresh, contiguous, solely owned); otherwise it is copied, so a leaf's grad never
// aliases another tensor (optimizers and clipping change grads in place).
void accumulate_leaf(TensorImpl& leaf, const Tensor& g) {
  Tensor gg = g;
  if (gg.dtype() != leaf.dtype) gg = gg.to(leaf.dtype);
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

// a + b as a fresh tensor (gradients arriving on two edges of one node).
Tensor add_grads(const Tensor& a, const Tensor& b) {
  Tensor s = a.detach().clone();
  s.add_(b);
  return s;
}

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  autocast no_autocast(autocast_dtype(), false);  // backward formulas run in the forward's dtypes
  NoGradGuard no_grad;
  // 1. Count, for every node reachable from the roots, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, Tensor> pending;  // summed gradient waiting at each node
  std::vector<Node*> stack;
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
    }
    if (!root.grad_fn()) {  // a leaf: its gradient is the seed
      accumulate_leaf(root.impl(), seed);
      continue;
    }
    Node* n = root.grad_fn().get();
    auto it = pending.find(n);
    if (it == pending.end()) pending[n] = seed;
    else it->second = add_grads(it->second, seed);
    if (deps.count(n)) continue;
    deps[n] = 0;
    stack.push_back(n);
    while (!stack.empty()) {
      Node* cur = stack.back();
      stack.pop_back();
      for (auto& e : cur->next) {
        if (!e.node) continue;
        auto [it2, fresh] = deps.try_emplace(e.node.get(), 0);
        ++it2->second;
        if (fresh) stack.push_back(e.node.get());
      }
    }
  }
  // 2. Process nodes whose every consumer has delivered its gradient (Kahn's order).
  std::vector<Node*> ready;
  for (auto& [n, _] : pending)
    if (deps[n] == 0) ready.push_back(n);
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    KILN_CHECK(!n->released, "backward: trying to backward through the graph a second time (node '", n->name,
               "'); its saved tensors were freed after the first backward. Pass retain_graph=true to the "
               "first backward() if you need to call it twice");
    check_saved(*n);
    Tensor g = std::move(pending[n]);
    pending.erase(n);
    std::vector<bool> needs(n->next.size());
    for (size_t i = 0; i < n->next.size(); ++i) needs[i] = n->next[i].valid();
    std::vector<Tensor> in_grads = n->backward(g, needs);
    KILN_CHECK(in_grads.size() == n->next.size(), "backward of '", n->name, "' returned ", in_grads.size(),
               " gradients for ", n->next.size(), " inputs");
    if (!retain_graph) {
      n->backward = nullptr;
      n->saved.clear();
      n->released = true;
    }
    for (size_t i = 0; i < n->next.size(); ++i) {
      Edge& e = n->next[i];
      if (!e.valid()) continue;
      Tensor& gi = in_grads[i];
      if (gi.defined())
        KILN_CHECK(gi.shape() == n->input_shapes[i], "backward of '", n->name, "': gradient for input ", i,
                   " has shape ", shape_str(gi.shape()), ", expected ", shape_str(n->input_shapes[i]));
      if (e.leaf) {
        if (gi.defined()) accumulate_leaf(*e.leaf, gi);
        continue;
      }
      Node* m = e.node.get();
      if (gi.defined()) {
        auto it = pending.find(m);
        if (it == pending.end()) pending.emplace(m, gi);
        else it->second = add_grads(it->second, gi);
      }
      if (--deps[m] == 0) {
        if (pending.count(m)) ready.push_back(m);
        else {
          // no gradient reached m at all: nothing to propagate, but release its dependents' counts
          std::vector<Node*> skip{m};
          while (!skip.empty()) {
            Node* s = skip.back();
            skip.pop_back();
            for (auto& se : s->next)
              if (se.node && --deps[se.node.get()] == 0) {
                if (pending.count(se.node.get())) ready.push_back(se.node.get());
                else skip.push_back(se.node.get());
              }
          }
        }
      }
    }
  }
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward({*this}, {grad}, retain_graph);
}

void Function::save_for_backward(const std::vector<Tensor>& ts) {
  saved_.clear();
  for (const auto& t : ts) saved_.push_back(t.defined() ? t.detach() : Tensor());
}

Tensor Function::apply(std::shared_ptr<Function> fn, const std::vector<Tensor>& inputs) {
  Tensor out;
  {
    NoGradGuard g;
    out = fn->forward(inputs);
  }
  KILN_CHECK(out.defined(), fn->name(), ": forward returned an undefined tensor");
  out = out.detach();
  record_node(out, "Function", inputs, fn->saved(), [fn](const Tensor& g, const std::vector<bool>& needs) {
    fn->needs_ = needs;
    std::vector<Tensor> gs = fn->backward(g);
    KILN_CHECK(gs.size() == needs.size(), fn->name(), ": backward returned ", gs.size(),
               " gradients for ", needs.size(), " inputs");
    return gs;
  });
  if (out.grad_fn()) out.grad_fn()->name = fn->name();
  return out;
}

}  // namespace kiln
