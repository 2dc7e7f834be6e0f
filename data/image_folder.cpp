// ImageFolder and the image helpers. This is the one file that compiles stb_image
// (STB_IMAGE_STATIC: its symbols stay private to this file, so kiln users may link
// their own copy). Decoding happens on the thread that asks, so DataLoader workers
// decode in parallel.
#include "kiln/data/image_folder.h"
#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <cmath>
#include <filesystem>
#include "kiln/core/error.h"
#include "kiln/data/io.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_NO_STDIO
// stb_image 2.27's JPEG bit reader can shift a 32-bit value by 32 (undefined in C) when a
// marker interrupts corrupt entropy-coded data: its code-bit count goes negative
// (stb_image.h:2065, found by fuzz_image, seed 1; upstream 2.28 stops at the end of the
// bits instead). Nothing outside stb can see it coming short of decoding the Huffman
// stream. In practice it is harmless: the compilers emit a plain shift, whose count x86-64
// and AArch64 take modulo 32 (a shift by 0); the bits read are garbage and the decode
// fails ("unknown marker") or yields a garbage image from a corrupt file. So that one
// UBSan check is off for stb's functions, and only for them: kiln's own code in this file
// keeps every check.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((no_sanitize("shift-exponent"))), apply_to = function)
#endif
#include "stb_image.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC diagnostic pop

