// matmul, linear and linear_gelu: argument checks, batch broadcasting, output allocation,
// the call through the dispatch table, and the backward formulas (dA = g B^T, dB = A^T g).
// Transposed (non-contiguous) operands are handed to the GEMM as transposes, not copied.
#include "kiln/ops/linalg.h"
#include "kiln/core/autocast.h"
#include <algorithm>
#include <atomic>
#include "kiln/core/autograd.h"
#include "kiln/ops/cpu/sgemm.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

/// A view of t's storage with the given shape and strides (no autograd, no checks).
Tensor make_view(const Tensor& t, const Shape& shape, const Shape& strides) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = t.offset();
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

/// Contiguous data of t (detached) viewed with `shape` (same numel).
Tensor contiguous_as(const Tensor& t, const Shape& shape) {
  Tensor c = t.detach();
  if (!c.is_contiguous()) c = c.contiguous();
  return make_view(c, shape, contiguous_strides(shape));
}

/// Swaps the last two dims (a view).
Tensor mT(const Tensor& t) {
  Shape sh = t.shape(), st = t.strides();
  std::swap(sh[sh.size() - 1], sh[sh.size() - 2]);
  std::swap(st[st.size() - 1], st[st.size() - 2]);
  return make_view(t, sh, st);
}

/// How the last two dims (r, c) of a tensor are handed to a row-major GEMM: as stored
/// (row stride ld), as the transpose of a stored (c, r) matrix, or (t replaced by) a copy.
struct GemmOperand {
  Tensor t;
  bool trans = false;
  int64_t ld = 1;
};

GemmOperand gemm_operand(const Tensor& t) {
  const int64_t nd = t.dim();
  const int64_t r = t.shape()[nd - 2], c = t.shape()[nd - 1];
  const int64_t sr = t.strides()[nd - 2], sc = t.strides()[nd - 1];
  const int64_t r1 = std::max<int64_t>(r, 1), c1 = std::max<int64_t>(c, 1);
  if ((c <= 1 || sc == 1) && (r <= 1 || sr >= c1)) return {t, false, r <= 1 ? c1 : sr};
  if ((r <= 1 || sr == 1) && (c <= 1 || sc >= r1)) return {t, true, c <= 1 ? r1 : sc};
  return {t.contiguous(), false, c1};
}

/// True when the batch dims of a (non-transposed) operand are laid out so that all its
/// rows are evenly spaced by ld: then (batch..., M, K) is one (batch*M, K) matrix.
bool rows_mergeable(const Tensor& t, int64_t ld) {
  const int64_t nd = t.dim();
  int64_t expect = ld * t.shape()[nd - 2];
  for (int64_t d = nd - 3; d >= 0; --d) {
    if (t.shape()[d] != 1 && t.strides()[d] != expect) return false;
    expect *= t.shape()[d];
  }
  return true;
}

/// Element offsets of every batch entry of t (batch dims right-aligned against `batch`,
/// broadcast where t has size 1 or lacks the dim).
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  const int64_t nb = int64_t(batch.size());
  const int64_t tb = t.dim() - 2;  // t's batch dims
  Shape st(nb, 0);
  for (int64_t i = 0; i < tb; ++i) {
    int64_t d = nb - tb + i;
    st[d] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  }
  const int64_t n = shape_numel(batch);
  std::vector<int64_t> off(n);
  Shape idx(nb, 0);
  int64_t cur = 0;
  for (int64_t k = 0; k < n; ++k) {
    off[k] = cur;
    for (int64_t d = nb - 1; d >= 0; --d) {  // odometer
      if (++idx[d] < batch[d]) { cur += st[d]; break; }
      cur -= st[d] * (idx[d] - 1);
      idx[d] = 0;
    }
  }
  return off;
}

/// out (batch..., M, N) = a (..., M, K) @ b (..., K, N), batch dims broadcast; both >= 2-D,
/// same float32/float64 dtype and device. Not recorded.
Tensor bmm_raw(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in.detach(), b = b_in.detach();
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  GemmOperand A = gemm_operand(a), B = gemm_operand(b);
  auto* fn = kernel<MatmulKernel>(Op::matmul, a.device());
  int64_t zero = 0;
  if (shape_numel(bb) == 1 && !A.trans && rows_mergeable(A.t, A.ld)) {
    // b has no batch: fold a's batch into its rows, one (batch*M, K) @ (K, N) GEMM.
    fn(a.dtype(), false, B.trans, 1, shape_numel(batch) * M, N, K, 1.0, A.t.raw_data(), A.ld, &zero,
       B.t.raw_data(), B.ld, &zero, 0.0, out.raw_data(), N, &zero);
    return out;
  }
  std::vector<int64_t> ao = batch_offsets(A.t, batch), bo = batch_offsets(B.t, batch);
  std::vector<int64_t> co(ao.size());
  for (size_t i = 0; i < co.size(); ++i) co[i] = int64_t(i) * M * N;
  fn(a.dtype(), A.trans, B.trans, int64_t(co.size()), M, N, K, 1.0, A.t.raw_data(), A.ld, ao.data(),
     B.t.raw_data(), B.ld, bo.data(), 0.0, out.raw_data(), N, co.data());
  return out;
}

