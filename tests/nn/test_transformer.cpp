// PyTorch's attention keywords and Transformer modules: scaled_dot_product_attention with
// masks, dropout and scale against the composition written out; MultiheadAttention's
// general forward (cross attention, PyTorch's mask conventions, weights) against its own
// fused self-attention and by hand; TransformerEncoderLayer / DecoderLayer / Encoder /
// Decoder / Transformer: names, shapes, equal starting layers, masks that cut information
// flow, gradchecks, training, errors. (Values against PyTorch 2.15: docs/training.md.)
#include <doctest/doctest.h>
#include <cmath>
#include "nn_test_utils.h"

using namespace kiln;
using namespace kiln::test;
namespace nn = kiln::nn;

TEST_CASE("scaled_dot_product_attention with attn_mask, is_causal, scale, dropout") {
  manual_seed(61);
  const Tensor q = randn({2, 3, 4, 5}, f64), k = randn({2, 3, 6, 5}, f64), v = randn({2, 3, 6, 2}, f64);
  const Tensor s = div(matmul(q, k.transpose(-2, -1)), std::sqrt(5.0));
  // bool: true = may attend; a row with no key allowed gives zeros (PyTorch's safe softmax)
  Tensor allowed = gt(randn({4, 6}), -0.3);
  allowed = index_fill(allowed, 0, from_vector(std::vector<int64_t>{2}, {1}), 0.0);
  const Tensor yb = scaled_dot_product_attention(q, k, v, {.attn_mask = allowed});
  const Tensor ref = matmul(softmax(masked_fill(s, logical_not(allowed), -INFINITY), -1), v);
  CHECK(allclose(yb.narrow(2, 0, 2), ref.narrow(2, 0, 2)));
  CHECK(allclose(yb.narrow(2, 3, 1), ref.narrow(2, 3, 1)));
  CHECK(max(abs(yb.narrow(2, 2, 1))).item() == 0.0);
  // float: added to the scores; scale replaces 1 / sqrt(d)
  const Tensor fm = randn({2, 1, 4, 6}, f64);
  CHECK(allclose(scaled_dot_product_attention(q, k, v, {.attn_mask = fm, .scale = 0.3}),
                 matmul(softmax(add(mul(matmul(q, k.transpose(-2, -1)), 0.3), fm), -1), v)));
  // the options' causal path equals the fused kernel's
  CHECK(allclose(scaled_dot_product_attention(q, k, v, {.is_causal = true, .scale = 1 / std::sqrt(5.0)}),
                 scaled_dot_product_attention(q, k, v, true)));
  CHECK(gradcheck([&](auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2], {.attn_mask = allowed}); },
                  {q, k, v}));
  CHECK(gradcheck([&](auto& t) { return scaled_dot_product_attention(t[0], t[1], t[2], {.attn_mask = fm}); },
                  {q, k, v}));
  // dropout on the weights: some weights zeroed, the rest scaled; p = 1 leaves nothing
  CHECK(max(abs(scaled_dot_product_attention(q, k, v, {.dropout_p = 1.0}))).item() == 0.0);
  CHECK_FALSE(allclose(scaled_dot_product_attention(q, k, v, {.dropout_p = 0.5}), scaled_dot_product_attention(q, k, v)));
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, {.attn_mask = allowed, .is_causal = true}),
                       doctest::Contains("not both"), kiln::Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, {.attn_mask = randn({4, 6})}),
                       doctest::Contains("bool or the dtype of q"), kiln::Error);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({5, 6}, {.dtype = DType::bool_})}),
                  kiln::Error);
}

