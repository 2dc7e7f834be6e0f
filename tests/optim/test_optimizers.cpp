// Optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD, Adafactor) against
// plain-loop references of PyTorch's formulas and values PyTorch printed, parameter groups, skipped parameters, zero_grad, the generic (tensor-op) path,
// state_dict resume (bitwise) and argument errors.
#include <doctest/doctest.h>
#include <cmath>
#include <functional>
#include <string>
#include <vector>
#include "gradcheck.h"

using namespace kiln;
namespace optim = kiln::optim;
using Vec = std::vector<double>;

namespace {

/// A leaf parameter with the given values.
Tensor param(const Vec& v, DType dt = DType::float32) {
  Tensor p = from_vector(v, {int64_t(v.size())}).to(dt).detach();
  p.requires_grad_();
  return p;
}
void set_grad(const Tensor& p, const Vec& g) { p.set_grad(from_vector(g, {int64_t(g.size())}).to(p.dtype())); }

/// Three steps of gradients for a 4-element parameter.
const Vec kP0 = {0.5, -1.25, 2.0, 0.1};
const std::vector<Vec> kGrads = {{0.3, -0.2, 1.5, -0.05}, {-0.1, 0.4, 0.9, 0.02}, {0.25, -0.6, -1.2, 0.0}};

void check_close(const Tensor& p, const Vec& ref, double rtol, const char* what) {
  auto v = p.to_vector<double>();
  REQUIRE(v.size() == ref.size());
  for (size_t i = 0; i < v.size(); ++i) {
    INFO(what << " element " << i << ": got " << v[i] << " expected " << ref[i]);
    CHECK(std::fabs(v[i] - ref[i]) <= rtol * std::fabs(ref[i]) + rtol * 1e-3);
  }
}

// ---- plain-loop references (PyTorch's single-tensor formulas, in double) ----
struct SgdRef {
  double lr, momentum = 0, dampening = 0, wd = 0;
  bool nesterov = false;
  Vec run(Vec p, const std::vector<Vec>& grads) const {
    Vec buf(p.size(), 0.0);
    for (size_t t = 0; t < grads.size(); ++t)
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grads[t][i];
        if (wd != 0) g += wd * p[i];
        if (momentum != 0) {
          buf[i] = t == 0 ? g : momentum * buf[i] + (1 - dampening) * g;
          g = nesterov ? g + momentum * buf[i] : buf[i];
        }
        p[i] -= lr * g;
      }
    return p;
  }
};
struct AdamRef {
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0;
  bool decoupled = false, amsgrad = false;
  Vec run(Vec p, const std::vector<Vec>& grads) const {
    Vec m(p.size(), 0.0), v(p.size(), 0.0), vmax(p.size(), 0.0);
    for (size_t t = 0; t < grads.size(); ++t) {
      const double step = double(t + 1);
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grads[t][i];
        if (decoupled) p[i] *= 1 - lr * wd;
        else g += wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        double vh = v[i];
        if (amsgrad) vh = vmax[i] = std::max(vmax[i], v[i]);
        const double mhat = m[i] / (1 - std::pow(b1, step));
        const double vhat = vh / (1 - std::pow(b2, step));
        p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
    }
    return p;
  }
};
struct RmspropRef {
  double lr, alpha = 0.99, eps = 1e-8, wd = 0, momentum = 0;
  bool centered = false;
  Vec run(Vec p, const std::vector<Vec>& grads) const {
    Vec sq(p.size(), 0.0), ga(p.size(), 0.0), buf(p.size(), 0.0);
    for (const auto& gs : grads)
      for (size_t i = 0; i < p.size(); ++i) {
        double g = gs[i] + wd * p[i];
        sq[i] = alpha * sq[i] + (1 - alpha) * g * g;
        double avg;
        if (centered) {
          ga[i] = alpha * ga[i] + (1 - alpha) * g;
          avg = std::sqrt(sq[i] - ga[i] * ga[i]) + eps;
        } else {
          avg = std::sqrt(sq[i]) + eps;
        }
        if (momentum > 0) {
          buf[i] = momentum * buf[i] + g / avg;
          p[i] -= lr * buf[i];
        } else {
          p[i] -= lr * g / avg;
        }
      }
    return p;
  }
};

// Twelve steps of exactly representable gradients, long enough for RAdam's rectified
// branch (rho_t > 5 from step 6 with beta2 = 0.9).
std::vector<Vec> long_grads() {
  std::vector<Vec> g(12, Vec(4));
  for (int t = 0; t < 12; ++t)
    for (int i = 0; i < 4; ++i) g[size_t(t)][size_t(i)] = double((t * 7 + i * 3) % 11 - 5) / 4.0;
  return g;
}
struct AdagradRef {
  double lr, lr_decay = 0, wd = 0, init = 0, eps = 1e-10;
  Vec run(Vec p, const std::vector<Vec>& grads) const {
    Vec sum(p.size(), init);
    for (size_t t = 0; t < grads.size(); ++t)
      for (size_t i = 0; i < p.size(); ++i) {
        const double g = grads[t][i] + wd * p[i];
        sum[i] += g * g;
        p[i] -= lr / (1 + double(t) * lr_decay) * g / (std::sqrt(sum[i]) + eps);
      }
    return p;
  }
};
struct AdadeltaRef {
  double lr = 1, rho = 0.9, eps = 1e-6, wd = 0;
  Vec run(Vec p, const std::vector<Vec>& grads) const {
    Vec sq(p.size(), 0.0), acc(p.size(), 0.0);
    for (const Vec& gs : grads)
      for (size_t i = 0; i < p.size(); ++i) {
        const double g = gs[i] + wd * p[i];
        sq[i] = rho * sq[i] + (1 - rho) * g * g;
        const double delta = std::sqrt(acc[i] + eps) / std::sqrt(sq[i] + eps) * g;
        acc[i] = rho * acc[i] + (1 - rho) * delta * delta;
        p[i] -= lr * delta;
      }
    return p;
  }
};
struct AdamaxRef {
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0;
  Vec run(Vec p, const std::vector<Vec>& grads) const {
    Vec m(p.size(), 0.0), u(p.size(), 0.0);
    for (size_t t = 0; t < grads.size(); ++t)
      for (size_t i = 0; i < p.size(); ++i) {
        const double g = grads[t][i] + wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        u[i] = std::max(b2 * u[i], std::fabs(g) + eps);
        p[i] -= lr / (1 - std::pow(b1, double(t + 1))) * m[i] / u[i];
      }
    return p;
  }
};
// NAdam and RAdam from their papers' notation (Dozat 2016; Liu et al. 2019) as PyTorch
// documents them.
struct NAdamRef {
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0, psi = 4e-3;
  bool decoupled = false;
  Vec run(Vec p, const std::vector<Vec>& grads) const {
    Vec m(p.size(), 0.0), v(p.size(), 0.0);
    double prod = 1;
    for (size_t s = 0; s < grads.size(); ++s) {
      const double t = double(s + 1);
      const double mu = b1 * (1 - 0.5 * std::pow(0.96, t * psi)), mu1 = b1 * (1 - 0.5 * std::pow(0.96, (t + 1) * psi));
      prod *= mu;
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grads[s][i];
        if (decoupled) p[i] *= 1 - lr * wd;
        else g += wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mhat = mu1 * m[i] / (1 - prod * mu1) + (1 - mu) * g / (1 - prod);
        p[i] -= lr * mhat / (std::sqrt(v[i] / (1 - std::pow(b2, t))) + eps);
      }
    }
    return p;
  }
};
struct RAdamRef {
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0;
  bool decoupled = false;
  Vec run(Vec p, const std::vector<Vec>& grads) const {
    Vec m(p.size(), 0.0), v(p.size(), 0.0);
    const double rho_inf = 2 / (1 - b2) - 1;
    for (size_t s = 0; s < grads.size(); ++s) {
      const double t = double(s + 1);
      const double rho = rho_inf - 2 * t * std::pow(b2, t) / (1 - std::pow(b2, t));
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grads[s][i];
        if (decoupled) p[i] *= 1 - lr * wd;
        else g += wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mhat = m[i] / (1 - std::pow(b1, t));
        if (rho > 5) {
          const double l = std::sqrt(1 - std::pow(b2, t)) / (std::sqrt(v[i]) + eps);
          const double r = std::sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho));
          p[i] -= lr * mhat * l * r;
        } else {
          p[i] -= lr * mhat;
        }
      }
    }
    return p;
  }
};

