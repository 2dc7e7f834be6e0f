// CUDA against CPU for the loss and nn kernels (ops/cuda/loss.cu, ops/cuda/nn.cu): cross
// entropy (label smoothing, ignore_index, spatial), nll_loss, mse_loss, dropout (bitwise
// the same mask for the same seed), embedding (repeated indices, padding_idx) and scaled
// dot-product attention (causal and not; the fused 16-bit kernels, the composed path, the
// packed qkv layout) and the recurrent layers (padded and packed batches), forward and
// backward through autograd, in
// float32 / float64 and 16-bit where the op takes it. Skipped (visibly) without a GPU.
#include <doctest/doctest.h>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>
#include "gradcheck.h"
#include "parity.h"

using namespace kiln;
using kiln::test::kGpu;
using kiln::test::kNoGpu;
using kiln::test::compare;

namespace {

double tol_for(DType dt) {
  switch (dt) {
    case DType::float64: return 1e-10;
    case DType::float16: return 2e-3;
    case DType::bfloat16: return 1e-2;
    default: return 1e-5;
  }
}

// Bitwise equality of the values (as doubles; every dtype here converts exactly).
std::string same_bits(const Tensor& got, const Tensor& ref) { return compare(got, ref, 0.0); }

// Class targets (shape ts) in [0, C) with about one in five set to ignore_index (when >= 0 allowed).
Tensor targets(const Shape& ts, int64_t C, int64_t ignore) {
  Tensor t = randint(0, C, ts);
  if (ignore == -100) return t;
  Tensor r = rand(ts);
  return where(lt(r, 0.2), full(ts, double(ignore), {.dtype = DType::int64}), t);
}

}  // namespace

TEST_CASE("cuda parity: cross_entropy and nll_loss, label smoothing, ignore_index, spatial" * doctest::skip(kNoGpu)) {
  manual_seed(11);
  for (DType dt : {DType::float32, DType::float64}) {
    const double tol = dt == DType::float64 ? 1e-10 : 1e-5;
    for (Shape ls : {Shape{8, 10}, Shape{3, 5, 4, 6}, Shape{2, 300}, Shape{1, 7, 33}}) {
      Shape ts = ls;
      ts.erase(ts.begin() + 1);
      const int64_t C = ls[1];
      for (int64_t ignore : {int64_t(-100), int64_t(1)}) {
        for (double eps : {0.0, 0.1}) {
          for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
            INFO(dtype_name(dt) << " logits " << shape_str(ls) << " ignore " << ignore << " eps " << eps
                                << " reduction " << int(red));
            Tensor x = randn(ls, {.dtype = dt}) * 3.0, t = targets(ts, C, ignore);
            Tensor a = x.clone().requires_grad_(), b = x.to(kGpu).requires_grad_();
            CrossEntropyArgs args{.ignore_index = ignore, .label_smoothing = eps, .reduction = red};
            Tensor la = cross_entropy(a, t, args), lb = cross_entropy(b, t.to(kGpu), args);
            CHECK(compare(lb, la, tol) == "");
            Tensor up = randn(la.shape(), {.dtype = dt});
            la.backward(up);
            lb.backward(up.to(kGpu));
            CHECK(compare(b.grad(), a.grad(), tol) == "");
            if (eps > 0) continue;
            // nll_loss over log-probabilities
            Tensor lp = log_softmax(x, 1).detach();
            Tensor pa = lp.clone().requires_grad_(), pb = lp.to(kGpu).requires_grad_();
            NllLossArgs nargs{.ignore_index = ignore, .reduction = red};
            Tensor na = nll_loss(pa, t, nargs), nb = nll_loss(pb, t.to(kGpu), nargs);
            CHECK(compare(nb, na, tol) == "");
            na.backward(up);
            nb.backward(up.to(kGpu));
            CHECK(compare(pb.grad(), pa.grad(), tol) == "");
          }
        }
      }
    }
  }
  // 16-bit logits run in float32 (the op's cast): the loss is float32 on both devices
  Tensor x = randn({6, 9}).to(DType::bfloat16), t = randint(0, 9, {6});
  CHECK(compare(cross_entropy(x.to(kGpu), t.to(kGpu)), cross_entropy(x, t), 1e-5) == "");
}

