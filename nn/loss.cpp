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
    case Reduction::batchmean: return "batchmean";
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
std::string L1Loss::extra_repr() const { return std::string("reduction=") + reduction_str(args.reduction); }
std::string SmoothL1Loss::extra_repr() const {
  std::ostringstream os;
  os << "reduction=" << reduction_str(args.reduction) << ", beta=" << args.beta;
  return os.str();
}
std::string HuberLoss::extra_repr() const {
  std::ostringstream os;
  os << "reduction=" << reduction_str(args.reduction) << ", delta=" << args.delta;
  return os.str();
}
std::string BCELoss::extra_repr() const {
  return std::string("reduction=") + reduction_str(args.reduction) + (args.weight.defined() ? ", weight" : "");
}
std::string BCEWithLogitsLoss::extra_repr() const {
  return std::string("reduction=") + reduction_str(args.reduction) + (args.weight.defined() ? ", weight" : "") +
         (args.pos_weight.defined() ? ", pos_weight" : "");
}
std::string KLDivLoss::extra_repr() const {
  return std::string("reduction=") + reduction_str(args.reduction) + ", log_target=" + (args.log_target ? "true" : "false");
}

std::string HingeEmbeddingLoss::extra_repr() const {
  std::ostringstream os;
  os << "margin=" << args.margin << ", reduction=" << reduction_str(args.reduction);
  return os.str();
}
std::string SoftMarginLoss::extra_repr() const { return std::string("reduction=") + reduction_str(args.reduction); }
std::string MultiLabelSoftMarginLoss::extra_repr() const {
  return std::string("reduction=") + reduction_str(args.reduction) + (args.weight.defined() ? ", weight" : "");
}
std::string MultiMarginLoss::extra_repr() const {
  std::ostringstream os;
  os << "p=" << args.p << ", margin=" << args.margin << ", reduction=" << reduction_str(args.reduction)
     << (args.weight.defined() ? ", weight" : "");
  return os.str();
}
std::string MultiLabelMarginLoss::extra_repr() const {
  return std::string("reduction=") + reduction_str(args.reduction);
}
std::string PoissonNLLLoss::extra_repr() const {
  std::ostringstream os;
  os << "log_input=" << (args.log_input ? "true" : "false") << ", full=" << (args.full ? "true" : "false")
     << ", eps=" << args.eps << ", reduction=" << reduction_str(args.reduction);
  return os.str();
}
std::string MarginRankingLoss::extra_repr() const {
  std::ostringstream os;
  os << "margin=" << args.margin << ", reduction=" << reduction_str(args.reduction);
  return os.str();
}
std::string CosineEmbeddingLoss::extra_repr() const {
  std::ostringstream os;
  os << "margin=" << args.margin << ", reduction=" << reduction_str(args.reduction);
  return os.str();
}
std::string TripletMarginLoss::extra_repr() const {
  std::ostringstream os;
  os << "margin=" << args.margin << ", p=" << args.p << ", eps=" << args.eps << ", swap=" << (args.swap ? "true" : "false")
     << ", reduction=" << reduction_str(args.reduction);
  return os.str();
}
std::string GaussianNLLLoss::extra_repr() const {
  std::ostringstream os;
  os << "full=" << (args.full ? "true" : "false") << ", eps=" << args.eps << ", reduction=" << reduction_str(args.reduction);
  return os.str();
}

}  // namespace kiln::nn
