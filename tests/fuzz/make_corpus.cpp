// Writes the seed corpus of every fuzz target: small valid files of each format, made with
// kiln's own writers where it has them, stb_image_write, zlib and a few lines of PNG/BMP.
// Usage: fuzz_make_corpus tests/fuzz/corpus  (the committed seeds were made this way).
#include <zlib.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "kiln/data/bpe.h"
#include "kiln/data/text.h"
#include "kiln/nn/serialize.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace fs = std::filesystem;
using namespace kiln;
using Bytes = std::vector<uint8_t>;

namespace {

fs::path out_dir;

std::string at(const std::string& target, const std::string& name) {
  fs::create_directories(out_dir / target);
  return (out_dir / target / name).string();
}

void write(const std::string& path, const Bytes& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
void write(const std::string& path, const std::string& s) { write(path, Bytes(s.begin(), s.end())); }

void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, b.data(), unsigned(b.size()));
  gzclose(f);
}

void be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
void le(Bytes& b, uint32_t v, int n) {
  for (int k = 0; k < n; ++k) b.push_back(uint8_t(v >> (8 * k)));
}

// A deterministic byte pattern.
Bytes pattern(size_t n, unsigned seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t((i * 37 + seed * 101 + (i * i) % 13) % 256);
  return b;
}

