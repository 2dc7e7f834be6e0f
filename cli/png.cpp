// A minimal PNG encoder: each chunk is [length][type][data][CRC32 of type+data], big-endian;
// the pixels go into IDAT as zlib-compressed scanlines, each led by its filter byte (0: none).
#include "cli/png.h"
#include <zlib.h>
#include <cstring>
#include <string_view>
#include "core/error.h"
#include "core/file_io.h"

namespace kiln::cli {

namespace {

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const uint8_t* data, size_t n) {
  put_be32(out, uint32_t(n));
  const size_t start = out.size();  // the CRC covers the type and the data
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data, data + n);
  put_be32(out, uint32_t(crc32(0L, out.data() + start, uInt(n + 4))));
}

}  // namespace

std::vector<uint8_t> encode_png(const uint8_t* rgb, int width, int height) {
  KILN_CHECK(rgb != nullptr && width > 0 && height > 0 && width <= 32768 && height <= 32768,
             "encode_png: expected an RGB image of 1..32768 x 1..32768 pixels, got ", width, " x ", height,
             rgb ? "" : " (null pixels)");
  const size_t row = size_t(width) * 3;
  std::vector<uint8_t> raw(size_t(height) * (row + 1));  // (H, 1 + 3W): filter byte + pixels
  for (int y = 0; y < height; ++y) {
    raw[y * (row + 1)] = 0;
    std::memcpy(&raw[y * (row + 1) + 1], rgb + y * row, row);
  }
  uLongf zlen = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(zlen);
  KILN_CHECK(compress2(z.data(), &zlen, raw.data(), uLong(raw.size()), 6) == Z_OK,
             "encode_png: zlib compress2 failed for a ", width, " x ", height, " image");

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, uint32_t(width));
  put_be32(ihdr, uint32_t(height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // bit depth 8, colour type 2 (RGB), deflate, filter 0, no interlace
  put_chunk(png, "IHDR", ihdr.data(), ihdr.size());
  put_chunk(png, "IDAT", z.data(), zlen);
  put_chunk(png, "IEND", nullptr, 0);
  return png;
}

void write_png(const std::string& path, const uint8_t* rgb, int width, int height) {
  const std::vector<uint8_t> png = encode_png(rgb, width, height);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
}

}  // namespace kiln::cli
