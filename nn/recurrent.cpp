// RNN, LSTM, GRU, their cells and packed sequences (see recurrent.h).
//
// One engine runs every layer: run_rows takes the inputs as rows (step 0's rows, then step
// 1's, ...) with the number of sequences still running at each step, sorted longest first,
// which is a packed batch as PyTorch lays it out. A padded batch (T, N, I) is the case where
// all N run every step, so the step's rows are plain slices and no state is cut or joined.
// In a packed batch the forward direction drops the finished sequences' states at the bottom
// of h (their final states), and the reverse direction adds the sequences that start at this
// step (from the end) with their initial states.
#include "kiln/nn/recurrent.h"
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include "kiln/nn/init.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn_functional.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::nn {
namespace detail {

Tensor rnn_step(const Tensor& xw, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh, bool relu_act) {
  const Tensor pre = add(xw, linear(h, w_hh, b_hh));
  return relu_act ? relu(pre) : tanh(pre);
}

std::pair<Tensor, Tensor> lstm_step(const Tensor& xw, const Tensor& h, const Tensor& c, const Tensor& w_hh,
                                    const Tensor& b_hh) {
  const int64_t H = c.size(-1);  // h may be smaller (an LSTM's proj_size)
  const Tensor gates = add(xw, linear(h, w_hh, b_hh));  // (N, 4H): i, f, g, o
  const Tensor i = sigmoid(gates.narrow(1, 0, H)), f = sigmoid(gates.narrow(1, H, H));
  const Tensor g = tanh(gates.narrow(1, 2 * H, H)), o = sigmoid(gates.narrow(1, 3 * H, H));
  const Tensor c2 = add(mul(f, c), mul(i, g));
  return {mul(o, tanh(c2)), c2};
}

Tensor gru_step(const Tensor& xw, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh) {
  const int64_t H = h.size(-1);
  const Tensor hw = linear(h, w_hh, b_hh);  // (N, 3H): r, z, n
  const Tensor r = sigmoid(add(xw.narrow(1, 0, H), hw.narrow(1, 0, H)));
  const Tensor z = sigmoid(add(xw.narrow(1, H, H), hw.narrow(1, H, H)));
  const Tensor n = tanh(add(xw.narrow(1, 2 * H, H), mul(r, hw.narrow(1, 2 * H, H))));
  return add(n, mul(z, sub(h, n)));  // (1 - z) n + z h
}

RecurrentBase::RecurrentBase(const char* name, int64_t gates, int64_t in, int64_t hidden, RecurrentOptions o)
    : input_size(in), hidden_size(hidden), options(o), name_(name) {
  KILN_CHECK(in > 0 && hidden > 0, name, ": input_size and hidden_size must be positive, got ", in, " and ", hidden);
  KILN_CHECK(o.num_layers >= 1, name, ": num_layers must be >= 1, got ", o.num_layers);
  KILN_CHECK(o.dropout >= 0 && o.dropout <= 1, name, ": dropout must be a probability in [0, 1], got ", o.dropout);
  KILN_CHECK(o.nonlinearity == "tanh" || (o.nonlinearity == "relu" && gates == 1), name,
             gates == 1 ? ": nonlinearity must be 'tanh' or 'relu', got '" : ": nonlinearity is an RNN option, got '",
             o.nonlinearity, "'");
  KILN_CHECK(o.proj_size == 0 || (gates == 4 && o.proj_size > 0 && o.proj_size < hidden), name,
             gates == 4 ? ": proj_size must be in 0..hidden_size - 1, got " : ": proj_size is an LSTM option, got ",
             o.proj_size);
  const int64_t D = o.bidirectional ? 2 : 1, R = o.proj_size > 0 ? o.proj_size : hidden;
  for (int64_t l = 0; l < o.num_layers; ++l)
    for (int64_t d = 0; d < D; ++d) {
      const std::string s = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      weight_ih.push_back(register_parameter("weight_ih" + s, empty({gates * hidden, l == 0 ? in : D * R})));
      weight_hh.push_back(register_parameter("weight_hh" + s, empty({gates * hidden, R})));
      if (o.bias) {
        bias_ih.push_back(register_parameter("bias_ih" + s, empty({gates * hidden})));
        bias_hh.push_back(register_parameter("bias_hh" + s, empty({gates * hidden})));
      } else {
        bias_ih.emplace_back();
        bias_hh.emplace_back();
      }
      if (o.proj_size > 0) weight_hr.push_back(register_parameter("weight_hr" + s, empty({R, hidden})));
    }
  reset_parameters();
}

void RecurrentBase::reset_parameters() {
  NoGradGuard ng;
  const double bound = hidden_size > 0 ? 1.0 / std::sqrt(double(hidden_size)) : 0.0;  // PyTorch: U(-1/sqrt(H), 1/sqrt(H))
  for (Tensor& p : parameters(false)) init::uniform_(p, -bound, bound);
}

std::string RecurrentBase::extra_repr() const {
  std::ostringstream os;
  os << input_size << ", " << hidden_size;
  if (options.num_layers != 1) os << ", num_layers=" << options.num_layers;
  if (options.nonlinearity != "tanh") os << ", nonlinearity=" << options.nonlinearity;
  if (!options.bias) os << ", bias=false";
  if (options.batch_first) os << ", batch_first=true";
  if (options.dropout > 0) os << ", dropout=" << options.dropout;
  if (options.bidirectional) os << ", bidirectional=true";
  if (options.proj_size > 0) os << ", proj_size=" << options.proj_size;
  return os.str();
}

void RecurrentBase::check_state(const RecurrentState& initial, int64_t batch, bool batched) const {
  auto shape = [&](int64_t size) {
    return batched ? Shape{options.num_layers * directions(), batch, size} : Shape{options.num_layers * directions(), size};
  };
  for (const Tensor* s : {&initial.h, &initial.c}) {
    const Shape want = shape(s == &initial.h ? output_size() : hidden_size);
    KILN_CHECK(!s->defined() || s->shape() == want, name_, ": the initial state ", s == &initial.h ? "h" : "c",
               " must have shape ", shape_str(want), ", got ", shape_str(s->shape()));
  }
  KILN_CHECK(!initial.c.defined() || has_cell_state(), name_, ": has no cell state; pass only h");
}

std::pair<Tensor, RecurrentState> RecurrentBase::run_rows(const Tensor& rows, const std::vector<int64_t>& bs,
                                                          const RecurrentState& initial) const {
  const int64_t T = int64_t(bs.size()), B = bs[0], H = hidden_size, R = output_size(), L = options.num_layers,
                D = directions();
  std::vector<int64_t> off(bs.size() + 1, 0);
  for (size_t t = 0; t < bs.size(); ++t) off[t + 1] = off[t] + bs[t];
  const TensorOptions zo{.dtype = rows.dtype(), .device = rows.device()};
  const bool cs = has_cell_state();
  // The weights this forward uses. A parametrized one is computed as often as PyTorch's RNN
  // forward reads it (hasattr, then getattr): twice in _init_flat_weights and, for the first
  // parametrized weight in the flat order, twice more in _weights_have_changed. It matters
  // only for a parametrization with side effects (spectral_norm's power iteration in
  // training mode: 4 or 2 iterations a forward), and keeps those in step with PyTorch's.
  std::unordered_map<const TensorImpl*, Tensor> value;  // member -> the value this forward uses
  if (!state().parametrized.empty()) {
    std::vector<const Tensor*> flat;  // PyTorch's _flat_weights order
    for (size_t k = 0; k < weight_ih.size(); ++k)
      for (const std::vector<Tensor>* ws : {&weight_ih, &weight_hh, &bias_ih, &bias_hh, &weight_hr})
        if (k < ws->size() && (*ws)[k].defined()) flat.push_back(&(*ws)[k]);
    auto is_parametrized = [&](const Tensor* t) {
      return std::any_of(state().parametrized.begin(), state().parametrized.end(),
                         [&](const ParametrizedTensor& p) { return p.member == t->impl_ptr(); });
    };
    for (const Tensor* t : flat)
      if (is_parametrized(t)) {
        param(*t);
        param(*t);
        break;
      }
    for (const Tensor* t : flat)
      if (is_parametrized(t)) {
        param(*t);
        value[&t->impl()] = param(*t);
      }
  }
  auto used = [&](const std::vector<Tensor>& ws, size_t k) {
    if (k >= ws.size()) return Tensor();
    auto it = value.find(ws[k].defined() ? &ws[k].impl() : nullptr);
    return it == value.end() ? ws[k] : it->second;
  };
  Tensor layer_in = rows;
  std::vector<Tensor> hn, cn;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<std::vector<Tensor>> outs(static_cast<size_t>(D), std::vector<Tensor>(static_cast<size_t>(T)));
    for (int64_t d = 0; d < D; ++d) {
      const size_t k = size_t(l * D + d);
      const Tensor xw = linear(layer_in, used(weight_ih, k), used(bias_ih, k));  // every step's projection at once
      const StepWeights w{used(weight_hh, k), used(bias_hh, k), used(weight_hr, k)};
      const Tensor h0 = initial.h.defined() ? initial.h.select(0, int64_t(k)) : zeros({B, R}, zo);
      const Tensor c0 = !cs ? Tensor() : initial.c.defined() ? initial.c.select(0, int64_t(k)) : zeros({B, H}, zo);
      auto step = [&](int64_t t, Tensor& h, Tensor& c) {
        std::tie(h, c) = cell(w, xw.narrow(0, off[size_t(t)], bs[size_t(t)]), h, c);
        outs[size_t(d)][size_t(t)] = h;
      };
      Tensor h = h0, c = c0;
      if (d == 0) {
        // forward: sequences that ended leave the bottom of the state; their final states wait
        std::vector<Tensor> done_h, done_c;
        for (int64_t t = 0; t < T; ++t) {
          const int64_t n = bs[size_t(t)], have = h.size(0);
          if (n < have) {
            done_h.push_back(h.narrow(0, n, have - n));
            h = h.narrow(0, 0, n);
            if (cs) done_c.push_back(c.narrow(0, n, have - n)), c = c.narrow(0, 0, n);
          }
          step(t, h, c);
        }
        if (!done_h.empty()) {  // the latest to end sit right below the running ones
          done_h.push_back(h);
          std::reverse(done_h.begin(), done_h.end());
          h = cat(done_h, 0);
          if (cs) done_c.push_back(c), std::reverse(done_c.begin(), done_c.end()), c = cat(done_c, 0);
        }
      } else {
        // reverse: from the last step back; a sequence joins, from its initial state, at its end
        int64_t have = 0;
        for (int64_t t = T - 1; t >= 0; --t) {
          const int64_t n = bs[size_t(t)];
          if (n > have) {
            h = have == 0 ? h0.narrow(0, 0, n) : cat({h, h0.narrow(0, have, n - have)}, 0);
            if (cs) c = have == 0 ? c0.narrow(0, 0, n) : cat({c, c0.narrow(0, have, n - have)}, 0);
            have = n;
          }
          step(t, h, c);
        }
      }
      hn.push_back(h);
      if (cs) cn.push_back(c);
    }
    std::vector<Tensor> per_step(static_cast<size_t>(T));
    for (size_t t = 0; t < size_t(T); ++t) per_step[t] = D == 1 ? outs[0][t] : cat({outs[0][t], outs[1][t]}, 1);
    layer_in = cat(per_step, 0);
    if (l + 1 < L && options.dropout > 0) layer_in = dropout(layer_in, options.dropout, is_training());
  }
  return {layer_in, RecurrentState{stack(hn, 0), cs ? stack(cn, 0) : Tensor()}};
}

