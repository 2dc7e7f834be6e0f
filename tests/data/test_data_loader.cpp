// Tests of Dataset / TensorDataset / DataLoader: batching, drop_last, shuffle
// determinism, identical batches for any worker count, early break, error propagation.
#include <doctest/doctest.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;
using kiln::test::error_of;

namespace {

// inputs (n, 2) float: row i = [i, 10 i]; targets (n) int64 = i
TensorDataset make_rows(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) {
    x.push_back(float(i));
    x.push_back(float(10 * i));
    y.push_back(i);
  }
  return TensorDataset(from_vector(x, {n, 2}), from_vector(y, {n}));
}

// A per-example dataset (default get_batch): input (3) = [i, i, i], target = i % 3.
struct SlowDataset : Dataset {
  int64_t n = 20;
  int sleep_ms = 0;
  int64_t fail_at = -1;
  bool std_error = false;
  mutable std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  int64_t size() const override { return n; }
  Example get(int64_t i) const override {
    ++*calls;
    if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    if (i == fail_at) {
      if (std_error) throw std::runtime_error("plain std error at example " + std::to_string(i));
      KILN_FAIL("SlowDataset: cannot read example ", i, " from 'broken_file.bin'");
    }
    return {full({3}, double(i)), scalar_tensor(double(i % 3), {.dtype = DType::int64})};
  }
};

std::vector<int64_t> all_indices(DataLoader& loader) {
  std::vector<int64_t> out;
  for (auto& b : loader) out.insert(out.end(), b.indices.begin(), b.indices.end());
  return out;
}

}  // namespace

TEST_CASE("TensorDataset get and get_batch") {
  TensorDataset ds = make_rows(6);
  CHECK(ds.size() == 6);
  Example e = ds.get(4);
  CHECK(e.input.shape() == Shape{2});
  CHECK(e.target.dim() == 0);
  CHECK(e.input.to_vector<float>() == std::vector<float>{4, 40});
  CHECK(e.target.item<int64_t>() == 4);
  std::vector<int64_t> idx = {5, 1, 2, 3, 0};  // a run (1,2,3) and singles
  Batch b = ds.get_batch(idx);
  CHECK(b.input.shape() == Shape{5, 2});
  CHECK(b.target.shape() == Shape{5});
  CHECK(b.input.to_vector<float>() == std::vector<float>{5, 50, 1, 10, 2, 20, 3, 30, 0, 0});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{5, 1, 2, 3, 0});
  CHECK_THROWS_WITH_AS(ds.get(6), doctest::Contains("out of range"), kiln::Error);
  std::vector<int64_t> bad = {0, -1};
  CHECK_THROWS_AS(ds.get_batch(bad), kiln::Error);
}

TEST_CASE("TensorDataset converts stored uint8 while gathering") {
  std::vector<uint8_t> px = {0, 255, 51, 102, 0, 0, 255, 255};
  TensorDataset ds(from_vector(px, {2, 1, 2, 2}), from_vector(std::vector<int64_t>{7, 3}, {2}),
                   {.input_dtype = DType::float32, .input_scale = 1.0 / 255.0});
  std::vector<int64_t> idx = {1, 0};
  Batch b = ds.get_batch(idx);
  CHECK(b.input.dtype() == DType::float32);
  CHECK(b.input.shape() == Shape{2, 1, 2, 2});
  auto v = b.input.to_vector<float>();
  std::vector<float> want = {0, 0, 1, 1, 0, 1, 0.2f, 0.4f};
  for (size_t i = 0; i < v.size(); ++i) CHECK(v[i] == doctest::Approx(want[i]));
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{3, 7});
  CHECK(ds.get(1).input.shape() == Shape{1, 2, 2});
}

TEST_CASE("TensorDataset argument errors") {
  CHECK_THROWS_WITH_AS(TensorDataset(zeros({4, 2}), zeros({3})), doctest::Contains("[3]"), kiln::Error);
  CHECK_THROWS_AS(TensorDataset(Tensor(), zeros({3})), kiln::Error);
  CHECK_THROWS_AS(TensorDataset(zeros({2}), zeros({2}), {.input_dtype = DType::int64}), kiln::Error);
}

