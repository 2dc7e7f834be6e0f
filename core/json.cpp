// kiln::json: accessors, the writer (shortest round-trip doubles via std::to_chars) and
// a recursive-descent parser with a depth limit and byte offsets in its errors.
#include "kiln/core/json.h"
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_set>
#include "kiln/core/error.h"

namespace kiln::json {

// ---------------------------------------------------------------- Value

const char* Value::type_name(Type t) {
  switch (t) {
    case Type::null: return "null";
    case Type::boolean: return "boolean";
    case Type::number: return "number";
    case Type::string: return "string";
    case Type::array: return "array";
    case Type::object: return "object";
  }
  return "?";
}

void Value::type_error(Type expected) const {
  KILN_FAIL("JSON value: expected ", type_name(expected), ", got ", type_name(type_),
            is_string() ? " \"" + str_.substr(0, 40) + "\"" : std::string());
}

void Value::set_uint(uint64_t v) {
  KILN_CHECK(v <= uint64_t(INT64_MAX), "JSON value: integer ", v, " is larger than the int64 maximum ", INT64_MAX);
  set_int(int64_t(v));
}

bool Value::as_bool() const {
  if (!is_bool()) type_error(Type::boolean);
  return bool_;
}

double Value::as_number() const {
  if (!is_number()) type_error(Type::number);
  return num_;
}

int64_t Value::as_int() const {
  if (!is_number()) type_error(Type::number);
  if (is_int_) return int_;
  // 2^63 is exactly representable; every double in [-2^63, 2^63) fits int64
  KILN_CHECK(std::trunc(num_) == num_ && num_ >= -9223372036854775808.0 && num_ < 9223372036854775808.0,
             "JSON value: expected an integer, got ", dump());
  return int64_t(num_);
}

const std::string& Value::as_string() const {
  if (!is_string()) type_error(Type::string);
  return str_;
}

const std::vector<Value>& Value::as_array() const {
  if (!is_array()) type_error(Type::array);
  return arr_;
}

std::vector<Value>& Value::as_array() {
  if (!is_array()) type_error(Type::array);
  return arr_;
}

void Value::push_back(Value v) {
  if (is_null()) type_ = Type::array;
  as_array().push_back(std::move(v));
}

Value& Value::operator[](const std::string& key) {
  if (is_null()) type_ = Type::object;
  if (!is_object()) type_error(Type::object);
  for (auto& [k, v] : obj_)
    if (k == key) return v;
  obj_.emplace_back(key, Value());
  return obj_.back().second;
}

const Value& Value::at(const std::string& key) const {
  for (const auto& [k, v] : items())
    if (k == key) return v;
  KILN_FAIL("JSON object: missing key \"", key, "\"");
}

bool Value::contains(const std::string& key) const {
  for (const auto& kv : items())
    if (kv.first == key) return true;
  return false;
}

const std::vector<std::pair<std::string, Value>>& Value::items() const {
  if (!is_object()) type_error(Type::object);
  return obj_;
}

size_t Value::size() const {
  if (is_array()) return arr_.size();
  if (is_object()) return obj_.size();
  KILN_FAIL("JSON value: size() needs an array or an object, got ", type_name(type_));
}

size_t invalid_utf8_at(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = uint8_t(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    // The lead byte gives the length and the range of the second byte (Unicode's table
    // 3-7), which rules out overlong forms (E0, F0), surrogates (ED) and > U+10FFFF (F4).
    size_t n = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) n = 2;
    else if (b >= 0xE0 && b <= 0xEF) n = 3;
    else if (b >= 0xF0 && b <= 0xF4) n = 4;
    else return i;  // a continuation byte, C0/C1 (always overlong) or F5..FF
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
    if (i + n > s.size() || uint8_t(s[i + 1]) < lo || uint8_t(s[i + 1]) > hi) return i;
    for (size_t k = 2; k < n; ++k)
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return i;
    i += n;
  }
  return std::string_view::npos;
}

// ---------------------------------------------------------------- writer

namespace {

void dump_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (uint8_t(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(uint8_t(c)));
          out += buf;
        } else {
          out += c;  // UTF-8 bytes pass through
        }
    }
  }
  out += '"';
}

void newline(std::string& out, int indent, int depth) {
  out += '\n';
  out.append(size_t(indent) * size_t(depth), ' ');
}

}  // namespace

void Value::dump_to(std::string& out, int indent, int depth) const {
  char buf[32];
  switch (type_) {
    case Type::null: out += "null"; return;
    case Type::boolean: out += bool_ ? "true" : "false"; return;
    case Type::number: {
      KILN_CHECK(std::isfinite(num_), "JSON: cannot write ", num_, ": JSON numbers cannot be NaN or infinite");
      auto r = is_int_ ? std::to_chars(buf, buf + sizeof buf, int_) : std::to_chars(buf, buf + sizeof buf, num_);
      out.append(buf, r.ptr);
      return;
    }
    case Type::string: dump_string(out, str_); return;
    case Type::array: {
      bool flat = true;  // arrays of scalars stay on one line when indenting
      for (const auto& v : arr_) flat = flat && !v.is_array() && !v.is_object();
      out += '[';
      for (size_t i = 0; i < arr_.size(); ++i) {
        if (i) out += indent >= 0 && flat ? ", " : ",";
        if (indent >= 0 && !flat) newline(out, indent, depth + 1);
        arr_[i].dump_to(out, indent, depth + 1);
      }
      if (indent >= 0 && !flat && !arr_.empty()) newline(out, indent, depth);
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      for (size_t i = 0; i < obj_.size(); ++i) {
        if (i) out += ',';
        if (indent >= 0) newline(out, indent, depth + 1);
        dump_string(out, obj_[i].first);
        out += indent >= 0 ? ": " : ":";
        obj_[i].second.dump_to(out, indent, depth + 1);
      }
      if (indent >= 0 && !obj_.empty()) newline(out, indent, depth);
      out += '}';
      return;
    }
  }
}

