// Readers facing headers that declare more data than their file holds (cases found by
// tests/fuzz): the error names the file and comes before any large allocation.
#include <doctest/doctest.h>
#include <algorithm>
#include <zlib.h>
#include "data_test_util.h"
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;
using kiln::test::error_of;
using kiln_test::idx_bytes;
using kiln_test::TempDir;
using kiln_test::write_bytes;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A PNG signature, an IHDR of w x h 8-bit pixels of a colour type (2: RGB, 0: grey), the
// given IDAT chunks (default: one empty one, enough for a header scan) and an IEND.
std::vector<uint8_t> png_header(uint32_t w, uint32_t h, uint8_t color = 2,
                                const std::vector<std::vector<uint8_t>>& idat = {{}}) {
  std::vector<uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  auto be = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
  };
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    be(uint32_t(data.size()));
    const size_t start = b.size();
    b.insert(b.end(), type, type + 4);
    b.insert(b.end(), data.begin(), data.end());
    be(uint32_t(crc32(0, b.data() + start, uInt(b.size() - start))));
  };
  std::vector<uint8_t> ihdr;
  for (uint32_t v : {w, h})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(uint8_t(v >> s));
  ihdr.insert(ihdr.end(), {8, color, 0, 0, 0});
  chunk("IHDR", ihdr);
  for (const auto& d : idat) chunk("IDAT", d);
  chunk("IEND", {});
  return b;
}

}  // namespace

