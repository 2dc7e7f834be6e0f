// models::MLP implementation.
#include "kiln/models/mlp.h"
#include <sstream>
#include "kiln/ops/elementwise.h"

namespace kiln::models {

MLP::MLP(MLPOptions o) : options(std::move(o)) {
  KILN_CHECK(options.in > 0 && options.out > 0, "MLP: in and out must be positive, got in=", options.in,
             ", out=", options.out);
  nn::Sequential seq;
  int64_t prev = options.in;
  for (int64_t h : options.hidden) {
    KILN_CHECK(h > 0, "MLP: hidden sizes must be positive, got ", h);
    seq.push_back(nn::Linear(prev, h));
    seq.push_back(nn::ReLU());
    prev = h;
  }
  seq.push_back(nn::Linear(prev, options.out));
  net = register_module("net", seq);
}

Tensor MLP::forward(const Tensor& x) {
  KILN_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == options.in, "MLP: expected input (..., ", options.in,
             "), got ", x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  return net(x);
}

std::string MLP::extra_repr() const {
  std::ostringstream s;
  s << "in=" << options.in << ", hidden=[";
  for (size_t i = 0; i < options.hidden.size(); ++i) s << (i ? ", " : "") << options.hidden[i];
  s << "], out=" << options.out;
  return s.str();
}

}  // namespace kiln::models
