// MultiheadAttention and TransformerBlock: construction, shape checks and forward; PyTorch's
// Transformer layers composed of them.
#include "kiln/nn/attention.h"
#include <cmath>
#include <sstream>
#include <typeinfo>
#include "kiln/nn/init.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn_functional.h"

namespace kiln::nn {

namespace {
/// The arguments of an attention inside a layer: masks, no weights returned.
MultiheadAttentionArgs self_args(const Tensor& key_padding_mask, const Tensor& attn_mask, bool is_causal) {
  MultiheadAttentionArgs a;
  a.key_padding_mask = key_padding_mask;
  a.attn_mask = attn_mask;
  a.need_weights = false;
  a.is_causal = is_causal;
  return a;
}
}  // namespace

MultiheadAttention::MultiheadAttention(int64_t d, int64_t h, MultiheadAttentionOptions o)
    : embed_dim(d), num_heads(h), options(o) {
  KILN_CHECK(d > 0 && h > 0 && d % h == 0, "MultiheadAttention: embed_dim (", d,
             ") must be positive and divisible by num_heads (", h, ")");
  KILN_CHECK(o.dropout >= 0 && o.dropout <= 1, "MultiheadAttention: dropout must be in [0, 1], got ", o.dropout);
  KILN_CHECK(o.attn_dropout >= 0 && o.attn_dropout <= 1, "MultiheadAttention: attn_dropout must be in [0, 1], got ",
             o.attn_dropout);
  qkv = register_module("qkv", Linear(d, 3 * d, {.bias = o.bias}));
  proj = register_module("proj", Linear(d, d, {.bias = o.bias}));
}

Tensor MultiheadAttention::forward(const Tensor& x) {
  KILN_CHECK(embed_dim > 0, "MultiheadAttention: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::MultiheadAttention(...)) before calling it");
  KILN_CHECK(x.defined() && x.dim() == 3 && x.size(2) == embed_dim, "MultiheadAttention(embed_dim=", embed_dim,
             ", num_heads=", num_heads, "): expected input of shape (B, T, ", embed_dim, "), got ",
             x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
  if (options.attn_dropout > 0 && is_training())  // dropout on the weights: the explicit path
    return forward(x, x, x, self_args({}, {}, options.causal)).first;
  // qkv(x) is (B, T, 3C): the heads of q, k and v side by side; y (B, T, C) the heads' outputs.
  Tensor y = scaled_dot_product_attention_packed(qkv(x), num_heads, options.causal);
  return dropout(proj(y), options.dropout, is_training());
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const MultiheadAttentionArgs& a) {
  KILN_CHECK(embed_dim > 0, "MultiheadAttention: the module is empty (default-constructed)");
  const int64_t E = embed_dim, H = num_heads, d = E / H;
  auto shape_of = [](const Tensor& t) { return t.defined() ? shape_str(t.shape()) : std::string("undefined"); };
  KILN_CHECK(query.defined() && key.defined() && value.defined() && query.dim() == 3 && key.dim() == 3 &&
                 value.dim() == 3 && query.size(2) == E && key.size(2) == E && value.size(2) == E &&
                 key.size(0) == query.size(0) && value.size(0) == query.size(0) && value.size(1) == key.size(1),
             "MultiheadAttention(embed_dim=", E, ", num_heads=", H, "): expected query (B, L, ", E, "), key and value (B, S, ",
             E, "), got query ", shape_of(query), ", key ", shape_of(key), ", value ", shape_of(value));
  const int64_t B = query.size(0), L = query.size(1), S = key.size(1);
  // the in-projection's q | k | v row blocks applied to query, key and value: (B, H, len, d)
  const Tensor in_w = qkv.param(qkv.weight), in_b = qkv.param(qkv.bias);
  auto project = [&](const Tensor& x, int64_t i, int64_t n) {
    const Tensor w = in_w.narrow(0, i * E, E), b = in_b.defined() ? in_b.narrow(0, i * E, E) : Tensor();
    return linear(x, w, b).reshape({B, n, H, d}).transpose(1, 2);
  };
  const Tensor q = project(query, 0, L), k = project(key, 1, S), v = project(value, 2, S);
  Tensor s = matmul(mul(q, 1.0 / std::sqrt(double(d))), k.transpose(-2, -1));  // (B, H, L, S)
  Tensor banned;  // bool, true = may not attend
  auto ban = [&](const Tensor& m) { banned = banned.defined() ? logical_or(banned, m) : m; };
  auto check_mask = [&](const Tensor& m, const char* name) {
    KILN_CHECK(m.dtype() == DType::bool_ || m.dtype() == query.dtype(), "MultiheadAttention: ", name,
               " must be bool or the query's dtype, got ", describe(m), " for query ", describe(query));
    KILN_CHECK(m.device() == query.device(), "MultiheadAttention: ", name, " is on ", m.device().str(),
               ", the query on ", query.device().str());
  };
  if (a.attn_mask.defined()) {
    const Tensor& m = a.attn_mask;
    check_mask(m, "attn_mask");
    const bool ok = (m.dim() == 2 && m.size(0) == L && m.size(1) == S) ||
                    (m.dim() == 3 && m.size(0) == B * H && m.size(1) == L && m.size(2) == S);
    KILN_CHECK(ok, "MultiheadAttention: attn_mask must be (L, S) = (", L, ", ", S, ") or (B * num_heads, L, S) = (",
               B * H, ", ", L, ", ", S, "), got ", shape_str(m.shape()));
    const Tensor m4 = m.dim() == 3 ? m.reshape({B, H, L, S}) : m;
    if (m.dtype() == DType::bool_) ban(m4);
    else s = add(s, m4);
  }
  if (a.key_padding_mask.defined()) {
    const Tensor& m = a.key_padding_mask;
    check_mask(m, "key_padding_mask");
    KILN_CHECK(m.dim() == 2 && m.size(0) == B && m.size(1) == S, "MultiheadAttention: key_padding_mask must be (B, S) = (",
               B, ", ", S, "), got ", shape_str(m.shape()));
    const Tensor m4 = m.reshape({B, 1, 1, S});
    if (m.dtype() == DType::bool_) ban(m4);
    else s = add(s, m4);
  }
  if (a.is_causal) ban(triu(ones({L, S}, {.dtype = DType::bool_, .device = query.device()}), 1));
  if (banned.defined()) s = masked_fill(s, banned, -INFINITY);
  Tensor p = softmax(s, -1);  // a query with every key masked: NaN, as PyTorch's
  if (options.attn_dropout > 0 && is_training()) p = dropout(p, options.attn_dropout, true);
  const Tensor y = matmul(p, v).transpose(1, 2).reshape({B, L, E});
  Tensor weights;
  if (a.need_weights) weights = a.average_attn_weights ? mean(p, {1}) : p;
  return {dropout(proj(y), options.dropout, is_training()), weights};
}

void MultiheadAttention::reset_parameters_like_torch() {
  NoGradGuard ng;
  init::xavier_uniform_(qkv.weight);
  if (qkv.bias.defined()) qkv.bias.fill_(0.0);
  if (proj.bias.defined()) proj.bias.fill_(0.0);
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << embed_dim << ", num_heads=" << num_heads << ", causal=" << (options.causal ? "true" : "false")
     << ", dropout=" << options.dropout;
  return os.str();
}

TransformerBlock::TransformerBlock(int64_t d, int64_t h, TransformerBlockOptions o)
    : embed_dim(d), num_heads(h), options(o) {
  KILN_CHECK(o.mlp_ratio > 0, "TransformerBlock: mlp_ratio must be positive, got ", o.mlp_ratio);
  ln1 = register_module("ln1", LayerNorm(d, {.eps = o.eps, .bias = o.bias}));
  attn = register_module("attn", MultiheadAttention(d, h, {.causal = o.causal, .dropout = o.dropout, .bias = o.bias}));
  ln2 = register_module("ln2", LayerNorm(d, {.eps = o.eps, .bias = o.bias}));
  mlp = register_module("mlp", Sequential{Linear(d, o.mlp_ratio * d, {.bias = o.bias}), GELU(GeluApprox::tanh),
                                          Linear(o.mlp_ratio * d, d, {.bias = o.bias}), Dropout(o.dropout)});
}

Tensor TransformerBlock::forward(const Tensor& x) {
  KILN_CHECK(embed_dim > 0, "TransformerBlock: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::TransformerBlock(...)) before calling it");
  Tensor h = x + attn(ln1(x));
  return h + mlp_forward(ln2(h));
}

Tensor TransformerBlock::mlp_forward(const Tensor& x) {
  // mlp[0] and mlp[1] as one linear_gelu (on CUDA in 16 bits: the GELU in the GEMM's
  // epilogue) while they are the block's own Linear and GELU(tanh) without hooks; a replaced
  // or hooked module, or a changed mlp, runs through mlp as written. The same values either way.
  const auto is = [](const Module& m, const std::type_info& t) { return typeid(m) == t && !m.has_forward_hooks(); };
  if (mlp.size() == 4 && !mlp.has_forward_hooks() && is(mlp[0], typeid(Linear)) && is(mlp[1], typeid(GELU)) &&
      static_cast<const GELU&>(mlp[1]).approx == GeluApprox::tanh) {
    const auto& fc = static_cast<const Linear&>(mlp[0]);
    return mlp[3](mlp[2](linear_gelu(x, fc.param(fc.weight), fc.param(fc.bias))));
  }
  return mlp(x);
}

std::string TransformerBlock::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << embed_dim << ", num_heads=" << num_heads;
  return os.str();
}

// ---------------------------------------------------------------- PyTorch's Transformer

Tensor generate_square_subsequent_mask(int64_t sz, TensorOptions o) {
  KILN_CHECK(sz >= 0, "generate_square_subsequent_mask: size must be >= 0, got ", sz);
  return masked_fill(zeros({sz, sz}, o), triu(ones({sz, sz}, {.dtype = DType::bool_, .device = o.device}), 1),
                     -INFINITY);
}

namespace {

void check_layer_options(const char* who, int64_t d, int64_t h, const TransformerLayerOptions& o) {
  KILN_CHECK(d > 0 && h > 0 && d % h == 0, who, ": d_model (", d, ") must be positive and divisible by nhead (", h, ")");
  KILN_CHECK(o.dim_feedforward > 0, who, ": dim_feedforward must be positive, got ", o.dim_feedforward);
  KILN_CHECK(o.dropout >= 0 && o.dropout <= 1, who, ": dropout must be in [0, 1], got ", o.dropout);
}

/// The attention of a Transformer layer: dropout on its weights, PyTorch's initialisation.
MultiheadAttention torch_attention(int64_t d, int64_t h, const TransformerLayerOptions& o) {
  MultiheadAttention m(d, h, {.bias = o.bias, .attn_dropout = o.dropout});
  m.reset_parameters_like_torch();
  return m;
}

Tensor activate(const Tensor& x, TransformerActivation a) { return a == TransformerActivation::relu ? relu(x) : gelu(x); }

std::string layer_repr(int64_t d, int64_t h, const TransformerLayerOptions& o) {
  std::ostringstream os;
  os << "d_model=" << d << ", nhead=" << h << ", dim_feedforward=" << o.dim_feedforward << ", dropout=" << o.dropout
     << ", activation=" << (o.activation == TransformerActivation::relu ? "relu" : "gelu")
     << ", norm_first=" << (o.norm_first ? "true" : "false");
  return os.str();
}

/// num_layers layers of one configuration, all starting from the first one's parameters
/// (PyTorch builds its stacks by deep copies of one layer).
template <class Layer>
ModuleList layer_stack(const char* who, int64_t d, int64_t h, int64_t n, const TransformerLayerOptions& o) {
  KILN_CHECK(n > 0, who, ": num_layers must be positive, got ", n);
  ModuleList layers;
  for (int64_t i = 0; i < n; ++i) layers.push_back(Layer(d, h, o));
  NoGradGuard ng;
  const StateDict first = layers[0].state_dict();
  for (size_t i = 1; i < layers.size(); ++i) layers[int64_t(i)].load_state_dict(first);
  return layers;
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d, int64_t h, TransformerLayerOptions o)
    : d_model(d), nhead(h), options(o) {
  check_layer_options("TransformerEncoderLayer", d, h, o);
  self_attn = register_module("self_attn", torch_attention(d, h, o));
  linear1 = register_module("linear1", Linear(d, o.dim_feedforward, {.bias = o.bias}));
  dropout = register_module("dropout", Dropout(o.dropout));
  linear2 = register_module("linear2", Linear(o.dim_feedforward, d, {.bias = o.bias}));
  norm1 = register_module("norm1", LayerNorm(d, {.eps = o.layer_norm_eps, .bias = o.bias}));
  norm2 = register_module("norm2", LayerNorm(d, {.eps = o.layer_norm_eps, .bias = o.bias}));
  dropout1 = register_module("dropout1", Dropout(o.dropout));
  dropout2 = register_module("dropout2", Dropout(o.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  KILN_CHECK(d_model > 0, "TransformerEncoderLayer: the module is empty (default-constructed)");
  auto sa = [&](const Tensor& x) {
    return dropout1(self_attn
.forward(x, x, x, self_args(src_key_padding_mask, src_mask, is_causal)).first);
  };
  auto ff = [&](const Tensor& x) { return dropout2(linear2(dropout(activate(linear1(x), options.activation)))); };
  if (options.norm_first) {
    const Tensor x = add(src, sa(norm1(src)));
    return add(x, ff(norm2(x)));
  }
  const Tensor x = norm1(add(src, sa(src)));
  return norm2(add(x, ff(x)));
}

std::string TransformerEncoderLayer::extra_repr() const { return layer_repr(d_model, nhead, options); }

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d, int64_t h, TransformerLayerOptions o)
    : d_model(d), nhead(h), options(o) {
  check_layer_options("TransformerDecoderLayer", d, h, o);
  self_attn = register_module("self_attn", torch_attention(d, h, o));
  multihead_attn = register_module("multihead_attn", torch_attention(d, h, o));
  linear1 = register_module("linear1", Linear(d, o.dim_feedforward, {.bias = o.bias}));
  dropout = register_module("dropout", Dropout(o.dropout));
  linear2 = register_module("linear2", Linear(o.dim_feedforward, d, {.bias = o.bias}));
  norm1 = register_module("norm1", LayerNorm(d, {.eps = o.layer_norm_eps, .bias = o.bias}));
  norm2 = register_module("norm2", LayerNorm(d, {.eps = o.layer_norm_eps, .bias = o.bias}));
  norm3 = register_module("norm3", LayerNorm(d, {.eps = o.layer_norm_eps, .bias = o.bias}));
  dropout1 = register_module("dropout1", Dropout(o.dropout));
  dropout2 = register_module("dropout2", Dropout(o.dropout));
  dropout3 = register_module("dropout3", Dropout(o.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) {
  KILN_CHECK(d_model > 0, "TransformerDecoderLayer: the module is empty (default-constructed)");
  auto sa = [&](const Tensor& x) {
    return dropout1(self_attn
.forward(x, x, x, self_args(tgt_key_padding_mask, tgt_mask, tgt_is_causal)).first);
  };
  auto mha = [&](const Tensor& x) {
    return dropout2(multihead_attn
.forward(x, memory, memory, self_args(memory_key_padding_mask, memory_mask, memory_is_causal))
                        .first);
  };
  auto ff = [&](const Tensor& x) { return dropout3(linear2(dropout(activate(linear1(x), options.activation)))); };
  if (options.norm_first) {
    Tensor x = add(tgt, sa(norm1(tgt)));
    x = add(x, mha(norm2(x)));
    return add(x, ff(norm3(x)));
  }
  Tensor x = norm1(add(tgt, sa(tgt)));
  x = norm2(add(x, mha(x)));
  return norm3(add(x, ff(x)));
}

std::string TransformerDecoderLayer::extra_repr() const { return layer_repr(d_model, nhead, options); }

TransformerEncoder::TransformerEncoder(int64_t d, int64_t h, int64_t n, TransformerLayerOptions o, bool final_norm) {
  layers = register_module("layers", layer_stack<TransformerEncoderLayer>("TransformerEncoder", d, h, n, o));
  if (final_norm) norm = register_module("norm", LayerNorm(d, {.eps = o.layer_norm_eps, .bias = o.bias}));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   bool is_causal) {
  KILN_CHECK(!layers.empty(), "TransformerEncoder: the module is empty (default-constructed)");
  Tensor x = src;
  for (size_t i = 0; i < layers.size(); ++i)
    x = layers.get<TransformerEncoderLayer>(int64_t(i)).forward(x, mask, src_key_padding_mask, is_causal);
  return norm.parameters().empty() ? x : norm(x);
}

TransformerDecoder::TransformerDecoder(int64_t d, int64_t h, int64_t n, TransformerLayerOptions o, bool final_norm) {
  layers = register_module("layers", layer_stack<TransformerDecoderLayer>("TransformerDecoder", d, h, n, o));
  if (final_norm) norm = register_module("norm", LayerNorm(d, {.eps = o.layer_norm_eps, .bias = o.bias}));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, bool tgt_is_causal, bool memory_is_causal) {
  KILN_CHECK(!layers.empty(), "TransformerDecoder: the module is empty (default-constructed)");
  Tensor x = tgt;
  for (size_t i = 0; i < layers.size(); ++i)
    x = layers.get<TransformerDecoderLayer>(int64_t(i))
            .forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal,
                     memory_is_causal);
  return norm.parameters().empty() ? x : norm(x);
}

Transformer::Transformer(TransformerOptions o) : options(o) {
  encoder = register_module("encoder", TransformerEncoder(o.d_model, o.nhead, o.num_encoder_layers, o.layer, true));
  decoder = register_module("decoder", TransformerDecoder(o.d_model, o.nhead, o.num_decoder_layers, o.layer, true));
  NoGradGuard ng;  // PyTorch's Transformer._reset_parameters
  for (auto& [name, p] : named_parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask) {
  KILN_CHECK(options.d_model > 0 && src.defined() && tgt.defined() && src.dim() == 3 && tgt.dim() == 3 &&
                 src.size(0) == tgt.size(0) && src.size(2) == options.d_model && tgt.size(2) == options.d_model,
             "Transformer(d_model=", options.d_model, "): expected src (B, S, ", options.d_model, ") and tgt (B, T, ",
             options.d_model, ") with the same B, got src ", src.defined() ? shape_str(src.shape()) : "undefined",
             " and tgt ", tgt.defined() ? shape_str(tgt.shape()) : "undefined");
  const Tensor memory = encoder.forward(src, src_mask, src_key_padding_mask);
  return decoder.forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask);
}

}  // namespace kiln::nn