TEST_CASE("cuda parity: mse_loss forward and backward, every reduction" * doctest::skip(kNoGpu)) {
  manual_seed(12);
  for (DType dt : {DType::float32, DType::float64}) {
    for (Shape s : {Shape{7}, Shape{33, 17}, Shape{100000}, Shape{2, 3, 4}}) {
      for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
        INFO(dtype_name(dt) << " shape " << shape_str(s) << " reduction " << int(red));
        const double tol = dt == DType::float64 ? 1e-10 : (s[0] == 100000 ? 1e-4 : 1e-5);
        Tensor x = randn(s, {.dtype = dt}), y = randn(s, {.dtype = dt});
        Tensor xa = x.clone().requires_grad_(), ya = y.clone().requires_grad_();
        Tensor xb = x.to(kGpu).requires_grad_(), yb = y.to(kGpu).requires_grad_();
        Tensor la = mse_loss(xa, ya, red), lb = mse_loss(xb, yb, red);
        CHECK(compare(lb, la, tol) == "");
        Tensor up = randn(la.shape(), {.dtype = dt});
        la.backward(up);
        lb.backward(up.to(kGpu));
        CHECK(compare(xb.grad(), xa.grad(), tol) == "");
        CHECK(compare(yb.grad(), ya.grad(), tol) == "");
      }
    }
  }
  // non-contiguous input (the op makes it contiguous), and a deterministic reduced sum
  Tensor x = randn({40, 30}), y = randn({30, 40});
  Tensor g1 = mse_loss(x.to(kGpu).t(), y.to(kGpu)), g2 = mse_loss(x.to(kGpu).t(), y.to(kGpu));
  CHECK(compare(g1, mse_loss(x.t(), y), 1e-5) == "");
  CHECK(same_bits(g1, g2) == "");
}

TEST_CASE("cuda parity: dropout draws bitwise the same mask as the CPU for the same seed" * doctest::skip(kNoGpu)) {
  for (DType dt : {DType::float32, DType::float64, DType::float16, DType::bfloat16}) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(100003)}) {
      for (double p : {0.1, 0.5, 0.9}) {
        INFO(dtype_name(dt) << " n " << n << " p " << p);
        Tensor x = (rand({n}) + 0.5).to(dt);  // nonzero: a zero output means dropped
        Tensor xa = x.clone().requires_grad_(), xb = x.to(kGpu).requires_grad_();
        manual_seed(1234);
        Tensor ya = dropout(xa, p);
        manual_seed(1234);
        Tensor yb = dropout(xb, p);
        CHECK(same_bits(yb, ya) == "");
        Tensor up = randn({n}).to(dt);
        ya.backward(up);
        yb.backward(up.to(kGpu));
        CHECK(same_bits(xb.grad(), xa.grad()) == "");
      }
    }
  }
  // the two devices continue to draw the same streams after a call
  manual_seed(5);
  Tensor a1 = dropout(ones({64}), 0.5), a2 = dropout(ones({64}), 0.5);
  manual_seed(5);
  Tensor b1 = dropout(ones({64}).to(kGpu), 0.5), b2 = dropout(ones({64}).to(kGpu), 0.5);
  CHECK(same_bits(b1, a1) == "");
  CHECK(same_bits(b2, a2) == "");
}

TEST_CASE("cuda parity: embedding with repeated indices and padding_idx, forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(13);
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16}) {
    for (int64_t pad : {int64_t(-1), int64_t(3)}) {
      for (const auto& vdi : std::vector<std::tuple<int64_t, int64_t, Shape>>{
               {10, 8, Shape{4, 16}}, {5, 1, Shape{300}}, {1000, 64, Shape{2, 3, 5}}, {7, 33, Shape{}}}) {
        const int64_t V = std::get<0>(vdi), D = std::get<1>(vdi);
        const Shape& ishape = std::get<2>(vdi);
        INFO(dtype_name(dt) << " V " << V << " D " << D << " indices " << shape_str(ishape) << " pad " << pad);
        Tensor w = randn({V, D}).to(dt), idx = randint(0, V, ishape);
        Tensor wa = w.clone().requires_grad_(), wb = w.to(kGpu).requires_grad_();
        Tensor ya = embedding(idx, wa, pad), yb = embedding(idx.to(kGpu), wb, pad);
        CHECK(same_bits(yb, ya) == "");
        Tensor up = randn(ya.shape()).to(dt);
        ya.backward(up);
        yb.backward(up.to(kGpu));
        CHECK(compare(wb.grad(), wa.grad(), tol_for(dt)) == "");
      }
    }
  }
  // int32 indices, and the same gradient on every run (deterministic sums)
  Tensor w0 = randn({6, 4}), idx = randint(0, 6, {500}).to(DType::int32), up = randn({500, 4});
  auto grad_of = [&](Device d) {
    Tensor w = w0.to(d).requires_grad_();
    embedding(idx.to(d), w).backward(up.to(d));
    return w.grad();
  };
  Tensor g1 = grad_of(kGpu);
  CHECK(same_bits(g1, grad_of(kGpu)) == "");
  CHECK(compare(g1, grad_of(Device::cpu()), 1e-5) == "");
}

