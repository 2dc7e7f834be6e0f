// kiln::json: a small JSON value, parser and writer (no third-party library), used for
// checkpoint side files, safetensors headers and vocabulary files. Objects keep their
// insertion order; integers read from text are kept exactly as int64 when they fit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::json {

/// One JSON value: null, boolean, number, string, array or object.
///   json::Value v = json::Value::object();
///   v["step"] = 100;  v["lr"] = 1e-3;  v["shape"].push_back(3);
///   std::string text = v.dump(2);  json::Value w = json::parse(text, "run.json");
/// Wrong-type accessors throw kiln::Error saying the expected and the actual type.
class Value {
 public:
  enum class Type { null, boolean, number, string, array, object };

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool b) : type_(Type::boolean), bool_(b) {}
  Value(double d) : type_(Type::number), num_(d) {}
  /// Any integer type; unsigned values above INT64_MAX throw kiln::Error.
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Value(I v) {
    if constexpr (std::is_signed_v<I>) set_int(int64_t(v));
    else set_uint(uint64_t(v));
  }
  Value(const char* s) : type_(Type::string), str_(s) {}
  Value(std::string s) : type_(Type::string), str_(std::move(s)) {}
  Value(std::string_view s) : type_(Type::string), str_(s) {}

  static Value array() { Value v; v.type_ = Type::array; return v; }
  static Value object() { Value v; v.type_ = Type::object; return v; }

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::null; }
  bool is_bool() const { return type_ == Type::boolean; }
  bool is_number() const { return type_ == Type::number; }
  bool is_string() const { return type_ == Type::string; }
  bool is_array() const { return type_ == Type::array; }
  bool is_object() const { return type_ == Type::object; }
  /// True for a number that is held exactly as an int64 (written or parsed as an integer).
  bool is_int() const { return type_ == Type::number && is_int_; }

  bool as_bool() const;
  double as_number() const;
  /// The exact integer; throws when the number is not integral or outside int64.
  int64_t as_int() const;
  const std::string& as_string() const;
  const std::vector<Value>& as_array() const;
  std::vector<Value>& as_array();
  /// Appends to an array (a null value becomes an empty array first).
  void push_back(Value v);

  /// The value for key, inserted as null at the end if missing (a null value becomes an
  /// empty object first).
  Value& operator[](const std::string& key);
  /// The value for key; throws kiln::Error naming the key when it is missing.
  const Value& at(const std::string& key) const;
  bool contains(const std::string& key) const;
  /// The members of an object, in insertion order.
  const std::vector<std::pair<std::string, Value>>& items() const;
  /// Number of elements of an array or members of an object.
  size_t size() const;

  /// JSON text: compact with indent < 0, else one member per line indented by `indent`
  /// spaces (arrays of scalars stay on one line). Doubles are written in the shortest
  /// form that reads back bitwise; NaN and infinities throw (JSON cannot hold them).
  std::string dump(int indent = -1) const;

  /// "null", "boolean", "number", ...
  static const char* type_name(Type t);

 private:
  void set_int(int64_t v) { type_ = Type::number; is_int_ = true; int_ = v; num_ = double(v); }
  void set_uint(uint64_t v);
  [[noreturn]] void type_error(Type expected) const;
  void dump_to(std::string& out, int indent, int depth) const;
  friend class Parser;

  Type type_ = Type::null;
  bool bool_ = false;
  bool is_int_ = false;
  int64_t int_ = 0;
  double num_ = 0.0;
  std::string str_;
  std::vector<Value> arr_;
  std::vector<std::pair<std::string, Value>> obj_;
};

/// Where `s` stops being valid UTF-8 (RFC 3629: shortest forms only, no surrogates, nothing
/// above U+10FFFF): the offset of the first byte that does not begin a valid sequence, or
/// std::string_view::npos when all of `s` is valid. JSON exchanged between programs must be
/// UTF-8 (RFC 8259), and so must a safetensors header: Python's reader refuses any other.
/// The writer and the parser pass other bytes through unchanged; callers that need UTF-8
/// check with this.
size_t invalid_utf8_at(std::string_view s);

/// Parses JSON text (RFC 8259: full grammar, \u escapes with surrogate pairs, nesting
/// depth at most 512, duplicate object keys refused, nothing but whitespace after the
/// value). Errors are kiln::Error naming `what`, the byte offset and what was expected.
Value parse(std::string_view text, const std::string& what = "JSON");

}  // namespace kiln::json
