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
void write_file_atomic(const std::string& path, std::span<const std::string_view> pieces);

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
