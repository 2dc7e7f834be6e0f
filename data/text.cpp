// Character-level text: UTF-8 decoding/encoding, the code-point vocabulary (with its
// small JSON file, written atomically), token windows and the CharText corpus.
#include "kiln/data/text.h"
#include <algorithm>
#include <cstring>
#include "kiln/core/error.h"
#include "kiln/core/json.h"
#include "kiln/data/io.h"

namespace kiln::data {

// ---------------------------------------------------------------- UTF-8

namespace {
// The code point starting at byte i of s and its length in bytes, or why the bytes there
// are not UTF-8 (then c and len are unset).
const char* utf8_next(std::string_view s, size_t i, char32_t& c, size_t& len) {
  const uint8_t b0 = uint8_t(s[i]);
  if (b0 < 0x80) {
    c = b0;
    len = 1;
    return nullptr;
  }
  size_t n = 0;
  char32_t v = 0;
  if ((b0 & 0xE0) == 0xC0) { n = 2; v = b0 & 0x1F; }
  else if ((b0 & 0xF0) == 0xE0) { n = 3; v = b0 & 0x0F; }
  else if ((b0 & 0xF8) == 0xF0) { n = 4; v = b0 & 0x07; }
  else return "unexpected byte";
  if (i + n > s.size()) return "sequence cut short by the end of the text";
  for (size_t k = 1; k < n; ++k) {
    const uint8_t b = uint8_t(s[i + k]);
    if ((b & 0xC0) != 0x80) return "missing continuation byte";
    v = (v << 6) | (b & 0x3F);
  }
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n]) return "overlong encoding";
  if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return "not a Unicode scalar value";
  c = v;
  len = n;
  return nullptr;
}

// The length of the maximal subpart at byte i of an ill-formed sequence (Unicode's
// "substitution of maximal subparts", which Python's errors="replace" and WHATWG follow):
// a lead byte and the continuation bytes that could still start a well-formed sequence
// with it, or the one byte when it can lead nothing.
size_t utf8_bad_length(std::string_view s, size_t i) {
  const uint8_t b0 = uint8_t(s[i]);
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range, narrower after E0, ED, F0, F4
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) { n = 3; lo = b0 == 0xE0 ? 0xA0 : 0x80; hi = b0 == 0xED ? 0x9F : 0xBF; }
  else if (b0 >= 0xF0 && b0 <= 0xF4) { n = 4; lo = b0 == 0xF0 ? 0x90 : 0x80; hi = b0 == 0xF4 ? 0x8F : 0xBF; }
  else return 1;
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k, lo = 0x80, hi = 0xBF)
    if (uint8_t(s[i + k]) < lo || uint8_t(s[i + k]) > hi) break;
  return k;
}
}  // namespace

std::vector<char32_t> utf8_decode(std::string_view s, const std::string& what) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c = 0;
    size_t len = 0;
    if (const char* why = utf8_next(s, i, c, len)) KILN_FAIL(what, ": invalid UTF-8 at byte offset ", i, " (", why, ")");
    out.push_back(c);
    i += len;
  }
  return out;
}

std::string utf8_replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c = 0;
    size_t len = 0;
    if (utf8_next(s, i, c, len)) {
      utf8_append(out, 0xFFFD);  // one replacement per maximal subpart
      i += utf8_bad_length(s, i);
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

// ---------------------------------------------------------------- CharVocab

CharVocab::CharVocab() { index(); }

CharVocab::CharVocab(std::vector<char32_t> cps) : chars_(std::move(cps)) {
  std::sort(chars_.begin(), chars_.end());
  chars_.erase(std::unique(chars_.begin(), chars_.end()), chars_.end());
  for (char32_t c : chars_)
    KILN_CHECK(c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF), "CharVocab: ", uint32_t(c),
               " is not a Unicode scalar value");
  index();
}

void CharVocab::index() {
  std::fill(std::begin(ascii_), std::end(ascii_), int64_t(-1));
  for (size_t i = 0; i < chars_.size() && chars_[i] < 128; ++i) ascii_[chars_[i]] = int64_t(i);
}

CharVocab CharVocab::from_text(std::string_view utf8) {
  std::vector<char32_t> cps = utf8_decode(utf8);
  return CharVocab(std::move(cps));
}

int64_t CharVocab::id(char32_t c) const {
  if (c < 128) return ascii_[c];
  auto it = std::lower_bound(chars_.begin(), chars_.end(), c);
  return it != chars_.end() && *it == c ? int64_t(it - chars_.begin()) : -1;
}