// ---- IDX
Bytes idx(uint32_t magic, const std::vector<uint32_t>& dims, size_t esize, unsigned seed) {
  Bytes b;
  be32(b, magic);
  size_t n = esize;
  for (uint32_t d : dims) be32(b, d), n *= d;
  Bytes data = pattern(n, seed);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// ---- PNG: any filter byte (0-4) with any payload is a valid PNG, so rows are patterns.
void chunk(Bytes& png, const char* type, const Bytes& data) {
  be32(png, uint32_t(data.size()));
  Bytes td(type, type + 4);
  td.insert(td.end(), data.begin(), data.end());
  png.insert(png.end(), td.begin(), td.end());
  be32(png, uint32_t(crc32(0, td.data(), uInt(td.size()))));
}

Bytes png(uint32_t w, uint32_t h, int depth, int ctype, bool adam7, bool filters, const Bytes& plte = {},
          const Bytes& trns = {}) {
  const int channels = ctype == 0 || ctype == 3 ? 1 : ctype == 2 ? 3 : ctype == 4 ? 2 : 4;
  Bytes raw;
  auto rows = [&](uint32_t pw, uint32_t ph, unsigned seed) {
    const size_t row = (size_t(pw) * channels * depth + 7) / 8;
    for (uint32_t y = 0; y < ph && pw > 0; ++y) {
      raw.push_back(filters ? uint8_t(y % 5) : 0);
      Bytes r = pattern(row, seed + y);
      if (ctype == 3)  // palette indices below the palette size
        for (auto& v : r) v = depth == 8 ? uint8_t(v % (plte.size() / 3)) : uint8_t(v & 0x11 * ((plte.size() / 3) - 1));
      raw.insert(raw.end(), r.begin(), r.end());
    }
  };
  if (!adam7) {
    rows(w, h, 1);
  } else {
    const uint32_t x0[] = {0, 4, 0, 2, 0, 1, 0}, y0[] = {0, 0, 4, 0, 2, 0, 1};
    const uint32_t dx[] = {8, 8, 4, 4, 2, 2, 1}, dy[] = {8, 8, 8, 4, 4, 2, 2};
    for (int p = 0; p < 7; ++p)
      rows(w > x0[p] ? (w - x0[p] + dx[p] - 1) / dx[p] : 0, h > y0[p] ? (h - y0[p] + dy[p] - 1) / dy[p] : 0,
           unsigned(p));
  }
  Bytes z(compressBound(uLong(raw.size())));
  uLongf zn = uLongf(z.size());
  compress2(z.data(), &zn, raw.data(), uLong(raw.size()), 9);
  z.resize(zn);
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'}, ihdr;
  be32(ihdr, w);
  be32(ihdr, h);
  ihdr.insert(ihdr.end(), {uint8_t(depth), uint8_t(ctype), 0, 0, uint8_t(adam7)});
  chunk(out, "IHDR", ihdr);
  if (!plte.empty()) chunk(out, "PLTE", plte);
  if (!trns.empty()) chunk(out, "tRNS", trns);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", {});
  return out;
}

// ---- BMP with an 8-bit palette (stb_image_write only writes 24/32-bit ones)
Bytes bmp_pal8(int32_t w, int32_t h, int colors) {
  const uint32_t row = uint32_t(w + 3) / 4 * 4, off = 14 + 40 + 4 * uint32_t(colors);
  Bytes b = {'B', 'M'};
  le(b, off + row * uint32_t(h), 4);
  le(b, 0, 4);
  le(b, off, 4);
  le(b, 40, 4);
  le(b, uint32_t(w), 4);
  le(b, uint32_t(h), 4);
  le(b, 1, 2);
  le(b, 8, 2);
  le(b, 0, 4);  // BI_RGB
  le(b, row * uint32_t(h), 4);
  le(b, 2835, 4);
  le(b, 2835, 4);
  le(b, uint32_t(colors), 4);
  le(b, 0, 4);
  for (int c = 0; c < colors; ++c) le(b, uint32_t(c * 0x3F1F0F), 4);
  for (int32_t y = 0; y < h; ++y)
    for (uint32_t x = 0; x < row; ++x) b.push_back(uint8_t((x + uint32_t(y)) % uint32_t(colors)));
  return b;
}

void to_bytes(void* ctx, void* data, int size) {
  auto* b = static_cast<Bytes*>(ctx);
  b->insert(b->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}

// A smooth image with some edges (JPEG seeds need more than noise to stay small).
Bytes picture(int w, int h, int comp) {
  Bytes px(size_t(w * h * comp));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < comp; ++c)
        px[size_t((y * w + x) * comp + c)] = uint8_t((x * 16 + y * 8 + c * 60 + ((x / 4 + y / 4) % 2) * 90) % 256);
  return px;
}

Tensor values(DType dt, const Shape& shape, unsigned seed) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = dt == DType::bool_ ? double((i + seed) % 2) : double(i + seed) * 0.75 - 2;
  return from_vector(v, shape).to(dt);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s corpus-folder\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];

  // safetensors: every dtype, metadata, a scalar and an empty tensor
  save({{"fc.weight", values(DType::float32, {2, 3}, 1)}, {"fc.bias", values(DType::int64, {3}, 2)}},
       at("safetensors", "seed_f32_i64_meta.safetensors"), {{"step", "100"}, {"kiln.config", "{\"width\": 8}"}});
  save({{"f64", values(DType::float64, {2}, 3)}, {"f16", values(DType::float16, {1, 3}, 4)},
        {"bf16", values(DType::bfloat16, {3}, 5)}, {"i32", values(DType::int32, {2, 1}, 6)},
        {"u8", values(DType::uint8, {4}, 7)}, {"mask", values(DType::bool_, {5}, 8)},
        {"scalar", values(DType::float32, {}, 9)}},
       at("safetensors", "seed_all_dtypes.safetensors"));
  save({{"empty", values(DType::float32, {0, 4}, 0)}}, at("safetensors", "seed_empty.safetensors"));

  // the JSON form of tensor maps: "value" and "data" entries of every dtype
  const std::map<std::string, Tensor> state = {
      {"step", values(DType::int64, {}, 7)},       {"lr", values(DType::float32, {}, 1)},
      {"exp_avg", values(DType::float32, {2, 3}, 2)}, {"mask", values(DType::bool_, {3}, 1)},
      {"h", values(DType::float16, {2}, 3)},       {"bf", values(DType::bfloat16, {}, 4)},
      {"nan", from_vector(std::vector<double>{std::nan("")}, {})}, {"none", values(DType::int32, {2, 0}, 0)},
      {"u8", values(DType::uint8, {4}, 5)},        {"i32", values(DType::int32, {1}, 6)}};
  write(at("tensors_json", "seed_state.json"), tensors_to_json(state).dump(1));

  // JSON: every kind of value, escapes, numbers at the edges, nesting
  write(at("json", "seed_values.json"),
        "{\"name\": \"kiln\", \"list\": [0, -0, 1.5, -2.5e-3, 6.02E+23, 9223372036854775807, -9223372036854775808,"
        " 12345678901234567890, true, false, null], \"s\": \"tab\\t nl\\n q\\\" bs\\\\ sl\\/ \\b\\f\\r "
        "\\u00e9\\u20AC\\ud83d\\ude00 \xc3\xa9\", \"empty\": {}, \"arr\": [[], [{}], {\"k\": []}]}\n");
  write(at("json", "seed_scalar.json"), " \"just a string\" ");
  write(at("json", "seed_number.json"), "-1.25e-308");
  write(at("json", "seed_nested.json"), std::string(40, '[') + "1" + std::string(40, ']'));
  write(at("json", "seed_header.json"), "{\"__metadata__\":{\"step\":\"1\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],"
                                        "\"data_offsets\":[0,24]}}");

  // IDX: MNIST's two magics, every element type, gzip
  write(at("idx", "seed_images-idx3-ubyte"), idx(0x00000803, {2, 3, 3}, 1, 1));
  write(at("idx", "seed_labels-idx1-ubyte"), idx(0x00000801, {5}, 1, 2));
  write(at("idx", "seed_i8.idx"), idx(0x00000902, {2, 2}, 1, 3));
  write(at("idx", "seed_i16.idx"), idx(0x00000B01, {3}, 2, 4));
  write(at("idx", "seed_i32.idx"), idx(0x00000C02, {1, 2}, 4, 5));
  write(at("idx", "seed_f32.idx"), idx(0x00000D01, {2}, 4, 6));
  write(at("idx", "seed_f64.idx"), idx(0x00000E04, {1, 1, 1, 2}, 8, 7));
  write_gz(at("idx", "seed_images-idx3-ubyte.gz"), idx(0x00000803, {3, 2, 2}, 1, 8));

  // CIFAR-10: two records (label byte + 3072 pixel bytes)
  Bytes cifar;
  for (uint8_t label : {3, 9}) {
    cifar.push_back(label);
    Bytes px = pattern(3072, label);
    cifar.insert(cifar.end(), px.begin(), px.end());
  }
  write(at("cifar10", "seed_two_records.bin"), cifar);

  // images: PNG of every colour type, bit depths 1-16, filters, palette + tRNS, Adam7;
  // BMP 8/24/32-bit; JPEG grey, colour 4:4:4 and 4:2:0
  const Bytes plte = {0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255};
  write(at("image", "seed_grey8.png"), png(8, 6, 8, 0, false, false));
  write(at("image", "seed_rgb8_filters.png"), png(5, 4, 8, 2, false, true));
  write(at("image", "seed_rgba16.png"), png(3, 3, 16, 6, false, true));
  write(at("image", "seed_grey_alpha8.png"), png(4, 2, 8, 4, false, false));
  write(at("image", "seed_palette2_trns.png"), png(6, 3, 2, 3, false, false, plte, {0, 128}));
  write(at("image", "seed_grey1_adam7.png"), png(9, 9, 1, 0, true, true));
  write(at("image", "seed_rgb8_adam7.png"), png(10, 7, 8, 2, true, true));
  write(at("image", "seed_pal8.bmp"), bmp_pal8(5, 3, 4));
  for (int comp : {3, 4}) {  // 24-bit, 32-bit with alpha
    Bytes bmp;
    stbi_write_bmp_to_func(to_bytes, &bmp, 5, 3, comp, picture(5, 3, comp).data());
    write(at("image", "seed_" + std::to_string(comp * 8) + "bit.bmp"), bmp);
  }
  const std::pair<int, int> jpegs[] = {{1, 90}, {3, 95}, {3, 50}};  // stb subsamples 4:2:0 below quality 90
  for (auto [comp, quality] : jpegs) {
    Bytes jpg;
    stbi_write_jpg_to_func(to_bytes, &jpg, 16, 16, comp, picture(16, 16, comp).data(), quality);
    write(at("image", "seed_c" + std::to_string(comp) + "_q" + std::to_string(quality) + ".jpg"), jpg);
  }

  // text: ASCII, 2/3/4-byte UTF-8, gzip; a vocabulary file
  const std::string ascii = "The quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs.\n";
  const std::string utf8 = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80!\n";
  write(at("char_text", "seed_ascii.txt"), ascii);
  write(at("char_text", "seed_utf8.txt"), utf8);
  write_gz(at("char_text", "seed_text.txt.gz"), Bytes(ascii.begin(), ascii.end()));
  data::CharVocab::from_text(utf8).save(at("char_vocab", "seed_vocab.json"));
  data::CharVocab().save(at("char_vocab", "seed_empty.json"));
  // BPE tokenizers (also read as text to encode)
  data::BpeTokenizer::train(ascii + utf8, 320).save(at("bpe", "seed_bpe.json"));
  data::BpeTokenizer().save(at("bpe", "seed_bytes_only.json"));
  write(at("bpe", "seed_text.txt"), utf8);
  std::printf("seed corpus written to %s\n", out_dir.c_str());
  return 0;
}
