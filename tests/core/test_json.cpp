// kiln::json: parse/dump round trips (nesting, unicode escapes, exact int64, bitwise
// doubles), parse errors with byte offsets (truncation, trailing garbage, bad escapes,
// deep nesting), and wrong-type accessors.
#include <doctest/doctest.h>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "gradcheck.h"

using kiln::json::Value;
using kiln::json::parse;
using kiln::test::error_of;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
}  // namespace

TEST_CASE("json: build, dump and parse back a nested value, keeping key order") {
  Value v;  // null becomes an object on operator[]
  v["zeta"] = 1;
  v["alpha"] = "text";
  v["list"].push_back(true);
  v["list"].push_back(nullptr);
  v["list"].push_back(2.5);
  v["list"].push_back(Value::object());
  v["nested"]["deeper"]["x"] = int64_t(-7);
  v["empty_array"] = Value::array();
  CHECK(v.is_object());
  CHECK(v.size() == 5);
  CHECK(v.items()[0].first == "zeta");  // insertion order, not sorted
  CHECK(v.items()[1].first == "alpha");
  const std::string compact = v.dump();
  CHECK(compact == R"({"zeta":1,"alpha":"text","list":[true,null,2.5,{}],"nested":{"deeper":{"x":-7}},"empty_array":[]})");
  for (int indent : {-1, 0, 1, 2, 4}) {
    Value w = parse(v.dump(indent));
    CHECK(w.dump() == compact);
  }
  const std::string pretty = v.dump(2);
  CHECK(has(pretty, "\n  \"zeta\": 1,\n"));
  CHECK(has(pretty, "\"empty_array\": []"));
  Value w = parse(pretty);
  CHECK(w.at("nested").at("deeper").at("x").as_int() == -7);
  CHECK(w.at("list").as_array()[1].is_null());
  CHECK(w.at("list").as_array()[0].as_bool());
  CHECK(w.contains("alpha"));
  CHECK_FALSE(w.contains("beta"));
  // arrays of scalars stay on one line when indenting
  Value shape = Value::array();
  for (int s : {3, 4, 5}) shape.push_back(s);
  Value o;
  o["shape"] = shape;
  CHECK(o.dump(1) == "{\n \"shape\": [3, 4, 5]\n}");
}

