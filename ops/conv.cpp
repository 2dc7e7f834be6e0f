// conv2d and 2-D pooling: argument checks, output shapes, the call through the dispatch
// table (a forward/backward kernel table per op, see ops/kernels/conv.h) and the
// backward lambdas, which call the backward kernels directly.
#include "kiln/ops/conv.h"
#include <atomic>
#include <cmath>
#include <sstream>
#include "kiln/core/autocast.h"
#include "kiln/core/autograd.h"
#include "kiln/ops/cpu/sgemm.h"
#include "kiln/ops/kernels/conv.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/helpers.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

namespace {

/// True when x is 16-bit on the CPU, whose kernels run in float32 on widened copies. The
/// CUDA kernels take float16 / bfloat16 directly (float32 accumulation).
bool upcast_on_cpu(const Tensor& x) { return is_half(x.dtype()) && x.is_cpu(); }

/// For an upcast bf16 convolution: whether its float32 kernels should multiply as bf16
/// (Conv2dGeom::bf16_products), on a CPU whose bf16 GEMM outruns its float32 one.
bool bf16_products_on_cpu(const Tensor& x) { return x.dtype() == DType::bfloat16 && sgemm_bf16_preferred(); }

std::atomic<bool> g_cudnn_benchmark{false};

/// Contiguous, detached data of t (a copy only when t is not contiguous).
Tensor contig(const Tensor& t) {
  Tensor d = t.detach();
  return d.is_contiguous() ? d : d.contiguous();
}

/// t itself when it is undefined or of dtype dt, else a detached copy converted to dt.
Tensor as_dtype(const Tensor& t, DType dt) { return !t.defined() || t.dtype() == dt ? t : t.detach().to(dt); }

/// Gradient g as contiguous data of dtype dt.
Tensor grad_in(const Tensor& g, DType dt) { return contig(g.dtype() == dt ? g : g.detach().to(dt)); }

/// An uninitialised gradient buffer, zeroed when the kernel will not write it.
Tensor grad_buffer(const Shape& shape, DType dt, Device dev, bool kernel_writes) {
  Tensor t = Tensor::empty(shape, dt, dev);
  if (!kernel_writes && t.numel() > 0) t.zero_();
  return t;
}

std::string pair_str(IntPair p) {
  std::ostringstream os;
  os << '(' << p[0] << ", " << p[1] << ')';
  return os.str();
}

/// Checks of a pooling input: defined, floating, (N, C, H, W) or (C, H, W).
void check_pool_input(const char* op, const Tensor& x) {
  check_floating(op, x, "input");
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected input of shape (N, C, H, W) or (C, H, W), got ",
             describe(x));
}

/// The planes of a pooling input: checks it (floating, (N, C, H, W) or (C, H, W), H and W
/// non-empty, planes under 2^31 elements) and fills P, H and W.
Pool2dGeom plane_geom(const char* op, const Tensor& x) {
  check_pool_input(op, x);
  const int64_t H = x.size(-2), W = x.size(-1);
  // an empty plane has no window even when padding makes one fit (PyTorch refuses it too)
  KILN_CHECK(H > 0 && W > 0, op, ": input spatial size must be non-empty, got input ", shape_str(x.shape()));
  KILN_CHECK(H * W < (int64_t(1) << 31), op, ": planes of 2^31 or more elements are not supported, got input ",
             shape_str(x.shape()));
  Pool2dGeom g{};
  g.H = H;
  g.W = W;
  g.P = x.numel() / (H * W);
  return g;
}

/// PyTorch's pooled length along one axis: windows of extent e = dilation (kernel - 1) + 1
/// every stride over the padded input, rounded up under ceil_mode except that the last
/// window must start inside the input or its left padding.
int64_t pooled_size(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = n + 2 * p - d * (k - 1) - 1;  // >= 0, checked by the caller
  int64_t out = (span + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  return out;
}

/// Whether every window o < out along an axis of n has a tap o s - p + j d (j < k) inside
/// [0, n): always with dilation 1 (padding <= kernel/2); with a larger dilation a window can
/// fall between the input's elements into the padding (PyTorch then returns -inf and an
/// index outside the plane).
bool every_window_has_a_tap(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out) {
  for (int64_t o = 0; o < out; ++o) {
    const int64_t a = o * s - p;                        // first tap
    const int64_t j = a >= 0 ? 0 : (-a + d - 1) / d;    // first tap at or after 0
    if (j >= k || a + j * d >= n) return false;
  }
  return true;
}

/// Resolves stride (0,0 = kernel), checks kernel/stride/padding/dilation and returns the
/// geometry, with PyTorch's output size (pooled_size).
Pool2dGeom pool_geom(const char* op, const Tensor& x, IntPair kernel, IntPair& stride, IntPair padding,
                     IntPair dilation = {1, 1}, bool ceil_mode = false) {
  Pool2dGeom g = plane_geom(op, x);
  if (stride[0] == 0 && stride[1] == 0) stride = kernel;
  KILN_CHECK(kernel[0] > 0 && kernel[1] > 0, op, ": kernel size must be positive, got ", pair_str(kernel),
             " for input ", shape_str(x.shape()));
  KILN_CHECK(stride[0] > 0 && stride[1] > 0, op, ": stride must be positive, got ", pair_str(stride),
             " for input ", shape_str(x.shape()));
  KILN_CHECK(dilation[0] > 0 && dilation[1] > 0, op, ": dilation must be positive, got ", pair_str(dilation),
             " for input ", shape_str(x.shape()));
  KILN_CHECK(padding[0] >= 0 && padding[1] >= 0 && padding[0] * 2 <= kernel[0] && padding[1] * 2 <= kernel[1], op,
             ": padding must be in [0, kernel/2], got padding ", pair_str(padding), " for kernel ", pair_str(kernel));
  const int64_t H = g.H, W = g.W;
  const int64_t eH = dilation[0] * (kernel[0] - 1) + 1, eW = dilation[1] * (kernel[1] - 1) + 1;
  KILN_CHECK(H + 2 * padding[0] >= eH && W + 2 * padding[1] >= eW, op, ": kernel ", pair_str(kernel),
             dilation[0] * dilation[1] > 1 ? " (dilated to " + pair_str({eH, eW}) + ")" : std::string(),
             " is larger than the padded input (input ", shape_str(x.shape()), ", padding ", pair_str(padding), ")");
  g.kH = kernel[0];
  g.kW = kernel[1];
  g.sH = stride[0];
  g.sW = stride[1];
  g.pH = padding[0];
  g.pW = padding[1];
  g.dH = dilation[0];
  g.dW = dilation[1];
  g.OH = pooled_size(H, g.kH, g.sH, g.pH, g.dH, ceil_mode);
  g.OW = pooled_size(W, g.kW, g.sW, g.pW, g.dW, ceil_mode);
  KILN_CHECK((g.dH == 1 && g.dW == 1) || (every_window_has_a_tap(H, g.kH, g.sH, g.pH, g.dH, g.OH) &&
                                           every_window_has_a_tap(W, g.kW, g.sW, g.pW, g.dW, g.OW)),
             op, ": with dilation ", pair_str(dilation), " a window of kernel ", pair_str(kernel), ", stride ",
             pair_str(stride), ", padding ", pair_str(padding), " holds only padding for input ",
             shape_str(x.shape()), "; use less padding or dilation");
  return g;
}

Shape pooled_shape(const Tensor& x, int64_t OH, int64_t OW) {
  Shape s = x.shape();
  s[s.size() - 2] = OH;
  s[s.size() - 1] = OW;
  return s;
}

}  // namespace

