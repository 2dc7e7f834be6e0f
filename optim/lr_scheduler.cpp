// Learning-rate schedulers: the lr per step (closed form or PyTorch's chainable recurrence),
// written into the optimizer's groups.
#include "kiln/optim/lr_scheduler.h"
#include <algorithm>
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
    attach_lrs_.push_back(opt.lr(g));
    base_lrs_.push_back(opt.initial_lr(g).value_or(opt.lr(g)));  // the first scheduler's lr, or this one's
  }
}

void LRScheduler::initial_step() {
  // the derived constructor has accepted its options: only now does the optimizer learn its
  // groups' initial_lr (a refused scheduler leaves it as it was)
  for (size_t g = 0; g < attach_lrs_.size(); ++g)
    if (!opt_.initial_lr(g)) opt_.set_initial_lr(g, attach_lrs_[g]);
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

void LRScheduler::restart() {
  std::vector<double> lrs(base_lrs_.size());
  for (size_t g = 0; g < lrs.size(); ++g) lrs[g] = restart_lr(g);
  apply_extra(0);
  for (size_t g = 0; g < lrs.size(); ++g) opt_.set_lr(g, lrs[g]);
  last_epoch_ = 0;
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
double StepLR::restart_lr(size_t group) const { return base_lrs_[group] * std::pow(o_.gamma, 0.0); }

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

// The chainable schedulers below follow PyTorch 2.15's get_lr() expression by expression
// (the same operations in the same order), so a run gives PyTorch's lrs to the last bit or
// within an ulp where the compiler fuses a multiply-add. Epoch 0 is the constructor's step
// (PyTorch's "initial" mode); restart_lr() is PyTorch's closed form at epoch 0.

// ---------------------------------------------------------------- MultiplicativeLR

MultiplicativeLR::MultiplicativeLR(Optimizer& opt, std::function<double(int64_t)> f)
    : LRScheduler(opt, "MultiplicativeLR"), f_(std::move(f)) {
  KILN_CHECK(bool(f_), "MultiplicativeLR: got an empty function");
  initial_step();
}

double MultiplicativeLR::lr_at(size_t group, int64_t epoch) const {
  return epoch == 0 ? opt_.lr(group) : opt_.lr(group) * f_(epoch);
}
double MultiplicativeLR::restart_lr(size_t group) const { return opt_.lr(group) * f_(0); }  // no closed form

// ---------------------------------------------------------------- MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& opt, MultiStepLROptions o) : LRScheduler(opt, "MultiStepLR"), o_(std::move(o)) {
  check_options();
  initial_step();
}

void MultiStepLR::check_options() const {
  for (int64_t m : o_.milestones) KILN_CHECK(m >= 0, "MultiStepLR: milestones must be >= 0, got ", m);
  KILN_CHECK(std::isfinite(o_.gamma) && o_.gamma >= 0, "MultiStepLR: gamma must be finite and >= 0, got ", o_.gamma);
}

double MultiStepLR::lr_at(size_t group, int64_t epoch) const {
  const auto n = std::count(o_.milestones.begin(), o_.milestones.end(), epoch);
  return n == 0 ? opt_.lr(group) : opt_.lr(group) * std::pow(o_.gamma, double(n));
}
double MultiStepLR::restart_lr(size_t group) const {
  const auto n = std::count_if(o_.milestones.begin(), o_.milestones.end(), [](int64_t m) { return m <= 0; });
  return base_lrs_[group] * std::pow(o_.gamma, double(n));
}

std::map<std::string, double> MultiStepLR::settings() const {
  std::map<std::string, double> s{{"gamma", o_.gamma}};
  for (size_t i = 0; i < o_.milestones.size(); ++i) s["milestones." + std::to_string(i)] = double(o_.milestones[i]);
  return s;
}
void MultiStepLR::set_settings(const std::map<std::string, double>& s) {
  o_.gamma = s.at("gamma");
  for (size_t i = 0; i < o_.milestones.size(); ++i) {
    const std::string k = "milestones." + std::to_string(i);
    o_.milestones[i] = whole(s.at(k), name_, "settings." + k);
  }
  check_options();
}

// ---------------------------------------------------------------- ExponentialLR

ExponentialLR::ExponentialLR(Optimizer& opt, ExponentialLROptions o) : LRScheduler(opt, "ExponentialLR"), o_(o) {
  check_options();
  initial_step();
}

void ExponentialLR::check_options() const {
  KILN_CHECK(std::isfinite(o_.gamma) && o_.gamma >= 0, "ExponentialLR: gamma must be finite and >= 0, got ",
             o_.gamma);
}

double ExponentialLR::lr_at(size_t group, int64_t epoch) const {
  return epoch == 0 ? opt_.lr(group) : opt_.lr(group) * o_.gamma;
}
double ExponentialLR::restart_lr(size_t group) const { return base_lrs_[group] * std::pow(o_.gamma, 0.0); }

std::map<std::string, double> ExponentialLR::settings() const { return {{"gamma", o_.gamma}}; }
void ExponentialLR::set_settings(const std::map<std::string, double>& s) {
  o_.gamma = s.at("gamma");
  check_options();
}

// ---------------------------------------------------------------- ConstantLR

ConstantLR::ConstantLR(Optimizer& opt, ConstantLROptions o) : LRScheduler(opt, "ConstantLR"), o_(o) {
  check_options();
  initial_step();
}

void ConstantLR::check_options() const {
  KILN_CHECK(o_.factor > 0 && o_.factor <= 1, "ConstantLR: factor must be in (0, 1], got ", o_.factor,
             o_.factor == 0 ? " (PyTorch accepts 0 and then divides by it at total_iters)" : "");
  KILN_CHECK(o_.total_iters >= 0, "ConstantLR: total_iters must be >= 0, got ", o_.total_iters);
}

double ConstantLR::lr_at(size_t group, int64_t epoch) const {
  const double lr = opt_.lr(group);
  if (epoch == 0) return lr * o_.factor;
  if (epoch != o_.total_iters) return lr;
  return lr * (1.0 / o_.factor);
}
double ConstantLR::restart_lr(size_t group) const {
  return base_lrs_[group] * (o_.factor + (0 >= o_.total_iters ? 1 - o_.factor : 0.0));
}

std::map<std::string, double> ConstantLR::settings() const {
  return {{"factor", o_.factor}, {"total_iters", double(o_.total_iters)}};
}
void ConstantLR::set_settings(const std::map<std::string, double>& s) {
  o_.factor = s.at("factor");
  o_.total_iters = whole(s.at("total_iters"), name_, "settings.total_iters");
  check_options();
}

// ---------------------------------------------------------------- LinearLR

LinearLR::LinearLR(Optimizer& opt, LinearLROptions o) : LRScheduler(opt, "LinearLR"), o_(o) {
  check_options();
  initial_step();
}

void LinearLR::check_options() const {
  KILN_CHECK(o_.start_factor > 0 && o_.start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ",
             o_.start_factor);
  KILN_CHECK(o_.end_factor >= 0 && o_.end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", o_.end_factor);
  KILN_CHECK(o_.total_iters > 0, "LinearLR: total_iters must be > 0, got ", o_.total_iters);
}

double LinearLR::lr_at(size_t group, int64_t epoch) const {
  const double lr = opt_.lr(group);
  if (epoch == 0) return lr * o_.start_factor;
  if (epoch > o_.total_iters) return lr;
  const double d = o_.end_factor - o_.start_factor;
  return lr * (1.0 + d / (double(o_.total_iters) * o_.start_factor + double(epoch - 1) * d));
}
double LinearLR::restart_lr(size_t group) const {
  const double d = o_.end_factor - o_.start_factor;
  return base_lrs_[group] * (o_.start_factor + d * double(std::min<int64_t>(o_.total_iters, 0)) / double(o_.total_iters));
}

std::map<std::string, double> LinearLR::settings() const {
  return {{"start_factor", o_.start_factor}, {"end_factor", o_.end_factor}, {"total_iters", double(o_.total_iters)}};
}
void LinearLR::set_settings(const std::map<std::string, double>& s) {
  o_.start_factor = s.at("start_factor");
  o_.end_factor = s.at("end_factor");
  o_.total_iters = whole(s.at("total_iters"), name_, "settings.total_iters");
  check_options();
}

// ---------------------------------------------------------------- PolynomialLR

PolynomialLR::PolynomialLR(Optimizer& opt, PolynomialLROptions o) : LRScheduler(opt, "PolynomialLR"), o_(o) {
  check_options();
  initial_step();
}

void PolynomialLR::check_options() const {
  KILN_CHECK(o_.total_iters > 0, "PolynomialLR: total_iters must be > 0, got ", o_.total_iters);
  KILN_CHECK(std::isfinite(o_.power) && o_.power >= 0, "PolynomialLR: power must be finite and >= 0, got ", o_.power);
}

double PolynomialLR::lr_at(size_t group, int64_t epoch) const {
  const double lr = opt_.lr(group);
  if (epoch == 0 || epoch > o_.total_iters) return lr;
  const double T = double(o_.total_iters);
  const double decay = std::pow((1.0 - double(epoch) / T) / (1.0 - double(epoch - 1) / T), o_.power);
  return lr * decay;
}
double PolynomialLR::restart_lr(size_t group) const {
  const double T = double(o_.total_iters);
  return base_lrs_[group] * std::pow(1.0 - double(std::min<int64_t>(o_.total_iters, 0)) / T, o_.power);
}

std::map<std::string, double> PolynomialLR::settings() const {
  return {{"total_iters", double(o_.total_iters)}, {"power", o_.power}};
}
void PolynomialLR::set_settings(const std::map<std::string, double>& s) {
  o_.total_iters = whole(s.at("total_iters"), name_, "settings.total_iters");
  o_.power = s.at("power");
  check_options();
}

// ---------------------------------------------------------------- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, CosineAnnealingLROptions o)
    : LRScheduler(opt, "CosineAnnealingLR"), o_(o) {
  check_options();
  initial_step();
}

void CosineAnnealingLR::check_options() const {
  KILN_CHECK(o_.T_max > 0, "CosineAnnealingLR: T_max must be > 0, got ", o_.T_max);
  KILN_CHECK(std::isfinite(o_.eta_min), "CosineAnnealingLR: eta_min must be finite, got ", o_.eta_min);
}

// PyTorch's recurrence: each step scales (lr - eta_min) by the ratio of consecutive cosine
// terms; at the bottom of each period (epoch - 1 - T_max a multiple of 2 T_max), where that
// ratio would divide by zero, it adds the first step of the rise instead.
double CosineAnnealingLR::lr_at(size_t group, int64_t epoch) const {
  const double lr = opt_.lr(group), T = double(o_.T_max), pi = std::numbers::pi;
  if (epoch == 0) return lr;
  if ((epoch - 1 - o_.T_max) % (2 * o_.T_max) == 0)
    return lr + (base_lrs_[group] - o_.eta_min) * (1 - std::cos(pi / T)) / 2;
  return (1 + std::cos(pi * double(epoch) / T)) / (1 + std::cos(pi * double(epoch - 1) / T)) * (lr - o_.eta_min) +
         o_.eta_min;
}
double CosineAnnealingLR::restart_lr(size_t group) const {
  return o_.eta_min + (base_lrs_[group] - o_.eta_min) * (1 + std::cos(std::numbers::pi * 0.0 / double(o_.T_max))) / 2;
}

std::map<std::string, double> CosineAnnealingLR::settings() const {
  return {{"T_max", double(o_.T_max)}, {"eta_min", o_.eta_min}};
}
void CosineAnnealingLR::set_settings(const std::map<std::string, double>& s) {
  o_.T_max = whole(s.at("T_max"), name_, "settings.T_max");
  o_.eta_min = s.at("eta_min");
  check_options();
}

// ---------------------------------------------------------------- CosineAnnealingWarmRestarts

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& opt, CosineAnnealingWarmRestartsOptions o)
    : LRScheduler(opt, "CosineAnnealingWarmRestarts"), o_(o) {
  check_options();
  initial_step();
}

void CosineAnnealingWarmRestarts::check_options() const {
  KILN_CHECK(o_.T_0 > 0, "CosineAnnealingWarmRestarts: T_0 must be > 0, got ", o_.T_0);
  KILN_CHECK(o_.T_mult >= 1, "CosineAnnealingWarmRestarts: T_mult must be >= 1, got ", o_.T_mult);
  KILN_CHECK(std::isfinite(o_.eta_min), "CosineAnnealingWarmRestarts: eta_min must be finite, got ", o_.eta_min);
}

// {T_cur, T_i} after `epoch` steps: PyTorch adds 1 to T_cur per step and, when it reaches
// T_i, starts a period T_mult times longer; the same, found directly.
std::pair<int64_t, int64_t> CosineAnnealingWarmRestarts::position(int64_t epoch) const {
  if (epoch <= 0) return {0, o_.T_0};
  if (o_.T_mult == 1) return {epoch % o_.T_0, o_.T_0};
  int64_t t_cur = epoch, t_i = o_.T_0;
  while (t_cur >= t_i) {  // periods grow geometrically: a few dozen iterations at most
    t_cur -= t_i;
    KILN_CHECK(t_i <= std::numeric_limits<int64_t>::max() / o_.T_mult,
               "CosineAnnealingWarmRestarts: the period T_0 * T_mult^k overflows at step ", epoch);
    t_i *= o_.T_mult;
  }
  return {t_cur, t_i};
}

double CosineAnnealingWarmRestarts::lr_at(size_t group, int64_t epoch) const {
  const auto [t_cur, t_i] = position(epoch);
  return o_.eta_min + (base_lrs_[group] - o_.eta_min) *
                          (1 + std::cos(std::numbers::pi * double(t_cur) / double(t_i))) / 2;
}

std::map<std::string, double> CosineAnnealingWarmRestarts::settings() const {
  return {{"T_0", double(o_.T_0)}, {"T_mult", double(o_.T_mult)}, {"eta_min", o_.eta_min}};
}
void CosineAnnealingWarmRestarts::set_settings(const std::map<std::string, double>& s) {
  o_.T_0 = whole(s.at("T_0"), name_, "settings.T_0");
  o_.T_mult = whole(s.at("T_mult"), name_, "settings.T_mult");
  o_.eta_min = s.at("eta_min");
  check_options();
}

// ---------------------------------------------------------------- CyclicLR

namespace {
void check_cyclic(const Optimizer& opt, const CyclicLROptions& o) {
  KILN_CHECK(std::isfinite(o.base_lr) && std::isfinite(o.max_lr) && o.base_lr >= 0 && o.max_lr >= 0,
             "CyclicLR: base_lr and max_lr must be finite and >= 0, got ", o.base_lr, " and ", o.max_lr);
  KILN_CHECK(o.step_size_up > 0 && o.step_size_down >= 0, "CyclicLR: expected step_size_up > 0 and "
             "step_size_down >= 0 (0: step_size_up), got ", o.step_size_up, " and ", o.step_size_down);
  KILN_CHECK(std::isfinite(o.gamma) && o.gamma > 0, "CyclicLR: gamma must be finite and > 0, got ", o.gamma);
  KILN_CHECK(!o.cycle_momentum || opt.supports_momentum(), "CyclicLR: optimizer ", opt.name(),
             " has no momentum or beta1 to cycle; pass .cycle_momentum = false");
}
}  // namespace

// PyTorch sets every group's lr to base_lr before its base class records initial_lr; the
// options are checked first, so refused ones leave the optimizer as it was.
Optimizer& CyclicLR::start_at_base(Optimizer& opt, const CyclicLROptions& o) {
  check_cyclic(opt, o);
  for (size_t g = 0; g < opt.num_groups(); ++g)
    if (!opt.initial_lr(g)) opt.set_lr(g, o.base_lr);
  return opt;
}

CyclicLR::CyclicLR(Optimizer& opt, CyclicLROptions o) : LRScheduler(start_at_base(opt, o), "CyclicLR"), o_(std::move(o)) {
  for (auto& b : base_lrs_) b = o_.base_lr;
  initial_step();
}

void CyclicLR::check_options() const { check_cyclic(opt_, o_); }

double CyclicLR::amplitude(double x) const {
  if (o_.scale_fn) return o_.scale_fn(x);
  switch (o_.mode) {
    case CyclicMode::triangular: return 1.0;
    case CyclicMode::triangular2: return 1 / std::pow(2.0, x - 1);
    case CyclicMode::exp_range: return std::pow(o_.gamma, x);
  }
  return 1.0;
}

std::pair<double, double> CyclicLR::shape_at(int64_t epoch) const {
  const double up = double(o_.step_size_up), down = o_.step_size_down > 0 ? double(o_.step_size_down) : up;
  const double total = up + down, ratio = up / total, e = double(epoch);
  const double cycle = std::floor(1 + e / total);
  const double x = 1.0 + e / total - cycle;
  const double scale = x <= ratio ? x / ratio : (x - 1) / (ratio - 1);
  // the built-in modes fix the argument: triangular(2) the cycle number, exp_range the step
  const bool by_cycle = o_.scale_fn ? o_.scale_mode == CyclicScaleMode::cycle : o_.mode != CyclicMode::exp_range;
  return {scale, amplitude(by_cycle ? cycle : e)};
}

double CyclicLR::lr_at(size_t group, int64_t epoch) const {
  const auto [scale, amp] = shape_at(epoch);
  const double base_height = (o_.max_lr - base_lrs_[group]) * scale;
  return base_lrs_[group] + base_height * amp;
}

void CyclicLR::apply_extra(int64_t epoch) {
  if (!o_.cycle_momentum) return;
  const auto [scale, amp] = shape_at(epoch);
  const double m = o_.max_momentum - (o_.max_momentum - o_.base_momentum) * scale * amp;
  for (size_t g = 0; g < opt_.num_groups(); ++g) opt_.set_momentum(g, m);
}

std::vector<double> CyclicLR::get_last_momentum() const {
  if (!o_.cycle_momentum || last_epoch_ < 0) return {};
  const auto [scale, amp] = shape_at(last_epoch_);
  return std::vector<double>(opt_.num_groups(), o_.max_momentum - (o_.max_momentum - o_.base_momentum) * scale * amp);
}

std::map<std::string, double> CyclicLR::settings() const {
  return {{"base_lr", o_.base_lr}, {"max_lr", o_.max_lr}, {"step_size_up", double(o_.step_size_up)},
          {"step_size_down", double(o_.step_size_down)}, {"mode", double(int(o_.mode))}, {"gamma", o_.gamma},
          {"scale_mode", double(int(o_.scale_mode))}, {"cycle_momentum", o_.cycle_momentum ? 1.0 : 0.0},
          {"base_momentum", o_.base_momentum}, {"max_momentum", o_.max_momentum}};
}
void CyclicLR::set_settings(const std::map<std::string, double>& s) {
  const int64_t mode = whole(s.at("mode"), name_, "settings.mode");
  const int64_t scale_mode = whole(s.at("scale_mode"), name_, "settings.scale_mode");
  KILN_CHECK(mode >= 0 && mode <= 2, "CyclicLR: settings.mode must be 0, 1 or 2, got ", mode);
  KILN_CHECK(scale_mode >= 0 && scale_mode <= 1, "CyclicLR: settings.scale_mode must be 0 or 1, got ", scale_mode);
  o_.base_lr = s.at("base_lr");
  o_.max_lr = s.at("max_lr");
  o_.step_size_up = whole(s.at("step_size_up"), name_, "settings.step_size_up");
  o_.step_size_down = whole(s.at("step_size_down"), name_, "settings.step_size_down");
  o_.mode = CyclicMode(mode);
  o_.gamma = s.at("gamma");
  o_.scale_mode = CyclicScaleMode(scale_mode);
  o_.cycle_momentum = s.at("cycle_momentum") != 0;
  o_.base_momentum = s.at("base_momentum");
  o_.max_momentum = s.at("max_momentum");
  check_options();
}

// ---------------------------------------------------------------- composites

CompositeScheduler::CompositeScheduler(Optimizer& opt, const char* name,
                                       const std::vector<std::reference_wrapper<LRScheduler>>& schedulers)
    : LRScheduler(opt, name), scheds_(schedulers) {
  KILN_CHECK(!scheds_.empty(), name, ": expects at least one scheduler");
  for (size_t i = 0; i < scheds_.size(); ++i) {
    const LRScheduler& c = scheds_[i].get();
    KILN_CHECK(dynamic_cast<const ReduceLROnPlateau*>(&c) == nullptr, name, ": scheduler ", i,
               " is a ReduceLROnPlateau, whose step needs a metric");
    KILN_CHECK(&c.optimizer() == &opt, name, ": scheduler ", i, " (", c.name_, ") belongs to another optimizer");
  }
}

double CompositeScheduler::lr_at(size_t group, int64_t) const { return opt_.lr(group); }

StateDict CompositeScheduler::state_dict() const {
  StateDict sd = LRScheduler::state_dict();
  for (size_t i = 0; i < scheds_.size(); ++i)
    for (auto& [k, v] : scheds_[i].get().state_dict()) sd["schedulers." + std::to_string(i) + "." + k] = v;
  return sd;
}

void CompositeScheduler::load_state_dict(const StateDict& sd) {
  // split "schedulers.<i>.<key>" off, by scheduler
  std::vector<StateDict> kids(scheds_.size());
  StateDict own;
  const std::string prefix = "schedulers.";
  for (const auto& [k, v] : sd) {
    if (k.rfind(prefix, 0) != 0) {
      own[k] = v;
      continue;
    }
    const size_t dot = k.find('.', prefix.size());
    const std::string idx = k.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
    KILN_CHECK(dot != std::string::npos && !idx.empty() && idx.size() < 10 &&
                   std::all_of(idx.begin(), idx.end(), [](char c) { return c >= '0' && c <= '9'; }),
               name_, ".load_state_dict: unexpected key '", k, "'");
    const size_t i = std::stoul(idx);
    KILN_CHECK(i < scheds_.size(), name_, ".load_state_dict: '", k, "' names scheduler ", i, " but there are ",
               scheds_.size());
    kids[i][k.substr(dot + 1)] = v;
  }
  // all or nothing: on an error the schedulers' states from before are put back, and this
  // composite's lrs into the optimizer
  std::vector<StateDict> before;
  for (const auto& c : scheds_) before.push_back(c.get().state_dict());
  try {
    for (size_t i = 0; i < scheds_.size(); ++i) scheds_[i].get().load_state_dict(kids[i]);
    LRScheduler::load_state_dict(own);
  } catch (...) {
    for (size_t i = 0; i < scheds_.size(); ++i) scheds_[i].get().load_state_dict(before[i]);
    for (size_t g = 0; g < last_lr_.size(); ++g) opt_.set_lr(g, last_lr_[g]);
    throw;
  }
}

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : CompositeScheduler(opt, "SequentialLR", schedulers), milestones_(std::move(milestones)) {
  KILN_CHECK(milestones_.size() + 1 == scheds_.size(), "SequentialLR: expects one milestone fewer than schedulers, "
             "got ", scheds_.size(), " scheduler(s) and ", milestones_.size(), " milestone(s)");
  for (size_t i = 0; i < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] > (i == 0 ? 0 : milestones_[i - 1]), "SequentialLR: milestones must be > 0 and "
               "increasing, got ", milestones_[i], " at index ", i);
  for (size_t i = 0; i < scheds_.size(); ++i) {
    const std::string n = scheds_[i].get().name_;
    KILN_CHECK(n != "SequentialLR" && n != "ChainedScheduler", "SequentialLR: scheduler ", i, " is a ", n,
               ", which cannot be restarted at a milestone (PyTorch fails on it there)");
  }
  for (size_t g = 0; g < opt.num_groups(); ++g) opt.set_lr(g, base_lrs_[g]);  // PyTorch: back to initial_lr
  scheds_.front().get().initial_step();
  last_epoch_ = 0;
  last_lr_ = scheds_.front().get().get_last_lr();
}

