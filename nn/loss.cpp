// Loss modules: summary text (the forwards are inline in nn/loss.h).
#include "kiln/nn/loss.h"
#include <sstream>

namespace kiln::nn {

namespace {
const char* reduction_str(Reduction r) {
  switch (r) {
    case Reduction::none: return "none";
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
  }
  return "?";
}
}  // namespace

std::string CrossEntropyLoss::extra_repr() const {
  std::ostringstream os;
  os << "reduction=" << reduction_str(args.reduction) << ", ignore_index=" << args.ignore_index
     << ", label_smoothing=" << args.label_smoothing;
  return os.str();
}
std::string NLLLoss::extra_repr() const {
  std::ostringstream os;
  os << "reduction=" << reduction_str(args.reduction) << ", ignore_index=" << args.ignore_index;
  return os.str();
}
std::string MSELoss::extra_repr() const { return std::string("reduction=") + reduction_str(reduction); }

}  // namespace kiln::nn
