// Checkpoint files (nn/serialize.h): safetensors round trips of every dtype and of a
// model, metadata, atomic replacement, validation of corrupted files, the JSON form of an
// optimizer state, and a check that Python's reader (check_safetensors.py) sees the values.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include "data/data_test_util.h"
#include "gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/nn/serialize.h"
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_HAS_ASAN 1
#endif
#endif
#ifndef KILN_TEST_HAS_ASAN
#define KILN_TEST_HAS_ASAN 0
#endif

using namespace kiln;
using kiln::test::error_of;
using kiln_test::TempDir;
namespace fs = std::filesystem;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void put_bytes(const std::string& path, const std::string& bytes) {
  fs::remove(path);  // a fresh file: truncating one makes ext4 flush it first (slow)
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

/// The raw bytes of a tensor in row-major order (bitwise comparisons, NaN included).
std::string raw(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  return {static_cast<const char*>(c.raw_data()), size_t(c.numel()) * c.element_size()};
}
bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && raw(a) == raw(b);
}

/// A safetensors file from a header text and a data buffer (for hand-made bad files).
std::string st_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int k = 0; k < 8; ++k) out[size_t(k)] = char(uint64_t(header.size()) >> (8 * k));
  return out + header + data;
}

/// One tensor of each dtype, with awkward values (NaN, inf, -0, extremes).
nn::StateDict every_dtype() {
  manual_seed(7);
  nn::StateDict sd;
  Tensor f = randn({3, 4});
  f.data<float>()[1] = NAN;
  f.data<float>()[2] = -INFINITY;
  f.data<float>()[3] = -0.0f;
  sd.insert("f32", f);
  sd.insert("f64", randn({2, 3}, {.dtype = DType::float64}));
  sd.insert("f16", randn({5}).to(DType::float16));
  sd.insert("bf16", randn({2, 2, 2}).to(DType::bfloat16));
  Tensor i64 = randint(-1000, 1000, {4});
  i64.data<int64_t>()[0] = INT64_MIN;
  i64.data<int64_t>()[1] = INT64_MAX;
  sd.insert("i64", i64);
  sd.insert("i32", randint(-5, 5, {2, 3}).to(DType::int32));
  sd.insert("u8", randint(0, 256, {7}).to(DType::uint8));
  sd.insert("bool", randint(0, 2, {3, 1}).to(DType::bool_));
  return sd;
}

}  // namespace

