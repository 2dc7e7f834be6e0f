// Tests of the nn layers: forward shapes and values, PyTorch default initialisation,
// gradient checks through each layer (float64, parameters included), BatchNorm running
// statistics, Embedding padding, Dropout modes, attention causality, loss modules.
#include <doctest/doctest.h>
#include <cmath>
#include "nn_test_utils.h"

using namespace kiln;
using namespace kiln::test;
namespace nn = kiln::nn;

namespace {
// gradcheck of m(x) over x and m's parameters, in float64
bool check_layer(nn::Module& m, const Tensor& x, GradcheckOptions o = {}) {
  m.to(DType::float64);
  return module_gradcheck(m, [&](std::vector<Tensor>& in) { return m(in[0]); }, {x}, o);
}
double max_abs(const Tensor& t) { return max(abs(t)).item(); }
}  // namespace

TEST_CASE("Linear: shape, value, init bounds, gradcheck") {
  manual_seed(0);
  nn::Linear l(5, 3);
  CHECK(l.weight.shape() == Shape{3, 5});
  CHECK(l.bias.shape() == Shape{3});
  CHECK(l(randn({2, 7, 5})).shape() == Shape{2, 7, 3});
  nn::Linear big(400, 300);
  double bound = 1.0 / std::sqrt(400.0);
  CHECK(max_abs(big.weight) <= bound);
  CHECK(max_abs(big.weight) > 0.95 * bound);  // fills the range
  CHECK(max_abs(big.bias) <= bound);
  CHECK(std::fabs(mean(big.weight).item()) < 0.01 * bound * 10);
  // y = x W^T + b by hand
  Tensor x = randn({2, 5});
  Tensor y = l(x);
  double e = l.bias.at({1});
  for (int k = 0; k < 5; ++k) e += x.at({0, k}) * l.weight.at({1, k});
  CHECK(y.at({0, 1}) == doctest::Approx(e).epsilon(1e-5));
  nn::Linear nb(5, 3, {.bias = false});
  CHECK_FALSE(nb.bias.defined());
  CHECK(nb.parameters().size() == 1);
  CHECK(check_layer(l, randn({3, 5}, f64)));
  CHECK_THROWS_WITH_AS(l(randn({2, 4}, f64)), doctest::Contains("[2, 4]"), kiln::Error);
  CHECK_THROWS_AS(nn::Linear(0, 3), kiln::Error);
}

TEST_CASE("Conv2d: options, shapes, init, gradcheck") {
  manual_seed(1);
  nn::Conv2d c(2, 4, 3, {.stride = 1, .padding = 1, .bias = false});
  CHECK(c.weight.shape() == Shape{4, 2, 3, 3});
  CHECK_FALSE(c.bias.defined());
  CHECK(c(randn({2, 2, 5, 6})).shape() == Shape{2, 4, 5, 6});
  nn::Conv2d s(2, 4, {3, 2}, {.stride = {2, 1}, .padding = {1, 0}});
  CHECK(s.weight.shape() == Shape{4, 2, 3, 2});
  CHECK(s(randn({1, 2, 7, 5})).shape() == Shape{1, 4, 4, 4});
  nn::Conv2d g(4, 6, 1, {.groups = 2});
  CHECK(g.weight.shape() == Shape{6, 2, 1, 1});
  nn::Conv2d big(16, 32, 3);
  double bound = 1.0 / std::sqrt(16.0 * 9.0);
  CHECK(max_abs(big.weight) <= bound);
  CHECK(max_abs(big.weight) > 0.95 * bound);
  CHECK(max_abs(big.bias) <= bound);
  CHECK_THROWS_WITH_AS(c(randn({2, 3, 5, 5})), doctest::Contains("[2, 3, 5, 5]"), kiln::Error);
  CHECK_THROWS_AS(nn::Conv2d(3, 4, 3, {.groups = 2}), kiln::Error);
  nn::Conv2d small(2, 3, 3, {.stride = 2, .padding = 1});
  CHECK(check_layer(small, randn({2, 2, 5, 4}, f64)));
}

TEST_CASE("pooling and Flatten shapes, gradcheck") {
  manual_seed(2);
  Tensor x = randn({2, 3, 8, 6});
  CHECK(nn::MaxPool2d(2)(x).shape() == Shape{2, 3, 4, 3});
  CHECK(nn::MaxPool2d(3, {.stride = 2, .padding = 1})(x).shape() == Shape{2, 3, 4, 3});
  CHECK(nn::AvgPool2d(2)(x).shape() == Shape{2, 3, 4, 3});
  CHECK(nn::AdaptiveAvgPool2d(1)(x).shape() == Shape{2, 3, 1, 1});
  CHECK(nn::AdaptiveAvgPool2d({3, 2})(x).shape() == Shape{2, 3, 3, 2});
  CHECK(nn::Flatten()(x).shape() == Shape{2, 144});
  CHECK(nn::Flatten(2)(x).shape() == Shape{2, 3, 48});
  // adaptive average to 1x1 equals the mean
  CHECK(allclose(nn::AdaptiveAvgPool2d(1)(x).flatten(), mean(x, {2, 3}).flatten(), 1e-5, 1e-6));
  Tensor xs = randn({1, 2, 4, 4}, f64);
  nn::MaxPool2d mp(2);
  CHECK(check_layer(mp, xs));
  nn::AvgPool2d ap(2, {.stride = 1});
  CHECK(check_layer(ap, xs));
  nn::AdaptiveAvgPool2d aap({3, 3});
  CHECK(check_layer(aap, xs));
  nn::Flatten fl;
  CHECK(check_layer(fl, xs));
  // ceil_mode, dilation, adaptive max; the summary text shows the options
  CHECK(nn::MaxPool2d(2, {.ceil_mode = true})(randn({2, 3, 7, 5})).shape() == Shape{2, 3, 4, 3});
  CHECK(nn::MaxPool2d(3, {.stride = 1, .dilation = 2})(x).shape() == Shape{2, 3, 4, 2});
  CHECK(nn::AvgPool2d(2, {.ceil_mode = true})(randn({1, 1, 5, 5})).shape() == Shape{1, 1, 3, 3});
  CHECK(nn::AdaptiveMaxPool2d({3, 2})(x).shape() == Shape{2, 3, 3, 2});
  CHECK(nn::MaxPool2d(2, {.dilation = {2, 1}, .ceil_mode = true}).extra_repr() ==
        "kernel_size=2, stride=2, padding=0, dilation=(2, 1), ceil_mode=true");
  nn::AdaptiveMaxPool2d amp({3, 2});
  CHECK(check_layer(amp, xs));
  CHECK_THROWS_AS(nn::AdaptiveMaxPool2d(0), kiln::Error);
}

