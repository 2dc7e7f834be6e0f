// The index math of the CUDA shape and nn kernels (ops/cuda/shape_index.h) on the CPU: the
// per-thread bodies of cat, index_select, the sorted-run index_add (index_select and
// embedding backward), gather and its scatter-add, driven over an emulated grid of
// (block, thread) indices and compared with the CPU kernels. No GPU needed.
#include <doctest/doctest.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>
#include "kiln/core/cuda/index_math.h"
#include "gradcheck.h"
#include "kiln/ops/kernels/nn.h"
#include "kiln/ops/kernels/shape.h"
#include "kiln/ops/cuda/shape_index.h"
#include "kiln/ops/dispatch.h"

using namespace kiln;
using namespace kiln::cuda;

namespace {

// Runs body(t) for every item t of a grid-stride launch over `items`, block by block and
// thread by thread as the GPU would schedule them (max_blocks small: threads wrap around).
template <class Body>
void emulate(int64_t items, int64_t max_blocks, Body&& body) {
  const LaunchConfig c = launch_config(items, max_blocks);
  for (uint32_t b = 0; b < c.grid; ++b)
    for (uint32_t th = 0; th < c.block; ++th)
      for (int64_t t = int64_t(b) * c.block + th; t < items; t += int64_t(c.grid) * c.block) body(t);
}

std::mt19937& rng() {
  static std::mt19937 r(77);
  return r;
}
int64_t rand_in(int64_t lo, int64_t hi) { return lo + int64_t(rng()() % uint64_t(hi - lo + 1)); }

// A stable sort of idx: (sorted keys, original positions), what cub::DeviceRadixSort gives.
void sort_runs(const std::vector<int64_t>& idx, std::vector<int64_t>& keys, std::vector<int64_t>& pos) {
  pos.resize(idx.size());
  std::iota(pos.begin(), pos.end(), int64_t(0));
  std::stable_sort(pos.begin(), pos.end(), [&](int64_t a, int64_t b) { return idx[size_t(a)] < idx[size_t(b)]; });
  keys.resize(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) keys[i] = idx[size_t(pos[i])];
}

}  // namespace

TEST_CASE("cuda shape index: cat_find_input skips empty inputs") {
  const int64_t col[] = {0, 3, 3, 3, 5, 9, 9};  // inputs 1, 2 and 5 are empty
  const int want[] = {0, 0, 0, 3, 3, 4, 4, 4, 4};
  for (int64_t c = 0; c < 9; ++c) CHECK(cat_find_input(col, 6, c) == want[c]);
}

TEST_CASE("cuda shape index: cat over an emulated grid equals the CPU cat, every element once") {
  for (int64_t n_in : {1, 3, 70}) {  // 70 > kCatChunk: two launches
    for (int64_t outer : {1, 5}) {
      INFO("inputs " << n_in << ", outer " << outer);
      std::vector<Tensor> ins;
      std::vector<int64_t> inner;
      for (int64_t i = 0; i < n_in; ++i) {
        inner.push_back(rand_in(0, 4));
        ins.push_back(randn({outer, inner.back()}, {.dtype = DType::float64}));
      }
      const Tensor ref = cat(ins, 1);
      const int64_t total = ref.size(1);
      std::vector<double> out(size_t(outer * total), NAN);
      std::vector<int> writes(out.size(), 0);
      int64_t col = 0;
      for (int64_t first = 0; first < n_in; first += kCatChunk) {  // the launcher's chunking
        CatChunk ch;
        ch.n = int(std::min<int64_t>(kCatChunk, n_in - first));
        ch.total = total;
        ch.col[0] = col;
        for (int i = 0; i < ch.n; ++i) {
          ch.ptr[i] = ins[size_t(first + i)].raw_data();
          col += inner[size_t(first + i)];
          ch.col[i + 1] = col;
        }
        const int64_t items = outer * (ch.col[ch.n] - ch.col[0]);
        if (items == 0) continue;
        emulate(items, 3, [&](int64_t t) {
          const CatPos p = cat_pos(ch, t);
          REQUIRE(p.dst >= 0);
          REQUIRE(p.dst < int64_t(out.size()));
          REQUIRE(p.src >= 0);
          REQUIRE(p.src < ins[size_t(first + p.input)].numel());
          out[size_t(p.dst)] = static_cast<const double*>(ch.ptr[p.input])[p.src];
          ++writes[size_t(p.dst)];
        });
      }
      CHECK(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; }));
      CHECK(out == ref.to_vector<double>());
    }
  }
}