TEST_CASE("safetensors: every dtype, views and 0-d tensors round-trip bitwise, in order") {
  TempDir tmp;
  nn::StateDict sd = every_dtype();
  Tensor base = randn({4, 6}, {.dtype = DType::float64});
  sd.insert("transposed", base.t());                        // non-contiguous view
  sd.insert("strided", base.slice(1, 1, 6, 2));             // step-2 columns, offset 1
  sd.insert("expanded", randn({1, 3}).expand({4, 3}));      // stride 0
  sd.insert("scalar", scalar_tensor(3.25, {.dtype = DType::float32}));
  sd.insert("scalar_i64", scalar_tensor(-42, {.dtype = DType::int64}));
  sd.insert("empty", zeros({0, 5}));
  Tensor w = randn({3});
  w.requires_grad_();
  sd.insert("needs_grad", w);
  const std::string path = tmp / "all.safetensors";
  save(sd, path);

  // layout per the spec: u64 header length, header padded so the buffer is 8-byte aligned
  const std::string bytes = file_bytes(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | uint8_t(bytes[size_t(k)]);
  CHECK((8 + n) % 8 == 0);
  CHECK(bytes[8] == '{');
  uint64_t total = 0;
  for (const auto& [name, t] : sd) total += uint64_t(t.numel()) * t.element_size();
  CHECK(bytes.size() == 8 + n + total);
  json::Value header = json::parse(bytes.substr(8, n));
  CHECK(header.at("bf16").at("dtype").as_string() == "BF16");
  CHECK(header.at("bool").at("dtype").as_string() == "BOOL");
  CHECK(header.at("scalar").at("shape").size() == 0);
  CHECK(header.at("f32").at("data_offsets").as_array()[0].as_int() == 0);
  // the only metadata is the per-tensor checksums
  REQUIRE(header.contains("__metadata__"));
  CHECK(header.at("__metadata__").items().size() == 1);
  const json::Value sums = json::parse(header.at("__metadata__").at(kChecksumKey).as_string());
  CHECK(sums.items().size() == sd.size());

  nn::StateDict back = load(path);
  CHECK(back.keys() == sd.keys());
  for (const auto& entry : sd) {
    const auto& name = entry.first;
    const auto& t = entry.second;
    const Tensor& b = back.at(name);
    CHECK_MESSAGE(same(b, t), name);
    CHECK(b.is_cpu());
    CHECK(b.is_contiguous());
    CHECK_FALSE(b.requires_grad());
  }
  CHECK(back.at("scalar").dim() == 0);
  CHECK(back.at("scalar").item() == 3.25);
  CHECK(std::isnan(back.at("f32").data<float>()[1]));
  CHECK(std::signbit(back.at("f32").data<float>()[3]));

  // an empty state dict is a valid file too
  save(nn::StateDict(), tmp / "none.safetensors");
  CHECK(load(tmp / "none.safetensors").empty());
}

TEST_CASE("safetensors: a LeNet5 state_dict loaded into a fresh model gives identical outputs") {
  TempDir tmp;
  manual_seed(1);
  models::LeNet5 a;
  manual_seed(2);
  models::LeNet5 b;
  Tensor x = randn({2, 1, 28, 28});
  a.eval();
  b.eval();
  REQUIRE_FALSE(same(a(x), b(x)));  // different initialisations
  save(a.state_dict(), tmp / "lenet.safetensors", {{"model", "LeNet5"}});
  b.load_state_dict(load(tmp / "lenet.safetensors"));
  CHECK(same(a(x), b(x)));
  CHECK(load(tmp / "lenet.safetensors").keys() == a.state_dict().keys());
}

TEST_CASE("safetensors: metadata round trip, and names that cannot be saved") {
  TempDir tmp;
  const std::map<std::string, std::string> md = {
      {"step", "1200"}, {"format", "pt"}, {"note", "quote \" backslash \\ newline \n caf\xC3\xA9"}, {"", "empty key"}};
  save({{"w", ones({2})}}, tmp / "m.safetensors", md);
  auto back = load_metadata(tmp / "m.safetensors");
  CHECK(back.erase(kChecksumKey) == 1);  // kiln's own entry beside the caller's
  CHECK(back == md);
  CHECK(load(tmp / "m.safetensors").keys() == std::vector<std::string>{"w"});
  save({{"w", ones({2})}}, tmp / "plain.safetensors");
  CHECK(load_metadata(tmp / "plain.safetensors").size() == 1);
  CHECK(has(error_of([&] { save({{"w", ones({2})}}, tmp / "x.safetensors", {{kChecksumKey, "x"}}); }), "kiln's own"));

  CHECK(has(error_of([&] { save({{"__metadata__", ones({1})}}, tmp / "x.safetensors"); }), "reserved"));
  CHECK(has(error_of([&] { save({{"u", Tensor()}}, tmp / "x.safetensors"); }), "'u' is undefined"));
  CHECK_FALSE(fs::exists(tmp / "x.safetensors"));
  // optimizer-style std::map state converts implicitly (sorted key order)
  std::map<std::string, Tensor> m = {{"b", ones({1})}, {"a", zeros({2})}};
  save(m, tmp / "map.safetensors");
  CHECK(load(tmp / "map.safetensors").keys() == std::vector<std::string>{"a", "b"});
}

TEST_CASE("safetensors: files are replaced only on success, failed saves leave nothing behind") {
  TempDir tmp;
  const std::string path = tmp / "ckpt.safetensors";
  save({{"w", full({3}, 1.0)}}, path);
  const std::string first = file_bytes(path);
  save({{"w", full({3}, 2.0)}}, path);  // success replaces
  CHECK(file_bytes(path) != first);
  CHECK(load(path).at("w").to_vector<double>() == std::vector<double>{2, 2, 2});
  const std::string second = file_bytes(path);
  // a failing save (undefined tensor) keeps the old file
  CHECK_THROWS_AS(save({{"w", full({3}, 3.0)}, {"bad", Tensor()}}, path), Error);
  CHECK(file_bytes(path) == second);
  // a missing folder: the error names the path, nothing is created
  const std::string missing = tmp / "no_such_dir/ckpt.safetensors";
  std::string e = error_of([&] { save({{"w", ones({1})}}, missing); });
  CHECK(has(e, missing));
  CHECK(has(e, "does not exist"));
  CHECK_FALSE(fs::exists(tmp / "no_such_dir"));
  // a rename that fails (the target is a folder) removes its temporary file
  fs::create_directories(tmp / "a_dir");
  fs::create_directories(tmp / "a_dir/inner");  // non-empty, so rename() cannot replace it
  e = error_of([&] { save({{"w", ones({1})}}, tmp / "a_dir"); });
  CHECK(has(e, tmp / "a_dir"));
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(tmp.path)) {
    ++files;
    CHECK_MESSAGE(!has(entry.path().string(), ".tmp."), entry.path().string());
  }
  CHECK(files == 2);  // ckpt.safetensors and a_dir
}

