// RNN, LSTM and GRU (nn/recurrent.h): PyTorch's parameter names and shapes, one step against
// the gate equations written out, batch_first and initial states, bidirectional layers
// against a forward pass over the flipped sequence, packed sequences against each sequence
// run alone, dropout between layers, the cells, LSTM's proj_size, float64 gradchecks through
// time over the inputs and every parameter, and errors.
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

TEST_CASE("RNN, bidirectional layers and their parameters as PyTorch names them") {
  nn::GRU g(3, 4, {.num_layers = 2, .bidirectional = true});
  const auto names = g.named_parameters();
  CHECK(names.size() == 16);
  CHECK(names.at("weight_ih_l0_reverse").shape() == Shape{12, 3});
  CHECK(names.at("weight_ih_l1").shape() == Shape{12, 8});  // layer 1 reads both directions
  CHECK(names.at("bias_hh_l1_reverse").shape() == Shape{12});
  CHECK(g.str().find("bidirectional=true") != std::string::npos);
  nn::RNN r(3, 4, {.nonlinearity = "relu"});
  CHECK(r.named_parameters().at("weight_hh_l0").shape() == Shape{4, 4});
  CHECK(r.str().find("nonlinearity=relu") != std::string::npos);
  // one step: h' = relu(W_ih x + b_ih + W_hh h + b_hh)
  manual_seed(23);
  r.to(DType::float64);
  const Tensor x = randn({1, 2, 3}, f64), h0 = randn({1, 2, 4}, f64);
  const Tensor want = relu(add(linear(x.select(0, 0), r.weight_ih[0], r.bias_ih[0]),
                               linear(h0.select(0, 0), r.weight_hh[0], r.bias_hh[0])));
  const Tensor got = r.forward_with_state(x, {h0, Tensor()}).first.select(0, 0);
  CHECK(max(abs(sub(got, want))).item() < 1e-15);
  CHECK(error_of([] { nn::RNN(3, 4, {.nonlinearity = "sigmoid"}); }).find("'tanh' or 'relu'") != std::string::npos);
  CHECK(error_of([] { nn::LSTM(3, 4, {.nonlinearity = "relu"}); }).find("an RNN option") != std::string::npos);
  CHECK(error_of([] { nn::GRU(3, 4, {.dropout = 1.5}); }).find("dropout") != std::string::npos);
}

TEST_CASE("bidirectional: the reverse half is a forward pass over the flipped sequence") {
  manual_seed(24);
  nn::LSTM bi(3, 4, {.bidirectional = true});
  bi.to(DType::float64);
  nn::LSTM fw(3, 4), bw(3, 4);
  fw.to(DType::float64);
  bw.to(DType::float64);
  {
    NoGradGuard ng;
    for (auto* pr : {&fw, &bw}) {
      const size_t d = pr == &fw ? 0 : 1;
      pr->weight_ih[0].copy_(bi.weight_ih[d]);
      pr->weight_hh[0].copy_(bi.weight_hh[d]);
      pr->bias_ih[0].copy_(bi.bias_ih[d]);
      pr->bias_hh[0].copy_(bi.bias_hh[d]);
    }
  }
  const Tensor x = randn({6, 2, 3}, f64);
  auto [y, st] = bi.forward_with_state(x);
  CHECK(y.shape() == Shape{6, 2, 8});
  CHECK(st.h.shape() == Shape{2, 2, 4});
  auto [yf, sf] = fw.forward_with_state(x);
  auto [yb, sb] = bw.forward_with_state(flip(x, {0}));
  CHECK(max(abs(sub(y.narrow(2, 0, 4), yf))).item() < 1e-15);
  CHECK(max(abs(sub(y.narrow(2, 4, 4), flip(yb, {0})))).item() < 1e-15);
  CHECK(max(abs(sub(st.h.select(0, 1), sb.h.select(0, 0)))).item() < 1e-15);
  CHECK(max(abs(sub(st.c.select(0, 0), sf.c.select(0, 0)))).item() < 1e-15);
  // unbatched (T, I): a batch of one
  auto [yu, su] = bi.forward_with_state(x.select(1, 1));
  CHECK(yu.shape() == Shape{6, 8});
  CHECK(su.h.shape() == Shape{2, 4});
  CHECK(max(abs(sub(yu, y.select(1, 1)))).item() < 1e-15);
}

