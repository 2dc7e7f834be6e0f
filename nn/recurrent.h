// Recurrent layers: RNN, LSTM and GRU (PyTorch's nn.RNN / nn.LSTM / nn.GRU: the same gate
// order, parameter names, shapes and initialisation), stacked over num_layers, optionally
// bidirectional with dropout between layers; the cells RNNCell, LSTMCell, GRUCell; and
// torch.nn.utils.rnn's packed sequences for batches of different lengths. Each time step is
// a few ops (a linear, sigmoid/tanh, products), so autograd gives backpropagation through
// time; the input projection of all steps is one matmul per layer and direction.
//
//   nn::LSTM lstm(8, 32, {.num_layers = 2, .batch_first = true, .bidirectional = true});
//   auto [out, state] = lstm.forward_with_state(x);  // out (N, T, 64); state.h, state.c (4, N, 32)
//   Tensor y = lstm(x);                              // out only (usable in a Sequential)
//   // sequences of lengths 5, 3, 2 padded to (N, 5, 8):
//   auto packed = nn::pack_padded_sequence(x, {5, 3, 2}, /*batch_first=*/true);
//   auto [pout, pstate] = lstm.forward_with_state(packed);  // pstate.h: each sequence's last step
//   auto [padded, lengths] = nn::pad_packed_sequence(pout, /*batch_first=*/true);
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "kiln/nn/module.h"

namespace kiln::nn {

struct RecurrentOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;    ///< input (N, T, features) instead of (T, N, features)
  double dropout = 0.0;        ///< dropout on the outputs of every layer but the last, in training mode
  bool bidirectional = false;  ///< a second pass from the last step back; outputs (.., 2 * hidden_size)
  std::string nonlinearity = "tanh";  ///< RNN only: "tanh" or "relu"
  int64_t proj_size = 0;  ///< LSTM only: h = W_hr (o tanh(c)) of this size (0: none; below hidden_size)
};

/// The hidden state of every layer after the last step: h (and, for an LSTM, the cell
/// state c), each (num_layers * directions, N, hidden_size), layer-major (layer l's reverse
/// direction at 2 l + 1); with an LSTM's proj_size, h is (.., N, proj_size). Undefined
/// tensors mean zeros.
struct RecurrentState {
  Tensor h, c;
};

/// A batch of sequences of different lengths without their padding (torch.nn.utils.rnn's
/// PackedSequence): step t's inputs of the batch_sizes[t] sequences still running, one after
/// another, the sequences sorted by decreasing length. Made by pack_padded_sequence or
/// pack_sequence; recurrent layers take it in forward_with_state.
struct PackedSequence {
  Tensor data;                       ///< (sum of the lengths, *)
  std::vector<int64_t> batch_sizes;  ///< per step, non-increasing (PyTorch: an int64 CPU tensor)
  Tensor sorted_indices;             ///< int64: the batch index of each sorted position (undefined: already sorted)
  Tensor unsorted_indices;           ///< int64: its inverse
};

/// Packs a padded batch (T, N, *) (batch_first: (N, T, *)) of sequences of the given lengths
/// (each 1..T). enforce_sorted: lengths must be non-increasing; otherwise the sequences are
/// sorted here (stable) and the order is restored by pad_packed_sequence and in the final
/// states. Differentiable (one gather).
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);
/// lengths as an int64 tensor on any device.
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);
/// The inverse: the padded batch (T, N, *) or (N, T, *), T = total_length when given (at
/// least the longest), padding_value after each sequence's end, in the original batch order;
/// and the lengths (int64, CPU). Differentiable (one gather).
std::pair<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                              double padding_value = 0.0,
                                              std::optional<int64_t> total_length = std::nullopt);
/// Stacks sequences (L_i, *) padded to the longest: (L, N, *), or (N, L, *) with batch_first;
/// padding_side "right" (after) or "left" (before), as torch.nn.utils.rnn.pad_sequence.
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0,
                    const std::string& padding_side = "right");