TEST_CASE("cuda shape index: index_select and its sorted-run index_add equal the CPU kernels") {
  const auto* cpu = kernel<IndexSelectKernels>(Op::index_select, Device::cpu());
  for (auto dims : std::vector<std::array<int64_t, 4>>{{1, 5, 12, 3}, {3, 4, 7, 1}, {2, 9, 1, 5}, {4, 3, 40, 2}}) {
    const int64_t outer = dims[0], S = dims[1], n = dims[2], inner = dims[3];
    INFO("outer " << outer << " S " << S << " n " << n << " inner " << inner);
    Tensor x = randn({outer, S, inner}, {.dtype = DType::float64});
    Tensor idx = randint(0, S, {n});  // repeats likely
    std::vector<int64_t> iv = idx.to_vector<int64_t>();
    // forward
    const Tensor ref = index_select(x, 1, idx);
    std::vector<double> out(size_t(outer * n * inner), NAN);
    const double* xp = x.data<double>();
    emulate(outer * n * inner, 2, [&](int64_t t) {
      const int64_t src = index_select_src(t, iv.data(), S, n, inner);
      REQUIRE(src >= 0);
      REQUIRE(src < x.numel());
      out[size_t(t)] = xp[src];
    });
    CHECK(out == ref.to_vector<double>());
    // backward / index_add: g (outer, n, inner) added into dx (outer, S, inner), which holds
    // values already (index_add onto a copy of its input); exactly the CPU's sums
    Tensor g = randn({outer, n, inner}, {.dtype = DType::float64});
    Tensor dref = randn({outer, S, inner}, {.dtype = DType::float64});
    std::vector<double> dx = dref.to_vector<double>();
    cpu->backward(DType::float64, g.raw_data(), iv.data(), dref.raw_data(), outer, S, n, inner);
    std::vector<int64_t> keys, pos;
    sort_runs(iv, keys, pos);
    emulate(outer * n * inner, 2, [&](int64_t t) {
      index_add_run<double, double>(t, keys.data(), pos.data(), g.data<double>(), dx.data(), S, n, inner, -1);
    });
    CHECK(dx == dref.to_vector<double>());
  }
}

TEST_CASE("cuda shape index: embedding backward by sorted runs equals the CPU kernel, padding_idx skipped") {
  const auto* cpu = kernel<EmbeddingKernels>(Op::embedding, Device::cpu());
  for (int64_t pad : {int64_t(-1), int64_t(2)}) {
    const int64_t V = 6, D = 5, n = 50;
    INFO("padding_idx " << pad);
    Tensor idx = randint(0, V, {n});
    std::vector<int64_t> iv = idx.to_vector<int64_t>();
    Tensor g = randn({n, D}, {.dtype = DType::float64});
    Tensor dref = zeros({V, D}, {.dtype = DType::float64});
    cpu->backward(DType::float64, iv.data(), g.raw_data(), dref.raw_data(), n, D, pad);
    std::vector<int64_t> keys, pos;
    sort_runs(iv, keys, pos);
    std::vector<double> dw(size_t(V * D), 0.0);
    emulate(n * D, 4, [&](int64_t t) {
      index_add_run<double, double>(t, keys.data(), pos.data(), g.data<double>(), dw.data(), V, n, D, pad);
    });
    CHECK(dw == dref.to_vector<double>());
    if (pad >= 0)
      for (int64_t c = 0; c < D; ++c) CHECK(dw[size_t(pad * D + c)] == 0.0);
  }
}