void cudnn_benchmark(bool enabled) { g_cudnn_benchmark.store(enabled, std::memory_order_relaxed); }
bool cudnn_benchmark_enabled() { return g_cudnn_benchmark.load(std::memory_order_relaxed); }

// ------------------------------------------------------------------ conv2d

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dArgs args) {
  if (auto r = autocast_op(
          AutocastTo::low,
          [&](const Tensor& xc, const Tensor& wc, const Tensor& bc) { return conv2d(xc, wc, bc, args); },
          x, weight, bias))
    return *r;  // autocast: the op ran on cast inputs
  const char* op = "conv2d";
  check_floating(op, x, "input");
  check_floating(op, weight, "weight");
  check_same_device(op, {x, weight, bias});
  KILN_CHECK(x.dtype() == weight.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
             "conv2d: dtype mismatch: input ", describe(x), ", weight ", describe(weight), ", bias ", describe(bias),
             " (expected equal dtypes)");
  KILN_CHECK(x.dim() == 4 || x.dim() == 3, "conv2d: expected input of shape (N, C, H, W) or (C, H, W), got ",
             shape_str(x.shape()));
  KILN_CHECK(weight.dim() == 4, "conv2d: expected weight of shape (out_channels, in_channels/groups, kH, kW), got ",
             shape_str(weight.shape()));
  const int64_t G = args.groups;
  KILN_CHECK(G >= 1, "conv2d: groups must be positive, got ", G);
  KILN_CHECK(args.stride[0] > 0 && args.stride[1] > 0, "conv2d: stride must be positive, got ",
             pair_str(args.stride), " (input ", shape_str(x.shape()), ")");
  KILN_CHECK(args.dilation[0] > 0 && args.dilation[1] > 0, "conv2d: dilation must be positive, got ",
             pair_str(args.dilation));
  KILN_CHECK(args.padding[0] >= 0 && args.padding[1] >= 0, "conv2d: padding must be non-negative, got ",
             pair_str(args.padding));
  const int64_t C = x.size(-3), H = x.size(-2), W = x.size(-1);
  const int64_t O = weight.size(0), kH = weight.size(2), kW = weight.size(3);
  KILN_CHECK(C > 0 && O > 0, "conv2d: expected at least one input and one output channel, got input ",
             shape_str(x.shape()), " and weight ", shape_str(weight.shape()));
  KILN_CHECK(H > 0 && W > 0, "conv2d: input spatial size must be non-empty (only the batch may be 0), got input ",
             shape_str(x.shape()));
  KILN_CHECK(C % G == 0, "conv2d: groups=", G, " does not divide the input's ", C, " channels (input ",
             shape_str(x.shape()), ", weight ", shape_str(weight.shape()), ")");
  KILN_CHECK(O % G == 0, "conv2d: groups=", G, " does not divide out_channels=", O, " (weight ",
             shape_str(weight.shape()), ")");
  KILN_CHECK(C == weight.size(1) * G, "conv2d: channel mismatch: input ", shape_str(x.shape()), " has ", C,
             " channels but weight ", shape_str(weight.shape()), " with groups=", G, " expects ", weight.size(1) * G);
  if (bias.defined())
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == O, "conv2d: bias must have shape [", O, "] for weight ",
               shape_str(weight.shape()), ", got ", shape_str(bias.shape()));
  const int64_t ekH = args.dilation[0] * (kH - 1) + 1, ekW = args.dilation[1] * (kW - 1) + 1;
  KILN_CHECK(kH > 0 && kW > 0 && ekH <= H + 2 * args.padding[0] && ekW <= W + 2 * args.padding[1],
             "conv2d: kernel (", kH, ", ", kW, ") with dilation ", pair_str(args.dilation),
             " is larger than the padded input: input ", shape_str(x.shape()), ", weight ", shape_str(weight.shape()),
             ", padding ", pair_str(args.padding));
  Conv2dGeom g{};
  g.N = x.dim() == 4 ? x.size(0) : 1;
  g.C = C;
  g.H = H;
  g.W = W;
  g.O = O;
  g.kH = kH;
  g.kW = kW;
  g.sH = args.stride[0];
  g.sW = args.stride[1];
  g.pH = args.padding[0];
  g.pW = args.padding[1];
  g.dH = args.dilation[0];
  g.dW = args.dilation[1];
  g.groups = G;
  g.OH = (H + 2 * g.pH - ekH) / g.sH + 1;
  g.OW = (W + 2 * g.pW - ekW) / g.sW + 1;
  // 16-bit on the CPU: the kernels compute in float32 (kd), reading x and dy and writing y
  // and dx in 16 bits (widened inside the kernel, ops/kernels/conv.h);
  // w, bias and their gradients are float32 copies made here, so the node keeps x and w in
  // 16 bits. bf16 multiplies in bf16 where that pays (Conv2dGeom::bf16_products).
  const DType dt = x.dtype(), kd = upcast_on_cpu(x) ? DType::float32 : dt;
  g.bf16_products = upcast_on_cpu(x) && bf16_products_on_cpu(x);

  Tensor xc = contig(x), wc = contig(weight);
  Tensor wk = as_dtype(wc, kd), bk = bias.defined() ? as_dtype(contig(bias), kd) : Tensor();
  Shape out_shape = x.dim() == 4 ? Shape{g.N, O, g.OH, g.OW} : Shape{O, g.OH, g.OW};
  Tensor y = Tensor::empty(out_shape, dt, x.device());
  const auto* k = kernel<const Conv2dKernels>(Op::conv2d, x.device());
  if (y.numel() > 0)
    k->forward(dt, g, xc.raw_data(), wk.raw_data(), bk.defined() ? bk.raw_data() : nullptr, y.raw_data());

  const bool gx = x.requires_grad(), gw = weight.requires_grad();
  Tensor xs = gw ? xc : Tensor(), ws = gx ? wc : Tensor();  // saved: what the needed gradients read
  record(y, "conv2d", {x, weight, bias}, {xs, ws},
         [k, g, dt, kd, xc = xs, wc = ws, x_shape = x.shape(), w_shape = weight.shape()](
             const Tensor& gy, const std::vector<bool>& needs) -> std::vector<Tensor> {
           Tensor dy = grad_in(gy, dt);
           const Tensor wk = as_dtype(wc, kd);
           const bool run = dy.numel() > 0;
           Tensor dx = needs[0] ? grad_buffer(x_shape, dt, dy.device(), run) : Tensor();
           Tensor dw = needs[1] ? grad_buffer(w_shape, kd, dy.device(), run) : Tensor();
           Tensor db = needs.size() > 2 && needs[2] ? grad_buffer({g.O}, kd, dy.device(), run) : Tensor();
           if (dy.numel() > 0 && (dx.defined() || dw.defined() || db.defined()))
             k->backward(dt, g, xc.defined() ? xc.raw_data() : nullptr, wk.defined() ? wk.raw_data() : nullptr,
                         dy.raw_data(), dx.defined() ? dx.raw_data() : nullptr,
                         dw.defined() ? dw.raw_data() : nullptr, db.defined() ? db.raw_data() : nullptr);
           return {dx, as_dtype(dw, dt), as_dtype(db, dt)};
         });
  return y;
}

