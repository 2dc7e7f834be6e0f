// File input for the data readers: the IDX parser streaming straight into the tensor
// through core's FileReader (plain or gzip), and find_file.
#include "kiln/data/io.h"
#include <algorithm>
#include <bit>
#include <filesystem>
#include <iomanip>
#include <fstream>
#include <sstream>
#include "kiln/core/checked_math.h"
#include "kiln/core/error.h"

namespace kiln::data {

namespace fs = std::filesystem;

namespace {

std::string hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

uint32_t be32(const uint8_t* p) { return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]; }

// True when the file starts with the gzip magic bytes 1f 8b.
bool is_gzip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char m[2] = {};
  return f.read(m, 2) && uint8_t(m[0]) == 0x1f && uint8_t(m[1]) == 0x8b;
}

}  // namespace

std::string find_file(const std::string& root, const std::vector<std::string>& candidates, const char* who) {
  std::error_code ec;
  KILN_CHECK(fs::is_directory(root, ec), who, ": folder '", root, "' does not exist");
  std::string tried;
  for (const auto& c : candidates) {
    fs::path p = fs::path(root) / c;
    if (fs::is_regular_file(p, ec)) return p.string();
    tried += (tried.empty() ? "'" : ", '") + p.string() + "'";
  }
  KILN_FAIL(who, ": missing file: none of ", tried, " exists");
}

static_assert(std::endian::native == std::endian::little, "read_idx assumes a little-endian host");

Tensor read_idx(const std::string& path, std::optional<uint32_t> expected_magic) {
  FileReader r(path);
  uint8_t head[4];
  size_t got = r.read(head, 4);
  KILN_CHECK(got == 4, "read_idx: '", path, "' is truncated: ", got, " bytes, shorter than the 4-byte IDX magic number");
  const uint32_t magic = be32(head);
  if (expected_magic)
    KILN_CHECK(magic == *expected_magic, "read_idx: '", path, "': wrong magic number: expected ",
               hex32(*expected_magic), ", found ", hex32(magic));
  KILN_CHECK(head[0] == 0 && head[1] == 0, "read_idx: '", path, "': not an IDX file: magic number ", hex32(magic),
             " should start with two zero bytes (0x0000TTNN)");
  const int type = head[2], nd = head[3];
  DType dt;
  int esize;
  switch (type) {
    case 0x08: dt = DType::uint8; esize = 1; break;
    case 0x09: dt = DType::int32; esize = 1; break;
    case 0x0B: dt = DType::int32; esize = 2; break;
    case 0x0C: dt = DType::int32; esize = 4; break;
    case 0x0D: dt = DType::float32; esize = 4; break;
    case 0x0E: dt = DType::float64; esize = 8; break;
    default:
      KILN_FAIL("read_idx: '", path, "': unknown element type 0x", std::hex, type, " in magic number ", hex32(magic),
                " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)");
  }
  KILN_CHECK(nd >= 1 && nd <= 8, "read_idx: '", path, "': magic number ", hex32(magic), " declares ", nd,
             " dimensions (expected 1 to 8)");
  std::vector<uint8_t> dims_raw(size_t(nd) * 4);
  got = r.read(dims_raw.data(), dims_raw.size());
  KILN_CHECK(got == dims_raw.size(), "read_idx: '", path, "' is truncated: the header declares ", nd,
             " dimensions but ends after ", 4 + got, " bytes");
  Shape shape(static_cast<size_t>(nd));
  std::string dims_str;
  for (int d = 0; d < nd; ++d) {
    shape[size_t(d)] = int64_t(be32(dims_raw.data() + 4 * d));
    KILN_CHECK(shape[size_t(d)] < (int64_t(1) << 31), "read_idx: '", path, "': dimension ", d, " has an invalid size ",
               shape[size_t(d)], " (expected below 2^31)");
    dims_str += (d ? " x " : "") + std::to_string(shape[size_t(d)]);
  }
  const std::string who = "read_idx: '" + path + "'";
  const int64_t count = shape_numel(shape, who.c_str());
  const int64_t nbytes = checked_mul(count, esize, who.c_str(), shape);
  KILN_CHECK(nbytes < (int64_t(1) << 40), who, ": header claims an absurd size ", dims_str);
  // The header must fit the file's real size before anything is allocated: a plain file
  // holds exactly the header and the data; deflate inflates at most 1032:1.
  std::error_code ec;
  const int64_t on_disk = int64_t(fs::file_size(path, ec)), header = 4 + 4 * int64_t(nd);
  if (!ec) {
    const bool gz = is_gzip(path);
    const int64_t room = gz ? checked_mul(on_disk, 1032, who.c_str(), shape) : on_disk - header;
    KILN_CHECK(nbytes <= room, who, " is truncated: the header claims ", dims_str, " elements (", nbytes,
               " bytes of data) but the file ", gz ? "can decompress to at most " : "holds only ", room,
               " bytes of data");
    KILN_CHECK(gz || nbytes == room, who, ": unexpected bytes after the ", nbytes, " bytes of data the header (",
               dims_str, ") declares");
  }
  Tensor out = Tensor::empty(shape, dt);
  // raw big-endian payload: read straight into the tensor when no widening is needed
  std::vector<uint8_t> staging;
  void* dst = out.raw_data();
  if (esize != int(dtype_size(dt))) {
    staging.resize(size_t(nbytes));
    dst = staging.data();
  }
  got = r.read(dst, size_t(nbytes));
  KILN_CHECK(got == size_t(nbytes), "read_idx: '", path, "' is truncated: the header claims ", dims_str, " elements (",
             nbytes, " bytes of data) but the file holds only ", got, " bytes of data");
  uint8_t extra;
  KILN_CHECK(r.read(&extra, 1) == 0, "read_idx: '", path, "': unexpected bytes after the ", nbytes,
             " bytes of data the header (", dims_str, ") declares");
  // byte order: IDX is big-endian
  const int64_t n = count;
  if (type == 0x09) {
    int32_t* o = out.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = int8_t(staging[size_t(i)]);
  } else if (type == 0x0B) {
    int32_t* o = out.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = int16_t(uint16_t((staging[size_t(2 * i)] << 8) | staging[size_t(2 * i + 1)]));
  } else if (esize > 1) {
    uint8_t* p = static_cast<uint8_t*>(out.raw_data());
    for (int64_t i = 0; i < n; ++i) std::reverse(p + i * esize, p + (i + 1) * esize);
  }
  return out;
}

}  // namespace kiln::data
