// Tests of activation checkpointing: gradients bitwise equal to the plain run (dropout
// included), nested checkpoints, inputs that need no grad, several inputs, the
// nn::Checkpoint wrapper and the RNG state after backward.
#include <doctest/doctest.h>
#include "nn_test_utils.h"

using namespace kiln;
using namespace kiln::test;
namespace nn = kiln::nn;

namespace {

struct Grads {
  Tensor out;
  Tensor input_grad;
  std::vector<Tensor> param_grads;
  RngState rng_after;
};

// Runs loss = sum(f(x) * R) forward and backward from a fixed seed and collects grads.
template <class F>
Grads run(nn::Module& m, const Tensor& x_in, const Tensor& R, bool x_requires_grad, F&& f) {
  m.zero_grad();
  Tensor x = x_in.detach();
  if (x_requires_grad) x.requires_grad_();
  manual_seed(1234);
  Tensor out = f(x);
  sum(out * R).backward();
  Grads g;
  g.out = out.detach();
  g.input_grad = x_requires_grad ? x.grad() : Tensor();
  for (auto& p : m.parameters()) g.param_grads.push_back(p.grad());
  g.rng_after = get_rng_state();
  return g;
}

void check_same(const Grads& a, const Grads& b) {
  CHECK(bitwise_equal(a.out, b.out));
  CHECK(bitwise_equal(a.input_grad, b.input_grad));
  REQUIRE(a.param_grads.size() == b.param_grads.size());
  for (size_t i = 0; i < a.param_grads.size(); ++i) {
    CAPTURE(i);
    REQUIRE(a.param_grads[i].defined());
    CHECK(bitwise_equal(a.param_grads[i], b.param_grads[i]));
  }
  CHECK(a.rng_after.seed == b.rng_after.seed);
  CHECK(a.rng_after.offset == b.rng_after.offset);
}

}  // namespace

TEST_CASE("checkpointed TransformerBlock with dropout: gradients bitwise equal") {
  manual_seed(0);
  nn::TransformerBlock blk(16, 2, {.causal = true, .dropout = 0.1});
  Tensor x = randn({2, 6, 16});
  Tensor R = randn({2, 6, 16});
  Grads plain = run(blk, x, R, true, [&](const Tensor& h) { return blk(h); });
  Grads ck_mod = run(blk, x, R, true, [&](const Tensor& h) { return checkpoint(blk, h); });
  Grads ck_fn = run(blk, x, R, true, [&](const Tensor& h) {
    return checkpoint([&](const Tensor& a) { return blk(a); }, h);
  });
  nn::Checkpoint wrapped(blk);
  Grads ck_wrap = run(blk, x, R, true, [&](const Tensor& h) { return wrapped(h); });
  check_same(plain, ck_mod);
  check_same(plain, ck_fn);
  check_same(plain, ck_wrap);
  // dropout really was active: a different seed changes the output
  manual_seed(99);
  CHECK_FALSE(bitwise_equal(blk(x), plain.out));
}

TEST_CASE("checkpointing under autocast replays the forward's dtypes") {
  manual_seed(0);
  nn::TransformerBlock blk(16, 2, {.causal = true, .dropout = 0.1});
  Tensor x = randn({2, 6, 16});
  Tensor R = randn({2, 6, 16});
  for (DType dt : {DType::bfloat16, DType::float16}) {
    auto under_amp = [&](auto&& f) {
      return [&, f](const Tensor& h) {
        autocast guard(dt);
        return f(h);
      };
    };
    Grads plain = run(blk, x, R, true, under_amp([&](const Tensor& h) { return blk(h); }));
    Grads ck = run(blk, x, R, true, under_amp([&](const Tensor& h) { return checkpoint(blk, h); }));
    check_same(plain, ck);
    for (const Tensor& g : ck.param_grads) CHECK(g.dtype() == DType::float32);  // fp32 master grads
  }
}

TEST_CASE("the checkpointed output has a node whose saved state is just the inputs") {
  manual_seed(1);
  nn::Linear l(4, 4);
  Tensor x = randn({2, 4}, {.requires_grad = true});
  Tensor y = checkpoint(l, x);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name == "checkpoint");
  CHECK(y.grad_fn()->next.size() == 3);  // x, weight, bias
  {
    NoGradGuard ng;
    Tensor z = checkpoint(l, x);
    CHECK_FALSE(z.requires_grad());
  }
}

