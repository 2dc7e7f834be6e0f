// The bodies of the one-block-per-row CUDA kernels (ops/cuda/row_kernels.h: reductions,
// softmax, layer norm, batch norm's eval backward, cross entropy, mse, attention's softmax
// and score gradient, conv's bias gradient, the coalesced column sums) run on the CPU in
// emulated blocks: one std::thread per CUDA thread, a std::barrier at every block
// reduction (and __syncthreads), partials combined in cub's order
// (tests/cuda/block_emulation.h). Each kernel body, run over every row with several block
// sizes (1, a partial warp, one warp, a partial last warp, kiln's 256), must give kiln's CPU
// op. No GPU needed: this is the kernels' own code, not a copy.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include "block_emulation.h"
#include "kiln/kiln.h"
#include "kiln/ops/cuda/row_kernels.h"

using namespace kiln;
namespace rows = kiln::cuda::rows;
using kiln::test::EmulatedBlock;
using kiln::test::run_block;

namespace {

const int kBlockSizes[] = {1, 7, 32, 80, 256};  // one thread, a partial warp, a warp, a partial last warp, kiln's

// f(block, k) for every row k, each row one emulated block of `threads` threads.
template <class F>
void run_rows(int64_t n_rows, int threads, F f) {
  for (int64_t k = 0; k < n_rows; ++k) run_block(threads, [&](const EmulatedBlock& b) { f(b, k); });
}

template <class T>
std::vector<T> host(const Tensor& t) {
  return t.contiguous().to(dtype_v<T>).template to_vector<T>();
}

// Largest |got - ref| / (1 + |ref|) (NaN equal to NaN, infinities equal to themselves).
template <class T>
double worst(const std::vector<T>& got, const Tensor& ref) {
  const std::vector<double> r = ref.contiguous().to(DType::float64).to_vector<double>();
  REQUIRE(got.size() == r.size());
  double w = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const double g = double(got[i]);
    if ((std::isnan(g) && std::isnan(r[i])) || g == r[i]) continue;
    w = std::max(w, std::isfinite(g - r[i]) ? std::fabs(g - r[i]) / (1 + std::fabs(r[i])) : INFINITY);
  }
  return w;
}

template <class T>
double tol() {
  return std::is_same_v<T, double> ? 1e-12 : 2e-5;
}

}  // namespace

TEST_CASE_TEMPLATE("row kernels: sum, mean, var, std, logsumexp", T, float, double) {
  manual_seed(1);
  const int64_t O = 3, R = 37, I = 4, n_rows = O * I;
  Tensor x = randn({O, R, I}, {.dtype = dtype_v<T>});
  {  // a row of -inf and one with +inf for logsumexp
    NoGradGuard ng;
    x.select(0, 1).select(1, 2).fill_(-INFINITY);
    x.select(0, 2).select(1, 0).narrow(0, 5, 1).fill_(INFINITY);
  }
  const std::vector<T> xv = host<T>(x);
  const Tensor refs[4] = {sum(x, {1}), var(x, {1}), kiln::std(x, {1}), logsumexp(x, {1})};
  for (int threads : kBlockSizes)
    for (int kind = 0; kind < 4; ++kind) {
      INFO("threads " << threads << ", kind " << kind);
      std::vector<T> out(static_cast<size_t>(n_rows));
      for (double scale : {1.0, 1.0 / double(R)}) {
        if (kind != 0 && scale != 1.0) continue;
        run_rows(n_rows, threads, [&](const EmulatedBlock& b, int64_t k) {
          rows::reduce_sum_row<T>(b, k, xv.data(), out.data(), R, I, kind, scale, double(R - 1));
        });
        if (kind == 0) {
          const Tensor ref = scale == 1.0 ? refs[0] : mean(x, {1});
          CHECK(worst(out, ref) < tol<T>() * R);
        } else {
          CHECK(worst(out, refs[kind]) < tol<T>() * R);
        }
      }
    }
}

