// Whole-file reads (plain or gzip, detected by zlib), a sequential file reader, and
// atomic writes (temp file + fsync + rename) shared by data/ readers and nn/ checkpoints.
// Errors are kiln::Error naming the file and the problem.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

/// The bytes of a file; gzip-compressed files are decompressed transparently.
std::vector<uint8_t> read_file_bytes(const std::string& path);

/// Writes `bytes` to `path` atomically: a temporary file in the same folder is
/// written, flushed and renamed over `path`, so readers never see a partial file and an
/// existing file is replaced only when the write succeeded.
void write_file_atomic(const std::string& path, std::string_view bytes);
/// Same, with the content given as consecutive pieces (written in order, never joined).
/// The file is fsync'd before the rename and its folder after it, so once this returns
/// the new content survives a power loss. With keep > 1 the file it replaces is kept as
/// kept_file_path(path, 1), that one as kept_file_path(path, 2), and so on up to keep - 1
/// older copies; `path` itself always holds a complete file, old or new, at every moment.
void write_file_atomic(const std::string& path, std::span<const std::string_view> pieces, int keep = 1);

/// The k-th older copy of `path` kept by write_file_atomic (k >= 1):
/// "run.safetensors" -> "run.1.safetensors"; "data" -> "data.1".
std::string kept_file_path(const std::string& path, int k);

/// The start of the names of the temporary files this process writes for `path`:
/// path + ".tmp.<pid>.<nonce>." (then a counter, and ".keep" for the link that becomes
/// copy 1), where nonce is a random 64-bit number in 16 hex digits drawn once per process.
std::string temp_file_prefix(const std::string& path);

/// Removes the temporary files of writes to `path` that were interrupted: what a kill
/// during write_file_atomic leaves behind. Kept: this process's own (temp_file_prefix) and
/// those whose pid is another running process's, unless /proc shows that process to be a
/// zombie (killed, not yet reaped) or to have started after the file was last written (the
/// pid reused); a file with this process's pid but another nonce is an earlier process's (a
/// container's PID 1 before a restart) and goes.
/// Returns how many were removed.
int remove_stale_temp_files(const std::string& path);

/// Sequential reader over a plain or gzip-compressed file (zlib tells them apart).
class FileReader {
 public:
  /// Opens `path`; throws when it is missing, a folder, or unreadable.
  explicit FileReader(const std::string& path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  /// Reads up to n bytes; returns how many were read (fewer only at the end of the data).
  /// Throws on corrupt or truncated compressed data.
  size_t read(void* dst, size_t n);
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const char* msg = nullptr);
  std::string path_;
  void* f_ = nullptr;  // gzFile
};

}  // namespace kiln