namespace kiln::data {

namespace fs = std::filesystem;

namespace {
bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

// (H, W, C) uint8 -> (C, oh, ow) float in [0, 1], bilinear with half-pixel centres.
void resize_into(const uint8_t* src, int64_t H, int64_t W, int64_t C, float* dst, int64_t oh, int64_t ow) {
  const float inv = 1.0f / 255.0f;
  if (H == oh && W == ow) {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < H * W; ++p) dst[c * H * W + p] = float(src[p * C + c]) * inv;
    return;
  }
  // per output column: left source column and weight
  std::vector<int64_t> x0(static_cast<size_t>(ow)), x1(static_cast<size_t>(ow));
  std::vector<float> wx(static_cast<size_t>(ow));
  const double sx = double(W) / double(ow), sy = double(H) / double(oh);
  for (int64_t x = 0; x < ow; ++x) {
    double fx = std::max(0.0, (double(x) + 0.5) * sx - 0.5);
    int64_t i0 = std::min<int64_t>(int64_t(fx), W - 1);
    x0[size_t(x)] = i0;
    x1[size_t(x)] = std::min<int64_t>(i0 + 1, W - 1);
    wx[size_t(x)] = float(fx - double(i0));
  }
  for (int64_t y = 0; y < oh; ++y) {
    double fy = std::max(0.0, (double(y) + 0.5) * sy - 0.5);
    const int64_t y0 = std::min<int64_t>(int64_t(fy), H - 1), y1 = std::min<int64_t>(y0 + 1, H - 1);
    const float wy = float(fy - double(y0));
    const uint8_t* r0 = src + y0 * W * C;
    const uint8_t* r1 = src + y1 * W * C;
    for (int64_t x = 0; x < ow; ++x) {
      const int64_t a = x0[size_t(x)] * C, b = x1[size_t(x)] * C;
      const float w = wx[size_t(x)];
      for (int64_t c = 0; c < C; ++c) {
        const float top = float(r0[a + c]) + w * (float(r0[b + c]) - float(r0[a + c]));
        const float bot = float(r1[a + c]) + w * (float(r1[b + c]) - float(r1[a + c]));
        dst[(c * oh + y) * ow + x] = (top + wy * (bot - top)) * inv;
      }
    }
  }
}

struct StbImage {
  uint8_t* pixels = nullptr;
  int w = 0, h = 0;
  ~StbImage() { if (pixels) stbi_image_free(pixels); }
};

// The largest image decoded (8192 x 8192), and the most pixels a byte of a file can hold
// (a 1-bit PNG row deflated 1032:1, the densest of PNG, JPEG and BMP): a header cannot make
// stb_image allocate and decode more than the file could describe.
constexpr int64_t kMaxPixels = int64_t(1) << 26;
constexpr int64_t kMaxPixelsPerByte = 8 * 1032;

// Two holes of Debian 12's stb_image (2.27) in JPEG Huffman tables, both found by
// tests/fuzz/fuzz_image:
// - it writes past its tables when a DHT segment declares more than 256 codes (fixed
//   upstream in 2.28); the JPEG standard allows at most 256 symbols per table;
// - it decodes a scan with a table no DHT segment defined: its tables live in a malloc'd,
//   never-zeroed struct, so the decoder walks uninitialised limits and indexes past them
//   (its own assert in stbi__jpeg_huff_decode in a debug build, an out-of-bounds read in
//   a release one). A baseline scan uses each of its components' DC and AC tables; a
//   progressive scan uses the DC tables in a first DC scan and the AC table in an AC scan.
// This walks the JPEG's segments (and the entropy-coded data between them) in order, as stb
// does, and returns false when a table declares more than 256 codes or a scan names a
// table not defined before it. A file that is not a JPEG is left for stb to judge.
bool jpeg_huffman_tables_ok(const std::vector<uint8_t>& b) {
  const size_t n = b.size();
  // stb finds the start-of-image marker after any number of 0xFF fill bytes, as for
  // every marker (a fuzzer's "FF FF D8 ..." is a JPEG to it)
  size_t pos = 0;
  if (n < 4 || b[0] != 0xFF) return true;  // not a JPEG
  while (pos < n && b[pos] == 0xFF) ++pos;
  if (pos >= n || b[pos] != 0xD8) return true;
  ++pos;
  bool defined[2][4] = {};  // [DC = 0, AC = 1][table id]
  bool progressive = false;
  while (pos + 4 <= n) {
    if (b[pos] != 0xFF) {  // entropy-coded data: skip to the next marker (FF not followed by 00 / RSTn)
      ++pos;
      continue;
    }
    const uint8_t m = b[pos + 1];
    if (m == 0xFF || m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8)) {  // fill, stuffed byte, standalone
      pos += m == 0xFF ? 1 : 2;
      continue;
    }
    if (m == 0xD9) return true;  // end of image
    const size_t len = size_t(b[pos + 2]) << 8 | b[pos + 3], end = pos + 2 + len;
    if (m == 0xC2) progressive = true;
    if (m == 0xC0 || m == 0xC1) progressive = false;
    // DHT: one or more tables of (class/id byte, 16 code counts, symbols). stb reads a truncated table's missing
    // bytes as 0, so the counts present are summed even when the file ends inside the table.
    if (m == 0xC4)
      for (size_t p = pos + 4; p < end && p < n;) {
        size_t codes = 0;
        for (size_t i = p + 1; i <= p + 16 && i < n; ++i) codes += b[i];
        if (codes > 256) return false;
        if (b[p] >> 4 <= 1 && (b[p] & 15) <= 3) defined[b[p] >> 4][b[p] & 15] = true;  // else stb refuses it
        p += 17 + codes;
      }
    // SOS: component count, (component, DC table << 4 | AC table) per component, then spectral start, end and
    // successive approximation. A scan header cut off by the end of the file is stb's to refuse.
    if (m == 0xDA && pos + 5 <= n) {
      const size_t count = b[pos + 4], tail = pos + 5 + 2 * count;
      if (tail + 3 <= n) {
        const bool dc_first = b[tail] == 0 && b[tail + 2] >> 4 == 0;  // spectral start 0, first approximation
        const bool uses_dc = !progressive || dc_first, uses_ac = !progressive || b[tail] != 0;
        for (size_t c = 0; c < count; ++c) {
          const uint8_t tables = b[pos + 6 + 2 * c];
          if (tables >> 4 > 3 || (tables & 15) > 3) continue;  // stb refuses the scan itself
          if ((uses_dc && !defined[0][tables >> 4]) || (uses_ac && !defined[1][tables & 15])) return false;
        }
      }
    }
    pos = pos + 2 + std::max<size_t>(len, 2);
  }
  return true;
}

