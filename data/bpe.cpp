// Byte-level BPE (see bpe.h): chunking, training, encoding, decoding and the JSON form.
#include "kiln/data/bpe.h"
#include <limits>
#include "kiln/core/error.h"
#include "kiln/core/file_io.h"

namespace kiln::data {

namespace {

enum Class { kSpace, kLetter, kDigit, kOther };

Class klass(unsigned char c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return kSpace;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return kLetter;  // UTF-8 bytes stay in words
  if (c >= '0' && c <= '9') return kDigit;
  return kOther;
}

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

// Replaces every (a, b) in w, left to right, by id.
void merge_in(std::vector<int32_t>& w, int32_t a, int32_t b, int32_t id) {
  size_t out = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (i + 1 < w.size() && w[i] == a && w[i + 1] == b) {
      w[out++] = id;
      ++i;
    } else {
      w[out++] = w[i];
    }
  }
  w.resize(out);
}

constexpr int64_t kMaxVocab = int64_t(1) << 20;

}  // namespace

std::vector<std::string_view> bpe_chunks(std::string_view text) {
  std::vector<std::string_view> chunks;
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const size_t start = i;
    Class cls = klass(static_cast<unsigned char>(text[i]));
    if (text[i] == ' ' && i + 1 < n && klass(static_cast<unsigned char>(text[i + 1])) != kSpace) {
      cls = klass(static_cast<unsigned char>(text[i + 1]));  // a word takes the one space before it
      ++i;
    }
    if (cls == kSpace) {
      size_t j = i;
      while (j < n && klass(static_cast<unsigned char>(text[j])) == kSpace) ++j;
      if (j < n && j - 1 > start && text[j - 1] == ' ') --j;  // leave that space to the word after the run
      i = j;
    } else {
      while (i < n && klass(static_cast<unsigned char>(text[i])) == cls) ++i;
    }
    chunks.push_back(text.substr(start, i - start));
  }
  return chunks;
}

BpeTokenizer::BpeTokenizer() : BpeTokenizer(std::vector<Merge>{}) {}

BpeTokenizer::BpeTokenizer(std::vector<Merge> merges) : merges_(std::move(merges)) {
  KILN_CHECK(int64_t(merges_.size()) <= kMaxVocab - 256, "BpeTokenizer: ", merges_.size(), " merges are more than "
             "the ", kMaxVocab - 256, " allowed");
  bytes_.reserve(256 + merges_.size());
  for (int c = 0; c < 256; ++c) bytes_.push_back(std::string(1, char(c)));
  for (size_t r = 0; r < merges_.size(); ++r) {
    const auto [a, b] = merges_[r];
    const int64_t defined = int64_t(bytes_.size());
    KILN_CHECK(a >= 0 && b >= 0 && a < defined && b < defined, "BpeTokenizer: merge ", r, " joins tokens ", a, " and ",
               b, ", but only tokens 0 to ", defined - 1, " are defined before it");
    KILN_CHECK(rank_.emplace(pair_key(a, b), int32_t(r)).second, "BpeTokenizer: merge ", r, " repeats the pair (", a,
               ", ", b, ")");
    bytes_.push_back(bytes_[size_t(a)] + bytes_[size_t(b)]);
  }
}

BpeTokenizer BpeTokenizer::train(std::string_view text, int64_t vocab_size) {
  KILN_CHECK(vocab_size >= 256 && vocab_size <= kMaxVocab, "BpeTokenizer::train: vocab_size must be in [256, ",
             kMaxVocab, "], got ", vocab_size);
  // every distinct chunk once, with how often it occurs
  std::unordered_map<std::string_view, int64_t> freq;
  for (std::string_view c : bpe_chunks(text)) ++freq[c];
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  words.reserve(freq.size());
  for (const auto& [chunk, count] : freq) {
    if (chunk.size() < 2) continue;  // nothing to merge in one byte
    std::vector<int32_t> w(chunk.size());
    for (size_t i = 0; i < chunk.size(); ++i) w[i] = static_cast<unsigned char>(chunk[i]);
    words.push_back(std::move(w));
    counts.push_back(count);
  }
  std::vector<Merge> merges;
  std::unordered_map<uint64_t, int64_t> pairs;
  for (int64_t id = 256; id < vocab_size; ++id) {
    pairs.clear();
    for (size_t k = 0; k < words.size(); ++k)
      for (size_t t = 0; t + 1 < words[k].size(); ++t) pairs[pair_key(words[k][t], words[k][t + 1])] += counts[k];
    uint64_t best = 0;
    int64_t best_n = 0;
    for (const auto& [key, n] : pairs)
      if (n > best_n || (n == best_n && key < best)) best = key, best_n = n;
    if (best_n < 2) break;  // no pair occurs twice: more merges would only memorise
    const int32_t a = int32_t(best >> 32), b = int32_t(best & 0xffffffffu);
    merges.emplace_back(a, b);
    for (auto& w : words) merge_in(w, a, b, int32_t(id));
  }
  return BpeTokenizer(std::move(merges));
}