TEST_CASE("nested checkpoints") {
  manual_seed(2);
  nn::TransformerBlock b1(8, 2, {.causal = true, .dropout = 0.1}), b2(8, 2, {.causal = true, .dropout = 0.1});
  nn::Sequential both{b1, b2};
  Tensor x = randn({2, 5, 8});
  Tensor R = randn({2, 5, 8});
  Grads plain = run(both, x, R, true, [&](const Tensor& h) { return b2(b1(h)); });
  auto nested = [&](const Tensor& h) {
    return checkpoint(
        [&](const Tensor& a) {
          Tensor m = checkpoint(b1, a);
          return checkpoint([&](const Tensor& c) { return b2(c); }, m);
        },
        h);
  };
  Grads ck = run(both, x, R, true, nested);
  check_same(plain, ck);
  // a Sequential of checkpointed blocks, itself checkpointed
  nn::Sequential wrapped{nn::Checkpoint(b1), nn::Checkpoint(b2)};
  CHECK(wrapped.named_parameters().keys() == both.named_parameters().keys());
  Grads ck2 = run(both, x, R, true, [&](const Tensor& h) { return checkpoint(wrapped, h); });
  check_same(plain, ck2);
}

TEST_CASE("checkpointing a function whose inputs need no grad still gives parameter grads") {
  manual_seed(3);
  nn::TransformerBlock blk(8, 2, {.causal = true, .dropout = 0.1});
  Tensor x = randn({2, 4, 8});
  Tensor R = randn({2, 4, 8});
  Grads plain = run(blk, x, R, false, [&](const Tensor& h) { return blk(h); });
  // module overload (parameters known)
  Grads ck_mod = run(blk, x, R, false, [&](const Tensor& h) {
    Tensor y = checkpoint(blk, h);
    CHECK(y.requires_grad());
    return y;
  });
  // plain callable (parameters found by the first run)
  Grads ck_fn = run(blk, x, R, false, [&](const Tensor& h) {
    Tensor y = checkpoint([&](const Tensor& a) { return blk(a); }, h);
    CHECK(y.requires_grad());
    return y;
  });
  nn::Checkpoint wrapped(blk);
  Grads ck_wrap = run(blk, x, R, false, [&](const Tensor& h) { return wrapped(h); });
  check_same(plain, ck_mod);
  check_same(plain, ck_fn);
  check_same(plain, ck_wrap);

  // integer inputs (token ids) into an embedding inside the checkpoint
  nn::Embedding emb(10, 8);
  Tensor idx = from_vector<int64_t>({1, 2, 3, 9, 0, 0, 5, 7}, {2, 4});
  emb.zero_grad();
  sum(emb(idx) * R).backward();
  Tensor g_plain = emb.weight.grad().clone();
  emb.zero_grad();
  Tensor y = checkpoint([&](const Tensor& i) { return emb(i); }, idx);
  REQUIRE(y.requires_grad());
  sum(y * R).backward();
  CHECK(bitwise_equal(emb.weight.grad(), g_plain));

  // nothing needs grad at all: a plain tensor comes back
  nn::Linear frozen(8, 8);
  for (auto& p : frozen.parameters()) p.requires_grad_(false);
  CHECK_FALSE(checkpoint([&](const Tensor& a) { return frozen(a); }, x).requires_grad());
  CHECK_FALSE(checkpoint(frozen, x).requires_grad());
}

TEST_CASE("several inputs, some needing grad, used more than once") {
  manual_seed(4);
  nn::Linear l(3, 3);
  Tensor a0 = randn({2, 3}), b0 = randn({2, 3}), c0 = randn({2, 3});
  auto f = [&](const Tensor& a, const Tensor& b, const Tensor& c) { return tanh(l(a)) * b + c * a; };
  auto go = [&](bool ck) {
    l.zero_grad();
    Tensor a = a0.detach().requires_grad_(), b = b0.detach(), c = c0.detach().requires_grad_();
    Tensor y = ck ? checkpoint(f, a, b, c) : f(a, b, c);
    Tensor loss = sum(y * y) + sum(y);  // y used twice downstream
    loss.backward();
    return std::vector<Tensor>{a.grad(), c.grad(), l.weight.grad(), l.bias.grad()};
  };
  auto plain = go(false), ck = go(true);
  for (size_t i = 0; i < plain.size(); ++i) CHECK(bitwise_equal(plain[i], ck[i]));
  // gradcheck through checkpoint in float64
  l.to(DType::float64);
  CHECK(gradcheck([&](std::vector<Tensor>& in) { return checkpoint(f, in[0], in[1], in[2]); },
                  {randn({2, 3}, f64), randn({2, 3}, f64), randn({2, 3}, f64)}));
}

