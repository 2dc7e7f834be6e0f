// Tests of the reference models (models/): forward shapes, parameter names and counts,
// loss decreasing on a tiny fixed batch, and GPT generation (length, range, seeding, greedy).
#include <doctest/doctest.h>
#include <vector>
#include "kiln/kiln.h"
#include "kiln/models/models.h"

using namespace kiln;
namespace nn = kiln::nn;
namespace models = kiln::models;

namespace {

/// Trains `model` for `steps` steps on (x, y) with cross-entropy; returns the losses.
template <class M, class Opt>
std::vector<double> train_steps(M& model, Opt& opt, const Tensor& x, const Tensor& y, int steps,
                                bool flatten_seq = false) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor logits = model(x);
    Tensor loss = flatten_seq ? cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}))
                              : cross_entropy(logits, y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  return losses;
}

void check_decreases(const std::vector<double>& l) {
  INFO("first loss " << l.front() << ", last loss " << l.back());
  CHECK(l.back() < 0.5 * l.front());
}

}  // namespace

TEST_CASE("MLP: shape, names, training") {
  manual_seed(0);
  models::MLP m({.in = 8, .hidden = {16, 12}, .out = 4});
  auto names = m.named_parameters();
  CHECK(names.size() == 6);
  CHECK(names.contains("net.0.weight"));
  CHECK(names.contains("net.4.bias"));
  CHECK(m.num_parameters() == 8 * 16 + 16 + 16 * 12 + 12 + 12 * 4 + 4);
  Tensor x = randn({5, 8});
  CHECK(m(x).shape() == Shape{5, 4});
  CHECK_THROWS_AS(m(randn({5, 7})), kiln::Error);
  Tensor y = from_vector<int64_t>({0, 1, 2, 3, 1}, {5});
  optim::SGD opt(m.parameters(), {.lr = 0.1, .momentum = 0.9});
  check_decreases(train_steps(m, opt, x, y, 20));
}

TEST_CASE("LeNet5: shape, parameter count, training") {
  manual_seed(1);
  models::LeNet5 m;
  CHECK(m.num_parameters() == 61706);
  Tensor x = randn({4, 1, 28, 28});
  CHECK(m(x).shape() == Shape{4, 10});
  CHECK_THROWS_AS(m(randn({4, 1, 32, 32})), kiln::Error);
  Tensor y = from_vector<int64_t>({3, 7, 1, 0}, {4});
  optim::AdamW opt(m.parameters(), {.lr = 3e-3});
  check_decreases(train_steps(m, opt, x, y, 20));
}

TEST_CASE("ConvNet: shape, names, training (train-mode batch norm)") {
  manual_seed(2);
  models::ConvNet m;
  auto names = m.named_parameters();
  CHECK(names.contains("features.0.weight"));
  CHECK(!names.contains("features.0.bias"));
  CHECK(names.contains("features.1.weight"));  // BatchNorm2d
  CHECK(names.contains("classifier.1.weight"));
  CHECK(names.at("classifier.1.weight").shape() == Shape{128, 3136});
  Tensor x = randn({4, 1, 28, 28});
  CHECK(m(x).shape() == Shape{4, 10});
  Tensor y = from_vector<int64_t>({3, 7, 1, 0}, {4});
  optim::AdamW opt(m.parameters(), {.lr = 3e-3});
  check_decreases(train_steps(m, opt, x, y, 20));
  m.eval();
  CHECK(m(x).shape() == Shape{4, 10});
}

TEST_CASE("ResNet20: shape, structure, parameter count") {
  manual_seed(3);
  models::ResNet20 m;
  // 0.27M parameters with projection shortcuts (He et al. report 0.27M for option A).
  auto names = m.named_parameters();
  CHECK(names.contains("layer1.0.conv1.weight"));
  CHECK(!names.contains("layer1.0.shortcut.0.weight"));
  CHECK(names.contains("layer2.0.shortcut.0.weight"));
  CHECK(names.contains("layer3.0.shortcut.1.weight"));
  CHECK(names.at("fc.weight").shape() == Shape{10, 64});
  CHECK(m.num_parameters() > 265000);
  CHECK(m.num_parameters() < 280000);
  Tensor x = randn({2, 3, 32, 32});
  CHECK(m(x).shape() == Shape{2, 10});
}

TEST_CASE("ResNet20 (narrow): training") {
  manual_seed(4);
  models::ResNet20 m({.num_classes = 4, .blocks_per_stage = 1, .base_width = 4});
  Tensor x = randn({4, 3, 16, 16});
  Tensor y = from_vector<int64_t>({0, 1, 2, 3}, {4});
  optim::AdamW opt(m.parameters(), {.lr = 1e-2});
  check_decreases(train_steps(m, opt, x, y, 20));
}

namespace {
models::GPTConfig tiny_gpt(bool tie) {
  return {.vocab = 11, .context = 8, .layers = 2, .heads = 2, .width = 16, .dropout = 0.0, .tie_weights = tie};
}
}  // namespace

