// Tests of nn::Module: registration and dotted names, handle semantics, state_dict round
// trip and strict-load errors, train/eval, to(dtype), zero_grad, summary, containers.
#include <doctest/doctest.h>
#include "nn_test_utils.h"

using namespace kiln;
using namespace kiln::test;
namespace nn = kiln::nn;

namespace {

struct Net : nn::Module {
  nn::Linear fc1, fc2;
  Net() {
    fc1 = register_module("fc1", nn::Linear(784, 128));
    fc2 = register_module("fc2", nn::Linear(128, 10));
  }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }
};

// A user module with a parameter, a buffer and a nested container.
struct Block : nn::Module {
  nn::Linear fc;
  nn::Sequential seq;
  Tensor scale;
  Tensor counter;
  Block(int64_t d = 4) {
    fc = register_module("fc", nn::Linear(d, d));
    seq = register_module("seq", nn::Sequential{nn::Linear(d, d, {.bias = false}), nn::Tanh()});
    scale = register_parameter("scale", ones({d}));
    counter = register_buffer("counter", zeros({}, {.dtype = DType::int64}));
  }
  Tensor forward(const Tensor& x) override { return seq(fc(x)) * scale; }
};

struct Outer : nn::Module {
  nn::ModuleList blocks;
  nn::LayerNorm ln;
  Outer() {
    blocks = register_module("blocks", nn::ModuleList{Block(), Block()});
    ln = register_module("ln", nn::LayerNorm(4));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& b : blocks) h = b(h);
    return ln(h);
  }
};

}  // namespace