TEST_CASE("read_idx checks the declared size against the file before allocating") {
  TempDir tmp;
  // 65536 x 65536 x 16 float64 (512 GiB: more than any allocation can get) declared by a 20-byte file
  write_bytes(tmp / "big.idx", idx_bytes(0x0E03, {65536, 65536, 16}, {1, 2, 3, 4}));
  std::string e = error_of([&] { read_idx(tmp / "big.idx"); });
  CHECK(has(e, "big.idx"));
  CHECK(has(e, "truncated"));
  CHECK(has(e, "holds only 4 bytes"));
  // the same gzipped: deflate expands at most 1032 times
  const auto bytes = idx_bytes(0x0E03, {65536, 65536, 16}, {1, 2, 3, 4});
  gzFile f = gzopen((tmp / "big.idx.gz").c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
  e = error_of([&] { read_idx(tmp / "big.idx.gz"); });
  CHECK(has(e, "big.idx.gz"));
  CHECK(has(e, "can decompress to at most"));
  // sizes whose product overflows 64 bits, and huge sizes beside a zero one (the strides overflow)
  write_bytes(tmp / "overflow.idx", idx_bytes(0x0808, std::vector<uint32_t>(8, 0x7FFFFFFF), {}));
  CHECK(has(error_of([&] { read_idx(tmp / "overflow.idx"); }), "too large"));
  write_bytes(tmp / "zero.idx", idx_bytes(0x0804, {0, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF}, {}));
  CHECK(has(error_of([&] { read_idx(tmp / "zero.idx"); }), "too large"));
  // an empty tensor is fine
  write_bytes(tmp / "empty.idx", idx_bytes(0x0803, {0, 28, 28}, {}));
  CHECK(read_idx(tmp / "empty.idx").shape() == Shape{0, 28, 28});
}

TEST_CASE("load_image: empty IDAT chunks are legal and skipped (stb_image passed memcpy a null pointer)") {
  TempDir tmp;
  const std::vector<uint8_t> raw = {0, 10, 200};  // one row: filter byte 0, two grey pixels
  uLongf n = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(n);
  REQUIRE(compress(z.data(), &n, raw.data(), uLong(raw.size())) == Z_OK);
  z.resize(n);
  write_bytes(tmp / "ok.png", png_header(2, 1, 0, {{}, z, {}}));
  const Tensor img = load_image(tmp / "ok.png", 1);
  CHECK(img.shape() == Shape{1, 2, 1});
  CHECK(img.to_vector<double>() == std::vector<double>{10, 200});
  write_bytes(tmp / "none.png", png_header(2, 1, 0, {{}}));  // no pixel data at all
  const std::string e = error_of([&] { load_image(tmp / "none.png", 1); });
  CHECK(has(e, "none.png"));
}

TEST_CASE("load_image checks the declared size against the file before decoding") {
  TempDir tmp;
  write_bytes(tmp / "wide.png", png_header(5000, 5000));  // 25 Mpixels in 57 bytes
  std::string e = error_of([&] { load_image(tmp / "wide.png"); });
  CHECK(has(e, "wide.png"));
  CHECK(has(e, "5000x5000"));
  CHECK(has(e, "more than its 57 bytes can hold"));
  write_bytes(tmp / "huge.png", png_header(9000, 9000));  // over the 2^26-pixel limit
  e = error_of([&] { load_image(tmp / "huge.png"); });
  CHECK(has(e, "huge.png"));
  CHECK(has(e, "67108864-pixel limit"));
  write_bytes(tmp / "junk.png", {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  e = error_of([&] { load_image(tmp / "junk.png"); });
  CHECK(has(e, "junk.png"));
  CHECK(has(e, "cannot decode"));
}

TEST_CASE("load_image: a top-down BMP's negative height counts against the pixel limits") {
  // 43 bytes declaring 10 x -16711679 (top-down): stb's header scan reported the negative
  // height, the pixel count came out negative, and decoding allocated 167 Mpixels (found
  // by fuzz_image as a timeout)
  TempDir tmp;
  const std::vector<uint8_t> bmp = {0x42, 0x4d, 0x5e, 0, 0, 0, 0, 0, 0, 0, 0x46, 0, 0, 0, 0x28, 0, 0, 0, 0x0a, 0, 0, 0,
                                    0x01, 0, 0x01, 0xff, 0x01, 0, 0x08, 0, 0, 0, 0, 0, 0x18, 0, 0, 0x01, 0x01, 0xa8,
                                    0x2a, 0, 0x01};
  write_bytes(tmp / "tall.bmp", bmp);
  const std::string e = error_of([&] { load_image(tmp / "tall.bmp"); });
  CHECK(has(e, "tall.bmp"));
  CHECK(has(e, "10x16711679"));
}

TEST_CASE("load_image: a PNG chunk longer than the file is refused before stb allocates it") {
  // stb_image reallocated its IDAT buffer to the declared length first: 2 GB for a
  // 200-byte file (found by fuzz_image as an out-of-memory)
  TempDir tmp;
  std::vector<uint8_t> png = png_header(2, 1, 0, {{1, 2, 3, 4}});
  const auto idat = std::search(png.begin(), png.end(), std::begin("IDAT"), std::begin("IDAT") + 4);
  REQUIRE(idat != png.end());
  for (int k = 1; k <= 4; ++k) *(idat - k) = k == 4 ? 0x7f : 0xff;  // length 2^31 - 1
  write_bytes(tmp / "huge_chunk.png", png);
  const std::string e = error_of([&] { load_image(tmp / "huge_chunk.png", 1); });
  CHECK(has(e, "huge_chunk.png"));
  CHECK(has(e, "corrupt PNG"));
  // trailing bytes after IEND are ignored, as stb ignores them
  const std::vector<uint8_t> raw = {0, 10, 200};
  uLongf n = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(n);
  REQUIRE(compress(z.data(), &n, raw.data(), uLong(raw.size())) == Z_OK);
  z.resize(n);
  std::vector<uint8_t> ok = png_header(2, 1, 0, {z});
  ok.insert(ok.end(), {0xff, 0xff, 0xff, 0xff, 'J', 'U', 'N', 'K'});
  write_bytes(tmp / "trailing.png", ok);
  CHECK(load_image(tmp / "trailing.png", 1).to_vector<double>() == std::vector<double>{10, 200});
}
