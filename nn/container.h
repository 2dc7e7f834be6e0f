// Containers: Sequential (runs its modules in order) and ModuleList (holds modules for
// a hand-written forward). Both hold type-erased handles (AnyModule), so any module with
// `Tensor forward(const Tensor&)`, user-defined ones included, can be put in them.
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include "kiln/nn/module.h"

namespace kiln::nn {

namespace detail {
/// Shared code of Sequential and ModuleList: children named "0", "1", ... in order.
class ModuleContainer : public Module {
 public:
  /// Iterates over the modules as Module&.
  class iterator {
   public:
    using Inner = OrderedDict<std::shared_ptr<Module>>::const_iterator;
    explicit iterator(Inner it) : it_(it) {}
    Module& operator*() const { return *it_->second; }
    Module* operator->() const { return it_->second.get(); }
    iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator==(const iterator& o) const { return it_ == o.it_; }
    bool operator!=(const iterator& o) const { return it_ != o.it_; }
   private:
    Inner it_;
  };

  /// Appends a module (named by its position).
  void push_back(AnyModule m);
  /// Appends a module under a chosen name.
  void push_back(const std::string& name, AnyModule m);
  size_t size() const;
  bool empty() const { return size() == 0; }
  /// The i-th module (negative i counts from the end); throws when out of range.
  Module& operator[](int64_t i) const { return *ptr(i); }
  std::shared_ptr<Module> ptr(int64_t i) const;
  /// The i-th module as its concrete type (a handle sharing its state):
  ///   nn::Linear fc = seq.get<nn::Linear>(0);
  template <class M>
  M get(int64_t i) const {
    auto p = std::dynamic_pointer_cast<M>(ptr(i));
    KILN_CHECK(p != nullptr, type_name(), "::get<", demangle(typeid(M).name()), ">(", i, "): module ", i,
               " is a ", ptr(i)->type_name());
    return *p;
  }
  iterator begin() const;
  iterator end() const;

 protected:
  ModuleContainer() = default;
  ModuleContainer(std::initializer_list<AnyModule> modules);
};
}  // namespace detail

/// Runs its modules one after another:
///   nn::Sequential net{nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2)};
///   auto y = net(x);  net.push_back(nn::Tanh());  nn::Linear first = net.get<nn::Linear>(0);
/// Copies share the module list (push_back on one is seen by all).
class Sequential : public detail::ModuleContainer {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<AnyModule> modules) : ModuleContainer(modules) {}
  Tensor forward(const Tensor& x) override;
};

/// Holds modules for a forward written by hand:
///   for (auto& block : blocks) x = block(x);
class ModuleList : public detail::ModuleContainer {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<AnyModule> modules) : ModuleContainer(modules) {}
};

}  // namespace kiln::nn
