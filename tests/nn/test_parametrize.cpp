// Parametrizations (nn/parametrize.h): weight_norm, spectral_norm and orthogonal against
// their formulas, PyTorch's parameter and state_dict names, a fresh value at every forward
// (two forwards before one backward), float64 gradchecks through the originals of Linear,
// Conv2d, ConvTranspose2d, LSTM and LSTMCell weights, PyTorch's count of power iterations in
// a recurrent layer's forward, legacy weight_g/weight_v keys, CachedParametrizations,
// custom parametrizations and chains, assign_parametrized, remove_parametrizations, errors.
#include <doctest/doctest.h>
#include "kiln/nn/parametrize.h"
#include "nn_test_utils.h"

using namespace kiln;
using namespace kiln::test;
namespace nn = kiln::nn;

namespace {

double max_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item(); }

// A symmetric matrix from its upper triangle (PyTorch's parametrize tutorial).
struct Symmetric : nn::Parametrization {
  using nn::Parametrization::forward;
  Tensor forward(const Tensor& x) override { return add(triu(x), triu(x, 1).transpose(0, 1)); }
  std::vector<Tensor> right_inverse(const Tensor& a) override { return {triu(a)}; }
};

// Scales by a constant (for chains).
struct Scale : nn::Parametrization {
  explicit Scale(double s) : s(s) {}
  using nn::Parametrization::forward;
  Tensor forward(const Tensor& x) override { return mul(x, s); }
  std::vector<Tensor> right_inverse(const Tensor& y) override { return {mul(y, 1.0 / s)}; }
  double s;
};

// Changes the shape (only allowed with unsafe=true).
struct Flatten : nn::Parametrization {
  using nn::Parametrization::forward;
  Tensor forward(const Tensor& x) override { return x.reshape({-1}); }
};

}  // namespace

TEST_CASE("weight_norm: PyTorch's names, g and v from the weight, the formula, a fresh value each forward") {
  manual_seed(3);
  nn::Linear fc(4, 3);
  fc.to(DType::float64);
  const Tensor w0 = fc.weight.clone();
  nn::weight_norm(fc);
  const auto named = fc.named_parameters();
  REQUIRE(named.size() == 3);
  CHECK(named.begin()->first == "bias");
  Tensor g = named.at("parametrizations.weight.original0"), v = named.at("parametrizations.weight.original1");
  CHECK(g.shape() == Shape{3, 1});
  CHECK(v.shape() == Shape{3, 4});
  CHECK(g.requires_grad());
  CHECK(max_diff(g, vector_norm(w0, 2.0, {1}, true)) < 1e-15);
  CHECK(max_diff(v, w0) == 0.0);
  CHECK(nn::is_parametrized(fc, "weight"));
  CHECK(nn::is_parametrized(fc));
  CHECK_FALSE(nn::is_parametrized(fc, "bias"));
  const auto sd = fc.state_dict();
  CHECK(sd.contains("parametrizations.weight.original0"));
  CHECK_FALSE(sd.contains("weight"));
  CHECK(fc.str().find("ParametrizationList") != std::string::npos);
  CHECK(fc.str().find("_WeightNorm") != std::string::npos);

  const Tensor x = randn({5, 4}, f64);
  CHECK(max_diff(fc(x), linear(x, w0, fc.bias)) < 1e-14);  // g * v / ||v|| is the weight again
  {  // doubling g doubles the weight at the next forward, and fc.weight shows it
    NoGradGuard ng;
    g.mul_(2.0);
  }
  CHECK(max_diff(fc(x), linear(x, mul(w0, 2.0), fc.bias)) < 1e-14);
  CHECK(max_diff(fc.weight, mul(w0, 2.0)) < 1e-14);
  CHECK_FALSE(fc.weight.requires_grad());

  // the gradient of g and v: the formula's, through two forwards before one backward
  fc.zero_grad();
  add(sum(fc(x)), sum(mul(fc(x), fc(x)))).backward();
  const Tensor gl = g.detach().requires_grad_(), vl = v.detach().requires_grad_();
  const Tensor w = mul(vl, div(gl, vector_norm(vl, 2.0, {1}, true)));
  const Tensor y = linear(x, w, fc.bias.detach());
  add(sum(y), sum(mul(y, y))).backward();
  CHECK(max_diff(g.grad(), gl.grad()) < 1e-13);
  CHECK(max_diff(v.grad(), vl.grad()) < 1e-13);

  CHECK(module_gradcheck(fc, [&](std::vector<Tensor>& in) { return fc(in[0]); }, {randn({2, 4}, f64)}));
}