TEST_CASE_TEMPLATE("row kernels: coalesced column sums (inner >= 32), split over the reduced dim", T, float, double) {
  manual_seed(9);
  struct Shape3 {
    int64_t O, R, I;
  };
  for (const Shape3 sh : {Shape3{1, 1000, 70}, Shape3{3, 37, 32}, Shape3{2, 0, 40}, Shape3{1, 5, 100},
                          Shape3{2, 700, 33}}) {
    Tensor x = randn({sh.O, sh.R, sh.I}, {.dtype = dtype_v<T>});
    const std::vector<T> xv = host<T>(x);
    for (int64_t target : {1, 8, 1000})
      for (int threads : {32, 96, 256}) {
        const rows::ColumnSplit sp = rows::column_split(sh.O, sh.R, sh.I, target);
        INFO("O " << sh.O << " R " << sh.R << " I " << sh.I << " target " << target << " threads " << threads
                  << " splits " << sp.splits);
        CHECK(sp.splits >= 1);
        CHECK(sp.splits * sp.rows >= sh.R);
        CHECK((sp.splits - 1) * sp.rows < std::max<int64_t>(sh.R, 1));  // no empty range but for R = 0
        // every block item (split, tile) in its own emulated block, as column_sum_kernel
        const int64_t n = sh.O * sh.I, col_tiles = (sh.I + 31) / 32;
        std::vector<T> ws(static_cast<size_t>(sp.splits * n), T(-1)), part(static_cast<size_t>(threads));
        std::vector<int> written(static_cast<size_t>(sp.splits * n), 0);
        for (int64_t k = 0; k < sp.tiles * sp.splits; ++k) {
          const int64_t split = k / sp.tiles, tile = k - split * sp.tiles, o = tile / col_tiles;
          const int64_t r0 = split * sp.rows, r1 = std::min(r0 + sp.rows, sh.R);
          run_block(threads, [&](const EmulatedBlock& b) {
            rows::column_sum_tile<T>(b, part.data(), xv.data(), o, (tile - o * col_tiles) * 32, r0, r1, sh.R, sh.I,
                                     [&](int64_t c, T total) {
                                       ws[size_t((split * sh.O + o) * sh.I + c)] = total;
                                       ++written[size_t((split * sh.O + o) * sh.I + c)];
                                     });
          });
        }
        CHECK(std::all_of(written.begin(), written.end(), [](int w) { return w == 1; }));
        std::vector<T> out(static_cast<size_t>(n));  // column_sum_finish_kernel: the ranges in order
        for (int64_t i = 0; i < n; ++i) {
          T s = 0;
          for (int64_t j = 0; j < sp.splits; ++j) s += ws[size_t(j * n + i)];
          out[size_t(i)] = s;
        }
        CHECK(worst(out, sum(x, {1})) < tol<T>() * double(std::max<int64_t>(sh.R, 1)));
      }
  }
}

TEST_CASE_TEMPLATE("row kernels: max, min, argmax, argmin with ties and NaN", T, float, double) {
  manual_seed(2);
  const int64_t O = 2, R = 300, I = 3, n_rows = O * I;
  Tensor x = randint(-4, 5, {O, R, I}).to(dtype_v<T>);  // many ties
  {
    NoGradGuard ng;
    x.select(0, 1).select(1, 1).narrow(0, 120, 1).fill_(NAN);
    x.select(0, 1).select(1, 1).narrow(0, 250, 1).fill_(NAN);  // the first NaN is kept
  }
  const std::vector<T> xv = host<T>(x);
  for (int threads : kBlockSizes) {
    INFO("threads " << threads);
    std::vector<T> vmax(static_cast<size_t>(n_rows)), vmin(static_cast<size_t>(n_rows));
    std::vector<int64_t> imax(static_cast<size_t>(n_rows)), imin(static_cast<size_t>(n_rows));
    run_rows(n_rows, threads, [&](const EmulatedBlock& b, int64_t k) {
      rows::reduce_best_row<true, T>(b, k, xv.data(), vmax.data(), imax.data(), R, I);
      rows::reduce_best_row<false, T>(b, k, xv.data(), vmin.data(), imin.data(), R, I);
    });
    const ValuesIndices mx = max(x, 1), mn = min(x, 1);
    CHECK(worst(vmax, mx.values) == 0);
    CHECK(worst(vmin, mn.values) == 0);
    CHECK(imax == mx.indices.reshape({-1}).to_vector<int64_t>());
    CHECK(imin == mn.indices.reshape({-1}).to_vector<int64_t>());
  }
}

TEST_CASE("row kernels: integer sum") {
  manual_seed(3);
  const Tensor x = randint(-1000, 1000, {5, 77, 2});
  const std::vector<int64_t> xv = x.to_vector<int64_t>();
  for (int threads : kBlockSizes) {
    std::vector<int64_t> out(10);
    run_rows(10, threads, [&](const EmulatedBlock& b, int64_t k) {
      rows::reduce_sum_int_row<int64_t>(b, k, xv.data(), out.data(), 77, 2);
    });
    CHECK(out == sum(x, {1}).reshape({-1}).to_vector<int64_t>());
  }
}