void SequentialLR::step() {
  const int64_t e = last_epoch_ + 1;
  const size_t idx = size_t(std::upper_bound(milestones_.begin(), milestones_.end(), e) - milestones_.begin());
  LRScheduler& s = scheds_[idx].get();
  if (idx > 0 && milestones_[idx - 1] == e) s.restart();
  else s.step();
  last_epoch_ = e;
  last_lr_ = s.get_last_lr();
}

std::map<std::string, double> SequentialLR::settings() const {
  std::map<std::string, double> s;
  for (size_t i = 0; i < milestones_.size(); ++i) s["milestones." + std::to_string(i)] = double(milestones_[i]);
  return s;
}
void SequentialLR::set_settings(const std::map<std::string, double>& s) {
  std::vector<int64_t> m(milestones_.size());
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string k = "milestones." + std::to_string(i);
    m[i] = whole(s.at(k), name_, "settings." + k);
    KILN_CHECK(m[i] > (i == 0 ? 0 : m[i - 1]), "SequentialLR: milestones must be > 0 and increasing, got ", m[i],
               " at index ", i);
  }
  milestones_ = std::move(m);
}

Optimizer& ChainedScheduler::optimizer_of(const std::vector<std::reference_wrapper<LRScheduler>>& s) {
  KILN_CHECK(!s.empty(), "ChainedScheduler: expects at least one scheduler");
  return s.front().get().optimizer();
}

