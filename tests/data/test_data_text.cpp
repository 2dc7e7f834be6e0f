// Tests of the character-level text data: UTF-8 handling (multi-byte characters are
// one token), vocabulary save/load round trip (atomic write), encode/decode, splits,
// random GPT windows, the sequential Dataset view and error cases.
#include <doctest/doctest.h>
#include <filesystem>
#include <limits>
#include <set>
#include "data_test_util.h"
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;
using kiln_test::TempDir;

namespace {
const std::string kText = "héllo wörld\nhello €uro 😀!\n";  // 2-, 3- and 4-byte characters

using kiln::test::error_of;
}  // namespace

TEST_CASE("CharVocab: sorted code points, encode/decode, multi-byte characters") {
  CharVocab v = CharVocab::from_text(kText);
  const auto& cps = v.code_points();
  CHECK(std::is_sorted(cps.begin(), cps.end()));
  std::set<char32_t> want = {U'h', U'é', U'l', U'o', U' ', U'w', U'ö', U'r', U'd', U'\n', U'e', U'€', U'u', U'😀', U'!'};
  CHECK(v.size() == int64_t(want.size()));
  CHECK(std::set<char32_t>(cps.begin(), cps.end()) == want);
  CHECK(v.id(U'\n') == 0);
  CHECK(v.id(U'😀') == v.size() - 1);
  CHECK(v.id(U'z') == -1);
  auto ids = v.encode("é€😀");
  CHECK(ids.size() == 3);
  CHECK(v.decode(ids) == "é€😀");
  CHECK(v.decode(v.encode(kText)) == kText);
  CHECK(v.decode(from_vector(ids)) == "é€😀");
  CHECK_THROWS_WITH_AS(v.encode("z"), doctest::Contains("not in the vocabulary"), kiln::Error);
  CHECK_THROWS_WITH_AS(v.decode(std::vector<int64_t>{99}), doctest::Contains("99"), kiln::Error);
  CHECK_THROWS_WITH_AS(v.encode(std::string("a\xC3")), doctest::Contains("invalid UTF-8"), kiln::Error);
  CHECK_THROWS_AS(v.encode(std::string("\xC0\xAF")), kiln::Error);  // overlong
}

TEST_CASE("CharVocab save/load round trip, atomic, and load errors") {
  TempDir tmp;
  CharVocab v = CharVocab::from_text(kText);
  const std::string path = tmp / "vocab.json";
  v.save(path);
  CharVocab w = CharVocab::load(path);
  CHECK(w == v);
  CHECK(w.encode(kText) == v.encode(kText));
  // overwrite in place; no temporary files are left behind
  CharVocab::from_text("ab").save(path);
  CHECK(CharVocab::load(path).size() == 2);
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(tmp.path)) { (void)e; ++files; }
  CHECK(files == 1);
  // errors name the file
  CHECK(error_of([&] { CharVocab::load(tmp / "nope.json"); }).find("nope.json") != std::string::npos);
  kiln_test::write_text(tmp / "bad.json", "{\"format\": \"something\", \"code_points\": [1]}");
  CHECK(error_of([&] { CharVocab::load(tmp / "bad.json"); }).find("bad.json") != std::string::npos);
  kiln_test::write_text(tmp / "bad2.json", "{\"format\": \"kiln.char_vocab\", \"code_points\": [5, 3]}");
  CHECK(error_of([&] { CharVocab::load(tmp / "bad2.json"); }).find("bad2.json") != std::string::npos);
  kiln_test::write_text(tmp / "bad3.json", "{\"format\": \"kiln.char_vocab\", \"code_points\": [5, ");
  CHECK(error_of([&] { CharVocab::load(tmp / "bad3.json"); }).find("bad3.json") != std::string::npos);
  CHECK(error_of([&] { v.save(tmp / "no_such_dir/v.json"); }).find("no_such_dir") != std::string::npos);
}

