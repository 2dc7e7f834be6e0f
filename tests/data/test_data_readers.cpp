// Tests of the file readers on small generated files: IDX (plain and gzip) through
// MNIST / FashionMNIST, CIFAR-10 batches, an image folder of BMP/PNG/JPEG files, and
// every malformed-input error (each message must name the file).
#include <doctest/doctest.h>
#include <zlib.h>
#include <algorithm>
#include <filesystem>
#include "data_test_util.h"
#include "gradcheck.h"
#include "kiln/kiln.h"

#if __has_include(<stb/stb_image_write.h>)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop
#define KILN_TEST_HAVE_STBIW 1
#endif

using namespace kiln;
using namespace kiln::data;
using kiln_test::idx_bytes;
using kiln_test::TempDir;
using kiln_test::write_bytes;

namespace {

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  gzclose(f);
}

// n images of h x w with pixel (i, r, c) = (i * 7 + r * w + c) % 256, labels i % 10
void write_mnist(const std::string& dir, const std::string& prefix, uint32_t n, uint32_t h, uint32_t w, bool gz) {
  std::vector<uint8_t> px, lab;
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t p = 0; p < h * w; ++p) px.push_back(uint8_t((i * 7 + p) % 256));
    lab.push_back(uint8_t(i % 10));
  }
  auto img = idx_bytes(0x803, {n, h, w}, px), l = idx_bytes(0x801, {n}, lab);
  std::filesystem::create_directories(dir);
  if (gz) {
    write_gz(dir + "/" + prefix + "-images-idx3-ubyte.gz", img);
    write_gz(dir + "/" + prefix + "-labels-idx1-ubyte.gz", l);
  } else {
    write_bytes(dir + "/" + prefix + "-images-idx3-ubyte", img);
    write_bytes(dir + "/" + prefix + "-labels-idx1-ubyte", l);
  }
}

using kiln::test::error_of;

// 24-bit uncompressed BMP from RGB rows (top row first).
std::vector<uint8_t> bmp_bytes(int w, int h, const std::vector<uint8_t>& rgb) {
  const int row = (w * 3 + 3) / 4 * 4;
  const uint32_t data = uint32_t(row * h), file = 54 + data;
  std::vector<uint8_t> b(54, 0);
  auto le32 = [&](size_t at, uint32_t v) { for (int k = 0; k < 4; ++k) b[at + k] = uint8_t(v >> (8 * k)); };
  b[0] = 'B';
  b[1] = 'M';
  le32(2, file);
  le32(10, 54);
  le32(14, 40);
  le32(18, uint32_t(w));
  le32(22, uint32_t(h));
  b[26] = 1;
  b[28] = 24;
  le32(34, data);
  for (int y = h - 1; y >= 0; --y) {
    for (int x = 0; x < w; ++x) {
      const uint8_t* p = &rgb[size_t((y * w + x) * 3)];
      b.push_back(p[2]);
      b.push_back(p[1]);
      b.push_back(p[0]);
    }
    for (int k = w * 3; k < row; ++k) b.push_back(0);
  }
  return b;
}

}  // namespace

TEST_CASE("read_idx: plain and gzip, shapes, values, element types") {
  TempDir tmp;
  std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6};
  write_bytes(tmp / "a.idx", idx_bytes(0x803, {1, 2, 3}, data));
  write_gz(tmp / "a.idx.gz", idx_bytes(0x803, {1, 2, 3}, data));
  for (auto name : {"a.idx", "a.idx.gz"}) {
    Tensor t = read_idx(tmp / name);
    CHECK(t.dtype() == DType::uint8);
    CHECK(t.shape() == Shape{1, 2, 3});
    CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  }
  // big-endian int32 and float32 payloads
  write_bytes(tmp / "i.idx", idx_bytes(0x0C01, {2}, {0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFE}));
  CHECK(read_idx(tmp / "i.idx").to_vector<int64_t>() == std::vector<int64_t>{258, -2});
  write_bytes(tmp / "f.idx", idx_bytes(0x0D01, {1}, {0x3F, 0xC0, 0, 0}));
  CHECK(read_idx(tmp / "f.idx").item() == 1.5);
  write_bytes(tmp / "s.idx", idx_bytes(0x0B01, {1}, {0xFF, 0xFE}));
  CHECK(read_idx(tmp / "s.idx").item() == -2);
}

