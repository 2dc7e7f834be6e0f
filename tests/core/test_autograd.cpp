// Tests of the autograd tape: accumulation, retain_graph, deep graphs, NoGradGuard,
// detach, custom Functions, and the errors for misuse (saved tensors changed in place).
#include <doctest/doctest.h>
#include "gradcheck.h"

using namespace kiln;
using kiln::test::T;

TEST_CASE("gradients of a small expression and accumulation across backward calls") {
  Tensor x = T({1, 2, 3}, {3}).requires_grad_();
  Tensor y = sum(x * x * 3.0);  // dy/dx = 6x
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6, 12, 18});
  sum(x * 2.0).backward();  // accumulates: + 2
  CHECK(x.grad().to_vector<double>() == std::vector<double>{8, 14, 20});
  x.set_grad(Tensor());
  CHECK(!x.grad().defined());
  // a tensor used on two paths receives the sum of both gradients
  Tensor a = T({2}, {1}).requires_grad_();
  Tensor b = a * 3.0;
  Tensor c = b * b + b;  // dc/da = (2b + 1) * 3 = 39
  c.backward(ones({1}, test::f64));
  CHECK(a.grad().item() == doctest::Approx(39.0));
}

TEST_CASE("explicit gradient, retain_graph, and backward twice without it") {
  Tensor x = T({1, 2}, {2}).requires_grad_();
  Tensor y = x * x;
  y.backward(T({1, 10}, {2}), /*retain_graph=*/true);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 40});
  y.backward(T({1, 1}, {2}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 44});
  try {
    y.backward(T({1, 1}, {2}));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("second time") != std::string::npos);
  }
  CHECK_THROWS_AS(y.backward(), Error);                        // not a scalar
  CHECK_THROWS_AS((x * 2.0).backward(T({1, 2, 3}, {3})), Error);  // wrong grad shape
}

TEST_CASE("backward on a tensor that needs no grad is an error") {
  Tensor x = T({1, 2}, {2});
  try {
    sum(x).backward();
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("does not require grad") != std::string::npos);
  }
}

TEST_CASE("a graph 100,000 nodes deep backpropagates and frees without recursion") {
  Tensor x = T({0.5}, {1}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y * 1.0;
  y = y * 2.0;
  sum(y).backward();
  CHECK(x.grad().item() == doctest::Approx(2.0));
  // the same chain freed without a backward (destructor path)
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = z + 0.0;
  z = Tensor();
  CHECK(true);
}

TEST_CASE("NoGradGuard and detach cut the graph") {
  Tensor x = T({1, 2}, {2}).requires_grad_();
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    CHECK(!y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  Tensor y = x * 2.0;
  CHECK(y.requires_grad());
  CHECK(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name == "mul");
  Tensor d = y.detach();
  CHECK(!d.requires_grad());
  CHECK(d.storage() == y.storage());
  Tensor z = sum(d * x);  // gradient only through x
  z.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4});
  // in-place on a tensor that requires grad is refused outside NoGradGuard
  CHECK_THROWS_AS(x.fill_(0), Error);
  CHECK_THROWS_AS(x.add_(x), Error);
  {
    NoGradGuard g;
    x.mul_(2.0);
  }
  CHECK(x.at({1}) == 4.0);
}

namespace {
struct Cube : Function {
  Tensor forward(const std::vector<Tensor>& in) override {
    save_for_backward({in[0]});
    return in[0] * in[0] * in[0];
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor x = saved()[0];
    return {g * x * x * 3.0};
  }
  std::string name() const override { return "Cube"; }
};
struct ScaleBy : Function {  // y = a * b, where only some inputs need grad
  Tensor forward(const std::vector<Tensor>& in) override {
    save_for_backward(in);
    return in[0] * in[1];
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    return {needs_input_grad(0) ? g * saved()[1] : Tensor(), needs_input_grad(1) ? g * saved()[0] : Tensor()};
  }
};
}  // namespace

TEST_CASE("custom Function: forward runs without a graph, backward is the user's") {
  Tensor x = T({1, 2, 3}, {3}).requires_grad_();
  Tensor y = Function::apply(std::make_shared<Cube>(), {x});
  CHECK(y.grad_fn()->name == "Cube");
  CHECK(y.to_vector<double>() == std::vector<double>{1, 8, 27});
  sum(y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 12, 27});
  CHECK(test::gradcheck([](std::vector<Tensor>& in) { return Function::apply(std::make_shared<Cube>(), {in[0]}); },
                        {randn({4}, test::f64)}));
  Tensor a = T({2, 3}, {2}).requires_grad_();
  Tensor b = T({5, 7}, {2});
  sum(Function::apply(std::make_shared<ScaleBy>(), {a, b})).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{5, 7});
}

