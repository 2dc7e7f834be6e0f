// torch.linalg's spectral and orthogonal factorizations and what is built on them (ops/linalg.h):
// eigh, eigvalsh, svd, svdvals, qr, pinv, lstsq, matrix_rank, matrix_norm, matrix_exp,
// matrix_power, multi_dot, cholesky_solve. The factorizations run in float64 on a host copy
// (ops/cpu/linalg_spectral.cpp, Eigen), one matrix at a time; the backward formulas are
// PyTorch's (FunctionsManual.cpp: svd_backward, linalg_eig_backward, linalg_qr_backward,
// pinv_backward, linalg_lstsq_backward, the block-matrix rule of matrix_exp), written in
// recorded ops so each op here is twice differentiable.
//
// A factorization with several outputs (U, S, Vh) is recorded as one node: its outputs are
// joined into one flat tensor that the node produces, and handed out as views of it. The
// node's gradient arrives joined the same way, with zeros for the outputs the loss did not
// use; a part that is exactly zero counts as unused, as an undefined gradient does in
// PyTorch (so svd's U-terms, which divide by differences of singular values, are skipped
// when only S was used, and a matrix with repeated singular values keeps finite gradients).
#include <cmath>
#include <functional>
#include <limits>
#include "kiln/core/autograd.h"
#include "kiln/core/finfo.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/kernels/linalg.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/linalg_host.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::linalg {
namespace {
using namespace host;

using PartsBackward = std::function<Tensor(const std::vector<Tensor>& parts, const std::vector<Tensor>& grads)>;

// The outputs `parts` (computed without a graph) of op `name` on A, recorded as one node whose
// backward gets the live parts and one gradient per part (undefined where the loss did not use
// it) and returns A's gradient. Returns the parts as views of the node's joined output.
std::vector<Tensor> record_parts(const char* name, const Tensor& A, const std::vector<Tensor>& parts,
                                 PartsBackward backward) {
  if (!any_requires_grad({A})) return parts;
  std::vector<Shape> shapes;
  std::vector<Tensor> flat;
  for (const Tensor& p : parts) {
    shapes.push_back(p.shape());
    flat.push_back(p.reshape({p.numel()}));
  }
  Tensor joined = cat(flat, 0);
  auto split = [shapes](const Tensor& j) {
    std::vector<Tensor> out;
    int64_t off = 0;
    for (const Shape& s : shapes) {
      const int64_t n = count(s);
      out.push_back(j.narrow(0, off, n).reshape(s));
      off += n;
    }
    return out;
  };
  const Tensor js = joined.detach();
  record(joined, name, {A}, {js}, [js, split, backward](const Tensor& g, const std::vector<bool>&) {
    std::vector<Tensor> grads = split(g);
    for (Tensor& gi : grads) {
      NoGradGuard ng;
      if (gi.numel() == 0 || !any(ne(gi, 0.0)).item<bool>()) gi = Tensor();
    }
    return std::vector<Tensor>{backward(split(saved_output(js)), grads)};
  });
  twice_differentiable(joined);
  return split(joined);
}

// E_jk = x_k - x_j off the diagonal, 1 on it (the denominators of PyTorch's eigh and svd
// backward formulas; x: (..., k)).
Tensor differences(const Tensor& x) {
  return add(sub(x.unsqueeze(-2), x.unsqueeze(-1)), eye(x.size(-1), -1, {.dtype = x.dtype(), .device = x.device()}));
}

// PyTorch's svd_backward (real case) on reduced factors U (m, k), S (k), Vh (k, n).
Tensor svd_backward(const Tensor& gU, const Tensor& gS, const Tensor& gVh, const Tensor& U, const Tensor& S,
                    const Tensor& Vh) {
  const int64_t m = U.size(-2), n = Vh.size(-1);
  if (!gU.defined() && !gVh.defined()) {  // svdvals: U diag(gS) Vh
    if (!gS.defined()) return zeros(with(leading(U, 2), {m, n}), {.dtype = U.dtype(), .device = U.device()});
    return m >= n ? matmul(U, mul(gS.unsqueeze(-1), Vh)) : matmul(mul(U, gS.unsqueeze(-2)), Vh);
  }
  auto skew = [](const Tensor& X) { return sub(X, mT(X)); };
  const Tensor UhgU = gU.defined() ? skew(matmul(mT(U), gU)) : Tensor();
  const Tensor VhgV = gVh.defined() ? skew(matmul(Vh, mT(gVh))) : Tensor();
  const Tensor E = differences(mul(S, S));
  Tensor gA;
  if (gU.defined() && gVh.defined())
    gA = div(add(mul(UhgU, S.unsqueeze(-2)), mul(S.unsqueeze(-1), VhgV)), E);
  else if (gU.defined())
    gA = mul(div(UhgU, E), S.unsqueeze(-2));
  else
    gA = mul(S.unsqueeze(-1), div(VhgV, E));
  if (gS.defined()) gA = add(gA, diag_embed(gS));
  if (m > n && gU.defined()) {  // [U gA + (I - U U^T) gU S^-1] Vh
    gA = matmul(U, gA);
    const Tensor gUSinv = div(gU, S.unsqueeze(-2));
    gA = sub(add(gA, gUSinv), matmul(U, matmul(mT(U), gUSinv)));
    return matmul(gA, Vh);
  }
  if (m < n && gVh.defined()) {  // U [gA Vh + S^-1 gVh (I - V Vh)]
    gA = matmul(gA, Vh);
    const Tensor SinvgVh = div(gVh, S.unsqueeze(-1));
    gA = sub(add(gA, SinvgVh), matmul(matmul(SinvgVh, mT(Vh)), Vh));
    return matmul(U, gA);
  }
  return m >= n ? matmul(U, matmul(gA, Vh)) : matmul(matmul(U, gA), Vh);
}

// PyTorch's linalg_eig_backward, Hermitian and real: V (ret + diag(gL)) V^T with ret the
// skew part of V^T gV over the eigenvalue differences.
Tensor eigh_backward(const Tensor& gL, const Tensor& gV, const Tensor& L, const Tensor& V) {
  if (!gV.defined()) {
    if (!gL.defined()) return zeros_like(V);
    return matmul(mul(V, gL.unsqueeze(-2)), mT(V));
  }
  Tensor VhgV = matmul(mT(V), gV);
  VhgV = mul(sub(VhgV, mT(VhgV)), 0.5);
  Tensor ret = div(VhgV, differences(L));  // its diagonal is 0: the skew part's
  if (gL.defined()) ret = add(ret, diag_embed(gL));
  return matmul(V, matmul(ret, mT(V)));
}

// PyTorch's pinv_backward: A's gradient from pinv(A)'s gradient g.
Tensor pinv_backward(const Tensor& g, const Tensor& pinvA, const Tensor& A) {
  const Tensor pinvAh = mT(pinvA), gh = mT(g);
  if (A.size(-2) <= A.size(-1)) {
    const Tensor K = matmul(gh, pinvA), KpinvAh = matmul(K, pinvAh);
    return add(sub(sub(KpinvAh, mT(matmul(pinvA, K))), matmul(matmul(A, pinvA), KpinvAh)),
               matmul(matmul(pinvAh, pinvA), sub(gh, matmul(K, A))));
  }
  const Tensor K = matmul(pinvA, gh), pinvAhK = matmul(pinvAh, K);
  return sub(add(sub(matmul(matmul(sub(gh, matmul(A, K)), pinvA), pinvAh), mT(matmul(K, pinvA))), pinvAhK),
             matmul(matmul(pinvAhK, pinvA), A));
}

// The eigendecomposition of every (symmetric) matrix of A: eigenvalues w and, when asked,
// eigenvectors v as float64 host arrays.
struct HostEigh {
  std::vector<double> w, v;
};
HostEigh host_eigh(const char* op, const Tensor& A, bool upper, bool vectors) {
  const int64_t n = A.size(-1), nb = count(leading(A, 2));
  const std::vector<double> a = host64(A);
  HostEigh r;
  r.w.resize(size_t(nb * n));
  if (vectors) r.v.resize(a.size());
  for (int64_t i = 0; i < nb; ++i)
    KILN_CHECK(eigh_f64(a.data() + i * n * n, r.w.data() + i * n, vectors ? r.v.data() + i * n * n : nullptr, n, upper) == 0,
               op, ": the eigenvalue algorithm did not converge", which(i, nb),
               " (the input may hold NaN or infinite values)");
  return r;
}

// The singular value decomposition of every matrix of A: U, S, Vh as float64 host arrays.
struct HostSVD {
  std::vector<double> u, s, vh;
};
HostSVD host_svd(const char* op, const Tensor& A, bool vectors, bool full) {
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), nb = count(leading(A, 2));
  const int64_t ur = full ? m : k, vr = full ? n : k;
  const std::vector<double> a = host64(A);
  HostSVD r;
  r.s.resize(size_t(nb * k));
  if (vectors) r.u.resize(size_t(nb * m * ur)), r.vh.resize(size_t(nb * vr * n));
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t info = svd_f64(a.data() + i * m * n, m, n, r.s.data() + i * k,
                                 vectors ? r.u.data() + i * m * ur : nullptr, vectors ? r.vh.data() + i * vr * n : nullptr,
                                 full);
    KILN_CHECK(info == 0, op, ": the SVD did not converge", which(i, nb),
               " (the input may hold NaN or infinite values)");
  }
  return r;
}

