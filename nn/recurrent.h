// Recurrent layers: LSTM and GRU (PyTorch's nn.LSTM / nn.GRU: the same gate order,
// parameter names, shapes and initialisation), stacked over num_layers, unidirectional.
// Each time step is a few ops (two linears, sigmoid/tanh, products), so autograd gives
// backpropagation through time; the input projection of all steps is one matmul per layer.
//
//   nn::LSTM lstm(8, 32, {.num_layers = 2, .batch_first = true});
//   auto [out, state] = lstm.forward_with_state(x);  // out (N, T, 32); state.h, state.c (2, N, 32)
//   Tensor y = lstm(x);                              // out only (usable in a Sequential)
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "kiln/nn/module.h"

namespace kiln::nn {

struct RecurrentOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;  ///< input (N, T, features) instead of (T, N, features)
};

/// The hidden state of every layer after the last step: h (and, for an LSTM, the cell
/// state c), each (num_layers, N, hidden_size). Undefined tensors mean zeros.
struct RecurrentState {
  Tensor h, c;
};

namespace detail {
/// Parameters and shared plumbing of LSTM (gates = 4) and GRU (gates = 3).
class RecurrentBase : public Module {
 public:
  Tensor forward(const Tensor& x) override { return run(x, {}).first; }
  /// The outputs of the last layer at every step ((T, N, H) or (N, T, H)) and the final state.
  std::pair<Tensor, RecurrentState> forward_with_state(const Tensor& x, const RecurrentState& initial = {}) {
    return run(x, initial);
  }
  void reset_parameters() override;
  std::string extra_repr() const override;

  int64_t input_size = 0, hidden_size = 0;
  RecurrentOptions options;
  /// Per layer: weight_ih (gates*H, in), weight_hh (gates*H, H), bias_ih, bias_hh (gates*H).
  std::vector<Tensor> weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RecurrentBase() = default;
  RecurrentBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, RecurrentOptions o);
  /// One step of one layer: xw = this step's input projection (N, gates*H) with bias_ih,
  /// (h, c) the state before; returns the new (h, c).
  virtual std::pair<Tensor, Tensor> cell(size_t layer, const Tensor& xw, const Tensor& h, const Tensor& c) const = 0;
  virtual bool has_cell_state() const = 0;

 private:
  std::pair<Tensor, RecurrentState> run(const Tensor& x, const RecurrentState& initial) const;
  const char* name_ = "";
};
}  // namespace detail

/// Long short-term memory: gates (i, f, g, o) = (sigmoid, sigmoid, tanh, sigmoid) of
/// W_ih x + b_ih + W_hh h + b_hh; c' = f c + i g; h' = o tanh(c').
class LSTM : public detail::RecurrentBase {
 public:
  LSTM() = default;
  LSTM(int64_t input_size, int64_t hidden_size, RecurrentOptions o = {}) : RecurrentBase("LSTM", 4, input_size, hidden_size, o) {}

 protected:
  std::pair<Tensor, Tensor> cell(size_t layer, const Tensor& xw, const Tensor& h, const Tensor& c) const override;
  bool has_cell_state() const override { return true; }
};

/// Gated recurrent unit: r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z likewise,
/// n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h.
class GRU : public detail::RecurrentBase {
 public:
  GRU() = default;
  GRU(int64_t input_size, int64_t hidden_size, RecurrentOptions o = {}) : RecurrentBase("GRU", 3, input_size, hidden_size, o) {}

 protected:
  std::pair<Tensor, Tensor> cell(size_t layer, const Tensor& xw, const Tensor& h, const Tensor& c) const override;
  bool has_cell_state() const override { return false; }
};

}  // namespace kiln::nn
