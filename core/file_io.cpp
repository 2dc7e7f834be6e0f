// File input/output helpers: zlib's gz* API (which also reads plain files) for reads,
// temp-file + fsync + rename for writes.
#include "core/file_io.h"
#include <zlib.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include "core/error.h"

namespace kiln {

namespace fs = std::filesystem;

FileReader::FileReader(const std::string& path) : path_(path) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  KILN_CHECK(fs::exists(st), "cannot open '", path, "': no such file");
  KILN_CHECK(!fs::is_directory(st), "cannot read '", path, "': it is a directory");
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  KILN_CHECK(f != nullptr, "cannot open '", path, "': ", errno ? std::strerror(errno) : "zlib gzopen failed");
  gzbuffer(f, 1 << 17);
  f_ = f;
}

FileReader::~FileReader() {
  if (f_) gzclose(static_cast<gzFile>(f_));
}

size_t FileReader::read(void* dst, size_t n) {
  gzFile f = static_cast<gzFile>(f_);
  size_t got = 0;
  char* p = static_cast<char*>(dst);
  while (got < n) {
    const unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
    int r = gzread(f, p + got, chunk);
    if (r < 0) fail();
    if (r == 0) {  // end of data, or a truncated gzip member
      int err = Z_OK;
      const char* msg = gzerror(f, &err);
      if (err != Z_OK && err != Z_STREAM_END) fail(msg);
      break;
    }
    got += size_t(r);
  }
  return got;
}

void FileReader::fail(const char* msg) {
  int err = Z_OK;
  if (!msg) msg = gzerror(static_cast<gzFile>(f_), &err);
  KILN_FAIL("cannot read '", path_, "': corrupt or truncated data (zlib: ", msg ? msg : "unknown error", ")");
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  FileReader r(path);
  std::vector<uint8_t> out;
  size_t n = 0;
  {
    std::error_code ec;
    auto sz = fs::file_size(path, ec);
    out.resize(ec ? size_t(1) << 20 : size_t(sz) + 1);
  }
  for (;;) {
    n += r.read(out.data() + n, out.size() - n);
    if (n < out.size()) break;
    out.resize(out.size() * 2);
  }
  out.resize(n);
  return out;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, std::span<const std::string_view>(&bytes, 1));
}

void write_file_atomic(const std::string& path, std::span<const std::string_view> pieces) {
  static std::atomic<uint64_t> counter{0};
  fs::path target(path);
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  KILN_CHECK(fs::is_directory(dir, ec), "cannot write '", path, "': folder '", dir.string(), "' does not exist");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  KILN_CHECK(f != nullptr, "cannot write '", path, "': cannot create temporary file '", tmp, "': ",
             std::strerror(errno));
  bool ok = true;
  for (std::string_view p : pieces) ok = ok && std::fwrite(p.data(), 1, p.size(), f) == p.size();
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(::fileno(f)) == 0 && ok;
  const int saved = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    KILN_FAIL("cannot write '", path, "': writing '", tmp, "' failed: ", std::strerror(saved ? saved : errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    KILN_FAIL("cannot write '", path, "': renaming '", tmp, "' failed: ", std::strerror(e));
  }
}

}  // namespace kiln