/// C (M, N) = op(A) @ op(B) into a new contiguous tensor, through the matmul kernel.
Tensor gemm2d(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const Tensor& A, int64_t lda, const Tensor& B,
              int64_t ldb) {
  Tensor out = Tensor::empty({M, N}, A.dtype(), A.device());
  if (out.numel() == 0) return out;
  int64_t zero = 0;
  kernel<MatmulKernel>(Op::matmul, A.device())(A.dtype(), ta, tb, 1, M, N, K, 1.0, A.raw_data(), lda, &zero,
                                               B.raw_data(), ldb, &zero, 0.0, out.raw_data(), N, &zero);
  return out;
}

void check_pair(const char* op, const Tensor& a, const Tensor& b, const char* an, const char* bn,
                bool integers = false) {
  KILN_CHECK(a.defined(), op, ": ", an, " is an undefined tensor");
  KILN_CHECK(b.defined(), op, ": ", bn, " is an undefined tensor");
  check_same_device(op, {a, b});
  KILN_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch, ", an, " is ", describe(a), " and ", bn, " is ",
             describe(b), " (expected equal dtypes)");
  if (!integers) return check_floating(op, a, an);
  KILN_CHECK(a.dtype() != DType::bool_ && (a.is_cpu() || a.is_floating_point()), op,
             ": expected floating-point tensors, or integer ones on the CPU, got ", describe(a), " and ", describe(b));
}

/// 16-bit GEMMs run natively on CUDA (cuBLASLt, float32 accumulation), and on a CPU with
/// the packed kernels (ops/cpu/linalg.cpp: bf16 on the AVX512_BF16 kernel where it outruns
/// the FMAs, else on the AVX-512 or AVX2 float32 kernel, which widens each packed panel).
/// Without them (no AVX2) the CPU converts whole operands to float32 and rounds the result back.
bool gemm_in_float32(const Tensor& t) {
  return is_half(t.dtype()) && !t.device().is_cuda() && !sgemm_packed_available();
}

// 0 = "highest", 1 = "high", 2 = "medium"
std::atomic<int> g_matmul_precision{0};
constexpr const char* kPrecisionNames[] = {"highest", "high", "medium"};

}  // namespace

void set_float32_matmul_precision(const std::string& precision) {
  for (int i = 0; i < 3; ++i)
    if (precision == kPrecisionNames[i]) {
      g_matmul_precision.store(i);
      return;
    }
  KILN_FAIL("set_float32_matmul_precision: unknown precision '", precision,
            "' (expected \"highest\" for strict float32, \"high\" to allow TF32 on CUDA, or \"medium\", "
            "which kiln treats like \"high\")");
}

std::string float32_matmul_precision() { return kPrecisionNames[g_matmul_precision.load()]; }

bool float32_matmul_allows_tf32() { return g_matmul_precision.load() != 0; }

namespace {
// matmul's backward in recorded ops (create_graph): g (batch..., M, N) with the 1-D
// operands' added dims; a and b live (each defined when the other's gradient is needed).
std::vector<Tensor> matmul_backward_graph(const Tensor& g, const Tensor& a, const Tensor& b, const Shape& a_shape,
                                          const Shape& b_shape, const std::vector<bool>& needs) {
  Tensor da, db;
  if (needs[0]) {  // g b^T, summed over broadcast batch dims
    Tensor b2 = b_shape.size() == 1 ? b.unsqueeze(1) : b;  // (K) -> (K, 1)
    Shape target = a_shape.size() == 1 ? Shape{1, a_shape[0]} : a_shape;
    da = sum_to(matmul(g, b2.transpose(-1, -2)), target).reshape(a_shape);
  }
  if (needs[1]) {  // a^T g
    Tensor a2 = a_shape.size() == 1 ? a.unsqueeze(0) : a;  // (K) -> (1, K)
    Shape target = b_shape.size() == 1 ? Shape{b_shape[0], 1} : b_shape;
    db = sum_to(matmul(a2.transpose(-1, -2), g), target).reshape(b_shape);
  }
  return {da, db};
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (auto r = autocast_op(AutocastTo::low, [&](const Tensor& ac, const Tensor& bc) { return matmul(ac, bc); }, a, b))
    return *r;  // autocast: the op ran on cast inputs
  check_pair("matmul", a, b, "a", "b", /*integers=*/true);
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got shapes ",
             shape_str(a.shape()), " and ", shape_str(b.shape()));
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  KILN_CHECK(ka == kb, "matmul: inner dimensions do not match: a ", shape_str(a.shape()), " @ b ",
             shape_str(b.shape()), " (a's last dim ", ka, " != b's ", b.dim() == 1 ? "only" : "second-to-last",
             " dim ", kb, ")");
  if (a.dim() > 2 || b.dim() > 2) {
    Shape ab(a.shape().begin(), a.shape().end() - std::min<int64_t>(a.dim(), 2));
    Shape bb(b.shape().begin(), b.shape().end() - std::min<int64_t>(b.dim(), 2));
    try {
      broadcast_shapes(ab, bb, "matmul");
    } catch (const Error& e) {
      KILN_FAIL("matmul: batch dims of a ", shape_str(a.shape()), " and b ", shape_str(b.shape()),
                " cannot be broadcast (", e.what(), ")");
    }
  }
  if (gemm_in_float32(a)) return matmul(a.to(DType::float32), b.to(DType::float32)).to(a.dtype());

