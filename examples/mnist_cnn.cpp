// Trains a small CNN (the "convnet" of WORKLOADS.md, spelled out layer by layer) on
// Fashion-MNIST or MNIST: DataLoader with shuffling and worker threads, SGD with momentum,
// a live progress bar, the training loss every few steps and the test accuracy after each
// epoch in a metrics CSV with its PNG plot (kiln's monitor/, the same as `kiln train`'s).
//
//   mnist_cnn [--data DIR] [--epochs N] [--batch-size N] [--limit N] [--threads N]
//             [--workers N] [--log-every N] [--save PATH] [--metrics CSV]
//
//   mnist_cnn                                   # Fashion-MNIST from /usr/share/datasets/fashion-mnist
//   mnist_cnn --data ~/mnist --epochs 1         # any folder with the four MNIST IDX files (.gz or not)
//   mnist_cnn --limit 1000                      # only the first 1000 train and test images (quick try)
// The trained weights go to mnist_cnn.safetensors (--save PATH to change), the metrics to
// mnist_cnn.csv and mnist_cnn.png (--metrics CSV to change).
//
// Sanity check: it exits with status 1 if a loss is NaN/inf, or if (with 2+ epochs) the
// last epoch's mean loss is not below the first's; the smoke test relies on that.
#include <cmath>
#include <cstdio>
#include <string>
#include <kiln/kiln.h>

namespace nn = kiln::nn;
using kiln::Tensor;

// The same layers (and parameter names) as kiln::models::ConvNet.
struct ConvNet : nn::Module {
  nn::Sequential features, classifier;
  ConvNet() {
    features = register_module("features", nn::Sequential{
        nn::Conv2d(1, 32, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(32), nn::ReLU(),   // (N, 32, 28, 28)
        nn::Conv2d(32, 32, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(32), nn::ReLU(),
        nn::MaxPool2d(2),                                                                       // (N, 32, 14, 14)
        nn::Conv2d(32, 64, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(64), nn::ReLU(),  // (N, 64, 14, 14)
        nn::Conv2d(64, 64, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(64), nn::ReLU(),
        nn::MaxPool2d(2)});                                                                     // (N, 64, 7, 7)
    classifier = register_module("classifier", nn::Sequential{
        nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10)});          // (N, 10) logits
  }
  Tensor forward(const Tensor& x) override { return classifier(features(x)); }
};

// The first n examples of a dataset (all of them when n <= 0), pixels served as float32 in [0, 1].
static kiln::data::TensorDataset first_n(const kiln::data::MNIST& d, int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  return kiln::data::TensorDataset(d.inputs().narrow(0, 0, n), d.targets().narrow(0, 0, n),
                                   {.input_dtype = kiln::DType::float32, .input_scale = 1.0 / 255});
}

static int run(int argc, char** argv) {
  std::string data_dir = "/usr/share/datasets/fashion-mnist", save_path = "mnist_cnn.safetensors",
              metrics_path = "mnist_cnn.csv";
  int epochs = 2, batch_size = 64, threads = 2, workers = 2, log_every = 100;
  int64_t limit = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--data") data_dir = next();
    else if (a == "--epochs") epochs = std::stoi(next());
    else if (a == "--batch-size") batch_size = std::stoi(next());
    else if (a == "--limit") limit = std::stoll(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--workers") workers = std::stoi(next());
    else if (a == "--log-every") log_every = std::stoi(next());
    else if (a == "--save") save_path = next();
    else if (a == "--metrics") metrics_path = next();
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
  }
  kiln::set_num_threads(threads);
  kiln::manual_seed(0);  // same weights and shuffle order on every run
  // Use the GPU when the build has CUDA and one is present; otherwise the CPU.
  const kiln::Device device = kiln::cuda::is_available() ? kiln::Device::cuda(0) : kiln::Device::cpu();

  // Fashion-MNIST and MNIST share the file format; FashionMNIST only adds the class names.
  kiln::data::FashionMNIST train_full(data_dir, kiln::data::Split::Train), test_full(data_dir, kiln::data::Split::Test);
  auto train_set = first_n(train_full, limit), test_set = first_n(test_full, limit);
  kiln::data::DataLoader train_loader(train_set, {.batch_size = batch_size, .shuffle = true, .workers = workers});
  kiln::data::DataLoader test_loader(test_set, {.batch_size = 256});
  std::printf("%lld training / %lld test images, %lld steps per epoch, device %s\n", (long long)train_set.size(),
              (long long)test_set.size(), (long long)train_loader.size(), device.str().c_str());

  ConvNet model;
  model.to(device);
  kiln::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});

  double first_epoch_loss = 0, epoch_loss = 0;
  int64_t step = 0;
  kiln::monitor::MetricsLog metrics(metrics_path);  // a CSV row per log_every steps, a PNG plot beside it
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    model.train();  // batch norm uses the batch's statistics
    double loss_sum = 0, window = 0;  // window: the loss summed since the last CSV row
    int64_t batches = 0, window_n = 0;
    // one line redrawn in place on a terminal, plain lines every 10% in a log
    kiln::monitor::ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(epochs),
                                   train_loader.size());
    kiln::monitor::StepMeter meter(batch_size, 0);  // samples per second
    for (auto& batch : train_loader) {
      Tensor x = batch.input.to(device), y = batch.target.to(device);  // (B, 1, 28, 28), (B)
      opt.zero_grad();
      Tensor loss = kiln::cross_entropy(model(x), y);
      loss.backward();
      opt.step();
      const double l = loss.item();
      if (!std::isfinite(l)) { std::fprintf(stderr, "loss is %f at step %lld\n", l, (long long)step); return 1; }
      loss_sum += l, window += l, ++batches, ++window_n, ++step;
      bar.update(batches, l, meter.rate(batches));
      if (window_n == log_every && batches < train_loader.size()) {  // the epoch's last row is below
        metrics.append({.step = step, .epoch = epoch, .loss = window / double(window_n), .lr = opt.lr(),
                        .items_per_s = meter.rate(batches)});
        window = 0, window_n = 0;
      }
    }
    bar.finish();
    epoch_loss = loss_sum / double(batches);
    if (epoch == 1) first_epoch_loss = epoch_loss;