// ------------------------------------------------------------------ conv_transpose2d

namespace {

/// conv_transpose2d; bf16_products marks float32 tensors widened from bf16
/// (Conv2dGeom::bf16_products): a 16-bit input recurses once on widened copies.
Tensor conv_transpose2d_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, ConvTranspose2dArgs args,
                             bool bf16_products) {
  if (auto r = autocast_op(
          AutocastTo::low,
          [&](const Tensor& xc, const Tensor& wc, const Tensor& bc) { return conv_transpose2d(xc, wc, bc, args); },
          x, weight, bias))
    return *r;
  const char* op = "conv_transpose2d";
  check_floating(op, x, "input");
  check_floating(op, weight, "weight");
  check_same_device(op, {x, weight, bias});
  KILN_CHECK(x.dtype() == weight.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
             "conv_transpose2d: dtype mismatch: input ", describe(x), ", weight ", describe(weight), ", bias ",
             describe(bias), " (expected equal dtypes)");
  KILN_CHECK(x.dim() == 4 || x.dim() == 3, "conv_transpose2d: expected input of shape (N, C, H, W) or (C, H, W), got ",
             shape_str(x.shape()));
  KILN_CHECK(weight.dim() == 4, "conv_transpose2d: expected weight of shape (in_channels, out_channels/groups, kH, "
             "kW), got ", shape_str(weight.shape()));
  const int64_t G = args.groups;
  KILN_CHECK(G >= 1, "conv_transpose2d: groups must be positive, got ", G);
  for (int a = 0; a < 2; ++a) {
    KILN_CHECK(args.stride[a] > 0 && args.dilation[a] > 0 && args.padding[a] >= 0 && args.output_padding[a] >= 0,
               "conv_transpose2d: stride and dilation must be positive, padding and output_padding non-negative, "
               "got stride ", pair_str(args.stride), ", padding ", pair_str(args.padding), ", output_padding ",
               pair_str(args.output_padding), ", dilation ", pair_str(args.dilation));
    KILN_CHECK(args.output_padding[a] < std::max(args.stride[a], args.dilation[a]), "conv_transpose2d: output_padding ",
               pair_str(args.output_padding), " must be smaller than the stride ", pair_str(args.stride),
               " or the dilation ", pair_str(args.dilation));
  }
  const int64_t Cin = x.size(-3), H = x.size(-2), W = x.size(-1);
  const int64_t Cout = weight.size(1) * G, kH = weight.size(2), kW = weight.size(3);
  KILN_CHECK(Cin > 0 && Cout > 0, "conv_transpose2d: expected at least one input and one output channel, got input ",
             shape_str(x.shape()), " and weight ", shape_str(weight.shape()));
  KILN_CHECK(H > 0 && W > 0, "conv_transpose2d: input spatial size must be non-empty (only the batch may be 0), got "
             "input ", shape_str(x.shape()));
  KILN_CHECK(weight.size(0) == Cin, "conv_transpose2d: channel mismatch: input ", shape_str(x.shape()), " has ", Cin,
             " channels but weight ", shape_str(weight.shape()), " expects ", weight.size(0));
  KILN_CHECK(Cin % G == 0, "conv_transpose2d: groups=", G, " does not divide the input's ", Cin, " channels");
  if (bias.defined())
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == Cout, "conv_transpose2d: bias must have shape [", Cout,
               "] for weight ", shape_str(weight.shape()), ", got ", shape_str(bias.shape()));
  const int64_t OH = (H - 1) * args.stride[0] - 2 * args.padding[0] + args.dilation[0] * (kH - 1) +
                     args.output_padding[0] + 1;
  const int64_t OW = (W - 1) * args.stride[1] - 2 * args.padding[1] + args.dilation[1] * (kW - 1) +
                     args.output_padding[1] + 1;
  KILN_CHECK(OH > 0 && OW > 0 && kH > 0 && kW > 0, "conv_transpose2d: the output would be ", OH, "x", OW,
             " for input ", shape_str(x.shape()), ", weight ", shape_str(weight.shape()), ", padding ",
             pair_str(args.padding));
  if (upcast_on_cpu(x))
    return conv_transpose2d_impl(x.to(DType::float32), weight.to(DType::float32),
                                 bias.defined() ? bias.to(DType::float32) : Tensor(), args, bf16_products_on_cpu(x))
        .to(x.dtype());
  // the conv2d whose input gradient this is: input (N, Cout, OH, OW) -> output (N, Cin, H, W)
  Conv2dGeom g{};
  g.N = x.dim() == 4 ? x.size(0) : 1;
  g.C = Cout, g.H = OH, g.W = OW;
  g.O = Cin, g.kH = kH, g.kW = kW;
  g.sH = args.stride[0], g.sW = args.stride[1];
  g.pH = args.padding[0], g.pW = args.padding[1];
  g.dH = args.dilation[0], g.dW = args.dilation[1];
  g.groups = G;
  g.OH = H, g.OW = W;
  g.bf16_products = bf16_products;
  const Tensor xc = contig(x), wc = contig(weight);
  const Shape out_shape = x.dim() == 4 ? Shape{g.N, Cout, OH, OW} : Shape{Cout, OH, OW};
  const auto* k = kernel<const Conv2dKernels>(Op::conv2d, x.device());
  Tensor y = grad_buffer(out_shape, x.dtype(), x.device(), xc.numel() > 0);
  if (xc.numel() > 0) k->backward(x.dtype(), g, nullptr, wc.raw_data(), xc.raw_data(), y.raw_data(), nullptr, nullptr);
  const bool gx = x.requires_grad(), gw = weight.requires_grad();
  record(y, "conv_transpose2d", {x, weight}, {gw ? xc : Tensor(), gx ? wc : Tensor()},
         [k, g, dt = x.dtype(), xs = gw ? xc : Tensor(), ws = gx ? wc : Tensor(), x_shape = x.shape(),
          w_shape = weight.shape()](const Tensor& gy, const std::vector<bool>& needs) -> std::vector<Tensor> {
           Tensor dy = grad_in(gy, dt);  // (N, Cout, OH, OW): the conv2d's input
           const bool run = dy.numel() > 0 && (xs.defined() || ws.defined());
           Tensor dx = needs[0] ? grad_buffer(x_shape, dt, dy.device(), run) : Tensor();
           Tensor dw = needs[1] ? grad_buffer(w_shape, dt, dy.device(), run) : Tensor();
           if (dy.numel() > 0 && dx.defined()) k->forward(dt, g, dy.raw_data(), ws.raw_data(), nullptr, dx.raw_data());
           if (dy.numel() > 0 && dw.defined())
             k->backward(dt, g, dy.raw_data(), nullptr, xs.raw_data(), nullptr, dw.raw_data(), nullptr);
           return {dx, dw};
         });
  if (!bias.defined()) return y;
  return add(y, bias.reshape({Cout, 1, 1}));
}

}  // namespace

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, ConvTranspose2dArgs args) {
  return conv_transpose2d_impl(x, weight, bias, args, false);
}