  // 1-D operands become (1, K) / (K, 1) views; the added dims are dropped from the result.
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  Tensor a2 = a1 ? make_view(a, {1, a.size(0)}, {a.size(0) * a.stride(0), a.stride(0)}) : a.detach();
  Tensor b2 = b1 ? make_view(b, {b.size(0), 1}, {b.stride(0), 1}) : b.detach();
  Tensor full = bmm_raw(a2, b2);  // (batch..., M, N), contiguous
  Shape out_shape(full.shape().begin(), full.shape().end() - 2);
  if (!a1) out_shape.push_back(full.size(-2));
  if (!b1) out_shape.push_back(full.size(-1));
  Tensor out = make_view(full, out_shape, contiguous_strides(out_shape));

  const bool ga = a.requires_grad(), gb = b.requires_grad();
  Tensor as = gb ? a2 : Tensor(), bs = ga ? b2 : Tensor();  // saved: what the needed gradients read
  Tensor al = gb ? a : Tensor(), bl = ga ? b : Tensor();      // the same, live (create_graph)
  record(out, "matmul", {a, b}, {as, bs},
         [a2 = as, b2 = bs, al, bl, dt = a.dtype(), full_shape = full.shape(),
          a_shape = a.shape(), b_shape = b.shape()](const Tensor& g,
                                                    const std::vector<bool>& needs) -> std::vector<Tensor> {
           if (grad_mode_enabled())  // create_graph: the same products in recorded ops
             return matmul_backward_graph(g.to(dt).reshape(full_shape), al, bl, a_shape, b_shape, needs);
           Tensor gf = contiguous_as(g.dtype() == dt ? g : g.detach().to(dt), full_shape);  // (batch..., M, N)
           Tensor da, db;
           if (needs[0]) {
             Shape target = a_shape.size() == 1 ? Shape{1, a_shape[0]} : a_shape;
             Tensor d;
             if (target.size() == 2 && b2.dim() > 2) {
               // a had no batch: dA (M, K) = g (M, batch*N) @ B^T (batch*N, K), one GEMM summing
               // the whole batch in float32 (as PyTorch folds it), not a sum of 16-bit per-batch
               // products, each rounded before they cancel.
               const int64_t M = gf.size(-2), N = gf.size(-1), K = b2.size(-2), nb = gf.numel() / std::max<int64_t>(M * N, 1);
               Tensor gr = contiguous_as(contiguous_as(gf, {nb, M, N}).permute({1, 0, 2}), {M, nb * N});
               Tensor br = contiguous_as(mT(contiguous_as(b2, {nb, K, N})), {nb * N, K});
               d = bmm_raw(gr, br);
             } else {
               d = bmm_raw(gf, mT(b2));  // (batch..., M, K)
               if (d.shape() != target) d = sum_to(d, target);
             }
             da = contiguous_as(d, a_shape);
           }
           if (needs[1]) {
             Shape target = b_shape.size() == 1 ? Shape{b_shape[0], 1} : b_shape;
             Tensor d;
             const int64_t K = a2.size(-1), N = gf.size(-1);
             if (target.size() == 2 && a2.dim() > 2) {
               // b had no batch: dB (K, N) = A_rows^T (K, batch*M) @ g_rows (batch*M, N), one GEMM.
               Tensor ar = contiguous_as(a2, {a2.numel() / std::max<int64_t>(K, 1), K});
               Tensor gr = make_view(gf, {gf.numel() / std::max<int64_t>(N, 1), N}, {N, 1});
               d = bmm_raw(mT(ar), gr);
             } else {
               d = bmm_raw(mT(a2), gf);  // (batch..., K, N)
               if (d.shape() != target) d = sum_to(d, target);
             }
             db = contiguous_as(d, b_shape);
           }
           return {da, db};
         });
  return twice_differentiable(out);
}

namespace {

/// linear's and linear_gelu's operands, checked: x as (M, I) rows with row stride ldx (a view
/// when the rows are evenly spaced), W (O, I) and bias (O) contiguous and detached.
struct LinearOperands {
  Tensor x2, w, bias;
  int64_t ldx = 1, M = 0, O = 0, I = 0;
  Shape out_shape;
};

void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  KILN_CHECK(weight.dim() == 2, op, ": weight must be 2-D (out_features, in_features), got shape ",
             shape_str(weight.shape()));
  KILN_CHECK(x.dim() >= 1, op, ": input must have at least 1 dim, got shape ", shape_str(x.shape()));
  KILN_CHECK(x.size(-1) == weight.size(1), op, ": input ", shape_str(x.shape()), " has ", x.size(-1),
             " features but weight ", shape_str(weight.shape()), " expects ", weight.size(1),
             " (in_features = weight.size(1))");
  if (bias.defined()) {
    check_same_device(op, {x, bias});
    KILN_CHECK(bias.dtype() == x.dtype(), op, ": dtype mismatch, input is ", describe(x), " and bias is ",
               describe(bias), " (expected equal dtypes)");
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": bias must have shape [", weight.size(0),
               "] for weight ", shape_str(weight.shape()), ", got ", shape_str(bias.shape()));
  }
}