// Two more holes of the same stb_image in PNG chunks, both found by fuzz_image:
// - it reallocates its IDAT buffer to a chunk's declared length before reading the chunk,
//   so a 200-byte file declaring a 2 GB IDAT allocates 2 GB; a chunk that runs past the
//   end of the file cannot be read anyway, so such a file is refused here (false);
// - it passes a null pointer to memcpy (undefined behaviour) when the first IDAT chunk is
//   empty; an empty IDAT chunk is legal and carries nothing, so every one is dropped
//   (length 0, type, CRC: 12 bytes) before decoding.
// The walk stops at IEND, as stb does (trailing bytes after it are ignored). A file that is
// not a PNG is left as it is for stb to judge.
bool prepare_png(std::vector<uint8_t>& b) {
  static constexpr uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (b.size() < 8 || !std::equal(kSignature, kSignature + 8, b.begin())) return true;
  std::vector<uint8_t> out(b.begin(), b.begin() + 8);
  size_t pos = 8;
  bool dropped = false;
  while (pos + 8 <= b.size()) {
    const size_t len = size_t(b[pos]) << 24 | size_t(b[pos + 1]) << 16 | size_t(b[pos + 2]) << 8 | b[pos + 3];
    const auto type = b.begin() + long(pos + 4);
    if (len > b.size() - pos - 8) return false;  // the chunk's data runs past the end of the file
    const size_t next = std::min(b.size(), pos + 12 + len);  // (a missing CRC at the very end is stb's call)
    const bool empty_idat = len == 0 && std::equal(type, type + 4, "IDAT");
    if (empty_idat) dropped = true;
    else out.insert(out.end(), b.begin() + long(pos), b.begin() + long(next));
    pos = next;
    if (std::equal(type, type + 4, "IEND")) break;
  }
  if (!dropped) return true;
  out.insert(out.end(), b.begin() + long(pos), b.end());
  b.swap(out);
  return true;
}

void decode(const std::string& path, int channels, StbImage& img) {
  KILN_CHECK(channels == 1 || channels == 3, "load_image: channels must be 1 or 3, got ", channels);
  std::vector<uint8_t> bytes = read_file_bytes(path);
  KILN_CHECK(!bytes.empty(), "load_image: '", path, "' is empty");
  KILN_CHECK(bytes.size() < (size_t(1) << 31), "load_image: '", path, "' is too large");
  const int64_t file_bytes = int64_t(bytes.size());
  KILN_CHECK(prepare_png(bytes), "load_image: '", path, "' is a corrupt PNG: a chunk declares more bytes than the "
             "file holds");
  KILN_CHECK(jpeg_huffman_tables_ok(bytes), "load_image: '", path, "' is a corrupt JPEG: a Huffman table (DHT) "
             "declares more than 256 codes, or a scan uses a table that no DHT segment defined");
  int w = 0, h = 0, n = 0;
  KILN_CHECK(stbi_info_from_memory(bytes.data(), int(bytes.size()), &w, &h, &n), "load_image: cannot decode '", path,
             "': ", stbi_failure_reason());
  // stb_image 2.27 reports a top-down BMP's height as negative here (it takes the absolute
  // value only when decoding): a negative count must not slip under the limits below
  w = std::abs(w), h = std::abs(h);
  const int64_t pixels = int64_t(w) * int64_t(h);
  KILN_CHECK(pixels <= kMaxPixels, "load_image: '", path, "': a ", w, "x", h, " image is larger than the ",
             kMaxPixels, "-pixel limit");
  KILN_CHECK(pixels <= kMaxPixelsPerByte * file_bytes, "load_image: '", path, "' is corrupt: its header "
             "declares a ", w, "x", h, " image, more than its ", file_bytes, " bytes can hold");
  img.pixels = stbi_load_from_memory(bytes.data(), int(bytes.size()), &img.w, &img.h, &n, channels);
  KILN_CHECK(img.pixels != nullptr, "load_image: cannot decode '", path, "': ", stbi_failure_reason());
}
}  // namespace

Tensor load_image(const std::string& path, int channels) {
  StbImage img;
  decode(path, channels, img);
  Tensor out = Tensor::empty({img.h, img.w, channels}, DType::uint8);
  std::copy(img.pixels, img.pixels + size_t(img.h) * size_t(img.w) * size_t(channels), out.data<uint8_t>());
  return out;
}

