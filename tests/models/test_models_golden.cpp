// Golden tests of the reference models against PyTorch: the same deterministic initial
// weights, 3 SGD steps (lr from the file) on a fixed batch; losses and first-step gradients must
// match the values scripts/make_golden.py recorded in tests/models/golden/*.txt.
#include <doctest/doctest.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>
#include "kiln/kiln.h"
#include "kiln/models/models.h"

using namespace kiln;
namespace nn = kiln::nn;
namespace models = kiln::models;

namespace {

struct ParamInit {
  int64_t k = 0;
  double scale = 0, offset = 0;
  Shape shape;
};
struct Golden {
  std::map<std::string, ParamInit> params;
  std::map<std::string, std::pair<Shape, std::vector<double>>> tensors;
};

Golden read_golden(const std::string& file) {
  const auto path = std::filesystem::path(__FILE__).parent_path() / "golden" / file;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path.string());
  Golden g;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream s(line);
    std::string kind, name;
    int64_t nd = 0;
    s >> kind >> name;
    if (kind == "param") {
      ParamInit p;
      s >> p.k >> p.scale >> p.offset >> nd;
      p.shape.resize(nd);
      for (auto& d : p.shape) s >> d;
      g.params[name] = p;
    } else {
      REQUIRE(kind == "tensor");
      s >> nd;
      Shape shape(nd);
      for (auto& d : shape) s >> d;
      std::vector<double> v(shape_numel(shape));
      for (auto& x : v) s >> x;
      REQUIRE_MESSAGE(!s.fail(), "bad record " << name << " in " << file);
      g.tensors[name] = {shape, v};
    }
  }
  return g;
}

/// Fills every parameter with the script's deterministic values (matched by name).
void load_init(nn::Module& m, const Golden& g) {
  auto named = m.named_parameters();
  REQUIRE(named.size() == g.params.size());
  NoGradGuard ng;
  for (auto& entry : named) {
    auto& name = entry.first;
    auto& p = entry.second;
    INFO("parameter " << name);
    REQUIRE(g.params.count(name) == 1);
    const ParamInit& pi = g.params.at(name);
    REQUIRE(p.shape() == pi.shape);
    std::vector<float> v(p.numel());
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = float(pi.offset + pi.scale * std::sin(0.7 * double(i) + 1.3 * double(pi.k) + 0.5));
    p.copy_(from_vector(v, p.shape()));
  }
}

Tensor golden_tensor(const Golden& g, const std::string& name, DType dtype) {
  REQUIRE_MESSAGE(g.tensors.count(name) == 1, "missing " << name);
  const auto& [shape, v] = g.tensors.at(name);
  return from_vector(v, shape).to(dtype);
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    const double lim = tol * (1.0 + std::abs(want[i]));
    if (err > lim) ++bad;
    worst = std::max(worst, err / (1.0 + std::abs(want[i])));
  }
  INFO("worst scaled error " << worst << ", " << bad << " of " << got.size() << " elements beyond " << tol);
  CHECK(bad == 0);
}

void run_golden(nn::Module& m, const std::string& file, bool seq) {
  Golden g = read_golden(file);
  load_init(m, g);
  m.train();
  Tensor x = golden_tensor(g, "input", seq ? DType::int64 : DType::float32);
  Tensor y = golden_tensor(g, "target", DType::int64);
  optim::SGD opt(m.parameters(), {.lr = g.tensors.at("lr").second.at(0)});
  auto named = m.named_parameters();
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor logits = m(x);
    Tensor loss = seq ? cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1})) : cross_entropy(logits, y);
    loss.backward();
    losses.push_back(loss.item());
    if (step == 0) {
      for (auto& [tname, rec] : g.tensors) {
        if (tname.rfind("grad.", 0) != 0) continue;
        const std::string pname = tname.substr(5);
        INFO(file << ": gradient of " << pname);
        REQUIRE(named.contains(pname));
        Tensor gr = named.at(pname).grad();
        REQUIRE(gr.defined());
        CHECK(gr.shape() == rec.first);
        check_close(gr.to_vector<double>(), rec.second, 1e-4);
      }
    }
    opt.step();
  }
  INFO(file << ": losses " << losses[0] << " " << losses[1] << " " << losses[2]);
  check_close(losses, g.tensors.at("losses").second, 1e-4);
}

}  // namespace

TEST_CASE("golden: MLP 8-16-4 vs PyTorch") {
  models::MLP m({.in = 8, .hidden = {16}, .out = 4});
  run_golden(m, "mlp.txt", false);
}

TEST_CASE("golden: LeNet5 vs PyTorch") {
  models::LeNet5 m;
  run_golden(m, "lenet.txt", false);
}

TEST_CASE("golden: ConvNet (train-mode batch norm) vs PyTorch") {
  models::ConvNet m;
  run_golden(m, "convnet.txt", false);
}

TEST_CASE("golden: ResNet20 (train-mode batch norm, projection shortcuts) vs PyTorch") {
  models::ResNet20 m;
  run_golden(m, "resnet20.txt", false);
}

TEST_CASE("golden: GPT (tied) vs PyTorch") {
  models::GPT m({.vocab = 11, .context = 8, .layers = 2, .heads = 2, .width = 16, .dropout = 0.0, .tie_weights = true});
  run_golden(m, "gpt.txt", true);
}