// ------------------------------------------------------------------ pooling

namespace {

/// Max pooling over windows (kernel args) or adaptive bins: y, and idx, the flat h*W + w of
/// each maximum in its plane. The backward scatters dy to idx.
std::pair<Tensor, Tensor> max_pool_with_indices(const char* op, Op kop, const Tensor& x, const Pool2dGeom& g) {
  Tensor xc = contig(x);
  Shape out_shape = pooled_shape(x, g.OH, g.OW);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor idx = Tensor::empty(out_shape, DType::int64, x.device());
  const auto* k = kernel<const MaxPool2dKernels>(kop, x.device());
  if (y.numel() > 0) k->forward(x.dtype(), g, xc.raw_data(), y.raw_data(), static_cast<int64_t*>(idx.raw_data()));
  record(y, op, {x}, {idx},
         [k, g, idx, dt = x.dtype(), x_shape = x.shape()](const Tensor& gy,
                                                          const std::vector<bool>&) -> std::vector<Tensor> {
           Tensor dy = grad_in(gy, dt);
           Tensor dx = grad_buffer(x_shape, dt, dy.device(), dy.numel() > 0);
           if (dy.numel() > 0)
             k->backward(dt, g, dy.raw_data(), static_cast<const int64_t*>(idx.raw_data()), dx.raw_data());
           return {dx};
         });
  return {y, idx};
}

/// Geometry of adaptive pooling to output_size (PyTorch's bins, ops/kernels/conv.h).
Pool2dGeom adaptive_geom(const char* op, const Tensor& x, IntPair output_size) {
  Pool2dGeom g = plane_geom(op, x);
  KILN_CHECK(output_size[0] > 0 && output_size[1] > 0, op, ": output size must be positive, got ",
             pair_str(output_size), " for input ", shape_str(x.shape()));
  g.OH = output_size[0];
  g.OW = output_size[1];
  return g;
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, IntPair kernel_size, IntPair stride,
                                                  IntPair padding, IntPair dilation, bool ceil_mode) {
  const Pool2dGeom g = pool_geom("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode);
  return max_pool_with_indices("max_pool2d", Op::max_pool2d, x, g);
}

Tensor max_pool2d(const Tensor& x, IntPair kernel_size, IntPair stride, IntPair padding, IntPair dilation,
                  bool ceil_mode) {
  return max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode).first;
}

std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, IntPair output_size) {
  const Pool2dGeom g = adaptive_geom("adaptive_max_pool2d", x, output_size);
  return max_pool_with_indices("adaptive_max_pool2d", Op::adaptive_max_pool2d, x, g);
}