TEST_CASE("weight_norm: dims, convolutions, the whole-tensor norm, state_dict round trip") {
  manual_seed(4);
  nn::Conv2d conv(2, 3, 3, {.padding = 1});
  conv.to(DType::float64);
  const Tensor w0 = conv.weight.clone();
  nn::weight_norm(conv);
  CHECK(conv.named_parameters().at("parametrizations.weight.original0").shape() == Shape{3, 1, 1, 1});
  const Tensor x = randn({2, 2, 5, 5}, f64);
  CHECK(max_diff(conv(x), conv2d(x, w0, conv.bias, {.padding = {1, 1}})) < 1e-13);
  CHECK(module_gradcheck(conv, [&](std::vector<Tensor>& in) { return conv(in[0]); }, {randn({1, 2, 4, 4}, f64)}));

  nn::ConvTranspose2d ct(3, 2, 3);  // weight (in, out, kh, kw); dim=1 keeps the output channels
  ct.to(DType::float64);
  nn::weight_norm(ct, "weight", 1);
  CHECK(ct.named_parameters().at("parametrizations.weight.original0").shape() == Shape{1, 2, 1, 1});
  CHECK(module_gradcheck(ct, [&](std::vector<Tensor>& in) { return ct(in[0]); }, {randn({1, 3, 3, 3}, f64)}));

  for (std::optional<int64_t> d : {std::optional<int64_t>(), std::optional<int64_t>(-1)}) {
    nn::Linear fc(3, 2);
    fc.to(DType::float64);
    const Tensor w = fc.weight.clone();
    nn::weight_norm(fc, "weight", d);
    const Tensor g = fc.named_parameters().at("parametrizations.weight.original0");
    CHECK(g.dim() == 0);
    CHECK(std::abs(g.item() - vector_norm(w).item()) < 1e-15);
    CHECK(module_gradcheck(fc, [&](std::vector<Tensor>& in) { return fc(in[0]); }, {randn({2, 3}, f64)}));
  }
  {  // dim=-2 is the second last (PyTorch wraps every negative dim but -1)
    nn::Linear fc(3, 2);
    nn::weight_norm(fc, "weight", -2);
    CHECK(fc.named_parameters().at("parametrizations.weight.original0").shape() == Shape{2, 1});
  }

  {  // the deprecated torch.nn.utils.weight_norm's keys (weight_g, weight_v) load too, also nested
    nn::Sequential seq{nn::Linear(3, 2), nn::Tanh()};
    seq.to(DType::float64);
    nn::weight_norm(*seq.ptr(0));
    const Tensor g = randn({2, 1}, f64), v = randn({2, 3}, f64), b = randn({2}, f64);
    seq.load_state_dict({{"0.weight_g", g}, {"0.bias", b}, {"0.weight_v", v}});
    const auto sd = seq.state_dict();
    CHECK(max_diff(sd.at("0.parametrizations.weight.original0"), g) == 0.0);
    CHECK(max_diff(sd.at("0.parametrizations.weight.original1"), v) == 0.0);
    CHECK(error_of([&] { seq.load_state_dict({{"0.weight_g", g}, {"0.bias", b}}); }).find("missing key") !=
          std::string::npos);
  }

  // the state_dict round trip into a fresh parametrized module, and to(float32)
  nn::Conv2d other(2, 3, 3, {.padding = 1});
  other.to(DType::float64);
  nn::weight_norm(other);
  other.load_state_dict(conv.state_dict());
  CHECK(max_diff(other(x), conv(x)) == 0.0);
  other.to(DType::float32);
  CHECK(other(x.to(DType::float32)).dtype() == DType::float32);
  CHECK(max_diff(other(x.to(DType::float32)).to(DType::float64), conv(x)) < 1e-4);
}

