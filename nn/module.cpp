// nn::Module: registration, recursive traversal (parameters, buffers, modes, placement),
// state_dict save/load with one error listing every bad entry, and the printed summary.
#include "kiln/nn/module.h"
#include <atomic>
#include <cxxabi.h>
#include <cstdlib>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace kiln::nn {

std::string demangle(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = (status == 0 && d) ? std::string(d) : std::string(mangled);
  std::free(d);
  if (s.find('<') == std::string::npos) {  // plain class: its own name
    size_t p = s.rfind("::");
    if (p != std::string::npos) s = s.substr(p + 2);
  } else {
    for (size_t p; (p = s.find("kiln::nn::")) != std::string::npos;) s.erase(p, 10);
    for (size_t p; (p = s.find("kiln::")) != std::string::npos;) s.erase(p, 6);
  }
  return s;
}

namespace detail {

void replace_contents(const Tensor& dst, const Tensor& src) {
  TensorImpl& d = dst.impl();
  const TensorImpl& s = src.impl();
  d.storage = s.storage;
  d.shape = s.shape;
  d.strides = s.strides;
  d.offset = s.offset;
  d.dtype = s.dtype;
}

}  // namespace detail

struct ModuleAccess {
  static const std::shared_ptr<ModuleState>& state(const Module& m) { return m.state_; }
};