TEST_CASE("retain_graph: a checkpoint can be backpropagated twice") {
  manual_seed(5);
  nn::Linear l(3, 2);
  Tensor x = randn({4, 3}, {.requires_grad = true});
  Tensor loss = sum(checkpoint(l, x));
  loss.backward(Tensor(), true);
  Tensor g1 = l.weight.grad().clone();
  loss.backward();
  CHECK(allclose(l.weight.grad(), g1 * 2.0));
  CHECK_THROWS_AS(loss.backward(), kiln::Error);
}

TEST_CASE("checkpoint: BatchNorm counts a batch once (running stats are not updated again in the recomputation)") {
  manual_seed(3);
  nn::Sequential ref{nn::Conv2d(2, 3, 3, {.padding = 1}), nn::BatchNorm2d(3), nn::ReLU()};
  nn::Sequential ck{nn::Conv2d(2, 3, 3, {.padding = 1}), nn::BatchNorm2d(3), nn::ReLU()};
  ck.load_state_dict(ref.state_dict());
  Tensor x = randn({4, 2, 5, 5});
  sum(ref(x)).backward();
  sum(kiln::checkpoint(ck, x)).backward();
  auto bn_ref = ref.get<nn::BatchNorm2d>(1), bn_ck = ck.get<nn::BatchNorm2d>(1);
  CHECK(bn_ck.num_batches_tracked.item() == 1);
  CHECK(max_abs_diff(bn_ck.running_mean, bn_ref.running_mean) == 0);
  CHECK(max_abs_diff(bn_ck.running_var, bn_ref.running_var) == 0);
  CHECK(max_abs_diff(ck.get<nn::Conv2d>(0).weight.grad(), ref.get<nn::Conv2d>(0).weight.grad()) < 1e-6);
  // In eval mode the running statistics are used, checkpointed or not.
  ref.eval();
  ck.eval();
  CHECK(max_abs_diff(ck(x), ref(x)) == 0);
}

TEST_CASE("kiln::grad through a checkpoint: the parameters' gradients come back, no .grad is written") {
  manual_seed(4);
  nn::Linear lin(5, 3);
  Tensor x = randn({4, 5}, {.requires_grad = true});
  Tensor R = randn({4, 3});
  const Tensor w = lin.weight;
  auto loss_plain = [&] { return sum(tanh(lin(x)) * R); };
  const std::vector<Tensor> want = kiln::grad({loss_plain()}, {x, w});
  nn::Checkpoint wrapped(lin);
  const std::vector<std::function<Tensor()>> forms = {
      [&] { return sum(checkpoint([&](const Tensor& a) { return tanh(lin(a)); }, x) * R); },  // callable
      [&] { return sum(tanh(checkpoint(lin, x)) * R); },                                      // module
      [&] { return sum(tanh(wrapped(x)) * R); }};                                             // wrapper
  for (size_t k = 0; k < forms.size(); ++k) {
    CAPTURE(k);
    lin.zero_grad();
    x.set_grad(Tensor());
    const std::vector<Tensor> got = kiln::grad({forms[k]()}, {x, w});  // w's was undefined: "not used"
    REQUIRE(got[1].defined());
    CHECK(max_abs_diff(got[0], want[0]) == 0);
    CHECK(max_abs_diff(got[1], want[1]) == 0);
    CHECK_FALSE(w.grad().defined());  // was filled by the checkpoint's inner backward
    CHECK_FALSE(lin.bias.grad().defined());
    CHECK_FALSE(x.grad().defined());
  }
  // backward(): a parameter's hooks run once, with its whole gradient
  int calls = 0;
  const int64_t id = w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  lin.zero_grad();
  sum(tanh(checkpoint(lin, x)) * R).backward();
  CHECK(calls == 1);
  CHECK(max_abs_diff(w.grad(), want[1]) == 0);
  Tensor(w).remove_hook(id);
}
