// Text data for GPT training: a vocabulary of the Unicode code points of a UTF-8 text
// (multi-byte characters are single tokens) or a byte-level BPE tokenizer (data/bpe.h),
// a token stream with random (B, T) windows, and a sequential Dataset view of it.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "kiln/core/tensor.h"
#include "kiln/data/bpe.h"
#include "kiln/data/dataset.h"
#include "kiln/data/rng.h"

namespace kiln::data {

/// Sorted set of code points; token id = position in that order.
class CharVocab {
 public:
  /// An empty vocabulary.
  CharVocab();
  /// From code points (sorted and de-duplicated here).
  explicit CharVocab(std::vector<char32_t> code_points);
  /// Every distinct code point of a UTF-8 text (throws on invalid UTF-8).
  static CharVocab from_text(std::string_view utf8);
  /// Reads a vocabulary written by save().
  static CharVocab load(const std::string& path);
  /// Writes {"format": "kiln.char_vocab", "version": 1, "size": N, "code_points": [...]}
  /// atomically (temp file + rename).
  void save(const std::string& path) const;

  int64_t size() const { return int64_t(chars_.size()); }
  const std::vector<char32_t>& code_points() const { return chars_; }
  /// Token id of a code point, or -1 if it is not in the vocabulary.
  int64_t id(char32_t c) const;
  /// Token ids of a UTF-8 text; throws on invalid UTF-8 or a character not in the vocabulary.
  std::vector<int64_t> encode(std::string_view utf8) const;
  /// UTF-8 text of token ids; throws on an id outside [0, size()).
  std::string decode(const std::vector<int64_t>& ids) const;
  /// Same for a 1-D integer tensor.
  std::string decode(const Tensor& ids) const;
  bool operator==(const CharVocab& o) const { return chars_ == o.chars_; }

 private:
  std::vector<char32_t> chars_;
  int64_t ascii_[128];  // id of each ASCII code point (-1: absent)
  void index();
};

/// Decodes UTF-8 into code points; `what` names the source in errors (invalid bytes
/// are reported with their offset).
std::vector<char32_t> utf8_decode(std::string_view utf8, const std::string& what = "text");
/// Encodes one code point as UTF-8 and appends it.
void utf8_append(std::string& out, char32_t c);
/// The bytes with every invalid UTF-8 sequence replaced by U+FFFD, one per maximal subpart
/// as Python's bytes.decode(errors="replace") (so "\xe2\x82" gives one, "\xc0\xaf" two), for
/// printing text a byte-level model generated (it may stop inside a character or emit a
/// stray byte).
std::string utf8_replace_invalid(std::string_view bytes);

/// A token stream (int64 (N)) viewed as a Dataset of non-overlapping windows of
/// `context` tokens (example i: input tokens[i*T, i*T+T), target shifted by one), and a
/// source of random windows for GPT training.
class TokenDataset : public Dataset {
 public:
  TokenDataset() = default;
  TokenDataset(Tensor tokens, int64_t context);

  /// Number of whole windows: (N - 1) / context.
  int64_t size() const override;
  Example get(int64_t i) const override;
  Batch get_batch(std::span<const int64_t> indices) const override;
  /// `batch` windows at random starts in [0, N - context - 1] (uniform, drawn from rng):
  /// input int64 (B, T), target (B, T) = the same windows shifted by one token.
  Batch get_batch(int64_t batch, int64_t context, Rng& rng) const;

  const Tensor& tokens() const { return tokens_; }
  int64_t num_tokens() const { return tokens_.defined() ? tokens_.numel() : 0; }
  int64_t context() const { return context_; }

 private:
  Tensor tokens_;  // int64 (N), contiguous
  int64_t context_ = 1;
};

/// What turns a GPT's text into token ids and back: characters (CharVocab) or byte-level
/// BPE (BpeTokenizer).
class Tokenizer {
 public:
  /// Characters, from a vocabulary.
  explicit Tokenizer(CharVocab vocab) : chars_(std::move(vocab)) {}
  /// Byte-level BPE.
  explicit Tokenizer(BpeTokenizer bpe) : bpe_(std::move(bpe)), is_bpe_(true) {}
  bool is_bpe() const { return is_bpe_; }
  /// "char" or "bpe".
  const char* kind() const { return is_bpe_ ? "bpe" : "char"; }
  int64_t size() const { return is_bpe_ ? bpe_.size() : chars_.size(); }
  /// Token ids of a UTF-8 text (characters: throws for one not in the vocabulary).
  std::vector<int64_t> encode(std::string_view utf8) const { return is_bpe_ ? bpe_.encode(utf8) : chars_.encode(utf8); }
  std::string decode(const std::vector<int64_t>& ids) const { return is_bpe_ ? bpe_.decode(ids) : chars_.decode(ids); }
  std::string decode(const Tensor& ids) const { return is_bpe_ ? bpe_.decode(ids) : chars_.decode(ids); }
  const CharVocab& chars() const { return chars_; }  ///< empty for BPE
  const BpeTokenizer& bpe() const { return bpe_; }   ///< bytes only for characters

 private:
  CharVocab chars_;
  BpeTokenizer bpe_;
  bool is_bpe_ = false;
};

/// Options of CharText.
struct CharTextOptions {
  /// Window length of the sequential Dataset views train() / val().
  int64_t context = 128;
  /// The last fraction of the tokens forms the validation split (0 <= f < 1).
  double val_fraction = 0.1;
  /// Use this vocabulary instead of building one from the text (a character missing
  /// from it is an error).
  std::optional<CharVocab> vocab = std::nullopt;
  /// Use this tokenizer (characters or BPE) instead; wins over `vocab` and `bpe_vocab`.
  std::optional<Tokenizer> tokenizer = std::nullopt;
  /// > 0: train a byte-level BPE of this many tokens (>= 256) on the training split and
  /// use it instead of characters.
  int64_t bpe_vocab = 0;
};

/// A UTF-8 text file (plain or .gz) as tokens, characters by default (or byte-level BPE:
/// options.tokenizer, options.bpe_vocab): the tokenizer, the train split (the first
/// 1 - val_fraction of the text) and the validation split.
class CharText {
 public:
  explicit CharText(const std::string& path, CharTextOptions options = {});
  const Tokenizer& tokenizer() const { return tokenizer_; }
  /// The character vocabulary (throws for a BPE-tokenized text: use tokenizer()).
  const CharVocab& vocab() const;
  const TokenDataset& train() const { return train_; }
  const TokenDataset& val() const { return val_; }
  /// All tokens, int64 (N).
  const Tensor& tokens() const { return tokens_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  Tokenizer tokenizer_{CharVocab()};
  Tensor tokens_;
  TokenDataset train_, val_;
};

}  // namespace kiln::data
