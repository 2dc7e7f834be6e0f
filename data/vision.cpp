// MNIST / Fashion-MNIST (IDX) and CIFAR-10 (binary batch) readers. Every check names
// the file: missing files, wrong magic numbers, truncation, count mismatches, labels
// out of range.
#include "kiln/data/vision.h"
#include <cstring>
#include <filesystem>
#include "kiln/core/error.h"
#include "kiln/data/io.h"

namespace kiln::data {

namespace {
const TensorDatasetOptions kPixels{.input_dtype = DType::float32, .input_scale = 1.0 / 255.0};

std::string idx_path(const std::string& root, const std::string& stem, const char* who) {
  // the original distribution's names, plain or gzipped, and the "train-images.idx3-ubyte" variant
  std::string dotted = stem;
  auto dash = dotted.rfind("-idx");
  if (dash != std::string::npos) dotted[dash] = '.';
  return find_file(root, {stem, stem + ".gz", dotted, dotted + ".gz"}, who);
}
}  // namespace

void MNIST::load(const std::string& root, Split split, const char* who) {
  const std::string pre = split == Split::Train ? "train" : "t10k";
  const std::string ipath = idx_path(root, pre + "-images-idx3-ubyte", who);
  const std::string lpath = idx_path(root, pre + "-labels-idx1-ubyte", who);
  Tensor images = read_idx(ipath, 0x00000803u);  // uint8 (N, H, W)
  Tensor labels = read_idx(lpath, 0x00000801u);  // uint8 (N)
  KILN_CHECK(images.size(0) == labels.size(0), who, ": image/label count mismatch: '", ipath, "' holds ",
             images.size(0), " images but '", lpath, "' holds ", labels.size(0), " labels");
  const int64_t n = labels.size(0);
  Tensor targets = Tensor::empty({n}, DType::int64);
  const uint8_t* l = labels.data<uint8_t>();
  int64_t* t = targets.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(l[i] < 10, who, ": '", lpath, "': label ", int(l[i]), " of example ", i, " is not in [0, 10)");
    t[i] = l[i];
  }
  reset(images.reshape({n, 1, images.size(1), images.size(2)}), targets, kPixels, who);
}

MNIST::MNIST(const std::string& root, Split split) { load(root, split, "MNIST"); }

const std::vector<std::string>& MNIST::classes() const {
  static const std::vector<std::string> names = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  return names;
}

FashionMNIST::FashionMNIST(const std::string& root, Split split) { load(root, split, "FashionMNIST"); }

const std::vector<std::string>& FashionMNIST::classes() const {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  return names;
}

CIFAR10::CIFAR10(const std::string& root, Split split) {
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  std::vector<std::string> names;
  if (split == Split::Train)
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  else
    names.push_back("test_batch.bin");
  std::string dir = root;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(root) / names[0], ec) &&
      std::filesystem::is_directory(std::filesystem::path(root) / "cifar-10-batches-bin", ec))
    dir = (std::filesystem::path(root) / "cifar-10-batches-bin").string();
  std::vector<std::vector<uint8_t>> files;
  std::vector<std::string> paths;
  int64_t n = 0;
  for (const auto& name : names) {
    paths.push_back(find_file(dir, {name}, "CIFAR10"));
    files.push_back(read_file_bytes(paths.back()));
    const int64_t bytes = int64_t(files.back().size());
    KILN_CHECK(bytes > 0, "CIFAR10: '", paths.back(), "' is empty");
    KILN_CHECK(bytes % kRecord == 0, "CIFAR10: '", paths.back(), "' is truncated or malformed: ", bytes,
               " bytes is not a whole number of ", kRecord, "-byte records (1 label byte + 3072 pixel bytes); "
               "the last record has only ", bytes % kRecord, " bytes");
    n += bytes / kRecord;
  }
  Tensor images = Tensor::empty({n, 3, 32, 32}, DType::uint8);
  Tensor targets = Tensor::empty({n}, DType::int64);
  uint8_t* img = images.data<uint8_t>();
  int64_t* lab = targets.data<int64_t>();
  int64_t row = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const uint8_t* p = files[f].data();
    const int64_t records = int64_t(files[f].size()) / kRecord;
    for (int64_t r = 0; r < records; ++r, ++row) {
      const uint8_t* rec = p + r * kRecord;
      KILN_CHECK(rec[0] < 10, "CIFAR10: '", paths[f], "': label ", int(rec[0]), " of record ", r,
                 " is not in [0, 10)");
      lab[row] = rec[0];
      std::memcpy(img + row * (kRecord - 1), rec + 1, size_t(kRecord - 1));
    }
    files[f] = {};
  }
  reset(images, targets, kPixels, "CIFAR10");
}

const std::vector<std::string>& CIFAR10::classes() const {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird", "cat", "deer",
                                                 "dog", "frog", "horse", "ship", "truck"};
  return names;
}

}  // namespace kiln::data