TEST_CASE("safetensors: truncated and corrupted files throw kiln::Error naming the file") {
  TempDir tmp;
  nn::StateDict sd;
  sd.insert("a", randn({4, 3}));
  sd.insert("b", randint(0, 9, {5}));
  sd.insert("c", ones({2}).to(DType::bool_));
  const std::string good_path = tmp / "good.safetensors";
  save(sd, good_path, {{"k", "v"}});
  const std::string good = file_bytes(good_path);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | uint8_t(good[size_t(k)]);
  const std::string path = tmp / "bad.safetensors";
  auto load_error = [&](const std::string& bytes) {
    put_bytes(path, bytes);
    return error_of([&] { load(path); });
  };

  // truncated anywhere: never a crash, always an error naming the file
  for (size_t cut : {size_t(0), size_t(3), size_t(7), size_t(8), size_t(9), size_t(8 + n / 2), size_t(8 + n),
                     size_t(8 + n + 5), good.size() - 1}) {
    const std::string e = load_error(good.substr(0, cut));
    CHECK_MESSAGE(has(e, path), cut, ": ", e);
  }
  CHECK(has(load_error(good.substr(0, 5)), "too short"));
  CHECK(has(load_error(good.substr(0, 8 + n / 2)), "header length"));
  CHECK(has(load_error(good.substr(0, good.size() - 1)), "past the end"));
  CHECK(has(load_error(good + "x"), "cover"));  // extra bytes after the last tensor

  // every single-byte change in the length and header: an error naming the file, or a
  // file that still loads (e.g. a changed letter in a name or in the padding)
  int errors = 0;
  for (size_t i = 0; i < 8 + n; ++i) {
    for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0x20)}) {
      std::string bad = good;
      bad[i] = char(bad[i] ^ flip);
      put_bytes(path, bad);
      try {
        nn::StateDict back = load(path);
        CHECK(back.size() == sd.size());
      } catch (const Error& e) {
        ++errors;
        CHECK_MESSAGE(has(e.what(), path), e.what());
      }
    }
  }
  CHECK(errors > int(8 + n));  // most changes are caught

  // every changed bit in the tensor data is caught by the tensor's checksum (it used to
  // load silently: issue #13)
  for (size_t i = 8 + n; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = char(bad[i] ^ (1 << (i % 8)));
    const std::string e = load_error(bad);
    CHECK_MESSAGE(has(e, "does not match its checksum"), i, ": ", e);
  }

  // hand-made headers, one problem each
  const std::string data(16, '\0');
  auto bad_header = [&](const std::string& header, const std::string& d = std::string(16, '\0')) {
    return load_error(st_file(header, d));
  };
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"),
            "overlaps"));
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"), "starts at byte 8"));  // hole
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"), "cover 8 bytes"));  // tail
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})"), "past the end"));
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})"), "needs 12"));
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})"), "begin <= end"));
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})"), "negative"));
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})"), "2^64"));
  CHECK(has(bad_header(R"({"a":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})"), "unsupported dtype \"C64\""));
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[4]}})"), "data_offsets"));
  CHECK(has(bad_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})"),
            "duplicate key \"a\""));
  CHECK(has(bad_header(R"({"a":{"dtype":"BOOL","shape":[16],"data_offsets":[0,16]}})", std::string(16, '\x07')),
            "other than 0 and 1"));
  CHECK(has(bad_header(R"({"__metadata__":{"k":1}})", ""), "expected a string"));
  CHECK(has(bad_header(R"([1, 2])", ""), "expected an object"));
  CHECK(has(bad_header(R"({"a": )", ""), "invalid JSON"));
  std::string e = bad_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}} junk)");
  CHECK(has(e, path));
  CHECK(has(e, "byte 56"));
  // a well-formed hand-made file loads (so the cases above fail for the stated reason)
  CHECK(load_error(st_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}   )", data)) == "(no error)");

  CHECK(has(error_of([&] { load(tmp / "absent.safetensors"); }), "absent.safetensors"));
  CHECK(has(error_of([&] { load(tmp.path.string()); }), "not a regular file"));
  CHECK(has(error_of([&] { load_metadata(tmp / "absent.safetensors"); }), "no such file"));
}

