// Tests of gradient hooks: Tensor::register_hook (on the gradient, before it is used;
// leaves get their gradient summed over all uses) and register_post_accumulate_grad_hook
// (once per backward, after the leaf's .grad holds all of it), as data-parallel training
// uses them.
#include <doctest/doctest.h>
#include <vector>
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using kiln::test::error_of;

TEST_CASE("register_hook on a non-leaf sees its gradient and may replace it") {
  Tensor x = from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return mul(g, 10.0);
  });
  sum(mul(y, 3.0)).backward();
  CHECK(seen == std::vector<double>{3, 3});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{60, 60});  // 3 * 10 * 2
}

TEST_CASE("a leaf's hooks run once per backward with the gradient summed over its uses") {
  Tensor w = from_vector(std::vector<double>{1, 2, 3}, {3}).requires_grad_();
  Tensor a = from_vector(std::vector<double>{1, 1, 1}, {3}), b = from_vector(std::vector<double>{2, 2, 2}, {3});
  int grad_calls = 0, post_calls = 0;
  std::vector<double> in_hook, after;
  w.register_hook([&](const Tensor& g) {
    ++grad_calls;
    in_hook = g.to_vector<double>();
    return Tensor();  // keep it
  });
  const int64_t post = w.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++post_calls;
    after = leaf.grad().to_vector<double>();
  });
  sum(add(mul(w, a), mul(w, b))).backward();  // two edges into w
  CHECK(grad_calls == 1);
  CHECK(post_calls == 1);
  CHECK(in_hook == std::vector<double>{3, 3, 3});
  CHECK(after == std::vector<double>{3, 3, 3});
  sum(mul(w, a)).backward();  // accumulates: the post hook sees the running sum
  CHECK(post_calls == 2);
  CHECK(after == std::vector<double>{4, 4, 4});
  w.remove_hook(post);
  sum(mul(w, a)).backward();
  CHECK(post_calls == 2);
  CHECK(grad_calls == 3);
}

TEST_CASE("a leaf that is a root and is also reached from another root: its hooks run once, on the sum") {
  Tensor x = from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  int grad_calls = 0, post_calls = 0;
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    ++grad_calls;
    seen = g.to_vector<double>();
    return Tensor();
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { ++post_calls; });
  const Tensor ones2 = ones({2}, {.dtype = DType::float64});
  run_backward({x, mul(x, 3.0)}, {ones2, ones2}, false);  // each hook ran twice, with 1 and with 3
  CHECK(grad_calls == 1);
  CHECK(post_calls == 1);
  CHECK(seen == std::vector<double>{4, 4});
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 4});
  // a leaf given twice as a root: one call with both seeds
  run_backward({x, x}, {ones2, ones2}, false);
  CHECK(grad_calls == 2);
  CHECK(seen == std::vector<double>{2, 2});
}

TEST_CASE("post-accumulate hooks of a network's parameters fire last layer first") {
  manual_seed(0);
  nn::Linear first(4, 8), second(8, 2);
  std::vector<std::string> order;
  for (auto [name, p] : std::vector<std::pair<std::string, Tensor>>{{"first.weight", first.parameters()[0]},
                                                                    {"second.weight", second.parameters()[0]}})
    p.register_post_accumulate_grad_hook([&order, name = name](const Tensor&) { order.push_back(name); });
  sum(second(relu(first(randn({3, 4}))))).backward();
  CHECK(order == std::vector<std::string>{"second.weight", "first.weight"});
}

TEST_CASE("hook errors") {
  Tensor plain = ones({2});
  CHECK(error_of([&] { plain.register_hook([](const Tensor& g) { return g; }); }).find("does not require grad") !=
        std::string::npos);
  Tensor x = ones({2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  CHECK(error_of([&] { y.register_post_accumulate_grad_hook([](const Tensor&) {}); }).find("non-leaf") !=
        std::string::npos);
  y.register_hook([](const Tensor&) { return ones({3}); });
  CHECK(error_of([&] { sum(y).backward(); }).find("expected the same shape") != std::string::npos);
}