TEST_CASE("register: names, order, counts and the DESIGN.md example") {
  manual_seed(0);
  Net net;
  auto np = net.named_parameters();
  CHECK(np.keys() == std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(net.num_parameters() == 784 * 128 + 128 + 128 * 10 + 10);
  CHECK(net.parameters().size() == 4);
  // the member handle is the registered tensor
  CHECK(np.at("fc1.weight").is_same(net.fc1.weight));
  CHECK(net.fc1.weight.requires_grad());
  auto y = net(randn({2, 784}));
  CHECK(y.shape() == Shape{2, 10});
  auto ch = net.named_children();
  CHECK(ch.keys() == std::vector<std::string>{"fc1", "fc2"});
  CHECK(dynamic_cast<nn::Linear*>(ch.at("fc1").get()) != nullptr);
}

TEST_CASE("nested dotted names, buffers, named_modules") {
  manual_seed(0);
  Outer m;
  auto names = m.named_parameters().keys();
  std::vector<std::string> expect{"blocks.0.scale", "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.seq.0.weight",
                                  "blocks.1.scale", "blocks.1.fc.weight", "blocks.1.fc.bias", "blocks.1.seq.0.weight",
                                  "ln.weight",      "ln.bias"};
  CHECK(names == expect);
  CHECK(m.named_buffers().keys() == std::vector<std::string>{"blocks.0.counter", "blocks.1.counter"});
  auto mods = m.named_modules().keys();
  CHECK(mods == std::vector<std::string>{"blocks", "blocks.0", "blocks.0.fc", "blocks.0.seq", "blocks.0.seq.0",
                                         "blocks.0.seq.1", "blocks.1", "blocks.1.fc", "blocks.1.seq",
                                         "blocks.1.seq.0", "blocks.1.seq.1", "ln"});
  auto sd = m.state_dict();
  CHECK(sd.size() == 12);
  CHECK(sd.contains("blocks.1.counter"));
  CHECK(m(randn({3, 4})).shape() == Shape{3, 4});
}

TEST_CASE("module handles share state; register_module returns a sharing handle") {
  manual_seed(1);
  nn::Linear l(3, 4);
  nn::Linear l2 = l;
  CHECK(l2.weight.is_same(l.weight));
  l2.eval();
  CHECK_FALSE(l.is_training());

  nn::Module parent;
  nn::Linear child = parent.register_module("fc", nn::Linear(3, 4));
  auto stored = parent.named_parameters().at("fc.weight");
  CHECK(stored.is_same(child.weight));
  // changing through the handle is seen through the parent
  {
    NoGradGuard ng;
    child.weight.fill_(2.0);
  }
  CHECK(parent.named_parameters().at("fc.weight").at({0, 0}) == 2.0);
  parent.eval();
  CHECK_FALSE(child.is_training());

  // shared_ptr registration: no copy at all
  auto sp = std::make_shared<Net>();
  auto back = parent.register_module("net", sp);
  CHECK(back.get() == sp.get());
  CHECK(parent.named_parameters().contains("net.fc1.weight"));
}

TEST_CASE("registration errors") {
  nn::Module m;
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_WITH_AS(m.register_parameter("w", zeros({2})), doctest::Contains("'w' already exists"), kiln::Error);
  CHECK_THROWS_WITH_AS(m.register_buffer("w", zeros({2})), doctest::Contains("'w' already exists"), kiln::Error);
  CHECK_THROWS_WITH_AS(m.register_module("w", nn::ReLU()), doctest::Contains("'w' already exists"), kiln::Error);
  CHECK_THROWS_WITH_AS(m.register_parameter("a.b", zeros({2})), doctest::Contains("must not contain '.'"),
                       kiln::Error);
  CHECK_THROWS_AS(m.register_parameter("", zeros({2})), kiln::Error);
  CHECK_THROWS_WITH_AS(m.register_parameter("i", zeros({2}, {.dtype = DType::int64})),
                       doctest::Contains("floating point"), kiln::Error);
  // a frozen integer parameter is fine
  m.register_parameter("frozen", zeros({2}, {.dtype = DType::int64}), false);
  CHECK(m.num_parameters() == 4);
  CHECK(m.num_parameters(true) == 2);
  // slicing is refused
  nn::Linear l(2, 2);
  nn::Module& ref = l;
  CHECK_THROWS_WITH_AS(m.register_module("sliced", ref), doctest::Contains("Linear"), kiln::Error);
  // a module with no forward says so
  CHECK_THROWS_WITH_AS(m(zeros({2})), doctest::Contains("forward"), kiln::Error);
  // an empty (default-constructed) layer says so
  nn::Linear empty;
  CHECK_THROWS_WITH_AS(empty(zeros({2, 2})), doctest::Contains("empty"), kiln::Error);
}

TEST_CASE("register_parameter detaches non-leaves and honours requires_grad") {
  nn::Module m;
  Tensor a = ones({2}, {.requires_grad = true});
  Tensor b = a * 2.0;
  Tensor& p = m.register_parameter("p", b);
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
  Tensor q = zeros({3});
  Tensor& qq = m.register_parameter("q", q, false);
  CHECK(qq.is_same(q));
  CHECK_FALSE(q.requires_grad());
}

TEST_CASE("state_dict round trip") {
  manual_seed(2);
  Outer a;
  manual_seed(3);
  Outer b;
  Tensor x = randn({2, 4});
  a.eval();
  b.eval();
  CHECK_FALSE(allclose(a(x), b(x)));
  {  // make a's counter buffers differ
    NoGradGuard ng;
    a.named_buffers().at("blocks.1.counter").fill_(7);
  }
  Tensor bw = b.named_parameters().at("blocks.0.fc.weight");
  b.load_state_dict(a.state_dict());
  CHECK(bitwise_equal(a(x), b(x)));
  CHECK(b.named_buffers().at("blocks.1.counter").item() == 7);
  // values were copied into the existing tensors: handles stay valid and distinct
  CHECK(b.named_parameters().at("blocks.0.fc.weight").is_same(bw));
  CHECK_FALSE(bw.is_same(a.named_parameters().at("blocks.0.fc.weight")));
  // dtype conversion on load
  nn::StateDict sd64;
  for (auto& [k, v] : a.state_dict()) sd64.insert(k, v.is_floating_point() ? v.to(DType::float64) : v);
  manual_seed(4);
  Outer c;
  c.load_state_dict(sd64);
  c.eval();
  CHECK(bitwise_equal(c(x), a(x)));
  CHECK(c.parameters()[0].dtype() == DType::float32);
}

TEST_CASE("state_dict: detached tensors sharing the module's storage (PyTorch's keep_vars=False)") {
  nn::Linear lin(3, 2);
  nn::StateDict sd = lin.state_dict();
  Tensor w = sd.at("weight");
  CHECK_FALSE(w.requires_grad());
  CHECK_FALSE(w.is_same(lin.weight));
  const double before = lin.weight.to_vector<double>()[0];
  w.mul_(2.0);  // threw "in-place change of a leaf that requires grad" on the module's own handle
  CHECK(lin.weight.to_vector<double>()[0] == 2.0 * before);
  CHECK(lin.weight.requires_grad());
}

TEST_CASE("load_state_dict: a one-element 1-D value loads into a 0-dim entry (PyTorch's rule for old files)") {
  nn::BatchNorm1d bn(2);
  nn::StateDict sd = bn.state_dict();
  sd.insert_or_assign("num_batches_tracked", from_vector<int64_t>({7}));
  bn.load_state_dict(sd);  // was a shape mismatch
  CHECK(bn.num_batches_tracked.dim() == 0);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 7);
  sd.insert_or_assign("num_batches_tracked", from_vector<int64_t>({7, 8}));
  CHECK_THROWS_AS(bn.load_state_dict(sd), kiln::Error);
}

