// Parametrizations: see parametrize.h. The code follows torch/nn/utils/parametrize.py and
// parametrizations.py (weight_norm, spectral_norm) step for step.
#include "kiln/nn/parametrize.h"
#include "kiln/core/autograd.h"
#include "kiln/core/finfo.h"
#include "kiln/nn/layers.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn_functional.h"
#include "kiln/ops/reduce.h"

namespace kiln::nn {

struct ParametrizeAccess {
  static ModuleState& state(const Module& m) { return *m.state_; }
  static std::vector<std::string>& names(ParametrizationList& l) { return l.original_names_; }
  static bool& buffers(ParametrizationList& l) { return l.originals_are_buffers_; }
};

namespace {

// The `parametrizations` child (PyTorch's ModuleDict of ParametrizationLists).
class ParametrizationDict : public Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }
};

// The registered (defined) parameter or buffer `name` of st; null when there is none.
Tensor* find_tensor(ModuleState& st, const std::string& name, bool& is_buffer) {
  is_buffer = false;
  if (Tensor* t = st.parameters.find(name); t && t->defined()) return t;
  is_buffer = true;
  if (Tensor* t = st.buffers.find(name); t && t->defined()) return t;
  return nullptr;
}

Module* parametrizations_child(ModuleState& st) {
  std::shared_ptr<Module>* c = st.children.find("parametrizations");
  return c ? c->get() : nullptr;
}

}  // namespace

Tensor Parametrization::forward(const std::vector<Tensor>& originals) {
  KILN_CHECK(originals.size() == 1, type_name(), ": got ", originals.size(),
             " originals; a parametrization whose right_inverse returns several tensors must override "
             "forward(const std::vector<Tensor>&)");
  return (*this)(originals[0]);
}

std::vector<Tensor> ParametrizationList::originals() const {
  std::vector<Tensor> out;
  const ModuleState& st = state();
  for (const auto& n : original_names_) out.push_back(originals_are_buffers_ ? st.buffers.at(n) : st.parameters.at(n));
  return out;
}

std::vector<std::shared_ptr<Parametrization>> ParametrizationList::chain() const {
  std::vector<std::shared_ptr<Parametrization>> out;
  for (const auto& [name, child] : state().children) out.push_back(std::static_pointer_cast<Parametrization>(child));
  return out;
}

Tensor ParametrizationList::value() const {
  const auto ch = chain();
  KILN_CHECK(!ch.empty(), "ParametrizationList: no parametrization registered");
  Tensor x = ch[0]->forward(originals());
  for (size_t i = 1; i < ch.size(); ++i) x = (*ch[i])(x);
  return x;
}

bool is_parametrized(const Module& module, const std::string& name) {
  Module* p = parametrizations_child(ParametrizeAccess::state(module));
  if (p == nullptr) return false;
  return name.empty() ? !ParametrizeAccess::state(*p).children.empty()
                      : ParametrizeAccess::state(*p).children.contains(name);
}

ParametrizationList& parametrization_list(const Module& module, const std::string& name) {
  KILN_CHECK(is_parametrized(module, name), module.type_name(), " has no parametrization on '", name, "'");
  Module* p = parametrizations_child(ParametrizeAccess::state(module));
  return static_cast<ParametrizationList&>(*ParametrizeAccess::state(*p).children.at(name));
}

namespace {
// The tensor `name` as a forward sees it (a parametrized one's current value, no graph): what
// a parametrization registered on it next starts from.
Tensor value_as_seen(const char* who, const Module& module, const std::string& name) {
  if (is_parametrized(module, name)) {
    NoGradGuard ng;
    return parametrization_list(module, name).value();
  }
  bool is_buffer = false;
  const Tensor* t = find_tensor(ParametrizeAccess::state(module), name, is_buffer);
  KILN_CHECK(t != nullptr, who, "(", module.type_name(), ", '", name, "'): the module has no parameter or buffer '",
             name, "'");
  return *t;
}
}  // namespace

