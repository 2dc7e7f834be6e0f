// safetensors writer and validating reader, and the JSON (value or base64) form of
// tensor maps used for optimizer / scheduler / GradScaler side files.
#include "kiln/nn/serialize.h"
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>
#include "kiln/core/file_io.h"

#define XXH_INLINE_ALL  // header-only use of Debian's xxHash (libxxhash-dev)
#if defined(__AVX512F__)
#define XXH_VECTOR 2    // its AVX2 path: GCC 12 warns inside the AVX-512 one, and AVX2 is plenty here
#endif
#include <xxhash.h>

namespace kiln {

static_assert(std::endian::native == std::endian::little, "kiln's checkpoint files assume a little-endian host");

namespace {

// kiln dtype <-> safetensors dtype code
struct DTypeCode {
  DType dtype;
  const char* code;
};
constexpr DTypeCode kCodes[] = {{DType::float32, "F32"}, {DType::float64, "F64"}, {DType::float16, "F16"},
                                {DType::bfloat16, "BF16"}, {DType::int64, "I64"},  {DType::int32, "I32"},
                                {DType::uint8, "U8"},      {DType::bool_, "BOOL"}};

const char* st_code(DType d) {
  for (const auto& c : kCodes)
    if (c.dtype == d) return c.code;
  KILN_FAIL("save: no safetensors code for dtype ", dtype_name(d));
}

// A detached, contiguous CPU copy (or the tensor itself when it already is one).
Tensor host_contiguous(const Tensor& t) { return t.detach().to(Device::cpu()).contiguous(); }

std::string_view bytes_of(const Tensor& t) {
  return {static_cast<const char*>(t.raw_data()), size_t(t.numel()) * t.element_size()};
}

// The integrity check of a tensor's bytes: XXH3-64 as 16 hex digits.
std::string checksum_hex(const void* data, size_t n) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(XXH3_64bits(data, n)));
  return buf;
}

// ---- base64 (RFC 4648, with '=' padding)

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    const size_t n = std::min<size_t>(3, in.size() - i);
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (n > 1) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (n > 2) v |= uint8_t(in[i + 2]);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kB64[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// Decodes into dst (exactly n bytes expected); returns false on any malformed input.
bool base64_decode(std::string_view in, uint8_t* dst, size_t n) {
  if (in.size() % 4 != 0 || in.size() / 4 != (n + 2) / 3) return false;
  size_t o = 0;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = in[i + k];
      const char* p = c ? std::strchr(kB64, c) : nullptr;
      if (c == '=' && i + 4 == in.size() && k >= 2) ++pad;
      else if (!p || pad) return false;  // a bad character, or data after '='
      v = v << 6 | uint32_t(p ? p - kB64 : 0);
    }
    const size_t m = size_t(3 - pad);
    if (o + m != std::min(n, o + 3)) return false;
    for (size_t k = 0; k < m; ++k) dst[o++] = uint8_t(v >> (16 - 8 * k));
  }
  return o == n;
}

// ---- reading a safetensors header

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

struct Header {
  File file;
  json::Value json;
  uint64_t data_size = 0;  // bytes of the buffer after the header
};

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit

Header read_header(const std::string& path) {
  std::error_code ec;
  KILN_CHECK(std::filesystem::is_regular_file(path, ec), "load: cannot open '", path, "': ",
             std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
  Header h;
  h.file.reset(std::fopen(path.c_str(), "rb"));
  KILN_CHECK(h.file, "load: cannot open '", path, "': ", std::strerror(errno));
  const uint64_t size = std::filesystem::file_size(path, ec);
  KILN_CHECK(!ec, "load: cannot read the size of '", path, "': ", ec.message());
  uint8_t len[8];
  KILN_CHECK(size >= 8 && std::fread(len, 1, 8, h.file.get()) == 8, "load: '", path, "' is not a safetensors file: ",
             size, " bytes is too short for the 8-byte header length");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = n << 8 | len[k];
  KILN_CHECK(n <= size - 8, "load: '", path, "' is not a safetensors file or is truncated: header length ", n,
             " is larger than the rest of the file (", size - 8, " bytes)");
  KILN_CHECK(n <= kMaxHeader, "load: '", path, "': header length ", n, " is over the ", kMaxHeader,
             "-byte limit of the safetensors format");
  std::string text(size_t(n), '\0');
  KILN_CHECK(std::fread(text.data(), 1, text.size(), h.file.get()) == text.size(), "load: '", path,
             "': read error in the header");
  const size_t bad = json::invalid_utf8_at(text);
  KILN_CHECK(bad == std::string::npos, "load: '", path, "': the header is not valid UTF-8 (at byte ", bad,
             " of it); safetensors headers are UTF-8 JSON");
  h.json = json::parse(text, "load: '" + path + "': header");
  KILN_CHECK(h.json.is_object(), "load: '", path, "': the header is a JSON ",
             json::Value::type_name(h.json.type()), ", expected an object");
  h.data_size = size - 8 - n;
  return h;
}

std::map<std::string, std::string> metadata_of(const Header& h, const std::string& path) {
  std::map<std::string, std::string> m;
  if (!h.json.contains("__metadata__")) return m;
  const json::Value& md = h.json.at("__metadata__");
  KILN_CHECK(md.is_object(), "load: '", path, "': \"__metadata__\" must be an object of strings");
  for (const auto& [k, v] : md.items()) {
    KILN_CHECK(v.is_string(), "load: '", path, "': \"__metadata__\" entry \"", k, "\" is a ",
               json::Value::type_name(v.type()), ", expected a string");
    m.emplace(k, v.as_string());
  }
  return m;
}

// Product of a shape's sizes times the element size; false on overflow.
bool byte_size(const Shape& shape, size_t esize, uint64_t& out) {
  uint64_t n = esize;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, uint64_t(s), &n)) return false;
  out = n;
  return true;
}