TEST_CASE("Conv1d, MaxPool1d, AvgPool1d: shapes, init, the 2-D op on a height-1 view, gradcheck") {
  manual_seed(5);
  nn::Conv1d c(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  CHECK(c.weight.shape() == Shape{6, 2, 3});
  CHECK(c.bias.shape() == Shape{6});
  const double bound = 1.0 / std::sqrt(2.0 * 3.0);  // fan_in = in/groups * K
  CHECK(max_abs(c.weight) <= bound);
  Tensor x = randn({2, 4, 9});
  CHECK(c(x).shape() == Shape{2, 6, 5});
  CHECK(c(randn({4, 9})).shape() == Shape{6, 5});  // unbatched (C, L)
  // the same numbers as Conv2d with a 1 x K kernel
  const Tensor y2 = conv2d(x.unsqueeze(2), c.weight.unsqueeze(2), c.bias,
                           {.stride = {1, 2}, .padding = {0, 1}, .groups = 2});
  CHECK(max_abs(c(x) - y2.squeeze(2)) == 0.0);
  CHECK(c.extra_repr() == "4, 6, kernel_size=3, stride=2, padding=1, groups=2, bias=true");
  CHECK_THROWS_WITH_AS(c(randn({2, 3, 9})), doctest::Contains("[2, 3, 9]"), kiln::Error);
  CHECK_THROWS_AS(nn::Conv1d(3, 4, 3, {.groups = 2}), kiln::Error);
  CHECK(nn::MaxPool1d(3, {.stride = 2, .padding = 1, .ceil_mode = true})(x).shape() == Shape{2, 4, 5});
  CHECK(nn::AvgPool1d(2)(x).shape() == Shape{2, 4, 4});
  CHECK(nn::AvgPool1d(2, {.ceil_mode = true})(x).shape() == Shape{2, 4, 5});
  nn::Conv1d small(2, 3, 3, {.padding = 1, .dilation = 2});
  CHECK(check_layer(small, randn({2, 2, 7}, f64)));
  nn::MaxPool1d mp(2, {.stride = 1, .dilation = 2});
  CHECK(check_layer(mp, randn({2, 2, 7}, f64)));
  nn::AvgPool1d ap(3, {.stride = 2, .padding = 1, .count_include_pad = false});
  CHECK(check_layer(ap, randn({1, 2, 8}, f64)));
}

TEST_CASE("activations match the ops and gradcheck") {
  manual_seed(3);
  Tensor x = randn({3, 4}, f64) + 0.05;  // away from relu's kink with high probability
  CHECK(bitwise_equal(nn::ReLU()(x), relu(x)));
  CHECK(bitwise_equal(nn::GELU()(x), gelu(x)));
  CHECK(bitwise_equal(nn::GELU(GeluApprox::tanh)(x), gelu(x, GeluApprox::tanh)));
  CHECK(bitwise_equal(nn::SiLU()(x), silu(x)));
  CHECK(bitwise_equal(nn::Tanh()(x), tanh(x)));
  CHECK(bitwise_equal(nn::Sigmoid()(x), sigmoid(x)));
  CHECK(bitwise_equal(nn::Identity()(x), x));
  nn::GELU g(GeluApprox::tanh);
  CHECK(check_layer(g, x));
  nn::SiLU s;
  CHECK(check_layer(s, x));
  nn::Sigmoid sg;
  CHECK(check_layer(sg, x));
  nn::Tanh th;
  CHECK(check_layer(th, x));
  CHECK(bitwise_equal(nn::Softplus()(x), softplus(x)));
  nn::LogSigmoid ls;
  CHECK(bitwise_equal(ls(x), log_sigmoid(x)));
  CHECK(check_layer(ls, x));
  CHECK(bitwise_equal(nn::LeakyReLU(0.2)(x), leaky_relu(x, 0.2)));
  CHECK(bitwise_equal(nn::ELU(0.5)(x), elu(x, 0.5)));
  CHECK(bitwise_equal(nn::SELU()(x), selu(x)));
  CHECK(bitwise_equal(nn::Hardtanh(-0.5, 0.5)(x), hardtanh(x, -0.5, 0.5)));
  CHECK(bitwise_equal(nn::ReLU6()(x * 8.0), relu6(x * 8.0)));
  CHECK(bitwise_equal(nn::Hardsigmoid()(x), hardsigmoid(x)));
  CHECK(bitwise_equal(nn::Hardswish()(x), hardswish(x)));
  CHECK(bitwise_equal(nn::Softmax(1)(x), softmax(x, 1)));
  CHECK(bitwise_equal(nn::LogSoftmax(0)(x), log_softmax(x, 0)));
  nn::ELU el(0.7);
  CHECK(check_layer(el, x));
  CHECK(el.str().find("ELU(alpha=0.7") == 0);
}

TEST_CASE("Dropout: training vs eval, seeded, gradcheck") {
  nn::Dropout d(0.5);
  Tensor x = ones({1000});
  manual_seed(4);
  Tensor a = d(x);
  manual_seed(4);
  Tensor b = d(x);
  CHECK(bitwise_equal(a, b));
  auto v = a.to_vector<double>();
  int zeros_n = 0;
  for (double e : v) {
    CHECK((e == 0.0 || e == 2.0));
    zeros_n += e == 0.0;
  }
  CHECK(zeros_n > 400);
  CHECK(zeros_n < 600);
  d.eval();
  CHECK(bitwise_equal(d(x), x));
  nn::Dropout d2(0.3);
  CHECK(check_layer(d2, randn({4, 5}, f64)));
  CHECK_THROWS_AS(nn::Dropout(1.5), kiln::Error);
}

TEST_CASE("BatchNorm: init, running statistics, eval mode, gradcheck") {
  manual_seed(5);
  nn::BatchNorm1d bn(3, {.momentum = 0.2});
  CHECK(bn.weight.to_vector<double>() == std::vector<double>{1, 1, 1});
  CHECK(bn.bias.to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(bn.named_buffers().keys() == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  Tensor x = randn({8, 3}) * 2.0 + 1.0;
  Tensor y = bn(x);
  // training output is normalised per channel
  CHECK(max_abs(mean(y, {0})) < 1e-5);
  CHECK(allclose(var(y, {0}, false), ones({3}), 1e-3, 1e-3));
  Tensor m = mean(x, {0}), v = var(x, {0}, true);
  CHECK(allclose(bn.running_mean, m * 0.2, 1e-5, 1e-6));
  CHECK(allclose(bn.running_var, ones({3}) * 0.8 + v * 0.2, 1e-5, 1e-6));
  CHECK(bn.num_batches_tracked.item() == 1);
  bn(x);
  CHECK(bn.num_batches_tracked.item() == 2);
  CHECK(allclose(bn.running_mean, m * 0.2 * 0.8 + m * 0.2, 1e-5, 1e-6));
  // eval uses running stats and leaves them alone
  bn.eval();
  Tensor rm = bn.running_mean.clone(), rv = bn.running_var.clone();
  Tensor ye = bn(x);
  CHECK(bitwise_equal(bn.running_mean, rm));
  CHECK(bn.num_batches_tracked.item() == 2);
  CHECK(allclose(ye, (x - rm) / sqrt(rv + 1e-5), 1e-4, 1e-5));
  // (N, C, L)
  bn.train();
  CHECK(bn(randn({4, 3, 5})).shape() == Shape{4, 3, 5});
  CHECK_THROWS_WITH_AS(bn(randn({4, 2})), doctest::Contains("[4, 2]"), kiln::Error);
  CHECK_THROWS_AS(bn(randn({4, 3, 2, 2})), kiln::Error);

  nn::BatchNorm2d bn2(2);
  CHECK(bn2(randn({3, 2, 4, 4})).shape() == Shape{3, 2, 4, 4});
  CHECK_THROWS_WITH_AS(bn2(randn({3, 2, 4})), doctest::Contains("(N, C, H, W)"), kiln::Error);
  CHECK(check_layer(bn2, randn({3, 2, 2, 2}, f64)));
  bn2.eval();
  CHECK(check_layer(bn2, randn({3, 2, 2, 2}, f64)));
  // without running stats: always batch statistics, no buffers
  nn::BatchNorm2d nostats(2, {.affine = false, .track_running_stats = false});
  CHECK(nostats.parameters().empty());
  CHECK(nostats.buffers().empty());
  nostats.eval();
  CHECK(max_abs(mean(nostats(randn({4, 2, 3, 3})), {0, 2, 3})) < 1e-5);
}

TEST_CASE("LayerNorm: values and gradcheck") {
  manual_seed(6);
  nn::LayerNorm ln(4);
  CHECK(ln.weight.shape() == Shape{4});
  Tensor x = randn({2, 3, 4});
  Tensor y = ln(x);
  CHECK(max_abs(mean(y, {-1})) < 1e-5);
  CHECK(allclose(var(y, {-1}, false), ones({2, 3}), 1e-3, 1e-3));
  nn::LayerNorm ln2(Shape{3, 4}, {.eps = 1e-6});
  CHECK(ln2.weight.shape() == Shape{3, 4});
  CHECK(ln2(x).shape() == Shape{2, 3, 4});
  nn::LayerNorm plain(4, {.elementwise_affine = false});
  CHECK(plain.parameters().empty());
  nn::LayerNorm nobias(4, {.bias = false});
  CHECK(nobias.parameters().size() == 1);
  {  // non-trivial affine parameters for the check
    NoGradGuard ng;
    nn::init::normal_(ln.weight);
    nn::init::normal_(ln.bias);
  }
  CHECK(check_layer(ln, randn({3, 4}, f64)));
}

TEST_CASE("Embedding: lookup, padding_idx, gradcheck") {
  manual_seed(7);
  nn::Embedding e(10, 3);
  Tensor idx = from_vector<int64_t>({1, 4, 4, 9, 0, 2}, {2, 3});
  Tensor y = e(idx);
  CHECK(y.shape() == Shape{2, 3, 3});
  CHECK(y.at({0, 1, 2}) == e.weight.at({4, 2}));
  CHECK(std::fabs(mean(nn::Embedding(100, 100).weight).item()) < 0.05);  // N(0, 1)
  nn::Embedding p(5, 2, {.padding_idx = -1});
  CHECK(p.padding_idx == 4);
  CHECK(p.weight.at({4, 0}) == 0.0);
  CHECK(p.weight.at({4, 1}) == 0.0);
  Tensor pi = from_vector<int64_t>({4, 1, 4}, {3});
  sum(p(pi) * 3.0).backward();
  CHECK(p.weight.grad().at({4, 0}) == 0.0);
  CHECK(p.weight.grad().at({1, 0}) == 3.0);
  CHECK_THROWS_AS(e(from_vector<int64_t>({10}, {1})), kiln::Error);
  CHECK_THROWS_AS(nn::Embedding(5, 2, {.padding_idx = 5}), kiln::Error);
  e.to(DType::float64);
  CHECK(module_gradcheck(e, [&](std::vector<Tensor>&) { return e(idx); }, {}));
}

TEST_CASE("MultiheadAttention: shapes, causal masking, gradcheck") {
  manual_seed(8);
  nn::MultiheadAttention mha(8, 2, {.causal = true});
  CHECK(mha.named_parameters().keys() ==
        std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"});
  CHECK(mha.qkv.weight.shape() == Shape{24, 8});
  Tensor x = randn({2, 5, 8});
  Tensor y = mha(x);
  CHECK(y.shape() == Shape{2, 5, 8});
  // changing future tokens does not change earlier outputs
  for (int64_t t = 0; t < 5; ++t) {
    Tensor x2 = x.clone();
    {
      NoGradGuard ng;
      x2.narrow(1, t, 5 - t).copy_(randn({2, 5 - t, 8}));
    }
    Tensor y2 = mha(x2);
    if (t > 0) CHECK(bitwise_equal(y.narrow(1, 0, t), y2.narrow(1, 0, t)));
    CHECK_FALSE(allclose(y.narrow(1, t, 1), y2.narrow(1, t, 1)));
  }
  // without the causal mask the first output does depend on the last token
  nn::MultiheadAttention full(8, 2);
  Tensor x3 = x.clone();
  {
    NoGradGuard ng;
    x3.narrow(1, 4, 1).copy_(randn({2, 1, 8}));
  }
  CHECK_FALSE(allclose(full(x).narrow(1, 0, 1), full(x3).narrow(1, 0, 1)));
  // one head equals softmax(q k^T / sqrt(d)) v by hand
  nn::MultiheadAttention one(4, 1);
  Tensor xs = randn({1, 3, 4});
  auto parts = split(one.qkv(xs), 4, 2);
  Tensor att = softmax(matmul(parts[0], parts[1].transpose(1, 2)) / 2.0, -1);
  CHECK(allclose(one(xs), one.proj(matmul(att, parts[2])), 1e-4, 1e-5));
  CHECK_THROWS_WITH_AS(mha(randn({2, 5, 7})), doctest::Contains("[2, 5, 7]"), kiln::Error);
  CHECK_THROWS_AS(nn::MultiheadAttention(8, 3), kiln::Error);
  nn::MultiheadAttention small(4, 2, {.causal = true, .dropout = 0.2});
  CHECK(check_layer(small, randn({2, 3, 4}, f64)));
}

TEST_CASE("TransformerBlock: names, shape, gradcheck with dropout") {
  manual_seed(9);
  nn::TransformerBlock blk(8, 2, {.causal = true, .dropout = 0.1});
  auto names = blk.named_parameters().keys();
  CHECK(names == std::vector<std::string>{"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
                                          "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
                                          "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"});
  CHECK(blk.mlp.get<nn::Linear>(0).weight.shape() == Shape{32, 8});
  CHECK(blk(randn({2, 5, 8})).shape() == Shape{2, 5, 8});
  // dropout 0 in eval: the block is x + attn(ln1 x) then + mlp(ln2 .)
  blk.eval();
  Tensor x = randn({1, 4, 8});
  Tensor h = x + blk.attn(blk.ln1(x));
  CHECK(bitwise_equal(blk(x), h + blk.mlp(blk.ln2(h))));
  // the MLP's Linear and GELU(tanh) run as one linear_gelu node, with the Sequential's values and
  // gradients; a hook on either (or on mlp) sends the input through mlp as written
  auto mlp_grads = [&](bool fused) {
    blk.zero_grad();
    Tensor a = blk.ln2(h.detach());
    Tensor y = fused ? blk.mlp_forward(a) : blk.mlp(a);
    sum(y * y).backward();
    return std::vector<Tensor>{y.detach(), blk.mlp.get<nn::Linear>(0).weight.grad().clone(),
                               blk.mlp.get<nn::Linear>(0).bias.grad().clone(), blk.ln2.weight.grad().clone()};
  };
  const auto fused = mlp_grads(true), seq = mlp_grads(false);
  for (size_t i = 0; i < fused.size(); ++i) CHECK(bitwise_equal(fused[i], seq[i]));
  CHECK(blk.mlp[2].has_forward_hooks() == false);
  CHECK(blk.mlp_forward(blk.ln2(h)).grad_fn()->next[0].node->name == "linear_gelu");  // mlp[2]'s input
  int calls = 0;
  const int64_t id = blk.mlp[1].register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor&) -> std::optional<Tensor> {
        ++calls;
        return std::nullopt;
      });
  CHECK(blk.mlp[1].has_forward_hooks());
  CHECK(bitwise_equal(blk(x), h + blk.mlp(blk.ln2(h))));
  CHECK(calls == 2);
  blk.mlp[1].remove_forward_hook(id);
  blk(x);
  CHECK(calls == 2);
  blk.train();
  nn::TransformerBlock small(4, 2, {.causal = true, .dropout = 0.1, .mlp_ratio = 2});
  CHECK(check_layer(small, randn({2, 3, 4}, f64)));
}

TEST_CASE("loss modules wrap ops/loss.h") {
  manual_seed(10);
  Tensor logits = randn({4, 5}, f64);
  Tensor target = from_vector<int64_t>({0, 3, 4, 1}, {4});
  nn::CrossEntropyLoss ce;
  CHECK(bitwise_equal(ce(logits, target), cross_entropy(logits, target)));
  nn::CrossEntropyLoss ces({.label_smoothing = 0.1, .reduction = Reduction::sum});
  CHECK(bitwise_equal(ces(logits, target), cross_entropy(logits, target, {.label_smoothing = 0.1,
                                                                          .reduction = Reduction::sum})));
  nn::NLLLoss nll;
  CHECK(bitwise_equal(nll(log_softmax(logits, 1), target), nll_loss(log_softmax(logits, 1), target)));
  nn::MSELoss mse;
  Tensor a = randn({3, 2}, f64), b = randn({3, 2}, f64);
  CHECK(mse(a, b).item() == doctest::Approx(mean((a - b) * (a - b)).item()));
  CHECK(nn::MSELoss(Reduction::none)(a, b).shape() == Shape{3, 2});
  CHECK(ce.str().find("CrossEntropyLoss(reduction=mean") != std::string::npos);
  CHECK(gradcheck([&](std::vector<Tensor>& in) { return ce(in[0], target); }, {logits}));
  // the pointwise losses
  const Tensor p = sigmoid(a), q = sigmoid(b);
  CHECK(bitwise_equal(nn::L1Loss()(a, b), l1_loss(a, b)));
  CHECK(bitwise_equal(nn::SmoothL1Loss({.beta = 0.5})(a, b), smooth_l1_loss(a, b, Reduction::mean, 0.5)));
  CHECK(bitwise_equal(nn::HuberLoss({.reduction = Reduction::sum, .delta = 2.0})(a, b),
                      huber_loss(a, b, Reduction::sum, 2.0)));
  CHECK(bitwise_equal(nn::BCELoss()(p, q), binary_cross_entropy(p, q)));
  nn::BCEWithLogitsLoss bcel({.pos_weight = full({2}, 3.0, f64)});
  CHECK(bitwise_equal(bcel(a, q), binary_cross_entropy_with_logits(a, q, {.pos_weight = full({2}, 3.0, f64)})));
  nn::KLDivLoss kl({.reduction = Reduction::batchmean});
  CHECK(bitwise_equal(kl(log_softmax(a, 1), softmax(b, 1)),
                      kl_div(log_softmax(a, 1), softmax(b, 1), {.reduction = Reduction::batchmean})));
  CHECK(kl.str().find("KLDivLoss(reduction=batchmean, log_target=false)") == 0);
  CHECK(bcel.str().find("BCEWithLogitsLoss(reduction=mean, pos_weight)") == 0);
  CHECK(nn::SmoothL1Loss().str().find("SmoothL1Loss(reduction=mean, beta=1)") == 0);
}

TEST_CASE("more gradchecks: ReLU, BatchNorm1d, Sequential, NLL and MSE losses") {
  manual_seed(11);
  nn::ReLU r;
  CHECK(check_layer(r, randn({3, 4}, f64)));
  nn::BatchNorm1d bn(3);
  CHECK(check_layer(bn, randn({5, 3}, f64)));
  CHECK(check_layer(bn, randn({4, 3, 2}, f64)));
  nn::Sequential seq{nn::Linear(4, 6), nn::Tanh(), nn::LayerNorm(6), nn::Linear(6, 2)};
  CHECK(check_layer(seq, randn({3, 4}, f64)));
  Tensor target = from_vector<int64_t>({1, 0, 2}, {3});
  nn::NLLLoss nll;
  CHECK(gradcheck([&](std::vector<Tensor>& in) { return nll(log_softmax(in[0], 1), target); }, {randn({3, 4}, f64)}));
  nn::MSELoss mse(Reduction::sum);
  CHECK(gradcheck([&](std::vector<Tensor>& in) { return mse(in[0], in[1]); }, {randn({3, 2}, f64), randn({3, 2}, f64)}));
}

TEST_CASE("init functions") {
  manual_seed(12);
  Tensor w = empty({200, 300});
  nn::init::xavier_uniform_(w);
  double b = std::sqrt(6.0 / 500.0);
  CHECK(max_abs(w) <= b);
  CHECK(max_abs(w) > 0.95 * b);
  nn::init::normal_(w, 2.0, 0.5);
  CHECK(mean(w).item() == doctest::Approx(2.0).epsilon(0.01));
  CHECK(kiln::std(w).item() == doctest::Approx(0.5).epsilon(0.02));
  nn::init::uniform_(w, -3.0, -2.0);
  CHECK(max(w).item() < -2.0);
  CHECK(min(w).item() >= -3.0);
  nn::init::kaiming_uniform_(w, 0.0, nn::init::FanMode::fan_in, nn::init::Nonlinearity::relu);
  CHECK(max_abs(w) <= std::sqrt(6.0 / 300.0));
  nn::init::ones_(w);
  CHECK(min(w).item() == 1.0);
  nn::init::zeros_(w);
  CHECK(max_abs(w) == 0.0);
  Tensor c = empty({8, 4, 3, 3});
  CHECK(nn::init::fan_in_and_fan_out(c) == std::pair<int64_t, int64_t>{36, 72});
  // seeded: the same numbers again
  manual_seed(5);
  Tensor a1 = nn::init::normal_(empty({10}));
  manual_seed(5);
  Tensor a2 = nn::init::normal_(empty({10}));
  CHECK(bitwise_equal(a1, a2));
  // parameters that require grad can be initialised (NoGradGuard inside)
  Tensor p = zeros({3, 3}, {.requires_grad = true});
  nn::init::xavier_uniform_(p);
  CHECK(p.requires_grad());
  CHECK(max_abs(p) > 0.0);
  CHECK_THROWS_AS(nn::init::xavier_uniform_(empty({3})), kiln::Error);
  CHECK_THROWS_AS(nn::init::normal_(zeros({3}, {.dtype = DType::int64})), kiln::Error);
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::tanh) == doctest::Approx(5.0 / 3.0));
  // 16-bit uniform_ stays below b (a float32 draw rounded onto 1.0 about once in 512 in bf16)
  for (DType dt : {DType::bfloat16, DType::float16}) {
    Tensor h = empty({100000}, {.dtype = dt});
    nn::init::uniform_(h, 0.0, 1.0);
    CHECK(max(h).item() < 1.0);
    CHECK(min(h).item() >= 0.0);
    nn::init::uniform_(h, -1.5, -0.3);
    CHECK(max(h).item() < -0.3);
    CHECK(max(h).item() > -0.32);
  }
  // non-finite bounds are errors (they filled NaN); constant_/zeros_/ones_ fill any dtype
  CHECK_THROWS_AS(nn::init::uniform_(empty({3}), -INFINITY, 1.0), kiln::Error);
  CHECK_THROWS_AS(nn::init::uniform_(empty({3}), -1e308, 1e308), kiln::Error);
  CHECK_THROWS_AS(nn::init::uniform_(empty({3}), -1e39, 1e39), kiln::Error);  // float32 draws: was all inf/NaN
  CHECK_THROWS_AS(nn::init::uniform_(empty({3}, {.dtype = DType::float16}), 0, 1e5), kiln::Error);
  CHECK_NOTHROW(nn::init::uniform_(empty({3}, {.dtype = DType::float64}), -1e300, 1e300));
  Tensor i = zeros({3}, {.dtype = DType::int64});
  CHECK(nn::init::constant_(i, 7).to_vector<int64_t>() == std::vector<int64_t>{7, 7, 7});
  CHECK(nn::init::ones_(zeros({2}, {.dtype = DType::bool_})).to_vector<uint8_t>() == std::vector<uint8_t>{1, 1});
  CHECK(nn::init::zeros_(i).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0});
}

