// torch.optim.LBFGS (see lbfgs.h): PyTorch's step() and _strong_wolfe, statement by statement.
#include "kiln/optim/lbfgs.h"
#include <algorithm>
#include <cmath>
#include "kiln/core/autograd.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::optim {

namespace {

double dot(const Tensor& a, const Tensor& b) { return sum(mul(a, b)).item(); }
double abs_max(const Tensor& a) { return a.numel() ? max(abs(a)).item() : 0.0; }

/// The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to bounds
/// (PyTorch's _cubic_interpolate).
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const auto [lo, hi] = bounds ? *bounds : (x1 <= x2 ? std::make_pair(x1, x2) : std::make_pair(x2, x1));
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square >= 0) {
    const double d2 = std::sqrt(d2_square);
    const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                    : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
    return std::min(std::max(min_pos, lo), hi);
  }
  return (lo + hi) / 2.0;
}

}  // namespace

LBFGS::LBFGS(const std::vector<Tensor>& params, LBFGSOptions o) : OptimizerWith("LBFGS", single_group(params), o) {
  check_all_options();
  const Tensor& p0 = groups_[0].empty() ? Tensor() : groups_[0][0];
  for (const Tensor& p : groups_[0])
    KILN_CHECK(p.dtype() == p0.dtype() && p.device() == p0.device(), "LBFGS: all parameters must share one dtype and "
               "device, got ", describe(p0), " and ", describe(p));
}

void LBFGS::check_options(size_t group) const {
  KILN_CHECK(group == 0, "LBFGS doesn't support per-parameter options (parameter groups), as PyTorch's");
  const LBFGSOptions& o = opts_.at(group);
  KILN_CHECK(o.lr > 0, "LBFGS: invalid learning rate ", o.lr, " (expected > 0)");
  KILN_CHECK(o.max_iter > 0 && o.history_size > 0 && (!o.max_eval || *o.max_eval > 0), "LBFGS: max_iter, max_eval "
             "and history_size must be positive, got ", o.max_iter, ", ", o.max_eval ? *o.max_eval : -1, ", ",
             o.history_size);
  KILN_CHECK(o.tolerance_grad >= 0 && o.tolerance_change >= 0, "LBFGS: tolerances must be >= 0");
}

void LBFGS::add_param_group(const ParamGroup&) {
  KILN_FAIL("LBFGS doesn't support per-parameter options (parameter groups), as PyTorch's");
}

void LBFGS::update(size_t, Tensor, const Tensor&, ParamState&) {
  KILN_FAIL("LBFGS: internal error, the per-parameter update is not used");
}

void LBFGS::step() {
  KILN_FAIL("LBFGS.step needs a closure that re-evaluates the loss: step([&] { opt.zero_grad(); Tensor loss = ...; "
            "loss.backward(); return loss; })");
}

Tensor LBFGS::flat_grad() const {
  std::vector<Tensor> views;
  for (const Tensor& p : groups_[0])
    views.push_back(p.grad().defined() ? p.grad().to(p.dtype()).reshape({p.numel()}) : zeros({p.numel()},
                                                                                               {.dtype = p.dtype(), .device = p.device()}));
  return views.empty() ? Tensor() : cat(views, 0);
}

void LBFGS::add_to_params(double step, const Tensor& direction) {
  NoGradGuard ng;
  int64_t off = 0;
  for (Tensor& p : groups_[0]) {
    p.add_(direction.narrow(0, off, p.numel()).reshape(p.shape()), step);
    off += p.numel();
  }
}

std::vector<Tensor> LBFGS::clone_params() const {
  NoGradGuard ng;
  std::vector<Tensor> out;
  for (const Tensor& p : groups_[0]) out.push_back(p.detach().clone());
  return out;
}

void LBFGS::set_params(const std::vector<Tensor>& values) {
  NoGradGuard ng;
  for (size_t i = 0; i < values.size(); ++i) groups_[0][i].copy_(values[i]);
}

std::pair<double, Tensor> LBFGS::directional_evaluate(const Closure& closure, const std::vector<Tensor>& x, double t,
                                                      const Tensor& d) {
  add_to_params(t, d);
  const double loss = closure().item();
  Tensor g = flat_grad();
  set_params(x);
  return {loss, g};
}