// PyTorch's tolerance rule (linalg.pinv, linalg.matrix_rank): atol 0 when not given; rtol as
// given, else 0 when atol > 0 was given, else eps(dtype) * max(m, n).
std::pair<double, double> tolerances(const Tensor& A, std::optional<double> atol, std::optional<double> rtol) {
  const double a = atol.value_or(0.0);
  const double r = rtol ? *rtol : (atol && *atol > 0) ? 0.0 : finfo_eps(A.dtype()) * double(std::max(A.size(-1), A.size(-2)));
  return {a, r};
}

// The values kept by a tolerance: S (..., k) > max(atol, rtol * largest |S|).
Tensor above_tolerance(const Tensor& S, double atol, double rtol) {
  const Tensor smax = amax(abs(S), {-1}, true);
  return gt(abs(S), maximum(mul(smax, rtol), full_like(smax, atol)));
}

}  // namespace

Eigh eigh(const Tensor& A, bool upper) {
  check_square("linalg.eigh", A);
  const HostEigh r = host_eigh("linalg.eigh", A, upper, true);
  const std::vector<Tensor> parts = record_parts(
      "linalg.eigh", A, {like(r.w, with(leading(A, 2), {A.size(-1)}), A), like(r.v, A.shape(), A)},
      [](const std::vector<Tensor>& p, const std::vector<Tensor>& g) { return eigh_backward(g[0], g[1], p[0], p[1]); });
  return {parts[0], parts[1]};
}

