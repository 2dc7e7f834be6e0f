// LSTM and GRU (see recurrent.h).
#include "kiln/nn/recurrent.h"
#include <cmath>
#include <tuple>
#include <sstream>
#include "kiln/nn/init.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::nn::detail {

RecurrentBase::RecurrentBase(const char* name, int64_t gates, int64_t in, int64_t hidden, RecurrentOptions o)
    : input_size(in), hidden_size(hidden), options(o), name_(name) {
  KILN_CHECK(in > 0 && hidden > 0, name, ": input_size and hidden_size must be positive, got ", in, " and ", hidden);
  KILN_CHECK(o.num_layers >= 1, name, ": num_layers must be >= 1, got ", o.num_layers);
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const std::string s = "_l" + std::to_string(l);
    weight_ih.push_back(register_parameter("weight_ih" + s, empty({gates * hidden, l == 0 ? in : hidden})));
    weight_hh.push_back(register_parameter("weight_hh" + s, empty({gates * hidden, hidden})));
    if (o.bias) {
      bias_ih.push_back(register_parameter("bias_ih" + s, empty({gates * hidden})));
      bias_hh.push_back(register_parameter("bias_hh" + s, empty({gates * hidden})));
    } else {
      bias_ih.emplace_back();
      bias_hh.emplace_back();
    }
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
  if (!options.bias) os << ", bias=false";
  if (options.batch_first) os << ", batch_first=true";
  return os.str();
}

std::pair<Tensor, RecurrentState> RecurrentBase::run(const Tensor& input, const RecurrentState& initial) const {
  KILN_CHECK(!weight_ih.empty(), "recurrent layer: the module is empty (default-constructed); assign it from "
             "register_module(name, nn::LSTM(...)) before calling it");
  KILN_CHECK(input.defined() && input.dim() == 3 && input.size(2) == input_size, name_, "(", input_size, ", ",
             hidden_size, "): expected input of shape ", options.batch_first ? "(N, T, " : "(T, N, ", input_size,
             "), got ", input.defined() ? shape_str(input.shape()) : std::string("undefined"));
  const Tensor x = options.batch_first ? input.transpose(0, 1) : input;  // (T, N, I)
  const int64_t T = x.size(0), N = x.size(1), H = hidden_size, L = options.num_layers;
  KILN_CHECK(T > 0, name_, ": expected a sequence length larger than 0 (as PyTorch), got input of shape ",
             shape_str(input.shape()));
  const Shape state_shape{L, N, H};
  for (const Tensor* s : {&initial.h, &initial.c})
    KILN_CHECK(!s->defined() || s->shape() == state_shape, name_, ": the initial state must have shape ",
               shape_str(state_shape), ", got ", shape_str(s->shape()));
  KILN_CHECK(!initial.c.defined() || has_cell_state(), name_, ": has no cell state; pass only h");
  const TensorOptions zo{.dtype = x.dtype(), .device = x.device()};
  Tensor layer_in = x;
  std::vector<Tensor> hn, cn;
  for (int64_t l = 0; l < L; ++l) {
    const size_t li = size_t(l);
    const Tensor xw = linear(layer_in, weight_ih[li], bias_ih[li]);  // (T, N, gates*H): every step at once
    Tensor h = initial.h.defined() ? initial.h.select(0, l) : zeros({N, H}, zo);
    Tensor c = has_cell_state() ? (initial.c.defined() ? initial.c.select(0, l) : zeros({N, H}, zo)) : Tensor();
    std::vector<Tensor> outs;
    outs.reserve(size_t(T));
    for (int64_t t = 0; t < T; ++t) {
      std::tie(h, c) = cell(li, xw.select(0, t), h, c);
      outs.push_back(h);
    }
    layer_in = T > 0 ? stack(outs, 0) : zeros({0, N, H}, zo);
    hn.push_back(h);
    if (has_cell_state()) cn.push_back(c);
  }
  RecurrentState st{stack(hn, 0), has_cell_state() ? stack(cn, 0) : Tensor()};
  return {options.batch_first ? layer_in.transpose(0, 1) : layer_in, st};
}

}  // namespace kiln::nn::detail

namespace kiln::nn {

std::pair<Tensor, Tensor> LSTM::cell(size_t l, const Tensor& xw, const Tensor& h, const Tensor& c) const {
  const int64_t H = hidden_size;
  const Tensor gates = add(xw, linear(h, weight_hh[l], bias_hh[l]));  // (N, 4H): i, f, g, o
  const Tensor i = sigmoid(gates.narrow(1, 0, H)), f = sigmoid(gates.narrow(1, H, H));
  const Tensor g = tanh(gates.narrow(1, 2 * H, H)), o = sigmoid(gates.narrow(1, 3 * H, H));
  const Tensor c2 = add(mul(f, c), mul(i, g));
  return {mul(o, tanh(c2)), c2};
}

std::pair<Tensor, Tensor> GRU::cell(size_t l, const Tensor& xw, const Tensor& h, const Tensor&) const {
  const int64_t H = hidden_size;
  const Tensor hw = linear(h, weight_hh[l], bias_hh[l]);  // (N, 3H): r, z, n
  const Tensor r = sigmoid(add(xw.narrow(1, 0, H), hw.narrow(1, 0, H)));
  const Tensor z = sigmoid(add(xw.narrow(1, H, H), hw.narrow(1, H, H)));
  const Tensor n = tanh(add(xw.narrow(1, 2 * H, H), mul(r, hw.narrow(1, 2 * H, H))));
  return {add(n, mul(z, sub(h, n))), Tensor()};  // (1 - z) n + z h
}

}  // namespace kiln::nn