std::pair<Tensor, RecurrentState> RecurrentBase::run(const Tensor& input, const RecurrentState& initial) const {
  KILN_CHECK(!weight_ih.empty(), "recurrent layer: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::LSTM(...)) before calling it");
  KILN_CHECK(input.defined() && (input.dim() == 3 || input.dim() == 2) && input.size(-1) == input_size, name_, "(",
             input_size, ", ", hidden_size, "): expected input of shape ", options.batch_first ? "(N, T, " : "(T, N, ",
             input_size, ") or unbatched (T, ", input_size, "), got ",
             input.defined() ? shape_str(input.shape()) : std::string("undefined"));
  if (input.dim() == 2) {  // unbatched: a batch of one, as PyTorch
    check_state(initial, 1, false);
    auto un = [](const Tensor& s) { return s.defined() ? s.unsqueeze(1) : s; };
    auto [out, st] = run(options.batch_first ? input.unsqueeze(0) : input.unsqueeze(1), {un(initial.h), un(initial.c)});
    return {out.squeeze(options.batch_first ? 0 : 1),
            RecurrentState{st.h.squeeze(1), st.c.defined() ? st.c.squeeze(1) : Tensor()}};
  }
  const Tensor x = options.batch_first ? input.transpose(0, 1) : input;  // (T, N, I)
  const int64_t T = x.size(0), N = x.size(1);
  KILN_CHECK(T > 0, name_, ": expected a sequence length larger than 0 (as PyTorch), got input of shape ",
             shape_str(input.shape()));
  check_state(initial, N, true);
  if (N == 0) {
    const TensorOptions zo{.dtype = x.dtype(), .device = x.device()};
    const int64_t LD = options.num_layers * directions();
    const Tensor out = zeros({T, 0, directions() * output_size()}, zo);
    return {options.batch_first ? out.transpose(0, 1) : out,
            RecurrentState{zeros({LD, 0, output_size()}, zo), has_cell_state() ? zeros({LD, 0, hidden_size}, zo) : Tensor()}};
  }
  auto [rows, st] = run_rows(x.reshape({T * N, input_size}), std::vector<int64_t>(size_t(T), N), initial);
  const Tensor out = rows.reshape({T, N, directions() * output_size()});
  return {options.batch_first ? out.transpose(0, 1) : out, st};
}