/// Runs `opt` over the three kGrads steps on parameter p.
void run_steps(optim::Optimizer& opt, const Tensor& p) {
  for (const auto& g : kGrads) {
    set_grad(p, g);
    opt.step();
  }
}

}  // namespace

TEST_CASE("SGD matches the reference formula (plain, momentum, dampening, nesterov, weight decay)") {
  struct Case { const char* name; optim::SGDOptions o; };
  const Case cases[] = {
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.1, .momentum = 0.9}},
      {"dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
      {"nesterov", {.lr = 0.1, .momentum = 0.9, .nesterov = true}},
      {"weight decay", {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.01}},
      {"nesterov + wd", {.lr = 0.2, .momentum = 0.7, .weight_decay = 0.1, .nesterov = true}},
  };
  for (DType dt : {DType::float64, DType::float32}) {
    for (const auto& c : cases) {
      CAPTURE(c.name);
      Tensor p = param(kP0, dt);
      optim::SGD opt({p}, c.o);
      run_steps(opt, p);
      SgdRef ref{.lr = c.o.lr, .momentum = c.o.momentum, .dampening = c.o.dampening, .wd = c.o.weight_decay,
                 .nesterov = c.o.nesterov};
      check_close(p, ref.run(kP0, kGrads), dt == DType::float64 ? 1e-12 : 1e-6, c.name);
      CHECK(opt.step_count() == 3);
    }
  }
}

TEST_CASE("SGD: hand-computed values for two momentum steps") {
  // p = 1, g1 = 2, g2 = 1, lr 0.1, momentum 0.9:
  // buf1 = 2, p1 = 1 - 0.2 = 0.8; buf2 = 0.9*2 + 1 = 2.8, p2 = 0.8 - 0.28 = 0.52
  Tensor p = param({1.0}, DType::float64);
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, {2.0});
  opt.step();
  CHECK(p.item() == doctest::Approx(0.8).epsilon(1e-14));
  set_grad(p, {1.0});
  opt.step();
  CHECK(p.item() == doctest::Approx(0.52).epsilon(1e-14));
}

TEST_CASE("Adam and AdamW match the reference formula (L2 / decoupled decay, amsgrad)") {
  struct Case { const char* name; AdamRef ref; };
  const Case cases[] = {
      {"adam", {.lr = 0.01}},
      {"adam betas", {.lr = 0.02, .b1 = 0.8, .b2 = 0.95, .eps = 1e-6}},
      {"adam l2", {.lr = 0.01, .wd = 0.1}},
      {"adam amsgrad", {.lr = 0.01, .amsgrad = true}},
      {"adamw", {.lr = 0.01, .wd = 0.01, .decoupled = true}},
      {"adamw strong decay amsgrad", {.lr = 0.05, .wd = 0.5, .decoupled = true, .amsgrad = true}},
  };
  for (DType dt : {DType::float64, DType::float32}) {
    for (const auto& c : cases) {
      CAPTURE(c.name);
      Tensor p = param(kP0, dt);
      const auto& r = c.ref;
      std::unique_ptr<optim::Optimizer> opt;
      if (r.decoupled)
        opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions{
            .lr = r.lr, .betas = {r.b1, r.b2}, .eps = r.eps, .weight_decay = r.wd, .amsgrad = r.amsgrad});
      else
        opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{
            .lr = r.lr, .betas = {r.b1, r.b2}, .eps = r.eps, .weight_decay = r.wd, .amsgrad = r.amsgrad});
      run_steps(*opt, p);
      check_close(p, r.run(kP0, kGrads), dt == DType::float64 ? 1e-12 : 2e-6, c.name);
    }
  }
}

TEST_CASE("Adam: first step moves each element by lr * sign(g) (bias correction)") {
  Tensor p = param({1.0, -2.0, 3.0}, DType::float64);
  optim::Adam opt({p}, {.lr = 0.1, .eps = 0.0});
  set_grad(p, {0.5, -7.0, 1e-3});
  opt.step();
  check_close(p, {0.9, -1.9, 2.9}, 1e-12, "adam step 1");
}

TEST_CASE("AdamW: default weight decay is 0.01 and is decoupled") {
  Tensor p = param({2.0}, DType::float64);
  optim::AdamW opt({p}, {.lr = 0.1});
  CHECK(opt.options().weight_decay == 0.01);
  set_grad(p, {0.0});  // zero gradient: only the decay moves p
  opt.step();
  CHECK(p.item() == doctest::Approx(2.0 * (1 - 0.1 * 0.01)).epsilon(1e-14));
}

TEST_CASE("RMSprop matches the reference formula (plain, centered, momentum, weight decay)") {
  struct Case { const char* name; optim::RMSpropOptions o; };
  const Case cases[] = {
      {"plain", {.lr = 0.01}},
      {"alpha eps", {.lr = 0.02, .alpha = 0.9, .eps = 1e-4}},
      {"centered", {.lr = 0.01, .centered = true}},
      {"momentum", {.lr = 0.01, .momentum = 0.9}},
      {"all", {.lr = 0.01, .alpha = 0.95, .weight_decay = 0.1, .momentum = 0.5, .centered = true}},
  };
  for (DType dt : {DType::float64, DType::float32}) {
    for (const auto& c : cases) {
      CAPTURE(c.name);
      Tensor p = param(kP0, dt);
      optim::RMSprop opt({p}, c.o);
      run_steps(opt, p);
      RmspropRef ref{.lr = c.o.lr, .alpha = c.o.alpha, .eps = c.o.eps, .wd = c.o.weight_decay,
                     .momentum = c.o.momentum, .centered = c.o.centered};
      check_close(p, ref.run(kP0, kGrads), dt == DType::float64 ? 1e-12 : 2e-6, c.name);
    }
  }
}