Module& register_parametrization(Module& module, const std::string& name, std::shared_ptr<Parametrization> p,
                                 bool unsafe) {
  const std::string who = "register_parametrization(" + module.type_name() + ", '" + name + "')";
  KILN_CHECK(p != nullptr, who, ": the parametrization is null");
  ModuleState& st = ParametrizeAccess::state(module);
  if (is_parametrized(module, name)) {  // append to the chain
    ParametrizationList& list = parametrization_list(module, name);
    Tensor shown;  // the chain's new value, when the checks compute it
    if (!unsafe) {
      NoGradGuard ng;
      const Tensor y = list.value();
      const Tensor x = (*p)(y);
      shown = x;
      KILN_CHECK(x.defined() && x.dtype() == y.dtype() && x.shape() == y.shape(), who, ": the parametrization maps ",
                 describe(y), " to ", x.defined() ? describe(x) : std::string("an undefined tensor"),
                 "; it may not change the shape or dtype (pass unsafe=true to allow it)");
      try {  // PyTorch checks a right_inverse the parametrization has
        const std::vector<Tensor> z = p->right_inverse(x);
        KILN_CHECK(z.size() == 1 && z[0].dtype() == x.dtype() && z[0].shape() == x.shape(), who,
                   ": a parametrization appended to a chain needs a right_inverse giving one tensor of its output's "
                   "shape and dtype, ",
                   describe(x));
      } catch (const RightInverseNotImplemented&) {
      }
    }
    list.register_module(std::to_string(ParametrizeAccess::state(list).children.size()), p);
    for (const ParametrizedTensor& pt : st.parametrized)  // the member shows the chain's new value
      if (pt.name == name && shown.defined()) detail::replace_contents(Tensor(pt.member), shown);
    return module;
  }

  bool is_buffer = false;
  Tensor* slot = find_tensor(st, name, is_buffer);
  KILN_CHECK(slot != nullptr, who, ": the module has no parameter or buffer '", name, "'");
  const Tensor member = *slot;
  const bool requires_grad = member.requires_grad();

  // the list, built aside: the module changes only once every check has passed
  auto list = std::make_shared<ParametrizationList>();
  std::vector<Tensor> originals;
  {
    NoGradGuard ng;
    try {
      originals = p->right_inverse(member);
    } catch (const RightInverseNotImplemented&) {
      originals = {member};  // PyTorch: a right_inverse that cannot invert counts as the identity
    }
  }
  KILN_CHECK(!originals.empty(), who, ": right_inverse returned no tensor");
  if (originals.size() == 1)
    KILN_CHECK(originals[0].defined() && originals[0].dtype() == member.dtype(), who,
               ": when right_inverse returns one tensor it may not change the dtype: ", describe(member), " became ",
               originals[0].defined() ? describe(originals[0]) : std::string("undefined"));
  for (size_t i = 0; i < originals.size(); ++i) {
    KILN_CHECK(originals[i].defined(), who, ": right_inverse returned an undefined tensor at ", i);
    const std::string n = originals.size() == 1 ? "original" : "original" + std::to_string(i);
    const Tensor o = originals[i].detach();  // a TensorImpl of its own, never the member's
    if (is_buffer) list->register_buffer(n, o);
    else list->register_parameter(n, o, requires_grad && o.is_floating_point());
    ParametrizeAccess::names(*list).push_back(n);
  }
  ParametrizeAccess::buffers(*list) = is_buffer;
  list->register_module("0", p);

  Tensor shown;  // the value, which the member shows until the next forward
  {
    NoGradGuard ng;
    shown = list->value();
  }
  KILN_CHECK(unsafe || (shown.defined() && shown.dtype() == member.dtype() && shown.shape() == member.shape()), who,
             ": the parametrization maps the originals to ", shown.defined() ? describe(shown) : std::string("nothing"),
             " but the tensor is ", describe(member),
             "; it may not change the shape or dtype (pass unsafe=true to allow it)");
  KILN_CHECK(shown.defined(), who, ": the parametrization returned an undefined tensor");

  // now change the module: the tensor leaves parameters()/buffers(), the list joins
  Module* dict = parametrizations_child(st);
  if (dict == nullptr) dict = module.register_module("parametrizations", std::make_shared<ParametrizationDict>()).get();
  dict->register_module(name, list);
  if (is_buffer) {
    st.buffers.erase(name);
    std::erase(st.non_persistent, name);
  } else {
    st.parameters.erase(name);
  }
  member.impl().grad = nullptr;
  member.impl().requires_grad = false;
  detail::replace_contents(member, shown);
  st.parametrized.push_back({name, member.impl_ptr(), [list] { return list->value(); }, {}});
  return module;
}

