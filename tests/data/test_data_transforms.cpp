// Tests of the data transforms: exact values of ToTensor / Normalize, crop windows and
// padding, flips, seeded randomness, Compose order, argument errors.
#include <doctest/doctest.h>
#include <set>
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;

namespace {
// (N, C, H, W) float with value = linear index
Tensor iota(const Shape& shape) {
  std::vector<float> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  return from_vector(v, shape);
}
}  // namespace

TEST_CASE("ToTensor: uint8 HWC -> float CHW / 255") {
  // (H=1, W=2, C=3)
  std::vector<uint8_t> px = {0, 51, 102, 153, 204, 255};
  Rng rng(0);
  Tensor t = ToTensor{}(from_vector(px, {1, 2, 3}), rng);
  CHECK(t.shape() == Shape{3, 1, 2});
  CHECK(t.dtype() == DType::float32);
  auto v = t.to_vector<float>();
  std::vector<float> want = {0.0f, 0.6f, 0.2f, 0.8f, 0.4f, 1.0f};
  for (size_t i = 0; i < 6; ++i) CHECK(v[i] == doctest::Approx(want[i]));
  // batch form (N, H, W, C) and grey (H, W)
  Tensor b = ToTensor{}(from_vector(std::vector<uint8_t>(2 * 2 * 2 * 3, 255), {2, 2, 2, 3}), rng);
  CHECK(b.shape() == Shape{2, 3, 2, 2});
  Tensor g = ToTensor{}(from_vector(std::vector<uint8_t>{255, 0}, {1, 2}), rng);
  CHECK(g.shape() == Shape{1, 1, 2});
  CHECK_THROWS_WITH_AS(ToTensor{}(zeros({2, 2, 3}), rng), doctest::Contains("uint8"), kiln::Error);
}

TEST_CASE("Normalize per channel") {
  Rng rng(0);
  Tensor x = iota({2, 2, 1, 2});  // (N=2, C=2, H=1, W=2)
  Tensor y = Normalize{{1.0, 2.0}, {2.0, 0.5}}(x, rng);
  auto v = y.to_vector<float>();
  // n0 c0: (0,1)->(-0.5,0); n0 c1: (2,3)->(0,2); n1 c0: (4,5)->(1.5,2); n1 c1: (6,7)->(8,10)
  std::vector<float> want = {-0.5f, 0.f, 0.f, 2.f, 1.5f, 2.f, 8.f, 10.f};
  for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == doctest::Approx(want[i]));
  Tensor z = Normalize{{0.5}, {0.5}}(iota({1, 1, 2}), rng);  // one value for all channels, (C, H, W)
  CHECK(z.to_vector<float>() == std::vector<float>{-1.f, 1.f});
  CHECK(x.to_vector<float>()[0] == 0.f);  // input untouched
  CHECK_THROWS_WITH_AS(Normalize({{1, 2, 3}, {1, 1, 1}})(x, rng), doctest::Contains("2 channels"), kiln::Error);
  CHECK_THROWS_AS(Normalize({{1}, {0}})(x, rng), kiln::Error);
  CHECK_THROWS_AS(Normalize({{1}, {1}})(zeros({2, 2, 2}, {.dtype = DType::uint8}), rng), kiln::Error);
}

TEST_CASE("RandomCrop: windows of the zero-padded image, seeded") {
  Tensor x = iota({1, 3, 3});  // (C=1, H=3, W=3), values 0..8
  Rng r0(0);
  // crop of full size without padding is the identity
  CHECK(RandomCrop{3, 3, 0}(x, r0).to_vector<float>() == x.to_vector<float>());
  // every 3x3 crop of the 1-padded 5x5 image is one of the 9 windows; check it is
  // a real window and that several positions occur
  std::vector<float> padded(25, 0.f);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) padded[size_t((r + 1) * 5 + c + 1)] = float(r * 3 + c);
  std::set<int> seen;
  Rng rng(42);
  for (int trial = 0; trial < 60; ++trial) {
    auto v = RandomCrop{3, 3, 1}(x, rng).to_vector<float>();
    int match = -1;
    for (int t = 0; t < 3 && match < 0; ++t)
      for (int l = 0; l < 3 && match < 0; ++l) {
        bool ok = true;
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 3; ++c) ok = ok && v[size_t(r * 3 + c)] == padded[size_t((t + r) * 5 + l + c)];
        if (ok) match = t * 3 + l;
      }
    CHECK(match >= 0);
    seen.insert(match);
  }
  CHECK(seen.size() >= 7);
  // same seed, same crops; per-sample draws in a batch
  Tensor batch = iota({4, 2, 4, 4});
  Rng a(5), b(5);
  Tensor ca = RandomCrop{2, 3, 2}(batch, a), cb = RandomCrop{2, 3, 2}(batch, b);
  CHECK(ca.shape() == Shape{4, 2, 2, 3});
  CHECK(ca.to_vector<float>() == cb.to_vector<float>());
  Rng rr(0);
  CHECK_THROWS_WITH_AS((RandomCrop{6, 6, 0}(x, rr)), doctest::Contains("larger"), kiln::Error);
}

TEST_CASE("RandomHorizontalFlip") {
  Tensor x = iota({2, 1, 2, 3});  // (N=2, C=1, H=2, W=3)
  Rng rng(1);
  CHECK(RandomHorizontalFlip{0.0}(x, rng).to_vector<float>() == x.to_vector<float>());
  CHECK(RandomHorizontalFlip{1.0}(x, rng).to_vector<float>() ==
        std::vector<float>{2, 1, 0, 5, 4, 3, 8, 7, 6, 11, 10, 9});
  // p = 0.5 over many samples: some flipped, some not, reproducible
  Tensor many = iota({64, 1, 1, 2});
  Rng a(3), b(3);
  auto fa = RandomHorizontalFlip{}(many, a).to_vector<float>();
  auto fb = RandomHorizontalFlip{}(many, b).to_vector<float>();
  CHECK(fa == fb);
  int flipped = 0;
  for (int n = 0; n < 64; ++n) flipped += fa[size_t(2 * n)] > fa[size_t(2 * n + 1)];
  CHECK(flipped > 10);
  CHECK(flipped < 54);
  // uint8 images flip too
  Tensor u = from_vector(std::vector<uint8_t>{1, 2, 3}, {1, 1, 3});
  CHECK(RandomHorizontalFlip{1.0}(u, rng).to_vector<int64_t>() == std::vector<int64_t>{3, 2, 1});
}

TEST_CASE("Compose applies in order and plugs into the DataLoader") {
  Rng rng(0);
  Compose c{ToTensor{}, Normalize{{0.5}, {0.5}}, RandomHorizontalFlip{1.0}};
  Tensor y = c(from_vector(std::vector<uint8_t>{0, 255}, {1, 2, 1}), rng);  // (H=1, W=2, C=1)
  CHECK(y.shape() == Shape{1, 1, 2});
  CHECK(y.to_vector<float>() == std::vector<float>{1.f, -1.f});
  c.push_back([](const Tensor& x, Rng&) { return x.reshape({2}); });
  CHECK(c(from_vector(std::vector<uint8_t>{0, 255}, {1, 2, 1}), rng).shape() == Shape{2});

  TensorDataset ds(iota({6, 1, 2, 2}), zeros({6}, {.dtype = DType::int64}));
  DataLoader loader(ds, {.batch_size = 3, .transform = Compose{RandomHorizontalFlip{1.0}}});
  for (auto& b : loader) {
    auto v = b.input.to_vector<float>();
    CHECK(v[0] > v[1]);
  }
}