std::pair<PackedSequence, RecurrentState> RecurrentBase::forward_with_state(const PackedSequence& x,
                                                                            const RecurrentState& initial) {
  KILN_CHECK(!weight_ih.empty(), "recurrent layer: the module is empty (default-constructed)");
  KILN_CHECK(x.data.defined() && x.data.dim() == 2 && x.data.size(1) == input_size && !x.batch_sizes.empty(), name_,
             ": expected a PackedSequence of (rows, ", input_size, ") data, got ",
             x.data.defined() ? shape_str(x.data.shape()) : std::string("undefined"));
  const int64_t B = x.batch_sizes[0];
  check_state(initial, B, true);
  // states in the sorted order inside, the original order outside
  auto order = [](const Tensor& s, const Tensor& idx) { return s.defined() && idx.defined() ? index_select(s, 1, idx) : s; };
  const RecurrentState init{order(initial.h, x.sorted_indices), order(initial.c, x.sorted_indices)};
  auto [rows, st] = run_rows(x.data, x.batch_sizes, init);
  return {PackedSequence{rows, x.batch_sizes, x.sorted_indices, x.unsorted_indices},
          RecurrentState{order(st.h, x.unsorted_indices), order(st.c, x.unsorted_indices)}};
}

// ---- cells ----

CellBase::CellBase(const char* name, int64_t gates, int64_t in, int64_t hidden, bool b)
    : input_size(in), hidden_size(hidden), bias(b), name_(name) {
  KILN_CHECK(in > 0 && hidden > 0, name, ": input_size and hidden_size must be positive, got ", in, " and ", hidden);
  weight_ih = register_parameter("weight_ih", empty({gates * hidden, in}));
  weight_hh = register_parameter("weight_hh", empty({gates * hidden, hidden}));
  if (b) {
    bias_ih = register_parameter("bias_ih", empty({gates * hidden}));
    bias_hh = register_parameter("bias_hh", empty({gates * hidden}));
  }
  reset_parameters();
}