LBFGS::LineSearch LBFGS::strong_wolfe(const Closure& closure, const std::vector<Tensor>& x, double t, const Tensor& d,
                                      double f, const Tensor& g_in, double gtd) {
  const double c1 = 1e-4, c2 = 0.9, tolerance_change = 1e-9;
  const int64_t max_ls = 25;
  const double d_norm = abs_max(d);
  const Tensor g = g_in.clone();
  auto [f_new, g_new] = directional_evaluate(closure, x, t, d);
  int64_t evals = 1;
  double gtd_new = dot(g_new, d);
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  int64_t ls_iter = 0;
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Tensor> bracket_g;
  while (ls_iter < max_ls) {
    if (f_new > f + c1 * t * gtd || (ls_iter > 1 && f_new >= f_prev)) {
      bracket = {t_prev, t};
      bracket_f = {f_prev, f_new};
      bracket_g = {g_prev, g_new.clone()};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    if (std::abs(gtd_new) <= -c2 * gtd) {
      bracket = {t};
      bracket_f = {f_new};
      bracket_g = {g_new};
      done = true;
      break;
    }
    if (gtd_new >= 0) {
      bracket = {t_prev, t};
      bracket_f = {f_prev, f_new};
      bracket_g = {g_prev, g_new.clone()};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    // interpolate within [t + 0.01 (t - t_prev), 10 t]
    const double min_step = t + 0.01 * (t - t_prev), max_step = t * 10, tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, std::make_pair(min_step, max_step));
    t_prev = tmp;
    f_prev = f_new;
    g_prev = g_new.clone();
    gtd_prev = gtd_new;
    std::tie(f_new, g_new) = directional_evaluate(closure, x, t, d);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) {  // no bracket found
    bracket = {0, t};
    bracket_f = {f, f_new};
    bracket_g = {g, g_new};
  }
  // zoom
  bool insuf_progress = false;
  size_t low = bracket_f.front() <= bracket_f.back() ? 0 : 1, high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::abs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]);
    const double bmax = std::max(bracket[0], bracket[1]), bmin = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (bmax - bmin);
    if (std::min(bmax - t, t - bmin) < eps) {
      if (insuf_progress || t >= bmax || t <= bmin) {
        t = std::abs(t - bmax) < std::abs(t - bmin) ? bmax - eps : bmin + eps;
        insuf_progress = false;
      } else {
        insuf_progress = true;
      }
    } else {
      insuf_progress = false;
    }
    std::tie(f_new, g_new) = directional_evaluate(closure, x, t, d);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
    if (f_new > f + c1 * t * gtd || f_new >= bracket_f[low]) {
      bracket[high] = t;
      bracket_f[high] = f_new;
      bracket_g[high] = g_new.clone();
      bracket_gtd[high] = gtd_new;
      low = bracket_f[0] <= bracket_f[1] ? 0 : 1;
      high = 1 - low;
    } else {
      if (std::abs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        bracket[high] = bracket[low];
        bracket_f[high] = bracket_f[low];
        bracket_g[high] = bracket_g[low];
        bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t;
      bracket_f[low] = f_new;
      bracket_g[low] = g_new.clone();
      bracket_gtd[low] = gtd_new;
    }
  }
  if (bracket.size() == 1) low = 0;
  return {bracket_f[low], bracket_g[low], bracket[low], evals};
}

