// Sequential and ModuleList: positional children and Sequential's forward.
#include "kiln/nn/container.h"

namespace kiln::nn {
namespace detail {

ModuleContainer::ModuleContainer(std::initializer_list<AnyModule> modules) {
  for (const auto& m : modules) push_back(m);
}

void ModuleContainer::push_back(AnyModule m) { push_back(std::to_string(size()), std::move(m)); }

void ModuleContainer::push_back(const std::string& name, AnyModule m) {
  KILN_CHECK(m.ptr() != nullptr, type_name(), "::push_back: module is empty");
  register_module(name, m.ptr());
}

size_t ModuleContainer::size() const { return state().children.size(); }

std::shared_ptr<Module> ModuleContainer::ptr(int64_t i) const {
  int64_t n = int64_t(size());
  KILN_CHECK(i >= -n && i < n, type_name(), ": index ", i, " is out of range for ", n, " modules");
  return state().children.item(size_t(i < 0 ? i + n : i)).second;
}

ModuleContainer::iterator ModuleContainer::begin() const { return iterator(state().children.begin()); }
ModuleContainer::iterator ModuleContainer::end() const { return iterator(state().children.end()); }

}  // namespace detail

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : *this) h = m(h);  // through operator(): the children's forward hooks run
  return h;
}

}  // namespace kiln::nn
