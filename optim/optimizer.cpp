// Optimizer base: parameter-group bookkeeping, step() driver, zero_grad and the flat
// state_dict()/load_state_dict() format shared by every optimizer.
#include "kiln/optim/optimizer.h"
#include "kiln/ops/elementwise.h"
#include <algorithm>
#include <cmath>
#include <set>
#include "kiln/core/autograd.h"
#include "kiln/core/checked_math.h"
#include "kiln/ops/helpers.h"
#include "kiln/optim/state_keys.h"
#include "kiln/optim/update_kernels.h"

namespace kiln::optim {

Optimizer::Optimizer(std::string name, const std::vector<ParamGroup>& groups) : name_(std::move(name)) {
  size_t total = 0;
  for (const auto& g : groups) {
    append_group(g.params);
    total += g.params.size();
  }
  KILN_CHECK(total > 0, name_, ": got an empty parameter list");
}

void Optimizer::append_group(const std::vector<Tensor>& ps) {
  const size_t gi = groups_.size();
  std::set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g) seen.insert(p.impl_ptr().get());
  for (size_t i = 0; i < ps.size(); ++i) {
    const Tensor& p = ps[i];
    KILN_CHECK(p.defined(), name_, ": parameter ", i, " of group ", gi, " is an undefined tensor");
    KILN_CHECK(p.is_floating_point(), name_, ": can only optimize floating-point tensors; parameter ", i,
               " of group ", gi, " is ", describe(p));
    KILN_CHECK(p.is_leaf(), name_, ": can't optimize a non-leaf tensor (parameter ", i, " of group ", gi, ", ",
               describe(p), ", produced by ", p.grad_fn()->name, "); pass leaf tensors (e.g. x.detach())");
    KILN_CHECK(seen.insert(p.impl_ptr().get()).second, name_, ": parameter ", i, " of group ", gi, " (",
               describe(p), ") appears more than once in the parameter list");
  }
  groups_.push_back(ps);
  state_.emplace_back(ps.size());
}

void Optimizer::pop_group() {
  groups_.pop_back();
  state_.pop_back();
}

std::optional<double> Optimizer::initial_lr(size_t group) const {
  return group < initial_lrs_.size() ? initial_lrs_[group] : std::nullopt;
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  KILN_CHECK(group < num_groups(), name_, ": group ", group, " out of range (", num_groups(), " groups)");
  if (initial_lrs_.size() < num_groups()) initial_lrs_.resize(num_groups());
  initial_lrs_[group] = lr;
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  KILN_CHECK(group < groups_.size(), name_, ": group ", group, " out of range (", groups_.size(), " groups)");
  return groups_[group];
}