LinearOperands linear_operands(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  LinearOperands r;
  r.I = weight.size(1), r.O = weight.size(0);
  r.out_shape = Shape(x.shape().begin(), x.shape().end() - 1);
  r.M = shape_numel(r.out_shape);
  r.out_shape.push_back(r.O);
  Tensor xd = x.detach();
  r.ldx = std::max<int64_t>(r.I, 1);
  if (xd.dim() >= 2) {
    GemmOperand op2 = gemm_operand(xd);
    if (!op2.trans && rows_mergeable(op2.t, op2.ld)) {
      r.x2 = op2.t;
      r.ldx = op2.ld;
    }
  } else if (xd.stride(0) == 1 || r.I <= 1) {
    r.x2 = xd;
  }
  if (!r.x2.defined()) r.x2 = xd.contiguous();
  r.x2 = make_view(r.x2, {r.M, r.I}, {r.ldx, 1});
  r.w = weight.detach();
  if (!r.w.is_contiguous()) r.w = r.w.contiguous();
  if (bias.defined()) r.bias = bias.detach().contiguous();
  return r;
}

/// What linear's backward reads: x2 when W needs a gradient, W when x does, and the same
/// live (x, W, bias) for a backward under create_graph.
struct LinearSaved {
  Tensor x2, w, xl, wl, bl;
  DType dt = DType::float32;
  int64_t ldx = 1, M = 0, O = 0, I = 0;
  Shape x_shape;
};

LinearSaved linear_saved(const LinearOperands& a, const Tensor& x, const Tensor& weight, const Tensor& bias,
                         bool keep_live) {
  const bool gx = x.requires_grad(), gw = weight.requires_grad();
  LinearSaved s;
  if (gw) s.x2 = a.x2;
  if (gx) s.w = a.w;
  if (gw || keep_live) s.xl = x;
  if (gx || keep_live) s.wl = weight;
  if (keep_live) s.bl = bias;
  s.dt = x.dtype(), s.ldx = a.ldx, s.M = a.M, s.O = a.O, s.I = a.I, s.x_shape = x.shape();
  return s;
}

/// {dx, dW, db} of y = x W^T + b from g = dL/dy (M, O) in any layout: one GEMM each, the
/// bias gradient summed by the weight-gradient GEMM where the device's kernel can
/// (LinearKernels::weight_grad_bias), else by a column sum.
std::vector<Tensor> linear_grads(const Tensor& g, const LinearSaved& s, const std::vector<bool>& needs) {
  const int64_t M = s.M, O = s.O, I = s.I;
  const bool need_b = needs.size() > 2 && needs[2];
  if (grad_mode_enabled()) {  // create_graph: the same products in recorded ops
    Tensor gl = g.to(s.dt), dx, dw, db;
    if (needs[0]) dx = matmul(gl, s.wl);                                                   // g W
    if (needs[1]) dw = matmul(gl.reshape({M, O}).transpose(0, 1), s.xl.reshape({M, I}));  // g^T x
    if (need_b) db = sum(gl.reshape({M, O}), {0});
    return {dx, dw, db};
  }
  Tensor g2 = contiguous_as(g.dtype() == s.dt ? g : g.detach().to(s.dt), {M, O});  // (M, O)
  Tensor dx, dw, db;
  if (needs[0]) dx = contiguous_as(gemm2d(false, false, M, I, O, g2, O, s.w, I), s.x_shape);  // g W
  if (needs[1] && need_b && M > 0) {
    const auto* k = kernel<LinearKernels>(Op::linear, g2.device());
    if (k->weight_grad_bias) {
      dw = Tensor::empty({O, I}, s.dt, g2.device());
      db = Tensor::empty({O}, s.dt, g2.device());
      if (!k->weight_grad_bias(s.dt, M, O, I, g2.raw_data(), s.x2.raw_data(), s.ldx, dw.raw_data(), db.raw_data()))
        dw = db = Tensor();
    }
  }
  if (needs[1] && !dw.defined()) dw = gemm2d(true, false, O, I, M, g2, O, s.x2, s.ldx);  // g^T x: (O, I)
  if (need_b && !db.defined()) db = sum(g2, {0});                                          // (O)
  return {dx, dw, db};
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (auto r = autocast_op(
          AutocastTo::low,
          [&](const Tensor& xc, const Tensor& wc, const Tensor& bc) { return linear(xc, wc, bc); },
          x, weight, bias))
    return *r;  // autocast: the op ran on cast inputs
  check_pair("linear", x, weight, "input", "weight", /*integers=*/true);
  check_linear("linear", x, weight, bias);
  if (gemm_in_float32(x))
    return linear(x.to(DType::float32), weight.to(DType::float32),
                  bias.defined() ? bias.to(DType::float32) : Tensor())
        .to(x.dtype());
  if (!x.is_floating_point()) {  // integers (CPU): matmul's integer GEMM, not differentiable
    Tensor y = matmul(x, weight.t());
    return bias.defined() ? add(y, bias) : y;
  }
  const LinearOperands a = linear_operands(x, weight, bias);
  Tensor out = Tensor::empty(a.out_shape, x.dtype(), x.device());
  if (out.numel() > 0)
    kernel<LinearKernels>(Op::linear, x.device())
        ->forward(x.dtype(), a.M, a.O, a.I, a.x2.raw_data(), a.ldx, a.w.raw_data(),
                  a.bias.defined() ? a.bias.raw_data() : nullptr, out.raw_data());
  const LinearSaved s = linear_saved(a, x, weight, bias, /*keep_live=*/false);
  record(out, "linear", {x, weight, bias}, {s.x2, s.w},
         [s](const Tensor& g, const std::vector<bool>& needs) { return linear_grads(g, s, needs); });
  return twice_differentiable(out);
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (auto r = autocast_op(
          AutocastTo::low,
          [&](const Tensor& xc, const Tensor& wc, const Tensor& bc) { return linear_gelu(xc, wc, bc); },
          x, weight, bias))
    return *r;
  check_pair("linear_gelu", x, weight, "input", "weight");
  check_linear("linear_gelu", x, weight, bias);
  if (gemm_in_float32(x))  // 16 bits on a CPU without the packed GEMM: as the two ops round
    return gelu(linear(x, weight, bias), GeluApprox::tanh);
  const LinearOperands a = linear_operands(x, weight, bias);
  const DType dt = x.dtype();
  // the pre-activation is kept only for a backward (without one, the fused kernel skips it)
  const bool backward = any_requires_grad({x, weight, bias});
  Tensor pre = backward ? Tensor::empty(a.out_shape, dt, x.device()) : Tensor();
  const auto* k = kernel<LinearKernels>(Op::linear, x.device());
  Tensor out;
  if (k->forward_gelu && shape_numel(a.out_shape) > 0) {  // one fused kernel, where the device has one
    out = Tensor::empty(a.out_shape, dt, x.device());
    if (!k->forward_gelu(dt, a.M, a.O, a.I, a.x2.raw_data(), a.ldx, a.w.raw_data(),
                         a.bias.defined() ? a.bias.raw_data() : nullptr, backward ? pre.raw_data() : nullptr,
                         out.raw_data()))
      out = Tensor();
  }
  if (!out.defined()) {  // the linear kernel into pre, then the gelu op's: gelu(linear(x, W, b), tanh)'s values
    if (!pre.defined()) pre = Tensor::empty(a.out_shape, dt, x.device());
    if (pre.numel() > 0)
      k->forward(dt, a.M, a.O, a.I, a.x2.raw_data(), a.ldx, a.w.raw_data(),
                 a.bias.defined() ? a.bias.raw_data() : nullptr, pre.raw_data());
    out = unary_raw(Op::gelu_tanh, pre);
  }
  // The backward reads pre; under create_graph it recomputes pre from the live x, W and b, so
  // that the second derivative sees pre's dependence on them.
  const LinearSaved s = linear_saved(a, x, weight, bias, /*keep_live=*/true);
  record(out, "linear_gelu", {x, weight, bias}, {s.x2, s.w, pre},
         [s, pre](const Tensor& g, const std::vector<bool>& needs) {
           if (grad_mode_enabled()) {
             const Tensor pre_l = linear(s.xl, s.wl, s.bl);
             return linear_grads(mul(g.to(s.dt), unary_derivative(Op::gelu_tanh, pre_l, 0, 0)), s, needs);
           }
           return linear_grads(unary_grad(Op::gelu_tanh, g.to(s.dt), pre, 0, 0), s, needs);
         });
  return twice_differentiable(out);
}