TEST_CASE("MultiheadAttention general forward: self attention as the fused path, masks, weights, gradients") {
  manual_seed(62);
  nn::MultiheadAttention mha(8, 2);
  mha.to(DType::float64);
  const Tensor x = randn({3, 5, 8}, f64);
  auto [y, w] = mha.forward(x, x, x);
  CHECK(allclose(y, mha(x)));
  CHECK(w.shape() == Shape{3, 5, 5});
  CHECK(allclose(sum(w, {-1}), ones({3, 5}, {.dtype = DType::float64})));
  // is_causal equals the causal module; a bool attn_mask bans where true (PyTorch's MHA convention)
  nn::MultiheadAttention causal(8, 2, {.causal = true});
  causal.to(DType::float64);
  causal.load_state_dict(mha.state_dict());
  CHECK(allclose(mha.forward(x, x, x, {.need_weights = false, .is_causal = true}).first, causal(x)));
  const Tensor future = triu(ones({5, 5}, {.dtype = DType::bool_}), 1);
  CHECK(allclose(mha.forward(x, x, x, {.attn_mask = future}).first, causal(x)));
  // a float mask of -inf where banned is the same
  const Tensor fmask = masked_fill(zeros({5, 5}, {.dtype = DType::float64}), future, -INFINITY);
  CHECK(allclose(mha.forward(x, x, x, {.attn_mask = fmask}).first, causal(x)));
  // key_padding_mask: padded keys get zero weight, and changing them changes nothing
  const Tensor mem = randn({3, 7, 8}, f64);
  Tensor pad = zeros({3, 7}, {.dtype = DType::bool_});
  pad = index_fill(pad, 1, from_vector(std::vector<int64_t>{5, 6}, {2}), 1.0);
  auto [yc, wc] = mha.forward(x, mem, mem, {.key_padding_mask = pad, .average_attn_weights = false});
  CHECK(wc.shape() == Shape{3, 2, 5, 7});
  CHECK(max(abs(wc.narrow(3, 5, 2))).item() == 0.0);
  const Tensor mem2 = cat({mem.narrow(1, 0, 5), randn({3, 2, 8}, f64)}, 1);
  CHECK(allclose(mha.forward(x, mem2, mem2, {.key_padding_mask = pad}).first, yc));
  // per-head 3-D masks: (B * H, L, S)
  const Tensor m3 = gt(randn({6, 5, 7}), 0.5);
  CHECK(mha.forward(x, mem, mem, {.attn_mask = logical_and(m3, gt(randn({6, 5, 7}), -5.0))}).first.shape() ==
        Shape{3, 5, 8});
  // every key masked: NaN, as PyTorch's MultiheadAttention
  const Tensor all_pad = ones({3, 7}, {.dtype = DType::bool_});
  CHECK(std::isnan(mha.forward(x, mem, mem, {.key_padding_mask = all_pad}).first.to_vector<double>()[0]));
  CHECK(module_gradcheck(
      mha,
      [&](std::vector<Tensor>& t) {
        auto [o, ww] = mha.forward(t[0], t[1], t[1], {.key_padding_mask = pad.narrow(0, 0, 2)});
        return add(o, sum(ww));
      },
      {randn({2, 3, 8}, f64), randn({2, 7, 8}, f64)}, {}));
  // attn_dropout: the weights' dropout runs in training only
  nn::MultiheadAttention drop(8, 2, {.attn_dropout = 0.5});
  drop.to(DType::float64);
  drop.load_state_dict(mha.state_dict());
  CHECK_FALSE(allclose(drop(x), mha(x)));
  drop.eval();
  CHECK(allclose(drop(x), mha(x)));
  CHECK_THROWS_WITH_AS(mha.forward(x, mem, randn({3, 6, 8}, f64)), doctest::Contains("value"), kiln::Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, mem, mem, {.key_padding_mask = pad.narrow(1, 0, 6)}),
                       doctest::Contains("key_padding_mask must be (B, S)"), kiln::Error);
  CHECK_THROWS_WITH_AS(mha.forward(x, mem, mem, {.attn_mask = future}), doctest::Contains("attn_mask must be"),
                       kiln::Error);
  CHECK_THROWS_AS(mha.forward(x, x, x, {.attn_mask = randn({5, 5})}), kiln::Error);  // float32 for float64
}