TEST_CASE("load_state_dict lists every bad name in one error") {
  manual_seed(5);
  Net net;
  nn::StateDict sd = net.state_dict();
  sd.erase("fc1.bias");
  sd.erase("fc2.weight");
  sd.insert("fc3.weight", zeros({2}));
  sd.insert("extra", zeros({1}));
  sd.insert_or_assign("fc1.weight", zeros({128, 783}));
  Tensor before = net.fc2.bias.clone();
  try {
    net.load_state_dict(sd);
    FAIL("expected kiln::Error");
  } catch (const kiln::Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("fc1.bias") != std::string::npos);
    CHECK(msg.find("fc2.weight") != std::string::npos);
    CHECK(msg.find("fc3.weight") != std::string::npos);
    CHECK(msg.find("extra") != std::string::npos);
    CHECK(msg.find("fc1.weight") != std::string::npos);
    CHECK(msg.find("[128, 783]") != std::string::npos);
    CHECK(msg.find("2 missing") != std::string::npos);
    CHECK(msg.find("2 unexpected") != std::string::npos);
    CHECK(msg.find("1 shape mismatch") != std::string::npos);
  }
  // nothing was changed
  CHECK(bitwise_equal(net.fc2.bias, before));

  // non-strict: missing/unexpected are fine, shape mismatches still are not
  nn::StateDict partial;
  partial.insert("fc2.bias", full({10}, 3.0));
  partial.insert("unknown", zeros({1}));
  net.load_state_dict(partial, false);
  CHECK(net.fc2.bias.at({4}) == 3.0);
  partial.insert("fc1.bias", zeros({5}));
  CHECK_THROWS_WITH_AS(net.load_state_dict(partial, false), doctest::Contains("fc1.bias"), kiln::Error);
}

TEST_CASE("train/eval propagate recursively") {
  Outer m;
  CHECK(m.is_training());
  m.eval();
  CHECK_FALSE(m.is_training());
  for (auto& [name, child] : m.named_modules()) CHECK_FALSE(child->is_training());
  CHECK_FALSE(m.blocks.get<Block>(1).seq.is_training());
  m.train();
  for (auto& [name, child] : m.named_modules()) CHECK(child->is_training());
  // a submodule can be switched alone
  m.blocks[0].eval();
  CHECK_FALSE(m.blocks.get<Block>(0).fc.is_training());
  CHECK(m.blocks.get<Block>(1).fc.is_training());
}

