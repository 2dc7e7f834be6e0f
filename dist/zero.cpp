// ZeroRedundancyOptimizer (see zero.h).
#include "kiln/dist/zero.h"
#include <algorithm>
#include "kiln/core/error.h"
#include "kiln/dist/dist.h"
#include "kiln/ops/helpers.h"
#include "kiln/optim/state_keys.h"

namespace kiln::dist {

namespace {
constexpr DType kFloatDTypes[] = {DType::float16, DType::bfloat16, DType::float32, DType::float64};

// Calls fn(k, lo, hi) for each parameter k of f whose flat range [off, off + n) overlaps
// this rank's shard: [lo, hi) is the overlap, in flat coordinates.
template <class Fn>
void for_shard_overlap(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes, int64_t shard, Fn&& fn) {
  const int64_t s0 = int64_t(rank()) * shard, s1 = s0 + shard;
  for (size_t k = 0; k < offsets.size(); ++k) {
    const int64_t lo = std::max(s0, offsets[k]), hi = std::min(s1, offsets[k] + sizes[k]);
    if (lo < hi) fn(k, lo, hi);
  }
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(const std::vector<optim::ParamGroup>& groups,
                                                 const ShardOptimizerFactory& make)
    : Optimizer("ZeRO-1", groups) {
  KILN_CHECK(static_cast<bool>(make), "ZeroRedundancyOptimizer: no optimizer factory given");
  NoGradGuard ng;
  const int64_t W = world_size();
  std::vector<optim::ParamGroup> shard_groups;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      Tensor& p = groups_[g][i];
      KILN_CHECK(p.is_floating_point(), "ZeroRedundancyOptimizer: parameter ", i, " of group ", g, " is ",
                 describe(p), "; expected floating-point parameters");
      KILN_CHECK(p.device() == groups_[g][0].device(), "ZeroRedundancyOptimizer: group ", g, " mixes devices (",
                 groups_[g][0].device().str(), " and ", p.device().str(), "); one group must live on one device");
      broadcast(p, 0);  // every rank starts from rank 0's model
    }
    optim::ParamGroup sg{
        .params = {}, .lr = groups[g].lr, .weight_decay = groups[g].weight_decay, .options = groups[g].options};
    for (DType dt : kFloatDTypes) {
      Flat f;
      f.group = g;
      std::vector<int64_t> sizes;
      for (size_t i = 0; i < groups_[g].size(); ++i) {
        if (groups_[g][i].dtype() != dt) continue;
        f.params.push_back(i);
        f.offsets.push_back(f.numel);
        sizes.push_back(groups_[g][i].numel());
        f.numel += groups_[g][i].numel();
      }
      if (f.params.empty()) continue;
      f.shard = (f.numel + W - 1) / W;  // rank r owns [r * shard, (r + 1) * shard) of the padded vector
      f.shard_param = zeros({f.shard}, {.dtype = dt, .device = groups_[g][0].device()});
      copy_into_shard(f);
      sg.params.push_back(f.shard_param);
      flats_.push_back(std::move(f));
    }
    shard_groups.push_back(std::move(sg));
  }
  inner_ = make(shard_groups);
  KILN_CHECK(inner_ != nullptr && inner_->num_groups() == groups_.size(), "ZeroRedundancyOptimizer: the factory must "
             "return an optimizer over the ", groups_.size(), " shard group(s) it was given");
  name_ = "ZeRO-1(" + inner_->name() + ")";
}

void ZeroRedundancyOptimizer::copy_into_shard(Flat& f) {
  std::vector<int64_t> sizes;
  for (size_t p : f.params) sizes.push_back(groups_[f.group][p].numel());
  const int64_t s0 = int64_t(rank()) * f.shard;
  for_shard_overlap(f.offsets, sizes, f.shard, [&](size_t k, int64_t lo, int64_t hi) {
    const Tensor p = groups_[f.group][f.params[k]].reshape({-1});
    f.shard_param.narrow(0, lo - s0, hi - lo).copy_(p.narrow(0, lo - f.offsets[k], hi - lo));
  });
}

void ZeroRedundancyOptimizer::step() {
  NoGradGuard ng;
  const int64_t W = world_size();
  for (Flat& f : flats_) {  // 1. the mean gradient of this rank's shard
    copy_into_shard(f);  // the model's weights are the truth (they may have been loaded since the last step)
    const Tensor& p0 = groups_[f.group][f.params[0]];
    Tensor flat = zeros({f.shard * W}, {.dtype = p0.dtype(), .device = p0.device()});
    for (size_t k = 0; k < f.params.size(); ++k) {
      const Tensor& p = groups_[f.group][f.params[k]];
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      KILN_CHECK(g.shape() == p.shape(), name_, ".step: the gradient of parameter ", f.params[k], " of group ",
                 f.group, " is ", describe(g), " but the parameter is ", describe(p));
      flat.narrow(0, f.offsets[k], p.numel()).copy_(g.reshape({-1}));
    }
    f.shard_param.set_grad(reduce_scatter(flat, ReduceOp::avg));
  }
  inner_->step();  // 2. the update of the shard
  for (Flat& f : flats_) {  // 3. every rank gets every shard
    f.shard_param.set_grad(Tensor());
    const Tensor full = all_gather(f.shard_param);
    for (size_t k = 0; k < f.params.size(); ++k) {
      Tensor& p = groups_[f.group][f.params[k]];
      p.copy_(full.narrow(0, f.offsets[k], p.numel()).view(p.shape()));
    }
  }
  ++step_count_;
}

void ZeroRedundancyOptimizer::update(size_t, Tensor, const Tensor&, ParamState&) {
  KILN_FAIL(name_, ": internal error: per-parameter update() is not used (step() updates the shards)");
}

bool ZeroRedundancyOptimizer::agree_found_inf(bool found) const {
  if (world_size() == 1) return found;
  Tensor t = full({}, found ? 1.0 : 0.0, {.dtype = DType::float32});
  all_reduce(t, ReduceOp::max);
  return t.item() != 0;
}

void ZeroRedundancyOptimizer::agree_found_inf(Tensor& flag) const {
  if (world_size() > 1) all_reduce(flag, ReduceOp::max);
}

optim::StateDict ZeroRedundancyOptimizer::state_dict() const {
  NoGradGuard ng;
  const optim::StateDict in = inner_->state_dict();
  optim::StateDict out;
  std::vector<size_t> first(groups_.size() + 1, 0);  // global index of each group's first parameter
  for (size_t g = 0; g < groups_.size(); ++g) first[g + 1] = first[g] + groups_[g].size();
  for (const auto& [key, t] : in) {
    if (key == "step_count") {
      out[key] = t;
      continue;
    }
    const auto parts = optim::split_state_key(key);
    size_t idx = 0;
    KILN_CHECK(parts.size() == 3 && optim::parse_state_index(parts[1], idx), name_, ".state_dict: unexpected key '", key,
               "' in the shard optimizer's state");
    if (parts[0] == "param_groups") {
      if (parts[2] == "params") {
        std::vector<int64_t> ids(groups_[idx].size());
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(first[idx] + i);
        out[key] = from_vector(ids, {int64_t(ids.size())});
      } else {
        out[key] = t;
      }
      continue;
    }
    KILN_CHECK(parts[0] == "state" && idx < flats_.size(), name_, ".state_dict: unexpected key '", key, "'");
    const Flat& f = flats_[idx];
    if (parts[2] == "step" || inner_->is_scalar_state(parts[2])) {  // every parameter of the flat vector took the same steps
      for (size_t p : f.params) out["state." + std::to_string(first[f.group] + p) + "." + parts[2]] = t.clone();
      continue;
    }
    // a buffer shaped like the shard: gather every rank's shard (map order is the same on
    // every rank, so the collectives match), then cut it into the parameters' shapes
    const Tensor whole = all_gather(t.contiguous());
    for (size_t k = 0; k < f.params.size(); ++k) {
      const Tensor& p = groups_[f.group][f.params[k]];
      out["state." + std::to_string(first[f.group] + f.params[k]) + "." + parts[2]] =
          whole.narrow(0, f.offsets[k], p.numel()).reshape(p.shape()).clone();
    }
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const optim::StateDict& sd) {
  NoGradGuard ng;
  std::vector<std::pair<size_t, size_t>> where;  // global parameter index -> (flat, position in it)
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].size(); ++i) where.emplace_back(SIZE_MAX, 0);
  {
    std::vector<size_t> first(groups_.size() + 1, 0);
    for (size_t g = 0; g < groups_.size(); ++g) first[g + 1] = first[g] + groups_[g].size();
    for (size_t fi = 0; fi < flats_.size(); ++fi)
      for (size_t k = 0; k < flats_[fi].params.size(); ++k) where[first[flats_[fi].group] + flats_[fi].params[k]] = {fi, k};
  }
  optim::StateDict out;
  std::vector<std::map<std::string, std::vector<Tensor>>> bufs(flats_.size());  // flat -> name -> per parameter
  std::vector<std::vector<int64_t>> steps(flats_.size());
  std::vector<std::map<std::string, double>> numbers(flats_.size());  // flat -> name -> value (NAdam's mu_product)
  for (size_t fi = 0; fi < flats_.size(); ++fi) steps[fi].assign(flats_[fi].params.size(), -1);
  for (const auto& [key, t] : sd) {
    const auto parts = optim::split_state_key(key);
    size_t idx = 0;
    if (key == "step_count" || (parts.size() == 3 && parts[0] == "param_groups")) {
      if (parts.size() == 3 && parts[2] == "params") {
        KILN_CHECK(optim::parse_state_index(parts[1], idx) && idx < groups_.size(), name_, ".load_state_dict: '", key,
                   "' names a group this optimizer does not have (it has ", groups_.size(), ")");
        KILN_CHECK(t.defined() && t.dim() == 1 && t.numel() == int64_t(groups_[idx].size()), name_,
                   ".load_state_dict: group ", idx, " has ", groups_[idx].size(), " parameter(s) but '", key, "' is ",
                   t.defined() ? describe(t) : std::string("undefined"));
        std::vector<int64_t> ids;
        for (size_t fi = 0; fi < flats_.size(); ++fi)
          if (flats_[fi].group == idx) ids.push_back(int64_t(fi));
        out[key] = from_vector(ids, {int64_t(ids.size())});
      } else {
        out[key] = t;  // hyperparameters and step_count: the wrapped optimizer checks them
      }
      continue;
    }
    KILN_CHECK(parts.size() == 3 && parts[0] == "state" && optim::parse_state_index(parts[1], idx), name_,
               ".load_state_dict: unexpected key '", key, "'");
    KILN_CHECK(idx < where.size(), name_, ".load_state_dict: '", key, "' refers to parameter ", idx,
               " but this optimizer has ", where.size(), " parameter(s)");
    const auto [fi, k] = where[idx];
    const Flat& f = flats_[fi];
    const Tensor& p = groups_[f.group][f.params[k]];
    KILN_CHECK(t.defined(), name_, ".load_state_dict: '", key, "' is undefined");
    if (parts[2] == "step") {
      KILN_CHECK(t.numel() == 1, name_, ".load_state_dict: '", key, "' must be a one-element tensor, got ", describe(t));
      steps[fi][k] = int64_t(t.item());
      continue;
    }
    if (inner_->is_scalar_state(parts[2])) {  // one number per flat vector: its parameters must agree, as on their steps
      KILN_CHECK(t.numel() == 1, name_, ".load_state_dict: '", key, "' must be a one-element tensor, got ", describe(t));
      auto [it, fresh] = numbers[fi].try_emplace(parts[2], t.item());
      KILN_CHECK(fresh || it->second == t.item(), name_, ".load_state_dict: '", key, "' is ", t.item(), " but another "
                 "parameter of group ", f.group, " has ", it->second, "; ZeRO-1 steps the parameters of a group "
                 "together, so their states must agree");
      continue;
    }
    KILN_CHECK(t.shape() == p.shape(), name_, ".load_state_dict: '", key, "' is ", describe(t), " but parameter ",
               idx, " has shape ", shape_str(p.shape()));
    auto& v = bufs[fi][parts[2]];
    v.resize(f.params.size());
    v[k] = t;
  }
  for (size_t fi = 0; fi < flats_.size(); ++fi) {
    const Flat& f = flats_[fi];
    const int64_t step = steps[fi][0];
    std::vector<int64_t> sizes;
    for (size_t p : f.params) sizes.push_back(groups_[f.group][p].numel());
    for (size_t k = 0; k < f.params.size(); ++k)
      KILN_CHECK(steps[fi][k] == step, name_, ".load_state_dict: parameters ", f.params[0], " and ", f.params[k],
                 " of group ", f.group, " took ", step, " and ", steps[fi][k], " steps; ZeRO-1 steps the "
                 "parameters of a group together, so their states must agree (was a parameter left without "
                 "gradients?)");
    if (step >= 0) out["state." + std::to_string(fi) + ".step"] = scalar_tensor(double(step), {.dtype = DType::int64});
    for (const auto& [name, v] : numbers[fi])
      out["state." + std::to_string(fi) + "." + name] = scalar_tensor(v, {.dtype = DType::float64});
    const int64_t s0 = int64_t(rank()) * f.shard;
    for (const auto& entry : bufs[fi]) {  // (no structured binding: clang 14 cannot capture one in the lambda)
      const std::string& name = entry.first;
      const std::vector<Tensor>& per_param = entry.second;
      Tensor shard = zeros({f.shard}, {.dtype = f.shard_param.dtype(), .device = f.shard_param.device()});
      for (size_t k = 0; k < f.params.size(); ++k)
        KILN_CHECK(per_param[k].defined(), name_, ".load_state_dict: 'state.", f.params[k], ".", name, "' is missing "
                   "while other parameters of group ", f.group, " have it");
      for_shard_overlap(f.offsets, sizes, f.shard, [&](size_t k, int64_t lo, int64_t hi) {
        shard.narrow(0, lo - s0, hi - lo).copy_(per_param[k].reshape({-1}).narrow(0, lo - f.offsets[k], hi - lo));
      });
      out["state." + std::to_string(fi) + "." + name] = shard;
    }
  }
  inner_->load_state_dict(out);
  step_count_ = inner_->step_count();
}

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [key, t] : inner_->state_dict())
    if (key.rfind("state.", 0) == 0 && t.dim() > 0) bytes += t.numel() * int64_t(t.element_size());
  return bytes;
}

void ZeroRedundancyOptimizer::add_param_group(const optim::ParamGroup&) {
  KILN_FAIL("ZeroRedundancyOptimizer: add_param_group is not supported (the shards are laid out at construction); "
            "construct it with every group");
}

}  // namespace kiln::dist
