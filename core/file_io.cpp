// File input/output helpers: zlib's gz* API (which also reads plain files) for reads,
// temp-file + fsync + rename for writes.
#include "kiln/core/file_io.h"
#include <zlib.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>
#include <cstdlib>
#include "kiln/core/error.h"

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

namespace {

constexpr const char* kTempMarker = ".tmp.";  // path + ".tmp.<pid>.<nonce>.<n>" (see temp_file_prefix)

// A random 64-bit number drawn once per process, in 16 hex digits: with the pid it tells
// this process's temp files from those of an earlier process that had the same pid (in a
// container kiln is PID 1 at every start).
const std::string& process_nonce() {
  static const std::string nonce = [] {
    std::random_device rd;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x%08x", unsigned(rd()), unsigned(rd()));
    return std::string(buf);
  }();
  return nonce;
}

// Whether the process `pid` that named a temp file may still be writing it. kill(pid, 0)
// alone also says yes for a killed process its parent has not reaped yet (a zombie, seen
// for seconds after a kill under mpirun or a container's init) and for an unrelated
// process that got the pid later; /proc tells both apart: state Z or X is dead, and a
// process started after the file was last written cannot have written it.
bool writer_alive(long pid, const fs::path& file) {
  if (::kill(pid_t(pid), 0) != 0) return false;
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return true;  // no /proc: trust kill()
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // "pid (comm) state ..."; comm may hold spaces and ')'
  if (!p || p[1] != ' ') return true;
  const char state = p[2];
  if (state == 'Z' || state == 'X') return false;
  // field 22, starttime, in clock ticks since boot: the 20th field after ") "
  unsigned long long start = 0;
  const char* q = p + 2;
  for (int field = 3; field < 22 && q; ++field) q = std::strchr(q + 1, ' ');
  if (!q || std::sscanf(q, "%llu", &start) != 1) return true;
  static const long long boot = [] {  // btime: boot, in seconds since the epoch
    long long b = -1;
    if (std::FILE* s = std::fopen("/proc/stat", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, s))
        if (std::sscanf(line, "btime %lld", &b) == 1) break;
      std::fclose(s);
    }
    return b;
  }();
  const long hz = ::sysconf(_SC_CLK_TCK);
  struct stat st{};
  if (boot < 0 || hz <= 0 || ::stat(file.c_str(), &st) != 0) return true;
  const long long started = boot + static_cast<long long>(start / static_cast<unsigned long long>(hz));
  return started <= static_cast<long long>(st.st_mtime) + 2;  // btime and ticks: a second or two of slack
}

// Makes a rename or a new link in `dir` durable: fsync of the folder itself.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // not every file system lets a folder be opened; the rename still happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string temp_file_prefix(const std::string& path) {
  return path + kTempMarker + std::to_string(::getpid()) + "." + process_nonce() + ".";
}

std::string kept_file_path(const std::string& path, int k) {
  const fs::path p(path);
  const std::string ext = p.extension().string(), k_str = std::string(".").append(std::to_string(k));
  if (ext.empty()) return path + k_str;
  return (p.parent_path() / (p.stem().string() + k_str + ext)).string();
}

void write_file_atomic(const std::string& path, std::span<const std::string_view> pieces, int keep) {
  static std::atomic<uint64_t> counter{0};
  KILN_CHECK(keep >= 1, "cannot write '", path, "': keep must be at least 1 (the file itself), got ", keep);
  fs::path target(path);
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  KILN_CHECK(fs::is_directory(dir, ec), "cannot write '", path, "': folder '", dir.string(), "' does not exist");
  const std::string tmp = temp_file_prefix(path) + std::to_string(counter++);
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
  // Older copies move down one place (the oldest is overwritten), then the current file is
  // linked (or copied) as copy 1 before the new one replaces it: a kill at any point
  // leaves `path` complete, at worst with a duplicate among the older copies.
  if (keep > 1 && fs::exists(target, ec)) {
    for (int k = keep - 1; k >= 2; --k)
      if (fs::exists(kept_file_path(path, k - 1), ec)) fs::rename(kept_file_path(path, k - 1), kept_file_path(path, k), ec);
    const std::string link_tmp = tmp + ".keep";
    if (::link(path.c_str(), link_tmp.c_str()) != 0) fs::copy_file(target, link_tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(link_tmp, kept_file_path(path, 1), ec);
    // Gone after a rename, except when copy 1 already was `path` (a kill between that
    // rename and the one below leaves two links to one file): POSIX rename() between two
    // links to the same file does nothing. Keeping a copy is best effort; the new file is not.
    std::remove(link_tmp.c_str());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    KILN_FAIL("cannot write '", path, "': renaming '", tmp, "' failed: ", std::strerror(e));
  }
  fsync_dir(dir);
}

int remove_stale_temp_files(const std::string& path) {
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + kTempMarker;
  const std::string ours = fs::path(temp_file_prefix(path)).filename().string();
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (name.rfind(ours, 0) == 0) continue;  // our own write in progress (another thread)
    // name = prefix + "<pid>.<nonce>.<n>[.keep]": remove it unless the process that wrote it
    // still runs (our pid with another nonce: an earlier process, e.g. before a container restart)
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && pid != long(::getpid()) && writer_alive(pid, e.path())) continue;
    if (fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace kiln