TEST_CASE("Adagrad, Adadelta, Adamax, NAdam and RAdam match the reference formulas") {
  const std::vector<Vec> grads = long_grads();
  for (DType dt : {DType::float64, DType::float32}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == DType::float64 ? 1e-12 : 3e-6;
    auto check = [&](const char* name, auto make, const Vec& ref) {
      Tensor p = param(kP0, dt);
      auto opt = make(p);
      for (const Vec& g : grads) {
        set_grad(p, g);
        opt.step();
      }
      check_close(p, ref, tol, name);
    };
    check("adagrad", [](Tensor p) { return optim::Adagrad({p}, {.lr = 0.1}); }, AdagradRef{.lr = 0.1}.run(kP0, grads));
    check("adagrad all", [](Tensor p) {
      return optim::Adagrad({p}, {.lr = 0.1, .lr_decay = 0.05, .weight_decay = 0.1, .initial_accumulator_value = 0.2,
                                  .eps = 1e-6});
    }, AdagradRef{.lr = 0.1, .lr_decay = 0.05, .wd = 0.1, .init = 0.2, .eps = 1e-6}.run(kP0, grads));
    check("adadelta", [](Tensor p) { return optim::Adadelta({p}); }, AdadeltaRef{}.run(kP0, grads));
    check("adadelta all", [](Tensor p) {
      return optim::Adadelta({p}, {.lr = 0.5, .rho = 0.8, .eps = 1e-5, .weight_decay = 0.1});
    }, AdadeltaRef{.lr = 0.5, .rho = 0.8, .eps = 1e-5, .wd = 0.1}.run(kP0, grads));
    check("adamax", [](Tensor p) { return optim::Adamax({p}, {.lr = 0.05, .betas = {0.8, 0.95}, .weight_decay = 0.1}); },
          AdamaxRef{.lr = 0.05, .b1 = 0.8, .b2 = 0.95, .wd = 0.1}.run(kP0, grads));
    check("nadam", [](Tensor p) {
      return optim::NAdam({p}, {.lr = 0.05, .betas = {0.8, 0.95}, .weight_decay = 0.1, .momentum_decay = 0.05});
    }, NAdamRef{.lr = 0.05, .b1 = 0.8, .b2 = 0.95, .wd = 0.1, .psi = 0.05}.run(kP0, grads));
    check("nadamw", [](Tensor p) {
      return optim::NAdam({p}, {.lr = 0.05, .weight_decay = 0.1, .decoupled_weight_decay = true});
    }, NAdamRef{.lr = 0.05, .wd = 0.1, .decoupled = true}.run(kP0, grads));
    check("radam", [](Tensor p) { return optim::RAdam({p}, {.lr = 0.05, .betas = {0.9, 0.9}, .weight_decay = 0.1}); },
          RAdamRef{.lr = 0.05, .b2 = 0.9, .wd = 0.1}.run(kP0, grads));
    check("radamw", [](Tensor p) {
      return optim::RAdam({p}, {.lr = 0.05, .betas = {0.9, 0.9}, .weight_decay = 0.1, .decoupled_weight_decay = true});
    }, RAdamRef{.lr = 0.05, .b2 = 0.9, .wd = 0.1, .decoupled = true}.run(kP0, grads));
  }
}

// Printed by torch.optim (PyTorch 2.15, float64, the same twelve gradients and options).
TEST_CASE("Adagrad, Adadelta, Adamax, NAdam and RAdam give PyTorch's parameters") {
  const std::vector<Vec> grads = long_grads();
  auto run = [&](const char* name, auto make, const Vec& torch_values) {
    Tensor p = param(kP0, DType::float64);
    auto opt = make(p);
    for (const Vec& g : grads) {
      set_grad(p, g);
      opt.step();
    }
    check_close(p, torch_values, 1e-15, name);
    return opt.state_dict();
  };
  run("Adagrad", [](Tensor p) {
    return optim::Adagrad({p}, {.lr = 0.1, .lr_decay = 0.05, .weight_decay = 0.1, .initial_accumulator_value = 0.2});
  }, {0.540383895234498, -1.1720113248886457, 1.8874804050524991, 0.04178912547800928});
  run("Adadelta", [](Tensor p) { return optim::Adadelta({p}, {.lr = 0.5, .rho = 0.8, .weight_decay = 0.1}); },
      {0.5007453062529991, -1.2470484157571387, 1.9960758235641305, 0.09862107259740556});
  run("Adamax", [](Tensor p) { return optim::Adamax({p}, {.lr = 0.05, .betas = {0.8, 0.95}, .weight_decay = 0.1}); },
      {0.5336580463225671, -1.1863359978787307, 1.8852139196348512, 0.02891669585696996});
  const optim::StateDict sd = run("NAdam", [](Tensor p) {
    return optim::NAdam({p}, {.lr = 0.05, .betas = {0.8, 0.95}, .weight_decay = 0.1, .momentum_decay = 0.05});
  }, {0.5334614397221482, -1.1303894308681957, 1.855758001131382, 0.04183706734558523});
  CHECK(sd.at("state.0.mu_product").item() == doctest::Approx(1.9620407376410873e-05).epsilon(1e-15));
  CHECK(sd.at("state.0.mu_product").dtype() == DType::float64);
  run("NAdamW", [](Tensor p) { return optim::NAdam({p}, {.lr = 0.05, .weight_decay = 0.1, .decoupled_weight_decay = true}); },
      {0.5295594454053314, -1.1334208519998312, 1.8561632200912428, 0.04313167187618336});
  run("RAdam", [](Tensor p) { return optim::RAdam({p}, {.lr = 0.05, .betas = {0.9, 0.9}, .weight_decay = 0.1}); },
      {0.5642310697199033, -1.2226152866785036, 1.9143834264536161, 0.01597522418221929});
  run("RAdamW", [](Tensor p) {
    return optim::RAdam({p}, {.lr = 0.05, .betas = {0.9, 0.9}, .weight_decay = 0.1, .decoupled_weight_decay = true});
  }, {0.554447176894923, -1.2027857108228641, 1.8849456469392063, 0.016254446124422228});
}