/// Packs a list of sequences (L_i, *) (pad_sequence then pack_padded_sequence).
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);
/// The sequences of a packed batch, each (L_i, *), in the original order.
std::vector<Tensor> unpack_sequence(const PackedSequence& packed);
/// The sequences of a padded batch (T, N, *) (batch_first: (N, T, *)) cut to their lengths.
std::vector<Tensor> unpad_sequence(const Tensor& padded, const std::vector<int64_t>& lengths, bool batch_first = false);

namespace detail {
/// Parameters and shared plumbing of RNN (gates = 1), LSTM (4) and GRU (3).
class RecurrentBase : public Module {
 public:
  Tensor forward(const Tensor& x) override { return run(x, {}).first; }
  /// The outputs of the last layer at every step ((T, N, D*H) or (N, T, D*H); an unbatched
  /// (T, I) input gives (T, D*H) and states (L*D, H)) and the final state.
  std::pair<Tensor, RecurrentState> forward_with_state(const Tensor& x, const RecurrentState& initial = {}) {
    return run(x, initial);
  }
  /// A packed batch: the outputs packed the same way, and each sequence's state after its
  /// own last step (the reverse direction: after its first), in the original batch order.
  /// initial is in the original order too.
  std::pair<PackedSequence, RecurrentState> forward_with_state(const PackedSequence& x,
                                                               const RecurrentState& initial = {});
  void reset_parameters() override;
  std::string extra_repr() const override;

  int64_t input_size = 0, hidden_size = 0;
  RecurrentOptions options;
  /// Per layer and direction (index layer * directions + direction): weight_ih (gates*H, in),
  /// weight_hh (gates*H, H), bias_ih, bias_hh (gates*H). PyTorch's names: weight_ih_l0,
  /// weight_ih_l0_reverse, ...
  std::vector<Tensor> weight_ih, weight_hh, bias_ih, bias_hh;
  /// LSTM with proj_size: weight_hr (proj_size, H) per layer and direction (weight_hr_l0, ...).
  std::vector<Tensor> weight_hr;
  int64_t directions() const { return options.bidirectional ? 2 : 1; }
  /// The size of h and of each direction's output: proj_size when set, else hidden_size.
  int64_t output_size() const { return options.proj_size > 0 ? options.proj_size : hidden_size; }

 protected:
  RecurrentBase() = default;
  RecurrentBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, RecurrentOptions o);
  /// One layer and direction's recurrent weights as a forward uses them (Module::param:
  /// parametrized ones are computed once a forward); w_hr only with proj_size.
  struct StepWeights {
    Tensor w_hh, b_hh, w_hr;
  };
  /// One step of one layer and direction: xw = this step's input projection (N, gates*H)
  /// with bias_ih, (h, c) the state before; returns the new (h, c).
  virtual std::pair<Tensor, Tensor> cell(const StepWeights& w, const Tensor& xw, const Tensor& h, const Tensor& c) const = 0;
  virtual bool has_cell_state() const = 0;

 private:
  std::pair<Tensor, RecurrentState> run(const Tensor& x, const RecurrentState& initial) const;
  /// Every layer over rows (sum of batch_sizes, I) of B sequences sorted by decreasing length;
  /// initial states in that order. Returns the last layer's rows and the final states.
  std::pair<Tensor, RecurrentState> run_rows(const Tensor& rows, const std::vector<int64_t>& batch_sizes,
                                             const RecurrentState& initial) const;
  void check_state(const RecurrentState& initial, int64_t batch, bool batched) const;
  const char* name_ = "";
};

/// The step formulas the layers and cells share: xw = W_ih x + b_ih for this step.
Tensor rnn_step(const Tensor& xw, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh, bool relu);
std::pair<Tensor, Tensor> lstm_step(const Tensor& xw, const Tensor& h, const Tensor& c, const Tensor& w_hh,
                                    const Tensor& b_hh);
