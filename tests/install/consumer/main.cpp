// Consumer of the installed kiln package: y = relu(x) * 2, sum, backward.
#include <kiln/kiln.h>
#include <iostream>

int main() {
  kiln::Tensor x = kiln::from_vector<float>({-1.f, 2.f, 3.f}, {3});
  x.requires_grad_();
  kiln::Tensor y = kiln::sum(kiln::relu(x) * 2.0);
  y.backward();
  auto g = x.grad().to_vector<float>();
  bool ok = y.item() == 10.0 && g[0] == 0.f && g[1] == 2.f && g[2] == 2.f;
  std::cout << (ok ? "consumer ok" : "consumer WRONG") << "\n";
  return ok ? 0 : 1;
}