Tensor adaptive_max_pool2d(const Tensor& x, IntPair output_size) {
  return adaptive_max_pool2d_with_indices(x, output_size).first;
}

Tensor avg_pool2d(const Tensor& x, IntPair kernel_size, IntPair stride, IntPair padding, bool count_include_pad,
                  bool ceil_mode) {
  Pool2dGeom g = pool_geom("avg_pool2d", x, kernel_size, stride, padding, {1, 1}, ceil_mode);
  Tensor xc = contig(x);
  Tensor y = Tensor::empty(pooled_shape(x, g.OH, g.OW), x.dtype(), x.device());
  const auto* k = kernel<const AvgPool2dKernels>(Op::avg_pool2d, x.device());
  if (y.numel() > 0) k->forward(x.dtype(), g, count_include_pad, xc.raw_data(), y.raw_data());
  record(y, "avg_pool2d", {x},
         [k, g, count_include_pad, dt = x.dtype(), x_shape = x.shape()](
             const Tensor& gy, const std::vector<bool>&) -> std::vector<Tensor> {
           Tensor dy = grad_in(gy, dt);
           Tensor dx = grad_buffer(x_shape, dt, dy.device(), dy.numel() > 0);
           if (dy.numel() > 0) k->backward(dt, g, count_include_pad, dy.raw_data(), dx.raw_data());
           return {dx};
         });
  return y;
}

Tensor adaptive_avg_pool2d(const Tensor& x, IntPair output_size) {
  const Pool2dGeom g = adaptive_geom("adaptive_avg_pool2d", x, output_size);
  Tensor xc = contig(x);
  Tensor y = Tensor::empty(pooled_shape(x, g.OH, g.OW), x.dtype(), x.device());
  const auto* k = kernel<const AdaptiveAvgPool2dKernels>(Op::adaptive_avg_pool2d, x.device());
  if (y.numel() > 0) k->forward(x.dtype(), g, xc.raw_data(), y.raw_data());
  record(y, "adaptive_avg_pool2d", {x},
         [k, g, dt = x.dtype(), x_shape = x.shape()](const Tensor& gy,
                                                     const std::vector<bool>&) -> std::vector<Tensor> {
           Tensor dy = grad_in(gy, dt);
           Tensor dx = grad_buffer(x_shape, dt, dy.device(), dy.numel() > 0);
           if (dy.numel() > 0) k->backward(dt, g, dy.raw_data(), dx.raw_data());
           return {dx};
         });
  return y;
}

// ------------------------------------------------------------------ 1-D versions

namespace {

/// Checks of a 1-D op's input (N, C, L) or (C, L) and its window arguments, in its own
/// terms, before the 2-D op runs on x.unsqueeze(-2).
void check_1d(const char* op, const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  KILN_CHECK(x.defined(), op, ": input is an undefined tensor");
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, op, ": expected input of shape (N, C, L) or (C, L), got ",
             shape_str(x.shape()));
  KILN_CHECK(kernel > 0 && stride >= 0 && dilation > 0 && padding >= 0, op,
             ": kernel size and dilation must be positive, stride and padding non-negative, got kernel ", kernel,
             ", stride ", stride, ", padding ", padding, ", dilation ", dilation, " for input ", shape_str(x.shape()));
}

void check_pool_padding_1d(const char* op, int64_t kernel, int64_t padding) {
  KILN_CHECK(padding * 2 <= kernel, op, ": padding must be in [0, kernel/2], got padding ", padding, " for kernel ",
             kernel);
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  const char* op = "conv1d";
  KILN_CHECK(weight.defined() && weight.dim() == 3, op,
             ": expected weight of shape (out_channels, in_channels/groups, K), got ", describe(weight));
  check_1d(op, x, weight.size(2), stride, padding, dilation);
  KILN_CHECK(stride > 0, op, ": stride must be positive, got ", stride);
  return conv2d(x.unsqueeze(-2), weight.unsqueeze(-2), bias,
                {.stride = {1, stride}, .padding = {0, padding}, .dilation = {1, dilation}, .groups = groups})
      .squeeze(-2);
}