Module& remove_parametrizations(Module& module, const std::string& name, bool leave_parametrized) {
  const std::string who = "remove_parametrizations(" + module.type_name() + ", '" + name + "')";
  KILN_CHECK(is_parametrized(module, name), who, ": '", name, "' is not parametrized");
  ModuleState& st = ParametrizeAccess::state(module);
  ParametrizationList& list = parametrization_list(module, name);
  const bool is_buffer = ParametrizeAccess::buffers(list);
  auto entry = std::find_if(st.parametrized.begin(), st.parametrized.end(),
                            [&](const ParametrizedTensor& e) { return e.name == name; });
  KILN_CHECK(entry != st.parametrized.end(), who, ": the module's record of '", name, "' is missing");
  const Tensor member(entry->member);
  const std::vector<Tensor> orig = list.originals();
  Tensor value;
  if (leave_parametrized) {
    NoGradGuard ng;
    value = list.value();
  } else {
    KILN_CHECK(orig.size() == 1, who, ": cannot leave '", name, "' unparametrized (leave_parametrized=false): it is "
               "parametrized by ", orig.size(), " tensors");
    value = orig[0].detach();
  }
  KILN_CHECK(value.dtype() == member.dtype(), who, ": the value is ", describe(value), " but '", name, "' was ",
             describe(member));
  const bool requires_grad = !is_buffer && value.is_floating_point() &&
                             std::any_of(orig.begin(), orig.end(), [](const Tensor& t) { return t.requires_grad(); });

  // the member becomes a plain parameter (buffer) again, holding the value
  detail::replace_contents(member, value.detach());
  st.parametrized.erase(entry);
  Module* dict = parametrizations_child(st);
  ParametrizeAccess::state(*dict).children.erase(name);
  if (ParametrizeAccess::state(*dict).children.empty()) st.children.erase("parametrizations");
  if (is_buffer) module.register_buffer(name, member);
  else module.register_parameter(name, member, requires_grad);
  return module;
}

void assign_parametrized(Module& module, const std::string& name, const Tensor& value) {
  const std::string who = "assign_parametrized(" + module.type_name() + ", '" + name + "')";
  ParametrizationList& list = parametrization_list(module, name);
  const auto ch = list.chain();
  std::vector<Tensor> orig = list.originals();
  NoGradGuard ng;
  std::vector<Tensor> v{value};
  for (size_t i = ch.size(); i-- > 0;) {
    KILN_CHECK(v.size() == 1, who, ": parametrization ", i + 1, " of the chain gave ", v.size(),
               " tensors from right_inverse; only the first may give several");
    v = ch[i]->right_inverse(v[0]);
  }
  KILN_CHECK(v.size() == orig.size(), who, ": right_inverse gave ", v.size(), " tensors for ", orig.size(),
             " originals");
  for (size_t i = 0; i < v.size(); ++i)
    KILN_CHECK(v[i].defined() && v[i].dtype() == orig[i].dtype() && v[i].shape() == orig[i].shape(), who,
               ": right_inverse gave ", v[i].defined() ? describe(v[i]) : std::string("an undefined tensor"),
               " for original ", i, ", which is ", describe(orig[i]));
  for (size_t i = 0; i < v.size(); ++i) orig[i].copy_(v[i]);
}

// ---- weight_norm ----