TEST_CASE("RMSNorm: values, shapes, errors and gradcheck") {
  manual_seed(16);
  nn::RMSNorm rms(4);
  CHECK(rms.weight.shape() == Shape{4});
  Tensor x = randn({2, 3, 4}, f64);
  Tensor y = rms(x.to(DType::float32));
  // by hand: x / sqrt(mean(x^2) + eps), eps by default float32's machine epsilon (PyTorch's None)
  const auto xv = x.to_vector<double>();
  const auto yv = y.to_vector<double>();
  for (int64_t r = 0; r < 6; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < 4; ++j) ms += xv[size_t(r * 4 + j)] * xv[size_t(r * 4 + j)] / 4;
    for (int64_t j = 0; j < 4; ++j)
      CHECK(yv[size_t(r * 4 + j)] == doctest::Approx(xv[size_t(r * 4 + j)] / std::sqrt(ms + 0x1p-23)).epsilon(1e-5));
  }
  // small inputs show the default: PyTorch 2.15's torch.nn.RMSNorm(2) of [1e-4, -2e-4] in float64
  nn::RMSNorm small(2);
  const std::vector<double> sv = small(T({1e-4, -2e-4}, {1, 2})).to_vector<double>();
  const double want = 1e-4 / std::sqrt((1e-8 + 4e-8) / 2 + 0x1p-52);
  CHECK(sv[0] == doctest::Approx(want).epsilon(1e-12));
  CHECK(sv[1] == doctest::Approx(-2 * want).epsilon(1e-12));
  CHECK(small.str().find("eps=None") != std::string::npos);
  nn::RMSNorm two(Shape{3, 4}, {.eps = 1e-5});
  CHECK(two(x.to(DType::float32)).shape() == Shape{2, 3, 4});
  CHECK(nn::RMSNorm(4, {.elementwise_affine = false}).parameters().empty());
  CHECK(error_of([&] { rms(randn({2, 5})); }).find("does not end in normalized_shape") != std::string::npos);
  {
    NoGradGuard ng;
    nn::init::normal_(rms.weight);
  }
  CHECK(check_layer(rms, randn({3, 4}, f64)));
  CHECK(check_layer(two, randn({2, 3, 4}, f64)));
}