const std::string& BpeTokenizer::token_bytes(int64_t id) const {
  KILN_CHECK(id >= 0 && id < size(), "BpeTokenizer: token id ", id, " is out of range for a vocabulary of ", size());
  return bytes_[size_t(id)];
}

void BpeTokenizer::encode_chunk(std::string_view chunk, std::vector<int64_t>& out) const {
  std::vector<int32_t> w(chunk.size());
  for (size_t i = 0; i < chunk.size(); ++i) w[i] = static_cast<unsigned char>(chunk[i]);
  while (w.size() >= 2) {  // the earliest-learned merge present, everywhere in the chunk
    int32_t best = std::numeric_limits<int32_t>::max();
    for (size_t t = 0; t + 1 < w.size(); ++t) {
      auto it = rank_.find(pair_key(w[t], w[t + 1]));
      if (it != rank_.end() && it->second < best) best = it->second;
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    merge_in(w, merges_[size_t(best)].first, merges_[size_t(best)].second, 256 + best);
  }
  out.insert(out.end(), w.begin(), w.end());
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> out;
  out.reserve(text.size() / 2);
  std::unordered_map<std::string_view, std::vector<int64_t>> cache;  // chunks repeat a lot
  for (std::string_view c : bpe_chunks(text)) {
    auto it = cache.find(c);
    if (it == cache.end()) {
      std::vector<int64_t> ids;
      encode_chunk(c, ids);
      it = cache.emplace(c, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  for (int64_t id : ids) s += token_bytes(id);
  return s;
}

std::string BpeTokenizer::decode(const Tensor& ids) const {
  KILN_CHECK(ids.dim() == 1 && !ids.is_floating_point(), "BpeTokenizer::decode: expected a 1-D integer tensor, got ",
             dtype_name(ids.dtype()), " of shape ", shape_str(ids.shape()));
  return decode(ids.to(Device::cpu()).to(DType::int64).contiguous().to_vector<int64_t>());
}

json::Value BpeTokenizer::to_json() const {
  json::Value v;
  v["format"] = "kiln.bpe";
  v["version"] = 1;
  json::Value& m = v["merges"] = json::Value::array();
  for (const auto& [a, b] : merges_) {
    json::Value p = json::Value::array();
    p.push_back(int64_t(a));
    p.push_back(int64_t(b));
    m.push_back(std::move(p));
  }
  return v;
}

BpeTokenizer BpeTokenizer::from_json(const json::Value& v, const std::string& what) {
  KILN_CHECK(v.is_object() && v.contains("format") && v.at("format").is_string() &&
                 v.at("format").as_string() == "kiln.bpe",
             what, ": not a kiln BPE tokenizer (expected {\"format\": \"kiln.bpe\", ...})");
  KILN_CHECK(v.contains("version") && v.at("version").is_int() && v.at("version").as_int() == 1, what,
             ": unsupported kiln.bpe version (this kiln reads version 1)");
  KILN_CHECK(v.contains("merges") && v.at("merges").is_array(), what, ": \"merges\" must be an array of [a, b] pairs");
  std::vector<Merge> merges;
  const std::vector<json::Value>& m = v.at("merges").as_array();
  for (size_t r = 0; r < m.size(); ++r) {
    const bool pair = m[r].is_array() && m[r].size() == 2;
    KILN_CHECK(pair && m[r].as_array()[0].is_int() && m[r].as_array()[1].is_int(), what, ": merge ", r,
               " must be a pair of token ids [a, b]");
    const int64_t a = m[r].as_array()[0].as_int(), b = m[r].as_array()[1].as_int();
    KILN_CHECK(a >= 0 && b >= 0 && a < kMaxVocab && b < kMaxVocab, what, ": merge ", r, " has token ids (", a, ", ", b,
               ") out of range");
    merges.emplace_back(int32_t(a), int32_t(b));
  }
  try {
    return BpeTokenizer(std::move(merges));
  } catch (const Error& e) {
    KILN_FAIL(what, ": ", e.what());
  }
}

void BpeTokenizer::save(const std::string& path) const { write_file_atomic(path, to_json().dump() + "\n"); }

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  const std::string what = "'" + path + "'";
  return from_json(json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), what), what);
}

}  // namespace kiln::data