TEST_CASE("gradients flow through views and conversions") {
  CHECK(test::gradcheck([](auto& in) { return in[0].transpose(0, 1).reshape({6}) * 2.0; }, {randn({2, 3}, test::f64)}));
  CHECK(test::gradcheck([](auto& in) { return in[0].narrow(1, 1, 2) * in[0].select(0, 1).unsqueeze(0).narrow(1, 0, 2); },
                        {randn({3, 4}, test::f64)}));
  CHECK(test::gradcheck([](auto& in) { return in[0].unsqueeze(0).expand({3, 2, 4}) * 1.5; }, {randn({2, 4}, test::f64)}));
  CHECK(test::gradcheck([](auto& in) { return in[0].permute({2, 0, 1}).flatten(0, 1).slice(0, 1, 7, 2); },
                        {randn({2, 3, 4}, test::f64)}));
  CHECK(test::gradcheck([](auto& in) { return in[0].squeeze().contiguous().clone(); }, {randn({1, 3, 1}, test::f64)}));
  // float32 round trip: gradient comes back as float64
  Tensor x = randn({3}, test::f64).requires_grad_();
  sum(x.to(DType::float32) * 2.0).backward();
  CHECK(x.grad().dtype() == DType::float64);
  CHECK(x.grad().at({0}) == 2.0);
}

TEST_CASE("a tensor saved for backward and then changed in place is an error naming the op") {
  Tensor w = T({1, 1, 1}, {3}).requires_grad_();
  Tensor x = T({1, 2, 3}, {3});
  Tensor y = sum(w * x);  // mul saves x for dy/dw
  x.fill_(100.0);         // used to give w.grad = [100, 100, 100] instead of [1, 2, 3]
  std::string e = test::error_of([&] { y.backward(); });
  CHECK(e.find("mul backward: a tensor of shape [3] saved by mul for the backward was modified in place "
               "(version 1, saved at version 0)") != std::string::npos);
  CHECK(!w.grad().defined());  // nothing was accumulated
  // the same through Function::save_for_backward
  Tensor a = T({2, 3}, {2}).requires_grad_();
  Tensor b = T({5, 7}, {2});
  Tensor z = sum(Function::apply(std::make_shared<ScaleBy>(), {a, b}));
  b.mul_(2.0);
  CHECK(test::error_of([&] { z.backward(); }).find("Function backward: a tensor of shape [2]") != std::string::npos);
}

TEST_CASE("views and detach share the version counter") {
  Tensor x = zeros({2, 3}, test::f64);
  Tensor row = x.select(0, 1), d = x.detach();
  CHECK(x.version() == 0);
  row.fill_(1.0);
  CHECK(x.version() == 1);
  d.add_(ones({3}, test::f64));
  x.t().copy_(zeros({3, 2}, test::f64));
  x.narrow(1, 0, 2).mul_(3.0);
  CHECK(x.version() == 4);
  CHECK(row.version() == 4);
  CHECK(x.clone().version() == 0);  // a copy has its own counter
  // changing a saved tensor through a view is caught
  Tensor w = T({1, 2}, {2}).requires_grad_();
  Tensor y = sum(w * x.select(0, 0).narrow(0, 0, 2));
  x.select(0, 0).fill_(5.0);
  CHECK(test::error_of([&] { y.backward(); }).find("modified in place") != std::string::npos);
}

TEST_CASE("in-place changes that no backward reads are fine") {
  Tensor w = T({1, 1, 1}, {3}).requires_grad_();
  Tensor x = T({1, 2, 3}, {3});
  Tensor y = sum(w * x);
  T({0, 0, 0}, {3}).fill_(7.0);  // another tensor
  y.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
  Tensor s = sum(w + x);  // add saves nothing: x may change (as in PyTorch)
  x.fill_(4.0);
  s.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 3, 4});
}

TEST_CASE("an optimizer step after backward is fine; a retained graph backpropagated after it is an error") {
  for (const std::string which : {"sgd", "adam"}) {
    CAPTURE(which);
    Tensor w = T({1, 2, 3}, {3}).requires_grad_();
    std::unique_ptr<optim::Optimizer> opt;
    if (which == "sgd") opt = std::make_unique<optim::SGD>(std::vector<Tensor>{w}, optim::SGDOptions{.lr = 0.1});
    else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{w}, optim::AdamOptions{.lr = 0.1});
    for (int step = 0; step < 2; ++step) {  // the usual loop: the released graph saved w
      Tensor loss = sum(w * w);
      loss.backward();
      opt->step();
      opt->zero_grad();
    }
    Tensor loss = sum(w * w);
    loss.backward({}, /*retain_graph=*/true);
    opt->step();  // changes w, which the retained graph saved
    CHECK(test::error_of([&] { loss.backward(); }).find("mul backward") != std::string::npos);
  }
}