TEST_CASE("packed sequences: each sequence runs as if alone; pack, pad and their inverses") {
  manual_seed(25);
  nn::GRU gru(3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  gru.to(DType::float64);
  const std::vector<int64_t> lengths{2, 5, 3, 5};
  const Tensor x = randn({4, 5, 3}, f64);
  const nn::PackedSequence p = nn::pack_padded_sequence(x, lengths, true, false);
  CHECK(p.batch_sizes == std::vector<int64_t>{4, 4, 3, 2, 2});
  CHECK(p.sorted_indices.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 2, 0});  // stable: 1 before 3
  CHECK(p.data.shape() == Shape{15, 3});
  auto [po, st] = gru.forward_with_state(p);
  auto [padded, lens] = nn::pad_packed_sequence(po, true);
  CHECK(lens.to_vector<int64_t>() == lengths);
  CHECK(padded.shape() == Shape{4, 5, 8});
  for (int64_t b = 0; b < 4; ++b) {
    CAPTURE(b);
    const int64_t L = lengths[size_t(b)];
    auto [alone, sa] = gru.forward_with_state(x.select(0, b).narrow(0, 0, L).unsqueeze(0));
    CHECK(max(abs(sub(padded.select(0, b).narrow(0, 0, L), alone.select(0, 0)))).item() < 1e-14);
    if (L < 5) CHECK(max(abs(padded.select(0, b).narrow(0, L, 5 - L))).item() == 0.0);
    CHECK(max(abs(sub(st.h.select(1, b), sa.h.select(1, 0)))).item() < 1e-14);
  }
  // round trips
  const auto seqs = nn::unpad_sequence(x, lengths, true);
  const auto back = nn::unpack_sequence(nn::pack_sequence(seqs, false));
  for (size_t i = 0; i < seqs.size(); ++i) CHECK(max(abs(sub(back[i], seqs[i]))).item() == 0.0);
  const Tensor ps = nn::pad_sequence(seqs, false, -1.0);
  CHECK(ps.shape() == Shape{5, 4, 3});
  CHECK(ps.select(1, 0).select(0, 4).to_vector<double>() == std::vector<double>{-1, -1, -1});
  const Tensor left = nn::pad_sequence(seqs, true, 0.0, "left");
  CHECK(max(abs(sub(left.select(0, 0).narrow(0, 3, 2), seqs[0]))).item() == 0.0);
  CHECK(nn::pad_packed_sequence(p, false, 0.0, 7).first.shape() == Shape{7, 4, 3});
  // errors
  CHECK(error_of([&] { nn::pack_padded_sequence(x, lengths, true); }).find("sorted in decreasing order") !=
        std::string::npos);
  CHECK(error_of([&] { nn::pack_padded_sequence(x, {5, 0, 0, 0}, true); }).find("in 1..5") != std::string::npos);
  CHECK(error_of([&] { nn::pack_padded_sequence(x, {6, 1, 1, 1}, true); }).find("in 1..5") != std::string::npos);
  CHECK(error_of([&] { nn::pack_padded_sequence(x, {5, 1}, true); }).find("expected 4 lengths") != std::string::npos);
  CHECK(error_of([&] { nn::pad_packed_sequence(p, false, 0.0, 4); }).find("total_length") != std::string::npos);
  CHECK(error_of([&] { nn::pad_sequence({randn({2, 3}, f64), randn({2, 4}, f64)}); }).find("trailing dims") !=
        std::string::npos);
  // differentiable through packing, the layers and unpacking
  nn::LSTM small(2, 3, {.bidirectional = true});
  small.to(DType::float64);
  CHECK(module_gradcheck(small, [&](std::vector<Tensor>& in) {
    auto pk = nn::pack_padded_sequence(in[0], std::vector<int64_t>{2, 4, 1}, false, false);
    auto [o, s] = small.forward_with_state(pk);
    return add(sum(nn::pad_packed_sequence(o).first), sum(mul(s.c, s.h)));
  }, {randn({4, 3, 2}, f64)}));
}

