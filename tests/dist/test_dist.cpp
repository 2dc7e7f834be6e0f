// Tests of kiln::dist's collectives and DistributedSampler. CTest runs this program twice:
// as one process (the one-process group, where every collective is the identity) and
// under `mpirun -np 2` (two ranks of one thread): every result is compared with the value
// computed by hand from what each rank contributes.
#include <doctest/doctest.h>
#include <set>
#include "kiln/dist/dist.h"
#include "kiln/dist/sampler.h"
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::test::error_of;

namespace {

struct Init {
  Init() { dist::init(); }
} init_once;

int R() { return dist::rank(); }
int W() { return dist::world_size(); }

// What rank r holds at element i: small integers, exact in every dtype (uint8 included).
double value(int r, int64_t i) { return double((i * 7 + r * 3) % 11); }

Tensor make(const Shape& shape, DType dt, int r) {
  Tensor t = Tensor::empty(shape, DType::float64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = value(r, i);
  return t.to(dt);
}

}  // namespace

TEST_CASE("all_reduce: sum, avg, max for every dtype, in place, on views and empty tensors") {
  MESSAGE("rank " << R() << " of " << W());
  for (DType dt : {DType::float32, DType::float64, DType::float16, DType::bfloat16, DType::int64, DType::int32,
                   DType::uint8}) {
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
      if (op == dist::ReduceOp::avg && !is_floating(dt)) continue;
      INFO(dtype_name(dt) << " " << dist::reduce_op_name(op));
      Tensor t = make({5, 3}, dt, R());
      dist::all_reduce(t, op);
      const std::vector<double> got = t.to(DType::float64).to_vector<double>();
      for (int64_t i = 0; i < 15; ++i) {
        double want = op == dist::ReduceOp::max ? -1 : 0;
        for (int r = 0; r < W(); ++r)
          want = op == dist::ReduceOp::max ? std::max(want, value(r, i)) : want + value(r, i);
        if (op == dist::ReduceOp::avg) want /= W();
        if (dt == DType::bfloat16 || dt == DType::float16) want = Tensor(full({1}, want).to(dt)).to(DType::float64).item();
        CHECK(got[size_t(i)] == want);
      }
    }
  }
  // a non-contiguous view: the reduced values land in the base tensor
  Tensor base = make({4, 6}, DType::float64, R());
  Tensor view = base.transpose(0, 1).narrow(0, 1, 3);  // (3, 4), strided
  dist::all_reduce(view, dist::ReduceOp::sum);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 1; j < 4; ++j) {
      double want = 0;
      for (int r = 0; r < W(); ++r) want += value(r, i * 6 + j);
      CHECK(base.to_vector<double>()[size_t(i * 6 + j)] == want);
    }
  CHECK(base.to_vector<double>()[0] == value(R(), 0));  // outside the view: untouched
  Tensor empty = Tensor::empty({0, 3}, DType::float32);
  dist::all_reduce(empty);
  CHECK(empty.numel() == 0);
  Tensor flags = (make({4}, DType::float32, R()) > 5.0);  // bool: max is a logical or
  dist::all_reduce(flags, dist::ReduceOp::max);
  for (int64_t i = 0; i < 4; ++i) {
    bool want = false;
    for (int r = 0; r < W(); ++r) want = want || value(r, i) > 5;
    CHECK(bool(flags.to(DType::float64).to_vector<double>()[size_t(i)]) == want);
  }
}

TEST_CASE("broadcast, all_gather, reduce_scatter, barrier") {
  const int root = W() - 1;
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::int64, DType::uint8}) {
    INFO(dtype_name(dt));
    Tensor t = make({3, 2}, dt, R());
    dist::broadcast(t, root);
    CHECK(t.to(DType::float64).to_vector<double>() == make({3, 2}, dt, root).to(DType::float64).to_vector<double>());

    Tensor g = dist::all_gather(make({2, 3}, dt, R()));
    REQUIRE(g.shape() == Shape{2 * W(), 3});
    const std::vector<double> gv = g.to(DType::float64).to_vector<double>();
    for (int r = 0; r < W(); ++r)
      for (int64_t i = 0; i < 6; ++i) CHECK(gv[size_t(r * 6 + i)] == value(r, i));

    Tensor rs = dist::reduce_scatter(make({2 * W(), 3}, dt, R()), dist::ReduceOp::sum);
    REQUIRE(rs.shape() == Shape{2, 3});
    const std::vector<double> rv = rs.to(DType::float64).to_vector<double>();
    for (int64_t i = 0; i < 6; ++i) {
      double want = 0;
      for (int r = 0; r < W(); ++r) want += value(r, R() * 6 + i);
      CHECK(rv[size_t(i)] == want);
    }
  }
  Tensor avg = dist::reduce_scatter(make({2 * W(), 1}, DType::float64, R()), dist::ReduceOp::avg);
  double want = 0;
  for (int r = 0; r < W(); ++r) want += value(r, R() * 2);
  CHECK(avg.to_vector<double>()[0] == want / W());
  CHECK(dist::all_gather(Tensor::empty({0, 2})).shape() == Shape{0, 2});
  dist::barrier();
}