TEST_CASE("cuda parity: scaled_dot_product_attention, causal and not, forward and backward" * doctest::skip(kNoGpu)) {
  manual_seed(14);
  struct Case {
    Shape q, k, v;
  };
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::float16}) {
    const double tol = dt == DType::float64   ? 1e-10
                       : dt == DType::bfloat16 ? 2e-2
                       : dt == DType::float16  ? 5e-3
                                               : 1e-4;
    // 16-bit inputs with head dims 16, 32, 64 and 128 take the fused kernels
    // (ops/cuda/flash_attention.cu, tiles of 64 and 32 rows); the others the composed path
    for (const Case& c : std::vector<Case>{{{2, 3, 16, 8}, {2, 3, 16, 8}, {2, 3, 16, 8}},
                                           {{1, 5, 4}, {1, 9, 4}, {1, 9, 6}},
                                           {{2, 100, 32}, {2, 100, 32}, {2, 100, 32}},
                                           {{3, 7, 5}, {3, 4, 5}, {3, 4, 5}},
                                           {{2, 2, 130, 64}, {2, 2, 130, 64}, {2, 2, 130, 64}},
                                           {{1, 40, 16}, {1, 100, 16}, {1, 100, 32}},
                                           {{1, 2, 70, 128}, {1, 2, 70, 128}, {1, 2, 70, 128}}}) {
      for (bool causal : {false, true}) {
        INFO(dtype_name(dt) << " q " << shape_str(c.q) << " k " << shape_str(c.k) << " v " << shape_str(c.v)
                            << " causal " << causal);
        Tensor q = randn(c.q).to(dt), k = randn(c.k).to(dt), v = randn(c.v).to(dt);
        Tensor qa = q.clone().requires_grad_(), ka = k.clone().requires_grad_(), va = v.clone().requires_grad_();
        Tensor qb = q.to(kGpu).requires_grad_(), kb = k.to(kGpu).requires_grad_(), vb = v.to(kGpu).requires_grad_();
        Tensor ya = scaled_dot_product_attention(qa, ka, va, causal);
        Tensor yb = scaled_dot_product_attention(qb, kb, vb, causal);
        CHECK(compare(yb, ya, tol) == "");
        Tensor up = randn(ya.shape()).to(dt);
        ya.backward(up);
        yb.backward(up.to(kGpu));
        CHECK(compare(qb.grad(), qa.grad(), tol) == "");
        CHECK(compare(kb.grad(), ka.grad(), tol) == "");
        CHECK(compare(vb.grad(), va.grad(), tol) == "");
      }
    }
  }
  // the GPT's packed qkv (B, T, 3C), read in place by the fused kernels (16-bit) or staged
  // for the composed path (float32, and bf16 with heads of 8)
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::float16})
    for (int64_t heads : {2, 8})
      for (bool causal : {true, false}) {
        INFO("packed " << dtype_name(dt) << " heads " << heads << " causal " << causal);
        const double tol = dt == DType::bfloat16   ? 2e-2
                           : dt == DType::float16  ? 5e-3
                           : dt == DType::float64  ? 1e-10
                                                   : 1e-4;
        Tensor x = randn({2, 77, 3 * 64}).to(dt), up = randn({2, 77, 64}).to(dt);
        Tensor xa = x.clone().requires_grad_(), xb = x.to(kGpu).requires_grad_();
        Tensor ya = scaled_dot_product_attention_packed(xa, heads, causal);
        Tensor yb = scaled_dot_product_attention_packed(xb, heads, causal);
        CHECK(compare(yb, ya, tol) == "");
        ya.backward(up);
        yb.backward(up.to(kGpu));
        CHECK(compare(xb.grad(), xa.grad(), tol) == "");
      }
  // float32 under set_float32_matmul_precision("high"): head dim 32 takes the fused kernels
  // on TF32 tiles, head dim 8 the composed path's cuBLAS GEMMs on TF32
  {
    struct Restore {
      std::string saved = float32_matmul_precision();
      ~Restore() { set_float32_matmul_precision(saved); }
    } restore;
    set_float32_matmul_precision("high");
    for (int64_t d : {32, 8}) {
      INFO("TF32, head dim " << d);
      Tensor q = randn({2, 3, 50, d}), k = randn({2, 3, 50, d}), v = randn({2, 3, 50, d});
      Tensor qa = q.clone().requires_grad_(), qb = q.to(kGpu).requires_grad_();
      Tensor ya = scaled_dot_product_attention(qa, k, v, true);
      Tensor yb = scaled_dot_product_attention(qb, k.to(kGpu), v.to(kGpu), true);
      sum(ya * ya).backward();
      sum(yb * yb).backward();
      CHECK(compare(yb, ya, 5e-3) == "");
      CHECK(compare(qb.grad(), qa.grad(), 5e-3) == "");
    }
  }
  // a non-contiguous q (the op makes it contiguous), only q needing grad
  Tensor q = randn({2, 8, 4}), k = randn({2, 8, 4}), v = randn({2, 8, 4});
  Tensor qa = q.clone().requires_grad_(), qb = q.to(kGpu).requires_grad_();
  Tensor ya = scaled_dot_product_attention(qa.transpose(1, 2).transpose(1, 2), k, v, true);
  Tensor yb = scaled_dot_product_attention(qb.transpose(1, 2).transpose(1, 2), k.to(kGpu), v.to(kGpu), true);
  CHECK(compare(yb, ya, 1e-4) == "");
  sum(ya * ya).backward();
  sum(yb * yb).backward();
  CHECK(compare(qb.grad(), qa.grad(), 1e-4) == "");
}

