// Gradient accumulation: k micro-batches of size b with the loss scaled by 1/k give the
// gradients of one batch of size k*b (an MLP and a small GPT built from nn layers), and
// a plain SGD step on either leaves the same parameters.
#include <doctest/doctest.h>
#include <cmath>
#include "nn_test_utils.h"

using namespace kiln;
using namespace kiln::test;
namespace nn = kiln::nn;

namespace {

// A small GPT: token + learned position embeddings, transformer blocks, final
// LayerNorm, head without bias. (The real one lives in models/.)
struct TinyGPT : nn::Module {
  nn::Embedding wte, wpe;
  nn::ModuleList blocks;
  nn::LayerNorm ln_f;
  nn::Linear head;
  int64_t block_size;
  TinyGPT(int64_t vocab, int64_t block, int64_t d, int64_t heads, int64_t layers) : block_size(block) {
    wte = register_module("wte", nn::Embedding(vocab, d));
    wpe = register_module("wpe", nn::Embedding(block, d));
    blocks = register_module("blocks", nn::ModuleList{});
    for (int64_t i = 0; i < layers; ++i) blocks.push_back(nn::TransformerBlock(d, heads, {.causal = true}));
    ln_f = register_module("ln_f", nn::LayerNorm(d));
    head = register_module("head", nn::Linear(d, vocab, {.bias = false}));
  }
  // idx (B, T) int64 -> logits (B, T, vocab)
  Tensor forward(const Tensor& idx) override {
    const int64_t T = idx.size(1);
    Tensor pos = arange(0, double(T), 1, {.dtype = DType::int64});
    Tensor h = wte(idx) + wpe(pos);  // (B, T, d)
    for (auto& b : blocks) h = b(h);
    return head(ln_f(h));
  }
};

Tensor gpt_loss(TinyGPT& m, const Tensor& idx, const Tensor& tgt) {
  Tensor logits = m(idx);  // (B, T, V)
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), tgt.reshape({-1}));
}

double rel_diff(const Tensor& a, const Tensor& b) {
  Tensor d = (a.to(DType::float64) - b.to(DType::float64));
  double nd = std::sqrt(sum(d * d).item());
  double nb = std::sqrt(sum(b.to(DType::float64) * b.to(DType::float64)).item());
  return nd / (nb > 0 ? nb : 1.0);
}

void compare_grads(nn::Module& a, nn::Module& b, double tol) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (auto& entry : pa) {
    auto& name = entry.first;
    auto& p = entry.second;
    CAPTURE(name);
    Tensor ga = p.grad(), gb = pb.at(name).grad();
    REQUIRE(ga.defined());
    REQUIRE(gb.defined());
    CHECK(rel_diff(ga, gb) <= tol);
  }
}

void sgd_step(nn::Module& m, double lr) {
  NoGradGuard ng;
  for (auto& p : m.parameters()) p.add_(p.grad(), -lr);
}

void compare_params(nn::Module& a, nn::Module& b, double tol) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (auto& entry : pa) {
    auto& name = entry.first;
    auto& p = entry.second;
    CAPTURE(name);
    CHECK(rel_diff(p, pb.at(name)) <= tol);
  }
}

}  // namespace

TEST_CASE("MLP: accumulated micro-batch gradients equal the full-batch gradient") {
  for (DType dt : {DType::float32, DType::float64}) {
    CAPTURE(std::string(dtype_name(dt)));
    const int k = 4, b = 8;
    manual_seed(0);
    nn::Sequential full{nn::Linear(10, 32), nn::GELU(), nn::Linear(32, 32), nn::ReLU(), nn::Linear(32, 5)};
    nn::Sequential acc{nn::Linear(10, 32), nn::GELU(), nn::Linear(32, 32), nn::ReLU(), nn::Linear(32, 5)};
    acc.load_state_dict(full.state_dict());
    full.to(dt);
    acc.to(dt);
    Tensor X = randn({k * b, 10}, {.dtype = dt});
    Tensor Y = randint(0, 5, {k * b});

    cross_entropy(full(X), Y).backward();
    nn::GradAccumulator ga(k);
    int steps = 0;
    for (int i = 0; i < k; ++i) {
      Tensor loss = cross_entropy(acc(X.narrow(0, i * b, b)), Y.narrow(0, i * b, b));
      bool step = ga.backward(loss);
      CHECK(step == (i == k - 1));
      steps += step;
    }
    CHECK(steps == 1);
    CHECK(ga.micro_step() == 0);
    const double tol = dt == DType::float32 ? 1e-5 : 1e-12;
    compare_grads(full, acc, tol);
    sgd_step(full, 0.1);
    sgd_step(acc, 0.1);
    compare_params(full, acc, tol);
  }
}

TEST_CASE("small GPT: accumulated micro-batch gradients equal the full-batch gradient") {
  for (DType dt : {DType::float32, DType::float64}) {
    CAPTURE(std::string(dtype_name(dt)));
    const int k = 3, b = 2, T = 8, V = 13;
    manual_seed(1);
    TinyGPT full(V, T, 16, 2, 2);
    TinyGPT acc(V, T, 16, 2, 2);
    acc.load_state_dict(full.state_dict());
    full.to(dt);
    acc.to(dt);
    CHECK(full.named_parameters().contains("blocks.1.attn.qkv.weight"));
    Tensor idx = randint(0, V, {k * b, T});
    Tensor tgt = randint(0, V, {k * b, T});

    double full_loss = gpt_loss(full, idx, tgt).item();
    gpt_loss(full, idx, tgt).backward();
    double mean_loss = nn::accumulate_gradients(k, [&](int i) {
      return gpt_loss(acc, idx.narrow(0, i * b, b), tgt.narrow(0, i * b, b));
    });
    CHECK(mean_loss == doctest::Approx(full_loss).epsilon(1e-5));
    const double tol = dt == DType::float32 ? 1e-5 : 1e-12;
    compare_grads(full, acc, tol);
    sgd_step(full, 0.05);
    sgd_step(acc, 0.05);
    compare_params(full, acc, tol);
  }
}

TEST_CASE("GradAccumulator API") {
  nn::GradAccumulator a(3);
  CHECK(a.accum_steps() == 3);
  Tensor l = full({}, 6.0);
  CHECK(a.scale(l).item() == 2.0);
  CHECK_FALSE(a.count());
  CHECK(a.micro_step() == 1);
  a.reset();
  CHECK_FALSE(a.count());
  CHECK_FALSE(a.count());
  CHECK(a.count());
  CHECK_THROWS_AS(nn::GradAccumulator(0), kiln::Error);
  CHECK_THROWS_AS(nn::accumulate_gradients(2, [](int) { return zeros({2}); }), kiln::Error);
}