TEST_CASE("collective errors name the op and the problem") {
  Tensor i = make({4}, DType::int64, R());
  CHECK(error_of([&] { dist::all_reduce(i, dist::ReduceOp::avg); }).find("avg needs a floating-point") !=
        std::string::npos);
  Tensor b = make({4}, DType::float32, R()) > 1.0;
  CHECK(error_of([&] { dist::all_reduce(b, dist::ReduceOp::sum); }).find("bool") != std::string::npos);
  Tensor t = make({4}, DType::float32, R());
  CHECK(error_of([&] { dist::broadcast(t, W()); }).find("root") != std::string::npos);
  if (W() > 1)
    CHECK(error_of([&] { dist::reduce_scatter(make({W() + 1}, DType::float32, R())); }).find("multiple") !=
          std::string::npos);
  CHECK(error_of([&] { dist::all_gather(scalar_tensor(1.0)); }).find("0-d") != std::string::npos);
  // an expanded view is refused before anything is sent (it failed after the collective ran)
  Tensor e = make({1}, DType::float32, R()).expand({4});
  CHECK(error_of([&] { dist::all_reduce(e); }).find("share one memory location") != std::string::npos);
  CHECK(error_of([&] { dist::broadcast(e, 0); }).find("share one memory location") != std::string::npos);
  CHECK(error_of([] { dist::DistributedSampler().indices(0, -1); }).find(">= 0") != std::string::npos);
}

TEST_CASE("all_reduce of a leaf that requires grad: reduced, not recorded (avg threw after summing)") {
  Tensor p = make({3}, DType::float64, R()).requires_grad_();
  Tensor want = make({3}, DType::float64, R());
  dist::all_reduce(want, dist::ReduceOp::avg);
  dist::all_reduce(p, dist::ReduceOp::avg);
  CHECK(max(abs(sub(p.detach(), want))).item() == 0);
  CHECK(p.requires_grad());
  CHECK(p.is_leaf());
}

TEST_CASE("DistributedSampler: each sample exactly once per epoch across ranks, reshuffled per epoch") {
  for (int world : {1, 2, 3}) {
    for (int64_t n : {int64_t(0), int64_t(10), int64_t(12), int64_t(13)}) {
      for (bool drop_last : {false, true}) {
        INFO("world " << world << " n " << n << " drop_last " << drop_last);
        std::vector<int64_t> seen_count(size_t(n), 0);
        std::vector<int64_t> epoch0;
        for (int r = 0; r < world; ++r) {
          dist::DistributedSampler s({.seed = 5, .drop_last = drop_last, .rank = r, .world_size = world});
          const auto idx = s.indices(0, n);
          CHECK(int64_t(idx.size()) == s.count(n));
          for (int64_t i : idx) ++seen_count[size_t(i)];
          epoch0.insert(epoch0.end(), idx.begin(), idx.end());
          if (n > 3) CHECK(s.indices(1, n) != idx);  // a new order each epoch
        }
        int64_t once = 0, twice = 0;
        for (int64_t c : seen_count) once += c == 1, twice += c == 2;
        if (drop_last) {
          CHECK(once == n / world * world);
          CHECK(twice == 0);
        } else {
          CHECK(once + twice == n);  // everything seen; padding repeats at most world - 1
          CHECK(twice == (n % world ? world - n % world : 0));
        }
      }
    }
  }
  // with the group: the ranks' shares of one epoch, gathered, are the whole dataset once
  dist::DistributedSampler s({.seed = 9, .drop_last = true});
  const auto mine = s.indices(3, 40);
  Tensor all = dist::all_gather(from_vector(mine, {int64_t(mine.size())}));
  const std::vector<int64_t> v = all.to_vector<int64_t>();
  CHECK(std::set<int64_t>(v.begin(), v.end()).size() == size_t(40 / W() * W()));
  // the DataLoader takes it (and refuses it together with shuffle)
  data::TensorDataset ds(arange(0, 40).reshape({40, 1}).to(DType::float32), arange(0, 40));
  auto sampler = std::make_shared<dist::DistributedSampler>(dist::DistributedSamplerOptions{.seed = 9, .drop_last = true});
  data::DataLoader loader(ds, {.batch_size = 4, .sampler = sampler});
  loader.set_epoch(3);
  std::vector<int64_t> got;
  for (auto& b : loader)
    for (int64_t t : b.target.to_vector<int64_t>()) got.push_back(t);
  CHECK(got == mine);
  CHECK_THROWS_AS(data::DataLoader(ds, {.shuffle = true, .sampler = sampler}), kiln::Error);
}

TEST_CASE("CUDA tensors: NCCL gives the CPU results (also with one rank; skipped without a GPU)") {
  if (!cuda::is_available()) {
    MESSAGE("skipped: no CUDA GPU (or a build without the CUDA backend)");
    return;
  }
  if (!dist::built_with_nccl()) {
    MESSAGE("skipped: a build without NCCL");
    return;
  }
  const Device gpu = Device::cuda(0);
  for (DType dt : {DType::float32, DType::bfloat16, DType::int64}) {
    INFO(dtype_name(dt));
    Tensor cpu = make({6, 4}, dt, R()), dev = cpu.to(gpu);
    dist::all_reduce(cpu, dist::ReduceOp::sum);
    dist::all_reduce(dev, dist::ReduceOp::sum);
    CHECK(dev.to(Device::cpu()).to(DType::float64).to_vector<double>() == cpu.to(DType::float64).to_vector<double>());
    Tensor g = dist::all_gather(make({2, 3}, dt, R()).to(gpu)).to(Device::cpu());
    CHECK(g.to(DType::float64).to_vector<double>() ==
          dist::all_gather(make({2, 3}, dt, R())).to(DType::float64).to_vector<double>());
    Tensor rs = dist::reduce_scatter(make({2 * W(), 3}, dt, R()).to(gpu)).to(Device::cpu());
    CHECK(rs.to(DType::float64).to_vector<double>() ==
          dist::reduce_scatter(make({2 * W(), 3}, dt, R())).to(DType::float64).to_vector<double>());
    Tensor b = make({3}, dt, R()).to(gpu);
    dist::broadcast(b, 0);
    CHECK(b.to(Device::cpu()).to(DType::float64).to_vector<double>() == make({3}, dt, 0).to(DType::float64).to_vector<double>());
  }
}