Tensor eigvalsh(const Tensor& A, bool upper) {
  check_square("linalg.eigvalsh", A);
  if (any_requires_grad({A})) return eigh(A, upper).eigenvalues;  // the eigenvectors' gradient is zero, so skipped
  return like(host_eigh("linalg.eigvalsh", A, upper, false).w, with(leading(A, 2), {A.size(-1)}), A);
}

SVD svd(const Tensor& A, bool full_matrices) {
  check_matrix("linalg.svd", A);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n);
  const Shape b = leading(A, 2);
  const HostSVD r = host_svd("linalg.svd", A, true, full_matrices);
  const int64_t ur = full_matrices ? m : k, vr = full_matrices ? n : k;
  const std::vector<Tensor> parts = record_parts(
      "linalg.svd", A, {like(r.u, with(b, {m, ur}), A), like(r.s, with(b, {k}), A), like(r.vh, with(b, {vr, n}), A)},
      [full_matrices, k](const std::vector<Tensor>& p, const std::vector<Tensor>& g) {
        // full_matrices: only the first k columns of U (rows of Vh) enter, as PyTorch's
        // derivatives.yaml narrows them
        auto cols = [&](const Tensor& t) { return full_matrices && t.defined() ? t.narrow(-1, 0, k) : t; };
        auto rows = [&](const Tensor& t) { return full_matrices && t.defined() ? t.narrow(-2, 0, k) : t; };
        return svd_backward(cols(g[0]), g[1], rows(g[2]), cols(p[0]), p[1], rows(p[2]));
      });
  return {parts[0], parts[1], parts[2]};
}