TEST_CASE("GPT: shapes, names, weight tying") {
  manual_seed(5);
  models::GPT tied(tiny_gpt(true)), untied(tiny_gpt(false));
  CHECK(untied.num_parameters() == tied.num_parameters() + 11 * 16);
  CHECK(!tied.named_parameters().contains("head.weight"));
  CHECK(untied.named_parameters().contains("head.weight"));
  CHECK(tied.named_parameters().contains("blocks.1.attn.qkv.weight"));
  Tensor idx = randint(0, 11, {2, 8});
  Tensor logits = tied(idx);
  CHECK(logits.shape() == Shape{2, 8, 11});
  CHECK(untied(idx.narrow(1, 0, 5)).shape() == Shape{2, 5, 11});
  CHECK_THROWS_AS(tied(randint(0, 11, {2, 9})), kiln::Error);  // longer than the context
  CHECK_THROWS_AS(tied(randint(0, 11, {8})), kiln::Error);
  // Tied: the token embedding gets the head's gradient as well.
  cross_entropy(logits.reshape({-1, 11}), idx.reshape({-1})).backward();
  CHECK(tied.wte.weight.grad().defined());
  CHECK(tied.head_weight().raw_data() == tied.wte.weight.raw_data());
}

TEST_CASE("GPT: causal (logits at t do not depend on later tokens)") {
  manual_seed(6);
  models::GPT m(tiny_gpt(true));
  Tensor a = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {1, 6});
  Tensor b = from_vector<int64_t>({1, 2, 3, 9, 9, 9}, {1, 6});
  auto la = m(a).narrow(1, 0, 3).contiguous().to_vector<float>();
  auto lb = m(b).narrow(1, 0, 3).contiguous().to_vector<float>();
  REQUIRE(la.size() == lb.size());
  for (size_t i = 0; i < la.size(); ++i) CHECK(la[i] == doctest::Approx(lb[i]).epsilon(1e-5));
}

TEST_CASE("GPT: training on a fixed batch") {
  manual_seed(7);
  models::GPT m(tiny_gpt(true));
  Tensor x = randint(0, 11, {2, 8});
  Tensor y = randint(0, 11, {2, 8});
  optim::AdamW opt(m.parameters(), {.lr = 1e-2});
  check_decreases(train_steps(m, opt, x, y, 30, true));
}

TEST_CASE("GPT: generate") {
  manual_seed(8);
  models::GPT m(tiny_gpt(true));
  m.eval();
  Tensor prompt = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor out = m.generate(prompt, 12);  // longer than the context: cropping is exercised
  REQUIRE(out.shape() == Shape{2, 15});
  CHECK(out.dtype() == DType::int64);
  auto toks = out.to_vector<int64_t>();
  for (int64_t t : toks) {
    CHECK(t >= 0);
    CHECK(t < 11);
  }
  CHECK(toks[0] == 1);  // the prompt is kept
  CHECK(toks[15 + 2] == 6);

  SUBCASE("same seed, same tokens") {
    manual_seed(42);
    auto a = m.generate(prompt, 10, 1.0, 5).to_vector<int64_t>();
    manual_seed(42);
    auto b = m.generate(prompt, 10, 1.0, 5).to_vector<int64_t>();
    CHECK(a == b);
    manual_seed(42);  // top_p = 1 keeps every token: the same draws
    auto c = m.generate(prompt, 10, 1.0, 5, 1.0).to_vector<int64_t>();
    CHECK(a == c);
    CHECK_THROWS_AS(m.generate(prompt, 1, 1.0, std::nullopt, 0.0), kiln::Error);
    CHECK_THROWS_AS(m.generate(prompt, 1, 1.0, std::nullopt, 1.5), kiln::Error);
  }
  SUBCASE("top_k = 1 and temperature -> 0 are greedy argmax decoding") {
    Tensor g1 = m.generate(prompt, 10, 1.0, 1);
    Tensor g2 = m.generate(prompt, 10, 1e-6);
    Tensor g3 = m.generate(prompt, 10, 0.0);
    Tensor g4 = m.generate(prompt, 10, 1.0, std::nullopt, 1e-9);  // a nucleus of one token
    // Reference greedy decoding with argmax over the last logits.
    Tensor ref = prompt;
    {
      NoGradGuard ng;
      for (int i = 0; i < 10; ++i) {
        Tensor ctx = ref.size(1) > 8 ? ref.narrow(1, ref.size(1) - 8, 8) : ref;
        Tensor last = m(ctx).narrow(1, ctx.size(1) - 1, 1).reshape({2, 11});
        ref = cat({ref, argmax(last, 1, true)}, 1);
      }
    }
    auto r = ref.contiguous().to_vector<int64_t>();
    CHECK(g1.to_vector<int64_t>() == r);
    CHECK(g2.to_vector<int64_t>() == r);
    CHECK(g3.to_vector<int64_t>() == r);
    CHECK(g4.to_vector<int64_t>() == r);
  }
  SUBCASE("bad arguments") {
    CHECK_THROWS_AS(m.generate(prompt, -1), kiln::Error);
    CHECK_THROWS_AS(m.generate(prompt, 3, 1.0, 0), kiln::Error);
    CHECK_THROWS_AS(m.generate(from_vector<int64_t>({1, 11}, {1, 2}), 3), kiln::Error);
  }
  CHECK(m.generate(prompt, 0).shape() == Shape{2, 3});
}
