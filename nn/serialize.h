// Checkpoint files: tensors in the safetensors format, and a JSON form of small tensor
// maps (optimizer / scheduler / GradScaler state) for a side file.
//
// safetensors (https://github.com/huggingface/safetensors), readable by Python's
// `safetensors` package, numpy or torch:
//   [8 bytes]  N, the header length, unsigned 64-bit little-endian
//   [N bytes]  UTF-8 JSON header, padded with spaces so 8 + N is a multiple of 8:
//              {"__metadata__": {"step": "100"},
//               "fc.weight": {"dtype": "F32", "shape": [10, 84], "data_offsets": [0, 3360]}, ...}
//   [rest]     the byte buffer: each tensor's little-endian, row-major bytes at
//              [begin, end) relative to the buffer start, back to back in header order.
// dtypes: F32, F64, F16, BF16, I64, I32, U8, BOOL (kiln's eight).
//
//   kiln::save(model.state_dict(), "model.safetensors", {{"step", "100"}});
//   model.load_state_dict(kiln::load("model.safetensors"));
//   std::string side = kiln::tensors_to_json(opt.state_dict()).dump(1);  // write_file_atomic it
//   opt.load_state_dict(kiln::tensors_from_json(json::parse(side, "opt.json"), "opt.json"));
// Files are written atomically (temp file + fsync + rename) with an XXH3 checksum per
// tensor; loading validates every field and each checksum and throws kiln::Error naming
// the file and the problem, never reading out of bounds.
#pragma once
#include <map>
#include <string>
#include "kiln/core/json.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/module.h"

namespace kiln {

/// The "__metadata__" key of the per-tensor checksums: a JSON object, tensor name -> XXH3-64
/// of its bytes in 16 hex digits.
inline constexpr const char* kChecksumKey = "kiln.xxh3";

/// Writes `tensors` as a safetensors file, atomically (see write_file_atomic, which also
/// keeps `keep` - 1 older copies). Tensors on any device/contiguity (copied to CPU
/// contiguous); dtypes F32, F64, F16, BF16, I64, I32, U8, BOOL. `metadata` goes into
/// "__metadata__" (string -> string), with each tensor's checksum under kChecksumKey.
void save(const nn::StateDict& tensors, const std::string& path,
          const std::map<std::string, std::string>& metadata = {}, int keep = 1);

/// Reads a safetensors file: tensors on the CPU, in file order. A file with checksums
/// (every file kiln writes) has each tensor verified: a flipped bit is an error naming
/// the tensor, not silently wrong weights.
nn::StateDict load(const std::string& path);

/// The "__metadata__" of a safetensors file (empty when it has none); reads only the header.
std::map<std::string, std::string> load_metadata(const std::string& path);

/// JSON form of a tensor map (optimizer / scheduler / GradScaler state_dict()): one entry
/// per tensor {"dtype": "float32", "shape": [..], and either "value": number (one element,
/// finite: written exactly) or "data": base64 of the little-endian bytes}. Round trips
/// through tensors_from_json are bitwise exact for every dtype.
json::Value tensors_to_json(const std::map<std::string, Tensor>& tensors);

/// Inverse of tensors_to_json (CPU tensors). Errors are kiln::Error naming `what`
/// (e.g. the file name) and the tensor.
std::map<std::string, Tensor> tensors_from_json(const json::Value& v, const std::string& what);

}  // namespace kiln