TEST_CASE("default get_batch stacks examples and names a mismatch") {
  SlowDataset ds;
  std::vector<int64_t> idx = {2, 4};
  Batch b = ds.get_batch(idx);
  CHECK(b.input.shape() == Shape{2, 3});
  CHECK(b.input.to_vector<float>() == std::vector<float>{2, 2, 2, 4, 4, 4});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  std::vector<Example> mixed = {{zeros({3}), zeros({})}, {zeros({4}), zeros({})}};
  CHECK_THROWS_WITH_AS(stack_examples(mixed), doctest::Contains("[4]"), kiln::Error);
}

TEST_CASE("DataLoader batch sizes, last partial batch and drop_last") {
  TensorDataset ds = make_rows(10);
  DataLoader loader(ds, {.batch_size = 4});
  CHECK(loader.size() == 3);
  std::vector<int64_t> sizes;
  std::vector<int64_t> targets;
  for (auto& b : loader) {
    sizes.push_back(b.input.size(0));
    CHECK(b.input.size(1) == 2);
    for (auto t : b.target.to_vector<int64_t>()) targets.push_back(t);
  }
  CHECK(sizes == std::vector<int64_t>{4, 4, 2});
  CHECK(targets == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});

  DataLoader dl(ds, {.batch_size = 4, .drop_last = true});
  CHECK(dl.size() == 2);
  sizes.clear();
  for (auto& b : dl) sizes.push_back(b.target.size(0));
  CHECK(sizes == std::vector<int64_t>{4, 4});

  DataLoader big(ds, {.batch_size = 32, .drop_last = true});
  int n = 0;
  for (auto& b : big) { (void)b; ++n; }
  CHECK(n == 0);
  DataLoader one(ds, {.batch_size = 32});
  for (auto& b : one) CHECK(b.input.size(0) == 10);

  CHECK_THROWS_AS(DataLoader(ds, {.batch_size = 0}), kiln::Error);
  CHECK_THROWS_AS(DataLoader(ds, {.workers = -1}), kiln::Error);
}

TEST_CASE("DataLoader over an empty dataset yields nothing") {
  TensorDataset ds(zeros({0, 3}), zeros({0}, {.dtype = DType::int64}));
  DataLoader loader(ds, {.batch_size = 4, .workers = 2});
  int n = 0;
  for (auto& b : loader) { (void)b; ++n; }
  CHECK(n == 0);
}

TEST_CASE("shuffle: same seed same order, new order each epoch, every index once") {
  TensorDataset ds = make_rows(50);
  DataLoader a(ds, {.batch_size = 8, .shuffle = true, .seed = 123});
  DataLoader b(ds, {.batch_size = 8, .shuffle = true, .seed = 123});
  DataLoader c(ds, {.batch_size = 8, .shuffle = true, .seed = 124});
  auto a0 = all_indices(a), a1 = all_indices(a);
  auto b0 = all_indices(b), b1 = all_indices(b);
  auto c0 = all_indices(c);
  CHECK(a0 == b0);
  CHECK(a1 == b1);
  CHECK(a0 != a1);
  CHECK(a0 != c0);
  for (const auto& order : {a0, a1, c0}) {
    CHECK(order.size() == 50);
    std::set<int64_t> s(order.begin(), order.end());
    CHECK(s.size() == 50);
    CHECK(*s.begin() == 0);
    CHECK(*s.rbegin() == 49);
  }
  std::vector<int64_t> identity(50);
  for (int i = 0; i < 50; ++i) identity[size_t(i)] = i;
  CHECK(a0 != identity);
  // the batches carry the rows of those indices
  for (auto& batch : b) {
    auto t = batch.target.to_vector<int64_t>();
    CHECK(t == batch.indices);
  }
  // set_epoch replays an epoch; epoch_order matches what iteration visits
  a.set_epoch(1);
  CHECK(all_indices(a) == a1);
  CHECK(a.epoch_order(0) == a0);
  // without shuffle the order is the identity
  DataLoader plain(ds, {.batch_size = 8});
  CHECK(all_indices(plain) == identity);
}

TEST_CASE("unset seed comes from kiln::manual_seed") {
  TensorDataset ds = make_rows(30);
  manual_seed(7);
  DataLoader a(ds, {.batch_size = 5, .shuffle = true});
  manual_seed(7);
  DataLoader b(ds, {.batch_size = 5, .shuffle = true});
  CHECK(a.seed() == b.seed());
  CHECK(all_indices(a) == all_indices(b));
}