TEST_CASE("spectral_norm: sigma from power iteration, training against eval, 1-D weights, ConvTranspose's dim") {
  manual_seed(5);
  nn::Linear fc(6, 4);
  fc.to(DType::float64);
  {
    NoGradGuard ng;  // a clear gap between the top two singular values
    fc.weight.copy_(matmul(matmul(linalg::qr(randn({4, 4}, f64)).Q, diag(from_vector<double>({5, 2, 1, 0.5}))),
                           linalg::qr(randn({6, 4}, f64)).Q.transpose(0, 1)));
  }
  const Tensor w0 = fc.weight.clone();
  nn::spectral_norm(fc);
  const auto sd = fc.state_dict();
  CHECK(sd.contains("parametrizations.weight.original"));
  CHECK(sd.contains("parametrizations.weight.0._u"));
  CHECK(sd.contains("parametrizations.weight.0._v"));
  CHECK(fc.named_parameters().size() == 2);
  const Tensor u = sd.at("parametrizations.weight.0._u"), v = sd.at("parametrizations.weight.0._v");
  CHECK(u.shape() == Shape{4});
  CHECK(v.shape() == Shape{6});
  CHECK(std::abs(vector_norm(u).item() - 1.0) < 1e-14);
  // 16 power iterations with a gap of 2.5: sigma is 5 to many digits
  CHECK(max_diff(fc.weight, div(w0, 5.0)) < 1e-10);
  CHECK(std::abs(linalg::svdvals(fc.weight).to_vector<double>()[0] - 1.0) < 1e-10);

  // training mode runs one iteration a forward; eval mode none
  const Tensor x = randn({3, 6}, f64);
  const Tensor u1 = u.clone();
  fc(x);
  CHECK(max_diff(u, u1) > 0.0);
  fc.eval();
  const Tensor u2 = u.clone();
  const Tensor y1 = fc(x);
  CHECK(max_diff(u, u2) == 0.0);
  // the value: W / (u . W v), with u, v the buffers
  CHECK(max_diff(y1, linear(x, div(w0, sum(mul(u, matmul(w0, v)))), fc.bias)) < 1e-14);
  // the gradient through sigma (in eval mode, so the buffers stay put under finite differences)
  CHECK(module_gradcheck(fc, [&](std::vector<Tensor>& in) { return fc(in[0]); }, {randn({2, 6}, f64)}));

  nn::ConvTranspose2d ct(4, 6, 3, {.groups = 2});  // weight (4, 3, 3, 3): dim 1 by default
  nn::spectral_norm(ct);
  CHECK(ct.state_dict().at("parametrizations.weight.0._u").shape() == Shape{3});
  CHECK(ct.state_dict().at("parametrizations.weight.0._v").shape() == Shape{36});
  nn::Conv2d conv(2, 5, 3);
  conv.to(DType::float64);
  nn::spectral_norm(conv, "weight", 3);
  CHECK(conv.state_dict().at("parametrizations.weight.0._u").shape() == Shape{5});
  conv.eval();
  CHECK(module_gradcheck(conv, [&](std::vector<Tensor>& in) { return conv(in[0]); }, {randn({1, 2, 4, 4}, f64)}));

  nn::LayerNorm ln(5);  // a 1-D weight is divided by its norm, without buffers
  ln.to(DType::float64);
  {
    NoGradGuard ng;
    ln.weight.copy_(randn({5}, f64));
  }
  const Tensor lw = ln.weight.clone();
  nn::spectral_norm(ln);
  CHECK_FALSE(ln.state_dict().contains("parametrizations.weight.0._u"));
  CHECK(max_diff(ln.weight, div(lw, vector_norm(lw))) < 1e-15);
}