// Adafactor: PyTorch 2.15's values (float64; torch.optim.Adafactor on the same start and the
// same eight gradients, one of them tiny so the eps2 floor and RMS clipping both act), its
// factored state's shapes, and errors.
TEST_CASE("Adafactor: PyTorch's parameters and factored state; errors") {
  auto grads = [](int s, int64_t n, double off) {
    Vec g;
    for (int64_t i = 0; i < n; ++i) g.push_back(std::sin(1.3 * s + 0.7 * double(i) + off) * (s == 3 ? 1e-3 : 1.0));
    return g;
  };
  auto run = [&](optim::AdafactorOptions o, const Vec& want_w, const Vec& want_v) {
    Tensor W = from_vector<double>({0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, {2, 3}).requires_grad_(true);
    Tensor v = param({0.3, -0.2}, DType::float64);
    optim::Adafactor opt({W, v}, o);
    for (int s = 0; s < 8; ++s) {
      W.set_grad(from_vector<double>(grads(s, 6, 0.0), {2, 3}));
      set_grad(v, grads(s, 2, 1.0));
      opt.step();
    }
    check_close(W.reshape({6}), want_w, 2e-16, "Adafactor W");
    check_close(v, want_v, 2e-16, "Adafactor v");
    return opt.state_dict();
  };
  const optim::StateDict sd = run({}, {0.46730272828442754, -1.0363536190350229, 1.9818289410634449,
                                       0.2502778735240809, 1.5237384813028694, -0.7143988550641339},
                                  {0.2941412509668051, -0.2016522579787562});
  CHECK(sd.at("state.0.row_var").shape() == Shape{2, 1});  // m + n numbers for an (m, n) weight
  CHECK(sd.at("state.0.col_var").shape() == Shape{1, 3});
  CHECK(sd.at("state.1.variance").shape() == Shape{2});
  check_close(sd.at("state.0.row_var").reshape({2}), {0.3971368715076028, 0.45449493855229267}, 1e-15, "row_var");
  check_close(sd.at("state.0.col_var").reshape({3}), {0.472741617209655, 0.40597775238216177, 0.3987283454980263},
              1e-15, "col_var");
  CHECK(std::isnan(sd.at("param_groups.0.eps1").item()));  // none: the dtype's epsilon
  run({.lr = 0.05, .eps1 = 1e-20, .eps2 = 1e-2, .d = 1.5, .weight_decay = 0.1},
      {0.31790926548614024, -1.1480957210492817, 1.8183500901186906, 0.23367449830294293, 1.5556545844990615,
       -0.5399304968266544},
      {0.2561799159330889, -0.20263200753417426});
  // a state whose factored buffer has the wrong shape is refused
  Tensor W = from_vector<double>({0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, {2, 3}).requires_grad_(true);
  optim::Adafactor opt({W});
  optim::StateDict bad;
  for (const auto& kv : sd)
    if (kv.first.rfind("state.1.", 0) != 0) bad[kv.first] = kv.second;
  bad["param_groups.0.params"] = from_vector<double>({0}, {1});
  bad["state.0.row_var"] = zeros({2, 3}, {.dtype = DType::float64});
  CHECK_THROWS_WITH_AS(opt.load_state_dict(bad), doctest::Contains("expected shape [2, 1]"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Adafactor({W}, {.beta2_decay = 0.5}), doctest::Contains("beta2_decay"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Adafactor({W}, {.d = 0.5}), doctest::Contains("clipping threshold"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Adafactor({W}, {.eps1 = -1.0}), doctest::Contains("eps1"), kiln::Error);
}

// Rprop and ASGD: plain loops of PyTorch's documented algorithms, and PyTorch 2.15's values
// (float64; Rprop bit for bit; ASGD within an ulp or two: PyTorch's add(alpha) fuses).
TEST_CASE("Rprop and ASGD: reference loops, PyTorch's parameters, state, errors") {
  const std::vector<Vec> grads = long_grads();
  auto rprop_ref = [&](double lr, double em, double ep, double lo, double hi) {
    Vec p = kP0, prev(4, 0.0), step(4, lr);
    for (const Vec& g : grads)
      for (size_t i = 0; i < 4; ++i) {
        const double s = g[i] * prev[i];
        step[i] = std::clamp(step[i] * (s > 0 ? ep : s < 0 ? em : 1.0), lo, hi);
        const double d = s < 0 ? 0.0 : g[i];
        p[i] -= (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0) * step[i];
        prev[i] = d;
      }
    return p;
  };
  auto asgd_ref = [&](double lr, double lambd, double alpha, double t0, double wd) {
    Vec p = kP0, ax(4, 0.0);
    double eta = lr, mu = 1;
    for (size_t t = 0; t < grads.size(); ++t) {
      for (size_t i = 0; i < 4; ++i) {
        const double d = grads[t][i] + wd * p[i];  // L2 on the parameter before the decay
        p[i] *= 1 - lambd * eta;
        p[i] -= eta * d;
        ax[i] = mu != 1 ? ax[i] + (p[i] - ax[i]) * mu : p[i];
      }
      eta = lr / std::pow(1 + lambd * lr * double(t + 1), alpha);
      mu = 1 / std::max(1.0, double(t + 1) - t0);
    }
    return std::make_pair(p, ax);
  };
  for (DType dt : {DType::float64, DType::float32}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == DType::float64 ? 1e-12 : 3e-6;
    Tensor p = param(kP0, dt), q = param(kP0, dt);
    optim::Rprop rp({p}, {.lr = 0.05, .etas = {0.4, 1.3}, .step_sizes = {1e-3, 0.3}});
    optim::ASGD as({q}, {.lr = 0.05, .lambd = 0.01, .alpha = 0.6, .t0 = 4, .weight_decay = 0.1});
    for (const Vec& g : grads) {
      set_grad(p, g);
      set_grad(q, g);
      rp.step();
      as.step();
    }
    check_close(p, rprop_ref(0.05, 0.4, 1.3, 1e-3, 0.3), tol, "rprop");
    const auto [ap, aax] = asgd_ref(0.05, 0.01, 0.6, 4, 0.1);
    check_close(q, ap, tol, "asgd");
    check_close(as.state_dict().at("state.0.ax"), aax, tol, "asgd ax");
    if (dt != DType::float64) continue;
    // PyTorch 2.15 (torch.optim, float64, the same gradients and options)
    check_close(p, {0.564944, -1.2109759999999998, 1.9708959999999998, 0.15057600000000002}, 1e-15, "torch rprop");
    check_close(q, {0.5296494564137809, -1.1437769495433732, 1.8589590475694613, 0.044453826608552856}, 1e-15,
                "torch asgd");
    const optim::StateDict sd = as.state_dict();
    CHECK(sd.at("state.0.eta").item() == doctest::Approx(0.04982085953132795).epsilon(1e-15));
    CHECK(sd.at("state.0.mu").item() == 0.125);
    CHECK(rp.state_dict().at("state.0.step_size").to_vector<double>()[0] == doctest::Approx(0.001664));
    CHECK(rp.state_dict().at("param_groups.0.etaplus").item() == 1.3);
  }
  Tensor p = param(kP0);
  CHECK_THROWS_WITH_AS(optim::Rprop({p}, {.etas = {1.2, 0.5}}), doctest::Contains("etaminus"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Rprop({p}, {.step_sizes = {1.0, 0.1}}), doctest::Contains("step_sizes"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Rprop(std::vector<optim::ParamGroup>{{.params = {p}, .weight_decay = 0.1}}),
                       doctest::Contains("weight_decay"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::ASGD({p}, {.lr = -1.0}), doctest::Contains("learning rate"), kiln::Error);
}

TEST_CASE("parameter groups: per-group lr and weight decay overrides") {
  Tensor a = param(kP0, DType::float64), b = param(kP0, DType::float64);
  optim::SGD opt({{.params = {a}}, {.params = {b}, .lr = 0.5, .weight_decay = 0.2}}, {.lr = 0.1, .momentum = 0.9});
  REQUIRE(opt.num_groups() == 2);
  CHECK(opt.lr(0) == 0.1);
  CHECK(opt.lr(1) == 0.5);
  CHECK(opt.options(1).momentum == 0.9);
  for (const auto& g : kGrads) {
    set_grad(a, g);
    set_grad(b, g);
    opt.step();
  }
  check_close(a, SgdRef{.lr = 0.1, .momentum = 0.9}.run(kP0, kGrads), 1e-12, "group 0");
  check_close(b, SgdRef{.lr = 0.5, .momentum = 0.9, .wd = 0.2}.run(kP0, kGrads), 1e-12, "group 1");

  // Adam with groups; set_lr on one group and on all
  Tensor c = param(kP0, DType::float64), d = param(kP0, DType::float64);
  optim::Adam adam({{.params = {c}, .lr = 0.05}, {.params = {d}}}, {.lr = 0.01});
  CHECK(adam.lr(0) == 0.05);
  CHECK(adam.lr(1) == 0.01);
  run_steps(adam, c);  // d has no grad: untouched
  check_close(c, AdamRef{.lr = 0.05}.run(kP0, kGrads), 1e-12, "adam group 0");
  check_close(d, kP0, 0.0, "adam group 1 (no grad)");
  adam.set_lr(1, 0.3);
  CHECK(adam.lr(1) == 0.3);
  adam.set_lr(0.7);
  CHECK(adam.lr(0) == 0.7);
  CHECK(adam.lr(1) == 0.7);
  CHECK(adam.all_params().size() == 2);
}

TEST_CASE("parameter groups: any option overridden by name (PyTorch's param group dicts)") {
  // SGD: the head without momentum, with dampening; the rest with the defaults
  Tensor a = param(kP0, DType::float64), b = param(kP0, DType::float64), c = param(kP0, DType::float64);
  optim::SGD sgd({{.params = {a}},
                  {.params = {b}, .options = {{"momentum", 0.0}}},
                  {.params = {c}, .lr = 0.3, .options = {{"dampening", 0.25}, {"weight_decay", 0.1}}}},
                 {.lr = 0.1, .momentum = 0.9});
  CHECK(sgd.options(1).momentum == 0.0);
  CHECK(sgd.options(2).dampening == 0.25);
  CHECK(sgd.options(2).momentum == 0.9);
  for (const auto& g : kGrads) {
    set_grad(a, g);
    set_grad(b, g);
    set_grad(c, g);
    sgd.step();
  }
  check_close(a, SgdRef{.lr = 0.1, .momentum = 0.9}.run(kP0, kGrads), 1e-12, "sgd group 0");
  check_close(b, SgdRef{.lr = 0.1}.run(kP0, kGrads), 1e-12, "sgd group 1 (no momentum)");
  check_close(c, SgdRef{.lr = 0.3, .momentum = 0.9, .dampening = 0.25, .wd = 0.1}.run(kP0, kGrads), 1e-12,
              "sgd group 2");
  // the overrides are the group's hyperparameters in state_dict
  CHECK(sgd.state_dict().at("param_groups.1.momentum").item() == 0.0);
  CHECK(sgd.state_dict().at("param_groups.2.dampening").item() == 0.25);
  // Adam: betas and eps per group; RMSprop: alpha; AdamW through add_param_group
  Tensor d = param(kP0, DType::float64), e = param(kP0, DType::float64);
  optim::Adam adam({{.params = {d}}, {.params = {e}, .options = {{"beta1", 0.8}, {"beta2", 0.95}, {"eps", 1e-6}}}},
                   {.lr = 0.01});
  for (const auto& g : kGrads) {
    set_grad(d, g);
    set_grad(e, g);
    adam.step();
  }
  check_close(d, AdamRef{.lr = 0.01}.run(kP0, kGrads), 1e-12, "adam group 0");
  check_close(e, AdamRef{.lr = 0.01, .b1 = 0.8, .b2 = 0.95, .eps = 1e-6}.run(kP0, kGrads), 1e-12, "adam group 1");
  Tensor f = param(kP0, DType::float64);
  optim::RMSprop rms({{.params = {f}, .options = {{"alpha", 0.9}, {"momentum", 0.5}}}}, {.lr = 0.01});
  run_steps(rms, f);
  check_close(f, RmspropRef{.lr = 0.01, .alpha = 0.9, .momentum = 0.5}.run(kP0, kGrads), 1e-12, "rmsprop");
  Tensor w0 = param(kP0, DType::float64), w1 = param(kP0, DType::float64);
  optim::AdamW adamw({w0}, {.lr = 0.01});
  adamw.add_param_group({.params = {w1}, .options = {{"weight_decay", 0.0}, {"amsgrad", 1.0}}});
  CHECK(adamw.options(1).weight_decay == 0.0);
  CHECK(adamw.options(1).amsgrad);
  CHECK(adamw.options(0).weight_decay == 0.01);
  // errors name the group and the option; add_param_group changes nothing on one
  const std::string unknown = kiln::testing::error_of(
      [&] { optim::SGD({{.params = {param(kP0)}, .options = {{"betas", 0.9}}}}, {.lr = 0.1}); });
  CHECK(unknown.find("group 0") != std::string::npos);
  CHECK(unknown.find("'betas'") != std::string::npos);
  CHECK(unknown.find("momentum") != std::string::npos);  // lists what SGD has
  CHECK(kiln::testing::error_of([&] {
          optim::SGD({{.params = {param(kP0)}, .lr = 0.2, .options = {{"lr", 0.3}}}}, {.lr = 0.1});
        }).find("twice") != std::string::npos);
  CHECK_THROWS_AS(optim::SGD({{.params = {param(kP0)}, .options = {{"momentum", -1.0}}}}, {.lr = 0.1}), Error);
  CHECK_THROWS_AS(adamw.add_param_group({.params = {param(kP0, DType::float64)}, .options = {{"beta3", 0.5}}}),
                  Error);
  CHECK(adamw.num_groups() == 2);
}

TEST_CASE("add_param_group: a group added later steps with its own options; state_dict covers it") {
  Tensor a = param(kP0, DType::float64), b = param(kP0, DType::float64);
  optim::SGD opt({a}, {.lr = 0.1, .momentum = 0.9});
  optim::StepLR sched(opt, {.step_size = 1000, .gamma = 0.5});  // made before: leaves the new group alone
  set_grad(a, kGrads[0]);
  opt.step();
  opt.add_param_group({.params = {b}, .lr = 0.5, .weight_decay = 0.2});  // e.g. a layer unfrozen later
  REQUIRE(opt.num_groups() == 2);
  CHECK(opt.lr(1) == 0.5);
  CHECK(opt.options(1).momentum == 0.9);  // the constructor's defaults
  for (size_t i = 1; i < kGrads.size(); ++i) {
    set_grad(a, kGrads[i]);
    set_grad(b, kGrads[i]);
    opt.step();
    sched.step();
  }
  check_close(a, SgdRef{.lr = 0.1, .momentum = 0.9}.run(kP0, kGrads), 1e-12, "group 0");
  const std::vector<std::vector<double>> later(kGrads.begin() + 1, kGrads.end());
  check_close(b, SgdRef{.lr = 0.5, .momentum = 0.9, .wd = 0.2}.run(kP0, later), 1e-12, "added group");
  CHECK(opt.lr(1) == 0.5);
  // the state of both groups round-trips into an optimizer built with both
  Tensor a2 = param(kP0, DType::float64), b2 = param(kP0, DType::float64);
  optim::SGD opt2({{.params = {a2}}, {.params = {b2}, .lr = 0.5, .weight_decay = 0.2}}, {.lr = 0.1, .momentum = 0.9});
  opt2.load_state_dict(opt.state_dict());
  CHECK(opt2.state_dict().at("state.1.momentum_buffer").to_vector<double>() ==
        opt.state_dict().at("state.1.momentum_buffer").to_vector<double>());
  optim::StepLR sched2(opt, {.step_size = 1000, .gamma = 0.5});
  CHECK_THROWS_AS(sched2.load_state_dict(sched.state_dict()), Error);  // 1 group against 2
  // a parameter already in a group, an invalid override, a non-leaf: refused, nothing changed
  const std::string dup = kiln::testing::error_of([&] { opt.add_param_group({.params = {a}}); });
  CHECK(dup.find("more than once") != std::string::npos);
  CHECK_THROWS_AS(opt.add_param_group({.params = {param(kP0, DType::float64)}, .lr = -1.0}), Error);
  CHECK_THROWS_AS(opt.add_param_group({.params = {mul(a, 2.0)}}), Error);
  CHECK(opt.num_groups() == 2);
  opt.step();
}

TEST_CASE("parameters without a gradient are skipped and get no state") {
  Tensor a = param(kP0, DType::float64), b = param({1.0, 2.0}, DType::float64);
  optim::Adam opt({a, b}, {.lr = 0.01});
  set_grad(a, kGrads[0]);
  opt.step();
  CHECK(b.to_vector<double>() == Vec{1.0, 2.0});
  auto sd = opt.state_dict();
  CHECK(sd.count("state.0.exp_avg") == 1);
  CHECK(sd.count("state.1.exp_avg") == 0);
  CHECK(sd.count("state.1.step") == 0);
  CHECK(sd.at("state.0.step").item() == 1);
  // b's first update later uses its own step count (bias correction of step 1)
  set_grad(a, kGrads[1]);
  set_grad(b, {0.5, -0.5});
  opt.step();
  check_close(b, {0.99, 2.01}, 1e-9, "b after its first step");
  CHECK(opt.state_dict().at("state.1.step").item() == 1);
  CHECK(opt.state_dict().at("state.0.step").item() == 2);
}

TEST_CASE("zero_grad clears gradients (undefined by default, zeros on request)") {
  Tensor a = param(kP0), b = param({1.0});
  optim::SGD opt({a, b}, {.lr = 0.1});
  set_grad(a, kGrads[0]);
  set_grad(b, {3.0});
  opt.zero_grad(false);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().to_vector<double>() == Vec{0, 0, 0, 0});
  opt.zero_grad();
  CHECK(!a.grad().defined());
  CHECK(!b.grad().defined());
  opt.step();  // no grads: nothing moves
  CHECK(b.item() == 1.0);
}

TEST_CASE("gradients accumulated by backward drive the step (requires_grad leaves, NoGradGuard inside)") {
  Tensor w = param({1.0, 2.0, 3.0});
  optim::SGD opt({w}, {.lr = 0.5});
  Tensor loss = sum(mul(w, w));  // d/dw = 2w
  loss.backward();
  opt.step();
  check_close(w, {0.0, 0.0, 0.0}, 1e-7, "w after one step");
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
}

TEST_CASE("generic tensor-op path (non-contiguous and bfloat16 parameters) matches the fused CPU path") {
  // a transposed leaf is not contiguous, so the fused kernel is not chosen
  manual_seed(3);
  Tensor base = randn({3, 4}, {.dtype = DType::float64});
  Tensor gsrc = randn({4, 3}, {.dtype = DType::float64});
  auto run = [&](bool noncontig, int which) {
    Tensor p = noncontig ? base.clone().t().detach() : base.t().contiguous().detach();  // steps write into p
    p.requires_grad_();
    REQUIRE(p.is_contiguous() == !noncontig);
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0) opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{
                        .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    if (which == 1) opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{
                        .lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
    if (which == 2) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions{.lr = 0.01});
    if (which == 3) opt = std::make_unique<optim::RMSprop>(std::vector<Tensor>{p}, optim::RMSpropOptions{
                        .lr = 0.01, .weight_decay = 0.1, .momentum = 0.5, .centered = true});
    for (int s = 0; s < 3; ++s) {
      p.set_grad(mul(gsrc, double(s + 1) * (s % 2 ? -1.0 : 1.0)));
      opt->step();
    }
    return p.contiguous();
  };
  for (int which = 0; which < 4; ++which) {
    CAPTURE(which);
    CHECK(test::max_abs_diff(run(true, which), run(false, which)) < 1e-12);
  }
  // bfloat16 parameters take the generic path too (computed in float32, rounded back)
  Tensor pb = param(kP0, DType::bfloat16), pf = param(kP0, DType::float32);
  optim::SGD ob({pb}, {.lr = 0.1, .momentum = 0.9}), of({pf}, {.lr = 0.1, .momentum = 0.9});
  run_steps(ob, pb);
  run_steps(of, pf);
  CHECK(pb.dtype() == DType::bfloat16);
  CHECK(test::max_abs_diff(pb, pf) < 0.03);
}

TEST_CASE("a float32 parameter with a float64 gradient is updated in its own dtype") {
  Tensor p = param(kP0);
  optim::SGD opt({p}, {.lr = 0.1});
  p.set_grad(from_vector(kGrads[0], {4}));  // float64
  opt.step();
  CHECK(p.dtype() == DType::float32);
  check_close(p, SgdRef{.lr = 0.1}.run(kP0, {kGrads[0]}), 1e-6, "sgd");
}

// ------------------------------------------------------------------ state_dict

namespace {

/// Deterministic gradient for step k from the current parameter values.
void synth_grads(const std::vector<Tensor>& ps, int k) {
  for (size_t j = 0; j < ps.size(); ++j) {
    auto v = ps[j].to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3 * v[i] + std::cos(double(i + 7 * j + 3 * k));
    ps[j].set_grad(from_vector(v, ps[j].shape()).to(ps[j].dtype()));
  }
}

std::vector<Tensor> make_params() {
  manual_seed(11);
  std::vector<Tensor> ps = {randn({5, 3}), randn({3}), randn({2, 2})};
  for (auto& p : ps) p.requires_grad_();
  return ps;
}

std::vector<Tensor> clone_params(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const auto& p : ps) {
    Tensor c = p.detach().clone();
    c.requires_grad_();
    out.push_back(c);
  }
  return out;
}

using Factory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

void check_resume(const Factory& make, int N, int k) {
  // (a) N steps straight
  auto pa = make_params();
  auto oa = make(pa);
  for (int s = 0; s < N; ++s) { synth_grads(pa, s); oa->step(); }
  // (b) k steps, save, fresh optimizer over copies of the params, load, N-k steps
  auto pb = make_params();
  auto ob = make(pb);
  for (int s = 0; s < k; ++s) { synth_grads(pb, s); ob->step(); }
  optim::StateDict sd = ob->state_dict();
  auto pc = clone_params(pb);
  // training (b) further must not change the saved state (it is a copy)
  synth_grads(pb, 99);
  ob->step();
  auto oc = make(pc);
  oc->set_lr(123.0);  // overwritten by the load
  oc->load_state_dict(sd);
  CHECK(oc->step_count() == k);
  CHECK(oc->lr(0) == ob->lr(0));
  for (int s = k; s < N; ++s) { synth_grads(pc, s); oc->step(); }
  for (size_t j = 0; j < pa.size(); ++j) {
    auto va = pa[j].to_vector<float>(), vc = pc[j].to_vector<float>();
    CHECK(va == vc);  // bitwise
  }
  CHECK(oc->step_count() == N);
}

}  // namespace

TEST_CASE("state_dict / load_state_dict resume training bitwise") {
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3,
                                                              .nesterov = true});
  }, 7, 3);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
  }, 7, 4);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    // two groups with different lrs
    return std::make_unique<optim::AdamW>(std::vector<optim::ParamGroup>{{.params = {ps[0]}, .lr = 0.02},
                                                                         {.params = {ps[1], ps[2]}}},
                                          optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.05});
  }, 6, 2);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::RMSprop>(ps, optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true});
  }, 6, 3);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adagrad>(ps, optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.1,
                                                                      .initial_accumulator_value = 0.5});
  }, 6, 3);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adadelta>(ps, optim::AdadeltaOptions{.weight_decay = 0.01});
  }, 6, 3);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adamax>(ps, optim::AdamaxOptions{.lr = 0.01});
  }, 6, 3);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {  // mu_product restored
    return std::make_unique<optim::NAdam>(ps, optim::NAdamOptions{.lr = 0.01, .momentum_decay = 0.1});
  }, 7, 3);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {  // through rho_t > 5
    return std::make_unique<optim::RAdam>(ps, optim::RAdamOptions{.lr = 0.01, .betas = {0.9, 0.9}});
  }, 9, 4);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Rprop>(ps, optim::RpropOptions{.lr = 0.01});
  }, 7, 3);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {  // eta, mu restored; ax from t0
    return std::make_unique<optim::ASGD>(ps, optim::ASGDOptions{.lr = 0.01, .t0 = 2});
  }, 7, 3);
  check_resume([](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {  // factored state restored
    return std::make_unique<optim::Adafactor>(ps, optim::AdafactorOptions{.weight_decay = 0.01});
  }, 7, 3);
}