TEST_CASE("json: strings with escapes, unicode escapes and surrogate pairs") {
  CHECK(parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string() == "a\"b\\c/d\b\f\n\r\t");
  CHECK(parse(R"("\u00e9")").as_string() == "\xC3\xA9");           // é
  CHECK(parse(R"("\u20AC")").as_string() == "\xE2\x82\xAC");       // €
  CHECK(parse(R"("\ud83d\ude00")").as_string() == "\xF0\x9F\x98\x80");  // U+1F600 from a surrogate pair
  CHECK(parse("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"").as_string() == "caf\xC3\xA9 \xF0\x9F\x98\x80");  // raw UTF-8
  // control characters are written as \uXXXX or short escapes, and read back
  std::string s = "x";
  for (int c = 1; c < 0x20; ++c) s += char(c);
  s += "\"\\\xC3\xA9";
  const std::string dumped = Value(s).dump();
  CHECK(has(dumped, "\\u0001"));
  CHECK(has(dumped, "\\n"));
  for (char c : dumped) CHECK(uint8_t(c) >= 0x20);
  CHECK(parse(dumped).as_string() == s);
  CHECK(parse(Value(std::string("nul\0inside", 10)).dump()).as_string() == std::string("nul\0inside", 10));
}

TEST_CASE("json: invalid_utf8_at finds the first byte that is not valid UTF-8 (RFC 3629)") {
  using kiln::json::invalid_utf8_at;
  constexpr size_t ok = std::string::npos;
  CHECK(invalid_utf8_at("") == ok);
  CHECK(invalid_utf8_at(std::string("ascii \0 nul", 11)) == ok);
  CHECK(invalid_utf8_at("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF \xED\x9F\xBF") == ok);
  CHECK(invalid_utf8_at("caf\xE9.txt") == 3);              // Latin-1
  CHECK(invalid_utf8_at("a\xFF\xFE") == 1);
  CHECK(invalid_utf8_at("\xC0\xAF") == 0);                // overlong '/'
  CHECK(invalid_utf8_at("\xE0\x80\xAF") == 0);            // overlong, 3 bytes
  CHECK(invalid_utf8_at("\xF0\x80\x80\xAF") == 0);        // overlong, 4 bytes
  CHECK(invalid_utf8_at("x\xC3\x28") == 1);               // a lead byte without its continuation
  CHECK(invalid_utf8_at("\xED\xA0\x80") == 0);            // a surrogate (U+D800)
  CHECK(invalid_utf8_at("\xF4\x90\x80\x80") == 0);        // above U+10FFFF
  CHECK(invalid_utf8_at("\xF5\x80\x80\x80") == 0);
  CHECK(invalid_utf8_at("\x80") == 0);                    // a lone continuation byte
  CHECK(invalid_utf8_at("ab\xE2\x82") == 2);              // cut off
  CHECK(invalid_utf8_at("\xF0\x9F\x98") == 0);
}

TEST_CASE("json: integers stay exact int64, doubles round-trip bitwise") {
  CHECK(parse("9223372036854775807").as_int() == INT64_MAX);
  CHECK(parse("-9223372036854775808").as_int() == INT64_MIN);
  CHECK(parse("9007199254740993").as_int() == 9007199254740993LL);  // 2^53 + 1: not a double
  CHECK(Value(INT64_MAX).dump() == "9223372036854775807");
  CHECK(Value(uint64_t(INT64_MAX)).as_int() == INT64_MAX);
  CHECK(parse("12").is_int());
  CHECK_FALSE(parse("12.0").is_int());
  CHECK(parse("12.0").as_int() == 12);  // integral doubles convert
  CHECK(parse("1e3").as_int() == 1000);
  // 2^63 does not fit int64: kept as a double, and as_int refuses it
  Value big = parse("9223372036854775808");
  CHECK(big.as_number() == 9223372036854775808.0);
  CHECK(has(error_of([&] { big.as_int(); }), "expected an integer"));
  CHECK(has(error_of([&] { parse("1.5").as_int(); }), "1.5"));

  std::vector<double> values = {0.1, 1.0 / 3.0, -0.0, 0.0, 5e-324, DBL_MIN, DBL_MAX, -DBL_MAX, 1e21, 1e-7,
                                123456789.125, 2.0, 1e300, std::nextafter(1.0, 2.0)};
  std::mt19937_64 gen(1234);
  while (values.size() < 2000) {  // random bit patterns across every exponent
    uint64_t u = gen();
    double d;
    std::memcpy(&d, &u, 8);
    if (std::isfinite(d)) values.push_back(d);
  }
  int bad = 0;
  for (double d : values) {
    Value arr = Value::array();
    arr.push_back(d);
    const double back = parse(arr.dump()).as_array()[0].as_number();
    if (bits(back) != bits(d)) ++bad;
  }
  CHECK(bad == 0);
  CHECK(std::signbit(parse("-0").as_number()));
  CHECK(std::signbit(parse(Value(-0.0).dump()).as_number()));
  CHECK(parse("1e-400").as_number() == 0.0);  // underflow rounds to zero like any JSON reader
  CHECK(parse("  [ 1 , -2.5e+2 , 3E-1 ]  ").dump() == "[1,-250,0.3]");
}

TEST_CASE("json: parse errors name the source, the byte offset and what was expected") {
  std::string e = error_of([] { parse(R"({"a": 1,})", "config.json"); });
  CHECK(has(e, "config.json"));
  CHECK(has(e, "byte 8"));
  CHECK(has(e, "expected a string key"));
  e = error_of([] { parse("[1, 2"); });
  CHECK(has(e, "byte 5"));
  CHECK(has(e, "expected ',' or ']'"));
  CHECK(has(e, "the end of the text"));
  e = error_of([] { parse("{} x"); });
  CHECK(has(e, "byte 3"));
  CHECK(has(e, "end of the text after the value"));
  e = error_of([] { parse(R"("ab\x")"); });
  CHECK(has(e, "invalid escape"));
  CHECK(has(e, "byte 4"));
  CHECK(has(error_of([] { parse(R"("\u12")"); }), "4 hex digits"));
  CHECK(has(error_of([] { parse(R"("\ud83d")"); }), "low surrogate"));
  CHECK(has(error_of([] { parse(R"("\ude00")"); }), "lone low surrogate"));
  CHECK(has(error_of([] { parse(R"("\ud83d\u0041")"); }), "low surrogate"));
  CHECK(has(error_of([] { parse("\"tab\there\""); }), "control characters"));
  CHECK(has(error_of([] { parse("\"open"); }), "unterminated string"));
  CHECK(has(error_of([] { parse(R"({"k": 1, "k": 2})"); }), "duplicate key \"k\""));
  CHECK(has(error_of([] { parse(R"({"k" 1})"); }), "expected ':'"));
  CHECK(has(error_of([] { parse(""); }), "expected a value"));
  for (const char* bad : {"01", "-", "1.", ".5", "1e", "+1", "NaN", "Infinity", "tru", "nul", "[1,]", "{,}", "1e400"})
    CHECK_MESSAGE(error_of([&] { parse(bad); }) != "(no error)", bad);
  // every prefix of a valid document is an error, never a crash
  const std::string doc = R"({"a": [1, 2.5, "x\u00e9"], "b": {"c": null, "d": true}})";
  parse(doc);
  for (size_t n = 0; n < doc.size(); ++n) CHECK_MESSAGE(has(error_of([&] { parse(doc.substr(0, n)); }), "byte"), n);
}

TEST_CASE("json: nesting is limited to 512 levels (no stack overflow on hostile input)") {
  auto nested = [](size_t n) { return std::string(n, '[') + std::string(n, ']'); };
  CHECK(parse(nested(512)).is_array());
  CHECK(has(error_of([&] { parse(nested(513)); }), "nesting deeper than 512"));
  CHECK(has(error_of([&] { parse(std::string(1'000'000, '[')); }), "nesting deeper than 512"));
  std::string objs;
  for (int i = 0; i < 600; ++i) objs += "{\"a\":";
  CHECK(has(error_of([&] { parse(objs); }), "nesting deeper"));
}

TEST_CASE("json: wrong-type accessors and unwritable values throw kiln::Error") {
  CHECK(has(error_of([] { Value(1).as_string(); }), "expected string, got number"));
  CHECK(has(error_of([] { Value("s").as_number(); }), "expected number, got string"));
  CHECK(has(error_of([] { Value().as_bool(); }), "expected boolean, got null"));
  CHECK(has(error_of([] { Value(true).as_array(); }), "expected array, got boolean"));
  CHECK(has(error_of([] { Value::array().items(); }), "expected object, got array"));
  CHECK(has(error_of([] { Value(2.5)["k"]; }), "expected object, got number"));
  CHECK(has(error_of([] { Value(2.5).push_back(1); }), "expected array, got number"));
  CHECK(has(error_of([] { Value(2.5).size(); }), "size()"));
  CHECK(has(error_of([] { parse(R"({"a": 1})").at("missing"); }), "missing key \"missing\""));
  CHECK(has(error_of([] { Value(uint64_t(INT64_MAX) + 1); }), "int64"));
  CHECK(has(error_of([] { Value(std::nan("")).dump(); }), "NaN or infinite"));
  CHECK(has(error_of([] { Value(-INFINITY).dump(); }), "NaN or infinite"));
  CHECK_THROWS_AS(parse("[1"), kiln::Error);
}