namespace {

// torch.norm_except_dim(v, 2, dim): the 2-norm over every dim but `dim`, kept as size 1
// (dim == -1: one norm of the whole tensor, a 0-dim tensor).
Tensor norm_except_dim(const Tensor& v, int64_t dim) {
  if (dim == -1) return vector_norm(v, 2.0);
  Dims others;
  for (int64_t d = 0; d < v.dim(); ++d)
    if (d != dim) others.push_back(d);
  if (others.empty()) return abs(v);
  return vector_norm(v, 2.0, others, true);
}

class WeightNorm : public Parametrization {
 public:
  explicit WeightNorm(int64_t dim) : dim_(dim) {}
  using Parametrization::forward;
  Tensor forward(const std::vector<Tensor>& o) override {
    KILN_CHECK(o.size() == 2, "WeightNorm: expected the originals g and v, got ", o.size(), " tensors");
    return mul(o[1], div(o[0], norm_except_dim(o[1], dim_)));  // torch._weight_norm(v, g, dim)
  }
  std::vector<Tensor> right_inverse(const Tensor& w) override { return {norm_except_dim(w, dim_), w}; }
  std::string type_name() const override { return "_WeightNorm"; }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }

 private:
  int64_t dim_;
};

}  // namespace

Module& weight_norm(Module& module, const std::string& name, std::optional<int64_t> dim) {
  ModuleState& st = ParametrizeAccess::state(module);
  bool is_buffer = false;
  KILN_CHECK(!is_parametrized(module, name), "weight_norm(", module.type_name(), ", '", name, "'): '", name,
             "' is parametrized already; weight_norm needs the plain tensor (its g and v are two originals)");
  const Tensor* t = find_tensor(st, name, is_buffer);
  KILN_CHECK(t != nullptr, "weight_norm(", module.type_name(), ", '", name, "'): the module has no parameter or buffer '",
             name, "'");
  KILN_CHECK(t->is_floating_point(), "weight_norm(", module.type_name(), ", '", name,
             "'): expected a floating tensor, got ", describe(*t));
  int64_t d = dim.value_or(-1);
  const int64_t n = t->dim();
  if (d < -1) d += n;  // PyTorch reads -1 as "the whole tensor" and wraps only the others
  KILN_CHECK(d >= -1 && d < std::max<int64_t>(n, 1), "weight_norm(", module.type_name(), ", '", name, "'): dim ",
             *dim, " is out of range for a tensor of shape ", shape_str(t->shape()));
  register_parametrization(module, name, std::make_shared<WeightNorm>(d), /*unsafe=*/true);
  // files of the deprecated torch.nn.utils.weight_norm name g and v so: they load too
  ParametrizeAccess::state(module).parametrized.back().legacy_keys = {
      {name + "_g", "parametrizations." + name + ".original0"}, {name + "_v", "parametrizations." + name + ".original1"}};
  return module;
}

// ---- spectral_norm ----

namespace {

class SpectralNorm : public Parametrization {
 public:
  SpectralNorm(const Tensor& weight, int64_t n_power_iterations, int64_t dim, double eps) : eps_(eps) {
    const int64_t nd = weight.dim();
    KILN_CHECK(dim < nd && dim >= -nd, "spectral_norm: dim ", dim, " is out of range for a weight of shape ",
               shape_str(weight.shape()));
    KILN_CHECK(n_power_iterations > 0, "spectral_norm: expected n_power_iterations > 0, got ", n_power_iterations);
    dim_ = dim >= 0 ? dim : dim + nd;
    if (nd > 1) {
      n_power_iterations_ = n_power_iterations;
      NoGradGuard ng;
      const Tensor wm = matrix(weight);
      const TensorOptions o{.dtype = weight.dtype(), .device = weight.device()};
      u = register_buffer("_u", normalize(randn({wm.size(0)}, o), 2.0, 0, eps_));
      v = register_buffer("_v", normalize(randn({wm.size(1)}, o), 2.0, 0, eps_));
      power_method(wm, 15);
    }
  }
  using Parametrization::forward;
  Tensor forward(const Tensor& weight) override {
    if (weight.dim() == 1) return normalize(weight, 2.0, 0, eps_);
    const Tensor wm = matrix(weight);
    KILN_CHECK(u.defined() && u.size(0) == wm.size(0) && v.size(0) == wm.size(1),
               "spectral_norm: the weight's shape ", shape_str(weight.shape()), " does not match _u ",
               u.defined() ? shape_str(u.shape()) : std::string("(none)"), " and _v ",
               v.defined() ? shape_str(v.shape()) : std::string("(none)"));
    if (is_training()) {
      NoGradGuard ng;
      power_method(wm.detach(), n_power_iterations_);
    }
    const Tensor sigma = sum(mul(u.clone(), matmul(wm, v.clone())));  // vdot(u, W v)
    return div(weight, sigma);
  }
  std::string type_name() const override { return "_SpectralNorm"; }

