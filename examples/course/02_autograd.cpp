// Course chapter 2 (docs/course/02-autograd.md): the tape. Each op that involves a tensor
// needing a gradient records a node; backward() visits the nodes in reverse topological
// order and applies the chain rule. Here a one-neuron model's gradient is worked out by
// hand and compared with the engine's, then the recorded graph is printed.
#include <cmath>
#include <cstdio>
#include <set>
#include <vector>
#include <kiln/kiln.h>

using kiln::Tensor;

// Prints the graph below `node`, depth first (each node once).
static void print_graph(const std::shared_ptr<kiln::Node>& node, int depth, std::set<kiln::Node*>& seen) {
  std::printf("%*s%s%s\n", 2 * depth, "", node->name.c_str(), seen.count(node.get()) ? " (again)" : "");
  if (!seen.insert(node.get()).second) return;
  for (const kiln::Edge& e : node->next) {
    if (e.node) print_graph(e.node, depth + 1, seen);
    else if (e.leaf) std::printf("%*sleaf of shape %s\n", 2 * depth + 2, "", kiln::shape_str(e.leaf->shape).c_str());
  }
}

int main() {
  kiln::manual_seed(0);
  // loss = mean((tanh(x w + b) - y)^2), x (4, 3), w (3), b a scalar
  Tensor x = kiln::randn({4, 3}, {.dtype = kiln::DType::float64}), y = kiln::randn({4}, {.dtype = kiln::DType::float64});
  Tensor w = kiln::randn({3}, {.dtype = kiln::DType::float64}).requires_grad_();
  Tensor b = kiln::zeros({}, {.dtype = kiln::DType::float64}).requires_grad_();
  Tensor z = kiln::add(kiln::matmul(x, w), b);  // (4)
  Tensor h = kiln::tanh(z);
  Tensor loss = kiln::mean(kiln::mul(kiln::sub(h, y), kiln::sub(h, y)));
  std::printf("loss = %.12f\n\nthe graph, from the loss down to the leaves:\n", loss.item());
  std::set<kiln::Node*> seen;
  print_graph(loss.grad_fn(), 0, seen);
  loss.backward();

  // By hand: dloss/dh_i = 2 (h_i - y_i) / 4, dh/dz = 1 - h^2, dz_i/dw = x_i, dz_i/db = 1.
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>(), hv = h.detach().to_vector<double>();
  std::vector<double> gw(3, 0.0);
  double gb = 0;
  for (int i = 0; i < 4; ++i) {
    const double dz = 2.0 * (hv[size_t(i)] - yv[size_t(i)]) / 4.0 * (1.0 - hv[size_t(i)] * hv[size_t(i)]);
    for (int j = 0; j < 3; ++j) gw[size_t(j)] += dz * xv[size_t(i * 3 + j)];
    gb += dz;
  }
  const std::vector<double> ew = w.grad().to_vector<double>();
  std::printf("\n%-6s %22s %22s\n", "", "by hand", "engine");
  double worst = std::fabs(gb - b.grad().item());
  for (int j = 0; j < 3; ++j) {
    std::printf("dw[%d]  %22.17f %22.17f\n", j, gw[size_t(j)], ew[size_t(j)]);
    worst = std::max(worst, std::fabs(gw[size_t(j)] - ew[size_t(j)]));
  }
  std::printf("db     %22.17f %22.17f\nlargest difference %.3g\n", gb, b.grad().item(), worst);

  // The graph is freed by backward: a second backward needs retain_graph.
  try {
    loss.backward();
  } catch (const kiln::Error& e) {
    std::printf("\na second backward: %s\n", e.what());
  }
  // No graph under NoGradGuard (evaluation, optimizer updates).
  kiln::NoGradGuard ng;
  std::printf("under NoGradGuard, tanh(x w) records %s\n", kiln::tanh(kiln::matmul(x, w)).grad_fn() ? "a node" : "nothing");
  return worst < 1e-12 ? 0 : 1;
}