Tensor max_pool1d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                  bool ceil_mode) {
  check_1d("max_pool1d", x, kernel, stride, padding, dilation);
  check_pool_padding_1d("max_pool1d", kernel, padding);
  const IntPair s{1, stride == 0 ? kernel : stride};
  return max_pool2d(x.unsqueeze(-2), {1, kernel}, s, {0, padding}, {1, dilation}, ceil_mode).squeeze(-2);
}

Tensor avg_pool1d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding, bool count_include_pad,
                  bool ceil_mode) {
  check_1d("avg_pool1d", x, kernel, stride, padding, 1);
  check_pool_padding_1d("avg_pool1d", kernel, padding);
  const IntPair s{1, stride == 0 ? kernel : stride};
  return avg_pool2d(x.unsqueeze(-2), {1, kernel}, s, {0, padding}, count_include_pad, ceil_mode).squeeze(-2);
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size) {
  check_1d("adaptive_avg_pool1d", x, 1, 0, 0, 1);
  return adaptive_avg_pool2d(x.unsqueeze(-2), {1, output_size}).squeeze(-2);
}

Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size) {
  check_1d("adaptive_max_pool1d", x, 1, 0, 0, 1);
  return adaptive_max_pool2d(x.unsqueeze(-2), {1, output_size}).squeeze(-2);
}


// ---------------------------------------------------------------- conv_transpose1d, unpooling, 3-D

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  KILN_CHECK(weight.defined() && weight.dim() == 3, "conv_transpose1d: expected weight of shape (in_channels, "
             "out_channels/groups, K), got ", weight.defined() ? describe(weight) : "undefined");
  KILN_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3), "conv_transpose1d: expected x (N, C, L) or (C, L), got ",
             x.defined() ? describe(x) : "undefined");
  return conv_transpose2d(x.unsqueeze(-2), weight.unsqueeze(-2), bias,
                          {.stride = {1, stride}, .padding = {0, padding}, .output_padding = {0, output_padding},
                           .dilation = {1, dilation}, .groups = groups})
      .squeeze(-2);
}

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, IntPair output_size) {
  const char* op = "max_unpool2d";
  KILN_CHECK(x.defined() && indices.defined() && (x.dim() == 3 || x.dim() == 4) && indices.shape() == x.shape(), op,
             ": expected x (N, C, H, W) or (C, H, W) and int64 indices of its shape, got ",
             x.defined() ? describe(x) : "undefined", " and ", indices.defined() ? describe(indices) : "undefined");
  if (x.dim() == 3) return max_unpool2d(x.unsqueeze(0), indices.unsqueeze(0), output_size).squeeze(0);
  KILN_CHECK(output_size[0] > 0 && output_size[1] > 0, op, ": output_size must be positive, got (", output_size[0],
             ", ", output_size[1], ")");
  const int64_t N = x.size(0), C = x.size(1), P = output_size[0] * output_size[1];
  const Tensor plane = scatter(zeros({N, C, P}, {.dtype = x.dtype(), .device = x.device()}), 2,
                               indices.reshape({N, C, x.size(2) * x.size(3)}), x.reshape({N, C, x.size(2) * x.size(3)}));
  return plane.reshape({N, C, output_size[0], output_size[1]});
}

Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t output_size) {
  KILN_CHECK(x.defined() && indices.defined() && (x.dim() == 2 || x.dim() == 3),
             "max_unpool1d: expected x (N, C, L) or (C, L), got ", x.defined() ? describe(x) : "undefined");
  return max_unpool2d(x.unsqueeze(-2), indices.unsqueeze(-2), {1, output_size}).squeeze(-2);
}

namespace {

/// The depth geometry of a 3-D op: x padded along D (value `fill`), the output depth, and the
/// depth slices read by tap kd folded into the batch: (N Do, C, H, W).
struct DepthFold {
  Tensor xp;
  int64_t N = 0, C = 0, Do = 0;
  int64_t stride = 1, dilation = 1;
  Tensor tap(int64_t kd) const {
    const Tensor s = xp.slice(2, kd * dilation, kd * dilation + (Do - 1) * stride + 1, stride);  // (N, C, Do, H, W)
    return s.permute({0, 2, 1, 3, 4}).reshape({N * Do, C, xp.size(3), xp.size(4)});
  }
  Tensor unfold(const Tensor& y) const {  // (N Do, O, Ho, Wo) -> (N, O, Do, Ho, Wo)
    return y.reshape({N, Do, y.size(1), y.size(2), y.size(3)}).permute({0, 2, 1, 3, 4});
  }
};

DepthFold depth_fold(const char* op, const Tensor& x, int64_t k, int64_t stride, int64_t padding, int64_t dilation,
                     double fill) {
  KILN_CHECK(k > 0 && stride > 0 && dilation > 0 && padding >= 0, op, ": depth kernel, stride and dilation must be "
             "positive and padding >= 0, got ", k, ", ", stride, ", ", dilation, ", ", padding);
  DepthFold f;
  f.N = x.size(0);
  f.C = x.size(1);
  f.stride = stride;
  f.dilation = dilation;
  f.xp = padding > 0 ? pad(x, {0, 0, 0, 0, padding, padding}, fill) : x;
  const int64_t span = dilation * (k - 1) + 1;
  KILN_CHECK(f.xp.size(2) >= span, op, ": the depth kernel (", span, " with dilation) is larger than the padded depth ",
             f.xp.size(2), " of input ", describe(x));
  f.Do = (f.xp.size(2) - span) / stride + 1;
  return f;
}

void check_5d(const char* op, const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() == 5, op, ": expected x (N, C, D, H, W) or (C, D, H, W), got ",
             x.defined() ? describe(x) : "undefined");
}

}  // namespace

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv3dArgs a) {
  const char* op = "conv3d";
  KILN_CHECK(weight.defined() && weight.dim() == 5, op, ": expected weight (O, C/groups, kD, kH, kW), got ",
             weight.defined() ? describe(weight) : "undefined");
  if (x.defined() && x.dim() == 4) return conv3d(x.unsqueeze(0), weight, bias, a).squeeze(0);
  check_5d(op, x);
  KILN_CHECK(x.size(1) == weight.size(1) * a.groups, op, ": input ", describe(x), " has ", x.size(1),
             " channels but weight ", describe(weight), " with groups=", a.groups, " expects ",
             weight.size(1) * a.groups);
  const DepthFold f = depth_fold(op, x, weight.size(2), a.stride[0], a.padding[0], a.dilation[0], 0.0);
  Tensor acc;
  for (int64_t kd = 0; kd < weight.size(2); ++kd) {
    const Tensor y = conv2d(f.tap(kd), weight.select(2, kd), Tensor(),
                            {.stride = {a.stride[1], a.stride[2]}, .padding = {a.padding[1], a.padding[2]},
                             .dilation = {a.dilation[1], a.dilation[2]}, .groups = a.groups});
    acc = kd == 0 ? y : add(acc, y);
  }
  Tensor out = f.unfold(acc);
  if (bias.defined()) out = add(out, bias.reshape({bias.numel(), 1, 1, 1}));
  return out.contiguous();
}

