// A recurrent network on a sequence task, in one short script: an LSTM (or a GRU) reads
// sequences of random numbers in [-1, 1] and, at every step, predicts the running mean of
// what it has read so far. That needs memory of the whole prefix, which a plain MLP over
// one step cannot have. It prints the mean squared error as it trains and exits non-zero
// unless the error fell to under a tenth of the first.
//
//   sequence_rnn [--cell lstm|gru] [--steps N] [--length T] [--threads N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <kiln/kiln.h>

namespace nn = kiln::nn;
using kiln::Tensor;

struct Net : nn::Module {
  std::shared_ptr<nn::detail::RecurrentBase> rnn;
  nn::Linear head;
  explicit Net(bool gru) {
    if (gru) rnn = register_module("rnn", std::make_shared<nn::GRU>(1, 32, nn::RecurrentOptions{.batch_first = true}));
    else rnn = register_module("rnn", std::make_shared<nn::LSTM>(1, 32, nn::RecurrentOptions{.batch_first = true}));
    head = register_module("head", nn::Linear(32, 1));
  }
  Tensor forward(const Tensor& x) override { return head((*rnn)(x)); }  // (N, T, 1) -> (N, T, 1)
};

int main(int argc, char** argv) {
  std::string cell = "lstm";
  int64_t steps = 300, T = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--cell")) cell = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--length")) T = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) kiln::set_num_threads(std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: sequence_rnn [--cell lstm|gru] [--steps N] [--length T] [--threads N]\n");
      return 2;
    }
  }
  kiln::manual_seed(0);
  Net net(cell == "gru");
  kiln::optim::Adam opt(net.parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    const Tensor x = kiln::sub(kiln::mul(kiln::rand({64, T, 1}), 2.0), 1.0);  // (N, T, 1) in [-1, 1]
    // target: running mean, (cumulative sum) / (1, 2, ..., T), built from the prefix sums
    const Tensor counts = kiln::arange(1.0, double(T + 1), 1.0).reshape({1, T, 1});
    std::vector<float> tri(size_t(T * T), 0.0f);  // (T, T): ones on and below the diagonal
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) tri[size_t(i * T + j)] = 1.0f;
    const Tensor lower = kiln::from_vector(tri, {T, T});
    const Tensor target = kiln::div(kiln::matmul(lower, x), counts);
    Tensor loss = kiln::mse_loss(net(x), target);
    loss.backward();
    opt.step();
    opt.zero_grad();
    last = loss.item();
    if (step == 1) first = last;
    if (step % 50 == 0 || step == 1) std::printf("step %4lld  mse %.5f\n", static_cast<long long>(step), last);
  }
  std::printf("%s: mse %.5f -> %.5f\n", cell.c_str(), first, last);
  return last < first / 10 ? 0 : 1;
}