TEST_CASE("to(dtype) keeps handles valid and converts only floating tensors") {
  manual_seed(6);
  nn::Sequential m{nn::Linear(3, 4), nn::BatchNorm1d(4)};
  nn::Linear fc = m.get<nn::Linear>(0);
  Tensor w = fc.weight;
  std::vector<double> before = w.to_vector<double>();
  sum(m(randn({5, 3}))).backward();
  REQUIRE(fc.weight.grad().defined());
  m.to(DType::float64);
  CHECK(fc.weight.dtype() == DType::float64);
  CHECK(w.dtype() == DType::float64);
  CHECK(w.is_same(m.named_parameters().at("0.weight")));
  CHECK(w.to_vector<double>() == before);  // float32 -> float64 is exact
  CHECK(w.grad().dtype() == DType::float64);
  CHECK(w.requires_grad());
  CHECK(m.named_buffers().at("1.running_mean").dtype() == DType::float64);
  CHECK(m.named_buffers().at("1.num_batches_tracked").dtype() == DType::int64);
  Tensor y = m(randn({5, 3}, f64));
  CHECK(y.dtype() == DType::float64);
  m.to(Device::cpu());  // no-op
  CHECK(w.is_same(fc.weight));
  CHECK_THROWS_AS(m.to(DType::int64), kiln::Error);
}

TEST_CASE("zero_grad sets grads undefined; gradients accumulate") {
  manual_seed(7);
  nn::Linear l(3, 2);
  Tensor x = randn({4, 3});
  sum(l(x)).backward();
  Tensor g1 = l.weight.grad().clone();
  sum(l(x)).backward();
  CHECK(allclose(l.weight.grad(), g1 * 2.0));
  l.zero_grad();
  CHECK_FALSE(l.weight.grad().defined());
  CHECK_FALSE(l.bias.grad().defined());
}