Tensor svdvals(const Tensor& A) {
  check_matrix("linalg.svdvals", A);
  if (!any_requires_grad({A})) {
    const HostSVD r = host_svd("linalg.svdvals", A, false, false);
    return like(r.s, with(leading(A, 2), {std::min(A.size(-2), A.size(-1))}), A);
  }
  return svd(A, false).S;  // U and Vh get no gradient: svd_backward's U diag(gS) Vh
}

QR qr(const Tensor& A, const std::string& mode) {
  check_matrix("linalg.qr", A);
  KILN_CHECK(mode == "reduced" || mode == "complete" || mode == "r", "linalg.qr: mode must be 'reduced', 'complete' "
             "or 'r', got '", mode, "'");
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), nb = count(leading(A, 2));
  const bool complete = mode == "complete", want_q = mode != "r";
  const int64_t rows = complete ? m : k;
  const std::vector<double> a = host64(A);
  std::vector<double> q(want_q ? size_t(nb * m * rows) : 0), r(size_t(nb * rows * n));
  for (int64_t i = 0; i < nb; ++i)
    qr_f64(a.data() + i * m * n, m, n, want_q ? q.data() + i * m * rows : nullptr, r.data() + i * rows * n, complete);
  const Shape b = leading(A, 2);
  Tensor R = like(r, with(b, {rows, n}), A);
  if (!want_q) {
    // PyTorch: "The derivative of linalg.qr depends on Q, which is not computed when mode='r'"
    if (any_requires_grad({A}))
      record(R, "linalg.qr", {A}, [](const Tensor&, const std::vector<bool>&) -> std::vector<Tensor> {
        KILN_FAIL("linalg.qr: the derivative depends on Q, which is not computed when mode='r'; use "
                  "mode='reduced' to differentiate through linalg.qr");
      });
    return {Tensor(), R};
  }
  KILN_CHECK(!(complete && m > n && any_requires_grad({A})), "linalg.qr: the QR decomposition is not differentiable "
             "when mode='complete' and nrows > ncols (got ", describe(A), "); use mode='reduced'");
  const std::vector<Tensor> parts = record_parts(
      "linalg.qr", A, {like(q, with(b, {m, rows}), A), R},
      [m, n](const std::vector<Tensor>& p, const std::vector<Tensor>& g) {
        // PyTorch's linalg_qr_backward (real)
        const Tensor &Q = p[0], &Rr = p[1], &gQ = g[0], &gR = g[1];
        if (!gQ.defined() && !gR.defined()) return zeros(with(leading(Q, 2), {m, n}), {.dtype = Q.dtype(), .device = Q.device()});
        Tensor gA = gQ.defined() ? (gR.defined() ? sub(matmul(gR, mT(Rr)), matmul(mT(Q), gQ)) : neg(matmul(mT(Q), gQ)))
                                 : matmul(gR, mT(Rr));
        if (m >= n) {
          const Tensor t = triu(gA);
          gA = matmul(Q, sub(add(t, mT(t)), diag_embed(diagonal(t))));  // syminvadj: t + t^T, diagonal once
          if (gQ.defined()) gA = add(gA, gQ);
          return solve_triangular(mT(Rr), gA, /*upper=*/false, /*left=*/false);
        }
        gA = matmul(Q, tril(sub(mT(gA), gA)));  // trilImInvAdjSkew(-gA)
        gA = solve_triangular(mT(Rr.narrow(-1, 0, m)), gA, /*upper=*/false, /*left=*/false);
        gA = cat({gA, zeros(with(leading(gA, 2), {m, n - m}), {.dtype = gA.dtype(), .device = gA.device()})}, -1);
        return gR.defined() ? add(gA, matmul(Q, gR)) : gA;
      });
  return {parts[0], parts[1]};
}