std::vector<int64_t> CharVocab::encode(std::string_view utf8) const {
  std::vector<char32_t> cps = utf8_decode(utf8);
  std::vector<int64_t> ids(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    ids[i] = id(cps[i]);
    if (ids[i] < 0) {
      std::string ch;
      utf8_append(ch, cps[i]);
      KILN_FAIL("CharVocab::encode: character '", ch, "' (U+", std::hex, uint32_t(cps[i]), std::dec,
                ") at position ", i, " is not in the vocabulary of ", size(), " characters");
    }
  }
  return ids;
}

std::string CharVocab::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    KILN_CHECK(ids[i] >= 0 && ids[i] < size(), "CharVocab::decode: token id ", ids[i], " at position ", i,
               " is outside the vocabulary [0, ", size(), ")");
    utf8_append(out, chars_[size_t(ids[i])]);
  }
  return out;
}

std::string CharVocab::decode(const Tensor& ids) const {
  KILN_CHECK(ids.defined() && ids.dim() <= 1 && !ids.is_floating_point(), "CharVocab::decode: expected a 1-D "
             "integer tensor of token ids, got ", ids.defined() ? shape_str(ids.shape()) + " " + dtype_name(ids.dtype())
                                                             : std::string("an undefined tensor"));
  return decode(ids.to_vector<int64_t>());
}

void CharVocab::save(const std::string& path) const {
  json::Value v;
  v["format"] = "kiln.char_vocab";
  v["version"] = 1;
  v["size"] = chars_.size();
  json::Value& cps = v["code_points"] = json::Value::array();
  for (char32_t c : chars_) cps.push_back(uint32_t(c));
  write_file_atomic(path, v.dump(1) + "\n");
}

CharVocab CharVocab::load(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  try {
    const json::Value v = json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                                      "not a kiln vocabulary file");
    for (const auto& [key, x] : v.items())
      KILN_CHECK(key == "format" || key == "version" || key == "size" || key == "code_points", "unknown key \"", key,
                 "\"");
    const std::string format = v.contains("format") ? v.at("format").as_string() : "";
    KILN_CHECK(format == "kiln.char_vocab", "format is \"", format, "\", expected \"kiln.char_vocab\"");
    const int64_t version = v.contains("version") ? v.at("version").as_int() : 1;
    KILN_CHECK(version == 1, "version ", version, ", this kiln reads version 1");
    KILN_CHECK(v.contains("code_points"), "no \"code_points\"");
    std::vector<char32_t> cps;
    for (const json::Value& c : v.at("code_points").as_array()) {
      const int64_t x = c.as_int();
      KILN_CHECK(x >= 0 && x <= 0x10FFFF, "code point ", x, " is out of the Unicode range");
      KILN_CHECK(cps.empty() || char32_t(x) > cps.back(), "code points must be strictly increasing (entry ",
                 cps.size(), ")");
      cps.push_back(char32_t(x));
    }
    const int64_t declared = v.contains("size") ? v.at("size").as_int() : int64_t(cps.size());
    KILN_CHECK(declared == int64_t(cps.size()), "declares size ", declared, " but lists ", cps.size(), " code points");
    return CharVocab(std::move(cps));
  } catch (const Error& e) {
    KILN_FAIL("CharVocab::load: '", path, "': ", e.what());
  }
}

// ---------------------------------------------------------------- TokenDataset

TokenDataset::TokenDataset(Tensor tokens, int64_t context) : context_(context) {
  KILN_CHECK(tokens.defined() && tokens.dim() == 1 && tokens.is_cpu(), "TokenDataset: expected a 1-D CPU tensor "
             "of token ids, got ", tokens.defined() ? shape_str(tokens.shape()) : std::string("an undefined tensor"));
  KILN_CHECK(context >= 1, "TokenDataset: context must be >= 1, got ", context);
  tokens_ = tokens.detach().to(DType::int64).contiguous();
}

int64_t TokenDataset::size() const {
  const int64_t n = num_tokens();
  return n > 0 ? (n - 1) / context_ : 0;
}

Batch TokenDataset::get_batch(std::span<const int64_t> indices) const {
  const int64_t B = int64_t(indices.size()), T = context_, n = size();
  Batch b;
  b.input = Tensor::empty({B, T}, DType::int64);   // (B, T)
  b.target = Tensor::empty({B, T}, DType::int64);  // (B, T)
  const int64_t* tok = tokens_.defined() ? tokens_.data<int64_t>() : nullptr;
  for (int64_t k = 0; k < B; ++k) {
    const int64_t i = indices[size_t(k)];
    KILN_CHECK(i >= 0 && i < n, "TokenDataset::get_batch: window ", i, " out of range for ", n, " windows of ",
               T, " tokens");
    std::memcpy(b.input.data<int64_t>() + k * T, tok + i * T, size_t(T) * sizeof(int64_t));
    std::memcpy(b.target.data<int64_t>() + k * T, tok + i * T + 1, size_t(T) * sizeof(int64_t));
  }
  b.indices.assign(indices.begin(), indices.end());
  return b;
}