TEST_CASE("summary text") {
  manual_seed(8);
  Net net;
  std::string s = net.str();
  CHECK(s.find("Net") != std::string::npos);
  CHECK(s.find("fc1: Linear(in_features=784, out_features=128, bias=true)  -- 100,480 parameters") !=
        std::string::npos);
  CHECK(s.find("fc2: Linear(in_features=128, out_features=10, bias=true)  -- 1,290 parameters") !=
        std::string::npos);
  CHECK(s.find("Total parameters: 101,770 (trainable: 101,770)") != std::string::npos);
  std::ostringstream os;
  os << net;
  CHECK(os.str() == s);
  nn::Sequential seq{nn::Conv2d(1, 8, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(8), nn::ReLU(),
                     nn::MaxPool2d(2)};
  std::string t = seq.str();
  CHECK(t.find("0: Conv2d(1, 8, kernel_size=3, padding=1, bias=false)  -- 72 parameters") != std::string::npos);
  CHECK(t.find("1: BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)  -- 16 "
               "parameters") != std::string::npos);
  CHECK(t.find("2: ReLU\n") != std::string::npos);
  CHECK(t.find("Total parameters: 88") != std::string::npos);
  MESSAGE(t);
}

TEST_CASE("Sequential: nesting, indexing, push_back, user modules") {
  manual_seed(9);
  nn::Sequential inner{nn::Linear(4, 4), nn::ReLU()};
  nn::Sequential outer{inner, Block(), nn::Sequential{nn::Linear(4, 2)}};
  CHECK(outer.size() == 3);
  CHECK(outer.named_parameters().contains("0.0.weight"));
  CHECK(outer.named_parameters().contains("1.seq.0.weight"));
  CHECK(outer.named_parameters().contains("2.0.bias"));
  Tensor x = randn({3, 4});
  // forward equals the hand-written composition
  Block blk = outer.get<Block>(1);
  nn::Linear last = outer.get<nn::Sequential>(2).get<nn::Linear>(0);
  Tensor expect = last(blk(relu(inner.get<nn::Linear>(0)(x))));
  CHECK(bitwise_equal(outer(x), expect));
  // indexing, negative indices, wrong type, out of range
  CHECK(outer[-1].type_name() == "Sequential");
  CHECK_THROWS_WITH_AS(outer.get<nn::Linear>(0), doctest::Contains("Sequential"), kiln::Error);
  CHECK_THROWS_WITH_AS(outer[3], doctest::Contains("out of range"), kiln::Error);
  // copies share the list
  nn::Sequential alias = outer;
  alias.push_back(nn::Tanh());
  CHECK(outer.size() == 4);
  CHECK(outer(x).shape() == Shape{3, 2});
  // shared_ptr user modules go in without a copy
  auto net = std::make_shared<Block>();
  nn::Sequential s2{net, nn::ReLU()};
  CHECK(s2.get<Block>(0).fc.weight.is_same(net->fc.weight));
  // a module without forward(const Tensor&) fails clearly inside a Sequential
  nn::Sequential bad{nn::ModuleList{}};
  CHECK_THROWS_WITH_AS(bad(x), doctest::Contains("forward"), kiln::Error);
}

TEST_CASE("apply visits every module") {
  manual_seed(10);
  Outer m;
  int linears = 0;
  m.apply([&](nn::Module& mod) {
    if (auto* l = dynamic_cast<nn::Linear*>(&mod)) {
      ++linears;
      nn::init::zeros_(l->weight);
    }
  });
  CHECK(linears == 4);
  for (auto& [name, p] : m.named_parameters())
    if (name.find("fc.weight") != std::string::npos) CHECK(sum(abs(p)).item() == 0.0);
}

TEST_CASE("shared (tied) parameters appear once in parameters()") {
  nn::Module m;
  nn::Linear l(3, 3);
  m.register_module("a", l);
  m.register_module("b", l);
  CHECK(m.parameters().size() == 2);
  CHECK(m.num_parameters() == 12);
  CHECK(m.state_dict().size() == 4);  // every name, like PyTorch
  m.load_state_dict(m.state_dict());
  // the module itself is listed and visited once, under its first name (PyTorch's memo)
  CHECK(m.named_children().keys() == std::vector<std::string>{"a"});
  CHECK(m.children().size() == 1);
  CHECK(m.named_modules().keys() == std::vector<std::string>{"a"});
  int calls = 0;
  m.apply([&](nn::Module&) { ++calls; });
  CHECK(calls == 2);
  // shared by two parents: named_modules lists it once, under the first parent
  nn::Module p, q, r;
  q.register_module("l", l);
  r.register_module("l", l);
  p.register_module("q", q);
  p.register_module("r", r);
  CHECK(p.named_modules().keys() == std::vector<std::string>{"q", "q.l", "r"});
}

TEST_CASE("requires_grad_ freezes a part of a model; zero_grad(false) zero-fills") {
  nn::Sequential net{nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2)};
  auto first = net.named_children().values()[0];
  first->requires_grad_(false);
  for (const auto& kv : net.named_parameters())  // (no structured binding: clang 14 cannot capture one)
    CHECK_MESSAGE(kv.second.requires_grad() == (kv.first[0] != '0'), kv.first);
  sum(net(randn({5, 3}))).backward();
  CHECK_FALSE(first->parameters()[0].grad().defined());
  CHECK(net.num_parameters(true) == 10);
  net.zero_grad(false);
  for (const auto& p : net.parameters())
    if (p.requires_grad()) CHECK(sum(abs(p.grad())).item() == 0.0);
  net.zero_grad();
  for (const auto& p : net.parameters()) CHECK_FALSE(p.grad().defined());
  CHECK(net.requires_grad_().num_parameters(true) == net.num_parameters());
}

TEST_CASE("non-persistent buffers are left out of state_dict") {
  nn::Module m;
  m.register_buffer("mask", ones({2}), false);
  m.register_buffer("stat", ones({2}));
  CHECK(m.named_buffers().size() == 2);
  CHECK(m.state_dict().keys() == std::vector<std::string>{"stat"});
}

