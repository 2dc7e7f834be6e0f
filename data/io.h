// File helpers of the data readers: whole-file reads (plain or gzip, detected by the
// gzip magic bytes), atomic writes (temp file + rename), and the IDX format reader
// (MNIST / Fashion-MNIST). Errors are kiln::Error naming the file and the problem.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "core/tensor.h"

namespace kiln::data {

/// The bytes of a file; gzip-compressed files are decompressed transparently.
std::vector<uint8_t> read_file_bytes(const std::string& path);

/// Writes `bytes` to `path` atomically: a temporary file in the same folder is
/// written, flushed and renamed over `path`, so readers never see a partial file.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// Reads an IDX file (plain or .gz): magic 0x0000TTNN (TT the element type, NN the
/// number of dims), NN big-endian int32 sizes, then the data (big-endian elements).
/// Returns a tensor of that shape: uint8 (0x08), int32 (0x09 int8, 0x0B int16, 0x0C
/// int32), float32 (0x0D) or float64 (0x0E). With `expected_magic` (e.g. 0x00000803
/// for MNIST images), any other magic is an error that prints both in hex.
Tensor read_idx(const std::string& path, std::optional<uint32_t> expected_magic = std::nullopt);

/// The first of `candidates` (file names inside `root`) that exists, as a path;
/// otherwise throws an error from `who` listing every path tried.
std::string find_file(const std::string& root, const std::vector<std::string>& candidates, const char* who);

}  // namespace kiln::data