Example TokenDataset::get(int64_t i) const {
  const int64_t idx[1] = {i};
  Batch b = get_batch(idx);
  return {b.input.reshape({context_}), b.target.reshape({context_})};
}

Batch TokenDataset::get_batch(int64_t batch, int64_t context, Rng& rng) const {
  const int64_t n = num_tokens();
  KILN_CHECK(batch >= 1 && context >= 1, "TokenDataset::get_batch: batch and context must be >= 1, got ", batch,
             " and ", context);
  KILN_CHECK(context < n, "TokenDataset::get_batch: ", n, " tokens are too few for windows of ", context,
             " tokens plus the shifted target (need more than ", context, ")");
  Batch b;
  b.input = Tensor::empty({batch, context}, DType::int64);   // (B, T)
  b.target = Tensor::empty({batch, context}, DType::int64);  // (B, T)
  const int64_t* tok = tokens_.data<int64_t>();
  int64_t* x = b.input.data<int64_t>();
  int64_t* y = b.target.data<int64_t>();
  b.indices.resize(size_t(batch));
  for (int64_t k = 0; k < batch; ++k) {
    const int64_t s = rng.randint(0, n - context);  // start in [0, n - context - 1]
    b.indices[size_t(k)] = s;
    std::memcpy(x + k * context, tok + s, size_t(context) * sizeof(int64_t));
    std::memcpy(y + k * context, tok + s + 1, size_t(context) * sizeof(int64_t));
  }
  return b;
}

// ---------------------------------------------------------------- CharText

CharText::CharText(const std::string& path, CharTextOptions options) : path_(path) {
  KILN_CHECK(options.val_fraction >= 0.0 && options.val_fraction < 1.0, "CharText: val_fraction must be in [0, 1), got ",
             options.val_fraction);
  KILN_CHECK(options.context >= 1, "CharText: context must be >= 1, got ", options.context);
  std::vector<uint8_t> bytes = read_file_bytes(path);
  KILN_CHECK(!bytes.empty(), "CharText: '", path, "' is empty");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<char32_t> cps = utf8_decode(text, "CharText: '" + path + "'");  // valid UTF-8 either way
  const bool bpe = options.tokenizer ? options.tokenizer->is_bpe() : options.bpe_vocab > 0;
  if (bpe) {
    // split by characters (never inside one), then encode each split on its own
    const int64_t n_cp = int64_t(cps.size());
    const int64_t cut_cp = std::min<int64_t>(n_cp, int64_t(double(n_cp) * (1.0 - options.val_fraction)));
    std::string train_text;
    for (int64_t i = 0; i < cut_cp; ++i) utf8_append(train_text, cps[size_t(i)]);
    const std::string_view val_text = text.substr(train_text.size());
    cps = {};
    tokenizer_ = options.tokenizer ? *options.tokenizer
                                   : Tokenizer(BpeTokenizer::train(train_text, options.bpe_vocab));
    std::vector<int64_t> ids = tokenizer_.encode(train_text);
    const int64_t n_train = int64_t(ids.size());
    const std::vector<int64_t> val_ids = tokenizer_.encode(val_text);
    ids.insert(ids.end(), val_ids.begin(), val_ids.end());
    tokens_ = from_vector(ids, {int64_t(ids.size())});
    train_ = TokenDataset(tokens_.narrow(0, 0, n_train), options.context);
    val_ = TokenDataset(tokens_.narrow(0, n_train, tokens_.numel() - n_train), options.context);
    return;
  }
  bytes = {};
  tokenizer_ = options.tokenizer ? *options.tokenizer : Tokenizer(options.vocab ? *options.vocab : CharVocab(cps));
  const CharVocab& vocab = tokenizer_.chars();
  const int64_t n = int64_t(cps.size());
  tokens_ = Tensor::empty({n}, DType::int64);
  int64_t* t = tokens_.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    t[i] = vocab.id(cps[size_t(i)]);
    if (t[i] < 0) {
      std::string ch;
      utf8_append(ch, cps[size_t(i)]);
      KILN_FAIL("CharText: '", path, "': character '", ch, "' (character ", i,
                ") is not in the given vocabulary of ", vocab.size(), " characters");
    }
  }
  const int64_t n_train = std::min<int64_t>(n, int64_t(double(n) * (1.0 - options.val_fraction)));
  train_ = TokenDataset(tokens_.narrow(0, 0, n_train), options.context);
  val_ = TokenDataset(tokens_.narrow(0, n_train, n - n_train), options.context);
}

const CharVocab& CharText::vocab() const {
  KILN_CHECK(!tokenizer_.is_bpe(), "CharText::vocab: '", path_, "' is tokenized by byte-level BPE, not characters; use "
             "tokenizer()");
  return tokenizer_.chars();
}

}  // namespace kiln::data