Tensor LBFGS::step(const Closure& closure) {
  KILN_CHECK(bool(closure), "LBFGS.step: the closure is empty");
  check_options(0);
  const LBFGSOptions& o = opts_[0];
  const int64_t max_eval = o.max_eval ? *o.max_eval : o.max_iter * 5 / 4;
  ++step_count_;
  const Tensor orig_loss = closure();
  KILN_CHECK(orig_loss.defined() && orig_loss.numel() == 1, "LBFGS.step: the closure must return the loss (one "
             "element), got ", orig_loss.defined() ? describe(orig_loss) : "undefined");
  double loss = orig_loss.item();
  int64_t current_evals = 1;
  ++func_evals_;
  NoGradGuard ng;
  Tensor g = flat_grad();
  if (!g.defined() || abs_max(g) <= o.tolerance_grad) return orig_loss;
  Tensor d = d_;
  double t = t_;
  int64_t n_iter = 0;
  bool opt_cond = false;
  while (n_iter < o.max_iter) {
    ++n_iter;
    ++n_iter_;
    if (n_iter_ == 1) {
      d = neg(g);
      old_dirs_.clear();
      old_stps_.clear();
      ro_.clear();
      h_diag_ = 1;
    } else {
      // the new curvature pair, kept when y.s is positive enough
      const Tensor y = sub(g, prev_flat_grad_), s = mul(d, t);
      const double ys = dot(y, s);
      if (ys > 1e-10) {
        if (int64_t(old_dirs_.size()) == o.history_size) {
          old_dirs_.erase(old_dirs_.begin());
          old_stps_.erase(old_stps_.begin());
          ro_.erase(ro_.begin());
        }
        old_dirs_.push_back(y);
        old_stps_.push_back(s);
        ro_.push_back(1.0 / ys);
        h_diag_ = ys / dot(y, y);
      }
      // the two-loop recursion: d = -H g
      const size_t num_old = old_dirs_.size();
      std::vector<double> al(num_old);
      Tensor q = neg(g);
      for (size_t k = num_old; k-- > 0;) {
        al[k] = dot(old_stps_[k], q) * ro_[k];
        q.add_(old_dirs_[k], -al[k]);
      }
      Tensor r = mul(q, h_diag_);
      for (size_t k = 0; k < num_old; ++k) {
        const double be = dot(old_dirs_[k], r) * ro_[k];
        r.add_(old_stps_[k], al[k] - be);
      }
      d = r;
    }
    prev_flat_grad_ = g.clone();
    prev_loss_ = loss;
    t = n_iter_ == 1 ? std::min(1.0, 1.0 / sum(abs(g)).item()) * o.lr : o.lr;
    has_t_ = true;
    const double gtd = dot(g, d);
    if (gtd > -o.tolerance_change) break;  // not a descent direction
    int64_t ls_evals = 0;
    if (o.strong_wolfe) {
      const std::vector<Tensor> x = clone_params();
      GradModeGuard grad_on(true);
      LineSearch ls = strong_wolfe(closure, x, t, d, loss, g, gtd);
      loss = ls.f;
      g = ls.g;
      t = ls.t;
      ls_evals = ls.evals;
      add_to_params(t, d);
      opt_cond = abs_max(g) <= o.tolerance_grad;
    } else {
      add_to_params(t, d);
      if (n_iter != o.max_iter) {
        {
          GradModeGuard grad_on(true);
          loss = closure().item();
        }
        g = flat_grad();
        opt_cond = abs_max(g) <= o.tolerance_grad;
        ls_evals = 1;
      }
    }
    current_evals += ls_evals;
    func_evals_ += ls_evals;
    if (n_iter == o.max_iter || current_evals >= max_eval || opt_cond) break;
    if (abs_max(mul(d, t)) <= o.tolerance_change) break;
    if (std::abs(loss - prev_loss_) < o.tolerance_change) break;
  }
  d_ = d;
  t_ = t;
  return orig_loss;
}

std::map<std::string, double> LBFGS::group_hparams(size_t group) const {
  const LBFGSOptions& o = opts_.at(group);
  return {{"lr", o.lr},
          {"max_iter", double(o.max_iter)},
          {"max_eval", o.max_eval ? double(*o.max_eval) : -1.0},
          {"tolerance_grad", o.tolerance_grad},
          {"tolerance_change", o.tolerance_change},
          {"history_size", double(o.history_size)},
          {"strong_wolfe", o.strong_wolfe ? 1.0 : 0.0}};
}

void LBFGS::set_group_hparams(size_t group, const std::map<std::string, double>& h) {
  LBFGSOptions o = opts_.at(group);
  double max_iter = 0, max_eval = 0, history = 0, wolfe = 0;
  assign_hparams(group, h, {{"lr", &o.lr}, {"max_iter", &max_iter}, {"max_eval", &max_eval},
                            {"tolerance_grad", &o.tolerance_grad}, {"tolerance_change", &o.tolerance_change},
                            {"history_size", &history}, {"strong_wolfe", &wolfe}});
  o.max_iter = int64_t(max_iter);
  o.max_eval = max_eval < 0 ? std::nullopt : std::optional<int64_t>(int64_t(max_eval));
  o.history_size = int64_t(history);
  o.strong_wolfe = wolfe != 0;
  opts_.at(group) = o;
}