namespace {

using ModulePtr = std::shared_ptr<Module>;

// Every distinct state reachable from `root` (itself first), each once.
void unique_states(const ModuleState& root, std::vector<ModuleState*>& out,
                   std::unordered_set<const ModuleState*>& seen) {
  if (!seen.insert(&root).second) return;
  out.push_back(const_cast<ModuleState*>(&root));
  for (auto& [_, child] : root.children) unique_states(*ModuleAccess::state(*child), out, seen);
}

struct CollectOptions {
  bool params = true;          // parameters, else buffers
  bool recurse = true;
  bool dedupe = true;          // each TensorImpl once
  bool persistent_only = false;
};

void collect_tensors(const ModuleState& st, const std::string& prefix, const CollectOptions& o,
                     OrderedDict<Tensor>& out, std::unordered_set<const TensorImpl*>& seen) {
  const OrderedDict<Tensor>& dict = o.params ? st.parameters : st.buffers;
  for (const auto& [name, t] : dict) {
    if (!t.defined()) continue;
    if (!o.params && o.persistent_only) {
      bool np = false;
      for (const auto& n : st.non_persistent) np = np || n == name;
      if (np) continue;
    }
    if (o.dedupe && !seen.insert(t.impl_ptr().get()).second) continue;
    out.insert(prefix + name, t);
  }
  if (!o.recurse) return;
  for (const auto& [name, child] : st.children)
    collect_tensors(*ModuleAccess::state(*child), prefix + name + ".", o, out, seen);
}

OrderedDict<Tensor> collect(const ModuleState& st, CollectOptions o) {
  OrderedDict<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  collect_tensors(st, "", o, out, seen);
  return out;
}

// Each module once, under the first name it was registered by (PyTorch's memo set): a
// child registered under two names, or shared by two parents, is listed and visited once.
void collect_modules(const ModuleState& st, const std::string& prefix, OrderedDict<ModulePtr>& out,
                     std::unordered_set<const ModuleState*>& seen) {
  for (const auto& [name, child] : st.children) {
    const ModuleState* cs = ModuleAccess::state(*child).get();
    if (!seen.insert(cs).second) continue;
    out.insert(prefix + name, child);
    collect_modules(*cs, prefix + name + ".", out, seen);
  }
}

// Applies f(tensor) to every distinct parameter and buffer under `st`.
template <class F>
void for_each_tensor(const ModuleState& root, F&& f) {
  std::vector<ModuleState*> states;
  std::unordered_set<const ModuleState*> seen_states;
  unique_states(root, states, seen_states);
  std::unordered_set<const TensorImpl*> seen;
  for (ModuleState* st : states) {
    for (auto* dict : {&st->parameters, &st->buffers})
      for (auto& [_, t] : *dict)
        if (t.defined() && seen.insert(t.impl_ptr().get()).second) f(t);
  }
}

// 101770 -> "101,770"
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  if (n < 0) out.push_back('-');
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

void check_name(const ModuleState& st, const std::string& name, const char* what) {
  KILN_CHECK(!name.empty(), what, ": name must not be empty");
  KILN_CHECK(name.find('.') == std::string::npos, what, ": name '", name, "' must not contain '.'");
  KILN_CHECK(!st.parameters.contains(name), what, ": a parameter named '", name, "' already exists");
  KILN_CHECK(!st.buffers.contains(name), what, ": a buffer named '", name, "' already exists");
  KILN_CHECK(!st.children.contains(name), what, ": a submodule named '", name, "' already exists");
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

}  // namespace

Module::Module() : state_(std::make_shared<ModuleState>()) {}

Tensor Module::forward(const Tensor&) {
  KILN_FAIL(type_name(), ": this module has no forward(const Tensor&); a module used as m(x), in a Sequential "
            "or in a Checkpoint must override `Tensor forward(const Tensor& x)` (non-const, exactly that signature)");
}

void Module::check_new_name(const std::string& name, const char* what) const { check_name(*state_, name, what); }

namespace {
std::atomic<int64_t> g_next_hook_id{1};
}  // namespace

int64_t Module::register_forward_pre_hook(ForwardPreHook hook) {
  KILN_CHECK(static_cast<bool>(hook), type_name(), ".register_forward_pre_hook: got an empty function");
  const int64_t id = g_next_hook_id++;
  state_->pre_hooks.emplace_back(id, std::move(hook));
  return id;
}

int64_t Module::register_forward_hook(ForwardHook hook) {
  KILN_CHECK(static_cast<bool>(hook), type_name(), ".register_forward_hook: got an empty function");
  const int64_t id = g_next_hook_id++;
  state_->post_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Module::remove_forward_hook(int64_t id) {
  std::erase_if(state_->pre_hooks, [id](const auto& h) { return h.first == id; });
  std::erase_if(state_->post_hooks, [id](const auto& h) { return h.first == id; });
}

namespace {
// nn::CachedParametrizations: the open scopes on this thread and the values computed in them
struct ParametrizationCache {
  int depth = 0;
  std::unordered_map<std::shared_ptr<TensorImpl>, Tensor> values;  // member -> value
};
thread_local ParametrizationCache t_param_cache;
}  // namespace

void detail::begin_parametrization_cache() { ++t_param_cache.depth; }

void detail::end_parametrization_cache() {
  if (t_param_cache.depth > 0 && --t_param_cache.depth == 0) t_param_cache.values.clear();
}

Tensor Module::parametrized_value(const Tensor& member) const {
  for (const ParametrizedTensor& pt : state_->parametrized) {
    if (pt.member != member.impl_ptr()) continue;
    if (t_param_cache.depth > 0)
      if (auto it = t_param_cache.values.find(pt.member); it != t_param_cache.values.end()) return it->second;
    Tensor v = pt.value();
    detail::replace_contents(member, v.detach());  // `layer.weight` shows the latest value
    if (t_param_cache.depth > 0) t_param_cache.values.emplace(pt.member, v);
    return v;
  }
  return member;
}

Tensor Module::call_with_hooks(const Tensor& x) const {
  Module& self = const_cast<Module&>(*this);
  // copies: a hook may add or remove hooks while it runs
  const auto pre = state_->pre_hooks;
  const auto post = state_->post_hooks;
  Tensor in = x;
  for (const auto& [id, hook] : pre)
    if (std::optional<Tensor> r = hook(self, in)) in = *r;
  Tensor out = self.forward(in);
  for (const auto& [id, hook] : post)
    if (std::optional<Tensor> r = hook(self, in, out)) out = *r;
  return out;
}

Functional::Functional(std::function<Tensor(const Tensor&)> fn, std::string name)
    : fn_(std::move(fn)), name_(std::move(name)) {
  KILN_CHECK(static_cast<bool>(fn_), "Functional: got an empty function");
}

Tensor Functional::forward(const Tensor& x) { return fn_(x); }

std::shared_ptr<Module> make_functional(std::function<Tensor(const Tensor&)> fn) {
  return std::make_shared<Functional>(std::move(fn));
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name, "register_parameter");
  if (t.defined()) {
    KILN_CHECK(t.is_floating_point() || !requires_grad, "register_parameter('", name,
               "'): a parameter that requires grad must be floating point, got dtype ", dtype_name(t.dtype()));
    if (!t.is_leaf()) t = t.detach();
    t.requires_grad_(requires_grad);
  }
  return state_->parameters.insert(name, std::move(t));
}

Tensor& Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_new_name(name, "register_buffer");
  if (t.defined() && !t.is_leaf()) t = t.detach();
  if (!persistent) state_->non_persistent.push_back(name);
  return state_->buffers.insert(name, std::move(t));
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name, "register_module");
  KILN_CHECK(child->state_ != state_, "register_module('", name, "'): a module cannot be its own child");
  state_->children.insert(name, std::move(child));
}