ChainedScheduler::ChainedScheduler(std::vector<std::reference_wrapper<LRScheduler>> schedulers)
    : CompositeScheduler(optimizer_of(schedulers), "ChainedScheduler", schedulers) {
  last_epoch_ = 0;
  for (size_t g = 0; g < base_lrs_.size(); ++g) last_lr_.push_back(opt_.lr(g));
}

void ChainedScheduler::step() {
  for (auto& s : scheds_) s.get().step();
  ++last_epoch_;
  for (size_t g = 0; g < last_lr_.size(); ++g) last_lr_[g] = opt_.lr(g);
}

// ---------------------------------------------------------------- ReduceLROnPlateau

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions o)
    : LRScheduler(opt, "ReduceLROnPlateau"), o_(std::move(o)) {
  check_options();
  best_ = o_.mode == PlateauMode::min ? INFINITY : -INFINITY;
  last_epoch_ = 0;
  for (size_t g = 0; g < opt.num_groups(); ++g) last_lr_.push_back(opt.lr(g));
}

void ReduceLROnPlateau::check_options() const {
  KILN_CHECK(o_.factor >= 0 && o_.factor < 1, "ReduceLROnPlateau: factor must be in [0, 1), got ", o_.factor);
  KILN_CHECK(o_.patience >= 0 && o_.cooldown >= 0, "ReduceLROnPlateau: patience and cooldown must be >= 0, got ",
             o_.patience, " and ", o_.cooldown);
  KILN_CHECK(std::isfinite(o_.threshold) && o_.threshold >= 0, "ReduceLROnPlateau: threshold must be finite and "
             ">= 0, got ", o_.threshold);
  KILN_CHECK(std::isfinite(o_.eps) && o_.eps >= 0, "ReduceLROnPlateau: eps must be finite and >= 0, got ", o_.eps);
  KILN_CHECK(o_.min_lrs.empty() || o_.min_lrs.size() == opt_.num_groups(), "ReduceLROnPlateau: expected ",
             opt_.num_groups(), " min_lrs (one per parameter group), got ", o_.min_lrs.size());
  KILN_CHECK(o_.min_lr >= 0 && std::all_of(o_.min_lrs.begin(), o_.min_lrs.end(), [](double v) { return v >= 0; }),
             "ReduceLROnPlateau: min_lr and min_lrs must be >= 0");
}

