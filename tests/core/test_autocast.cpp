// Autocast: the thread-local scope (nesting, disabling, bad dtypes, other threads), the
// casting helpers and their gradients, and (once ops call the helpers) the dtypes and
// values of linear/matmul (low precision) and softmax/log_softmax/cross_entropy (float32),
// and a CNN's dtypes from convolution to loss (batch norm, relu, pooling in bf16).
#include <doctest/doctest.h>
#include <cmath>
#include <thread>
#include <vector>
#include "gradcheck.h"

using namespace kiln;

TEST_CASE("autocast scope: enabled flag, dtype, nesting and the disabled form") {
  CHECK(!autocast_enabled());
  {
    autocast outer(DType::bfloat16);
    CHECK(autocast_enabled());
    CHECK(autocast_dtype() == DType::bfloat16);
    {
      amp::autocast inner(DType::float16);  // the kiln::amp spelling
      CHECK(autocast_enabled());
      CHECK(autocast_dtype() == DType::float16);
      {
        autocast off(DType::float16, false);
        CHECK(!autocast_enabled());
      }
      CHECK(autocast_enabled());
      CHECK(autocast_dtype() == DType::float16);
    }
    CHECK(autocast_dtype() == DType::bfloat16);
    // other threads have their own state
    bool other = true;
    std::thread t([&] { other = autocast_enabled(); });
    t.join();
    CHECK(!other);
  }
  CHECK(!autocast_enabled());
  CHECK_THROWS_WITH_AS(autocast{DType::float32}, doctest::Contains("float16 or bfloat16"), kiln::Error);
  CHECK_THROWS_AS(set_autocast_dtype(DType::int64), kiln::Error);
  CHECK(!autocast_enabled());
}

TEST_CASE("autocast_to_low / autocast_to_fp32 cast only eligible tensors, only when enabled") {
  Tensor f32 = randn({3, 2}), f64 = randn({2}, {.dtype = DType::float64});
  Tensor i64 = from_vector(std::vector<int64_t>{1, 2}), b16 = randn({2}).to(DType::bfloat16);
  CHECK(autocast_to_low(f32).is_same(f32));  // disabled: untouched
  CHECK(autocast_to_fp32(b16).is_same(b16));
  CHECK(!autocast_wants_low({f32}));
  {
    autocast guard(DType::bfloat16);
    CHECK(autocast_to_low(f32).dtype() == DType::bfloat16);
    CHECK(autocast_to_low(f64).is_same(f64));
    CHECK(autocast_to_low(i64).is_same(i64));
    CHECK(autocast_to_low(b16).is_same(b16));
    CHECK(!autocast_to_low(Tensor()).defined());
    CHECK(autocast_to_fp32(b16).dtype() == DType::float32);
    CHECK(autocast_to_fp32(f32).is_same(f32));
    CHECK(autocast_to_fp32(f64).is_same(f64));
    CHECK(autocast_wants_low({f64, f32}));
    CHECK(!autocast_wants_low({f64, b16, Tensor()}));
    CHECK(autocast_wants_fp32({f32, b16}));
    CHECK(!autocast_wants_fp32({f32, f64}));
    // values are rounded to nearest even
    auto v = autocast_to_low(f32).to_vector<float>();
    auto o = f32.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == round_to_bf16(o[i]));
  }
  {
    autocast guard(DType::float16);
    CHECK(autocast_to_low(f32).dtype() == DType::float16);
    // the other 16-bit dtype is cast too (PyTorch's is_eligible); float16 stays as it is
    CHECK(autocast_to_low(b16).dtype() == DType::float16);
    CHECK(autocast_wants_low({f64, b16}));
    const Tensor h = b16.to(DType::float16);
    CHECK(autocast_to_low(h).is_same(h));
  }
  {
    // a float16 activation meeting float32 weights under bf16 autocast runs in bf16 (was a
    // dtype-mismatch error)
    autocast guard(DType::bfloat16);
    Tensor x = randn({4, 3}).to(DType::float16), w = randn({2, 3});
    CHECK(linear(x, w).dtype() == DType::bfloat16);
    CHECK(matmul(x, w.t()).dtype() == DType::bfloat16);
    CHECK(matmul(x, x.t()).dtype() == DType::bfloat16);
  }
}

TEST_CASE("autocast casts are differentiable: gradients reach float32 leaves in float32") {
  Tensor w = randn({4});
  w.requires_grad_();
  Tensor loss;
  {
    autocast guard(DType::bfloat16);
    Tensor low = autocast_to_low(w);
    REQUIRE(low.dtype() == DType::bfloat16);
    loss = sum(autocast_to_fp32(low) * 3.0);
  }
  loss.backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::float32);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{3, 3, 3, 3});
}

// ---- ops under autocast: these need the autocast lines in the ops (see the optim report) ----