TEST_CASE("a gradient given to backward() is converted to the tensor's dtype; one per tensor") {
  // log_softmax's kernel reads the gradient as the output's type: a float32 gradient on a
  // float64 output used to be read as float64 (wrong values, no error)
  Tensor x = T({0.5, -1.0, 2.0, 0.25}, {1, 4}).requires_grad_();
  Tensor y = log_softmax(x, 1);
  Tensor g64 = T({1, -2, 0.5, 3}, {1, 4});
  Tensor want = kiln::grad({y}, {x}, {g64}, {.retain_graph = true})[0];
  y.backward(g64.to(DType::float32), true);
  CHECK(x.grad().dtype() == DType::float64);
  CHECK(test::max_abs_diff(x.grad(), want) < 1e-12);
  Tensor gi = kiln::grad({y}, {x}, {from_vector<int64_t>({1, -2, 0, 3}, {1, 4})})[0];  // an integer gradient too
  CHECK(test::max_abs_diff(gi, kiln::grad({log_softmax(x, 1)}, {x}, {T({1, -2, 0, 3}, {1, 4})})[0]) < 1e-12);
  // fewer gradients than tensors: an error (was an out-of-bounds read)
  Tensor a = T({1}, {1}).requires_grad_(), b = T({2}, {1}).requires_grad_();
  CHECK(test::error_of([&] { run_backward({a * 2.0, b * 3.0}, {Tensor()}, false); }).find("2 tensors but 1 gradients") !=
        std::string::npos);
}

TEST_CASE("grad() runs only the part of the graph above its inputs") {
  Tensor w = T({1, 2, 3}, {3}).requires_grad_();
  Tensor h = w * w;                  // an intermediate input
  Tensor other = T({4}, {1}).requires_grad_();
  Tensor side = other * other;       // a branch that does not lead to h
  int below = 0, beside = 0;
  h.register_hook([&](const Tensor& g) { return g; });
  w.register_hook([&](const Tensor& g) { ++below; return g; });
  other.register_hook([&](const Tensor& g) { ++beside; return g; });
  Tensor loss = sum(h * 3.0) + sum(side);
  Tensor gh = kiln::grad({loss}, {h})[0];
  CHECK(gh.to_vector<double>() == std::vector<double>{3, 3, 3});
  CHECK(below == 0);   // h's own backward (down to w) did not run
  CHECK(beside == 0);  // nor did the unrelated branch
  // and the graph below h is still there: a backward through it works (it was freed before)
  sum(h).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  CHECK(below == 1);
  // an in-place change on a branch grad() does not need is no error
  Tensor u = T({1, 2}, {2}).requires_grad_();
  Tensor v = T({5, 6}, {2}).requires_grad_();
  Tensor z = sum(u * u) + sum(v * v);
  {
    NoGradGuard ng;
    v.add_(ones({2}, test::f64));  // saved by v * v, which grad() does not need
  }
  CHECK(kiln::grad({z}, {u}, {}, {.retain_graph = true})[0].to_vector<double>() == std::vector<double>{2, 4});
  CHECK(test::error_of([&] { kiln::grad({z}, {v}); }).find("modified in place") !=
        std::string::npos);  // where it is needed, still an error
}

TEST_CASE("mul and div keep only what their gradients read; set_grad converts the dtype") {
  Tensor p = T({1, 2}, {2}).requires_grad_();
  Tensor h = p * 3.0;
  Tensor y = (h * 2.0) / 4.0;  // neither reads h in its backward
  {
    NoGradGuard ng;
    h.add_(ones({2}, test::f64));  // used to make the backward fail: "modified in place"
  }
  sum(y).backward();
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1.5, 1.5});
  // where the other operand needs a gradient, the changed tensor is still refused
  Tensor w = T({5}, {1}).requires_grad_();
  Tensor x = p * 1.0;
  Tensor z = sum(x * w);
  {
    NoGradGuard ng;
    x.add_(ones({2}, test::f64));
  }
  CHECK(test::error_of([&] { z.backward(); }).find("modified in place") != std::string::npos);
  // set_grad of another dtype is stored in the tensor's dtype; another device is refused
  Tensor q = T({1, 2}, {2}).requires_grad_();
  q.set_grad(ones({2}));  // float32
  CHECK(q.grad().dtype() == DType::float64);
  sum(q * 2.0).backward();
  CHECK(q.grad().to_vector<double>() == std::vector<double>{3, 3});
}
