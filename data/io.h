// File helpers of the data readers: the IDX format reader (MNIST / Fashion-MNIST) and
// find_file; whole-file reads and atomic writes come from core/file_io.h.
// Errors are kiln::Error naming the file and the problem.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "kiln/core/file_io.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

// Kept here too, for code written against kiln::data (see core/file_io.h).
using kiln::read_file_bytes;
using kiln::write_file_atomic;

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
