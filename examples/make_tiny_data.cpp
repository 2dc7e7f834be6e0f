// Writes tiny stand-in datasets for the examples' smoke tests (CTest runs it as a fixture):
// four gzip'd IDX files in the MNIST layout whose labels are easy to learn, and a small text.
//
//   make_tiny_data OUT_DIR [--train N] [--test N]
//
// Image of class c: a bright 6x6 square in cell c of a 4 x 3 grid, on a noisy background.
// Text: random lines built from a handful of short sentences.
#include <zlib.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>
#include <kiln/kiln.h>

namespace {

// IDX header: magic 0x0000080N (uint8 elements, N dims) then the N sizes, all big-endian int32.
void put_be32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char((v >> shift) & 0xFF));
}

// gzip-compresses `raw` in memory (windowBits 15 + 16 asks zlib for the gzip wrapper).
std::string gzip(const std::string& raw) {
  z_stream z{};
  KILN_CHECK(deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
             "make_tiny_data: deflateInit2 failed");
  std::string out(deflateBound(&z, uLong(raw.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = uInt(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  KILN_CHECK(rc == Z_STREAM_END, "make_tiny_data: deflate failed (", rc, ")");
  return out;
}

// n images (n, 28, 28) and their labels, as two IDX files.
void write_split(const std::string& dir, const std::string& prefix, int n, kiln::data::Rng& rng) {
  std::string images, labels;
  put_be32(images, 0x00000803);
  put_be32(images, uint32_t(n));
  put_be32(images, 28);
  put_be32(images, 28);
  put_be32(labels, 0x00000801);
  put_be32(labels, uint32_t(n));
  for (int i = 0; i < n; ++i) {
    const int c = int(rng.below(10));
    const int top = 2 + (c / 4) * 9 + int(rng.below(3)), left = 1 + (c % 4) * 7;  // cell of class c
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) {
        const bool on = y >= top && y < top + 6 && x >= left && x < left + 6;
        images.push_back(char(on ? 180 + rng.below(76) : rng.below(60)));
      }
    labels.push_back(char(c));
  }
  kiln::data::write_file_atomic(dir + "/" + prefix + "-images-idx3-ubyte.gz", gzip(images));
  kiln::data::write_file_atomic(dir + "/" + prefix + "-labels-idx1-ubyte.gz", gzip(labels));
}

void write_text(const std::string& path, kiln::data::Rng& rng) {
  const char* sentences[] = {"the cat sat on the mat. ", "a dog ran in the park. ", "the sun is warm. ",
                             "we like to read books. ", "it is a good day. "};
  std::string text;
  for (int line = 0; line < 150; ++line) {
    for (int k = 0; k < 3; ++k) text += sentences[rng.below(5)];
    text += "\n";
  }
  kiln::data::write_file_atomic(path, text);
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: make_tiny_data OUT_DIR [--train N] [--test N]   (N > 0; defaults 600 and 200)\n";
  if (argc < 2 || argv[1][0] == '-') {  // --help, or a flag where the folder should be
    std::fprintf(argc < 2 || std::string(argv[1]) != "--help" ? stderr : stdout, "%s", usage);
    return argc >= 2 && std::string(argv[1]) == "--help" ? 0 : 2;
  }
  const std::string dir = argv[1];
  int n_train = 600, n_test = 200;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    int* n = a == "--train" ? &n_train : a == "--test" ? &n_test : nullptr;
    char* end = nullptr;
    const long v = n && i + 1 < argc ? std::strtol(argv[++i], &end, 10) : 0;
    if (!n || !end || *end != '\0' || v <= 0 || v > 1000000) {
      std::fprintf(stderr, "make_tiny_data: bad argument '%s'\n%s", a.c_str(), usage);
      return 2;
    }
    *n = int(v);
  }
  try {
    std::filesystem::create_directories(dir);
    kiln::data::Rng rng(1234);
    write_split(dir, "train", n_train, rng);
    write_split(dir, "t10k", n_test, rng);
    write_text(dir + "/tiny.txt", rng);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_tiny_data: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %d + %d images and tiny.txt to %s\n", n_train, n_test, dir.c_str());
  return 0;
}