TEST_CASE("MNIST and FashionMNIST from generated IDX files (plain and .gz)") {
  TempDir tmp;
  write_mnist(tmp / "plain", "train", 12, 4, 5, false);
  write_mnist(tmp / "plain", "t10k", 3, 4, 5, false);
  write_mnist(tmp / "gz", "train", 12, 4, 5, true);
  for (auto sub : {"plain", "gz"}) {
    CAPTURE(sub);
    FashionMNIST ds(tmp / sub, Split::Train);
    CHECK(ds.size() == 12);
    CHECK(ds.classes().size() == 10);
    CHECK(ds.classes()[9] == "Ankle boot");
    Example e = ds.get(3);
    CHECK(e.input.shape() == Shape{1, 4, 5});
    CHECK(e.input.dtype() == DType::float32);
    CHECK(e.input.at({0, 0, 0}) == doctest::Approx(21.0 / 255.0));
    CHECK(e.input.at({0, 3, 4}) == doctest::Approx((21.0 + 19.0) / 255.0));
    CHECK(e.target.dtype() == DType::int64);
    CHECK(e.target.item<int64_t>() == 3);
    DataLoader loader(ds, {.batch_size = 5});
    std::vector<int64_t> sizes;
    for (auto& b : loader) {
      sizes.push_back(b.input.size(0));
      CHECK(b.input.shape().size() == 4);
      CHECK(b.target.dtype() == DType::int64);
    }
    CHECK(sizes == std::vector<int64_t>{5, 5, 2});
  }
  MNIST test(tmp / "plain", Split::Test);
  CHECK(test.size() == 3);
  CHECK(test.get(2).target.item<int64_t>() == 2);
  CHECK(test.inputs().dtype() == DType::uint8);  // stored compactly
}