TEST_CASE("dropout between layers, and the cells against one step of the layers") {
  manual_seed(26);
  nn::LSTM d(3, 4, {.num_layers = 2, .dropout = 1.0});
  nn::LSTM plain(3, 4, {.num_layers = 2});
  d.to(DType::float64);
  plain.to(DType::float64);
  plain.load_state_dict(d.state_dict());
  const Tensor x = randn({4, 2, 3}, f64);
  d.eval();
  CHECK(max(abs(sub(d(x), plain(x)))).item() == 0.0);  // no dropout in eval mode
  d.train();
  // p = 1 zeroes layer 0's outputs: layer 1 sees zeros
  nn::LSTM top(4, 4);
  top.to(DType::float64);
  {
    NoGradGuard ng;
    top.weight_ih[0].copy_(d.weight_ih[1]), top.weight_hh[0].copy_(d.weight_hh[1]);
    top.bias_ih[0].copy_(d.bias_ih[1]), top.bias_hh[0].copy_(d.bias_hh[1]);
  }
  CHECK(max(abs(sub(d(x), top(zeros({4, 2, 4}, f64))))).item() < 1e-15);

  nn::LSTMCell lc(3, 4);
  nn::LSTM one(3, 4);
  lc.to(DType::float64);
  one.to(DType::float64);
  {
    NoGradGuard ng;
    one.weight_ih[0].copy_(lc.weight_ih), one.weight_hh[0].copy_(lc.weight_hh);
    one.bias_ih[0].copy_(lc.bias_ih), one.bias_hh[0].copy_(lc.bias_hh);
  }
  const Tensor xs = randn({2, 3}, f64), h = randn({2, 4}, f64), c = randn({2, 4}, f64);
  auto [h1, c1] = lc.forward(xs, {h, c});
  auto [y1, s1] = one.forward_with_state(xs.unsqueeze(0), {h.unsqueeze(0), c.unsqueeze(0)});
  CHECK(max(abs(sub(h1, s1.h.select(0, 0)))).item() < 1e-15);
  CHECK(max(abs(sub(c1, s1.c.select(0, 0)))).item() < 1e-15);
  CHECK(lc(xs).shape() == Shape{2, 4});
  nn::GRUCell gc(3, 4, false);
  gc.to(DType::float64);
  CHECK(gc.parameters().size() == 2);
  CHECK(gc.forward(xs.select(0, 0), h.select(0, 0)).shape() == Shape{4});  // unbatched
  CHECK(module_gradcheck(gc, [&](std::vector<Tensor>& in) { return gc.forward(in[0], in[1]); },
                         {randn({2, 3}, f64), randn({2, 4}, f64)}));
  nn::RNNCell rc(3, 4, true, "relu");
  rc.to(DType::float64);
  CHECK(max(abs(sub(rc.forward(xs, h), relu(add(linear(xs, rc.weight_ih, rc.bias_ih), linear(h, rc.weight_hh, rc.bias_hh)))))).item() < 1e-15);
  CHECK(error_of([&] { lc.forward(xs, {randn({3, 4}, f64), c}); }).find("hidden state must have shape") !=
        std::string::npos);
  CHECK(error_of([&] { rc(randn({2, 5}, f64)); }).find("expected input of shape") != std::string::npos);
}

TEST_CASE("LSTM proj_size: h = W_hr (o tanh c), PyTorch's shapes and names") {
  manual_seed(27);
  nn::LSTM m(3, 5, {.num_layers = 2, .bidirectional = true, .proj_size = 2});
  m.to(DType::float64);
  const auto names = m.named_parameters();
  CHECK(names.at("weight_hr_l0").shape() == Shape{2, 5});
  CHECK(names.at("weight_hr_l1_reverse").shape() == Shape{2, 5});
  CHECK(names.at("weight_hh_l0").shape() == Shape{20, 2});
  CHECK(names.at("weight_ih_l1").shape() == Shape{20, 4});  // both directions' projections
  CHECK(m.str().find("proj_size=2") != std::string::npos);
  const Tensor x = randn({4, 3, 3}, f64);
  auto [y, st] = m.forward_with_state(x);
  CHECK(y.shape() == Shape{4, 3, 4});
  CHECK(st.h.shape() == Shape{4, 3, 2});
  CHECK(st.c.shape() == Shape{4, 3, 5});
  // one step of layer 0 by hand
  nn::LSTM one(3, 5, {.proj_size = 2});
  one.to(DType::float64);
  const Tensor x1 = randn({1, 2, 3}, f64), h0 = randn({1, 2, 2}, f64), c0 = randn({1, 2, 5}, f64);
  auto [y1, s1] = one.forward_with_state(x1, {h0, c0});
  const Tensor gates = add(linear(x1.select(0, 0), one.weight_ih[0], one.bias_ih[0]),
                           linear(h0.select(0, 0), one.weight_hh[0], one.bias_hh[0]));
  const Tensor c1 = add(mul(sig(gates.narrow(1, 5, 5)), c0.select(0, 0)),
                        mul(sig(gates.narrow(1, 0, 5)), tanh(gates.narrow(1, 10, 5))));
  const Tensor h1 = linear(mul(sig(gates.narrow(1, 15, 5)), tanh(c1)), one.weight_hr[0]);
  CHECK(max(abs(sub(y1.select(0, 0), h1))).item() < 1e-15);
  CHECK(max(abs(sub(s1.c.select(0, 0), c1))).item() < 1e-15);
  CHECK(module_gradcheck(one, [&](std::vector<Tensor>& in) { return one(in[0]); }, {randn({3, 2, 3}, f64)}));
  CHECK(error_of([&] { one.forward_with_state(x1, {randn({1, 2, 5}, f64), c0}); }).find("initial state h") !=
        std::string::npos);
  CHECK(error_of([] { nn::LSTM(3, 5, {.proj_size = 5}); }).find("proj_size must be in 0..hidden_size - 1") !=
        std::string::npos);
  CHECK(error_of([] { nn::GRU(3, 5, {.proj_size = 2}); }).find("an LSTM option") != std::string::npos);
}