TEST_CASE("parametrizations of recurrent weights, cells and attention") {
  manual_seed(6);
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  lstm.to(DType::float64);
  const Tensor w0 = lstm.weight_hh[1].clone();
  nn::weight_norm(lstm, "weight_hh_l1");
  CHECK(lstm.named_parameters().contains("parametrizations.weight_hh_l1.original1"));
  CHECK_FALSE(lstm.named_parameters().contains("weight_hh_l1"));
  nn::LSTM plain(3, 4, {.num_layers = 2});
  plain.to(DType::float64);
  {
    auto sd = lstm.state_dict();
    nn::StateDict psd;
    for (const auto& [k, t] : plain.state_dict()) psd.insert(k, k == "weight_hh_l1" ? w0 : sd.at(k));
    plain.load_state_dict(psd);
  }
  const Tensor seq = randn({4, 2, 3}, f64);
  CHECK(max_diff(lstm(seq), plain(seq)) < 1e-14);
  CHECK(module_gradcheck(lstm, [&](std::vector<Tensor>& in) { return lstm(in[0]); }, {randn({3, 2, 3}, f64)}));

  // PyTorch's RNN forward reads the first parametrized weight (flat order) 4 times and the
  // others twice, so spectral norm runs 4 and 2 power iterations a forward: kiln's as many
  nn::GRU gru(3, 4, {.num_layers = 2});
  gru.to(DType::float64);
  nn::spectral_norm(gru, "weight_hh_l0");
  nn::spectral_norm(gru, "weight_ih_l1");
  auto iterate = [](const Tensor& w, Tensor u, Tensor v, int n) {
    for (int i = 0; i < n; ++i) {
      u = normalize(matmul(w, v), 2.0, 0);
      v = normalize(matmul(w.transpose(0, 1), u), 2.0, 0);
    }
    return u;
  };
  auto gsd = gru.state_dict();
  {  // new originals, so u and v are far from converged and each iteration shows
    NoGradGuard ng;
    for (const char* k : {"parametrizations.weight_hh_l0.original", "parametrizations.weight_ih_l1.original"})
      gsd.at(k).copy_(randn(gsd.at(k).shape(), f64));
  }
  const Tensor u_hh = iterate(gsd.at("parametrizations.weight_hh_l0.original"), gsd.at("parametrizations.weight_hh_l0.0._u").clone(),
                              gsd.at("parametrizations.weight_hh_l0.0._v").clone(), 4);
  const Tensor u_ih = iterate(gsd.at("parametrizations.weight_ih_l1.original"), gsd.at("parametrizations.weight_ih_l1.0._u").clone(),
                              gsd.at("parametrizations.weight_ih_l1.0._v").clone(), 2);
  gru(seq);
  CHECK(max_diff(gsd.at("parametrizations.weight_hh_l0.0._u"), u_hh) < 1e-15);
  CHECK(max_diff(gsd.at("parametrizations.weight_ih_l1.0._u"), u_ih) < 1e-15);

  nn::LSTMCell cell(3, 4);
  cell.to(DType::float64);
  nn::weight_norm(cell, "weight_ih");
  nn::spectral_norm(cell, "weight_hh");
  cell.eval();
  CHECK(module_gradcheck(cell, [&](std::vector<Tensor>& in) { return cell.forward(in[0], {in[1], in[2]}).first; },
                         {randn({2, 3}, f64), randn({2, 4}, f64), randn({2, 4}, f64)}));

  nn::MultiheadAttention mha(4, 2);
  mha.to(DType::float64);
  nn::weight_norm(mha.qkv);
  CHECK(module_gradcheck(mha, [&](std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0]).first; },
                         {randn({1, 3, 4}, f64)}));
}