TEST_CASE("workers = 0 and workers = 3 give identical batches (with a random transform)") {
  TensorDataset ds = make_rows(37);
  Transform noise = [](const Tensor& x, Rng& rng) {
    Tensor y = x.clone();
    float* p = y.data<float>();
    for (int64_t i = 0; i < y.numel(); ++i) p[i] += float(rng.uniform());
    return y;
  };
  for (bool drop : {false, true}) {
    DataLoader l0(ds, {.batch_size = 4, .shuffle = true, .seed = 9, .drop_last = drop, .workers = 0, .transform = noise});
    DataLoader l3(ds, {.batch_size = 4, .shuffle = true, .seed = 9, .drop_last = drop, .workers = 3, .transform = noise});
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::vector<Batch> b0, b3;
      for (auto& b : l0) b0.push_back(b);
      for (auto& b : l3) b3.push_back(b);
      REQUIRE(b0.size() == b3.size());
      CHECK(int64_t(b0.size()) == l0.size());
      for (size_t k = 0; k < b0.size(); ++k) {
        CHECK(b0[k].indices == b3[k].indices);
        CHECK(b0[k].input.to_vector<float>() == b3[k].input.to_vector<float>());
        CHECK(b0[k].target.to_vector<int64_t>() == b3[k].target.to_vector<int64_t>());
      }
    }
  }
  // per-example datasets too, with more workers than batches
  SlowDataset slow;
  slow.n = 7;
  DataLoader s0(slow, {.batch_size = 3, .shuffle = true, .seed = 1});
  DataLoader s8(slow, {.batch_size = 3, .shuffle = true, .seed = 1, .workers = 8});
  std::vector<std::vector<float>> v0, v8;
  for (auto& b : s0) v0.push_back(b.input.to_vector<float>());
  for (auto& b : s8) v8.push_back(b.input.to_vector<float>());
  CHECK(v0 == v8);
  CHECK(v0.size() == 3);
}

TEST_CASE("breaking out early stops the workers without hanging") {
  SlowDataset ds;
  ds.n = 400;
  ds.sleep_ms = 2;
  auto calls = ds.calls;
  auto t0 = std::chrono::steady_clock::now();
  {
    DataLoader loader(ds, {.batch_size = 4, .workers = 3, .prefetch = 2});
    int n = 0;
    for (auto& b : loader) {
      CHECK(b.input.size(0) == 4);
      if (++n == 2) break;
    }
    CHECK(n == 2);
    // the workers stopped within the prefetch window: far fewer than 400 examples read
    CHECK(calls->load() <= (2 + 3 * 2 + 3) * 4);
    // a second epoch after the break starts cleanly
    int m = 0;
    for (auto& b : loader) {
      (void)b;
      if (++m == 1) break;
    }
    CHECK(m == 1);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(secs < 5.0);
  // an iterator kept alive past the loader still works (the epoch owns the dataset)
  DataLoader::Iterator it;
  {
    DataLoader loader(ds, {.batch_size = 4, .workers = 2});
    it = loader.begin();
  }
  CHECK(it->input.size(0) == 4);
  ++it;
  CHECK(it->indices.front() == 4);
  it = DataLoader::Iterator();
}

TEST_CASE("errors in workers reach the consumer as kiln::Error at the right batch") {
  for (int workers : {0, 3}) {
    CAPTURE(workers);
    SlowDataset ds;
    ds.n = 40;
    ds.fail_at = 13;
    DataLoader loader(ds, {.batch_size = 4, .workers = workers});
    int seen = 0;
    try {
      for (auto& b : loader) {
        (void)b;
        ++seen;
      }
      FAIL("expected an error");
    } catch (const kiln::Error& e) {
      CHECK(std::string(e.what()).find("broken_file.bin") != std::string::npos);
    }
    CHECK(seen == 3);  // batches 0..2 arrive, batch 3 (indices 12..15) fails
  }
  SlowDataset ds;
  ds.fail_at = 0;
  ds.std_error = true;
  DataLoader loader(ds, {.batch_size = 2, .workers = 2});
  CHECK_THROWS_WITH_AS(loader.begin(), doctest::Contains("plain std error"), kiln::Error);
}

TEST_CASE("pin_memory is accepted and the loader takes shared datasets") {
  auto ds = std::make_shared<TensorDataset>(make_rows(5));
  DataLoader loader(ds, {.batch_size = 2, .pin_memory = true});
  int64_t n = 0;
  for (auto& b : loader) {
    CHECK(b.input.is_cpu());
    n += b.input.size(0);
  }
  CHECK(n == 5);
}

TEST_CASE("DataLoader pin_memory: pinned batches on a GPU machine, the same values everywhere") {
  Tensor x = arange(0.0, 24.0).reshape({12, 2}), y = arange(0.0, 12.0, 1.0, {.dtype = DType::int64});
  TensorDataset ds(x, y);
  DataLoader plain(ds, {.batch_size = 5, .shuffle = true, .seed = 3, .workers = 1});
  DataLoader pinned(ds, {.batch_size = 5, .shuffle = true, .seed = 3, .workers = 1, .pin_memory = true});
  std::vector<Batch> a, b;
  for (auto& batch : plain) a.push_back(batch);
  for (auto& batch : pinned) b.push_back(batch);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].input.to_vector<float>() == b[i].input.to_vector<float>());
    CHECK(a[i].target.to_vector<int64_t>() == b[i].target.to_vector<int64_t>());
    CHECK(b[i].input.device() == Device::cpu());
    CHECK(cuda::is_pinned(b[i].input) == cuda::is_available());  // no GPU: pin_memory does nothing
    CHECK(!cuda::is_pinned(a[i].input));
  }
}