bool ReduceLROnPlateau::is_better(double a) const {
  if (o_.mode == PlateauMode::min)
    return o_.threshold_mode == ThresholdMode::rel ? a < best_ * (1.0 - o_.threshold) : a < best_ - o_.threshold;
  return o_.threshold_mode == ThresholdMode::rel ? a > best_ * (o_.threshold + 1.0) : a > best_ + o_.threshold;
}

void ReduceLROnPlateau::step() {
  KILN_FAIL("ReduceLROnPlateau: step() needs the monitored metric: call step(metric), e.g. step(validation_loss)");
}

void ReduceLROnPlateau::step(double metric) {
  const size_t G = opt_.num_groups();
  KILN_CHECK(o_.min_lrs.empty() || o_.min_lrs.size() == G, "ReduceLROnPlateau: the optimizer has ", G,
             " parameter group(s) but min_lrs has ", o_.min_lrs.size(), " (a group was added after the scheduler was "
             "made; give one min_lr for all groups instead)");
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_ = 0;
  } else {
    ++num_bad_;
  }
  if (in_cooldown()) {
    --cooldown_counter_;
    num_bad_ = 0;  // bad steps in cooldown do not count
  }
  if (num_bad_ > o_.patience) {
    for (size_t g = 0; g < G; ++g) {
      const double old_lr = opt_.lr(g);
      const double new_lr = std::max(old_lr * o_.factor, o_.min_lrs.empty() ? o_.min_lr : o_.min_lrs[g]);
      if (old_lr - new_lr > o_.eps) opt_.set_lr(g, new_lr);
    }
    cooldown_counter_ = o_.cooldown;
    num_bad_ = 0;
  }
  last_lr_.assign(G, 0.0);
  for (size_t g = 0; g < G; ++g) last_lr_[g] = opt_.lr(g);
}

