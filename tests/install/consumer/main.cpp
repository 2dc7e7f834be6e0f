// Consumer of the installed kiln package: y = relu(x) * 2, sum, backward; a float64
// gradient check from kiln/testing.h; and kiln::dist (a one-process group here:
// all_reduce is the identity).
#include <kiln/kiln.h>
#include <kiln/testing.h>
#include <kiln/dist/dist.h>
#include <iostream>

int main() {
  kiln::Tensor x = kiln::from_vector<float>({-1.f, 2.f, 3.f}, {3});
  x.requires_grad_();
  kiln::Tensor y = kiln::sum(kiln::relu(x) * 2.0);
  y.backward();
  auto g = x.grad().to_vector<float>();
  kiln::dist::init();
  kiln::Tensor s = y.detach().clone();
  kiln::dist::all_reduce(s, kiln::dist::ReduceOp::sum);
  // the installed gradient check, without any test framework
  const std::string report = kiln::testing::gradcheck_report(
      [](std::vector<kiln::Tensor>& in) { return kiln::tanh(in[0]); }, {kiln::randn({3, 4})});
  if (!report.empty()) std::cout << report;
  bool ok = report.empty() && y.item() == 10.0 && g[0] == 0.f && g[1] == 2.f && g[2] == 2.f && s.item() == 10.0 * kiln::dist::world_size();
  std::cout << (ok ? "consumer ok" : "consumer WRONG") << "\n";
  return ok ? 0 : 1;
}
