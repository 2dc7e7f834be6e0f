// Learning-rate schedulers: closed-form lr per step, written into the optimizer's groups.
#include "kiln/optim/lr_scheduler.h"
#include <cmath>
#include <numbers>
#include <string>
#include "kiln/core/checked_math.h"

namespace kiln::optim {

namespace {
// A step count read back from a state dict (checked: a corrupt file must not reach an
// out-of-range double-to-int64 conversion).
int64_t whole(double v, const std::string& who, const std::string& key) {
  return checked_whole(v, who + ".load_state_dict", key);
}
}  // namespace

// ---------------------------------------------------------------- base

LRScheduler::LRScheduler(Optimizer& opt, const char* name) : opt_(opt), name_(name) {
  for (size_t g = 0; g < opt.num_groups(); ++g) {
    if (!opt.initial_lr(g)) opt.set_initial_lr(g, opt.lr(g));  // the first scheduler attached
    base_lrs_.push_back(*opt.initial_lr(g));
  }
}

void LRScheduler::initial_step() {
  last_epoch_ = -1;
  step();
}

void LRScheduler::step() {
  const int64_t e = last_epoch_ + 1;
  std::vector<double> lrs(base_lrs_.size());
  for (size_t g = 0; g < lrs.size(); ++g) lrs[g] = lr_at(g, e);  // may throw (OneCycle past the end)
  apply_extra(e);
  for (size_t g = 0; g < lrs.size(); ++g) opt_.set_lr(g, lrs[g]);
  last_epoch_ = e;
  last_lr_ = std::move(lrs);
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  const TensorOptions f64{.dtype = DType::float64};
  sd["last_epoch"] = scalar_tensor(double(last_epoch_), {.dtype = DType::int64});
  sd["base_lrs"] = from_vector(base_lrs_);
  sd["last_lr"] = from_vector(last_lr_);
  for (const auto& [k, v] : settings()) sd["settings." + k] = scalar_tensor(v, f64);
  return sd;
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  auto get = [&](const std::string& k) -> const Tensor& {
    auto it = sd.find(k);
    KILN_CHECK(it != sd.end() && it->second.defined(), name_, ".load_state_dict: missing key '", k, "'");
    return it->second;
  };
  const Tensor& le = get("last_epoch");
  KILN_CHECK(le.numel() == 1, name_, ".load_state_dict: 'last_epoch' must have one element, got shape ",
             shape_str(le.shape()));
  std::vector<double> base = get("base_lrs").to_vector<double>();
  std::vector<double> last = get("last_lr").to_vector<double>();
  // (groups added to the optimizer after the scheduler was made are not scheduled)
  KILN_CHECK(base.size() == base_lrs_.size() && last.size() == base.size(), name_, ".load_state_dict: the state has ",
             base.size(), " group(s), this scheduler ", base_lrs_.size());
  std::map<std::string, double> s;
  for (const auto& [k, t] : sd) {
    if (k == "last_epoch" || k == "base_lrs" || k == "last_lr") continue;
    KILN_CHECK(k.rfind("settings.", 0) == 0 && t.defined() && t.numel() == 1, name_,
               ".load_state_dict: unexpected key '", k, "'");
    s[k.substr(9)] = t.item();
  }
  auto cur = settings();
  for (const auto& [k, v] : cur) {
    (void)v;
    KILN_CHECK(s.count(k), name_, ".load_state_dict: missing key 'settings.", k, "'");
  }
  for (const auto& [k, v] : s) {
    (void)v;
    KILN_CHECK(cur.count(k), name_, ".load_state_dict: unknown key 'settings.", k,
               "' (is this the state of another scheduler?)");
  }
  const int64_t last_epoch = whole(le.item(), name_, "last_epoch");
  KILN_CHECK(last_epoch >= 0, name_, ".load_state_dict: 'last_epoch' must be >= 0, got ", last_epoch);
  for (const auto& [k, v] : s)  // every setting is a number; the step counts among them are whole (below)
    KILN_CHECK(std::isfinite(v), name_, ".load_state_dict: 'settings.", k, "' must be finite, got ", v);
  const std::map<std::string, double> old = settings();
  try {  // the new settings must pass the constructor's checks; else the old ones stay
    set_settings(s);
  } catch (const Error& e) {
    set_settings(old);
    KILN_FAIL(name_, ".load_state_dict: the saved settings are invalid: ", e.what());
  }
  last_epoch_ = last_epoch;
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
  // Write the restored lrs into the optimizer (PyTorch leaves that to the optimizer's own
  // state_dict): then the order of construction and restore cannot matter. A scheduler
  // built after the optimizer's state was loaded would otherwise leave its epoch-0 lr
  // (0 for a warm-up) in place until the next step().
  for (size_t g = 0; g < last_lr_.size(); ++g) opt_.set_lr(g, last_lr_[g]);
  apply_extra(last_epoch_);
}

// ---------------------------------------------------------------- StepLR

StepLR::StepLR(Optimizer& opt, StepLROptions o) : LRScheduler(opt, "StepLR"), o_(o) {
  check_options();
  initial_step();
}

void StepLR::check_options() const {
  KILN_CHECK(o_.step_size > 0, "StepLR: step_size must be > 0, got ", o_.step_size);
  KILN_CHECK(std::isfinite(o_.gamma) && o_.gamma >= 0, "StepLR: gamma must be finite and >= 0, got ", o_.gamma);
}

// PyTorch's chainable form: the optimizer's current lr, times gamma every step_size steps
// (so a hand-set lr, or another scheduler's, is carried on, and two StepLRs compose).
double StepLR::lr_at(size_t group, int64_t epoch) const {
  const double lr = opt_.lr(group);
  return epoch > 0 && epoch % o_.step_size == 0 ? lr * o_.gamma : lr;
}

std::map<std::string, double> StepLR::settings() const {
  return {{"step_size", double(o_.step_size)}, {"gamma", o_.gamma}};
}
void StepLR::set_settings(const std::map<std::string, double>& s) {
  o_.step_size = whole(s.at("step_size"), name_, "settings.step_size");
  o_.gamma = s.at("gamma");
  check_options();
}

// ---------------------------------------------------------------- WarmupCosineLR

WarmupCosineLR::WarmupCosineLR(Optimizer& opt, WarmupCosineLROptions o) : LRScheduler(opt, "WarmupCosineLR"), o_(o) {
  check_options();
  initial_step();
}

void WarmupCosineLR::check_options() const {
  KILN_CHECK(o_.warmup_steps >= 0 && o_.total_steps > o_.warmup_steps, "WarmupCosineLR: expected 0 <= warmup_steps "
             "< total_steps, got warmup_steps ", o_.warmup_steps, ", total_steps ", o_.total_steps);
  KILN_CHECK(std::isfinite(o_.min_lr) && o_.min_lr >= 0, "WarmupCosineLR: min_lr must be finite and >= 0, got ",
             o_.min_lr);
  KILN_CHECK(o_.start_factor >= 0 && o_.start_factor <= 1, "WarmupCosineLR: start_factor must be in [0, 1], got ",
             o_.start_factor);
}

double WarmupCosineLR::lr_at(size_t group, int64_t epoch) const {
  const double base = base_lrs_[group];
  if (epoch < o_.warmup_steps)
    return base * (o_.start_factor + (1.0 - o_.start_factor) * double(epoch) / double(o_.warmup_steps));
  if (epoch > o_.total_steps) return o_.min_lr;
  const double progress = double(epoch - o_.warmup_steps) / double(o_.total_steps - o_.warmup_steps);
  return o_.min_lr + (base - o_.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

std::map<std::string, double> WarmupCosineLR::settings() const {
  return {{"warmup_steps", double(o_.warmup_steps)}, {"total_steps", double(o_.total_steps)},
          {"min_lr", o_.min_lr}, {"start_factor", o_.start_factor}};
}
void WarmupCosineLR::set_settings(const std::map<std::string, double>& s) {
  o_.warmup_steps = whole(s.at("warmup_steps"), name_, "settings.warmup_steps");
  o_.total_steps = whole(s.at("total_steps"), name_, "settings.total_steps");
  o_.min_lr = s.at("min_lr");
  o_.start_factor = s.at("start_factor");
  check_options();
}

// ---------------------------------------------------------------- OneCycleLR

OneCycleLR::OneCycleLR(Optimizer& opt, OneCycleLROptions o) : LRScheduler(opt, "OneCycleLR"), o_(o) {
  check_options();
  build_phases();
  for (auto& b : base_lrs_) b = o_.max_lr / o_.div_factor;  // initial_lr, like PyTorch's base_lrs
  initial_step();
}

void OneCycleLR::check_options() const {
  KILN_CHECK(o_.total_steps > 0, "OneCycleLR: total_steps must be > 0, got ", o_.total_steps);
  KILN_CHECK(o_.pct_start >= 0 && o_.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got ", o_.pct_start);
  KILN_CHECK(std::isfinite(o_.max_lr) && o_.max_lr >= 0 && o_.div_factor > 0 && o_.final_div_factor > 0,
             "OneCycleLR: expected a finite max_lr >= 0, div_factor > 0 and final_div_factor > 0, got ", o_.max_lr,
             ", ", o_.div_factor, ", ", o_.final_div_factor);
  KILN_CHECK(!o_.cycle_momentum || opt_.supports_momentum(), "OneCycleLR: optimizer ", opt_.name(),
             " has no momentum or beta1 to cycle; pass .cycle_momentum = false");
}

void OneCycleLR::build_phases() {
  const double T = double(o_.total_steps), p = o_.pct_start;
  if (o_.three_phase) {
    phases_ = {{p * T - 1, 0, 1, 0, 1}, {2 * p * T - 2, 1, 0, 1, 0}, {T - 1, 0, 2, 0, 0}};
  } else {
    phases_ = {{p * T - 1, 0, 1, 0, 1}, {T - 1, 1, 2, 1, 0}};
  }
  // A phase that spans no steps would divide 0 by 0 (PyTorch raises ZeroDivisionError there);
  // "no steps" within rounding, as p * T - 1 may be computed with or without an FMA.
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    KILN_CHECK(std::fabs(phases_[i].end_step - start) > 1e-9, "OneCycleLR: phase ", i + 1, " of ", phases_.size(),
               " would span no steps with total_steps = ", o_.total_steps, ", pct_start = ", o_.pct_start,
               o_.three_phase ? ", three_phase" : "", " (its end step equals its start); choose another pct_start");
    start = phases_[i].end_step;
  }
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (o_.anneal_strategy == AnnealStrategy::linear) return (end - start) * pct + start;
  const double cos_out = std::cos(std::numbers::pi * pct) + 1.0;
  return end + (start - end) / 2.0 * cos_out;
}

double OneCycleLR::value_at(int64_t epoch, bool momentum) const {
  KILN_CHECK(epoch <= o_.total_steps, "OneCycleLR: tried to step ", epoch, " times; the schedule spans total_steps = ",
             o_.total_steps, " steps");
  const double initial = o_.max_lr / o_.div_factor;
  const double lrs[3] = {initial, o_.max_lr, initial / o_.final_div_factor};
  const double ms[2] = {o_.max_momentum, o_.base_momentum};
  double start_step = 0;
  const double s = double(epoch);
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& ph = phases_[i];
    if (s <= ph.end_step || i + 1 == phases_.size()) {
      const double pct = (s - start_step) / (ph.end_step - start_step);
      return momentum ? anneal(ms[ph.start_m], ms[ph.end_m], pct) : anneal(lrs[ph.start_lr], lrs[ph.end_lr], pct);
    }
    start_step = ph.end_step;
  }
  return 0.0;  // unreachable
}

double OneCycleLR::lr_at(size_t, int64_t epoch) const { return value_at(epoch, false); }

void OneCycleLR::apply_extra(int64_t epoch) {
  if (!o_.cycle_momentum) return;
  const double m = value_at(epoch, true);
  for (size_t g = 0; g < opt_.num_groups(); ++g) opt_.set_momentum(g, m);
}

std::vector<double> OneCycleLR::get_last_momentum() const {
  if (!o_.cycle_momentum || last_epoch_ < 0) return {};
  return std::vector<double>(opt_.num_groups(), value_at(last_epoch_, true));
}

std::map<std::string, double> OneCycleLR::settings() const {
  return {{"max_lr", o_.max_lr},
          {"total_steps", double(o_.total_steps)},
          {"pct_start", o_.pct_start},
          {"anneal_linear", o_.anneal_strategy == AnnealStrategy::linear ? 1.0 : 0.0},
          {"cycle_momentum", o_.cycle_momentum ? 1.0 : 0.0},
          {"base_momentum", o_.base_momentum},
          {"max_momentum", o_.max_momentum},
          {"div_factor", o_.div_factor},
          {"final_div_factor", o_.final_div_factor},
          {"three_phase", o_.three_phase ? 1.0 : 0.0}};
}

void OneCycleLR::set_settings(const std::map<std::string, double>& s) {
  o_.max_lr = s.at("max_lr");
  o_.total_steps = whole(s.at("total_steps"), name_, "settings.total_steps");
  o_.pct_start = s.at("pct_start");
  o_.anneal_strategy = s.at("anneal_linear") != 0 ? AnnealStrategy::linear : AnnealStrategy::cos;
  o_.cycle_momentum = s.at("cycle_momentum") != 0;
  o_.base_momentum = s.at("base_momentum");
  o_.max_momentum = s.at("max_momentum");
  o_.div_factor = s.at("div_factor");
  o_.final_div_factor = s.at("final_div_factor");
  o_.three_phase = s.at("three_phase") != 0;
  check_options();
  build_phases();
}

// ---------------------------------------------------------------- LambdaLR

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> f) : LRScheduler(opt, "LambdaLR"), f_(std::move(f)) {
  KILN_CHECK(bool(f_), "LambdaLR: got an empty function");
  initial_step();
}

double LambdaLR::lr_at(size_t group, int64_t epoch) const { return base_lrs_[group] * f_(epoch); }

}  // namespace kiln::optim
