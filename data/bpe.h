// A byte-level BPE tokenizer (the scheme of GPT-2's tokenizer, trained here): tokens 0-255
// are the bytes, and token 256 + r is merge r, the concatenation of two earlier tokens.
// Any byte string encodes (no unknown token), and decode(encode(s)) == s.
//
// Training counts, over the text split into chunks (a run of letters, of digits, of other
// symbols or of whitespace, a word taking the single space before it), how often each
// pair of adjacent tokens occurs, merges the most frequent pair (ties: the smallest pair of
// ids, so training is deterministic) and repeats until the vocabulary has the asked size or
// no pair occurs twice. Merges never cross a chunk. Encoding splits the same way and, in
// each chunk, applies the merges in the order they were learned.
//
//   data::BpeTokenizer bpe = data::BpeTokenizer::train(text, 512);
//   std::vector<int64_t> ids = bpe.encode("to be or not"); std::string s = bpe.decode(ids);
//   bpe.save("bpe.json");  auto again = data::BpeTokenizer::load("bpe.json");
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>
#include "kiln/core/json.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

class BpeTokenizer {
 public:
  using Merge = std::pair<int32_t, int32_t>;  ///< the two tokens merge r joins

  /// The 256 byte tokens and no merge.
  BpeTokenizer();
  /// From merges (token 256 + r = merges[r]); each may only join tokens defined before it.
  explicit BpeTokenizer(std::vector<Merge> merges);
  /// Learns up to vocab_size - 256 merges from `text` (vocab_size in [256, 2^20]).
  static BpeTokenizer train(std::string_view text, int64_t vocab_size);

  /// 256 + the number of merges.
  int64_t size() const { return int64_t(bytes_.size()); }
  const std::vector<Merge>& merges() const { return merges_; }
  /// The bytes token `id` stands for; throws for an id outside [0, size()).
  const std::string& token_bytes(int64_t id) const;

  std::vector<int64_t> encode(std::string_view text) const;
  /// The bytes of the tokens (valid UTF-8 when they came from encoding UTF-8 whole).
  std::string decode(const std::vector<int64_t>& ids) const;
  /// Same for a 1-D integer tensor.
  std::string decode(const Tensor& ids) const;

  /// {"format": "kiln.bpe", "version": 1, "merges": [[a, b], ...]}.
  json::Value to_json() const;
  /// Reads to_json()'s form; `what` names the source in errors.
  static BpeTokenizer from_json(const json::Value& v, const std::string& what);
  /// Writes to_json() atomically (temp file + rename).
  void save(const std::string& path) const;
  static BpeTokenizer load(const std::string& path);
  bool operator==(const BpeTokenizer& o) const { return merges_ == o.merges_; }

 private:
  std::vector<Merge> merges_;
  std::vector<std::string> bytes_;               // per token
  std::unordered_map<uint64_t, int32_t> rank_;   // (a << 32 | b) -> r
  void encode_chunk(std::string_view chunk, std::vector<int64_t>& out) const;
};

/// The chunks of `text` that BPE merges stay within (see above), in order; together they
/// are the text.
std::vector<std::string_view> bpe_chunks(std::string_view text);

}  // namespace kiln::data