TEST_CASE_TEMPLATE("row kernels: softmax and log_softmax, forward and backward", T, float, double) {
  manual_seed(4);
  const int64_t O = 3, D = 50, I = 2, n_rows = O * I;
  const Tensor x0 = randn({O, D, I}, {.dtype = dtype_v<T>}), g = randn({O, D, I}, {.dtype = dtype_v<T>});
  const std::vector<T> xv = host<T>(x0), gv = host<T>(g);
  for (bool is_log : {false, true}) {
    Tensor x = x0.clone().requires_grad_();
    Tensor y = is_log ? log_softmax(x, 1) : softmax(x, 1);
    y.backward(g);
    const std::vector<T> yv = host<T>(y.detach());
    for (int threads : kBlockSizes) {
      INFO((is_log ? "log_softmax" : "softmax") << ", threads " << threads);
      std::vector<T> out(xv.size()), dx(xv.size());
      run_rows(n_rows, threads, [&](const EmulatedBlock& b, int64_t k) {
        rows::softmax_row<T>(b, k, is_log, xv.data(), out.data(), D, I);
        rows::softmax_backward_row<T>(b, k, is_log, yv.data(), gv.data(), dx.data(), D, I);
      });
      CHECK(worst(out, y) < tol<T>());
      CHECK(worst(dx, x.grad()) < tol<T>() * 10);
    }
  }
}

TEST_CASE_TEMPLATE("row kernels: layer_norm forward and input gradient", T, float, double) {
  manual_seed(5);
  const int64_t R = 6, D = 129;
  Tensor x = randn({R, D}, {.dtype = dtype_v<T>}).requires_grad_();
  const Tensor w = randn({D}, {.dtype = dtype_v<T>}), bias = randn({D}, {.dtype = dtype_v<T>});
  const Tensor g = randn({R, D}, {.dtype = dtype_v<T>});
  Tensor y = layer_norm(x, {D}, w, bias, 1e-5);
  y.backward(g);
  const std::vector<T> xv = host<T>(x.detach()), wv = host<T>(w), bv = host<T>(bias), gv = host<T>(g);
  for (int threads : kBlockSizes) {
    INFO("threads " << threads);
    std::vector<T> out(xv.size()), mean(static_cast<size_t>(R)), rstd(static_cast<size_t>(R)), dx(xv.size());
    run_rows(R, threads, [&](const EmulatedBlock& b, int64_t k) {
      rows::layer_norm_forward_row<T>(b, k, xv.data(), wv.data(), bv.data(), out.data(), mean.data(), rstd.data(),
                                      D, 1e-5);
    });
    run_rows(R, threads, [&](const EmulatedBlock& b, int64_t k) {  // a second kernel: reads the saved stats
      rows::layer_norm_dx_row<T>(b, k, gv.data(), xv.data(), wv.data(), mean.data(), rstd.data(), dx.data(), D);
    });
    CHECK(worst(out, y) < tol<T>() * 10);
    CHECK(worst(mean, kiln::mean(x.detach(), {1})) < tol<T>());
    CHECK(worst(dx, x.grad()) < tol<T>() * 10);
  }
}

TEST_CASE("row kernels: batch norm's eval backward per channel") {
  manual_seed(6);
  const int64_t N = 3, C = 4, S = 25;
  const Tensor x = randn({N, C, S}, {.dtype = DType::float64}), g = randn({N, C, S}, {.dtype = DType::float64});
  const Tensor m = randn({C}, {.dtype = DType::float64}), inv = rand({C}, {.dtype = DType::float64});
  const std::vector<double> xv = host<double>(x), gv = host<double>(g), mv = host<double>(m), iv = host<double>(inv);
  const Tensor dw_ref = mul(sum(mul(g, sub(x, m.reshape({1, C, 1}))), {0, 2}), inv);
  const Tensor db_ref = sum(g, {0, 2});
  for (int threads : kBlockSizes) {
    std::vector<double> dw(static_cast<size_t>(C)), db(static_cast<size_t>(C));
    run_rows(C, threads, [&](const EmulatedBlock& b, int64_t c) {
      rows::bn_eval_dwb_channel<double>(b, c, gv.data(), xv.data(), mv.data(), iv.data(), dw.data(), db.data(), N, C,
                                        S);
    });
    CHECK(worst(dw, dw_ref) < 1e-12);
    CHECK(worst(db, db_ref) < 1e-12);
  }
}

