// Byte-level BPE (data/bpe.h): the chunks merges stay within, training on the textbook
// example (merges worked out by hand), encode/decode round trips for any bytes, the
// vocabulary size, save/load and JSON errors, and CharText tokenized by BPE.
#include <doctest/doctest.h>
#include <algorithm>
#include <string>
#include <vector>
#include "data_test_util.h"
#include "gradcheck.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::data;
using kiln::test::error_of;
using kiln_test::TempDir;

namespace {
// Text of many different words built from syllables (so merges keep finding pairs).
std::string syllable_text(int words, uint64_t seed) {
  const char* syl[] = {"ka", "lo", "mi", "ne", "ru", "sta", "pe", "vo", "li", "dan", "tor", "é", "wö"};
  data::Rng rng(seed);
  std::string s;
  for (int w = 0; w < words; ++w) {
    const int n = 1 + int(rng.below(4));
    for (int k = 0; k < n; ++k) s += syl[rng.below(13)];
    s += w % 11 == 10 ? ".\n" : rng.below(5) == 0 ? ", " : " ";
  }
  return s;
}
}  // namespace

TEST_CASE("bpe_chunks: runs of letters, digits, symbols and whitespace; a word takes the space before it") {
  const std::string text = "Hello, world!\n\n  foo 42héllo";
  const std::vector<std::string_view> c = bpe_chunks(text);
  const std::vector<std::string_view> want = {"Hello", ",", " world", "!", "\n\n ", " foo", " 42", "héllo"};
  CHECK(c == want);
  std::string joined;
  for (auto s : c) joined += s;
  CHECK(joined == text);
  CHECK(bpe_chunks("").empty());
  CHECK(bpe_chunks("   ") == std::vector<std::string_view>{"   "});
}

TEST_CASE("BpeTokenizer::train: the textbook example, merge by merge") {
  // "aaabdaaabac": aa occurs 4 times -> 256; then ab and (256, a) occur twice each and
  // the smaller pair of ids, (a, b), wins -> 257; then (256, 257) twice -> 258; then no
  // pair occurs twice and training stops below the asked size.
  const BpeTokenizer bpe = BpeTokenizer::train("aaabdaaabac", 300);
  using M = BpeTokenizer::Merge;
  CHECK(bpe.merges() == std::vector<M>{M{'a', 'a'}, M{'a', 'b'}, M{256, 257}});
  CHECK(bpe.size() == 259);
  CHECK(bpe.token_bytes(258) == "aaab");
  CHECK(bpe.encode("aaabdaaabac") == std::vector<int64_t>{258, 'd', 258, 'a', 'c'});
  CHECK(bpe.encode("aaab") == std::vector<int64_t>{258});
  CHECK(bpe.encode("ab aa") == std::vector<int64_t>{257, ' ', 256});  // no merge across chunks
  CHECK(BpeTokenizer::train("aaabdaaabac", 257).merges().size() == 1);
}