TEST_CASE("Functional and lambdas in Sequential; forward pre/post hooks") {
  manual_seed(17);
  nn::Sequential net{nn::Linear(4, 8), [](const Tensor& t) { return relu(t); },
                     nn::Functional([](const Tensor& t) { return mul(t, 2.0); }, "double"), nn::Linear(8, 3)};
  const Tensor x = randn({5, 4});
  auto lin0 = net.get<nn::Linear>(0), lin3 = net.get<nn::Linear>(3);
  const Tensor want = lin3(mul(relu(lin0(x)), 2.0));
  CHECK(max_abs(sub(net(x), want)) == 0);
  CHECK(net.str().find("double") != std::string::npos);

  // a post hook records, a pre hook rewrites the input, an output replacement takes effect
  std::vector<Shape> seen;
  const int64_t rec = lin0.register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor& out) {
    seen.push_back(in.shape());
    seen.push_back(out.shape());
    return std::optional<Tensor>();
  });
  net(x);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == Shape{5, 4});
  CHECK(seen[1] == Shape{5, 8});
  const int64_t zero_in = lin3.register_forward_pre_hook(
      [](nn::Module&, const Tensor& in) { return std::optional<Tensor>(zeros_like(in)); });
  Tensor y = net(x);  // Linear(0) = its bias
  CHECK(max_abs(sub(y, lin3.bias.detach().expand({5, 3}))) == 0);
  lin3.remove_forward_hook(zero_in);
  const int64_t negate = net.register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor& out) { return std::optional<Tensor>(kiln::neg(out)); });
  CHECK(max_abs(add(net(x), want)) < 1e-6);
  net.remove_forward_hook(negate);
  lin0.remove_forward_hook(rec);
  seen.clear();
  CHECK(max_abs(sub(net(x), want)) == 0);
  CHECK(seen.empty());
  // gradients flow through a hook's replacement
  Tensor xg = randn({5, 4});
  xg.requires_grad_();
  lin0.register_forward_hook([](nn::Module&, const Tensor&, const Tensor& out) { return std::optional<Tensor>(mul(out, 3.0)); });
  sum(lin0(xg)).backward();
  CHECK(max_abs(sub(xg.grad(), mul(sum(lin0.weight.detach(), {0}), 3.0).expand({5, 4}))) < 1e-5);
  CHECK(error_of([&] { lin0.register_forward_hook(nn::ForwardHook()); }).find("empty function") != std::string::npos);
}

