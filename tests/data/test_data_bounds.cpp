// Readers facing headers that declare more data than their file holds (cases found by
// tests/fuzz): the error names the file and comes before any large allocation.
#include <doctest/doctest.h>
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
  CHECK(has(e, "(gzip) can hold at most"));
  // sizes whose product overflows 64 bits, and huge sizes beside a zero one (the strides overflow)
  write_bytes(tmp / "overflow.idx", idx_bytes(0x0808, std::vector<uint32_t>(8, 0x7FFFFFFF), {}));
  CHECK(has(error_of([&] { read_idx(tmp / "overflow.idx"); }), "absurd size"));
  write_bytes(tmp / "zero.idx", idx_bytes(0x0804, {0, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF}, {}));
  CHECK(has(error_of([&] { read_idx(tmp / "zero.idx"); }), "absurd size"));
  // an empty tensor is fine
  write_bytes(tmp / "empty.idx", idx_bytes(0x0803, {0, 28, 28}, {}));
  CHECK(read_idx(tmp / "empty.idx").shape() == Shape{0, 28, 28});
}