TEST_CASE("DataLoader set_start_batch: an epoch resumed at batch k yields the same batches from k on") {
  for (int workers : {0, 2}) {
    DataLoaderOptions o{.batch_size = 3, .shuffle = true, .seed = 11, .workers = workers,
                        .transform = [](const Tensor& x, Rng& rng) { return add(x, double(rng.below(1000))); }};
    DataLoader full(make_rows(20), o), resumed(make_rows(20), o);
    full.set_epoch(2);
    std::vector<std::vector<float>> want;
    for (auto& b : full) want.push_back(b.input.to_vector<float>());
    resumed.set_epoch(2);
    resumed.set_start_batch(4);
    std::vector<std::vector<float>> got;
    for (auto& b : resumed) got.push_back(b.input.to_vector<float>());
    REQUIRE(got.size() == want.size() - 4);
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == want[i + 4]);
    // one epoch only: the next starts at 0 again
    resumed.set_epoch(2);
    int64_t n = 0;
    for (auto& b : resumed) n += b.input.size(0) > 0;
    CHECK(n == int64_t(want.size()));
  }
  DataLoader l(make_rows(10), {.batch_size = 3});
  CHECK_THROWS_AS(l.set_start_batch(5), kiln::Error);
  CHECK_THROWS_AS(l.set_start_batch(-1), kiln::Error);
}

TEST_CASE("Subset and random_split: disjoint, covering, seeded; batches keep the fast path") {
  auto ds = std::make_shared<TensorDataset>(arange(0.0, 10.0, 1.0).reshape({10, 1}),
                                            arange(0.0, 10.0, 1.0, {.dtype = DType::int64}));
  const Subset sub(ds, {7, 2, 5});
  CHECK(sub.size() == 3);
  CHECK(sub.get(0).target.item() == 7);
  const Batch b = sub.get_batch(std::vector<int64_t>{2, 0});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{5, 7});
  CHECK(b.indices == std::vector<int64_t>{2, 0});
  CHECK(error_of([&] { Subset(ds, {3, 10}); }).find("index 10") != std::string::npos);
  CHECK(error_of([&] { sub.get(3); }).find("out of range") != std::string::npos);

  auto parts = random_split(ds, {7, 3}, 1);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0]->size() == 7);
  CHECK(parts[1]->size() == 3);
  std::vector<int64_t> all = parts[0]->indices();
  all.insert(all.end(), parts[1]->indices().begin(), parts[1]->indices().end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 10; ++i) CHECK(all[size_t(i)] == i);  // disjoint and covering
  CHECK(random_split(ds, {7, 3}, 1)[0]->indices() == parts[0]->indices());  // seeded
  CHECK(random_split(ds, {7, 3}, 2)[0]->indices() != parts[0]->indices());
  auto frac = random_split(ds, {0.45, 0.35, 0.2}, 0);  // 4.5, 3.5, 2 -> 4, 3, 2, remainder 1 to the first
  CHECK(frac[0]->size() == 5);
  CHECK(frac[1]->size() == 3);
  CHECK(frac[2]->size() == 2);
  CHECK(error_of([&] { random_split(ds, {5, 4}); }).find("sum to 9") != std::string::npos);
  CHECK(error_of([&] { random_split(ds, {-1, 11}); }).find(">= 0") != std::string::npos);
  // a DataLoader over a Subset
  DataLoader loader(parts[1], {.batch_size = 3});
  int64_t seen = 0;
  for (auto& batch : loader) seen += batch.target.numel();
  CHECK(seen == 3);
}
