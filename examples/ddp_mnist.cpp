// Data-parallel training of LeNet-5 on MNIST-format data: the script of mnist_cnn.cpp with
// four additions (dist::init, DistributedSampler, DistributedDataParallel, rank 0 alone
// prints and saves). The same binary runs on one process or under mpirun:
//
//   ddp_mnist --data DIR                                   # one process
//   mpirun -np 2 ddp_mnist --data DIR --threads 1          # two ranks, the batch split between them
//
// --batch-size is the global batch: each rank takes batch-size / ranks of it. Exits with
// status 1 if a loss is NaN/inf or the last epoch's loss is not below the first's.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <kiln/kiln.h>
#include "kiln/dist/ddp.h"
#include "kiln/dist/dist.h"
#include "kiln/dist/sampler.h"

namespace dist = kiln::dist;
using kiln::Tensor;

int main(int argc, char** argv) {
  std::string data = "/usr/share/datasets/fashion-mnist", save = "ddp_mnist.safetensors";
  int epochs = 2, threads = 0;
  int64_t batch = 64;
  const char* usage = "usage: ddp_mnist [--data DIR] [--epochs N] [--batch-size N] [--threads N] [--save FILE]\n";
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--help") return std::printf("%s", usage), 0;
    if (i + 1 >= argc) return std::fprintf(stderr, "ddp_mnist: %s needs a value\n%s", flag.c_str(), usage), 2;
    const std::string value = argv[i + 1];
    try {
      if (flag == "--data") data = value;
      else if (flag == "--epochs") epochs = std::stoi(value);
      else if (flag == "--batch-size") batch = std::stoll(value);
      else if (flag == "--threads") threads = std::stoi(value);
      else if (flag == "--save") save = value;
      else return std::fprintf(stderr, "ddp_mnist: unknown flag %s\n%s", flag.c_str(), usage), 2;
    } catch (const std::exception&) {
      return std::fprintf(stderr, "ddp_mnist: %s expects a number, got '%s'\n", flag.c_str(), value.c_str()), 2;
    }
  }
  if (epochs < 1 || batch < 1 || threads < 0)
    return std::fprintf(stderr, "ddp_mnist: --epochs and --batch-size must be positive, --threads >= 0\n"), 2;
  try {
    dist::init();                                               // 1. join the job (or be a 1-process group)
    const int rank = dist::rank(), world = dist::world_size();
    if (threads > 0) kiln::set_num_threads(threads);
    kiln::manual_seed(0);
    auto train = std::make_shared<kiln::data::TensorDataset>(kiln::data::MNIST(data, kiln::data::Split::Train));
    auto sampler = std::make_shared<dist::DistributedSampler>(  // 2. this rank's share of every epoch
        dist::DistributedSamplerOptions{.seed = 0, .drop_last = true});
    kiln::data::DataLoader loader(train, {.batch_size = batch / world, .sampler = sampler, .drop_last = true});
    auto model = std::make_shared<kiln::models::LeNet5>(kiln::models::LeNet5Options{1, 10});
    dist::DistributedDataParallel ddp(model);                  // 3. rank 0's weights; averaged gradients
    kiln::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    double first = 0, last = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      loader.set_epoch(epoch);
      double sum = 0;
      int64_t n = 0;
      for (auto& b : loader) {
        Tensor loss = kiln::cross_entropy(ddp(b.input), b.target);
        loss.backward();
        opt.step();
        opt.zero_grad();
        const double l = loss.item();
        if (!std::isfinite(l)) return std::fprintf(stderr, "loss is %f\n", l), 1;
        sum += l, ++n;
      }
      Tensor mean = kiln::scalar_tensor(sum / double(std::max<int64_t>(n, 1)), {.dtype = kiln::DType::float64});
      dist::all_reduce(mean, dist::ReduceOp::avg);              // the mean over the ranks
      (epoch == 0 ? first : last) = mean.item();
      if (rank == 0)                                            // 4. rank 0 alone prints and saves
        std::printf("epoch %d: mean loss %.4f over %d rank(s), %lld steps of %lld\n", epoch + 1, mean.item(), world,
                    static_cast<long long>(n), static_cast<long long>(batch));
    }
    if (rank == 0) kiln::save(model->state_dict(), save);
    return epochs > 1 && !(last < first) ? 1 : 0;
  } catch (const std::exception& e) {
    dist::abort(e.what());
  }
}