TEST_CASE("IDX errors name the file") {
  TempDir tmp;
  // missing folder / file
  CHECK(error_of([&] { MNIST(tmp / "nowhere"); }).find("nowhere") != std::string::npos);
  std::filesystem::create_directories(tmp / "empty");
  std::string e = error_of([&] { FashionMNIST(tmp / "empty"); });
  CHECK(e.find("train-images-idx3-ubyte") != std::string::npos);
  CHECK(e.find("missing") != std::string::npos);

  // wrong magic: a label file where images are expected -> expected and found in hex
  write_mnist(tmp / "magic", "train", 4, 2, 2, false);
  std::filesystem::copy_file(tmp / "magic/train-labels-idx1-ubyte", tmp / "magic/train-images-idx3-ubyte",
                             std::filesystem::copy_options::overwrite_existing);
  e = error_of([&] { MNIST(tmp / "magic"); });
  CHECK(e.find("train-images-idx3-ubyte") != std::string::npos);
  CHECK(e.find("0x00000803") != std::string::npos);
  CHECK(e.find("0x00000801") != std::string::npos);

  // truncated data (plain and gzip)
  auto img = idx_bytes(0x803, {3, 2, 2}, std::vector<uint8_t>(10, 1));  // claims 12 bytes, has 10
  write_bytes(tmp / "trunc/train-images-idx3-ubyte", img);
  write_bytes(tmp / "trunc/train-labels-idx1-ubyte", idx_bytes(0x801, {3}, {0, 1, 2}));
  e = error_of([&] { MNIST(tmp / "trunc"); });
  CHECK(e.find("train-images-idx3-ubyte") != std::string::npos);
  CHECK(e.find("truncated") != std::string::npos);
  std::filesystem::create_directories(tmp / "truncgz");
  write_gz(tmp / "truncgz/x.gz", img);
  CHECK(error_of([&] { read_idx(tmp / "truncgz/x.gz"); }).find("truncated") != std::string::npos);
  // a gzip stream cut in the middle
  std::vector<uint8_t> big(5000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 37 % 251);
  write_gz(tmp / "truncgz/y.gz", idx_bytes(0x801, {5000}, big));
  {
    auto bytes = kiln_test::TempDir();  // scratch
    std::ifstream f(tmp / "truncgz/y.gz", std::ios::binary);
    std::vector<uint8_t> gz((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    gz.resize(gz.size() / 2);
    write_bytes(tmp / "truncgz/z.gz", gz);
  }
  e = error_of([&] { read_idx(tmp / "truncgz/z.gz"); });
  CHECK(e.find("z.gz") != std::string::npos);
  CHECK(e != "(no error)");
  // a header that ends early
  write_bytes(tmp / "short.idx", {0, 0, 8, 3, 0, 0});
  CHECK(error_of([&] { read_idx(tmp / "short.idx"); }).find("short.idx") != std::string::npos);
  write_bytes(tmp / "tiny.idx", {0, 0});
  CHECK(error_of([&] { read_idx(tmp / "tiny.idx"); }).find("tiny.idx") != std::string::npos);
  // not IDX at all
  write_bytes(tmp / "junk.idx", {'h', 'e', 'l', 'l', 'o', 0, 0, 0});
  CHECK(error_of([&] { read_idx(tmp / "junk.idx"); }).find("junk.idx") != std::string::npos);

  // image/label count mismatch
  write_bytes(tmp / "count/train-images-idx3-ubyte", idx_bytes(0x803, {3, 1, 1}, {1, 2, 3}));
  write_bytes(tmp / "count/train-labels-idx1-ubyte", idx_bytes(0x801, {2}, {0, 1}));
  e = error_of([&] { MNIST(tmp / "count"); });
  CHECK(e.find("mismatch") != std::string::npos);
  CHECK(e.find("train-images-idx3-ubyte") != std::string::npos);
  CHECK(e.find("train-labels-idx1-ubyte") != std::string::npos);

  // label out of range
  write_bytes(tmp / "label/train-images-idx3-ubyte", idx_bytes(0x803, {2, 1, 1}, {1, 2}));
  write_bytes(tmp / "label/train-labels-idx1-ubyte", idx_bytes(0x801, {2}, {0, 12}));
  CHECK(error_of([&] { MNIST(tmp / "label"); }).find("train-labels-idx1-ubyte") != std::string::npos);
}

TEST_CASE("IDX sizes are overflow-checked and checked against the file before anything is allocated") {
  TempDir tmp;
  // 2^22 x 2^21 x 2^21 images used to wrap to 0 elements: `kiln train mnist --data DIR` then crashed
  write_bytes(tmp / "wrap/train-images-idx3-ubyte", idx_bytes(0x803, {1u << 22, 1u << 21, 1u << 21}, {}));
  write_bytes(tmp / "wrap/train-labels-idx1-ubyte", idx_bytes(0x801, {1u << 22}, std::vector<uint8_t>(1u << 22)));
  std::string e = error_of([&] { MNIST(tmp / "wrap"); });
  CHECK(e.find("train-images-idx3-ubyte") != std::string::npos);
  CHECK(e.find("[4194304, 2097152, 2097152]") != std::string::npos);
  CHECK(e.find("overflows int64") != std::string::npos);
  // 2^39 bytes claimed by a tiny file: refused by size, plain (exact) or gzip (deflate inflates <= 1032:1)
  auto huge = idx_bytes(0x803, {1u << 20, 1u << 10, 1u << 9}, {1, 2, 3});
  write_bytes(tmp / "huge.idx", huge);
  e = error_of([&] { read_idx(tmp / "huge.idx"); });
  CHECK(e.find("huge.idx' is truncated") != std::string::npos);
  CHECK(e.find("549755813888 bytes of data") != std::string::npos);
  CHECK(e.find("holds only 3 bytes") != std::string::npos);
  write_gz(tmp / "huge.idx.gz", huge);
  e = error_of([&] { read_idx(tmp / "huge.idx.gz"); });
  CHECK(e.find("huge.idx.gz' is truncated") != std::string::npos);
  CHECK(e.find("can decompress to at most") != std::string::npos);
  // a plain file longer than its header says
  write_bytes(tmp / "long.idx", idx_bytes(0x801, {2}, {1, 2, 3}));
  CHECK(error_of([&] { read_idx(tmp / "long.idx"); }).find("unexpected bytes") != std::string::npos);
}

TEST_CASE("CIFAR10 binary batches") {
  TempDir tmp;
  auto record = [](uint8_t label, uint8_t base) {
    std::vector<uint8_t> r = {label};
    for (int p = 0; p < 3072; ++p) r.push_back(uint8_t((base + p) % 256));
    return r;
  };
  for (int f = 1; f <= 5; ++f) {
    std::vector<uint8_t> bytes;
    for (int r = 0; r < 2; ++r) {
      auto rec = record(uint8_t((f * 2 + r) % 10), uint8_t(f * 10 + r));
      bytes.insert(bytes.end(), rec.begin(), rec.end());
    }
    write_bytes(tmp / ("cifar-10-batches-bin/data_batch_" + std::to_string(f) + ".bin"), bytes);
  }
  write_bytes(tmp / "cifar-10-batches-bin/test_batch.bin", record(7, 3));
  CIFAR10 train(tmp.path.string(), Split::Train);  // finds the cifar-10-batches-bin sub-folder
  CHECK(train.size() == 10);
  CHECK(train.classes()[7] == "horse");
  Example e = train.get(3);  // file 2, record 1: label 5, base 21
  CHECK(e.input.shape() == Shape{3, 32, 32});
  CHECK(e.target.item<int64_t>() == 5);
  CHECK(e.input.at({0, 0, 0}) == doctest::Approx(21.0 / 255.0));
  CHECK(e.input.at({1, 0, 0}) == doctest::Approx(double((21 + 1024) % 256) / 255.0));  // G plane
  CIFAR10 test(tmp / "cifar-10-batches-bin", Split::Test);
  CHECK(test.size() == 1);
  CHECK(test.get(0).target.item<int64_t>() == 7);

  // truncated record
  auto bad = record(1, 1);
  bad.resize(3000);
  write_bytes(tmp / "trunc/test_batch.bin", bad);
  std::string e1 = error_of([&] { CIFAR10(tmp / "trunc", Split::Test); });
  CHECK(e1.find("test_batch.bin") != std::string::npos);
  CHECK(e1.find("truncated") != std::string::npos);
  // missing file and bad label
  CHECK(error_of([&] { CIFAR10(tmp / "trunc", Split::Train); }).find("data_batch_1.bin") != std::string::npos);
  write_bytes(tmp / "label/test_batch.bin", record(11, 0));
  CHECK(error_of([&] { CIFAR10(tmp / "label", Split::Test); }).find("test_batch.bin") != std::string::npos);
  write_bytes(tmp / "empty/test_batch.bin", {});
  CHECK(error_of([&] { CIFAR10(tmp / "empty", Split::Test); }).find("test_batch.bin") != std::string::npos);
}

TEST_CASE("ImageFolder: classes, decoding, resizing, channels") {
  TempDir tmp;
  // class "cat": a 2x2 BMP (red, green / blue, white) and, if stb_image_write is
  // available, a 4x4 PNG; class "ant": a 1x1 grey BMP; class "dog": a 3x3 BMP
  write_bytes(tmp / "cat/a.bmp", bmp_bytes(2, 2, {255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255}));
  write_bytes(tmp / "ant/x.BMP", bmp_bytes(1, 1, {100, 100, 100}));
  write_bytes(tmp / "dog/z.bmp", bmp_bytes(3, 3, std::vector<uint8_t>(27, 200)));
  kiln_test::write_text(tmp / "dog/readme.txt", "not an image");
  kiln_test::write_text(tmp / ".hidden/notes.txt", "hidden folders are not classes");
#ifdef KILN_TEST_HAVE_STBIW
  std::vector<uint8_t> png(4 * 4 * 3);
  for (size_t i = 0; i < png.size(); ++i) png[i] = uint8_t(i * 5);
  REQUIRE(stbi_write_png((tmp / "cat/b.png").c_str(), 4, 4, 3, png.data(), 4 * 3));
  std::vector<uint8_t> flat(8 * 8 * 3, 90);
  REQUIRE(stbi_write_jpg((tmp / "dog/y.jpg").c_str(), 8, 8, 3, flat.data(), 95));
#endif
  ImageFolder ds(tmp.path.string(), {.height = 2, .width = 2, .channels = 3});
  CHECK(ds.classes() == std::vector<std::string>{"ant", "cat", "dog"});
#ifdef KILN_TEST_HAVE_STBIW
  CHECK(ds.size() == 5);
#else
  CHECK(ds.size() == 3);
#endif
  Example ant = ds.get(0);
  CHECK(ant.target.item<int64_t>() == 0);
  CHECK(ant.input.shape() == Shape{3, 2, 2});
  for (double v : ant.input.to_vector<double>()) CHECK(v == doctest::Approx(100.0 / 255.0));
  Example cat = ds.get(1);  // a.bmp at its own size: exact pixels, CHW
  CHECK(cat.target.item<int64_t>() == 1);
  CHECK(cat.input.to_vector<float>() == std::vector<float>{1, 0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1});
#ifdef KILN_TEST_HAVE_STBIW
  // b.png 4x4 -> 2x2: bilinear with half-pixel centres averages each 2x2 block
  Example b = ds.get(2);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x) {
        double sum = 0;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) sum += png[size_t(((2 * y + dy) * 4 + 2 * x + dx) * 3 + c)];
        CHECK(b.input.at({c, y, x}) == doctest::Approx(sum / 4 / 255.0).epsilon(1e-5));
      }
  Example jpg = ds.get(3);
  CHECK(jpg.target.item<int64_t>() == 2);
  CHECK(jpg.input.at({0, 1, 1}) == doctest::Approx(90.0 / 255.0).epsilon(0.05));
#endif
  // batches decode straight into the buffer and match get()
  DataLoader loader(ds, {.batch_size = 2, .workers = 2});
  for (auto& batch : loader) {
    CHECK(batch.input.size(1) == 3);
    for (size_t k = 0; k < batch.indices.size(); ++k) {
      Example ex = ds.get(batch.indices[k]);
      CHECK(batch.target.to_vector<int64_t>()[k] == ex.target.item<int64_t>());
    }
  }
  // grey, upscaled
  ImageFolder grey(tmp.path.string(), {.height = 5, .width = 4, .channels = 1});
  Example g = grey.get(2 + (grey.size() == 5 ? 2 : 0));  // dog/z.bmp
  CHECK(g.input.shape() == Shape{1, 5, 4});
  for (double v : g.input.to_vector<double>()) CHECK(v == doctest::Approx(200.0 / 255.0).epsilon(1e-3));
}