void CellBase::reset_parameters() {
  NoGradGuard ng;
  const double bound = hidden_size > 0 ? 1.0 / std::sqrt(double(hidden_size)) : 0.0;
  for (Tensor& p : parameters(false)) init::uniform_(p, -bound, bound);
}

std::string CellBase::extra_repr() const {
  std::ostringstream os;
  os << input_size << ", " << hidden_size;
  if (!bias) os << ", bias=false";
  return os.str();
}

Tensor CellBase::project(const Tensor& x) const {
  KILN_CHECK(weight_ih.defined(), name_, ": the module is empty (default-constructed)");
  KILN_CHECK(x.defined() && (x.dim() == 1 || x.dim() == 2) && x.size(-1) == input_size, name_, "(", input_size, ", ",
             hidden_size, "): expected input of shape (N, ", input_size, ") or (", input_size, "), got ",
             x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  return linear(x.dim() == 1 ? x.unsqueeze(0) : x, param(weight_ih), param(bias_ih));
}

Tensor CellBase::state_batch(const Tensor& x, const Tensor& h, const char* what) const {
  const Shape want = x.dim() == 1 ? Shape{hidden_size} : Shape{x.size(0), hidden_size};
  KILN_CHECK(!h.defined() || h.shape() == want, name_, ": the ", what, " state must have shape ", shape_str(want),
             ", got ", shape_str(h.shape()));
  return !h.defined() ? zeros({x.dim() == 1 ? 1 : x.size(0), hidden_size}, {.dtype = x.dtype(), .device = x.device()})
         : h.dim() == 1 ? h.unsqueeze(0)
                        : h;
}

}  // namespace detail