TEST_CASE_TEMPLATE("row kernels: cross_entropy forward per (n, s) row", T, float, double) {
  manual_seed(7);
  const int64_t N = 4, C = 40, S = 3, n_rows = N * S;
  const Tensor x = randn({N, C, S}, {.dtype = dtype_v<T>});
  Tensor t = randint(0, C, {N, S});
  {
    NoGradGuard ng;
    t.select(0, 2).narrow(0, 1, 1).fill_(-100);  // one ignored target
  }
  const std::vector<T> xv = host<T>(x);
  const std::vector<int64_t> tv = t.to_vector<int64_t>();
  const Tensor m_ref = max(x, 1).values;
  for (double eps : {0.0, 0.1}) {
    const Tensor ref = cross_entropy(x, t, {.label_smoothing = eps, .reduction = Reduction::none});
    for (int threads : kBlockSizes) {
      INFO("label smoothing " << eps << ", threads " << threads);
      std::vector<T> loss(static_cast<size_t>(n_rows)), mx(static_cast<size_t>(n_rows)), ls(static_cast<size_t>(n_rows));
      run_rows(n_rows, threads, [&](const EmulatedBlock& b, int64_t k) {
        rows::cross_entropy_forward_row<T>(b, k, xv.data(), tv.data(), loss.data(), mx.data(), ls.data(), C, S, -100,
                                           eps);
      });
      CHECK(worst(loss, ref) < tol<T>() * 10);
      CHECK(worst(mx, m_ref) == 0);
      CHECK(loss[size_t(2 * S + 1)] == T(0));
    }
  }
}

TEST_CASE("row kernels: cross_entropy forward rows reading bf16 logits widened") {
  // The kernel body reads 16-bit logits as float (X = BFloat16, T = float): the loss of
  // every row must be the CPU's cross_entropy of the same bf16 logits (which computes on
  // them widened), the max exactly the widened max.
  manual_seed(9);
  const int64_t N = 5, C = 300, S = 1, n_rows = N * S;
  const Tensor xb = (randn({N, C}) * 3.0).to(DType::bfloat16);
  const Tensor t = randint(0, C, {N});
  std::vector<BFloat16> xv;  // the bf16 values, through their exact float32 widening
  for (float f : host<float>(xb)) xv.push_back(BFloat16(f));
  const std::vector<int64_t> tv = t.to_vector<int64_t>();
  const Tensor ref = cross_entropy(xb, t, {.label_smoothing = 0.1, .reduction = Reduction::none});
  const Tensor m_ref = max(xb.to(DType::float32), 1).values;
  for (int threads : kBlockSizes) {
    INFO("threads " << threads);
    const size_t nr = static_cast<size_t>(n_rows);
    std::vector<float> loss(nr), mx(nr), ls(nr);
    run_rows(n_rows, threads, [&](const EmulatedBlock& b, int64_t k) {
      rows::cross_entropy_forward_row<float>(b, k, xv.data(), tv.data(), loss.data(), mx.data(), ls.data(), C, S, -100,
                                             0.1);
    });
    CHECK(worst(loss, ref) < tol<float>() * 10);
    CHECK(worst(mx, m_ref) == 0);
  }
}

TEST_CASE("row kernels: the reduced mse's partial and final blocks") {
  manual_seed(8);
  const int64_t n = 1001;
  const Tensor x = randn({n}), y = randn({n});
  const std::vector<float> xv = host<float>(x), yv = host<float>(y);
  const Tensor ref = mse_loss(x.to(DType::float64), y.to(DType::float64), Reduction::sum);
  for (int threads : kBlockSizes)
    for (int64_t grid : {1, 3, 8}) {
      INFO("threads " << threads << ", grid " << grid);
      std::vector<double> part(static_cast<size_t>(grid));
      for (int64_t blk = 0; blk < grid; ++blk)
        run_block(threads, [&](const EmulatedBlock& b) {
          rows::mse_partial_block<float>(b, blk, grid, xv.data(), yv.data(), part.data(), n);
        });
      std::vector<float> out(1);
      run_block(threads, [&](const EmulatedBlock& b) { rows::mse_finish_block<float>(b, part.data(), grid, out.data(), 1.0); });
      CHECK(worst(out, ref) < 1e-6);
    }
}