TEST_CASE("resize_bilinear matches hand-computed values") {
  // 1x2 image (values 0 and 255), upscaled to 1x4: half-pixel centres give 0, 0.25, 0.75, 1
  Tensor img = from_vector(std::vector<uint8_t>{0, 255}, {1, 2, 1});
  auto v = resize_bilinear(img, 1, 4).to_vector<float>();
  std::vector<float> want = {0.f, 0.25f, 0.75f, 1.f};
  for (size_t i = 0; i < 4; ++i) CHECK(v[i] == doctest::Approx(want[i]));
  CHECK_THROWS_AS(resize_bilinear(zeros({2, 2, 1}), 2, 2), kiln::Error);
}

TEST_CASE("ImageFolder errors name the file or folder") {
  TempDir tmp;
  CHECK(error_of([&] { ImageFolder(tmp / "missing"); }).find("missing") != std::string::npos);
  std::filesystem::create_directories(tmp / "noclasses");
  CHECK(error_of([&] { ImageFolder(tmp / "noclasses"); }).find("noclasses") != std::string::npos);
  std::filesystem::create_directories(tmp / "r/empty_class");
  write_bytes(tmp / "r/ok/a.bmp", bmp_bytes(1, 1, {1, 2, 3}));
  kiln_test::write_text(tmp / "r/empty_class/notes.txt", "no images here");
  std::string e = error_of([&] { ImageFolder(tmp / "r"); });
  CHECK(e.find("empty_class") != std::string::npos);
  CHECK(e.find("no images") != std::string::npos);
  // an undecodable image: the error appears at get() with stb's reason
  write_bytes(tmp / "bad/c/broken.png", {0x89, 'P', 'N', 'G', 1, 2, 3, 4, 5});
  ImageFolder bad(tmp / "bad");
  e = error_of([&] { bad.get(0); });
  CHECK(e.find("broken.png") != std::string::npos);
  CHECK(e.find("decode") != std::string::npos);
  // ... and through workers
  DataLoader loader(bad, {.batch_size = 1, .workers = 2});
  CHECK_THROWS_WITH_AS(loader.begin(), doctest::Contains("broken.png"), kiln::Error);
  CHECK_THROWS_WITH_AS(load_image(tmp / "bad/c/nothere.png"), doctest::Contains("nothere.png"), kiln::Error);
}