TEST_CASE("conv_transpose2d is conv2d's input gradient; ConvTranspose2d shapes and gradcheck") {
  manual_seed(18);
  // <conv2d(a; w), b> = <a, conv_transpose2d(b; w)> for every geometry (the adjoint).
  // {stride, padding, output_padding, dilation, groups, Cout}: Cout >= 12 at stride 1 takes
  // conv2d's "transposed" input-gradient path, which must not run when output_padding (below
  // the dilation) adds a row no window reaches (it read past its buffer there)
  for (const auto& geo : std::vector<std::array<int64_t, 6>>{{1, 0, 0, 1, 1, 2}, {2, 1, 1, 1, 1, 2}, {2, 0, 0, 2, 2, 4},
                                                            {3, 1, 2, 1, 1, 2}, {1, 2, 0, 2, 1, 2}, {1, 0, 1, 2, 1, 12},
                                                            {1, 1, 1, 2, 1, 12}, {1, 0, 0, 2, 1, 12}}) {
    // (no structured binding: clang 14 cannot capture one in the gradcheck lambda)
    const int64_t s = geo[0], p = geo[1], op = geo[2], d = geo[3], g = geo[4];
    const int64_t Cin = 4, Cout = geo[5], k = 3, H = 5, W = 6;
    const Tensor w = randn({Cin, Cout / g, k, k}, f64), x = randn({2, Cin, H, W}, f64);
    const Tensor y = conv_transpose2d(x, w, Tensor(), {.stride = {s, s}, .padding = {p, p}, .output_padding = {op, op},
                                                       .dilation = {d, d}, .groups = g});
    const int64_t OH = (H - 1) * s - 2 * p + d * (k - 1) + op + 1, OW = (W - 1) * s - 2 * p + d * (k - 1) + op + 1;
    REQUIRE(y.shape() == Shape{2, Cout, OH, OW});
    const Tensor a = randn({2, Cout, OH, OW}, f64);
    // (at stride 1 conv2d gives output_padding more rows and columns, which no x reaches)
    const Tensor ca = conv2d(a, w, Tensor(), {.stride = {s, s}, .padding = {p, p}, .dilation = {d, d}, .groups = g})
                          .narrow(2, 0, H)
                          .narrow(3, 0, W);
    REQUIRE(ca.shape() == x.shape());
    CHECK(sum(mul(ca, x)).item() == doctest::Approx(sum(mul(a, y)).item()).epsilon(1e-12));
    CHECK(gradcheck([&](std::vector<Tensor>& in) {
      return conv_transpose2d(in[0], in[1], in[2], {.stride = {s, s}, .padding = {p, p}, .output_padding = {op, op},
                                                    .dilation = {d, d}, .groups = g});
    }, {randn({1, Cin, 3, 3}, f64), randn({Cin, Cout / g, k, k}, f64), randn({Cout}, f64)}));
  }
  nn::ConvTranspose2d up(8, 4, 4, {.stride = 2, .padding = 1});
  CHECK(up.weight.shape() == Shape{8, 4, 4, 4});
  CHECK(up(randn({2, 8, 7, 5})).shape() == Shape{2, 4, 14, 10});
  CHECK(check_layer(up, randn({1, 8, 3, 3}, f64)));
  CHECK(error_of([&] { conv_transpose2d(randn({1, 2, 3, 3}), randn({2, 1, 3, 3}), Tensor(), {.output_padding = {1, 1}}); })
            .find("output_padding") != std::string::npos);
  CHECK(error_of([&] { up(randn({2, 3, 7, 5})); }).find("expected input") != std::string::npos);
}