RNN::RNN(int64_t input_size, int64_t hidden_size, RecurrentOptions o) : RecurrentBase("RNN", 1, input_size, hidden_size, o) {}

std::pair<Tensor, Tensor> RNN::cell(const StepWeights& w, const Tensor& xw, const Tensor& h, const Tensor&) const {
  return {detail::rnn_step(xw, h, w.w_hh, w.b_hh, options.nonlinearity == "relu"), Tensor()};
}

std::pair<Tensor, Tensor> LSTM::cell(const StepWeights& w, const Tensor& xw, const Tensor& h, const Tensor& c) const {
  auto [h2, c2] = detail::lstm_step(xw, h, c, w.w_hh, w.b_hh);
  if (w.w_hr.defined()) h2 = linear(h2, w.w_hr);  // the projection, PyTorch's h = W_hr h
  return {h2, c2};
}

std::pair<Tensor, Tensor> GRU::cell(const StepWeights& w, const Tensor& xw, const Tensor& h, const Tensor&) const {
  return {detail::gru_step(xw, h, w.w_hh, w.b_hh), Tensor()};
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, const std::string& nl)
    : CellBase("RNNCell", 1, input_size, hidden_size, bias), nonlinearity(nl) {
  KILN_CHECK(nl == "tanh" || nl == "relu", "RNNCell: nonlinearity must be 'tanh' or 'relu', got '", nl, "'");
}

Tensor RNNCell::forward(const Tensor& x, const Tensor& h) const {
  const Tensor xw = project(x), hb = state_batch(x, h, "hidden");
  const Tensor out = detail::rnn_step(xw, hb, param(weight_hh), param(bias_hh), nonlinearity == "relu");
  return x.dim() == 1 ? out.squeeze(0) : out;
}

std::pair<Tensor, Tensor> LSTMCell::forward(const Tensor& x, const std::pair<Tensor, Tensor>& state) const {
  const Tensor xw = project(x), hb = state_batch(x, state.first, "hidden"), cb = state_batch(x, state.second, "cell");
  auto [h2, c2] = detail::lstm_step(xw, hb, cb, param(weight_hh), param(bias_hh));
  if (x.dim() == 1) return {h2.squeeze(0), c2.squeeze(0)};
  return {h2, c2};
}

Tensor GRUCell::forward(const Tensor& x, const Tensor& h) const {
  const Tensor xw = project(x), hb = state_batch(x, h, "hidden");
  const Tensor out = detail::gru_step(xw, hb, param(weight_hh), param(bias_hh));
  return x.dim() == 1 ? out.squeeze(0) : out;
}

// ---- packed sequences ----