TEST_CASE("safetensors: headers are UTF-8 both ways, as Python's reader requires") {
  TempDir tmp;
  const std::string path = tmp / "u.safetensors";
  // save refuses names, metadata keys and values that are not UTF-8, naming the file and the key
  std::string e = error_of([&] { save({{"caf\xE9", ones({1})}}, path); });
  CHECK(has(e, path));
  CHECK(has(e, "tensor name \"caf\\xe9\" is not valid UTF-8 (at byte 3)"));
  e = error_of([&] { save({{"w", ones({1})}}, path, {{"a\xFF\xFE", "v"}}); });
  CHECK(has(e, "metadata key \"a\\xff\\xfe\""));
  e = error_of([&] { save({{"w", ones({1})}}, path, {{"data", "runs/caf\xE9.txt"}}); });
  CHECK(has(e, path));
  CHECK(has(e, "metadata \"data\": value \"runs/caf\\xe9.txt\" is not valid UTF-8 (at byte 8)"));
  CHECK_FALSE(fs::exists(path));
  save({{"caf\xC3\xA9 \xF0\x9F\x98\x80", ones({1})}}, path, {{"\xE2\x82\xAC", "\xC3\xA9"}});  // UTF-8 is fine
  CHECK(load(path).keys() == std::vector<std::string>{"caf\xC3\xA9 \xF0\x9F\x98\x80"});

  // load refuses a header that is not UTF-8 (what Python's reader refuses), naming the file
  const std::string data(4, '\0');
  for (const std::string name : {"a\xFF\xFE", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80"}) {
    put_bytes(path, st_file("{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", data));
    e = error_of([&] { load(path); });
    CHECK_MESSAGE(has(e, path + "': the header is not valid UTF-8 (at byte "), e);
  }
  put_bytes(path, st_file("{\"__metadata__\":{\"k\":\"\xC3\x28\"}}", ""));
  CHECK(has(error_of([&] { load_metadata(path); }), "not valid UTF-8 (at byte 22"));
}

TEST_CASE("safetensors: a tensor kiln cannot hold (17 dims, out of memory) is an error naming the file and tensor") {
  TempDir tmp;
  const std::string path = tmp / "big.safetensors";
  std::string shape = "1";
  for (int k = 0; k < 16; ++k) shape += ",1";
  put_bytes(path, st_file(R"({"deep":{"dtype":"F32","shape":[)" + shape + R"(],"data_offsets":[0,4]}})", std::string(4, '\0')));
  std::string e = error_of([&] { load(path); });
  CHECK(has(e, "load: '" + path + "': tensor 'deep': "));
  CHECK(has(e, "at most 16 dims"));

#if defined(__SANITIZE_ADDRESS__) || KILN_TEST_HAS_ASAN
  MESSAGE("the out-of-memory case is skipped under ASan (its shadow memory needs more address space than the limit)");
#else
  // A 1 GiB tensor (a sparse file, no checksum) loaded by a child process whose address
  // space may grow by 256 MiB only: the allocation fails as it does when memory runs out.
  put_bytes(path, st_file(R"({"large":{"dtype":"U8","shape":[1073741824],"data_offsets":[0,1073741824]}})", ""));
  fs::resize_file(path, fs::file_size(path) + (uint64_t(1) << 30));
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;  // the address space in use, in pages
    const rlim_t limit = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(256) << 20);
    const rlimit lim{limit, limit};
    std::string msg = "setrlimit failed";
    if (::setrlimit(RLIMIT_AS, &lim) == 0) msg = error_of([&] { load(path); });
    (void)!::write(out[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(out[1]);
  std::string msg;
  char buf[512];
  for (ssize_t got; (got = ::read(out[0], buf, sizeof buf)) > 0;) msg.append(buf, size_t(got));
  ::close(out[0]);
  ::waitpid(child, nullptr, 0);
  CHECK_MESSAGE(has(msg, "load: '" + path + "': tensor 'large': cpu allocator: out of memory"), msg);
#endif
}

TEST_CASE("tensors_to_json: an Adam state round-trips bitwise and resumes identically") {
  manual_seed(3);
  nn::Linear lin1(5, 4), lin2(5, 4);
  lin2.load_state_dict(lin1.state_dict());
  optim::Adam opt1(lin1.parameters(), {.lr = 0.01});
  auto train_step = [](nn::Linear& m, optim::Optimizer& o, const Tensor& x) {
    o.zero_grad();
    sum(m(x) * m(x)).backward();
    o.step();
  };
  std::vector<Tensor> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(randn({3, 5}));
  for (int i = 0; i < 3; ++i) train_step(lin1, opt1, xs[size_t(i)]);

  const optim::StateDict sd = opt1.state_dict();
  const json::Value j = tensors_to_json(sd);
  const std::string text = j.dump(1);
  // scalars are readable numbers, buffers are base64
  CHECK(j.at("step_count").at("value").as_int() == 3);
  CHECK(j.at("param_groups.0.lr").at("value").as_number() == 0.01);
  CHECK(j.at("state.0.exp_avg").contains("data"));
  CHECK(j.at("state.0.exp_avg").at("dtype").as_string() == "float32");
  const auto back = tensors_from_json(json::parse(text, "opt.json"), "opt.json");
  REQUIRE(back.size() == sd.size());
  for (const auto& kt : sd) CHECK_MESSAGE(same(back.at(kt.first), kt.second), kt.first);

  // a fresh optimizer restored from the JSON continues exactly like the original
  lin2.load_state_dict(lin1.state_dict());
  optim::Adam opt2(lin2.parameters(), {.lr = 0.5});
  opt2.load_state_dict(back);
  train_step(lin1, opt1, xs[3]);
  train_step(lin2, opt2, xs[3]);
  CHECK(same(lin1.weight, lin2.weight));
  CHECK(same(lin1.bias, lin2.bias));
}

TEST_CASE("tensors_to_json: every dtype and special value, and errors naming the source") {
  std::map<std::string, Tensor> m = every_dtype();
  m["nan_scalar"] = scalar_tensor(NAN);                 // not a JSON number: written as data
  m["inf_half"] = full({1}, INFINITY).to(DType::float16);
  m["neg_zero"] = scalar_tensor(-0.0, {.dtype = DType::float64});
  m["tiny"] = scalar_tensor(5e-324, {.dtype = DType::float64});
  m["one_bf16"] = scalar_tensor(0.1).to(DType::bfloat16);
  m["true"] = scalar_tensor(1).to(DType::bool_);
  m["i64_max"] = full({1, 1}, 0, {.dtype = DType::int64});
  m["i64_max"].data<int64_t>()[0] = INT64_MAX;
  m["u8"] = scalar_tensor(255).to(DType::uint8);
  m["view"] = randn({4, 4}).t();
  const json::Value j = tensors_to_json(m);
  CHECK(j.at("nan_scalar").contains("data"));
  CHECK(j.at("inf_half").contains("data"));
  CHECK(j.at("i64_max").at("value").as_int() == INT64_MAX);
  CHECK(j.at("true").at("value").as_int() == 1);
  const auto back = tensors_from_json(json::parse(j.dump()), "state.json");
  REQUIRE(back.size() == m.size());
  for (const auto& kt : m) CHECK_MESSAGE(same(back.at(kt.first), kt.second), kt.first);

  auto err = [](const std::string& text) {
    return error_of([&] { tensors_from_json(json::parse(text), "state.json"); });
  };
  std::string e = err(R"({"w": {"dtype": "float32", "shape": [2], "data": "AAAAAAAAAA=="}})");
  CHECK(has(e, "state.json"));
  CHECK(has(e, "'w'"));
  CHECK(has(e, "base64"));
  CHECK(has(err(R"({"w": {"dtype": "float32", "shape": [2], "data": "AAAAAAAA"}})"), "needs 12"));
  CHECK(has(err(R"({"w": {"dtype": "float32", "shape": [2], "data": "AAAA*AAAAAA="}})"), "not valid base64"));
  CHECK(has(err(R"({"w": {"dtype": "float32", "shape": [2], "value": 1}})"), "one-element"));
  CHECK(has(err(R"({"w": {"dtype": "float32", "shape": [1], "value": 1, "data": "AAAAAA=="}})"), "exactly one"));
  CHECK(has(err(R"({"w": {"dtype": "complex", "shape": [1], "value": 1}})"), "unknown dtype"));
  CHECK(has(err(R"({"w": {"dtype": "uint8", "shape": [], "value": 300}})"), "does not fit uint8"));
  CHECK(has(err(R"({"w": {"dtype": "int64", "shape": [], "value": 1.5}})"), "expected an integer"));
  CHECK(has(err(R"({"w": {"dtype": "bool", "shape": [], "value": 2}})"), "0 or 1"));
  CHECK(has(err(R"({"w": {"shape": [], "value": 2}})"), "missing key \"dtype\""));
  CHECK(has(err(R"({"w": {"dtype": "float32", "shape": [1e30], "data": ""}})"), "'w'"));
  CHECK(has(err(R"([1])"), "expected a JSON object"));
}

TEST_CASE("safetensors: Python reads kiln's file (check_safetensors.py)") {
  if (std::system("python3 -c 'import json, struct' > /dev/null 2>&1") != 0) {
    MESSAGE("skipped: python3 is not available");
    return;
  }
  TempDir tmp;
  const std::string script = (fs::path(__FILE__).parent_path() / "check_safetensors.py").string();
  REQUIRE(fs::exists(script));
  nn::StateDict sd;
  sd.insert("weight", arange(0, 6, 1, {.dtype = DType::float32}).reshape({2, 3}).t());  // non-contiguous
  sd.insert("bias", from_vector(std::vector<double>{0.1, -2.5}));
  sd.insert("half", from_vector(std::vector<float>{1.5f, -0.25f}).to(DType::float16));
  sd.insert("bf16", from_vector(std::vector<float>{3.0f, 0.5f}).to(DType::bfloat16));
  sd.insert("ids", from_vector(std::vector<int64_t>{-7, 123456789012345LL}));
  sd.insert("mask", from_vector(std::vector<float>{1, 0, 1}).to(DType::bool_));
  sd.insert("count", scalar_tensor(9, {.dtype = DType::int32}));
  const std::string path = tmp / "py.safetensors";
  save(sd, path, {{"step", "42"}});
  const std::string out_path = tmp / "out.txt";
  const int rc = std::system(("python3 '" + script + "' '" + path + "' > '" + out_path + "' 2>&1").c_str());
  const std::string out = file_bytes(out_path);
  INFO(out);
  REQUIRE(rc == 0);
  MESSAGE("check_safetensors.py: " << out.substr(0, out.find('\n')));
  CHECK(has(out, "metadata step=42\n"));
  CHECK(has(out, "tensor name=weight dtype=F32 shape=3,2 values=0.0,3.0,1.0,4.0,2.0,5.0\n"));
  CHECK(has(out, "tensor name=bias dtype=F64 shape=2 values=0.1,-2.5\n"));
  CHECK(has(out, "tensor name=half dtype=F16 shape=2 values=1.5,-0.25\n"));
  CHECK(has(out, "tensor name=bf16 dtype=BF16 shape=2 values=3.0,0.5\n"));
  CHECK(has(out, "tensor name=ids dtype=I64 shape=2 values=-7,123456789012345\n"));
  CHECK(has(out, "tensor name=mask dtype=BOOL shape=3 values=1,0,1\n"));
  CHECK(has(out, "tensor name=count dtype=I32 shape= values=9\n"));
  // the file order is kept
  CHECK(out.find("name=weight") < out.find("name=bias"));
  CHECK(out.find("name=mask") < out.find("name=count"));
  // and a corrupted file makes the script fail
  std::string bad = file_bytes(path);
  bad.resize(bad.size() - 3);
  put_bytes(tmp / "bad.safetensors", bad);
  CHECK(std::system(("python3 '" + script + "' '" + (tmp / "bad.safetensors") + "' > /dev/null 2>&1").c_str()) != 0);
}