Shape shape_from_json(const json::Value& v) {
  Shape shape;
  for (const auto& d : v.as_array()) {
    shape.push_back(d.as_int());
    KILN_CHECK(shape.back() >= 0, "negative size ", shape.back());
  }
  return shape;
}

// `s` for an error message: bytes outside printable ASCII as \xNN.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    char buf[5];
    std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(uint8_t(c)));
    out += uint8_t(c) >= 0x20 && uint8_t(c) < 0x7F ? std::string(1, c) : std::string(buf);
  }
  return out;
}

// The header is UTF-8 JSON (Python's reader refuses any other): `what` names the string,
// shown around its first bad byte.
void check_utf8(const std::string& path, const std::string& what, const std::string& s) {
  const size_t bad = json::invalid_utf8_at(s);
  if (bad == std::string::npos) return;
  const size_t from = bad < 40 ? 0 : bad - 40;
  KILN_FAIL("save: '", path, "': ", what, " \"", from ? "..." : "", printable(s.substr(from, 80)),
            from + 80 < s.size() ? "..." : "", "\" is not valid UTF-8 (at byte ", bad, "); a safetensors header must be UTF-8");
}

}  // namespace

// ---------------------------------------------------------------- safetensors

void save(const nn::StateDict& tensors, const std::string& path, const std::map<std::string, std::string>& metadata,
          int keep) {
  json::Value header = json::Value::object(), md = json::Value::object();
  header["__metadata__"] = json::Value::object();  // first in the header; filled in below
  for (const auto& [k, v] : metadata) {
    check_utf8(path, "metadata key", k);
    check_utf8(path, "metadata \"" + printable(k) + "\": value", v);
    md[k] = v;
  }
  KILN_CHECK(!metadata.count(kChecksumKey), "save: '", path, "': metadata key \"", kChecksumKey, "\" is kiln's own");
  json::Value checksums = json::Value::object();
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__", "save: '", path, "': \"__metadata__\" is reserved and cannot name a tensor");
    KILN_CHECK(t.defined(), "save: '", path, "': tensor '", name, "' is undefined");
    check_utf8(path, "tensor name", name);
    host.push_back(host_contiguous(t));
    const std::string_view bytes = bytes_of(host.back());
    const uint64_t nbytes = bytes.size();
    checksums[name] = checksum_hex(bytes.data(), bytes.size());
    json::Value& e = header[name] = json::Value::object();
    e["dtype"] = st_code(t.dtype());
    e["shape"] = json::Value::array();
    for (int64_t s : t.shape()) e["shape"].push_back(s);
    e["data_offsets"] = json::Value::array();
    e["data_offsets"].push_back(offset);
    e["data_offsets"].push_back(offset + nbytes);
    offset += nbytes;
  }
  md[kChecksumKey] = checksums.dump();
  header["__metadata__"] = std::move(md);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the buffer starts 8-byte aligned
  char len[8];
  for (int k = 0; k < 8; ++k) len[k] = char(uint64_t(text.size()) >> (8 * k));
  std::vector<std::string_view> pieces{std::string_view(len, 8), text};
  for (const Tensor& t : host) pieces.push_back(bytes_of(t));
  write_file_atomic(path, pieces, keep);
}