TEST_CASE("orthogonal: every map keeps the weight orthogonal through training, starting from the weight") {
  manual_seed(9);
  struct Case {
    int64_t out, in;
    std::optional<std::string> map;
    bool triv;
  };
  for (const Case& c : {Case{5, 5, std::nullopt, true}, Case{5, 5, "cayley", true}, Case{4, 6, std::nullopt, true},
                        Case{6, 4, "matrix_exp", true}, Case{4, 6, "householder", false}, Case{6, 3, "cayley", true},
                        Case{3, 3, "householder", false}}) {
    CAPTURE(c.out);
    CAPTURE(c.in);
    CAPTURE(c.map.value_or("default"));
    nn::Linear fc(c.in, c.out);
    fc.to(DType::float64);
    const Tensor w0 = fc.weight.clone();
    nn::orthogonal(fc, "weight", c.map, c.triv);
    CHECK(fc.state_dict().contains("parametrizations.weight.0.base") == c.triv);
    auto check_orthogonal = [&](const Tensor& w) {
      const Tensor g = c.out >= c.in ? matmul(w.transpose(0, 1), w) : matmul(w, w.transpose(0, 1));
      return max_diff(g, eye(std::min(c.out, c.in), -1, f64));
    };
    CHECK(check_orthogonal(fc.weight) < 1e-13);
    if (c.out == c.in) {  // a square weight becomes the Q of its QR with R's diagonal positive
      const auto qr = linalg::qr(w0);
      CHECK(max_diff(fc.weight, mul(qr.Q, sign(linalg::diagonal(qr.R)).unsqueeze(-2))) < 1e-13);
    }
    // a few steps of plain gradient descent: still orthogonal, and the loss falls
    const Tensor x = randn({8, c.in}, f64), target = randn({8, c.out}, f64);
    auto loss = [&] { return sum(pow(sub(fc(x), target), 2.0)); };
    const double first = loss().item();
    for (int i = 0; i < 20; ++i) {
      fc.zero_grad();
      loss().backward();
      NoGradGuard ng;
      for (Tensor p : fc.parameters()) p.add_(p.grad(), -0.01);
    }
    CHECK(loss().item() < first);
    CHECK(check_orthogonal(fc.weight) < 1e-12);
    // (not "householder": its original's diagonal holds signs read through trunc, as PyTorch's
    // .int(), so finite differences there jump; linalg's test checks householder_product)
    if (c.map.value_or(c.out == c.in ? "matrix_exp" : "householder") != "householder")
      CHECK(module_gradcheck(fc, [&](std::vector<Tensor>& in) { return fc(in[0]); }, {randn({2, c.in}, f64)}));
  }
  // assigning an orthogonal matrix: the value comes back
  nn::Linear sq(4, 4, {.bias = false});
  sq.to(DType::float64);
  nn::orthogonal(sq);
  const Tensor q = linalg::qr(randn({4, 4}, f64)).Q;
  nn::assign_parametrized(sq, "weight", q);
  CHECK(max_diff(sq.param(sq.weight), q) < 1e-14);
  nn::Linear hh(3, 5, {.bias = false});
  hh.to(DType::float64);
  nn::orthogonal(hh, "weight", "householder", false);
  const Tensor q2 = linalg::qr(randn({5, 3}, f64)).Q;
  nn::assign_parametrized(hh, "weight", q2);
  CHECK(max_diff(hh.param(hh.weight), q2) < 1e-14);
  nn::Linear me(4, 4);
  const Tensor me_w = me.weight.clone();
  nn::orthogonal(me, "weight", "matrix_exp", false);  // no right_inverse: the weight is the original
  CHECK(max_diff(me.named_parameters().at("parametrizations.weight.original"), me_w) == 0.0);
  CHECK_THROWS_AS(nn::assign_parametrized(me, "weight", eye(4)), nn::RightInverseNotImplemented);
  CHECK(error_of([&] { nn::assign_parametrized(me, "weight", eye(4)); }).find("use_trivialization=false") !=
        std::string::npos);
  CHECK(error_of([&] { nn::orthogonal(me, "bias"); }).find("matrix or batch of matrices") != std::string::npos);
  CHECK(error_of([&] { nn::orthogonal(sq, "weight", "qr"); }).find("orthogonal_map must be") != std::string::npos);
}

TEST_CASE("CachedParametrizations: one computation a scope, with the gradient of every use") {
  manual_seed(8);
  nn::RNNCell cell(3, 4);
  cell.to(DType::float64);
  nn::spectral_norm(cell, "weight_hh");
  Tensor u = cell.state_dict().at("parametrizations.weight_hh.0._u");  // shares the buffer's storage
  {
    NoGradGuard ng;  // new originals: u is far from converged, so every iteration shows
    u.copy_(normalize(randn({4}, f64), 2.0, 0));
  }
  const Tensor xs = randn({3, 2, 3}, f64);
  auto run = [&] {
    Tensor h;
    for (int64_t t = 0; t < 3; ++t) h = cell.forward(xs.select(0, t), h);
    return sum(h);
  };
  Tensor v = cell.state_dict().at("parametrizations.weight_hh.0._v");
  const Tensor u0 = u.clone(), v0 = v.clone();
  {
    nn::CachedParametrizations cached;
    {
      nn::CachedParametrizations nested;  // nested guards share the outer cache
      run().backward();
    }
    run();
  }
  const Tensor once = u.clone();
  cell.zero_grad();
  // the same with one power iteration done by hand: a single forward step in training mode
  {
    NoGradGuard ng;
    u.copy_(u0);
    v.copy_(v0);
  }
  cell.forward(xs.select(0, 0), Tensor());
  CHECK(max_diff(once, u) == 0.0);
  CHECK(max_diff(u0, u) > 1e-6);
  run();
  CHECK(max_diff(once, u) > 0.0);  // outside the scope each step iterates again

  // in eval mode the cached and the uncached gradients agree
  cell.eval();
  cell.zero_grad();
  run().backward();
  const Tensor g = cell.named_parameters().at("parametrizations.weight_hh.original").grad().clone();
  cell.zero_grad();
  {
    nn::CachedParametrizations cached;
    run().backward();
  }
  CHECK(max_diff(cell.named_parameters().at("parametrizations.weight_hh.original").grad(), g) < 1e-15);
}