Tensor gru_step(const Tensor& xw, const Tensor& h, const Tensor& w_hh, const Tensor& b_hh);

/// Parameters of the cells: weight_ih (gates*H, in), weight_hh (gates*H, H), bias_ih, bias_hh.
class CellBase : public Module {
 public:
  void reset_parameters() override;
  std::string extra_repr() const override;
  int64_t input_size = 0, hidden_size = 0;
  bool bias = true;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  CellBase() = default;
  CellBase(const char* name, int64_t gates, int64_t input_size, int64_t hidden_size, bool bias);
  /// Checks x (N, I) or unbatched (I) and returns x's projection W_ih x + b_ih, batched.
  Tensor project(const Tensor& x) const;
  /// Checks a state (N, H) / (H) for x (undefined: zeros) and returns it batched.
  Tensor state_batch(const Tensor& x, const Tensor& h, const char* what) const;
  const char* name_ = "";
};
}  // namespace detail

/// Elman RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (options.nonlinearity "relu": relu).
class RNN : public detail::RecurrentBase {
 public:
  RNN() = default;
  RNN(int64_t input_size, int64_t hidden_size, RecurrentOptions o = {});

 protected:
  std::pair<Tensor, Tensor> cell(const StepWeights& w, const Tensor& xw, const Tensor& h, const Tensor& c) const override;
  bool has_cell_state() const override { return false; }
};

/// Long short-term memory: gates (i, f, g, o) = (sigmoid, sigmoid, tanh, sigmoid) of
/// W_ih x + b_ih + W_hh h + b_hh; c' = f c + i g; h' = o tanh(c').
class LSTM : public detail::RecurrentBase {
 public:
  LSTM() = default;
  LSTM(int64_t input_size, int64_t hidden_size, RecurrentOptions o = {}) : RecurrentBase("LSTM", 4, input_size, hidden_size, o) {}

 protected:
  std::pair<Tensor, Tensor> cell(const StepWeights& w, const Tensor& xw, const Tensor& h, const Tensor& c) const override;
  bool has_cell_state() const override { return true; }
};

/// Gated recurrent unit: r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z likewise,
/// n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h.
class GRU : public detail::RecurrentBase {
 public:
  GRU() = default;
  GRU(int64_t input_size, int64_t hidden_size, RecurrentOptions o = {}) : RecurrentBase("GRU", 3, input_size, hidden_size, o) {}

 protected:
  std::pair<Tensor, Tensor> cell(const StepWeights& w, const Tensor& xw, const Tensor& h, const Tensor& c) const override;
  bool has_cell_state() const override { return false; }
};

/// One step of an RNN: forward(x, h) with x (N, input_size) or unbatched (input_size), h (N,
/// hidden_size) or undefined (zeros); returns h'.
class RNNCell : public detail::CellBase {
 public:
  RNNCell() = default;
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, const std::string& nonlinearity = "tanh");
  using Module::forward;
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& h) const;
  std::string nonlinearity = "tanh";
};

/// One step of an LSTM: forward(x, {h, c}) returns {h', c'} (undefined state: zeros).
class LSTMCell : public detail::CellBase {
 public:
  LSTMCell() = default;
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true) : CellBase("LSTMCell", 4, input_size, hidden_size, bias) {}
  using Module::forward;
  /// h' alone (zero initial state).
  Tensor forward(const Tensor& x) override { return forward(x, {}).first; }
  std::pair<Tensor, Tensor> forward(const Tensor& x, const std::pair<Tensor, Tensor>& state) const;
};

/// One step of a GRU: forward(x, h) returns h'.
class GRUCell : public detail::CellBase {
 public:
  GRUCell() = default;
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true) : CellBase("GRUCell", 3, input_size, hidden_size, bias) {}
  using Module::forward;
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& h) const;
};


}  // namespace kiln::nn