TEST_CASE("interpolate / Upsample: nearest and bilinear against PyTorch's rules, gradcheck") {
  manual_seed(19);
  const Tensor x = randn({2, 3, 4, 5}, f64);
  // nearest, scale 2: each pixel repeated 2x2
  const Tensor n2 = interpolate(x, {.scale_factor = {2, 2}});
  REQUIRE(n2.shape() == Shape{2, 3, 8, 10});
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 10; ++j) CHECK(n2.at({1, 2, i, j}) == x.at({1, 2, i / 2, j / 2}));
  // bilinear, half-pixel centres, to 7x3: against the formula, element by element
  const Tensor b = interpolate(x, {.size = {7, 3}, .mode = InterpolateMode::bilinear});
  auto coord = [](int64_t d, int64_t in, int64_t out) {
    const double s = std::max(0.0, (double(d) + 0.5) * double(in) / double(out) - 0.5);
    const int64_t i0 = std::min<int64_t>(int64_t(s), in - 1), i1 = std::min<int64_t>(i0 + 1, in - 1);
    return std::tuple<int64_t, int64_t, double>{i0, i1, std::min(s, double(in - 1)) - double(i0)};
  };
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      auto [h0, h1, wh] = coord(i, 4, 7);
      auto [w0, w1, ww] = coord(j, 5, 3);
      auto v = [&](int64_t h, int64_t w) { return x.at({0, 1, h, w}); };
      const double want = (1 - wh) * ((1 - ww) * v(h0, w0) + ww * v(h0, w1)) + wh * ((1 - ww) * v(h1, w0) + ww * v(h1, w1));
      CHECK(b.at({0, 1, i, j}) == doctest::Approx(want).epsilon(1e-12));
    }
  // align_corners: the corners are the input's corners
  const Tensor ac = interpolate(x, {.size = {6, 9}, .mode = InterpolateMode::bilinear, .align_corners = true});
  CHECK(ac.at({0, 0, 0, 0}) == x.at({0, 0, 0, 0}));
  CHECK(ac.at({0, 0, 5, 8}) == doctest::Approx(x.at({0, 0, 3, 4})).epsilon(1e-12));
  for (auto mode : {InterpolateMode::nearest, InterpolateMode::bilinear})
    CHECK(gradcheck([&](std::vector<Tensor>& in) { return interpolate(in[0], {.size = {5, 3}, .mode = mode}); },
                    {randn({1, 2, 3, 4}, f64)}));
  // PyTorch 2.15's source pixels where 1 / scale_factor alone would pick others: an axis of
  // unchanged size is copied (nearest and bilinear), twice the size shifts, the ratio is float32
  auto row = [](const Tensor& t) { return t.select(0, 0).select(0, 0).select(0, 0).to_vector<double>(); };
  auto ramp = [](int64_t w) { return arange(double(w), f64).reshape({1, 1, 1, w}); };
  CHECK(row(interpolate(ramp(5), {.scale_factor = {1.0, 1.1}})) == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(row(interpolate(ramp(7), {.scale_factor = {1.0, 2.1}})) ==
        std::vector<double>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6});
  CHECK(row(interpolate(ramp(11), {.scale_factor = {1.0, 3.7}})) ==
        std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5,
                            5, 5, 5, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 10, 10, 10});
  const Tensor same = arange(10.0, f64).reshape({1, 1, 2, 5});
  const Tensor bs = interpolate(same, {.scale_factor = {1.0, 1.1}, .mode = InterpolateMode::bilinear});
  CHECK(bs.to_vector<double>() == same.to_vector<double>());
  CHECK(!bs.is_same(same));
  nn::Upsample up({.scale_factor = {2, 2}, .mode = InterpolateMode::bilinear});
  CHECK(up(randn({1, 1, 3, 3})).shape() == Shape{1, 1, 6, 6});
  CHECK(up.str().find("bilinear") != std::string::npos);
  CHECK(error_of([&] { interpolate(x, {}); }).find("size or scale_factor") != std::string::npos);
  CHECK(error_of([&] { interpolate(randn({3, 4}), {.size = {2, 2}}); }).find("(N, C, H, W)") != std::string::npos);
}