nn::StateDict load(const std::string& path) {
  Header h = read_header(path);
  const auto metadata = metadata_of(h, path);  // validates it
  json::Value checksums;  // files kiln wrote carry one per tensor; others have none
  if (auto it = metadata.find(kChecksumKey); it != metadata.end()) {
    checksums = json::parse(it->second, "load: '" + path + "': metadata \"" + kChecksumKey + "\"");
    KILN_CHECK(checksums.is_object(), "load: '", path, "': metadata \"", kChecksumKey, "\" must be a JSON object");
  }
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, v] : h.json.items()) {
    if (name == "__metadata__") continue;
    try {
      const std::string& code = v.at("dtype").as_string();
      const DTypeCode* dc = std::find_if(std::begin(kCodes), std::end(kCodes),
                                         [&](const DTypeCode& c) { return code == c.code; });
      KILN_CHECK(dc != std::end(kCodes), "unsupported dtype \"", code,
                 "\" (kiln reads F32, F64, F16, BF16, I64, I32, U8 and BOOL)");
      Shape shape = shape_from_json(v.at("shape"));
      const auto& off = v.at("data_offsets");
      KILN_CHECK(off.is_array() && off.size() == 2, "data_offsets must be [begin, end]");
      const int64_t b = off.as_array()[0].as_int(), e = off.as_array()[1].as_int();
      KILN_CHECK(b >= 0 && b <= e, "data_offsets [", b, ", ", e, "] must satisfy 0 <= begin <= end");
      uint64_t nbytes = 0;
      const bool sized = byte_size(shape, dtype_size(dc->dtype), nbytes);
      KILN_CHECK(sized && uint64_t(e - b) == nbytes, "data_offsets [", b, ", ", e, "] hold ", e - b, " bytes but ",
                 code, " ", shape_str(shape), " needs ", sized ? std::to_string(nbytes) : std::string("more than 2^64"));
      KILN_CHECK(uint64_t(e) <= h.data_size, "data_offsets [", b, ", ", e, "] run past the end of the data buffer (",
                 h.data_size, " bytes; is the file truncated?)");
      entries.push_back({name, dc->dtype, std::move(shape), uint64_t(b), uint64_t(e)});
    } catch (const Error& err) {
      KILN_FAIL("load: '", path, "': tensor '", name, "': ", err.what());
    }
  }
  // the tensors must tile the buffer exactly: no overlap, no hole
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t pos = 0;
  for (const Entry& e : entries) {
    KILN_CHECK(e.begin == pos, "load: '", path, "': tensor '", e.name, "' starts at byte ", e.begin, " of the data buffer but ",
               e.begin < pos ? "it overlaps the previous tensor, which ends" : "the previous tensor ends", " at byte ", pos,
               " (tensors must cover the buffer without holes or overlaps)");
    pos = e.end;
  }
  KILN_CHECK(pos == h.data_size, "load: '", path, "': the tensors cover ", pos, " bytes but the data buffer has ",
             h.data_size, " (tensors must cover the buffer without holes)");
  nn::StateDict out;
  for (const Entry& e : entries) {
    Tensor t;
    try {  // more dims than kiln supports, or out of memory
      t = Tensor::empty(e.shape, e.dtype);
    } catch (const Error& err) {
      KILN_FAIL("load: '", path, "': tensor '", e.name, "': ", err.what());
    }
    const size_t n = size_t(e.end - e.begin);
    KILN_CHECK(std::fread(t.raw_data(), 1, n, h.file.get()) == n, "load: '", path, "': read error in tensor '", e.name,
               "' (was the file changed while reading?)");
    if (checksums.is_object()) {
      KILN_CHECK(checksums.contains(e.name) && checksums.at(e.name).is_string(), "load: '", path, "': tensor '", e.name,
                 "' has no checksum in \"", kChecksumKey, "\"");
      const std::string want = checksums.at(e.name).as_string(), got = checksum_hex(t.raw_data(), n);
      KILN_CHECK(want == got, "load: '", path, "': tensor '", e.name, "' does not match its checksum (stored ", want,
                 ", computed ", got, "): the file is damaged");
    }
    if (e.dtype == DType::bool_) {  // any byte other than 0/1 is not a valid C++ bool
      const uint8_t* p = static_cast<const uint8_t*>(t.raw_data());
      KILN_CHECK(std::all_of(p, p + n, [](uint8_t b) { return b <= 1; }), "load: '", path, "': BOOL tensor '", e.name,
                 "' holds bytes other than 0 and 1");
    }
    out.insert(e.name, std::move(t));
  }
  return out;
}