  Tensor u, v;  // the buffers _u, _v (unit vectors along W's left and right top singular vectors)

 private:
  // the weight as a matrix: dim first, the rest flattened
  Tensor matrix(Tensor w) const {
    if (dim_ != 0) {
      Shape perm{dim_};
      for (int64_t d = 0; d < w.dim(); ++d)
        if (d != dim_) perm.push_back(d);
      w = w.permute(perm);
    }
    return w.reshape({w.size(0), -1});
  }
  void power_method(const Tensor& wm, int64_t iterations) {
    for (int64_t i = 0; i < iterations; ++i) {
      u.copy_(normalize(matmul(wm, v), 2.0, 0, eps_));
      v.copy_(normalize(matmul(wm.transpose(0, 1), u), 2.0, 0, eps_));
    }
  }
  double eps_;
  int64_t dim_ = 0;
  int64_t n_power_iterations_ = 0;
};

}  // namespace

Module& spectral_norm(Module& module, const std::string& name, int64_t n_power_iterations, double eps,
                      std::optional<int64_t> dim) {
  // a parametrized tensor gets spectral_norm appended to its chain
  const Tensor w = value_as_seen("spectral_norm", module, name);
  KILN_CHECK(w.is_floating_point(), "spectral_norm(", module.type_name(), ", '", name,
             "'): expected a floating tensor, got ", describe(w));
  if (!dim)
    dim = dynamic_cast<ConvTranspose1d*>(&module) || dynamic_cast<ConvTranspose2d*>(&module) ||
                  dynamic_cast<ConvTranspose3d*>(&module)
              ? 1
              : 0;
  return register_parametrization(module, name, std::make_shared<SpectralNorm>(w, n_power_iterations, *dim, eps));
}

// ---- orthogonal ----

namespace {

Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }

Shape batch_of(const Tensor& t, std::initializer_list<int64_t> tail) {
  Shape s(t.shape().begin(), t.shape().end() - 2);
  s.insert(s.end(), tail);
  return s;
}

// torch's _make_orthogonal: the Q of A's QR with R's diagonal made positive
Tensor make_orthogonal(const Tensor& A) {
  const Geqrf f = geqrf(A);
  const Tensor Q = linalg::householder_product(f.a, f.tau);
  return mul(Q, sign(linalg::diagonal(f.a)).unsqueeze(-2));
}

// torch's _is_orthogonal: Q^T Q = I within allclose(atol = 10 n eps)
bool is_orthogonal(const Tensor& Q) {
  const int64_t n = Q.size(-2), k = Q.size(-1);
  const Tensor Id = eye(k, -1, {.dtype = Q.dtype(), .device = Q.device()});
  const double atol = 10.0 * double(n) * finfo_eps(Q.dtype());
  const Tensor excess = sub(abs(sub(matmul(mT(Q), Q), Id)), add(mul(abs(Id), 1e-5), atol));
  return max(excess).item() <= 0.0;
}

class Orthogonal : public Parametrization {
 public:
  Orthogonal(const Tensor& weight, std::string map, bool trivialization)
      : shape_(weight.shape()), map_(std::move(map)), trivialization_(trivialization) {}
  using Parametrization::forward;
  Tensor forward(const Tensor& x) override {
    Tensor X = x;
    int64_t n = X.size(-2), k = X.size(-1);
    const bool transposed = n < k;
    if (transposed) {
      X = mT(X);
      std::swap(n, k);
    }
    const TensorOptions o{.dtype = X.dtype(), .device = X.device()};
    Tensor Q;
    if (map_ == "matrix_exp" || map_ == "cayley") {
      X = tril(X);  // n k - k (k - 1) / 2 numbers: a skew-symmetric A from the lower triangle
      if (n != k) X = cat({X, zeros(batch_of(X, {n, n - k}), o)}, -1);
      const Tensor A = sub(X, mT(X));
      if (map_ == "matrix_exp") {
        Q = linalg::matrix_exp(A);
      } else {  // Cayley: (I - A/2)^-1 (I + A/2)
        const Tensor Id = eye(n, -1, o);
        Q = linalg::solve(sub(Id, mul(A, 0.5)), add(Id, mul(A, 0.5)));
      }
      if (n != k) Q = Q.narrow(-1, 0, k);
    } else {  // Householder reflections from the strict lower triangle, scaled to reflect
      const Tensor A = tril(X, -1);
      const Tensor s = add(sum(mul(A, A), {-2}), 1.0);
      Q = linalg::householder_product(A, div(full_like(s, 2.0), s));
      // the diagonal of X holds the signs (+-1, read as integers: no gradient, as PyTorch's .int())
      Q = mul(Q, trunc(linalg::diagonal(X)).detach().unsqueeze(-2));
    }
    if (const Tensor* base = state().buffers.find("base"); base && base->defined()) Q = matmul(*base, Q);
    return transposed ? mT(Q) : Q;
  }

