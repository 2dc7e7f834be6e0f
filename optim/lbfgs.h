// L-BFGS (torch.optim.LBFGS): a quasi-Newton method that keeps the last history_size steps
// and gradient changes to approximate the inverse Hessian, with an optional strong-Wolfe
// line search. Each step() evaluates the closure (loss and gradients) up to max_eval times.
#pragma once
#include <functional>
#include <optional>
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct LBFGSOptions {
  double lr = 1.0;
  int64_t max_iter = 20;             ///< iterations per step()
  std::optional<int64_t> max_eval{};  ///< closure calls per step(); max_iter * 5 / 4 when unset
  double tolerance_grad = 1e-7;      ///< stop when max |g| <= this
  double tolerance_change = 1e-9;    ///< stop when the step or the loss changes less
  int64_t history_size = 100;
  bool strong_wolfe = false;         ///< PyTorch's line_search_fn="strong_wolfe"; else a fixed step lr
};

/// torch.optim.LBFGS, PyTorch's algorithm step by step (two-loop recursion, H_diag =
/// y.s / y.y, the first step's length min(1, 1 / |g|_1) lr, its cubic-interpolation
/// strong-Wolfe search with c1 = 1e-4, c2 = 0.9, at most 25 evaluations). One parameter
/// group; all parameters on one device with one floating dtype. Use step(closure):
///   optim::LBFGS opt(model.parameters(), {.strong_wolfe = true});
///   opt.step([&] { opt.zero_grad(); Tensor loss = f(model); loss.backward(); return loss; });
/// The closure runs with grad mode on; step(closure) returns its first loss. Scalars of the
/// recursion are float64 (PyTorch keeps them as 0-dim tensors of the parameters' dtype, so
/// float32 runs differ in rounding). state_dict() keeps the history (lbfgs.* keys).
class LBFGS : public OptimizerWith<LBFGSOptions> {
 public:
  using Options = LBFGSOptions;
  using Closure = std::function<Tensor()>;
  LBFGS(const std::vector<Tensor>& params, LBFGSOptions options = {});
  /// step() alone is an error: L-BFGS re-evaluates the function.
  void step() override;
  Tensor step(const Closure& closure);
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& sd) override;
  void add_param_group(const ParamGroup& group) override;

 protected:
  void update(size_t group, Tensor p, const Tensor& g, ParamState& st) override;
  std::map<std::string, double> group_hparams(size_t group) const override;
  void set_group_hparams(size_t group, const std::map<std::string, double>& h) override;
  std::vector<std::string> buffer_names() const override { return {}; }
  void check_options(size_t group) const override;

 private:
  Tensor flat_grad() const;
  void add_to_params(double step, const Tensor& direction);
  std::vector<Tensor> clone_params() const;
  void set_params(const std::vector<Tensor>& values);
  /// f and the flat gradient at x + t d (the parameters are put back to x afterwards).
  std::pair<double, Tensor> directional_evaluate(const Closure& closure, const std::vector<Tensor>& x, double t,
                                                 const Tensor& d);
  struct LineSearch {
    double f;
    Tensor g;
    double t;
    int64_t evals;
  };
  LineSearch strong_wolfe(const Closure& closure, const std::vector<Tensor>& x, double t, const Tensor& d, double f,
                          const Tensor& g, double gtd);

  // the history (PyTorch's state of the first parameter)
  int64_t func_evals_ = 0, n_iter_ = 0;
  Tensor d_, prev_flat_grad_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  bool has_t_ = false;
  std::vector<Tensor> old_dirs_, old_stps_;
  std::vector<double> ro_;
};

}  // namespace kiln::optim