Tensor householder_product(const Tensor& A, const Tensor& tau) {
  check_matrix("linalg.householder_product", A);
  const int64_t m = A.size(-2), n = A.size(-1);
  KILN_CHECK(tau.defined() && tau.dim() == A.dim() - 1 && tau.dtype() == A.dtype() && tau.device() == A.device(),
             "linalg.householder_product: expected tau of shape (..., k) with A's dtype and device, got A ",
             describe(A), " and tau ", tau.defined() ? describe(tau) : std::string("undefined"));
  const int64_t k = tau.size(-1);
  KILN_CHECK(m >= n && n >= k && Shape(tau.shape().begin(), tau.shape().end() - 1) == leading(A, 2),
             "linalg.householder_product: expected A (..., m, n) with m >= n and tau (..., k) with k <= n and the "
             "same batch, got A ", describe(A), " and tau ", describe(tau));
  const TensorOptions o{.dtype = A.dtype(), .device = A.device()};
  const Shape b = leading(A, 2);
  // Q = H_0 (H_1 (... (H_{k-1} E))), E the first n columns of the identity, as LAPACK's orgqr
  Tensor Q = eye(m, n, o).expand(with(b, {m, n})).contiguous();
  for (int64_t i = k - 1; i >= 0; --i) {
    std::vector<Tensor> v;  // (..., m, 1): zeros above row i, 1 at i, A's column below
    if (i > 0) v.push_back(zeros(with(b, {i, 1}), o));
    v.push_back(ones(with(b, {1, 1}), o));
    if (i + 1 < m) v.push_back(A.narrow(-1, i, 1).narrow(-2, i + 1, m - i - 1));
    const Tensor vi = cat(v, -2), t = tau.narrow(-1, i, 1).unsqueeze(-1);  // t (..., 1, 1)
    Q = sub(Q, matmul(mul(vi, t), matmul(mT(vi), Q)));
  }
  return Q;
}

Tensor pinv(const Tensor& A, std::optional<double> atol, std::optional<double> rtol, bool hermitian) {
  check_matrix("linalg.pinv", A);
  KILN_CHECK(!hermitian || A.size(-1) == A.size(-2), "linalg.pinv: hermitian=true needs square matrices, got ",
             describe(A));
  const auto [at, rt] = tolerances(A, atol, rtol);
  Tensor P;
  {
    NoGradGuard ng;
    const Tensor Ad = A.detach();
    if (hermitian) {  // eigh: U diag(1/w) U^T over the eigenvalues kept
      const Eigh e = eigh(Ad);
      const Tensor winv = where(above_tolerance(e.eigenvalues, at, rt), reciprocal(e.eigenvalues), 0.0);
      P = matmul(mul(e.eigenvectors, winv.unsqueeze(-2)), mT(e.eigenvectors));
    } else {  // svd: V diag(1/s) U^T
      const SVD s = svd(Ad, false);
      const Tensor sinv = where(above_tolerance(s.S, at, rt), reciprocal(s.S), 0.0);
      P = matmul(mul(mT(s.Vh), sinv.unsqueeze(-2)), mT(s.U));
    }
  }
  const Tensor Ps = P.detach();
  record(P, "linalg.pinv", {A}, {A, Ps}, [A, Ps](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{pinv_backward(g, saved_output(Ps), A)};
  });
  return twice_differentiable(P);
}