TEST_CASE("register_parametrization: a custom one, chains, assign_parametrized, remove_parametrizations") {
  manual_seed(7);
  nn::Linear fc(3, 3, {.bias = false});
  fc.to(DType::float64);
  const Tensor w0 = fc.weight.clone();
  nn::register_parametrization(fc, "weight", std::make_shared<Symmetric>());
  const Tensor x = randn({2, 3}, f64);
  CHECK(max_diff(fc.weight, fc.weight.transpose(0, 1)) == 0.0);
  const Tensor orig = fc.named_parameters().at("parametrizations.weight.original");
  CHECK(max_diff(orig, triu(w0)) == 0.0);  // right_inverse stored the upper triangle
  CHECK(module_gradcheck(fc, [&](std::vector<Tensor>& in) { return fc(in[0]); }, {randn({2, 3}, f64)}));

  // a chain: the Scale runs on the symmetric matrix
  nn::register_parametrization(fc, "weight", std::make_shared<Scale>(3.0));
  const Tensor sym = add(triu(w0), triu(w0, 1).transpose(0, 1));
  CHECK(max_diff(fc.weight, mul(sym, 3.0)) < 1e-14);  // shown at once
  CHECK(max_diff(fc(x), linear(x, mul(sym, 3.0))) < 1e-14);
  CHECK(nn::parametrization_list(fc, "weight").chain().size() == 2);

  // assigning a value runs the right_inverses backwards into the original
  const Tensor target = randn({3, 3}, f64);
  const Tensor sym_target = add(target, target.transpose(0, 1));
  nn::assign_parametrized(fc, "weight", sym_target);
  CHECK(max_diff(fc(x), linear(x, sym_target)) < 1e-14);

  // remove, leaving the value: a plain parameter again with the same handle
  const Tensor handle = fc.weight;
  nn::remove_parametrizations(fc, "weight");
  CHECK_FALSE(nn::is_parametrized(fc));
  CHECK(fc.named_parameters().size() == 1);
  CHECK(fc.named_parameters().at("weight").is_same(handle));
  CHECK(fc.weight.requires_grad());
  CHECK_FALSE(fc.state_dict().contains("parametrizations.weight.original"));
  CHECK(fc.str().find("ParametrizationList") == std::string::npos);
  CHECK(max_diff(fc(x), linear(x, sym_target)) < 1e-14);
  sum(fc(x)).backward();
  CHECK(fc.weight.grad().defined());

  // remove without leaving the value: the original's
  nn::Linear g(3, 3);
  g.to(DType::float64);
  nn::register_parametrization(g, "weight", std::make_shared<Scale>(2.0));
  const Tensor gw = g.weight.clone();
  nn::remove_parametrizations(g, "weight", /*leave_parametrized=*/false);
  CHECK(max_diff(g.weight, mul(gw, 0.5)) == 0.0);  // the original: right_inverse halved the weight
  std::string last;
  for (const auto& [k, t] : g.named_parameters()) last = k;
  CHECK(last == "weight");
}

TEST_CASE("parametrizations: errors name the module, the tensor and what was expected") {
  nn::Linear fc(3, 2);
  CHECK(error_of([&] { nn::weight_norm(fc, "weigth"); }).find("no parameter or buffer 'weigth'") != std::string::npos);
  CHECK(error_of([&] { nn::weight_norm(fc, "weight", 2); }).find("out of range") != std::string::npos);
  CHECK(error_of([&] { nn::spectral_norm(fc, "weight", 0); }).find("n_power_iterations > 0") != std::string::npos);
  CHECK(error_of([&] { nn::register_parametrization(fc, "weight", std::make_shared<Flatten>()); })
            .find("may not change the shape or dtype") != std::string::npos);
  CHECK_FALSE(nn::is_parametrized(fc));  // a failed registration changes nothing
  CHECK(fc.named_parameters().contains("weight"));
  nn::register_parametrization(fc, "weight", std::make_shared<Flatten>(), /*unsafe=*/true);
  CHECK(fc.weight.shape() == Shape{6});  // the member shows the (reshaped) value
  CHECK(error_of([&] { nn::weight_norm(fc); }).find("parametrized already") != std::string::npos);
  CHECK(error_of([&] { nn::remove_parametrizations(fc, "bias"); }).find("'bias' is not parametrized") !=
        std::string::npos);
  nn::Linear h(3, 2);
  nn::weight_norm(h);
  CHECK(error_of([&] { nn::remove_parametrizations(h, "weight", false); }).find("parametrized by 2 tensors") !=
        std::string::npos);
  CHECK(error_of([&] { nn::assign_parametrized(h, "weight", zeros({3, 3})); }).find("for original") !=
        std::string::npos);
}