double ReduceLROnPlateau::lr_at(size_t group, int64_t) const { return opt_.lr(group); }

std::map<std::string, double> ReduceLROnPlateau::settings() const {
  std::map<std::string, double> s{{"mode_max", o_.mode == PlateauMode::max ? 1.0 : 0.0},
                                  {"factor", o_.factor},
                                  {"patience", double(o_.patience)},
                                  {"threshold", o_.threshold},
                                  {"threshold_abs", o_.threshold_mode == ThresholdMode::abs ? 1.0 : 0.0},
                                  {"cooldown", double(o_.cooldown)},
                                  {"min_lr", o_.min_lr},
                                  {"eps", o_.eps},
                                  {"num_bad_epochs", double(num_bad_)},
                                  {"cooldown_counter", double(cooldown_counter_)}};
  for (size_t g = 0; g < o_.min_lrs.size(); ++g) s["min_lrs." + std::to_string(g)] = o_.min_lrs[g];
  return s;
}
void ReduceLROnPlateau::set_settings(const std::map<std::string, double>& s) {
  ReduceLROnPlateauOptions o = o_;
  o.mode = s.at("mode_max") != 0 ? PlateauMode::max : PlateauMode::min;
  o.factor = s.at("factor");
  o.patience = whole(s.at("patience"), name_, "settings.patience");
  o.threshold = s.at("threshold");
  o.threshold_mode = s.at("threshold_abs") != 0 ? ThresholdMode::abs : ThresholdMode::rel;
  o.cooldown = whole(s.at("cooldown"), name_, "settings.cooldown");
  o.min_lr = s.at("min_lr");
  o.eps = s.at("eps");
  for (size_t g = 0; g < o.min_lrs.size(); ++g) o.min_lrs[g] = s.at("min_lrs." + std::to_string(g));
  const int64_t bad = whole(s.at("num_bad_epochs"), name_, "settings.num_bad_epochs");
  const int64_t cool = whole(s.at("cooldown_counter"), name_, "settings.cooldown_counter");
  KILN_CHECK(bad >= 0 && cool >= 0, "ReduceLROnPlateau: num_bad_epochs and cooldown_counter must be >= 0, got ", bad,
             " and ", cool);
  std::swap(o, o_);
  try {
    check_options();
  } catch (...) {
    std::swap(o, o_);
    throw;
  }
  num_bad_ = bad;
  cooldown_counter_ = cool;
}

StateDict ReduceLROnPlateau::state_dict() const {
  StateDict sd = LRScheduler::state_dict();
  sd["best"] = scalar_tensor(best_, {.dtype = DType::float64});
  return sd;
}
void ReduceLROnPlateau::load_state_dict(const StateDict& sd) {
  StateDict rest = sd;
  auto it = rest.find("best");
  KILN_CHECK(it != rest.end() && it->second.defined() && it->second.numel() == 1,
             "ReduceLROnPlateau.load_state_dict: missing key 'best' (a one-element tensor)");
  const double best = it->second.item();
  KILN_CHECK(!std::isnan(best), "ReduceLROnPlateau.load_state_dict: 'best' is NaN");
  rest.erase(it);
  LRScheduler::load_state_dict(rest);
  best_ = best;
}

}  // namespace kiln::optim