Tensor max_pool3d(const Tensor& x, IntTriple kernel, IntTriple stride, IntTriple padding, IntTriple dilation) {
  const char* op = "max_pool3d";
  if (x.defined() && x.dim() == 4) return max_pool3d(x.unsqueeze(0), kernel, stride, padding, dilation).squeeze(0);
  check_5d(op, x);
  for (int e = 0; e < 3; ++e) {
    if (stride[size_t(e)] == 0) stride[size_t(e)] = kernel[size_t(e)];
    KILN_CHECK(kernel[size_t(e)] > 0 && padding[size_t(e)] <= kernel[size_t(e)] / 2, op, ": kernel must be positive "
               "and padding at most kernel / 2, got kernel ", kernel[size_t(e)], " and padding ", padding[size_t(e)]);
  }
  const DepthFold f = depth_fold(op, x, kernel[0], stride[0], padding[0], dilation[0], -INFINITY);
  std::vector<Tensor> taps;
  for (int64_t kd = 0; kd < kernel[0]; ++kd)
    taps.push_back(max_pool2d(f.tap(kd), {kernel[1], kernel[2]}, {stride[1], stride[2]}, {padding[1], padding[2]},
                              {dilation[1], dilation[2]}));
  // the first tap holding the maximum (NaN counts as the maximum, as max_pool2d's)
  return f.unfold(max(stack(taps, 0), 0).values).contiguous();
}

Tensor avg_pool3d(const Tensor& x, IntTriple kernel, IntTriple stride, IntTriple padding, bool count_include_pad) {
  const char* op = "avg_pool3d";
  if (x.defined() && x.dim() == 4) return avg_pool3d(x.unsqueeze(0), kernel, stride, padding, count_include_pad).squeeze(0);
  check_5d(op, x);
  for (int e = 0; e < 3; ++e) {
    if (stride[size_t(e)] == 0) stride[size_t(e)] = kernel[size_t(e)];
    KILN_CHECK(kernel[size_t(e)] > 0 && padding[size_t(e)] <= kernel[size_t(e)] / 2, op, ": kernel must be positive "
               "and padding at most kernel / 2, got kernel ", kernel[size_t(e)], " and padding ", padding[size_t(e)]);
  }
  // window sums: each tap's 2-D mean (padded zeros counted) times kH kW, summed over the taps
  auto window_sum = [&](const Tensor& t) {
    const DepthFold f = depth_fold(op, t, kernel[0], stride[0], padding[0], 1, 0.0);
    Tensor acc;
    for (int64_t kd = 0; kd < kernel[0]; ++kd) {
      const Tensor y = avg_pool2d(f.tap(kd), {kernel[1], kernel[2]}, {stride[1], stride[2]}, {padding[1], padding[2]}, true);
      acc = kd == 0 ? y : add(acc, y);
    }
    return f.unfold(mul(acc, double(kernel[1] * kernel[2])));
  };
  const Tensor s = window_sum(x);
  if (count_include_pad) return div(s, double(kernel[0] * kernel[1] * kernel[2])).contiguous();
  // the count of real entries in each window: the same sums over ones
  Tensor cnt;
  {
    NoGradGuard ng;
    cnt = window_sum(ones({1, 1, x.size(2), x.size(3), x.size(4)}, {.dtype = x.dtype(), .device = x.device()}));
  }
  return div(s, cnt).contiguous();
}

Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, ConvTranspose3dArgs a) {
  const char* op = "conv_transpose3d";
  KILN_CHECK(weight.defined() && weight.dim() == 5, op, ": expected weight (Cin, Cout/groups, kD, kH, kW), got ",
             weight.defined() ? describe(weight) : "undefined");
  if (x.defined() && x.dim() == 4) return conv_transpose3d(x.unsqueeze(0), weight, bias, a).squeeze(0);
  check_5d(op, x);
  KILN_CHECK(x.size(1) == weight.size(0), op, ": input ", describe(x), " has ", x.size(1), " channels but weight ",
             describe(weight), " expects ", weight.size(0));
  const int64_t sd = a.stride[0], dd = a.dilation[0], pd = a.padding[0], od = a.output_padding[0];
  KILN_CHECK(sd > 0 && dd > 0 && pd >= 0 && od >= 0 && (od < sd || od < dd), op, ": depth stride and dilation must be "
             "positive, padding >= 0 and output_padding smaller than the stride or the dilation, got stride ", sd,
             ", dilation ", dd, ", padding ", pd, ", output_padding ", od);
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), kD = weight.size(2);
  const int64_t full = (D - 1) * sd + dd * (kD - 1) + 1 + od, Dout = full - 2 * pd;
  KILN_CHECK(Dout > 0, op, ": the output depth (", D - 1, " * ", sd, " - 2 * ", pd, " + ", dd, " * ", kD - 1, " + ", od,
             " + 1) is not positive for input ", describe(x));
  const TensorOptions o{.dtype = x.dtype(), .device = x.device()};
  const Tensor xf = x.permute({0, 2, 1, 3, 4}).reshape({N * D, C, x.size(3), x.size(4)});
  Tensor acc;
  for (int64_t kd = 0; kd < kD; ++kd) {
    const Tensor y = conv_transpose2d(xf, weight.select(2, kd), Tensor(),
                                      {.stride = {a.stride[1], a.stride[2]}, .padding = {a.padding[1], a.padding[2]},
                                       .output_padding = {a.output_padding[1], a.output_padding[2]},
                                       .dilation = {a.dilation[1], a.dilation[2]}, .groups = a.groups});
    const int64_t O = y.size(1), Ho = y.size(2), Wo = y.size(3);
    Tensor yd = y.reshape({N, D, O, Ho, Wo});
    if (sd > 1)  // the depth slices sd apart: each followed by sd - 1 zero slices
      yd = cat({yd.unsqueeze(2), zeros({N, D, sd - 1, O, Ho, Wo}, o)}, 2).reshape({N, D * sd, O, Ho, Wo}).narrow(1, 0, (D - 1) * sd + 1);
    // at depth kd * dilation of the full (unpadded) output
    const int64_t before = kd * dd, after = full - before - yd.size(1);
    std::vector<Tensor> parts;
    if (before > 0) parts.push_back(zeros({N, before, O, Ho, Wo}, o));
    parts.push_back(yd);
    if (after > 0) parts.push_back(zeros({N, after, O, Ho, Wo}, o));
    yd = parts.size() == 1 ? yd : cat(parts, 1);
    acc = kd == 0 ? yd : add(acc, yd);
  }
  Tensor out = acc.narrow(1, pd, Dout).permute({0, 2, 1, 3, 4});
  if (bias.defined()) out = add(out, bias.reshape({bias.numel(), 1, 1, 1}));
  return out.contiguous();
}

