#include "model/dense_kv.h"

#include "core/error.h"

namespace dsv4 {

KvEntryDims kv_entry_dims(const ModelConfig& c, int ratio, KvKind kind) {
  const int overlap = ratio == 4 ? 2 : 1;
  switch (kind) {
    case KvKind::kWindow:
    case KvKind::kCompressed:
      return {c.head_dim, c.rope_head_dim};
    case KvKind::kCompressorState:
      return {2 * overlap * c.head_dim, 0};
    case KvKind::kIndexerState:
      return {2 * 2 * c.index_head_dim, 0};
    case KvKind::kIndexerKey:
      return {c.index_head_dim, 0};
  }
  return {};
}

bool kv_kind_applies(KvKind kind, int ratio) {
  switch (kind) {
    case KvKind::kWindow:
      return true;
    case KvKind::kCompressorState:
    case KvKind::kCompressed:
      return ratio != 0;
    case KvKind::kIndexerState:
    case KvKind::kIndexerKey:
      return ratio == 4;
  }
  return false;
}

DenseKv::DenseKv(Device& dev, const ModelConfig& c, int sequences, int64_t max_len, KvFormats formats)
    : sequences_(sequences) {
  const int layers = c.n_layers + c.n_mtp_layers;
  tables_.resize(static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    const int ratio = c.compress_ratio(l);
    auto& row = tables_[static_cast<size_t>(l)];
    row.resize(5);
    auto make = [&](KvKind kind, KvEntryFormat f, int64_t per_seq) {
      const KvEntryDims d = kv_entry_dims(c, ratio, kind);
      const int64_t entries = std::max<int64_t>(1, per_seq * sequences);
      Table& t = row[static_cast<size_t>(kind)];
      t.per_seq = per_seq;
      t.memory = DeviceArray<uint8_t>(dev, static_cast<size_t>(entries * kv_entry_bytes(f, d)));
      t.table = contiguous_table(t.memory.data(), entries, f, d);
    };
    make(KvKind::kWindow, formats.attention, max_len);
    if (ratio == 0) continue;
    make(KvKind::kCompressorState, KvEntryFormat::kF32, max_len);
    make(KvKind::kCompressed, formats.attention, max_len / ratio);
    if (ratio != 4) continue;
    make(KvKind::kIndexerState, KvEntryFormat::kF32, max_len);
    make(KvKind::kIndexerKey, formats.indexer, max_len / 4);
  }
}

const DenseKv::Table* DenseKv::find(int layer, KvKind kind) const {
  DSV4_CHECK(layer >= 0 && layer < static_cast<int>(tables_.size()), "kv: layer {} out of range", layer);
  const Table& t = tables_[static_cast<size_t>(layer)][static_cast<size_t>(kind)];
  DSV4_CHECK(t.memory.data(), "kv: layer {} has no table of kind {}", layer, static_cast<int>(kind));
  return &t;
}

EntryTable DenseKv::table(int layer, KvKind kind) const { return find(layer, kind)->table; }

int32_t DenseKv::slot(int32_t seq, int layer, KvKind kind, int64_t index) const {
  DSV4_CHECK(seq >= 0 && seq < sequences_, "kv: sequence {} out of range", seq);
  const int64_t per_seq = find(layer, kind)->per_seq;
  if (index < 0 || index >= per_seq) return -1;
  return static_cast<int32_t>(seq * per_seq + index);
}

}  // namespace dsv4