namespace {
Tensor cpu_int64(const std::vector<int64_t>& v) { return from_vector(v, {int64_t(v.size())}, {.dtype = DType::int64}); }

// The positions of a padded batch's rows (T, B, * flattened to T * B or B * T rows) that a
// packed batch of these sorted lengths takes, in packed order: gather indices.
std::vector<int64_t> packed_rows(const std::vector<int64_t>& sorted_len, const std::vector<int64_t>& order, int64_t T,
                                 int64_t B, bool batch_first) {
  std::vector<int64_t> idx;
  for (int64_t t = 0; t < T; ++t)
    for (size_t j = 0; j < sorted_len.size() && sorted_len[j] > t; ++j)
      idx.push_back(batch_first ? order[j] * T + t : t * B + order[j]);
  return idx;
}
}  // namespace

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  KILN_CHECK(input.defined() && input.dim() >= 2, "pack_padded_sequence: expected a padded batch ",
             batch_first ? "(N, T, *)" : "(T, N, *)", ", got ", input.defined() ? shape_str(input.shape()) : "undefined");
  const int64_t T = input.size(batch_first ? 1 : 0), B = input.size(batch_first ? 0 : 1);
  KILN_CHECK(int64_t(lengths.size()) == B, "pack_padded_sequence: expected ", B, " lengths (one per sequence of ",
             shape_str(input.shape()), batch_first ? ", batch_first" : "", "), got ", lengths.size());
  KILN_CHECK(B > 0, "pack_padded_sequence: the batch is empty");
  for (int64_t l : lengths)
    KILN_CHECK(l > 0 && l <= T, "pack_padded_sequence: every length must be in 1..", T,
               " (the padded length; PyTorch also refuses lengths <= 0), got ", l);
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  if (enforce_sorted) {
    for (size_t i = 1; i < lengths.size(); ++i)
      KILN_CHECK(lengths[i] <= lengths[i - 1], "pack_padded_sequence: `lengths` must be sorted in decreasing order "
                 "when enforce_sorted is true (pass enforce_sorted = false to sort them here), got ", lengths[i - 1],
                 " before ", lengths[i]);
  } else {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[size_t(a)] > lengths[size_t(b)]; });
  }
  std::vector<int64_t> sorted_len(lengths.size());
  for (size_t j = 0; j < order.size(); ++j) sorted_len[j] = lengths[size_t(order[j])];
  std::vector<int64_t> bs(static_cast<size_t>(sorted_len[0]));
  for (int64_t t = 0; t < sorted_len[0]; ++t)
    bs[size_t(t)] = int64_t(std::count_if(sorted_len.begin(), sorted_len.end(), [t](int64_t l) { return l > t; }));
  Shape feat(input.shape().begin() + 2, input.shape().end());
  Shape flat{T * B};
  flat.insert(flat.end(), feat.begin(), feat.end());
  const std::vector<int64_t> rows = packed_rows(sorted_len, order, T, B, batch_first);
  const Tensor idx = from_vector(rows, {int64_t(rows.size())}, {.dtype = DType::int64, .device = input.device()});
  PackedSequence p{index_select(input.reshape(flat), 0, idx), bs, Tensor(), Tensor()};
  if (!enforce_sorted) {
    std::vector<int64_t> inv(order.size());
    for (size_t j = 0; j < order.size(); ++j) inv[size_t(order[j])] = int64_t(j);
    p.sorted_indices = cpu_int64(order).to(input.device());
    p.unsorted_indices = cpu_int64(inv).to(input.device());
  }
  return p;
}

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first, bool enforce_sorted) {
  KILN_CHECK(lengths.defined() && lengths.dim() == 1, "pack_padded_sequence: lengths must be a 1-D tensor, got ",
             lengths.defined() ? shape_str(lengths.shape()) : "undefined");
  return pack_padded_sequence(input, lengths.to(Device::cpu()).to(DType::int64).to_vector<int64_t>(), batch_first,
                              enforce_sorted);
}

std::pair<Tensor, Tensor> pad_packed_sequence(const PackedSequence& seq, bool batch_first, double padding_value,
                                              std::optional<int64_t> total_length) {
  KILN_CHECK(seq.data.defined() && seq.data.dim() >= 1 && !seq.batch_sizes.empty(),
             "pad_packed_sequence: expected a PackedSequence with data and batch_sizes");
  const int64_t T0 = int64_t(seq.batch_sizes.size()), B = seq.batch_sizes[0];
  const int64_t T = total_length.value_or(T0);
  KILN_CHECK(T >= T0, "pad_packed_sequence: expected total_length to be at least the length of the longest sequence "
             "in input, but got total_length=", T, " and max sequence length being ", T0);
  int64_t total = 0;
  std::vector<int64_t> off(static_cast<size_t>(T0));
  for (int64_t t = 0; t < T0; ++t) {
    KILN_CHECK(seq.batch_sizes[size_t(t)] >= 1 && seq.batch_sizes[size_t(t)] <= (t ? seq.batch_sizes[size_t(t - 1)] : B),
               "pad_packed_sequence: batch_sizes must be positive and non-increasing");
    off[size_t(t)] = total;
    total += seq.batch_sizes[size_t(t)];
  }
  KILN_CHECK(seq.data.size(0) == total, "pad_packed_sequence: data has ", seq.data.size(0),
             " rows, but batch_sizes add up to ", total);
  // the sorted position of each original sequence and the lengths
  std::vector<int64_t> pos(static_cast<size_t>(B)), len_sorted(static_cast<size_t>(B), 0);
  const std::vector<int64_t> unsorted =
      seq.unsorted_indices.defined() ? seq.unsorted_indices.to(Device::cpu()).to_vector<int64_t>() : std::vector<int64_t>();
  for (int64_t b = 0; b < B; ++b) pos[size_t(b)] = unsorted.empty() ? b : unsorted[size_t(b)];
  for (int64_t t = 0; t < T0; ++t)
    for (int64_t j = 0; j < seq.batch_sizes[size_t(t)]; ++j) ++len_sorted[size_t(j)];
  // one gather from the data with a padding row appended (row `total`)
  std::vector<int64_t> idx(static_cast<size_t>(T * B));
  std::vector<int64_t> lengths(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t j = pos[size_t(b)];
    lengths[size_t(b)] = len_sorted[size_t(j)];
    for (int64_t t = 0; t < T; ++t)
      idx[size_t(batch_first ? b * T + t : t * B + b)] = t < len_sorted[size_t(j)] ? off[size_t(t)] + j : total;
  }
  Shape feat(seq.data.shape().begin() + 1, seq.data.shape().end());
  Shape pad_shape{1};
  pad_shape.insert(pad_shape.end(), feat.begin(), feat.end());
  const Tensor src = cat({seq.data, full(pad_shape, padding_value, {.dtype = seq.data.dtype(), .device = seq.data.device()})}, 0);
  Shape out_shape = batch_first ? Shape{B, T} : Shape{T, B};
  out_shape.insert(out_shape.end(), feat.begin(), feat.end());
  const Tensor gather = from_vector(idx, {T * B}, {.dtype = DType::int64, .device = seq.data.device()});
  return {index_select(src, 0, gather).reshape(out_shape), cpu_int64(lengths)};
}