TEST_CASE("GroupNorm, CosineSimilarity, PairwiseDistance modules") {
  nn::GroupNorm gn(2, 4);
  CHECK(gn.parameters().size() == 2);
  CHECK(gn.weight.shape() == Shape{4});
  CHECK(gn.weight.to_vector<float>() == std::vector<float>(4, 1.f));
  CHECK(gn.bias.to_vector<float>() == std::vector<float>(4, 0.f));
  manual_seed(59);
  Tensor x = randn({3, 4, 5});
  CHECK(max_abs_diff(gn(x), group_norm(x, 2, gn.weight, gn.bias)) == 0);
  CHECK(nn::GroupNorm(2, 4, {.affine = false}).parameters().empty());
  CHECK(gn.extra_repr() == "2, 4, eps=1e-05, affine=true");
  CHECK(error_of([] { nn::GroupNorm(3, 4); }).find("equal groups") != std::string::npos);
  CHECK(error_of([&] { nn::GroupNorm g; g(x); }).find("empty") != std::string::npos);
  Tensor a = randn({3, 4}), b = randn({3, 4});
  CHECK(max_abs_diff(nn::CosineSimilarity()(a, b), cosine_similarity(a, b)) == 0);
  CHECK(max_abs_diff(nn::PairwiseDistance(1.0)(a, b), pairwise_distance(a, b, 1.0)) == 0);
}

TEST_CASE("InstanceNorm1d/2d: group_norm with a group per channel, unbatched inputs, affine, errors") {
  manual_seed(73);
  nn::InstanceNorm2d in2(3);
  CHECK(in2.parameters().empty());  // PyTorch's default: affine=false
  const Tensor x = randn({2, 3, 4, 5}, f64);
  CHECK(max_abs_diff(in2(x), group_norm(x, 3)) == 0);
  const Tensor y = in2(x);
  CHECK(max_abs_diff(mean(y, {2, 3}), zeros({2, 3}, {.dtype = DType::float64})) < 1e-14);
  CHECK(max_abs_diff(in2(x.select(0, 1)), y.select(0, 1)) == 0);  // unbatched (C, H, W)
  nn::InstanceNorm1d in1(4, {.affine = true});
  CHECK(in1.parameters().size() == 2);
  CHECK(gradcheck([&](auto& in) { return nn::InstanceNorm1d(4, {.eps = 0.1})(in[0]); }, {randn({2, 4, 3}, f64)}));
  CHECK(in1.extra_repr() == "4, eps=1e-05, affine=true");
  CHECK(error_of([&] { in1(randn({2, 3, 5})); }).find("expected 4 channels") != std::string::npos);
  CHECK(error_of([&] { in1(randn({2, 4, 5, 6})); }).find("2-D (unbatched) or 3-D") != std::string::npos);
}

TEST_CASE("InstanceNorm with track_running_stats: running statistics in training, used in evaluation; 3d") {
  manual_seed(74);
  nn::InstanceNorm2d in2(3, {.track_running_stats = true, .momentum = 0.3});
  in2.to(DType::float64);
  CHECK(in2.named_buffers().size() == 3);  // running_mean, running_var, num_batches_tracked
  CHECK(in2.extra_repr().find("track_running_stats=true") != std::string::npos);
  const Tensor x = add(mul(randn({4, 3, 5, 6}, f64), 2.0), 1.0);
  const Tensor y = in2(x);
  CHECK(max_abs_diff(y, group_norm(x, 3)) == 0);  // training: the instance statistics
  // running = mean over the batch of (0.7 running + 0.3 instance stat), the variance unbiased
  const Tensor flat = x.reshape({4, 3, 30});
  CHECK(max_abs_diff(in2.running_mean, mul(mean(mean(flat, {2}), {0}), 0.3)) < 1e-15);
  CHECK(max_abs_diff(in2.running_var, add(mul(mean(var(flat, {2}, true), {0}), 0.3), 0.7)) < 1e-15);
  CHECK(in2.num_batches_tracked.item<int64_t>() == 0);  // PyTorch never advances it for instance norm
  in2.eval();
  const Tensor xe = randn({2, 3, 5, 6}, f64);
  const Tensor want = div(sub(xe, in2.running_mean.reshape({1, 3, 1, 1})), sqrt(add(in2.running_var.reshape({1, 3, 1, 1}), 1e-5)));
  CHECK(max_abs_diff(in2(xe), want) < 1e-14);
  const Tensor rm = in2.running_mean.clone();
  in2(xe);
  CHECK(max_abs_diff(in2.running_mean, rm) == 0);  // evaluation leaves them alone
  // momentum none: PyTorch passes 0, so the running statistics stay where they start
  nn::InstanceNorm1d frozen(2, {.track_running_stats = true, .momentum = std::nullopt});
  frozen(randn({3, 2, 4}));
  CHECK(frozen.running_mean.to_vector<float>() == std::vector<float>{0, 0});
  CHECK(frozen.running_var.to_vector<float>() == std::vector<float>{1, 1});
  // 3d, affine, through gradcheck
  nn::InstanceNorm3d in3(2, {.affine = true});
  in3.to(DType::float64);
  CHECK(check_layer(in3, randn({2, 2, 3, 2, 3}, f64)));
  CHECK(in3(randn({2, 3, 4, 2}, f64)).shape() == Shape{2, 3, 4, 2});  // unbatched (C, D, H, W)
  CHECK(error_of([&] { in2.train(); in2(randn({2, 3, 1, 1}, f64)); }).find("more than 1 spatial element") !=
        std::string::npos);
  CHECK(error_of([&] { in2(randn({2, 4, 3, 3}, f64)); }).find("expected 3 channels") != std::string::npos);
}

