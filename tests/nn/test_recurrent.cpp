// LSTM and GRU (nn/recurrent.h): PyTorch's parameter names and shapes, one step against
// the gate equations written out, batch_first and initial states, float64 gradchecks
// through time over the inputs and every parameter, and errors.
#include <doctest/doctest.h>
#include "kiln/nn/recurrent.h"
#include "nn_test_utils.h"

using namespace kiln;
using namespace kiln::test;
namespace nn = kiln::nn;

namespace {
Tensor sig(const Tensor& t) { return sigmoid(t); }
}  // namespace

TEST_CASE("LSTM / GRU: parameters as PyTorch names and shapes them") {
  nn::LSTM lstm(3, 5, {.num_layers = 2});
  const auto names = lstm.named_parameters();
  CHECK(names.size() == 8);
  CHECK(names.at("weight_ih_l0").shape() == Shape{20, 3});
  CHECK(names.at("weight_hh_l0").shape() == Shape{20, 5});
  CHECK(names.at("weight_ih_l1").shape() == Shape{20, 5});
  CHECK(names.at("bias_hh_l1").shape() == Shape{20});
  for (const auto& p : lstm.parameters()) CHECK(max(abs(p)).item() <= 1 / std::sqrt(5.0));
  nn::GRU gru(3, 4, {.bias = false});
  CHECK(gru.parameters().size() == 2);
  CHECK(gru.named_parameters().at("weight_ih_l0").shape() == Shape{12, 3});
  CHECK(lstm.str().find("num_layers=2") != std::string::npos);
}

TEST_CASE("LSTM / GRU: one step equals the gate equations; batch_first; state in and out") {
  manual_seed(21);
  const int64_t N = 2, I = 3, H = 4;
  const Tensor x = randn({1, N, I}, f64);
  nn::LSTM lstm(I, H);
  lstm.to(DType::float64);
  const Tensor h0 = randn({1, N, H}, f64), c0 = randn({1, N, H}, f64);
  auto [out, st] = lstm.forward_with_state(x, {h0, c0});
  const Tensor gates = add(linear(x.select(0, 0), lstm.weight_ih[0], lstm.bias_ih[0]),
                           linear(h0.select(0, 0), lstm.weight_hh[0], lstm.bias_hh[0]));
  const Tensor c1 = add(mul(sig(gates.narrow(1, H, H)), c0.select(0, 0)),
                        mul(sig(gates.narrow(1, 0, H)), tanh(gates.narrow(1, 2 * H, H))));
  const Tensor h1 = mul(sig(gates.narrow(1, 3 * H, H)), tanh(c1));
  const Tensor out0 = out.select(0, 0), sh = st.h.select(0, 0), sc = st.c.select(0, 0);
  CHECK(max(abs(sub(out0, h1))).item() < 1e-14);
  CHECK(max(abs(sub(sh, h1))).item() < 1e-14);
  CHECK(max(abs(sub(sc, c1))).item() < 1e-14);

  nn::GRU gru(I, H);
  gru.to(DType::float64);
  auto [gout, gst] = gru.forward_with_state(x, {h0, Tensor()});
  const Tensor xw = linear(x.select(0, 0), gru.weight_ih[0], gru.bias_ih[0]);
  const Tensor hw = linear(h0.select(0, 0), gru.weight_hh[0], gru.bias_hh[0]);
  const Tensor r = sig(add(xw.narrow(1, 0, H), hw.narrow(1, 0, H))), z = sig(add(xw.narrow(1, H, H), hw.narrow(1, H, H)));
  const Tensor n = tanh(add(xw.narrow(1, 2 * H, H), mul(r, hw.narrow(1, 2 * H, H))));
  const Tensor want = add(mul(sub(ones_like(z), z), n), mul(z, h0.select(0, 0)));
  const Tensor gout0 = gout.select(0, 0);
  CHECK(max(abs(sub(gout0, want))).item() < 1e-14);
  const bool has_c = gst.c.defined();
  CHECK_FALSE(has_c);

  // batch_first reads (N, T, I) and gives (N, T, H): the same numbers transposed
  nn::LSTM bf(I, H, {.num_layers = 2, .batch_first = true});
  bf.to(DType::float64);
  nn::LSTM tf(I, H, {.num_layers = 2});
  tf.to(DType::float64);
  tf.load_state_dict(bf.state_dict());
  const Tensor seq = randn({5, N, I}, f64);
  const Tensor a = bf(seq.transpose(0, 1)), b = tf(seq);
  CHECK(a.shape() == Shape{N, 5, H});
  CHECK(max(abs(sub(a.transpose(0, 1), b))).item() < 1e-14);
  // errors
  CHECK(error_of([&] { tf(randn({5, N, I + 1}, f64)); }).find("expected input") != std::string::npos);
  CHECK(error_of([&] { tf.forward_with_state(seq, {randn({1, N, H}, f64), Tensor()}); }).find("initial state") !=
        std::string::npos);
  CHECK(error_of([&] { gru.forward_with_state(x, {h0, c0}); }).find("no cell state") != std::string::npos);
  CHECK(error_of([&] { tf(zeros({0, N, I}, f64)); }).find("sequence length larger than 0") != std::string::npos);
}

TEST_CASE("LSTM / GRU: float64 gradcheck through time, over the inputs and every parameter") {
  manual_seed(22);
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  lstm.to(DType::float64);
  CHECK(module_gradcheck(lstm, [&](std::vector<Tensor>& in) { return lstm(in[0]); }, {randn({3, 2, 3}, f64)}));
  nn::GRU gru(3, 4, {.num_layers = 2, .batch_first = true});
  gru.to(DType::float64);
  CHECK(module_gradcheck(gru, [&](std::vector<Tensor>& in) { return gru(in[0]); }, {randn({2, 3, 3}, f64)}));
  // through the final state and an initial state too
  nn::LSTM one(2, 3);
  one.to(DType::float64);
  CHECK(gradcheck([&](std::vector<Tensor>& in) {
    auto r = one.forward_with_state(in[0], {in[1], in[2]});
    return add(sum(r.second.h), sum(mul(r.second.c, r.second.c)));
  }, {randn({4, 2, 2}, f64), randn({1, 2, 3}, f64), randn({1, 2, 3}, f64)}));
}