// ---------------------------------------------------------------- compositions of matmul

Tensor mm(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined() && a.dim() == 2 && b.dim() == 2, "mm: expected two 2-D tensors, got ",
             a.defined() ? describe(a) : "undefined", " and ", b.defined() ? describe(b) : "undefined");
  return matmul(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined() && a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0),
             "bmm: expected two 3-D tensors with the same batch size, got ", a.defined() ? describe(a) : "undefined",
             " and ", b.defined() ? describe(b) : "undefined");
  return matmul(a, b);
}

namespace {
Tensor add_scaled_product(const Tensor& input, const Tensor& product, double beta, double alpha) {
  const Tensor p = alpha == 1.0 ? product : mul(product, alpha);
  if (beta == 0.0) return p;  // input ignored, as PyTorch's (its NaN and inf too)
  KILN_CHECK(input.defined(), "addmm/baddbmm: input is undefined");
  return add(beta == 1.0 ? input : mul(input, beta), p);
}
}  // namespace

Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, double beta, double alpha) {
  const Tensor p = mm(m1, m2);
  KILN_CHECK(!input.defined() || broadcast_shapes(input.shape(), p.shape(), "addmm") == p.shape(), "addmm: input ",
             describe(input), " does not broadcast to the product's shape ", shape_str(p.shape()));
  return add_scaled_product(input, p, beta, alpha);
}

Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, double beta, double alpha) {
  const Tensor p = bmm(b1, b2);
  KILN_CHECK(!input.defined() || broadcast_shapes(input.shape(), p.shape(), "baddbmm") == p.shape(), "baddbmm: input ",
             describe(input), " does not broadcast to the product's shape ", shape_str(p.shape()));
  return add_scaled_product(input, p, beta, alpha);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined() && a.dim() == 1 && b.dim() == 1, "outer: expected two 1-D tensors, got ",
             a.defined() ? describe(a) : "undefined", " and ", b.defined() ? describe(b) : "undefined");
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

Tensor trace(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 2, "trace: expected a 2-D tensor, got ", x.defined() ? describe(x) : "undefined");
  return sum(diag(x));
}

