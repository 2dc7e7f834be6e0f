// OrderedDict: a string-keyed map that remembers insertion order (PyTorch's
// OrderedDict). Modules keep their parameters, buffers and children in these, so names
// come out in registration order; references to values stay valid as items are added.
#pragma once
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#include "kiln/core/error.h"

namespace kiln::nn {

template <class V>
class OrderedDict {
 public:
  using Item = std::pair<std::string, V>;
  using iterator = typename std::deque<Item>::iterator;
  using const_iterator = typename std::deque<Item>::const_iterator;

  OrderedDict() = default;
  OrderedDict(std::initializer_list<Item> items) {
    for (const auto& it : items) insert(it.first, it.second);
  }
  /// From a sorted map (e.g. optim::StateDict), in its key order.
  template <class Cmp, class Alloc>
  OrderedDict(const std::map<std::string, V, Cmp, Alloc>& m) {  // NOLINT: implicit by design
    for (const auto& [k, v] : m) insert(k, v);
  }
  /// To a sorted map (what a std::map-based writer such as a safetensors saver takes).
  operator std::map<std::string, V>() const {
    std::map<std::string, V> m;
    for (const auto& [k, v] : items_) m.emplace(k, v);
    return m;
  }

  /// Adds a new key at the end; throws if the key exists. The reference stays valid
  /// while the dict lives (items live in a deque and are only appended).
  V& insert(const std::string& key, V value) {
    KILN_CHECK(!contains(key), "OrderedDict: key '", key, "' already exists");
    index_.emplace(key, items_.size());
    items_.emplace_back(key, std::move(value));
    return items_.back().second;
  }
  /// Sets key to value, appending it if new.
  V& insert_or_assign(const std::string& key, V value) {
    if (V* v = find(key)) return *v = std::move(value);
    return insert(key, std::move(value));
  }
  /// The value for key, default-inserted at the end if absent (like std::map).
  V& operator[](const std::string& key) {
    if (V* v = find(key)) return *v;
    return insert(key, V());
  }
  /// The value for key; throws kiln::Error naming the key if absent.
  V& at(const std::string& key) {
    V* v = find(key);
    KILN_CHECK(v != nullptr, "OrderedDict: no key '", key, "'");
    return *v;
  }
  const V& at(const std::string& key) const { return const_cast<OrderedDict*>(this)->at(key); }
  /// Pointer to the value for key, or nullptr.
  V* find(const std::string& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const V* find(const std::string& key) const { return const_cast<OrderedDict*>(this)->find(key); }
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  /// Removes key (linear time; keeps the order of the rest). Returns whether it existed.
  bool erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    items_.erase(items_.begin() + std::ptrdiff_t(it->second));
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    return true;
  }
  void clear() {
    items_.clear();
    index_.clear();
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  Item& item(size_t i) { return items_.at(i); }
  const Item& item(size_t i) const { return items_.at(i); }
  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    k.reserve(items_.size());
    for (const auto& it : items_) k.push_back(it.first);
    return k;
  }
  std::vector<V> values() const {
    std::vector<V> v;
    v.reserve(items_.size());
    for (const auto& it : items_) v.push_back(it.second);
    return v;
  }

 private:
  std::deque<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace kiln::nn