StateDict LBFGS::state_dict() const {
  StateDict sd = Optimizer::state_dict();
  NoGradGuard ng;
  const TensorOptions f64{.dtype = DType::float64};
  sd["lbfgs.func_evals"] = scalar_tensor(double(func_evals_), {.dtype = DType::int64});
  sd["lbfgs.n_iter"] = scalar_tensor(double(n_iter_), {.dtype = DType::int64});
  sd["lbfgs.H_diag"] = scalar_tensor(h_diag_, f64);
  sd["lbfgs.prev_loss"] = scalar_tensor(prev_loss_, f64);
  if (has_t_) sd["lbfgs.t"] = scalar_tensor(t_, f64);
  if (d_.defined()) sd["lbfgs.d"] = d_.clone();
  if (prev_flat_grad_.defined()) sd["lbfgs.prev_flat_grad"] = prev_flat_grad_.clone();
  for (size_t k = 0; k < old_dirs_.size(); ++k) {
    sd["lbfgs.old_dirs." + std::to_string(k)] = old_dirs_[k].clone();
    sd["lbfgs.old_stps." + std::to_string(k)] = old_stps_[k].clone();
    sd["lbfgs.ro." + std::to_string(k)] = scalar_tensor(ro_[k], f64);
  }
  return sd;
}

void LBFGS::load_state_dict(const StateDict& sd) {
  StateDict base;
  std::map<std::string, Tensor> mine;
  for (const auto& [k, v] : sd) {
    if (k.rfind("lbfgs.", 0) == 0) mine[k.substr(6)] = v;
    else base[k] = v;
  }
  int64_t n = 0;
  for (const Tensor& p : groups_[0]) n += p.numel();
  const Tensor& p0 = groups_[0].front();
  auto flat = [&](const std::string& k) {
    const Tensor& t = mine.at(k);
    KILN_CHECK(t.defined() && t.dim() == 1 && t.numel() == n, "LBFGS.load_state_dict: 'lbfgs.", k, "' must be a vector "
               "of the ", n, " parameter entries, got ", t.defined() ? describe(t) : "undefined");
    return t.to(p0.dtype()).to(p0.device()).clone();
  };
  auto number = [&](const std::string& k) {
    KILN_CHECK(mine.count(k) && mine.at(k).numel() == 1, "LBFGS.load_state_dict: missing or bad 'lbfgs.", k, "'");
    return mine.at(k).item();
  };
  // read everything first, so a bad state changes nothing
  const int64_t func_evals = int64_t(number("func_evals")), n_iter = int64_t(number("n_iter"));
  const double h_diag = number("H_diag"), prev_loss = number("prev_loss");
  const bool has_t = mine.count("t") > 0;
  const double t = has_t ? number("t") : 0.0;
  const Tensor d = mine.count("d") ? flat("d") : Tensor();
  const Tensor prev = mine.count("prev_flat_grad") ? flat("prev_flat_grad") : Tensor();
  std::vector<Tensor> dirs, stps;
  std::vector<double> ro;
  for (size_t k = 0; mine.count("old_dirs." + std::to_string(k)); ++k) {
    dirs.push_back(flat("old_dirs." + std::to_string(k)));
    stps.push_back(flat("old_stps." + std::to_string(k)));
    ro.push_back(number("ro." + std::to_string(k)));
  }
  const size_t known = 4 + (has_t ? 1 : 0) + (d.defined() ? 1 : 0) + (prev.defined() ? 1 : 0) + 3 * dirs.size();
  KILN_CHECK(mine.size() == known, "LBFGS.load_state_dict: unexpected lbfgs.* keys (", mine.size(), " given, ", known,
             " understood)");
  Optimizer::load_state_dict(base);
  func_evals_ = func_evals;
  n_iter_ = n_iter;
  h_diag_ = h_diag;
  prev_loss_ = prev_loss;
  has_t_ = has_t;
  t_ = t;
  d_ = d;
  prev_flat_grad_ = prev;
  old_dirs_ = dirs;
  old_stps_ = stps;
  ro_ = ro;
}

}  // namespace kiln::optim
