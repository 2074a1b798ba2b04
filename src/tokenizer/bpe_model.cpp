#include "tokenizer/bpe_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"

namespace dsv4 {
namespace {

using nlohmann::json;
namespace jf = json_fields;

constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t length;  // 0: merged into its left neighbour
};

struct Candidate {
  uint32_t rank;
  uint32_t pos;
  int32_t merged;
  // std heaps put the largest on top: "larger" here is the lower rank, then the leftmost position.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// Per-thread buffers of the merge loop, reused so a miss does not allocate.
struct Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

void check_model_options(const json& spec) {
  if (jf::get_bool(spec, "byte_fallback", "model", false)) fail("model.byte_fallback is not implemented");
  if (const auto it = spec.find("dropout"); it != spec.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 0.0) fail("BPE dropout is not implemented");
  }
  if (!jf::absent_or_empty(spec, "continuing_subword_prefix"))
    fail("model.continuing_subword_prefix is not implemented");
  if (!jf::absent_or_empty(spec, "end_of_word_suffix")) fail("model.end_of_word_suffix is not implemented");
}

}  // namespace

BpeModel BpeModel::from_json(const json& spec) {
  const std::string type = jf::type_of(spec, "model");
  if (type != "BPE") fail("model has type {:?}; only BPE is implemented", type);
  check_model_options(spec);
  BpeModel model;
  model.ignore_merges_ = jf::get_bool(spec, "ignore_merges", "model", false);
  const auto vocab = spec.find("vocab");
  if (vocab == spec.end() || !vocab->is_object()) fail("model.vocab must be an object");
  model.parse_vocab(*vocab);
  const auto merges = spec.find("merges");
  if (merges == spec.end() || !merges->is_array()) fail("model.merges must be an array");
  model.parse_merges(*merges);
  return model;
}

void BpeModel::parse_vocab(const json& vocab) {
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
      fail("vocab entry {:?} needs an id in [0, {}]", token, kMaxTokenId);
    vocab_.emplace(token, id.get<int32_t>());
  }
  for (int b = 0; b < 256; ++b) {
    std::string text;
    utf8::append_codepoint(byte_level::byte_to_codepoint(static_cast<uint8_t>(b)), text);
    const auto it = vocab_.find(text);
    if (it == vocab_.end())
      fail("vocab lacks the byte-level token {:?} for byte 0x{:02X}; not a byte-level BPE", text, b);
    byte_ids_[b] = it->second;
  }
}

int32_t BpeModel::id_of(const std::string& token, size_t merge_index) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) fail("merge {} uses {:?}, which is not in the vocab", merge_index, token);
  return it->second;
}

void BpeModel::parse_merges(const json& merges) {
  merges_ = MergeTable(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {  // "left right", split at the one space
      const auto& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail("merge {} ({:?}) must be two tokens separated by one space", i, s);
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail("merge {} must be \"a b\" or [\"a\", \"b\"]", i);
    }
    const int32_t left_id = id_of(left, i);
    const int32_t right_id = id_of(right, i);
    merges_.insert(left_id, right_id, Merge{static_cast<uint32_t>(i), id_of(left + right, i)});
  }
  merge_count_ = merges.size();
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto it = vocab_.find(byte_level::encode(piece)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > WordCache::kMaxWordBytes) {
    merge(piece, out);
    return;
  }
  const uint64_t hash = WordCache::hash(piece);
  if (cache_->lookup(piece, hash, out)) return;
  const size_t start = out.size();
  merge(piece, out);
  cache_->insert(piece, hash, out.data() + start, out.size() - start);
}

void BpeModel::merge(std::string_view piece, std::vector<int32_t>& out) const {
  Scratch& s = scratch();
  auto& sym = s.symbols;
  auto& heap = s.heap;
  sym.clear();
  heap.clear();
  const auto n = static_cast<int32_t>(piece.size());
  for (int32_t i = 0; i < n; ++i)
    sym.push_back({byte_ids_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1, 1});
  const auto consider = [&](int32_t pos) {  // queue the pair that starts at pos, if it merges
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    if (const auto m = merges_.find(sym[pos].id, sym[next].id)) {
      heap.push_back({m->rank, static_cast<uint32_t>(pos), m->merged});
      std::push_heap(heap.begin(), heap.end());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = sym[top.pos];
    if (left.length == 0 || left.next < 0) continue;
    Symbol& right = sym[left.next];
    const auto current = merges_.find(left.id, right.id);
    if (!current || current->merged != top.merged) continue;  // a stale candidate
    left.id = top.merged;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = static_cast<int32_t>(top.pos);
    if (left.prev >= 0) consider(left.prev);
    consider(static_cast<int32_t>(top.pos));
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace dsv4