TEST_CASE_TEMPLATE("row kernels: attention's masked softmax, lse and score gradient", T, float, double) {
  manual_seed(9);
  const int64_t B = 2, Tq = 5, Tk = 7, Ev = 6, n_rows = B * Tq;
  const Tensor s = randn({B, Tq, Tk}, {.dtype = dtype_v<T>});
  for (bool causal : {false, true}) {
    // reference: -inf where row i may not see key j (j > i when causal), then softmax
    Tensor masked = s.clone();
    if (causal) {
      NoGradGuard ng;
      for (int64_t i = 0; i < Tq; ++i)
        if (i + 1 < Tk) masked.narrow(1, i, 1).narrow(2, i + 1, Tk - i - 1).fill_(-INFINITY);
    }
    const Tensor p_ref = softmax(masked, 2), lse_ref = logsumexp(masked, {2});
    for (int threads : kBlockSizes) {
      INFO((causal ? "causal" : "full") << ", threads " << threads);
      std::vector<T> p = host<T>(s), lse(static_cast<size_t>(n_rows));
      run_rows(n_rows, threads, [&](const EmulatedBlock& b, int64_t k) {
        rows::attention_softmax_row<T>(b, k, p.data(), lse.data(), nullptr, Tq, Tk, causal);
      });
      CHECK(worst(p, p_ref) < tol<T>());
      CHECK(worst(lse, lse_ref) < tol<T>());
      // the backward's recomputation: from the saved lse, and from the row alone
      std::vector<T> p2 = host<T>(s), p3 = host<T>(s);
      run_rows(n_rows, threads, [&](const EmulatedBlock& b, int64_t k) {
        rows::attention_softmax_row<T>(b, k, p2.data(), static_cast<T*>(nullptr), lse.data(), Tq, Tk, causal);
        rows::attention_softmax_row<T>(b, k, p3.data(), static_cast<T*>(nullptr), static_cast<const T*>(nullptr), Tq,
                                       Tk, causal);
      });
      CHECK(p2 == p);
      CHECK(worst(p3, p_ref) < tol<T>());
    }
  }
  // ds = p (dp - dout . out) scale, per row
  const Tensor p = softmax(s, 2), dp = randn({B, Tq, Tk}, {.dtype = dtype_v<T>});
  const Tensor dout = randn({B, Tq, Ev}, {.dtype = dtype_v<T>}), out = randn({B, Tq, Ev}, {.dtype = dtype_v<T>});
  const T scale = T(0.4);
  const Tensor ref = mul(mul(p, sub(dp, sum(mul(dout, out), {2}, true))), double(scale));
  const std::vector<T> pv = host<T>(p), dov = host<T>(dout), ov = host<T>(out);
  for (int threads : kBlockSizes) {
    std::vector<T> ds = host<T>(dp);
    run_rows(n_rows, threads, [&](const EmulatedBlock& b, int64_t k) {
      rows::attention_dscores_row<T>(b, k, pv.data(), ds.data(), dov.data(), ov.data(), Tk, Ev, scale);
    });
    CHECK(worst(ds, ref) < tol<T>());
  }
}

TEST_CASE("row kernels: conv's bias gradient, float and 16-bit with a float accumulator") {
  manual_seed(10);
  const int64_t N = 3, O = 5, L = 71;
  const Tensor dy = randn({N, O, L});
  const std::vector<float> dv = host<float>(dy);
  std::vector<BFloat16> dh(dv.size());
  for (size_t i = 0; i < dv.size(); ++i) dh[i] = BFloat16(dv[i]);
  const Tensor ref = sum(dy, {0, 2}), ref16 = sum(dy.to(DType::bfloat16).to(DType::float32), {0, 2});
  for (int threads : kBlockSizes) {
    std::vector<float> db(static_cast<size_t>(O));
    std::vector<BFloat16> db16(static_cast<size_t>(O));
    run_rows(O, threads, [&](const EmulatedBlock& b, int64_t o) {
      rows::bias_grad_channel<float, float>(b, o, dv.data(), db.data(), N, O, L);
      rows::bias_grad_channel<BFloat16, float>(b, o, dh.data(), db16.data(), N, O, L);
    });
    CHECK(worst(db, ref) < 1e-5);
    std::vector<float> db16f(db16.begin(), db16.end());
    CHECK(worst(db16f, ref16) < 1e-2);  // one rounding to bf16 at the end
  }
}