TEST_CASE("cuda shape index: gather and scatter-add over strided operands equal the CPU kernels") {
  const auto* cpu = kernel<GatherKernels>(Op::gather, Device::cpu());
  for (int64_t dim = 0; dim < 3; ++dim) {
    INFO("dim " << dim);
    // x non-contiguous: a permuted view of a (5, 4, 6) tensor
    Tensor base = randn({5, 4, 6}, {.dtype = DType::float64});
    Tensor x = base.permute({2, 0, 1});  // (6, 5, 4)
    Shape is = {4, 3, 3};
    is[size_t(dim)] = 7;  // longer than x along dim: repeats guaranteed
    Tensor idx = randint(0, x.size(dim), is);
    Tensor idx_t = randint(0, x.size(dim), {is[2], is[1], is[0]}).permute({2, 1, 0});  // strided index
    for (const Tensor& ix : {idx, idx_t}) {
      const Tensor ref = gather(x, dim, ix);
      Tensor out = Tensor::empty(ix.shape(), DType::float64);
      GatherGeom geo;
      geo.ndim = 3;
      geo.dim = int(dim);
      for (int d = 0; d < 3; ++d) {
        geo.shape[d] = ix.size(d);
        geo.stride[0][d] = out.strides()[size_t(d)];
        geo.stride[1][d] = ix.strides()[size_t(d)];
        geo.stride[2][d] = x.strides()[size_t(d)];
      }
      std::vector<int> writes(size_t(out.numel()), 0);
      double* op = out.data<double>();
      emulate(ix.numel(), 2, [&](int64_t t) {
        const GatherOff o = gather_offsets(geo, t);
        REQUIRE(o.v[0] >= 0);
        REQUIRE(o.v[0] < out.numel());
        ++writes[size_t(o.v[0])];
        gather_one(geo, t, x.data<double>(), ix.data<int64_t>(), op);
      });
      CHECK(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; }));
      CHECK(out.to_vector<double>() == ref.to_vector<double>());
      // scatter-add: dout (index shape, transposed layout), dx contiguous (x's shape)
      Tensor dout = randn({is[2], is[1], is[0]}, {.dtype = DType::float64}).permute({2, 1, 0});
      Tensor dref = zeros(x.shape(), {.dtype = DType::float64});
      cpu->backward(DType::float64, dout.raw_data(), ix.data<int64_t>(), dref.raw_data(), 3, ix.shape().data(),
                    dout.strides().data(), ix.strides().data(), dref.strides().data(), dim);
      Tensor dx = zeros(x.shape(), {.dtype = DType::float64});
      GatherGeom bg = geo;
      for (int d = 0; d < 3; ++d) {
        bg.stride[0][d] = dout.strides()[size_t(d)];
        bg.stride[2][d] = dx.strides()[size_t(d)];
      }
      emulate(scatter_rows(bg), 2, [&](int64_t r) {
        scatter_add_row<double, double>(bg, r, static_cast<const double*>(dout.raw_data()), ix.data<int64_t>(),
                                        dx.data<double>());
      });
      CHECK(dx.to_vector<double>() == dref.to_vector<double>());
      // scatter (copy) onto values already there: duplicates resolved as the CPU's (the last wins)
      Tensor sref = randn(x.shape(), {.dtype = DType::float64});
      Tensor sx = sref.clone();
      cpu->scatter(8, dout.raw_data(), ix.data<int64_t>(), sref.raw_data(), 3, ix.shape().data(),
                   dout.strides().data(), ix.strides().data(), sref.strides().data(), dim);
      emulate(scatter_rows(bg), 2, [&](int64_t r) {
        scatter_copy_row<double>(bg, r, static_cast<const double*>(dout.raw_data()), ix.data<int64_t>(),
                                 sx.data<double>());
      });
      CHECK(sx.to_vector<double>() == sref.to_vector<double>());
    }
  }
}