Tensor matrix_rank(const Tensor& A, std::optional<double> atol, std::optional<double> rtol, bool hermitian) {
  check_matrix("linalg.matrix_rank", A);
  KILN_CHECK(!hermitian || A.size(-1) == A.size(-2), "linalg.matrix_rank: hermitian=true needs square matrices, got ",
             describe(A));
  NoGradGuard ng;
  const auto [at, rt] = tolerances(A, atol, rtol);
  const Tensor S = hermitian ? eigvalsh(A.detach()) : svdvals(A.detach());
  return sum(above_tolerance(S, at, rt).to(DType::int64), {-1});
}

Lstsq lstsq(const Tensor& A, const Tensor& B, std::optional<double> rcond) {
  check_matrix("linalg.lstsq", A);
  KILN_CHECK(B.defined() && B.is_floating_point() && B.dim() >= 1,
             "linalg.lstsq: B must be a floating-point vector or batch of matrices, got ",
             B.defined() ? describe(B) : "undefined");
  // solve's vector rule: B (m), or A's batch shape + (m)
  if (B.dim() == 1 || (B.dim() == A.dim() - 1 && B.shape() == leading(A, 1))) {
    Lstsq r = lstsq(A, B.unsqueeze(-1), rcond);
    r.solution = r.solution.squeeze(-1);
    return r;
  }
  const int64_t m = A.size(-2), n = A.size(-1), k = B.size(-1);
  KILN_CHECK(B.dim() >= 2 && B.size(-2) == m, "linalg.lstsq: A ", describe(A), " and B ", describe(B),
             " do not fit min |A X - B| (B needs ", m, " rows)");
  const Shape batch = broadcast_shapes(leading(A, 2), leading(B, 2), "linalg.lstsq");
  const int64_t nb = count(batch);
  const std::vector<double> a = host64(A.expand(with(batch, {m, n}))), b = host64(B.expand(with(batch, {m, k})));
  std::vector<double> x(size_t(nb * n * k));
  std::vector<int64_t> rank(static_cast<size_t>(nb));
  const double rc = rcond ? *rcond : finfo_eps(A.dtype()) * double(std::max(m, n));  // PyTorch's default
  for (int64_t i = 0; i < nb; ++i)
    rank[size_t(i)] = lstsq_f64(a.data() + i * m * n, b.data() + i * m * k, x.data() + i * n * k, m, n, k, rc);
  Tensor X = from_vector<double>(x, with(batch, {n, k})).to(promoted(A, B)).to(A.device());
  // PyTorch's linalg_lstsq_backward: X = pinv(A) B for the gradients
  record(X, "linalg.lstsq", {A, B}, {A, B}, [A, B](const Tensor& gX, const std::vector<bool>& need) {
    const Tensor pinvA = pinv(A);
    Tensor gA, gB;
    if (need[0]) gA = sum_to(pinv_backward(matmul(gX, mT(B)), pinvA, A), A.shape());
    if (need[1]) gB = sum_to(matmul(mT(pinvA), gX), B.shape());
    return std::vector<Tensor>{gA, gB};
  });
  twice_differentiable(X);
  return {X, from_vector(rank, batch, {.dtype = DType::int64, .device = A.device()})};
}

Tensor matrix_norm(const Tensor& A, double ord, bool keepdim) {
  check_matrix("linalg.matrix_norm", A);
  auto keep = [keepdim](Tensor t) { return keepdim ? t.unsqueeze(-1).unsqueeze(-1) : t; };
  if (ord == 2 || ord == -2) {
    const Tensor S = svdvals(A);
    return keep(ord == 2 ? amax(S, {-1}) : amin(S, {-1}));
  }
  const double inf = std::numeric_limits<double>::infinity();
  KILN_CHECK(ord == 1 || ord == -1 || ord == inf || ord == -inf, "linalg.matrix_norm: ord must be one of 2, -2, 1, -1, "
             "inf, -inf, 'fro' or 'nuc', got ", ord);
  // 1: the largest column sum of |A|; inf: the largest row sum
  const Tensor sums = sum(abs(A), {std::fabs(ord) == 1 ? int64_t(-2) : int64_t(-1)}, true);
  return ord > 0 ? amax(sums, {-2, -1}, keepdim) : amin(sums, {-2, -1}, keepdim);
}