TEST_CASE("state_dict layout: flat names, 0-dim scalars, hyperparameters restored") {
  auto ps = make_params();
  optim::Adam opt({{.params = {ps[0]}}, {.params = {ps[1], ps[2]}, .lr = 0.5}}, {.lr = 0.01, .betas = {0.8, 0.9}});
  synth_grads(ps, 0);
  opt.step();
  auto sd = opt.state_dict();
  for (const char* k : {"param_groups.0.params", "param_groups.0.lr", "param_groups.0.beta1", "param_groups.0.beta2",
                        "param_groups.0.eps", "param_groups.0.weight_decay", "param_groups.0.amsgrad",
                        "param_groups.1.params", "param_groups.1.lr", "state.0.step", "state.0.exp_avg",
                        "state.0.exp_avg_sq", "state.2.exp_avg", "step_count"}) {
    CAPTURE(k);
    CHECK(sd.count(k) == 1);
  }
  CHECK(sd.at("param_groups.1.lr").dim() == 0);
  CHECK(sd.at("param_groups.1.lr").item() == 0.5);
  CHECK(sd.at("param_groups.0.beta1").item() == 0.8);
  CHECK(sd.at("param_groups.1.params").to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(sd.at("state.0.exp_avg").shape() == Shape{5, 3});
  CHECK(sd.at("state.0.step").dtype() == DType::int64);

  // hyperparameters come back
  auto ps2 = clone_params(ps);
  optim::Adam opt2({{.params = {ps2[0]}}, {.params = {ps2[1], ps2[2]}}}, {.lr = 0.1});
  opt2.load_state_dict(sd);
  CHECK(opt2.lr(1) == 0.5);
  CHECK(opt2.options(0).betas.first == 0.8);
  CHECK(opt2.options(0).betas.second == 0.9);
}

TEST_CASE("load_state_dict rejects mismatched states and changes nothing") {
  auto ps = make_params();
  optim::Adam adam(ps, {.lr = 0.01});
  synth_grads(ps, 0);
  adam.step();
  auto sd = adam.state_dict();

  optim::SGD sgd(clone_params(ps), {.lr = 0.1});
  CHECK_THROWS_WITH_AS(sgd.load_state_dict(sd), doctest::Contains("SGD.load_state_dict"), kiln::Error);
  CHECK(sgd.lr() == 0.1);

  // wrong group layout
  auto ps2 = clone_params(ps);
  optim::Adam two({{.params = {ps2[0]}}, {.params = {ps2[1], ps2[2]}}}, {.lr = 0.3});
  CHECK_THROWS_AS(two.load_state_dict(sd), kiln::Error);
  CHECK(two.lr(0) == 0.3);

  // wrong buffer shape names the shapes
  auto bad = sd;
  bad["state.0.exp_avg"] = zeros({2, 2});
  optim::Adam a3(clone_params(ps), {.lr = 0.01});
  CHECK_THROWS_WITH_AS(a3.load_state_dict(bad), doctest::Contains("[5, 3]"), kiln::Error);

  // unknown key, missing hyperparameter
  bad = sd;
  bad["foo"] = zeros({});
  CHECK_THROWS_AS(a3.load_state_dict(bad), kiln::Error);
  bad = sd;
  bad.erase("param_groups.0.eps");
  CHECK_THROWS_WITH_AS(a3.load_state_dict(bad), doctest::Contains("eps"), kiln::Error);
  bad = sd;
  bad["state.9.exp_avg"] = zeros({5, 3});
  CHECK_THROWS_AS(a3.load_state_dict(bad), kiln::Error);
  // step counts must be whole numbers within 2^53 (a corrupt file: no float-to-int overflow)
  for (const char* key : {"state.0.step", "step_count"})
    for (double v : {1e189, -1e300, 0.5}) {
      bad = sd;
      bad[key] = scalar_tensor(v, {.dtype = DType::float64});
      CHECK_THROWS_WITH_AS(a3.load_state_dict(bad), doctest::Contains(key), kiln::Error);
    }
}

TEST_CASE("optimizer argument errors") {
  Tensor p = param(kP0);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = -1.0}), doctest::Contains("learning rate"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), doctest::Contains("nesterov"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                       doctest::Contains("dampening"), kiln::Error);
  CHECK_THROWS_AS(optim::Adam({p}, {.betas = {1.0, 0.999}}), kiln::Error);
  CHECK_THROWS_AS(optim::Adam({p}, {.betas = {0.9, -0.1}}), kiln::Error);
  CHECK_THROWS_AS(optim::AdamW({p}, {.eps = -1.0}), kiln::Error);
  CHECK_THROWS_AS(optim::RMSprop({p}, {.alpha = -0.5}), kiln::Error);
  CHECK_THROWS_AS(optim::RMSprop({p}, {.momentum = -0.5}), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Adagrad({p}, {.lr_decay = -1.0}), doctest::Contains("lr_decay"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Adagrad({p}, {.initial_accumulator_value = -1.0}),
                       doctest::Contains("initial_accumulator_value"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Adadelta({p}, {.rho = 1.5}), doctest::Contains("rho"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::Adamax({p}, {.betas = {0.9, 1.0}}), doctest::Contains("beta2"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::NAdam({p}, {.momentum_decay = -1.0}), doctest::Contains("momentum_decay"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::RAdam({p}, {.eps = -1.0}), doctest::Contains("eps"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::NAdam({{.params = {p}, .options = {{"momentum", 0.9}}}}, {}),
                       doctest::Contains("momentum_decay"), kiln::Error);  // the known names are listed
  CHECK(!optim::Adagrad({p}).supports_momentum());
  CHECK(optim::RAdam({p}).supports_momentum());
  {  // a scheduler that cycles momentum cycles NAdam's beta1; Adadelta has none to cycle
    optim::NAdam nadam({p}, {.lr = 0.01});
    optim::OneCycleLR one(nadam, {.max_lr = 0.1, .total_steps = 10});
    CHECK(nadam.options().betas.first == 0.95);
    optim::Adadelta adadelta({p});
    CHECK_THROWS_WITH_AS(optim::CyclicLR(adadelta, {}), doctest::Contains("momentum"), kiln::Error);
  }
  CHECK_THROWS_WITH_AS(optim::SGD(std::vector<Tensor>{}, {}), doctest::Contains("empty parameter list"), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::SGD({p, p}, {}), doctest::Contains("more than once"), kiln::Error);
  CHECK_THROWS_AS(optim::SGD({Tensor()}, {}), kiln::Error);
  CHECK_THROWS_WITH_AS(optim::SGD({from_vector(std::vector<int64_t>{1, 2})}, {}), doctest::Contains("int64"),
                       kiln::Error);
  Tensor nonleaf = mul(p, 2.0);
  CHECK_THROWS_WITH_AS(optim::SGD({nonleaf}, {}), doctest::Contains("non-leaf"), kiln::Error);
  // options changed to invalid values are caught at step()
  optim::SGD opt({p}, {.lr = 0.1});
  opt.options().lr = -3;
  set_grad(p, kGrads[0]);
  CHECK_THROWS_AS(opt.step(), kiln::Error);
  // OneCycle-style momentum access
  CHECK(opt.supports_momentum());
}

TEST_CASE("maximize: every optimizer ascends f exactly as it descends -f; option, group override, state_dict") {
  // Each optimizer twice from the same start: maximizing with f's gradient and minimizing
  // with the negated gradient must agree bit for bit, over steps with weight decay.
  using Make = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&, bool)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"SGD", [](auto& p, bool m) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .maximize = m}); }},
      {"Adam", [](auto& p, bool m) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.1, .weight_decay = 0.01, .amsgrad = true, .maximize = m}); }},
      {"AdamW", [](auto& p, bool m) { return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.1, .maximize = m}); }},
      {"RMSprop", [](auto& p, bool m) { return std::make_unique<optim::RMSprop>(p, optim::RMSpropOptions{.lr = 0.1, .momentum = 0.5, .centered = true, .maximize = m}); }},
      {"Adagrad", [](auto& p, bool m) { return std::make_unique<optim::Adagrad>(p, optim::AdagradOptions{.lr = 0.1, .weight_decay = 0.1, .maximize = m}); }},
      {"Adadelta", [](auto& p, bool m) { return std::make_unique<optim::Adadelta>(p, optim::AdadeltaOptions{.weight_decay = 0.1, .maximize = m}); }},
      {"Adamax", [](auto& p, bool m) { return std::make_unique<optim::Adamax>(p, optim::AdamaxOptions{.weight_decay = 0.1, .maximize = m}); }},
      {"NAdam", [](auto& p, bool m) { return std::make_unique<optim::NAdam>(p, optim::NAdamOptions{.weight_decay = 0.1, .maximize = m}); }},
      {"RAdam", [](auto& p, bool m) { return std::make_unique<optim::RAdam>(p, optim::RAdamOptions{.weight_decay = 0.1, .maximize = m}); }},
      {"Rprop", [](auto& p, bool m) { return std::make_unique<optim::Rprop>(p, optim::RpropOptions{.maximize = m}); }},
      {"ASGD", [](auto& p, bool m) { return std::make_unique<optim::ASGD>(p, optim::ASGDOptions{.lr = 0.1, .t0 = 2, .maximize = m}); }},
      {"Adafactor", [](auto& p, bool m) { return std::make_unique<optim::Adafactor>(p, optim::AdafactorOptions{.weight_decay = 0.1, .maximize = m}); }},
  };
  for (const auto& entry : makers) {  // (no structured binding: CAPTURE's lambda may not name one in clang)
    const std::string& name = entry.first;
    const Make& make = entry.second;
    CAPTURE(name);
    Tensor a = param({0.5, -1.0, 2.0, 0.25}, DType::float64), b = param({0.5, -1.0, 2.0, 0.25}, DType::float64);
    auto up = make({a}, true);
    auto down = make({b}, false);
    CHECK(up->maximize(0));
    CHECK_FALSE(down->maximize(0));
    for (int s = 0; s < 7; ++s) {
      // f = -sum((p - 1)^2): its gradient -2 (p - 1); -f's is the negation
      const Tensor g = mul(sub(a.detach(), 1.0), -2.0);
      a.set_grad(g);
      b.set_grad(neg(g));
      up->step();
      down->step();
      CHECK(a.to_vector<double>() == b.to_vector<double>());
      CHECK(a.grad().to_vector<double>() == g.to_vector<double>());  // the gradient itself is left alone
    }
    // ascending f = -sum((p - 1)^2) moves p toward 1
    CHECK(max(abs(sub(a, 1.0))).item() < 2.0);  // from 2 (the entry at -1)
    // saved when on, restored by load_state_dict (absent = off)
    const optim::StateDict sd = up->state_dict();
    CHECK(sd.contains("param_groups.0.maximize"));
    CHECK_FALSE(down->state_dict().contains("param_groups.0.maximize"));
    down->load_state_dict(sd);
    CHECK(down->maximize(0));
    up->load_state_dict(make({b}, false)->state_dict());
    CHECK_FALSE(up->maximize(0));
  }
  // a parameter group may turn it on alone
  Tensor p = param({1, 2}), q = param({1, 2});
  optim::SGD sgd(std::vector<optim::ParamGroup>{{.params = {p}}, {.params = {q}, .options = {{"maximize", 1.0}}}},
                 {.lr = 0.5});
  CHECK_FALSE(sgd.maximize(0));
  CHECK(sgd.maximize(1));
  set_grad(p, {1, 1});
  set_grad(q, {1, 1});
  sgd.step();
  CHECK(p.to_vector<double>() == Vec{0.5, 1.5});
  CHECK(q.to_vector<double>() == Vec{1.5, 2.5});
  // an unknown option still fails and names maximize among the known ones
  CHECK_THROWS_WITH_AS(optim::SGD(std::vector<optim::ParamGroup>{{.params = {p}, .options = {{"maximise", 1.0}}}}),
                       doctest::Contains("maximize"), kiln::Error);
}