std::string Value::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

// ---------------------------------------------------------------- parser

class Parser {
 public:
  Parser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  Value parse_document() {
    Value v = value(0);
    ws();
    if (i_ < s_.size()) fail("expected the end of the text after the value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 512;

  [[noreturn]] void fail(const std::string& msg) {
    std::string got = i_ < s_.size() ? "'" + std::string(1, s_[i_]) + "'" : std::string("the end of the text");
    if (i_ < s_.size() && uint8_t(s_[i_]) < 0x20) got = "byte " + std::to_string(unsigned(uint8_t(s_[i_])));
    KILN_FAIL(what_, ": invalid JSON at byte ", i_, ": ", msg, ", found ", got);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) fail("expected a value (object, array, string, number, true, false or null)");
    i_ += word.size();
  }

  Value value(int depth) {
    ws();
    if (i_ >= s_.size()) fail("expected a value");
    switch (s_[i_]) {
      case '{': return object(depth + 1);
      case '[': return array(depth + 1);
      case '"': return Value(string());
      case 't': literal("true"); return Value(true);
      case 'f': literal("false"); return Value(false);
      case 'n': literal("null"); return Value();
      default: return number();
    }
  }

  Value object(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    ++i_;  // '{'
    Value v = Value::object();
    if (eat('}')) return v;
    std::unordered_set<std::string> keys;
    do {
      ws();
      const size_t at = i_;
      if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
      std::string key = string();
      if (!keys.insert(key).second) {
        i_ = at;
        fail("duplicate key \"" + key + "\"");
      }
      if (!eat(':')) fail("expected ':' after the key");
      v.obj_.emplace_back(std::move(key), value(depth));
    } while (eat(','));
    if (!eat('}')) fail("expected ',' or '}'");
    return v;
  }

  Value array(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    ++i_;  // '['
    Value v = Value::array();
    if (eat(']')) return v;
    do v.arr_.push_back(value(depth));
    while (eat(','));
    if (!eat(']')) fail("expected ',' or ']'");
    return v;
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
      const char c = i_ < s_.size() ? s_[i_] : '\0';
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("expected 4 hex digits after \\u");
      u = u * 16 + unsigned(d);
    }
    return u;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      const size_t start = i_;
      while (i_ < s_.size() && s_[i_] != '"' && s_[i_] != '\\' && uint8_t(s_[i_]) >= 0x20) ++i_;
      out.append(s_.substr(start, i_ - start));
      if (i_ >= s_.size()) fail("unterminated string: expected '\"'");
      const char c = s_[i_];
      if (c == '"') return ++i_, out;
      if (c != '\\') fail("control characters must be escaped in strings");
      ++i_;
      const char e = i_ < s_.size() ? s_[i_] : '\0';
      const char* simple = std::strchr("\"\\/bfnrt", e);
      if (e != '\0' && simple) {
        out += "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
        ++i_;
        continue;
      }
      if (e != 'u') fail("invalid escape: expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX");
      ++i_;
      uint32_t cp = hex4();
      if (cp >= 0xDC00 && cp <= 0xDFFF) {
        i_ -= 6;
        fail("lone low surrogate \\u" + std::string(s_.substr(i_ + 2, 4)));
      }
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (s_.substr(i_, 2) != "\\u") fail("expected \\u and a low surrogate after a high surrogate");
        i_ += 2;
        const uint32_t lo = hex4();
        if (lo < 0xDC00 || lo > 0xDFFF) {
          i_ -= 6;
          fail("expected a low surrogate (\\uDC00 to \\uDFFF) after a high surrogate");
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      append_utf8(out, cp);
    }
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  Value number() {
    const size_t start = i_;
    auto at = [&](size_t k) { return k < s_.size() ? s_[k] : '\0'; };
    if (at(i_) == '-') ++i_;
    if (at(i_) == '0') ++i_;
    else if (digit(at(i_))) while (digit(at(i_))) ++i_;
    else fail(i_ == start ? "expected a value (object, array, string, number, true, false or null)"
                          : "expected a digit after '-'");
    bool integral = true;
    if (at(i_) == '.') {
      integral = false;
      ++i_;
      if (!digit(at(i_))) fail("expected a digit after '.'");
      while (digit(at(i_))) ++i_;
    }
    if (at(i_) == 'e' || at(i_) == 'E') {
      integral = false;
      ++i_;
      if (at(i_) == '+' || at(i_) == '-') ++i_;
      if (!digit(at(i_))) fail("expected a digit in the exponent");
      while (digit(at(i_))) ++i_;
    }
    const char* b = s_.data() + start;
    const char* e = s_.data() + i_;
    if (integral && std::string_view(b, e) != "-0") {
      int64_t v = 0;
      if (std::from_chars(b, e, v).ec == std::errc()) return Value(v);
    }
    double d = 0;
    if (std::from_chars(b, e, d).ec != std::errc())  // out of range: strtod rounds underflow to 0 / subnormals
      d = std::strtod(std::string(b, e).c_str(), nullptr);
    if (!std::isfinite(d)) {
      i_ = start;
      fail("number " + std::string(b, e) + " is out of the range of a double");
    }
    return Value(d);
  }

  std::string_view s_;
  const std::string& what_;
  size_t i_ = 0;
};

Value parse(std::string_view text, const std::string& what) { return Parser(text, what).parse_document(); }

}  // namespace kiln::json