Tensor matrix_norm(const Tensor& A, const std::string& ord, bool keepdim) {
  check_matrix("linalg.matrix_norm", A);
  if (ord == "fro") return vector_norm(A, 2.0, {-2, -1}, keepdim);
  KILN_CHECK(ord == "nuc", "linalg.matrix_norm: ord must be one of 'fro', 'nuc', 2, -2, 1, -1, inf or -inf, got '", ord,
             "'");
  const Tensor n = sum(svdvals(A), {-1});
  return keepdim ? n.unsqueeze(-1).unsqueeze(-1) : n;
}

Tensor matrix_exp(const Tensor& A) {
  check_square("linalg.matrix_exp", A);
  const int64_t n = A.size(-1), nb = count(leading(A, 2));
  const std::vector<double> a = host64(A);
  std::vector<double> e(a.size());
  for (int64_t i = 0; i < nb; ++i) matrix_exp_f64(a.data() + i * n * n, e.data() + i * n * n, n);
  Tensor E = like(e, A.shape(), A);
  // PyTorch's backward (Mathias 1996): the top-right block of exp([[A^T, g], [0, A^T]])
  record(E, "linalg.matrix_exp", {A}, {A}, [A, n](const Tensor& g, const std::vector<bool>&) {
    const Tensor At = mT(A), Z = zeros_like(At);
    const Tensor big = cat({cat({At, g}, -1), cat({Z, At}, -1)}, -2);
    return std::vector<Tensor>{matrix_exp(big).narrow(-2, 0, n).narrow(-1, n, n)};
  });
  return twice_differentiable(E);
}

Tensor matrix_power(const Tensor& A, int64_t k) {
  check_square("linalg.matrix_power", A);
  if (k == 0) return eye(A.size(-1), -1, {.dtype = A.dtype(), .device = A.device()}).expand(A.shape()).contiguous();
  Tensor a = k < 0 ? inv(A) : A;
  uint64_t e = k < 0 ? uint64_t(0) - uint64_t(k) : uint64_t(k);
  if (e == 1) return a.clone();
  if (e == 2) return matmul(a, a);
  if (e == 3) return matmul(matmul(a, a), a);
  // PyTorch's order: square a up the bits of k from the lowest, multiplying the result by the
  // squares where a bit is set
  Tensor z, result;
  while (e > 0) {
    const bool bit = e % 2;
    e /= 2;
    z = z.defined() ? matmul(z, z) : a;
    if (bit) result = result.defined() ? matmul(result, z) : z;
  }
  return result;
}

Tensor multi_dot(const std::vector<Tensor>& ts) {
  const size_t n = ts.size();
  KILN_CHECK(n >= 2, "linalg.multi_dot: expected at least 2 tensors, got ", n);
  std::vector<Tensor> m(ts);
  for (size_t i = 0; i < n; ++i) {
    KILN_CHECK(m[i].defined() && m[i].is_floating_point(), "linalg.multi_dot: tensor ", i,
               " must be a floating-point tensor, got ", m[i].defined() ? describe(m[i]) : "undefined");
    const bool end = i == 0 || i == n - 1;
    KILN_CHECK(m[i].dim() == 2 || (end && m[i].dim() == 1), "linalg.multi_dot: tensor ", i, " must be 2-D",
               end ? " (or 1-D, as the first or last)" : "", ", got ", describe(m[i]));
  }
  const bool first_vec = m[0].dim() == 1, last_vec = m[n - 1].dim() == 1;
  if (first_vec) m[0] = m[0].unsqueeze(0);
  if (last_vec) m[n - 1] = m[n - 1].unsqueeze(-1);
  for (size_t i = 0; i + 1 < n; ++i)
    KILN_CHECK(m[i].size(1) == m[i + 1].size(0), "linalg.multi_dot: tensors ", i, " and ", i + 1, " cannot be "
               "multiplied: ", describe(ts[i]), " and ", describe(ts[i + 1]));
  // the cheapest order (the matrix-chain problem, as PyTorch for more than two): cost[i][j]
  // multiplications for m[i] ... m[j], split[i][j] where the last product is taken
  std::vector<int64_t> d(n + 1);
  for (size_t i = 0; i < n; ++i) d[i] = m[i].size(0);
  d[n] = m[n - 1].size(1);
  std::vector<std::vector<int64_t>> cost(n, std::vector<int64_t>(n, 0));
  std::vector<std::vector<size_t>> split(n, std::vector<size_t>(n, 0));
  for (size_t len = 1; len < n; ++len)
    for (size_t i = 0; i + len < n; ++i) {
      const size_t j = i + len;
      cost[i][j] = std::numeric_limits<int64_t>::max();
      for (size_t s = i; s < j; ++s) {
        const int64_t c = cost[i][s] + cost[s + 1][j] + d[i] * d[s + 1] * d[j + 1];
        if (c < cost[i][j]) cost[i][j] = c, split[i][j] = s;
      }
    }
  std::function<Tensor(size_t, size_t)> chain = [&](size_t i, size_t j) -> Tensor {
    if (i == j) return m[i];
    return matmul(chain(i, split[i][j]), chain(split[i][j] + 1, j));
  };
  Tensor r = chain(0, n - 1);
  if (first_vec) r = r.squeeze(0);
  if (last_vec) r = r.squeeze(-1);
  return r;
}