Tensor cdist(const Tensor& x1, const Tensor& x2, double p) {
  KILN_CHECK(x1.defined() && x2.defined() && x1.dim() >= 2 && x2.dim() >= 2 && x1.size(-1) == x2.size(-1),
             "cdist: expected x1 (..., P, M) and x2 (..., R, M) with the same M, got ",
             x1.defined() ? describe(x1) : "undefined", " and ", x2.defined() ? describe(x2) : "undefined");
  KILN_CHECK(p >= 0, "cdist: p must be >= 0, got ", p);
  return vector_norm(sub(x1.unsqueeze(-2), x2.unsqueeze(-3)), p, {-1});
}

// ---------------------------------------------------------------- einsum, tensordot, kron
//
// einsum works on "labels": each letter of the equation, and one label per broadcast
// dim of "..." (numbered 52, 53, ... so they sort before nothing and print as "...").
// Every operand is first brought to distinct labels (a repeated letter takes the
// diagonal), then the operands are contracted left to right, two at a time: labels that
// no later operand and not the output need are summed, by one batched matmul where both
// operands have them (PyTorch's sumproduct_pair), by a sum where only one does.

namespace {

constexpr int kEllipsisLabel = 52;  // 'A'-'Z' are 0-25, 'a'-'z' 26-51

int label_of(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' : 26 + (c - 'a'); }

/// An operand with one label per dim.
struct Labeled {
  Tensor t;
  std::vector<int> labels;
};

/// Takes the diagonal of the two dims d1 < d2 (the same size): they become one dim, the last.
Labeled take_diagonal(const Labeled& x, size_t d1, size_t d2) {
  const int64_t n = x.t.size(int64_t(d1));
  std::vector<int64_t> perm;
  std::vector<int> labels;
  for (size_t d = 0; d < x.labels.size(); ++d)
    if (d != d1 && d != d2) {
      perm.push_back(int64_t(d));
      labels.push_back(x.labels[d]);
    }
  perm.push_back(int64_t(d1));
  perm.push_back(int64_t(d2));
  labels.push_back(x.labels[d1]);
  Tensor t = x.t.permute(perm);
  Shape s(t.shape().begin(), t.shape().end() - 2);
  s.push_back(n * n);
  const Tensor idx = arange(0.0, double(n * n), double(n + 1), {.dtype = DType::int64, .device = x.t.device()});
  return {index_select(t.reshape(s), -1, idx), labels};
}

/// Sums the dims of x whose labels are in `drop` (no dim left when all are).
Labeled sum_labels(const Labeled& x, const std::vector<bool>& drop) {
  Dims dims;
  Labeled r;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (drop[size_t(x.labels[d])]) dims.push_back(int64_t(d));
    else r.labels.push_back(x.labels[d]);
  }
  r.t = dims.empty() ? x.t : sum(x.t, dims);
  return r;
}

/// Contracts a and b over the labels in `drop`, keeping the rest (labels in a's order, then
/// b's new ones). Dims of size 1 broadcast against the other operand.
Labeled contract_pair(const Labeled& a, const Labeled& b, const std::vector<bool>& drop) {
  auto pos = [](const Labeled& x, int l) {
    const auto it = std::find(x.labels.begin(), x.labels.end(), l);
    return it == x.labels.end() ? int64_t(-1) : int64_t(it - x.labels.begin());
  };
  auto size_of = [&](const Labeled& x, int l) {
    const int64_t p = pos(x, l);
    return p < 0 ? int64_t(1) : x.t.size(p);
  };
  std::vector<int> all = a.labels;
  for (int l : b.labels)
    if (pos(a, l) < 0) all.push_back(l);
  // a dim summed while only one side has it (size > 1) is summed on that side first
  std::vector<bool> only(drop.size(), false);
  for (int l : all)
    if (drop[size_t(l)] && (size_of(a, l) == 1 || size_of(b, l) == 1)) only[size_t(l)] = true;
  const Labeled a1 = sum_labels(a, only), b1 = sum_labels(b, only);
  std::vector<int> batch, left, right, red;
  for (int l : all) {
    if (only[size_t(l)]) continue;
    const int64_t sa = size_of(a1, l), sb = size_of(b1, l);
    if (drop[size_t(l)]) red.push_back(l);
    else if (sa > 1 && sb > 1) batch.push_back(l);
    else if (sb == 1 && pos(a1, l) >= 0) left.push_back(l);  // size 1 on both sides: kept on a's side
    else right.push_back(l);
  }
  // a -> (batch, left, red), b -> (batch, red, right); labels a side lacks are size-1 dims
  auto arrange = [&](const Labeled& x, const std::vector<std::vector<int>*>& groups) {
    auto in_groups = [&](int l) {
      for (const auto* g : groups)
        if (std::find(g->begin(), g->end(), l) != g->end()) return true;
      return false;
    };
    // dims of size 1 that belong to the other side go; labels this side lacks come as size 1
    Labeled y;
    Shape s;
    for (size_t d = 0; d < x.labels.size(); ++d)
      if (in_groups(x.labels[d])) {
        y.labels.push_back(x.labels[d]);
        s.push_back(x.t.size(int64_t(d)));
      }
    for (const auto* g : groups)
      for (int l : *g)
        if (pos(y, l) < 0) {
          y.labels.push_back(l);
          s.push_back(1);
        }
    y.t = x.t.reshape(s);
    std::vector<int64_t> perm;
    for (const auto* g : groups)
      for (int l : *g) perm.push_back(pos(y, l));
    return y.t.permute(perm);
  };
  const Tensor ta = arrange(a1, {&batch, &left, &red}), tb = arrange(b1, {&batch, &red, &right});
  auto prod = [](const Tensor& t, size_t from, size_t n) {
    int64_t p = 1;
    for (size_t i = from; i < from + n; ++i) p *= t.size(int64_t(i));
    return p;
  };
  const size_t nb = batch.size(), nl = left.size(), nr = red.size(), nq = right.size();
  Shape out_shape;
  for (size_t i = 0; i < nb + nl; ++i) out_shape.push_back(ta.size(int64_t(i)));
  for (size_t i = 0; i < nq; ++i) out_shape.push_back(tb.size(int64_t(nb + nr + i)));
  const int64_t B = prod(ta, 0, nb), L = prod(ta, nb, nl), K = prod(ta, nb + nl, nr), R = prod(tb, nb + nr, nq);
  Tensor y = matmul(ta.reshape({B, L, K}), tb.reshape({B, K, R})).reshape(out_shape);
  Labeled r{y, batch};
  r.labels.insert(r.labels.end(), left.begin(), left.end());
  r.labels.insert(r.labels.end(), right.begin(), right.end());
  return r;
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  const char* op = "einsum";
  KILN_CHECK(!operands.empty(), "einsum: expected at least one operand for equation \"", equation, "\"");
  for (const Tensor& t : operands) {
    KILN_CHECK(t.defined(), "einsum: an operand is undefined");
    check_same_device(op, {operands[0], t});
  }
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  // the subscripts of each operand: labels, with -1 standing for "..."
  std::vector<std::vector<int>> subs(1);
  auto parse_term = [&](const std::string& s, std::vector<int>& out, const char* where) {
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '.') {
        KILN_CHECK(s.compare(i, 3, "...") == 0 && std::find(out.begin(), out.end(), -1) == out.end(), "einsum: ",
                   where, " of \"", equation, "\" has a '.' that is not part of a single \"...\"");
        out.push_back(-1);
        i += 2;
      } else {
        KILN_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), "einsum: invalid subscript '", c, "' in ",
                   where, " of \"", equation, "\" (expected letters a-z, A-Z and \"...\")");
        out.push_back(label_of(c));
      }
    }
  };
  {
    std::string term;
    for (char c : lhs) {
      if (c == ',') {
        parse_term(term, subs.back(), "the inputs");
        subs.emplace_back();
        term.clear();
      } else {
        term += c;
      }
    }
    parse_term(term, subs.back(), "the inputs");
  }
  KILN_CHECK(subs.size() == operands.size(), "einsum: equation \"", equation, "\" names ", subs.size(),
             " operands but ", operands.size(), " were given");
  // the number of "..." dims: the most any operand has
  int64_t n_ell = 0;
  for (size_t i = 0; i < subs.size(); ++i) {
    const bool ell = std::find(subs[i].begin(), subs[i].end(), -1) != subs[i].end();
    const int64_t letters = int64_t(subs[i].size()) - (ell ? 1 : 0), nd = operands[i].dim();
    KILN_CHECK(ell ? nd >= letters : nd == letters, "einsum: operand ", i, " (", describe(operands[i]),
               ") has ", nd, " dims but its subscripts \"", lhs, "\" give it ", letters, ell ? " or more" : "");
    if (ell) n_ell = std::max(n_ell, nd - letters);
  }
  // labels of each operand's dims; "..." dims right-aligned onto labels 52 .. 52 + n_ell - 1
  std::vector<Labeled> ops;
  std::vector<int> count(size_t(kEllipsisLabel + n_ell), 0);
  std::vector<int64_t> label_size(count.size(), 1);
  for (size_t i = 0; i < subs.size(); ++i) {
    Labeled x{operands[i], {}};
    const int64_t letters = int64_t(subs[i].size()) - 1;
    for (int l : subs[i]) {
      if (l >= 0) {
        x.labels.push_back(l);
        ++count[size_t(l)];  // counted as written: "ii" has i twice, so its implicit output is ""
        continue;
      }
      const int64_t k = operands[i].dim() - letters;
      for (int64_t e = 0; e < k; ++e) x.labels.push_back(int(kEllipsisLabel + n_ell - k + e));
    }
    // a repeated label takes the diagonal
    for (bool again = true; again;) {
      again = false;
      for (size_t d1 = 0; d1 < x.labels.size() && !again; ++d1)
        for (size_t d2 = d1 + 1; d2 < x.labels.size() && !again; ++d2)
          if (x.labels[d1] == x.labels[d2]) {
            KILN_CHECK(x.t.size(int64_t(d1)) == x.t.size(int64_t(d2)), "einsum: subscript repeated in operand ", i,
                       " (", describe(operands[i]), ") of \"", equation, "\" names dims ", d1, " and ", d2,
                       " of different sizes");
            x = take_diagonal(x, d1, d2);
            again = true;
          }
    }
    for (size_t d = 0; d < x.labels.size(); ++d) {
      const size_t l = size_t(x.labels[d]);
      const int64_t s = x.t.size(int64_t(d));
      KILN_CHECK(s == label_size[l] || s == 1 || label_size[l] == 1, "einsum: operands of \"", equation,
                 "\" do not broadcast: a subscript has size ", label_size[l], " in one operand and ", s,
                 " in operand ", i, " (", describe(operands[i]), ")");
      if (s != 1) label_size[l] = s;
    }
    ops.push_back(std::move(x));
  }
  // the output's labels: explicit after "->", else "..." then the letters used once, sorted
  std::vector<int> out;
  if (arrow != std::string::npos) {
    std::vector<int> o;
    parse_term(eq.substr(arrow + 2), o, "the output");
    for (int l : o) {
      if (l < 0) {
        for (int64_t e = 0; e < n_ell; ++e) out.push_back(int(kEllipsisLabel + e));
        continue;
      }
      KILN_CHECK(count[size_t(l)] > 0 && std::find(out.begin(), out.end(), l) == out.end(), "einsum: output subscript ",
                 char(l < 26 ? 'A' + l : 'a' + l - 26), " of \"", equation,
                 "\" must appear in an input and only once in the output");
      out.push_back(l);
    }
    // "..." dims left out of an explicit output are summed, as PyTorch's
  } else {
    for (int64_t e = 0; e < n_ell; ++e) out.push_back(int(kEllipsisLabel + e));
    for (int l = 0; l < kEllipsisLabel; ++l)
      if (count[size_t(l)] == 1) out.push_back(l);
  }
  // contract left to right; a label is summed once no later operand and not the output has it
  std::vector<int> later(count.size(), 0);
  for (size_t i = 1; i < ops.size(); ++i)
    for (int l : ops[i].labels) ++later[size_t(l)];
  auto dropped = [&]() {
    std::vector<bool> drop(count.size());
    for (size_t l = 0; l < count.size(); ++l)
      drop[l] = later[l] == 0 && std::find(out.begin(), out.end(), int(l)) == out.end();
    return drop;
  };
  Labeled acc = ops[0];
  if (ops.size() == 1) acc = sum_labels(acc, dropped());
  for (size_t i = 1; i < ops.size(); ++i) {
    for (int l : ops[i].labels) --later[size_t(l)];
    acc = contract_pair(acc, ops[i], dropped());
  }
  // to the output's order (every output label is still there: only dropped labels are summed)
  std::vector<int64_t> perm;
  for (int l : out) perm.push_back(int64_t(std::find(acc.labels.begin(), acc.labels.end(), l) - acc.labels.begin()));
  return acc.t.permute(perm);
}

Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<int64_t>& dims_a,
                 const std::vector<int64_t>& dims_b) {
  KILN_CHECK(a.defined() && b.defined(), "tensordot: an operand is undefined");
  KILN_CHECK(dims_a.size() == dims_b.size(), "tensordot: dims_a and dims_b must have the same length, got ",
             dims_a.size(), " and ", dims_b.size());
  std::vector<bool> ca(size_t(a.dim()), false), cb(size_t(b.dim()), false);
  std::vector<int64_t> pa, pb;
  int64_t K = 1;
  for (size_t i = 0; i < dims_a.size(); ++i) {
    const int64_t da = wrap_dim(dims_a[i], a.dim(), "tensordot"), db = wrap_dim(dims_b[i], b.dim(), "tensordot");
    KILN_CHECK(!ca[size_t(da)] && !cb[size_t(db)], "tensordot: a dim is contracted twice");
    KILN_CHECK(a.size(da) == b.size(db), "tensordot: contracted dim ", da, " of ", describe(a), " and dim ", db,
               " of ", describe(b), " differ in size");
    ca[size_t(da)] = cb[size_t(db)] = true;
    pa.push_back(da);
    pb.push_back(db);
    K *= a.size(da);
  }
  std::vector<int64_t> free_a, free_b;
  Shape out;
  int64_t M = 1, N = 1;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!ca[size_t(d)]) {
      free_a.push_back(d);
      out.push_back(a.size(d));
      M *= a.size(d);
    }
  for (int64_t d = 0; d < b.dim(); ++d)
    if (!cb[size_t(d)]) {
      free_b.push_back(d);
      out.push_back(b.size(d));
      N *= b.size(d);
    }
  free_a.insert(free_a.end(), pa.begin(), pa.end());
  pb.insert(pb.end(), free_b.begin(), free_b.end());
  return matmul(a.permute(free_a).reshape({M, K}), b.permute(pb).reshape({K, N})).reshape(out);
}

Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims) {
  KILN_CHECK(a.defined() && b.defined(), "tensordot: an operand is undefined");
  KILN_CHECK(dims >= 0 && dims <= a.dim() && dims <= b.dim(), "tensordot: dims must be in [0, min(", a.dim(), ", ",
             b.dim(), ")], got ", dims);
  std::vector<int64_t> da, db;
  for (int64_t i = 0; i < dims; ++i) {
    da.push_back(a.dim() - dims + i);
    db.push_back(i);
  }
  return tensordot(a, b, da, db);
}

Tensor kron(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.defined() && b.defined(), "kron: an operand is undefined");
  const int64_t n = std::max(a.dim(), b.dim());
  Shape sa, sb, out;
  for (int64_t d = 0; d < n; ++d) {
    const int64_t x = d < n - a.dim() ? 1 : a.size(d - (n - a.dim()));
    const int64_t y = d < n - b.dim() ? 1 : b.size(d - (n - b.dim()));
    sa.insert(sa.end(), {x, 1});
    sb.insert(sb.end(), {1, y});
    out.push_back(x * y);
  }
  return mul(a.reshape(sa), b.reshape(sb)).reshape(out);
}
}  // namespace kiln