std::vector<Tensor> Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }
OrderedDict<Tensor> Module::named_parameters(bool recurse) const {
  return collect(*state_, {.params = true, .recurse = recurse});
}
std::vector<Tensor> Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }
OrderedDict<Tensor> Module::named_buffers(bool recurse) const {
  return collect(*state_, {.params = false, .recurse = recurse});
}
std::vector<std::shared_ptr<Module>> Module::children() const { return named_children().values(); }
OrderedDict<std::shared_ptr<Module>> Module::named_children() const {
  OrderedDict<ModulePtr> out;
  std::unordered_set<const ModuleState*> seen;
  for (const auto& [name, child] : state_->children)
    if (seen.insert(ModuleAccess::state(*child).get()).second) out.insert(name, child);
  return out;
}
OrderedDict<std::shared_ptr<Module>> Module::named_modules() const {
  OrderedDict<ModulePtr> out;
  std::unordered_set<const ModuleState*> seen{state_.get()};
  collect_modules(*state_, "", out, seen);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& child : children()) child->apply(fn);
  fn(*this);
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

Module& Module::train(bool on) {
  std::vector<ModuleState*> states;
  std::unordered_set<const ModuleState*> seen;
  unique_states(*state_, states, seen);
  for (ModuleState* s : states) s->training = on;
  return *this;
}
bool Module::is_training() const { return state_->training; }

Module& Module::to(Device device) {
  NoGradGuard ng;
  for_each_tensor(*state_, [&](Tensor& t) {
    if (t.device() != device) detail::replace_contents(t, t.detach().to(device));
    if (TensorImpl& ti = t.impl(); ti.grad) {
      Tensor g(ti.grad);
      if (g.device() != device) ti.grad = g.detach().to(device).impl_ptr();
    }
  });
  return *this;
}

Module& Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), "Module::to: expected a floating dtype, got ", dtype_name(dtype),
             " (only floating parameters and buffers are converted)");
  NoGradGuard ng;
  for_each_tensor(*state_, [&](Tensor& t) {
    if (!t.is_floating_point()) return;
    if (t.dtype() != dtype) detail::replace_contents(t, t.detach().to(dtype));
    if (TensorImpl& ti = t.impl(); ti.grad) {
      Tensor g(ti.grad);
      if (g.dtype() != dtype) ti.grad = g.detach().to(dtype).impl_ptr();
    }
  });
  return *this;
}

void Module::zero_grad(bool set_to_none) { clear_grads(parameters(), set_to_none); }

Module& Module::requires_grad_(bool on) {
  for (auto& p : parameters()) p.requires_grad_(on);
  return *this;
}

StateDict Module::state_dict() const {
  StateDict sd;
  // all names (a tied tensor appears under each of its names), parameters then buffers per module
  std::function<void(const ModuleState&, const std::string&)> rec = [&](const ModuleState& st, const std::string& prefix) {
    for (const auto& [name, t] : st.parameters)
      if (t.defined()) sd.insert(prefix + name, t.detach());
    for (const auto& [name, t] : st.buffers) {
      if (!t.defined()) continue;
      bool np = false;
      for (const auto& n : st.non_persistent) np = np || n == name;
      if (!np) sd.insert(prefix + name, t.detach());
    }
    for (const auto& [name, child] : st.children) rec(*ModuleAccess::state(*child), prefix + name + ".");
  };
  rec(*state_, "");
  return sd;
}