#ifdef KILN_TEST_HAVE_STBIW
TEST_CASE("load_image: a JPEG scan using a Huffman table no DHT segment defined is refused") {
  // stb_image 2.27 keeps its tables in a never-zeroed struct and decoded such a scan from
  // uninitialised memory (its own assert in a debug build; found by fuzz_image, seed 2)
  TempDir tmp;
  std::vector<uint8_t> pixels(8 * 8 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 7);
  REQUIRE(stbi_write_jpg((tmp / "ok.jpg").c_str(), 8, 8, 3, pixels.data(), 90));
  std::vector<uint8_t> jpg = kiln_test::read_bytes(tmp / "ok.jpg");
  CHECK(load_image(tmp / "ok.jpg").shape() == Shape{8, 8, 3});
  // stb_image_write writes one DHT segment with DC0, AC0, DC1, AC1: redefine AC0 as AC1
  const uint8_t dht[2] = {0xFF, 0xC4};
  auto seg = std::search(jpg.begin(), jpg.end(), dht, dht + 2);
  REQUIRE(seg != jpg.end());
  size_t p = size_t(seg - jpg.begin()) + 4;
  int codes = 0;
  for (int i = 1; i <= 16; ++i) codes += jpg[p + size_t(i)];
  p += 17 + size_t(codes);  // the AC0 table's class/id byte
  REQUIRE(jpg[p] == 0x10);
  jpg[p] = 0x11;
  write_bytes(tmp / "no_ac0.jpg", jpg);
  const std::string e = error_of([&] { load_image(tmp / "no_ac0.jpg"); });
  CHECK(e.find("no_ac0.jpg") != std::string::npos);
  CHECK(e.find("no DHT segment defined") != std::string::npos);
}
#endif