TEST_CASE("CharText: tokens, train/val split, random windows, sequential view") {
  TempDir tmp;
  std::string text;
  for (int i = 0; i < 20; ++i) text += kText;
  kiln_test::write_text(tmp / "input.txt", text);
  CharText ct(tmp / "input.txt", {.context = 8, .val_fraction = 0.25});
  const int64_t n = int64_t(utf8_decode(text).size());
  CHECK(ct.tokens().numel() == n);
  CHECK(ct.tokens().dtype() == DType::int64);
  CHECK(ct.train().num_tokens() == int64_t(double(n) * 0.75));
  CHECK(ct.train().num_tokens() + ct.val().num_tokens() == n);
  CHECK(ct.vocab().decode(ct.tokens()) == text);

  Rng rng(11);
  Batch b = ct.train().get_batch(4, 6, rng);
  CHECK(b.input.shape() == Shape{4, 6});
  CHECK(b.target.shape() == Shape{4, 6});
  CHECK(b.input.dtype() == DType::int64);
  auto tok = ct.train().tokens().to_vector<int64_t>();
  auto x = b.input.to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
  for (int k = 0; k < 4; ++k) {
    const int64_t s = b.indices[size_t(k)];
    CHECK(s >= 0);
    CHECK(s + 6 < int64_t(tok.size()));
    for (int t = 0; t < 6; ++t) {
      CHECK(x[size_t(k * 6 + t)] == tok[size_t(s + t)]);
      CHECK(y[size_t(k * 6 + t)] == tok[size_t(s + t + 1)]);
    }
  }
  Rng again(11);
  CHECK(ct.train().get_batch(4, 6, again).input.to_vector<int64_t>() == x);

  // sequential view: window i covers tokens [8 i, 8 i + 8), target shifted by one
  const TokenDataset& tr = ct.train();
  CHECK(tr.size() == (tr.num_tokens() - 1) / 8);
  Example e = tr.get(2);
  CHECK(e.input.shape() == Shape{8});
  CHECK(e.input.to_vector<int64_t>() == std::vector<int64_t>(tok.begin() + 16, tok.begin() + 24));
  CHECK(e.target.to_vector<int64_t>() == std::vector<int64_t>(tok.begin() + 17, tok.begin() + 25));
  DataLoader loader(tr, {.batch_size = 3, .shuffle = true, .seed = 2, .workers = 2});
  int64_t windows = 0;
  for (auto& batch : loader) {
    CHECK(batch.input.size(1) == 8);
    windows += batch.input.size(0);
  }
  CHECK(windows == tr.size());
  // val windows come from the tail of the text
  CHECK(ct.val().tokens().to_vector<int64_t>()[0] == ct.tokens().to_vector<int64_t>()[size_t(tr.num_tokens())]);

  // a given vocabulary is used as is; saved and reloaded it gives the same tokens
  ct.vocab().save(tmp / "v.json");
  CharText again_ct(tmp / "input.txt", {.vocab = CharVocab::load(tmp / "v.json")});
  CHECK(again_ct.tokens().to_vector<int64_t>() == ct.tokens().to_vector<int64_t>());
  kiln_test::write_text(tmp / "other.txt", "xyz");
  CHECK(error_of([&] { CharText(tmp / "other.txt", {.vocab = ct.vocab()}); }).find("other.txt") != std::string::npos);
}

TEST_CASE("CharText errors") {
  TempDir tmp;
  kiln_test::write_text(tmp / "empty.txt", "");
  std::string e = error_of([&] { CharText(tmp / "empty.txt"); });
  CHECK(e.find("empty.txt") != std::string::npos);
  CHECK(e.find("empty") != std::string::npos);
  CHECK(error_of([&] { CharText(tmp / "absent.txt"); }).find("absent.txt") != std::string::npos);
  kiln_test::write_text(tmp / "latin1.txt", std::string("caf\xE9 ok"));
  e = error_of([&] { CharText(tmp / "latin1.txt"); });
  CHECK(e.find("latin1.txt") != std::string::npos);
  CHECK(e.find("byte offset 3") != std::string::npos);
  kiln_test::write_text(tmp / "short.txt", "abc");
  CharText s(tmp / "short.txt", {.val_fraction = 0.0});
  Rng rng(0);
  CHECK_THROWS_WITH_AS(s.train().get_batch(2, 3, rng), doctest::Contains("too few"), kiln::Error);
  CHECK(s.train().get_batch(2, 2, rng).input.shape() == Shape{2, 2});
  CHECK_THROWS_WITH_AS(s.train().get_batch(2, std::numeric_limits<int64_t>::max(), rng), doctest::Contains("too few"),
                       kiln::Error);  // context + 1 used to overflow
  CHECK(s.val().size() == 0);
  CHECK_THROWS_AS(CharText(tmp / "short.txt", {.val_fraction = 1.0}), kiln::Error);
}