TEST_CASE("TransformerEncoderLayer, DecoderLayer: PyTorch's names, masks, pre/post norm, gradcheck") {
  manual_seed(63);
  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  const auto keys = enc.named_parameters().keys();
  CHECK(keys == std::vector<std::string>{"self_attn.qkv.weight", "self_attn.qkv.bias", "self_attn.proj.weight",
                                         "self_attn.proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                         "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  CHECK(max(abs(enc.self_attn.qkv.bias)).item() == 0.0);  // PyTorch's init: zero in_proj bias
  enc.to(DType::float64);
  const Tensor src = randn({2, 5, 8}, f64);
  CHECK(enc(src).shape() == Shape{2, 5, 8});
  // post-norm by hand
  const Tensor a = enc.self_attn(src);
  const Tensor h = enc.norm1(add(src, a));
  CHECK(allclose(enc(src), enc.norm2(add(h, enc.linear2(relu(enc.linear1(h)))))));
  // a causal mask: changing the last token leaves the first outputs alone
  const Tensor cm = nn::generate_square_subsequent_mask(5, {.dtype = DType::float64});
  CHECK(cm.to_vector<double>()[1] == -INFINITY);
  CHECK(cm.to_vector<double>()[5] == 0.0);
  Tensor src2 = cat({src.narrow(1, 0, 4), randn({2, 1, 8}, f64)}, 1);
  CHECK(allclose(enc.forward(src, cm).narrow(1, 0, 4), enc.forward(src2, cm).narrow(1, 0, 4)));
  CHECK(allclose(enc.forward(src, Tensor(), Tensor(), true), enc.forward(src, cm)));
  nn::TransformerEncoderLayer pre(8, 2, {.dim_feedforward = 16, .dropout = 0.1,
                                         .activation = nn::TransformerActivation::gelu, .norm_first = true});
  pre.eval();
  pre.to(DType::float64);
  CHECK(module_gradcheck(pre, [&](std::vector<Tensor>& t) { return pre.forward(t[0], cm); }, {randn({2, 5, 8}, f64)}));
  nn::TransformerDecoderLayer dec(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  CHECK(dec.named_parameters().contains("multihead_attn.qkv.weight"));
  CHECK(dec.named_parameters().contains("norm3.bias"));
  dec.to(DType::float64);
  const Tensor tgt = randn({2, 4, 8}, f64), memory = randn({2, 5, 8}, f64);
  Tensor mpad = zeros({2, 5}, {.dtype = DType::bool_});
  mpad = index_fill(mpad, 1, from_vector(std::vector<int64_t>{4}, {1}), 1.0);
  const Tensor yd = dec.forward(tgt, memory, {}, {}, {}, mpad);
  CHECK(yd.shape() == Shape{2, 4, 8});
  // a padded memory position does not matter
  const Tensor memory2 = cat({memory.narrow(1, 0, 4), randn({2, 1, 8}, f64)}, 1);
  CHECK(allclose(dec.forward(tgt, memory2, {}, {}, {}, mpad), yd));
  CHECK(module_gradcheck(dec, [&](std::vector<Tensor>& t) { return dec.forward(t[0], t[1], {}, {}, {}, {}, true); },
                         {randn({2, 3, 8}, f64), randn({2, 4, 8}, f64)}));
  CHECK_THROWS_AS(nn::TransformerEncoderLayer(8, 3), kiln::Error);
  CHECK_THROWS_AS(nn::TransformerDecoderLayer(8, 2, {.dropout = 1.5}), kiln::Error);
}

TEST_CASE("TransformerEncoder, Decoder, Transformer: equal starting layers, final norms, training") {
  manual_seed(64);
  nn::TransformerEncoder enc(8, 2, 3, {.dim_feedforward = 16});
  CHECK(enc.named_parameters().contains("layers.2.linear2.weight"));
  CHECK_FALSE(enc.named_parameters().contains("norm.weight"));
  CHECK(bitwise_equal(enc.named_parameters().at("layers.0.linear1.weight"),
                      enc.named_parameters().at("layers.2.linear1.weight")));  // as PyTorch's deepcopy
  // but they are separate parameters
  CHECK(enc.named_parameters().at("layers.0.linear1.weight").raw_data() !=
        enc.named_parameters().at("layers.2.linear1.weight").raw_data());
  nn::Transformer tr({.d_model = 8, .nhead = 2, .num_encoder_layers = 2, .num_decoder_layers = 1,
                      .layer = {.dim_feedforward = 16, .dropout = 0.0}});
  CHECK(tr.named_parameters().contains("encoder.norm.weight"));
  CHECK(tr.named_parameters().contains("decoder.layers.0.multihead_attn.proj.weight"));
  CHECK_FALSE(tr.named_parameters().contains("decoder.layers.1.linear1.weight"));
  // a copy task: the decoder learns to output the source (teacher forcing, causal tgt mask)
  nn::Linear head(8, 8);
  std::vector<Tensor> params = tr.parameters();
  for (auto& p : head.parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 3e-3});
  const Tensor src = randn({16, 6, 8});
  const Tensor tmask = nn::generate_square_subsequent_mask(6);
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    const Tensor loss = mse_loss(head(tr.forward(src, src, {}, tmask)), src);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < 0.5 * first);
  CHECK_THROWS_WITH_AS(tr.forward(src, randn({15, 6, 8})), doctest::Contains("the same B"), kiln::Error);
  CHECK_THROWS_AS(nn::TransformerEncoder(8, 2, 0), kiln::Error);
}