TEST_CASE("ImageFolder: an image size whose element count overflows is an error") {
  TempDir tmp;
  constexpr int64_t k40 = int64_t(1) << 40;
  std::string e = error_of([&] { ImageFolder(tmp.path.string(), {.height = k40, .width = k40}); });
  CHECK(e.find("ImageFolder") != std::string::npos);
  CHECK(e.find("overflows int64") != std::string::npos);
}

TEST_CASE("Debian's dataset-fashion-mnist loads (skipped when not installed)") {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(root + "/train-images-idx3-ubyte.gz")) {
    MESSAGE("skipped: " << root << " not installed (apt-get install dataset-fashion-mnist)");
    return;
  }
  FashionMNIST train(root, Split::Train), test(root, Split::Test);
  CHECK(train.size() == 60000);
  CHECK(test.size() == 10000);
  CHECK(train.get(0).input.shape() == Shape{1, 28, 28});
  CHECK(train.get(0).target.item<int64_t>() == 9);  // the first training image is an ankle boot
  DataLoader loader(test, {.batch_size = 1000, .shuffle = true, .seed = 0, .workers = 2});
  int64_t n = 0;
  double mx = 0;
  for (auto& b : loader) {
    n += b.input.size(0);
    for (float v : b.input.to_vector<float>()) mx = std::max(mx, double(v));
  }
  CHECK(n == 10000);
  CHECK(mx == 1.0);
}