namespace {
// sd with the legacy keys of parametrized tensors (ParametrizedTensor::legacy_keys) renamed,
// as PyTorch's weight_norm load hook does; sd itself when there are none.
StateDict rename_legacy_keys(const ModuleState& root, const OrderedDict<ModulePtr>& modules, const StateDict& sd) {
  std::unordered_map<std::string, std::string> rename;
  auto collect = [&](const ModuleState& st, const std::string& prefix) {
    for (const ParametrizedTensor& pt : st.parametrized) {
      if (pt.legacy_keys.empty()) continue;
      bool all = true;
      for (const auto& [old_key, key] : pt.legacy_keys) all = all && sd.contains(prefix + old_key);
      if (all)
        for (const auto& [old_key, key] : pt.legacy_keys) rename[prefix + old_key] = prefix + key;
    }
  };
  collect(root, "");
  for (const auto& [name, m] : modules) collect(*ModuleAccess::state(*m), name + ".");
  if (rename.empty()) return sd;
  StateDict out;
  for (const auto& [k, t] : sd) {
    auto it = rename.find(k);
    out.insert_or_assign(it == rename.end() ? k : it->second, t);
  }
  return out;
}
}  // namespace

void Module::load_state_dict(const StateDict& sd_in, bool strict) {
  const StateDict sd = rename_legacy_keys(*state_, named_modules(), sd_in);
  StateDict own = state_dict();
  std::vector<std::string> missing, unexpected, bad;
  for (const auto& [name, t] : own) {
    const Tensor* src = sd.find(name);
    if (!src) {
      missing.push_back(name);
    } else if (!src->defined()) {
      bad.push_back(name + " (undefined tensor in the state dict, model " + shape_str(t.shape()) + ")");
    } else if (src->shape() != t.shape() && !(t.dim() == 0 && src->dim() == 1 && src->numel() == 1)) {
      // (a one-element 1-D value loads into a 0-dim entry, as PyTorch accepts for old files)
      bad.push_back(name + " (state dict " + shape_str(src->shape()) + ", model " + shape_str(t.shape()) + ")");
    }
  }
  for (const auto& [name, _] : sd)
    if (!own.contains(name)) unexpected.push_back(name);
  bool fail = !bad.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (fail) {
    std::ostringstream os;
    os << "load_state_dict for " << type_name() << ":";
    if (strict && !missing.empty()) os << " " << missing.size() << " missing key(s): " << join(missing) << ";";
    if (strict && !unexpected.empty())
      os << " " << unexpected.size() << " unexpected key(s): " << join(unexpected) << ";";
    if (!bad.empty()) os << " " << bad.size() << " shape mismatch(es): " << join(bad) << ";";
    std::string msg = os.str();
    msg.pop_back();
    KILN_FAIL(msg);
  }
  NoGradGuard ng;
  for (auto& [name, t] : own)
    if (const Tensor* src = sd.find(name)) t.copy_(t.dim() == 0 ? src->reshape({}) : *src);
}

std::string Module::type_name() const { return demangle(typeid(*this).name()); }

namespace {
void summary_rec(std::ostream& os, const Module& m, const std::string& name, int depth) {
  std::string indent(size_t(2 * depth), ' ');
  os << indent;
  if (!name.empty()) os << name << ": ";
  os << m.type_name();
  std::string extra = m.extra_repr();
  if (!extra.empty()) os << "(" << extra << ")";
  int64_t n = m.num_parameters();
  if (n > 0 || depth == 0) os << "  -- " << with_commas(n) << " parameters";
  os << "\n";
  for (const auto& [child_name, child] : m.named_children()) summary_rec(os, *child, child_name, depth + 1);
}
}  // namespace

std::string Module::str() const {
  std::ostringstream os;
  summary_rec(os, *this, "", 0);
  os << "Total parameters: " << with_commas(num_parameters()) << " (trainable: "
     << with_commas(num_parameters(true)) << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace kiln::nn