std::vector<Tensor> Optimizer::all_params() const {
  std::vector<Tensor> all;
  for (const auto& g : groups_) all.insert(all.end(), g.begin(), g.end());
  return all;
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

double Optimizer::momentum(size_t) const {
  KILN_FAIL(name_, ": this optimizer has no momentum (or beta1) hyperparameter");
}
void Optimizer::set_momentum(size_t, double) {
  KILN_FAIL(name_, ": this optimizer has no momentum (or beta1) hyperparameter");
}

void Optimizer::step() { step_impl(nullptr); }

void Optimizer::step_unless(const Tensor& found_inf) {
  KILN_CHECK(can_skip_on_device(), name_, ".step_unless: needs contiguous float32/float64 parameters on one CUDA "
             "device and a multi-tensor kernel for ", name_, " there");
  const Device dev = all_params().front().device();
  KILN_CHECK(found_inf.defined() && found_inf.numel() == 1 && found_inf.dtype() == DType::float32 &&
                 found_inf.device() == dev && found_inf.is_contiguous(),
             name_, ".step_unless: found_inf must be a one-element float32 tensor on ", dev.str(), ", got ",
             found_inf.defined() ? describe(found_inf) : std::string("an undefined tensor"));
  step_impl(&found_inf);
  NoGradGuard ng;
  if (!skipped_steps_.defined()) skipped_steps_ = zeros({}, {.dtype = DType::float32, .device = dev});
  skipped_steps_.add_(found_inf.reshape({}));
}

void Optimizer::step_impl(const Tensor* found_inf) {
  NoGradGuard ng;
  const float* fi = found_inf ? static_cast<const float*>(found_inf->raw_data()) : nullptr;
  for (size_t g = 0; g < groups_.size(); ++g) {
    check_options(g);
    std::vector<size_t> idx;
    std::vector<Tensor> grads;
    const bool ascend = maximize(g);
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      const Tensor& p = groups_[g][i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      KILN_CHECK(grad.device() == p.device(), name_, ": the gradient of parameter ", i, " of group ", g, " is on ",
                 grad.device().str(), " but the parameter (", describe(p), ") is on ", p.device().str());
      if (grad.dtype() != p.dtype()) grad = grad.to(p.dtype());
      if (ascend) grad = neg(grad);  // PyTorch's maximize: a new tensor, p.grad() untouched
      idx.push_back(i);
      grads.push_back(grad);
    }
    if (idx.empty()) continue;
    // The fused and multi-tensor kernels write parameters and state through raw pointers:
    // bump their versions here, so a graph that saved a parameter cannot backward after the step.
    for (size_t i : idx) {
      groups_[g][i].bump_version();
      for (auto& kv : state_[g][i].buffers) kv.second.bump_version();
    }
    if (groups_[g][idx[0]].device().is_cuda() && step_group_multi(g, idx, grads, fi)) continue;
    KILN_CHECK(!fi, name_, ": internal error, group ", g, " cannot take the multi-tensor path of step_unless()");
    for (size_t k = 0; k < idx.size(); ++k) update(g, groups_[g][idx[k]], grads[k], state_[g][idx[k]]);
  }
  ++step_count_;
}

bool Optimizer::step_group_multi(size_t, const std::vector<size_t>&, const std::vector<Tensor>&, const float*) {
  return false;
}

void* Optimizer::multi_kernel_for(size_t group, const std::vector<size_t>& idx) const {
  if (multi_tensor_kind() == FusedUpdate::kCount || idx.empty()) return nullptr;
  const Device dev = groups_[group][idx[0]].device();
  if (!dev.is_cuda()) return nullptr;
  void* k = fused_update_kernel(multi_tensor_kind(), dev);
  if (!k) return nullptr;
  for (size_t i : idx) {
    const Tensor& p = groups_[group][i];
    if (!(p.device() == dev) || !fused_dtype_ok(p.dtype()) || !p.is_contiguous()) return nullptr;
  }
  return k;
}

bool Optimizer::can_skip_on_device() const {
  const Device dev = all_params().front().device();
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<size_t> all(groups_[g].size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    if (all.empty()) continue;
    if (!multi_kernel_for(g, all) || !(groups_[g][0].device() == dev)) return false;
  }
  return true;
}

float* Optimizer::skip_counter(size_t group, size_t i, bool create) {
  if (skipped_.size() != groups_.size()) skipped_.resize(groups_.size());
  Tensor& t = skipped_[group];
  if (!t.defined()) {
    if (!create) return nullptr;
    t = zeros({int64_t(groups_[group].size())}, {.dtype = DType::float32, .device = groups_[group][i].device()});
  }
  return static_cast<float*>(t.raw_data()) + i;
}

bool Optimizer::is_scalar_state(const std::string& name) const {
  const std::vector<std::string> names = scalar_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

void Optimizer::zero_grad(bool set_to_none) { clear_grads(all_params(), set_to_none); }

Tensor& Optimizer::buffer(ParamState& st, const std::string& name, const Tensor& p, bool* created) {
  auto it = st.buffers.find(name);
  if (it != st.buffers.end()) {
    if (created) *created = false;
    return it->second;
  }
  if (created) *created = true;
  return st.buffers.emplace(name, zeros_like(p)).first->second;
}

bool Optimizer::fused_ok(const Tensor& p, std::initializer_list<const Tensor*> buffers) {
  if (!fused_dtype_ok(p.dtype()) || !p.is_contiguous()) return false;
  for (const Tensor* b : buffers) {
    if (!b) continue;
    if (!b->is_contiguous() || b->dtype() != p.dtype() || !(b->device() == p.device())) return false;
  }
  return true;
}

void Optimizer::set_maximize(size_t group, bool on) {
  KILN_CHECK(!on, name_, ": group ", group, " asks for maximize, which ", name_, " does not offer");
}

void Optimizer::apply_group_overrides(size_t group, const ParamGroup& g) {
  if (g.options.empty()) return;
  std::map<std::string, double> h = group_hparams(group);
  std::string known = "maximize";
  for (const auto& [k, v] : h) known += ", " + k;
  const bool old_maximize = maximize(group);
  for (const auto& [k, v] : g.options) {
    if (k == "maximize") continue;
    KILN_CHECK(h.count(k) > 0, name_, ": parameter group ", group, " sets unknown option '", k, "' (", name_,
               " has: ", known, ")");
    KILN_CHECK(!(k == "lr" && g.lr) && !(k == "weight_decay" && g.weight_decay), name_, ": parameter group ", group,
               " gives ", k, " twice (as .", k, " and in .options)");
    h[k] = v;
  }
  if (auto it = g.options.find("maximize"); it != g.options.end()) set_maximize(group, it->second != 0);
  try {
    set_group_hparams(group, h);
  } catch (...) {
    set_maximize(group, old_maximize);
    throw;
  }
}

void Optimizer::assign_hparams(size_t group, const std::map<std::string, double>& h,
                               const std::vector<std::pair<const char*, double*>>& fields) const {
  for (const auto& [k, v] : h) {
    (void)v;
    bool known = false;
    for (const auto& f : fields) known = known || k == f.first;
    KILN_CHECK(known, name_, ".load_state_dict: unknown hyperparameter 'param_groups.", group, ".", k,
               "' (is this the state of another optimizer?)");
  }
  for (const auto& f : fields) {
    auto it = h.find(f.first);
    KILN_CHECK(it != h.end(), name_, ".load_state_dict: missing hyperparameter 'param_groups.", group, ".",
               f.first, "'");
    *f.second = it->second;
  }
}

// ---------------------------------------------------------------- state_dict

StateDict Optimizer::state_dict() const {
  NoGradGuard ng;
  StateDict sd;
  int64_t k = 0;
  // steps skipped on the device (step_unless) are not counted, as on the CPU path (a sync)
  std::vector<std::vector<float>> skipped(groups_.size());
  for (size_t g = 0; g < skipped_.size(); ++g)
    if (skipped_[g].defined()) skipped[g] = skipped_[g].to_vector<float>();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string gp = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> idx(groups_[g].size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = k + int64_t(i);
    sd[gp + "params"] = from_vector(idx, {int64_t(idx.size())});
    for (const auto& [n, v] : group_hparams(g)) sd[gp + n] = scalar_tensor(v, {.dtype = DType::float64});
    if (maximize(g)) sd[gp + "maximize"] = scalar_tensor(1.0, {.dtype = DType::float64});
    for (size_t i = 0; i < groups_[g].size(); ++i, ++k) {
      const ParamState& st = state_[g][i];
      const int64_t step = st.step - (skipped[g].empty() ? 0 : int64_t(skipped[g][i]));
      if (step == 0 && (st.buffers.empty() || !skipped[g].empty())) continue;  // no applied update
      const std::string sp = "state." + std::to_string(k) + ".";
      sd[sp + "step"] = scalar_tensor(double(step), {.dtype = DType::int64});
      for (const auto& [n, b] : st.buffers) sd[sp + n] = b.detach().clone();
      for (const auto& [n, v] : st.scalars) sd[sp + n] = scalar_tensor(v, {.dtype = DType::float64});
    }
  }
  const int64_t skipped_steps = skipped_steps_.defined() ? int64_t(skipped_steps_.item()) : 0;
  sd["step_count"] = scalar_tensor(double(step_count_ - skipped_steps), {.dtype = DType::int64});
  return sd;
}


void Optimizer::load_state_dict(const StateDict& sd) {
  NoGradGuard ng;
  const size_t G = groups_.size();
  std::vector<std::pair<size_t, size_t>> where;  // global index -> (group, index)
  for (size_t g = 0; g < G; ++g)
    for (size_t i = 0; i < groups_[g].size(); ++i) where.emplace_back(g, i);
  std::vector<std::map<std::string, double>> hp(G);
  std::vector<bool> seen_params(G, false);
  std::vector<std::vector<ParamState>> fresh;
  for (size_t g = 0; g < G; ++g) fresh.emplace_back(groups_[g].size());
  int64_t count = step_count_;
  const auto names = buffer_names();
  auto scalar_of = [&](const std::string& key, const Tensor& t) {
    KILN_CHECK(t.defined() && t.numel() == 1, name_, ".load_state_dict: '", key,
               "' must be a one-element tensor, got ", t.defined() ? describe(t) : std::string("undefined"));
    return t.item();
  };

  for (const auto& [key, t] : sd) {
    if (key == "step_count") {
      count = checked_whole(scalar_of(key, t), name_ + ".load_state_dict", key);
      continue;
    }
    auto parts = split_state_key(key);
    size_t idx = 0;
    KILN_CHECK(parts.size() == 3 && (parts[0] == "param_groups" || parts[0] == "state") && parse_state_index(parts[1], idx),
               name_, ".load_state_dict: unexpected key '", key, "'");
    if (parts[0] == "param_groups") {
      KILN_CHECK(idx < G, name_, ".load_state_dict: the state has a group ", idx, " ('", key,
                 "') but this optimizer has ", G, " group(s)");
      if (parts[2] == "params") {
        KILN_CHECK(t.defined() && t.dim() == 1 && int64_t(groups_[idx].size()) == t.numel(), name_,
                   ".load_state_dict: group ", idx, " has ", groups_[idx].size(), " parameter(s) but '", key,
                   "' is ", t.defined() ? describe(t) : std::string("undefined"));
        seen_params[idx] = true;
      } else {
        hp[idx][parts[2]] = scalar_of(key, t);
      }
      continue;
    }
    KILN_CHECK(idx < where.size(), name_, ".load_state_dict: '", key, "' refers to parameter ", idx,
               " but this optimizer has ", where.size(), " parameter(s)");
    auto [g, i] = where[idx];
    const Tensor& p = groups_[g][i];
    ParamState& st = fresh[g][i];
    if (parts[2] == "step") {
      st.step = checked_whole(scalar_of(key, t), name_ + ".load_state_dict", key);
      continue;
    }
    if (is_scalar_state(parts[2])) {
      st.scalars[parts[2]] = scalar_of(key, t);
      continue;
    }
    bool known = false;
    for (const auto& n : names) known = known || n == parts[2];
    KILN_CHECK(known, name_, ".load_state_dict: unknown state buffer '", key,
               "' (is this the state of another optimizer?)");
    const Shape want = buffer_shape(parts[2], p);
    KILN_CHECK(t.defined() && t.shape() == want, name_, ".load_state_dict: '", key, "' is ",
               t.defined() ? describe(t) : std::string("undefined"), " but expected shape ", shape_str(want),
               " (parameter ", idx, " has shape ", shape_str(p.shape()), ")");
    Tensor b = empty(want, {.dtype = p.dtype(), .device = p.device()});
    b.copy_(t.detach());
    st.buffers[parts[2]] = b;
  }
  for (size_t g = 0; g < G; ++g)
    KILN_CHECK(seen_params[g], name_, ".load_state_dict: missing key 'param_groups.", g, ".params'");

  // apply hyperparameters atomically (restore the old ones if any group is rejected)
  std::vector<std::map<std::string, double>> old(G);
  std::vector<bool> old_max(G);
  for (size_t g = 0; g < G; ++g) {
    old[g] = group_hparams(g);
    old_max[g] = maximize(g);
  }
  try {
    for (size_t g = 0; g < G; ++g) {
      // maximize: absent (the default, and states saved before it existed) means false
      const auto it = hp[g].find("maximize");
      set_maximize(g, it != hp[g].end() && it->second != 0);
      if (it != hp[g].end()) hp[g].erase(it);
      set_group_hparams(g, hp[g]);
      check_options(g);
    }
  } catch (...) {
    for (size_t g = 0; g < G; ++g) {
      set_group_hparams(g, old[g]);
      set_maximize(g, old_max[g]);
    }
    throw;
  }
  state_ = std::move(fresh);
  step_count_ = count;
  skipped_.clear();  // the loaded counts are the applied ones
  skipped_steps_ = Tensor();
}

}  // namespace kiln::optim
