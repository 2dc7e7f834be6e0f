// Course chapter 4 (docs/course/04-training-loop.md): the pieces of every training loop.
// A module (nn::Sequential of layers with parameters), data (a Dataset split into train and
// validation, a DataLoader in shuffled batches), an optimizer (AdamW), the loop (forward,
// loss, backward, step, zero_grad) and evaluation (eval mode, no graph). The data: two
// interleaved spirals, which no straight line separates.
#include <cmath>
#include <cstdio>
#include <vector>
#include <kiln/kiln.h>

namespace nn = kiln::nn;
using kiln::Tensor;

// n points on each of two spiral arms (one full turn each), with a little noise.
static kiln::data::TensorDataset spirals(int n) {
  std::vector<float> xs;
  std::vector<int64_t> ys;
  const std::vector<float> noise = kiln::mul(kiln::randn({2 * n, 2}), 0.05).to_vector<float>();
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < n; ++i) {
      const double r = 0.1 + 0.9 * i / n, t = 2.0 * M_PI * i / n + c * M_PI;
      const int k = c * n + i;
      xs.push_back(float(2 * r * std::cos(t)) + noise[size_t(2 * k)]);
      xs.push_back(float(2 * r * std::sin(t)) + noise[size_t(2 * k + 1)]);
      ys.push_back(c);
    }
  return kiln::data::TensorDataset(kiln::from_vector(xs, {2 * n, 2}), kiln::from_vector(ys, {2 * n}));
}

// Fraction of `set` the model classifies right: eval mode, no autograd graph.
static double accuracy(nn::Module& model, const std::shared_ptr<kiln::data::Dataset>& set) {
  model.eval();
  kiln::NoGradGuard no_grad;
  int64_t right = 0;
  for (auto& b : kiln::data::DataLoader(set, {.batch_size = 256}))
    right += int64_t(kiln::sum(kiln::argmax(model(b.input), 1) == b.target).item());
  model.train();
  return double(right) / double(set->size());
}

int main() {
  kiln::manual_seed(0);
  kiln::set_num_threads(1);
  auto all = std::make_shared<kiln::data::TensorDataset>(spirals(300));
  const auto parts = kiln::data::random_split(all, {0.8, 0.2});  // 480 train, 120 validation
  std::shared_ptr<kiln::data::Dataset> train = parts[0], val = parts[1];

  nn::Sequential model{nn::Linear(2, 64), nn::Tanh(), nn::Linear(64, 64), nn::Tanh(), nn::Linear(64, 2)};
  std::printf("model: %lld parameters in", (long long)model.num_parameters());
  for (const auto& [name, p] : model.named_parameters())
    std::printf(" %s%s", name.c_str(), kiln::shape_str(p.shape()).c_str());
  std::printf("\n");
  kiln::optim::AdamW opt(model.parameters(), {.lr = 0.01, .weight_decay = 0.0});
  kiln::data::DataLoader loader(train, {.batch_size = 32, .shuffle = true});

  std::printf("before training: validation accuracy %.1f%%\n", 100 * accuracy(model, val));
  double loss_sum = 0;
  for (int epoch = 1; epoch <= 40; ++epoch) {
    loss_sum = 0;
    for (auto& batch : loader) {
      Tensor loss = kiln::cross_entropy(model(batch.input), batch.target);  // forward
      opt.zero_grad();                                                       // clear last step's gradients
      loss.backward();                                                       // d loss / d every parameter
      opt.step();                                                            // move the parameters
      loss_sum += loss.item();
    }
    if (epoch % 10 == 0)
      std::printf("epoch %2d  train loss %.4f  validation accuracy %.1f%%\n", epoch,
                  loss_sum / double(loader.size()), 100 * accuracy(model, val));
  }
  const double acc = accuracy(model, val);
  return acc > 0.9 ? 0 : 1;  // the spirals are separable: a run that fails to learn them fails
}