std::map<std::string, std::string> load_metadata(const std::string& path) {
  Header h = read_header(path);
  return metadata_of(h, path);
}

// ---------------------------------------------------------------- JSON form

json::Value tensors_to_json(const std::map<std::string, Tensor>& tensors) {
  json::Value out = json::Value::object();
  for (const auto& [name, t0] : tensors) {
    KILN_CHECK(t0.defined(), "tensors_to_json: tensor '", name, "' is undefined");
    const Tensor t = host_contiguous(t0);
    json::Value& e = out[name] = json::Value::object();
    e["dtype"] = dtype_name(t.dtype());
    e["shape"] = json::Value::array();
    for (int64_t s : t.shape()) e["shape"].push_back(s);
    json::Value value;
    if (t.numel() == 1) {
      KILN_DISPATCH_ALL(t.dtype(), "tensors_to_json", [&]<class T>() {
        const T x = *static_cast<const T*>(t.raw_data());
        if constexpr (std::is_integral_v<T>) value = json::Value(int64_t(x));
        else if (std::isfinite(double(x))) value = json::Value(double(x));  // exact: every float widens to double
      });
    }
    if (!value.is_null()) e["value"] = std::move(value);
    else e["data"] = base64_encode(bytes_of(t));
  }
  return out;
}

std::map<std::string, Tensor> tensors_from_json(const json::Value& v, const std::string& what) {
  KILN_CHECK(v.is_object(), what, ": expected a JSON object of tensors, got ", json::Value::type_name(v.type()));
  std::map<std::string, Tensor> out;
  for (const auto& [name, e] : v.items()) {
    try {
      const std::string& dn = e.at("dtype").as_string();
      const DTypeCode* dc = std::find_if(std::begin(kCodes), std::end(kCodes),
                                         [&](const DTypeCode& c) { return dn == dtype_name(c.dtype); });
      KILN_CHECK(dc != std::end(kCodes), "unknown dtype \"", dn, "\"");
      const Shape shape = shape_from_json(e.at("shape"));
      uint64_t nbytes = 0;
      const bool sized = byte_size(shape, dtype_size(dc->dtype), nbytes);
      KILN_CHECK(e.contains("value") != e.contains("data"), "expected exactly one of \"value\" and \"data\"");
      // check the size against the content before allocating anything
      if (e.contains("value"))
        KILN_CHECK(sized && nbytes == dtype_size(dc->dtype), "\"value\" needs a one-element shape, got ", shape_str(shape));
      else
        KILN_CHECK(sized && e.at("data").as_string().size() == (nbytes + 2) / 3 * 4, "\"data\" holds ",
                   e.at("data").as_string().size(), " base64 characters but ", dn, " ", shape_str(shape), " needs ",
                   sized ? std::to_string((nbytes + 2) / 3 * 4) : std::string("too many"));
      Tensor t = Tensor::empty(shape, dc->dtype);
      if (e.contains("value")) {
        const json::Value& x = e.at("value");
        KILN_DISPATCH_ALL(t.dtype(), "tensors_from_json", [&]<class T>() {
          T* p = static_cast<T*>(t.raw_data());
          if constexpr (std::is_same_v<T, bool>) {
            const int64_t i = x.as_int();
            KILN_CHECK(i == 0 || i == 1, "bool value must be 0 or 1, got ", i);
            *p = i != 0;
          } else if constexpr (std::is_integral_v<T>) {
            const int64_t i = x.as_int();
            KILN_CHECK(i >= int64_t(std::numeric_limits<T>::min()) && i <= int64_t(std::numeric_limits<T>::max()),
                       "value ", i, " does not fit ", dtype_name(dtype_v<T>));
            *p = T(i);
          } else if constexpr (std::is_same_v<T, double>) {
            *p = x.as_number();
          } else {
            *p = T(float(x.as_number()));
          }
        });
      } else {
        const std::string& d = e.at("data").as_string();
        const size_t n = size_t(t.numel()) * t.element_size();
        uint8_t* p = static_cast<uint8_t*>(t.raw_data());
        KILN_CHECK(base64_decode(d, p, n), "\"data\" is not valid base64 of ", n, " bytes (", dn, " ",
                   shape_str(t.shape()), ")");
        KILN_CHECK(t.dtype() != DType::bool_ || std::all_of(p, p + n, [](uint8_t b) { return b <= 1; }),
                   "bool data holds bytes other than 0 and 1");
      }
      out.emplace(name, std::move(t));
    } catch (const Error& err) {
      KILN_FAIL(what, ": tensor '", name, "': ", err.what());
    }
  }
  return out;
}

}  // namespace kiln