    // Test accuracy: eval mode (batch norm's running statistics), no autograd graph.
    model.eval();
    kiln::NoGradGuard no_grad;
    int64_t correct = 0;
    for (auto& batch : test_loader) {
      Tensor pred = kiln::argmax(model(batch.input.to(device)), 1);  // (B) class ids
      correct += int64_t(kiln::sum(pred == batch.target.to(device)).item());
    }
    const double accuracy = double(correct) / double(test_set.size());
    std::printf("epoch %d  mean train loss %.4f  test accuracy %.2f%%\n", epoch, epoch_loss, 100.0 * accuracy);
    metrics.append({.step = step, .epoch = epoch, .loss = window / double(window_n), .lr = opt.lr(),
                    .items_per_s = meter.rate(batches), .accuracy = accuracy});
  }
  std::printf("metrics: %s, plot: %s\n", metrics.path().c_str(), metrics.write_plot("mnist_cnn").c_str());

  // The weights (and batch norm statistics) as a safetensors file, readable by Python too.
  // Load them back with: model.load_state_dict(kiln::load(save_path));
  kiln::save(model.state_dict(), save_path, {{"epochs", std::to_string(epochs)}});
  std::printf("saved the weights to %s\n", save_path.c_str());
  if (epochs >= 2 && !(epoch_loss < first_epoch_loss)) {
    std::fprintf(stderr, "sanity check failed: loss did not decrease (%.4f -> %.4f)\n", first_epoch_loss, epoch_loss);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // kiln::Error says what was wrong (missing file, shapes, ...)
    std::fprintf(stderr, "mnist_cnn: %s\n", e.what());
    return 1;
  }
}