TEST_CASE("linear and matmul under bf16 autocast: bfloat16 out, bf16-rounded inputs, fp32 accumulation") {
  manual_seed(5);
  Tensor x = randn({5, 7}), W = randn({3, 7}), b = randn({3});
  W.requires_grad_();
  b.requires_grad_();
  Tensor y;
  {
    autocast guard(DType::bfloat16);
    y = linear(x, W, b);
  }
  CHECK(y.dtype() == DType::bfloat16);
  // reference: the same op on explicitly rounded inputs, and a naive fp64 sum of the
  // rounded products (within one bf16 rounding of the fp32 accumulation)
  Tensor ref = linear(x.to(DType::bfloat16), W.detach().to(DType::bfloat16), b.detach().to(DType::bfloat16));
  CHECK(y.to_vector<float>() == ref.to_vector<float>());
  auto xv = x.to(DType::bfloat16).to_vector<double>(), wv = W.detach().to(DType::bfloat16).to_vector<double>();
  auto bv = b.detach().to(DType::bfloat16).to_vector<double>();
  auto yv = y.to_vector<double>();
  for (int i = 0; i < 5; ++i)
    for (int o = 0; o < 3; ++o) {
      double acc = bv[size_t(o)];
      for (int k = 0; k < 7; ++k) acc += xv[size_t(i * 7 + k)] * wv[size_t(o * 7 + k)];
      const double got = yv[size_t(i * 3 + o)];
      CHECK(std::fabs(got - acc) <= std::fabs(acc) * (1.0 / 256) + 1e-6);
      CHECK(got == double(round_to_bf16(float(got))));  // representable in bf16
    }
  // gradient reaches the float32 master weight as float32
  sum(y.to(DType::float32)).backward();
  REQUIRE(W.grad().defined());
  CHECK(W.grad().dtype() == DType::float32);
  CHECK(b.grad().dtype() == DType::float32);

  Tensor m;
  {
    autocast guard(DType::float16);
    m = matmul(x, W.detach().t());
  }
  CHECK(m.dtype() == DType::float16);
  {
    autocast off(DType::bfloat16, false);
    CHECK(linear(x, W.detach(), b.detach()).dtype() == DType::float32);
  }
}

TEST_CASE("softmax / log_softmax / cross_entropy under autocast return float32") {
  manual_seed(6);
  Tensor logits = randn({4, 3});
  Tensor target = from_vector(std::vector<int64_t>{0, 2, 1, 2});
  autocast guard(DType::bfloat16);
  Tensor low = autocast_to_low(logits);
  CHECK(softmax(low, 1).dtype() == DType::float32);
  CHECK(log_softmax(low, 1).dtype() == DType::float32);
  CHECK(softmax(logits, 1).dtype() == DType::float32);
  Tensor ce = cross_entropy(low, target);
  CHECK(ce.dtype() == DType::float32);
  // the fp32 computation on the bf16 values
  autocast off(DType::bfloat16, false);
  Tensor ref = cross_entropy(low.to(DType::float32), target);
  CHECK(ce.item() == doctest::Approx(ref.item()).epsilon(1e-6));
  // an MLP head: linear (bf16) then cross_entropy (fp32)
  Tensor W = randn({3, 3});
  W.requires_grad_();
  Tensor loss;
  {
    autocast on(DType::bfloat16);
    loss = cross_entropy(linear(logits, W), target);
  }
  CHECK(loss.dtype() == DType::float32);
  loss.backward();
  CHECK(W.grad().dtype() == DType::float32);
}

TEST_CASE("a CNN under bf16 autocast: PyTorch's dtypes from the convolution to the loss") {
  // torch.autocast("cpu", torch.bfloat16) over conv2d -> batch_norm -> relu -> max_pool2d ->
  // linear -> cross_entropy gives bf16, bf16, bf16, bf16, bf16 and a float32 loss, and
  // float32 gradients for the float32 parameters (checked against PyTorch 2.15). Batch norm
  // keeps float32 statistics and parameters.
  manual_seed(7);
  Tensor x = randn({2, 3, 8, 8});
  Tensor w = (randn({4, 3, 3, 3}) * 0.2).requires_grad_(), gamma = ones({4}).requires_grad_();
  Tensor beta = zeros({4}).requires_grad_(), W = (randn({10, 64}) * 0.1).requires_grad_();
  Tensor rm = zeros({4}), rv = ones({4});
  Tensor y, z, r, p, logits, loss;
  {
    autocast guard(DType::bfloat16);
    y = conv2d(x, w, Tensor(), {.padding = {1, 1}});
    z = batch_norm(y, gamma, beta, rm, rv, true, 0.1, 1e-5);
    r = relu(z);
    p = max_pool2d(r, {2, 2});
    logits = linear(p.reshape({2, 64}), W);
    loss = cross_entropy(logits, from_vector(std::vector<int64_t>{1, 7}));
  }
  for (const Tensor& t : {y, z, r, p, logits}) CHECK(t.dtype() == DType::bfloat16);
  CHECK(loss.dtype() == DType::float32);
  CHECK(rm.dtype() == DType::float32);
  CHECK(kiln::test::max_abs_diff(rm, zeros({4})) > 0.0);  // the running mean moved
  loss.backward();
  for (const Tensor& t : {w, gamma, beta, W}) {
    REQUIRE(t.grad().defined());
    CHECK(t.grad().dtype() == DType::float32);
  }
}