Tensor pad_sequence(const std::vector<Tensor>& seqs, bool batch_first, double padding_value, const std::string& side) {
  KILN_CHECK(!seqs.empty(), "pad_sequence: expected a non-empty list of sequences");
  KILN_CHECK(side == "right" || side == "left", "pad_sequence: padding_side must be 'right' or 'left', got '", side, "'");
  int64_t T = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    KILN_CHECK(seqs[i].defined() && seqs[i].dim() >= 1, "pad_sequence: sequence ", i, " must have at least one dim");
    KILN_CHECK(Shape(seqs[i].shape().begin() + 1, seqs[i].shape().end()) ==
                   Shape(seqs[0].shape().begin() + 1, seqs[0].shape().end()),
               "pad_sequence: sequences must have equal trailing dims: ", shape_str(seqs[0].shape()), " and ",
               shape_str(seqs[i].shape()), " (sequence ", i, ")");
    T = std::max(T, seqs[i].size(0));
  }
  std::vector<Tensor> padded;
  for (const Tensor& s : seqs) {
    Shape ps = s.shape();
    ps[0] = T - s.size(0);
    const Tensor pad = full(ps, padding_value, {.dtype = s.dtype(), .device = s.device()});
    padded.push_back(ps[0] == 0 ? s : side == "right" ? cat({s, pad}, 0) : cat({pad, s}, 0));
  }
  return stack(padded, batch_first ? 0 : 1);
}

PackedSequence pack_sequence(const std::vector<Tensor>& seqs, bool enforce_sorted) {
  std::vector<int64_t> lengths;
  for (const Tensor& s : seqs) lengths.push_back(s.defined() && s.dim() >= 1 ? s.size(0) : 0);
  return pack_padded_sequence(pad_sequence(seqs), lengths, false, enforce_sorted);
}

std::vector<Tensor> unpad_sequence(const Tensor& padded, const std::vector<int64_t>& lengths, bool batch_first) {
  KILN_CHECK(padded.defined() && padded.dim() >= 2, "unpad_sequence: expected a padded batch, got ",
             padded.defined() ? shape_str(padded.shape()) : "undefined");
  const Tensor p = batch_first ? padded : padded.transpose(0, 1);  // (N, T, *)
  KILN_CHECK(int64_t(lengths.size()) == p.size(0), "unpad_sequence: expected ", p.size(0), " lengths, got ",
             lengths.size());
  std::vector<Tensor> out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    KILN_CHECK(lengths[i] >= 0 && lengths[i] <= p.size(1), "unpad_sequence: length ", lengths[i], " outside 0..",
               p.size(1));
    out.push_back(p.select(0, int64_t(i)).narrow(0, 0, lengths[i]));
  }
  return out;
}

std::vector<Tensor> unpack_sequence(const PackedSequence& packed) {
  auto [padded, lengths] = pad_packed_sequence(packed, true);
  return unpad_sequence(padded, lengths.to_vector<int64_t>(), true);
}

}  // namespace kiln::nn