Tensor cholesky_solve(const Tensor& B, const Tensor& L, bool upper) {
  check_square("cholesky_solve", L);
  KILN_CHECK(B.defined() && B.is_floating_point() && B.dim() >= 2 && B.size(-2) == L.size(-1), "cholesky_solve: B ",
             B.defined() ? describe(B) : "undefined", " must be a batch of matrices with ", L.size(-1),
             " rows, to go with the factor ", describe(L));
  Tensor X;
  {
    NoGradGuard ng;
    const Tensor Ld = L.detach(), Bd = B.detach();
    // A = L L^T (or U^T U): X = L^-T (L^-1 B)
    const Tensor Y = upper ? solve_triangular(mT(Ld), Bd, false) : solve_triangular(Ld, Bd, false);
    X = upper ? solve_triangular(Ld, Y, true) : solve_triangular(mT(Ld), Y, true);
  }
  const Tensor Xs = X.detach();
  // PyTorch's cholesky_solve_backward
  record(X, "cholesky_solve", {B, L}, {L, Xs},
         [L, Xs, upper, bs = B.shape()](const Tensor& gX, const std::vector<bool>& need) {
           const Tensor gB = cholesky_solve(gX, L, upper);
           Tensor gL;
           if (need[1]) {
             Tensor common = matmul(gB, mT(saved_output(Xs)));
             common = add(common, mT(common));
             gL = sum_to(neg(upper ? matmul(L, common) : matmul(common, L)), L.shape());
           }
           return std::vector<Tensor>{need[0] ? sum_to(gB, bs) : Tensor(), gL};
         });
  return twice_differentiable(X);
}

}  // namespace kiln::linalg

namespace kiln {

Geqrf geqrf(const Tensor& A) {
  using namespace linalg::host;
  check_matrix("geqrf", A);
  const int64_t m = A.size(-2), n = A.size(-1), k = std::min(m, n), nb = count(leading(A, 2));
  const std::vector<double> a = host64(A);
  std::vector<double> packed(a.size()), tau(size_t(nb * k));
  for (int64_t i = 0; i < nb; ++i) geqrf_f64(a.data() + i * m * n, m, n, packed.data() + i * m * n, tau.data() + i * k);
  Tensor pa = like(packed, A.shape(), A), pt = like(tau, with(leading(A, 2), {k}), A);
  if (any_requires_grad({A}))
    record(pa, "geqrf", {A}, [](const Tensor&, const std::vector<bool>&) -> std::vector<Tensor> {
      KILN_FAIL("geqrf: the derivative is not implemented (as in PyTorch); use linalg::qr to differentiate");
    });
  return {pa, pt};
}

}  // namespace kiln