namespace {
// The 2-D adaptive op on every depth slice, then the 1-D one over depth.
template <class Pool2d, class Pool1d>
Tensor adaptive_3d(const char* op, const Tensor& x, IntTriple out, Pool2d pool2d, Pool1d pool1d) {
  check_5d(op, x);
  KILN_CHECK(out[0] > 0 && out[1] > 0 && out[2] > 0, op, ": output_size must be positive, got (", out[0], ", ", out[1],
             ", ", out[2], ")");
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2);
  const Tensor planes = pool2d(x.permute({0, 2, 1, 3, 4}).reshape({N * D, C, x.size(3), x.size(4)}));  // (N D, C, Ho, Wo)
  const int64_t Ho = planes.size(2), Wo = planes.size(3);
  const Tensor depth_last = planes.reshape({N, D, C, Ho, Wo}).permute({0, 2, 3, 4, 1}).reshape({N, C * Ho * Wo, D});
  return pool1d(depth_last).reshape({N, C, Ho, Wo, out[0]}).permute({0, 1, 4, 2, 3}).contiguous();
}
}  // namespace

Tensor adaptive_avg_pool3d(const Tensor& x, IntTriple out) {
  if (x.defined() && x.dim() == 4) return adaptive_avg_pool3d(x.unsqueeze(0), out).squeeze(0);
  return adaptive_3d("adaptive_avg_pool3d", x, out,
                     [&](const Tensor& t) { return adaptive_avg_pool2d(t, {out[1], out[2]}); },
                     [&](const Tensor& t) { return adaptive_avg_pool1d(t, out[0]); });
}

Tensor adaptive_max_pool3d(const Tensor& x, IntTriple out) {
  if (x.defined() && x.dim() == 4) return adaptive_max_pool3d(x.unsqueeze(0), out).squeeze(0);
  return adaptive_3d("adaptive_max_pool3d", x, out,
                     [&](const Tensor& t) { return adaptive_max_pool2d(t, {out[1], out[2]}); },
                     [&](const Tensor& t) { return adaptive_max_pool1d(t, out[0]); });
}

namespace {
// PyTorch's tail of lp_pool: (sign(out) * relu(|out|)) * window, to the 1/p.
Tensor lp_finish(const Tensor& out, double p, int64_t window) {
  return pow(mul(mul(sign(out), relu(abs(out))), double(window)), 1.0 / p);
}
void check_norm_type(const char* op, double p) {
  KILN_CHECK(std::isfinite(p) && p != 0, op, ": norm_type must be finite and nonzero, got ", p);
}
}  // namespace

Tensor lp_pool1d(const Tensor& x, double p, int64_t kernel, int64_t stride, bool ceil_mode) {
  check_norm_type("lp_pool1d", p);
  return lp_finish(avg_pool1d(pow(x, p), kernel, stride, 0, true, ceil_mode), p, kernel);
}

Tensor lp_pool2d(const Tensor& x, double p, IntPair kernel, IntPair stride, bool ceil_mode) {
  check_norm_type("lp_pool2d", p);
  return lp_finish(avg_pool2d(pow(x, p), kernel, stride, {0, 0}, true, ceil_mode), p, kernel[0] * kernel[1]);
}

}  // namespace kiln