namespace {
// The model of DESIGN.md section 6 (forward without `override`, as a user may write it).
struct ConvNet : nn::Module {
  nn::Sequential features, head;
  ConvNet() {
    features = register_module("features", nn::Sequential{
        nn::Conv2d(1, 32, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
        nn::Conv2d(32, 64, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2)});
    head = register_module("head", nn::Sequential{nn::Flatten(), nn::Linear(3136, 10)});
  }
  kiln::Tensor forward(const kiln::Tensor& x) { return head(features(x)); }  // NOLINT
};
}  // namespace

TEST_CASE("the DESIGN.md ConvNet: build, run, backward, save/load through std::map") {
  manual_seed(11);
  ConvNet model;
  model.to(Device::cpu());
  Tensor x = randn({2, 1, 28, 28});
  Tensor y = model(x);
  CHECK(y.shape() == Shape{2, 10});
  cross_entropy(y, from_vector<int64_t>({3, 7}, {2})).backward();
  for (auto& p : model.parameters()) CHECK(p.grad().defined());
  CHECK(model.named_parameters().contains("features.4.weight"));
  CHECK(model.named_buffers().contains("features.5.running_var"));
  // a std::map (sorted) state dict converts both ways
  std::map<std::string, Tensor> sorted = model.state_dict();
  CHECK(sorted.size() == model.state_dict().size());
  manual_seed(12);
  ConvNet other;
  other.load_state_dict(sorted);
  model.eval();
  other.eval();
  CHECK(bitwise_equal(model(x), other(x)));
  CHECK(model.str().find("head: Sequential  -- 31,370 parameters") != std::string::npos);
}

TEST_CASE("init: trunc_normal_, orthogonal_, eye_, dirac_, sparse_") {
  manual_seed(77);
  // truncated normal: inside [a, b], and the truncated distribution's mean and spread
  Tensor w = empty({200000});
  nn::init::trunc_normal_(w, 0.5, 1.0, -0.5, 2.5);
  CHECK(min(w).item() >= -0.5);
  CHECK(max(w).item() <= 2.5);
  // N(0.5, 1) truncated to [-1, 2] sigma around its mean: mean 0.5 + (phi(-1) - phi(2)) / (Phi(2) - Phi(-1))
  const double phi_a = std::exp(-0.5) / std::sqrt(2 * M_PI), phi_b = std::exp(-2.0) / std::sqrt(2 * M_PI);
  const double Z = (std::erf(2 / std::sqrt(2.0)) - std::erf(-1 / std::sqrt(2.0))) / 2;
  CHECK(mean(w).item() == doctest::Approx(0.5 + (phi_a - phi_b) / Z).epsilon(0.01));
  Tensor narrow_w = empty({1000}, {.dtype = DType::float64});
  nn::init::trunc_normal_(narrow_w, 0, 1, 3.0, 3.1);  // far in the tail: erfinv near 1 stays finite
  CHECK(min(narrow_w).item() >= 3.0);
  CHECK(max(narrow_w).item() <= 3.1);
  // orthogonal: Q^T Q = I for tall matrices, Q Q^T = I for wide ones, times gain
  for (Shape s : {Shape{6, 4}, Shape{3, 5}, Shape{4, 2, 3}}) {
    CAPTURE(shape_str(s));
    Tensor q = empty(s, {.dtype = DType::float64});
    nn::init::orthogonal_(q, 2.0);
    const Tensor m = q.reshape({s[0], q.numel() / s[0]});
    const Tensor g = m.size(0) >= m.size(1) ? matmul(m.t(), m) : matmul(m, m.t());
    CHECK(max_abs_diff(g, mul(eye(g.size(0), -1, {.dtype = DType::float64}), 4.0)) < 1e-12);
  }
  Tensor e = empty({2, 3});
  nn::init::eye_(e);
  CHECK(e.to_vector<double>() == std::vector<double>{1, 0, 0, 0, 1, 0});
  // dirac: the identity convolution
  Tensor k = empty({3, 3, 3, 3}, {.dtype = DType::float64});
  nn::init::dirac_(k);
  const Tensor img = randn({1, 3, 5, 5}, {.dtype = DType::float64});
  CHECK(max_abs_diff(conv2d(img, k, Tensor(), {.padding = {1, 1}}), img) == 0.0);
  Tensor sp = empty({10, 4});
  nn::init::sparse_(sp, 0.3, 0.5);
  for (int64_t c = 0; c < 4; ++c) CHECK(sum(eq(sp.select(1, c), 0.0)).item() == 3);
  CHECK_THROWS_AS(nn::init::orthogonal_(empty({4})), kiln::Error);
  CHECK_THROWS_AS(nn::init::dirac_(empty({3, 3}), 1), kiln::Error);
  CHECK_THROWS_AS(nn::init::trunc_normal_(empty({4}), 0, 1, 2, 1), kiln::Error);
}