TEST_CASE("PReLU, GLU, CELU, shrinks, Threshold, Softmin, Dropout2d, PixelShuffle, Unflatten and the padding modules") {
  manual_seed(83);
  nn::PReLU prelu_m(3, 0.1);
  CHECK(prelu_m.parameters().size() == 1);
  CHECK(prelu_m.weight.to_vector<float>() == std::vector<float>{0.1f, 0.1f, 0.1f});
  CHECK(check_layer(prelu_m, randn({2, 3, 4}, {.dtype = DType::float64}) + 0.05));
  nn::PReLU one;
  CHECK(one.weight.numel() == 1);
  CHECK(one.weight.item() == doctest::Approx(0.25));
  const Tensor x = randn({2, 4, 6});
  CHECK(allclose(nn::GLU(1)(x), glu(x, 1)));
  CHECK(allclose(nn::CELU(0.5)(x), celu(x, 0.5)));
  CHECK(allclose(nn::Softsign()(x), softsign(x)));
  CHECK(allclose(nn::Tanhshrink()(x), tanhshrink(x)));
  CHECK(allclose(nn::Softmin(2)(x), softmin(x, 2)));
  CHECK(allclose(nn::Hardshrink(0.3)(x), hardshrink(x, 0.3)));
  CHECK(allclose(nn::Softshrink(0.3)(x), softshrink(x, 0.3)));
  CHECK(allclose(nn::Threshold(0.1, 20)(x), threshold(x, 0.1, 20)));
  nn::Dropout2d drop(0.5);
  drop.eval();
  const Tensor img = randn({2, 3, 4, 4});
  CHECK(allclose(drop(img), img));
  drop.train();
  CHECK(drop(img).shape() == img.shape());
  CHECK(nn::PixelShuffle(2)(randn({1, 8, 3, 3})).shape() == Shape{1, 2, 6, 6});
  CHECK(nn::PixelUnshuffle(3)(randn({1, 2, 6, 3})).shape() == Shape{1, 18, 2, 1});
  CHECK(nn::Unflatten(1, {2, -1})(randn({5, 12, 3})).shape() == Shape{5, 2, 6, 3});
  CHECK(nn::Unflatten(-1, {3, 4})(randn({12})).shape() == Shape{3, 4});
  CHECK_THROWS_AS(nn::Unflatten(1, {5, -1})(randn({2, 12})), kiln::Error);
  CHECK_THROWS_AS(nn::Unflatten(1, {2, 5})(randn({2, 12})), kiln::Error);
  // padding modules are kiln::pad with PyTorch's argument order
  const Tensor im = randn({1, 2, 4, 5});
  CHECK(allclose(nn::ZeroPad2d({1})(im), pad(im, {1, 1, 1, 1})));
  CHECK(allclose(nn::ConstantPad2d({1, 2, 0, 3}, 0.5)(im), pad(im, {1, 2, 0, 3}, 0.5)));
  CHECK(allclose(nn::ReflectionPad2d({2, 1, 1, 3})(im), pad(im, {2, 1, 1, 3}, PadMode::reflect)));
  CHECK(allclose(nn::ReplicationPad1d({3, 0})(im.select(0, 0)), pad(im.select(0, 0), {3, 0}, PadMode::replicate)));
  CHECK(allclose(nn::CircularPad2d({1, 1, 2, 2})(im), pad(im, {1, 1, 2, 2}, PadMode::circular)));
  CHECK(nn::ReflectionPad3d({1})(randn({1, 2, 3, 3, 3})).shape() == Shape{1, 2, 5, 5, 5});
  CHECK(nn::ReflectionPad2d({1, 2, 3, 4}).extra_repr() == "padding=(1, 2, 3, 4)");
  CHECK_THROWS_AS(nn::ZeroPad2d({1, 2, 3}), kiln::Error);
  CHECK_THROWS_AS(nn::ZeroPad2d({1})(randn({4})), kiln::Error);
}

TEST_CASE("Unfold, Fold, LocalResponseNorm, ChannelShuffle, Bilinear, EmbeddingBag modules") {
  manual_seed(74);
  nn::Unfold un({.kernel_size = {2, 2}, .stride = {2, 2}});
  nn::Fold fo({4, 4}, {.kernel_size = {2, 2}, .stride = {2, 2}});
  const Tensor img = randn({2, 3, 4, 4});
  CHECK(un(img).shape() == Shape{2, 12, 4});
  CHECK(bitwise_equal(fo(un(img)), img));  // non-overlapping blocks: fold undoes unfold
  CHECK(nn::LocalResponseNorm(3)(img).shape() == img.shape());
  CHECK(nn::ChannelShuffle(3)(img).shape() == img.shape());
  nn::Bilinear bl(3, 2, 4);
  CHECK(bl.named_parameters().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(bl.weight.shape() == Shape{4, 3, 2});
  CHECK(max_abs(bl.weight) <= 1 / std::sqrt(3.0));
  CHECK(bl.forward(randn({5, 3}), randn({5, 2})).shape() == Shape{5, 4});
  nn::EmbeddingBag eb(10, 3, {.mode = EmbeddingBagMode::sum, .padding_idx = -1});
  CHECK(max_abs(eb.weight.select(0, 9)) == 0.0);
  const Tensor bags = from_vector(std::vector<int64_t>{1, 2, 9, 4}, {2, 2}, {.dtype = DType::int64});
  CHECK(allclose(eb(bags).select(0, 0), add(eb.weight.select(0, 1), eb.weight.select(0, 2))));
  CHECK(allclose(eb(bags).select(0, 1), eb.weight.select(0, 4)));
  CHECK_THROWS_AS(nn::EmbeddingBag(10, 3, {.padding_idx = 10}), kiln::Error);
  CHECK_THROWS_AS(nn::Bilinear(0, 2, 4), kiln::Error);
}

TEST_CASE("Conv3d, ConvTranspose1d, ConvTranspose3d, MaxPool3d, AvgPool3d, AdaptiveAvg/MaxPool3d, MaxUnpool2d modules") {
  manual_seed(82);
  nn::Conv3d c(2, 4, {3, 3, 3}, {.padding = {1, 1, 1}});
  CHECK(c.weight.shape() == Shape{4, 2, 3, 3, 3});
  CHECK(max_abs(c.weight) <= 1 / std::sqrt(54.0));
  CHECK(c(randn({1, 2, 4, 5, 6})).shape() == Shape{1, 4, 4, 5, 6});
  CHECK(check_layer(c, randn({1, 2, 2, 3, 2}, f64)));
  nn::ConvTranspose1d t(3, 2, 4, {.stride = 2, .padding = 1});
  CHECK(t.weight.shape() == Shape{3, 2, 4});
  CHECK(t(randn({2, 3, 5})).shape() == Shape{2, 2, 10});
  CHECK(nn::MaxPool3d({2, 2, 2})(randn({1, 1, 4, 4, 4})).shape() == Shape{1, 1, 2, 2, 2});
  CHECK(nn::AvgPool3d({2, 2, 2}, {1, 1, 1})(randn({1, 1, 3, 3, 3})).shape() == Shape{1, 1, 2, 2, 2});
  const Tensor img = randn({1, 2, 4, 4});
  auto [m, idx] = max_pool2d_with_indices(img, {2, 2});
  nn::MaxUnpool2d un(2);
  CHECK(un.forward(m, idx).shape() == Shape{1, 2, 4, 4});
  CHECK_THROWS_AS(nn::Conv3d(2, 4, {3, 3, 3}, {.groups = 3}), kiln::Error);
  // ConvTranspose3d: weight (in, out / groups, k...), PyTorch's init bound over fan_in = out/groups * k^3
  nn::ConvTranspose3d ct(4, 2, {2, 2, 2}, {.stride = {2, 2, 2}});
  CHECK(ct.weight.shape() == Shape{4, 2, 2, 2, 2});
  CHECK(max_abs(ct.weight) <= 1 / std::sqrt(16.0));
  CHECK(ct(randn({1, 4, 3, 4, 5})).shape() == Shape{1, 2, 6, 8, 10});  // a U-Net decoder's doubling
  CHECK(ct.extra_repr() == "4, 2, kernel_size=(2, 2, 2), stride=(2, 2, 2), bias=true");
  nn::ConvTranspose3d ct64(2, 2, {2, 1, 2}, {.padding = {0, 0, 1}, .groups = 2});
  ct64.to(DType::float64);
  CHECK(check_layer(ct64, randn({1, 2, 2, 2, 3}, f64)));
  CHECK(nn::AdaptiveAvgPool3d()(randn({2, 3, 4, 5, 6})).shape() == Shape{2, 3, 1, 1, 1});
  CHECK(nn::AdaptiveMaxPool3d({2, 3, 1})(randn({2, 3, 4, 5, 6})).shape() == Shape{2, 3, 2, 3, 1});
  CHECK(nn::LPPool2d(2.0, 2)(randn({1, 2, 4, 6})).shape() == Shape{1, 2, 2, 3});
  CHECK(nn::LPPool1d(2.0, 3, 1)(randn({1, 2, 6})).shape() == Shape{1, 2, 4});
}
