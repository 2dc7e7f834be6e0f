// PNG files (8-bit RGB) for the plots of the `kiln` command, encoded by stb_image_write.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::monitor {

/// Encodes `rgb` (height rows of width*3 bytes, top row first) as a PNG file image (8-bit
/// truecolour). Throws kiln::Error for a non-positive or huge size.
std::vector<uint8_t> encode_png(const uint8_t* rgb, int width, int height);

/// encode_png() written to `path` atomically (temp file + rename); kiln::Error naming
/// the path when it cannot be written.
void write_png(const std::string& path, const uint8_t* rgb, int width, int height);

}  // namespace kiln::monitor