  std::vector<Tensor> right_inverse(const Tensor& value) override {
    KILN_CHECK(value.shape() == shape_, "orthogonal: expected a value of shape ", shape_str(shape_), ", got ",
               shape_str(value.shape()));
    NoGradGuard ng;
    Tensor Q = value;
    int64_t n = Q.size(-2), k = Q.size(-1);
    const bool transposed = n < k;
    if (transposed) {
      Q = mT(Q);
      std::swap(n, k);
    }
    if (!trivialization_) {
      if (map_ != "householder")
        throw RightInverseNotImplemented("orthogonal: a value cannot be assigned to the " + map_ +
                                         " parametrization when use_trivialization=false");
      // X = the packed QR with R's diagonal replaced by its signs (flipped where tau = 0:
      // LAPACK's tau is exactly 0 where it skips a reflection), so forward gives Q back
      const Geqrf f = geqrf(Q);
      Tensor d = sign(linalg::diagonal(f.a));
      d = where(eq(f.tau, 0.0), neg(d), d);
      const Tensor on_diag = eye(n, k, {.dtype = DType::bool_, .device = Q.device()});
      const Tensor A = where(on_diag, d.unsqueeze(-2).expand(f.a.shape()), f.a);
      return {transposed ? mT(A) : A.contiguous()};
    }
    // trivialization: base = an orthogonal completion of the value; the original starts at
    // -I, which every map sends to the identity, so the value is base at first
    Tensor base;
    if (n == k) {
      base = is_orthogonal(Q) ? Q.clone() : make_orthogonal(Q);
    } else {
      const Tensor N = randn(batch_of(Q, {n, n - k}), {.dtype = Q.dtype(), .device = Q.device()});
      base = make_orthogonal(cat({Q, N}, -1));
    }
    if (Tensor* b = state().buffers.find("base"); b && b->defined()) b->copy_(base);
    else register_buffer("base", base);
    const Tensor on_diag = eye(value.size(-2), value.size(-1), {.dtype = DType::bool_, .device = value.device()});
    return {where(on_diag.expand(value.shape()), -1.0, zeros_like(value))};
  }
  std::string type_name() const override { return "_Orthogonal"; }

 private:
  Shape shape_;
  std::string map_;
  bool trivialization_;
};

}  // namespace

Module& orthogonal(Module& module, const std::string& name, std::optional<std::string> orthogonal_map,
                   bool use_trivialization) {
  const Tensor w = value_as_seen("orthogonal", module, name);
  KILN_CHECK(w.is_floating_point() && w.dim() >= 2, "orthogonal(", module.type_name(), ", '", name,
             "'): expected a floating matrix or batch of matrices, got ", describe(w));
  const std::string map = orthogonal_map.value_or(w.size(-2) == w.size(-1) ? "matrix_exp" : "householder");
  KILN_CHECK(map == "matrix_exp" || map == "cayley" || map == "householder", "orthogonal(", module.type_name(), ", '",
             name, "'): orthogonal_map must be \"matrix_exp\", \"cayley\" or \"householder\", got \"", map, "\"");
  return register_parametrization(module, name, std::make_shared<Orthogonal>(w, map, use_trivialization),
                                  /*unsafe=*/true);
}

}  // namespace kiln::nn