Tensor resize_bilinear(const Tensor& image, int64_t out_h, int64_t out_w) {
  KILN_CHECK(image.defined() && image.is_cpu() && image.dtype() == DType::uint8 && image.dim() == 3,
             "resize_bilinear: expected a CPU uint8 image (H, W, C), got ",
             image.defined() ? shape_str(image.shape()) + " " + dtype_name(image.dtype()) : std::string("undefined"));
  KILN_CHECK(out_h > 0 && out_w > 0, "resize_bilinear: output size must be positive, got ", out_h, "x", out_w);
  KILN_CHECK(image.size(0) > 0 && image.size(1) > 0, "resize_bilinear: empty image ", shape_str(image.shape()));
  Tensor c = image.contiguous();
  Tensor out = Tensor::empty({c.size(2), out_h, out_w}, DType::float32);
  resize_into(c.data<uint8_t>(), c.size(0), c.size(1), c.size(2), out.data<float>(), out_h, out_w);
  return out;
}

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options) : options_(options) {
  KILN_CHECK(options.channels == 1 || options.channels == 3, "ImageFolder: channels must be 1 or 3, got ",
             options.channels);
  KILN_CHECK(options.height > 0 && options.width > 0, "ImageFolder: image size must be positive, got ",
             options.height, "x", options.width);
  shape_numel({options.channels, options.height, options.width}, "ImageFolder");  // one image's size fits int64
  std::error_code ec;
  KILN_CHECK(fs::is_directory(root, ec), "ImageFolder: folder '", root, "' does not exist");
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory() && e.path().filename().string()[0] != '.')  // skip hidden folders
      classes_.push_back(e.path().filename().string());
  KILN_CHECK(!ec, "ImageFolder: cannot list '", root, "': ", ec.message());
  std::sort(classes_.begin(), classes_.end());
  KILN_CHECK(!classes_.empty(), "ImageFolder: folder '", root,
             "' has no class sub-folders (expected root/<class>/<image>.png)");
  for (size_t c = 0; c < classes_.size(); ++c) {
    const fs::path dir = fs::path(root) / classes_[c];
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && is_image_file(e.path())) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    KILN_CHECK(!files.empty(), "ImageFolder: class folder '", dir.string(),
               "' has no images (.png, .jpg, .jpeg or .bmp)");
    for (auto& f : files) {
      paths_.push_back(std::move(f));
      labels_.push_back(int64_t(c));
    }
  }
}

void ImageFolder::load_into(int64_t i, float* dst) const {
  StbImage img;
  decode(paths_[size_t(i)], options_.channels, img);
  resize_into(img.pixels, img.h, img.w, options_.channels, dst, options_.height, options_.width);
}

Example ImageFolder::get(int64_t i) const {
  KILN_CHECK(i >= 0 && i < size(), "ImageFolder::get: index ", i, " out of range for a dataset of size ", size());
  Example ex;
  ex.input = Tensor::empty({options_.channels, options_.height, options_.width}, DType::float32);
  load_into(i, ex.input.data<float>());
  ex.target = scalar_tensor(double(labels_[size_t(i)]), {.dtype = DType::int64});
  return ex;
}

Batch ImageFolder::get_batch(std::span<const int64_t> indices) const {
  for (int64_t i : indices)
    KILN_CHECK(i >= 0 && i < size(), "ImageFolder::get_batch: index ", i, " out of range for a dataset of size ",
               size());
  const int64_t B = int64_t(indices.size()), per = options_.channels * options_.height * options_.width;
  Batch b;
  b.input = Tensor::empty({B, options_.channels, options_.height, options_.width}, DType::float32);
  b.target = Tensor::empty({B}, DType::int64);
  float* in = b.input.data<float>();
  int64_t* t = b.target.data<int64_t>();
  for (int64_t k = 0; k < B; ++k) {
    load_into(indices[size_t(k)], in + k * per);
    t[k] = labels_[size_t(indices[size_t(k)])];
  }
  b.indices.assign(indices.begin(), indices.end());
  return b;
}

}  // namespace kiln::data