TEST_CASE("cuda parity: RNN / LSTM / GRU, bidirectional, over padded and packed batches" * doctest::skip(kNoGpu)) {
  manual_seed(31);
  for (DType dt : {DType::float32, DType::float64}) {
    INFO(dtype_name(dt));
    const nn::RecurrentOptions o{.num_layers = 2, .batch_first = true, .bidirectional = true};
    auto make = [&](int kind) -> std::shared_ptr<nn::detail::RecurrentBase> {
      if (kind == 0) return std::make_shared<nn::RNN>(3, 5, o);
      if (kind == 1) return std::make_shared<nn::LSTM>(3, 5, o);
      return std::make_shared<nn::GRU>(3, 5, o);
    };
    for (int kind = 0; kind < 3; ++kind) {
      auto cpu = make(kind), gpu = make(kind);
      INFO(cpu->type_name());
      cpu->to(dt);
      gpu->to(dt);
      gpu->load_state_dict(cpu->state_dict());
      gpu->to(kGpu);
      const Tensor x = randn({4, 6, 3}, {.dtype = dt});
      for (bool packed : {false, true}) {
        INFO("packed " << packed);
        Tensor xc = x.clone().requires_grad_(), xg = x.to(kGpu).requires_grad_();
        auto run = [&](nn::detail::RecurrentBase& m, const Tensor& in) {
          if (!packed) {
            auto [y, st] = m.forward_with_state(in);
            return add(sum(y), sum(st.h));
          }
          auto [y, st] = m.forward_with_state(nn::pack_padded_sequence(in, std::vector<int64_t>{2, 6, 3, 6}, true, false));
          return add(sum(mul(nn::pad_packed_sequence(y, true).first, 0.5)), sum(st.h));
        };
        const Tensor lc = run(*cpu, xc), lg = run(*gpu, xg);
        CHECK(compare(lg, lc, tol_for(dt)) == "");
        lc.backward();
        lg.backward();
        CHECK(compare(xg.grad(), xc.grad(), tol_for(dt)) == "");
        CHECK(compare(gpu->weight_hh[3].grad(), cpu->weight_hh[3].grad(), tol_for(dt)) == "");
        cpu->zero_grad();
        gpu->zero_grad();
      }
    }
  }
}