namespace {
Tensor rosenbrock(const Tensor& p) {
  const Tensor x = p.select(0, 0), y = p.select(0, 1);
  return add(mul(sub(x, 1.0), sub(x, 1.0)), mul(mul(sub(y, mul(x, x)), sub(y, mul(x, x))), 100.0));
}
}  // namespace

TEST_CASE("LBFGS: quadratic and Rosenbrock minima, PyTorch's values, resume, errors") {
  // a convex quadratic 1/2 p^T A p - b^T p: the minimum A^-1 b within a few steps
  const Tensor A = from_vector(std::vector<double>{3, 1, 0, 1, 2, 0.5, 0, 0.5, 1}, {3, 3});
  const Tensor bv = from_vector(std::vector<double>{1, -2, 0.5}, {3});
  for (bool wolfe : {false, true}) {
    CAPTURE(wolfe);
    Tensor p = zeros({3}, {.dtype = DType::float64}).requires_grad_();
    optim::LBFGS opt({p}, {.tolerance_change = 0, .strong_wolfe = wolfe});
    auto f = [&] {
      opt.zero_grad();
      Tensor l = sub(mul(sum(mul(p, matmul(A, p))), 0.5), sum(mul(bv, p)));
      l.backward();
      return l;
    };
    for (int s = 0; s < 3; ++s) opt.step(f);
    // A p = b
    const auto r = sub(matmul(A, p), bv).to_vector<double>();
    for (double e : r) CHECK(std::fabs(e) < 1e-8);
  }
  // Rosenbrock from (-1.2, 1) with the strong-Wolfe search reaches (1, 1)
  Tensor q = from_vector(std::vector<double>{-1.2, 1.0}, {2}).requires_grad_();
  optim::LBFGS ros({q}, {.tolerance_change = 0, .strong_wolfe = true});
  for (int s = 0; s < 10; ++s) ros.step([&] { ros.zero_grad(); Tensor l = rosenbrock(q); l.backward(); return l; });
  CHECK(q.to_vector<double>()[0] == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(q.to_vector<double>()[1] == doctest::Approx(1.0).epsilon(1e-6));
  // PyTorch 2.15 (float64): an L2-regularised logistic regression, three steps of 10 iterations
  std::vector<double> xv, yv;
  for (int i = 0; i < 20; ++i) {
    for (int j = 0; j < 3; ++j) xv.push_back(std::sin(i * 0.7 + j));
    yv.push_back(std::cos(i * 1.3) > 0 ? 1.0 : 0.0);
  }
  const Tensor X = from_vector(xv, {20, 3}), Y = from_vector(yv, {20});
  auto logreg = [&](bool resume_midway) {
    Tensor w = zeros({3}, {.dtype = DType::float64}).requires_grad_(), b = zeros({1}, {.dtype = DType::float64}).requires_grad_();
    auto opt = std::make_unique<optim::LBFGS>(std::vector<Tensor>{w, b}, optim::LBFGSOptions{.max_iter = 10, .strong_wolfe = true});
    for (int s = 0; s < 3; ++s) {
      if (resume_midway && s == 1) {  // a fresh optimizer from the saved state continues the same run
        const optim::StateDict sd = opt->state_dict();
        opt = std::make_unique<optim::LBFGS>(std::vector<Tensor>{w, b}, optim::LBFGSOptions{.max_iter = 10, .strong_wolfe = true});
        opt->load_state_dict(sd);
      }
      opt->step([&] {
        opt->zero_grad();
        Tensor l = add(binary_cross_entropy_with_logits(add(matmul(X, w), b), Y), mul(sum(mul(w, w)), 0.01));
        l.backward();
        return l;
      });
    }
    return cat({w, b}).to_vector<double>();
  };
  const std::vector<double> got = logreg(false);
  const std::vector<double> torch_values = {-0.11979995944576133, -0.13455929023902385, -0.02560543013848857, 0.018506054563308925};
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(torch_values[i]).epsilon(1e-14));
  CHECK(logreg(true) == got);  // bitwise
  Tensor p = zeros({2}, {.dtype = DType::float64}).requires_grad_();
  optim::LBFGS opt({p});
  CHECK_THROWS_WITH_AS(opt.step(), doctest::Contains("closure"), kiln::Error);
  CHECK_THROWS_AS(opt.add_param_group({.params = {zeros({1}).requires_grad_()}}), kiln::Error);
  CHECK_THROWS_AS(optim::LBFGS({p}, {.max_iter = 0}), kiln::Error);
  CHECK_THROWS_AS(optim::LBFGS({p}, {.lr = 0}), kiln::Error);
  CHECK_THROWS_AS(opt.load_state_dict({{"lbfgs.n_iter", scalar_tensor(1.0)}}), kiln::Error);
}