TEST_CASE("BpeTokenizer: any bytes round-trip, the vocabulary grows to the asked size, training is deterministic") {
  const std::string corpus = syllable_text(3000, 1) + " the fox 😀 1234\n";
  const BpeTokenizer bpe = BpeTokenizer::train(corpus, 400);
  CHECK(bpe.size() == 400);
  CHECK(BpeTokenizer::train(corpus, 400) == bpe);
  const std::vector<int64_t> ids = bpe.encode(corpus);
  CHECK(ids.size() * 3 < corpus.size());  // syllables and common words became single tokens
  CHECK(bpe.decode(ids) == corpus);
  CHECK(std::all_of(ids.begin(), ids.end(), [&](int64_t id) { return id >= 0 && id < bpe.size(); }));
  std::string odd = "unseen Ωmega \xff\xfe\x01 bytes";  // not UTF-8, a control byte
  odd.push_back('\0');
  CHECK(bpe.decode(bpe.encode(odd)) == odd);
  // for printing: every bad byte becomes U+FFFD, valid characters stay
  CHECK(utf8_replace_invalid("a\xffé\xe2\x82") == "a\uFFFDé\uFFFD");  // one per maximal subpart, as Python
  // Python's b.decode("utf-8", errors="replace") for each
  const std::pair<std::string, std::string> cases[] = {
      {"\xf0\x9f\x99", "\uFFFD"},                           // a cut 4-byte sequence: one
      {"\xf0\x9f\x99x", "\uFFFDx"},
      {"\xc0\xaf", "\uFFFD\uFFFD"},                         // C0 leads nothing: one per byte
      {"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},               // a surrogate: ED takes only 80-9F next
      {"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"},               // overlong: E0 takes only A0-BF next
      {"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},      // past U+10FFFF
      {"\xf4\x8f\xbf", "\uFFFD"},                          // a cut U+10FFFF
      {"\xe2\x82\xe2\x82\xac", "\uFFFD\u20AC"},             // a cut sequence, then a whole euro sign
      {"\x80\xbf", "\uFFFD\uFFFD"},                         // stray continuation bytes
      {"\xf5\x80", "\uFFFD\uFFFD"},
  };
  for (const auto& [in, want] : cases) CHECK(utf8_replace_invalid(in) == want);
  CHECK(utf8_replace_invalid("😀 ok") == "😀 ok");
  CHECK(bpe.decode(from_vector(bpe.encode("the fox"))) == "the fox");
  CHECK(error_of([&] { bpe.decode(std::vector<int64_t>{400}); }).find("out of range for a vocabulary of 400") !=
        std::string::npos);
  CHECK(error_of([&] { BpeTokenizer::train(corpus, 100); }).find("vocab_size must be in [256") != std::string::npos);
}

TEST_CASE("BpeTokenizer: save/load round trip; malformed JSON is a clear error") {
  TempDir tmp;
  const BpeTokenizer bpe = BpeTokenizer::train("low lower lowest newer newest wider", 280);
  bpe.save(tmp / "bpe.json");
  CHECK(BpeTokenizer::load(tmp / "bpe.json") == bpe);
  auto err = [](const std::string& text) {
    return error_of([&] { BpeTokenizer::from_json(json::parse(text, "test"), "t.json"); });
  };
  CHECK(err(R"({"format": "kiln.char_vocab", "version": 1})").find("not a kiln BPE tokenizer") != std::string::npos);
  CHECK(err(R"({"format": "kiln.bpe", "version": 2, "merges": []})").find("version") != std::string::npos);
  CHECK(err(R"({"format": "kiln.bpe", "version": 1, "merges": [[97]]})").find("merge 0 must be a pair") !=
        std::string::npos);
  CHECK(err(R"({"format": "kiln.bpe", "version": 1, "merges": [[97, 98], [257, 97]]})")
            .find("merge 1 joins tokens 257 and 97, but only tokens 0 to 256 are defined") != std::string::npos);
  CHECK(err(R"({"format": "kiln.bpe", "version": 1, "merges": [[97, 98], [97, 98]]})").find("repeats the pair") !=
        std::string::npos);
}

TEST_CASE("CharText with bpe_vocab: the tokenizer is trained on the training split, both splits round-trip") {
  TempDir tmp;
  const std::string text = syllable_text(2000, 2);
  kiln_test::write_text(tmp / "t.txt", text);
  CharText t(tmp / "t.txt", {.context = 8, .val_fraction = 0.1, .bpe_vocab = 300});
  REQUIRE(t.tokenizer().is_bpe());
  CHECK(t.tokenizer().size() == 300);
  CHECK(t.tokenizer().decode(t.tokens()) == text);
  CHECK(t.train().num_tokens() + t.val().num_tokens() == t.tokens().numel());
  CHECK(t.tokenizer().decode(t.val().tokens()) == text.substr(text.size() - t.tokenizer().decode(t.val().tokens()).size()));
  CHECK(error_of([&] { t.vocab(); }).find("byte-level BPE") != std::string::npos);
  // the same tokenizer given back (a resumed run) gives the same tokens
  CharText again(tmp / "t.txt", {.context = 8, .val_fraction = 0.1, .tokenizer = t.tokenizer()});
  CHECK(again.tokens().to_vector<int64_t>() == t.tokens().to_vector<int64_t>());
}
