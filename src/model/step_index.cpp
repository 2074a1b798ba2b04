#include "model/step_index.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {
namespace {

std::vector<int32_t> per_token(const ForwardBatch& b, const KvAccess& kv, int layer, KvKind kind) {
  std::vector<int32_t> out(static_cast<size_t>(b.tokens()));
  for (const auto& s : b.seqs)
    for (int64_t i = 0; i < s.count; ++i)
      out[static_cast<size_t>(s.offset + i)] = kv.slot(s.seq, layer, kind, s.start + i);
  return out;
}

// Blocks i completed in this forward: (i + 1) * ratio - 1 in [start, end).
EmitList emit_list(Device& dev, const ForwardBatch& b, const KvAccess& kv, int layer, int ratio, KvKind state,
                   KvKind out) {
  const int c = ratio == 4 ? 2 : 1;
  std::vector<int32_t> block, rows, slots;
  for (const auto& s : b.seqs) {
    const int64_t end = s.start + s.count;
    for (int64_t i = s.start / ratio; i < end / ratio; ++i) {
      block.push_back(static_cast<int32_t>(i));
      for (int64_t p = (i - (c - 1)) * ratio; p < (i + 1) * ratio; ++p) {
        const int32_t slot = p < 0 ? -1 : kv.slot(s.seq, layer, state, p);
        DSV4_CHECK(p < 0 || slot >= 0, "kv: compressor row for position {} of sequence {} is not resident", p, s.seq);
        rows.push_back(slot);
      }
      slots.push_back(kv.slot(s.seq, layer, out, i));
    }
  }
  EmitList e;
  e.entries = static_cast<int64_t>(block.size());
  e.block_index = DeviceArray<int32_t>(dev, block);
  e.rows = DeviceArray<int32_t>(dev, rows);
  e.out_slots = DeviceArray<int32_t>(dev, slots);
  return e;
}

// Slot rows expanded on the device: row r holds count[r] items of page list list_of[r], −1 up to width.
DeviceArray<int32_t> expand(Device& dev, Ops& ops, const std::vector<ItemPages>& lists,
                            const std::vector<int32_t>& list_of, const std::vector<int32_t>& count, int64_t width) {
  const int64_t rows = static_cast<int64_t>(list_of.size());
  DeviceArray<int32_t> out(dev, static_cast<size_t>(std::max<int64_t>(1, rows * width)));
  if (rows == 0 || width == 0) return out;
  int64_t stride = 1;
  for (const auto& l : lists) {
    DSV4_CHECK(l.per_page == lists[0].per_page, "kv: page lists of one kind disagree on entries per page");
    stride = std::max(stride, static_cast<int64_t>(l.pages.size()));
  }
  std::vector<int32_t> pages(lists.size() * static_cast<size_t>(stride), -1);
  for (size_t i = 0; i < lists.size(); ++i)
    std::copy(lists[i].pages.begin(), lists[i].pages.end(), pages.begin() + static_cast<int64_t>(i) * stride);
  const DeviceArray<int32_t> d_pages(dev, pages), d_list(dev, list_of), d_count(dev, count);
  ops.paged_slots({rows, static_cast<int32_t>(width), d_list.data(), d_count.data(), d_pages.data(),
                   static_cast<int64_t>(lists.size()), static_cast<int32_t>(stride), lists[0].per_page, out.data()});
  return out;
}

LayerIndex build_layer(Device& dev, Ops& ops, const ModelConfig& cfg, const ForwardBatch& b, const KvAccess& kv,
                       int l) {
  LayerIndex r;
  const int64_t tokens = b.tokens();
  // Window: the same list layout whatever the chunking (positions t-W+1..t ascending, then -1),
  // which is what the reference lays out in prefill and in decode.
  const int W = cfg.window_size;
  r.window_write = DeviceArray<int32_t>(dev, per_token(b, kv, l, KvKind::kWindow));
  std::vector<int32_t> read(static_cast<size_t>(tokens * W), -1);
  for (const auto& s : b.seqs)
    for (int64_t i = 0; i < s.count; ++i) {
      const int64_t t = s.start + i, first = std::max<int64_t>(0, t - W + 1);
      int32_t* row = read.data() + (s.offset + i) * W;
      for (int64_t p = first; p <= t; ++p) {
        row[p - first] = kv.slot(s.seq, l, KvKind::kWindow, p);
        DSV4_CHECK(row[p - first] >= 0, "kv: window entry of position {} of sequence {} is not resident", p, s.seq);
      }
    }
  r.window_read = DeviceArray<int32_t>(dev, read);
  const int ratio = cfg.compress_ratio(l);
  if (ratio == 0) return r;
  r.state_slots = DeviceArray<int32_t>(dev, per_token(b, kv, l, KvKind::kCompressorState));
  r.emit = emit_list(dev, b, kv, l, ratio, KvKind::kCompressorState, KvKind::kCompressed);
  if (ratio != 4) {
    // Every entry visible to the query, ascending (entry j needs (j + 1) * ratio - 1 <= t).
    int64_t width = 0;
    std::vector<ItemPages> lists;
    std::vector<int32_t> list_of(static_cast<size_t>(tokens)), visible(static_cast<size_t>(tokens));
    for (size_t k = 0; k < b.seqs.size(); ++k) {
      const auto& s = b.seqs[k];
      width = std::max(width, (s.start + s.count) / ratio);
      lists.push_back(kv.item_pages(s.seq, l, KvKind::kCompressed, (s.start + s.count) / ratio));
      for (int64_t i = 0; i < s.count; ++i) {
        list_of[static_cast<size_t>(s.offset + i)] = static_cast<int32_t>(k);
        visible[static_cast<size_t>(s.offset + i)] = static_cast<int32_t>((s.start + i + 1) / ratio);
      }
    }
    r.compressed_width = static_cast<int32_t>(width);
    r.compressed_slots = expand(dev, ops, lists, list_of, visible, width);
    return r;
  }
  r.index_state_slots = DeviceArray<int32_t>(dev, per_token(b, kv, l, KvKind::kIndexerState));
  r.index_emit = emit_list(dev, b, kv, l, ratio, KvKind::kIndexerState, KvKind::kIndexerKey);
  int64_t stride = 1;
  for (const auto& s : b.seqs) stride = std::max(stride, (s.start + s.count) / ratio);
  r.key_stride = static_cast<int32_t>(stride);
  std::vector<ItemPages> keys, map;
  std::vector<int32_t> rows, count;
  for (size_t k = 0; k < b.seqs.size(); ++k) {
    const auto& s = b.seqs[k];
    const int64_t n = (s.start + s.count) / ratio;
    rows.push_back(static_cast<int32_t>(k));
    count.push_back(static_cast<int32_t>(n));
    keys.push_back(kv.item_pages(s.seq, l, KvKind::kIndexerKey, n));
    map.push_back(kv.item_pages(s.seq, l, KvKind::kCompressed, n));
  }
  r.key_slots = expand(dev, ops, keys, rows, count, stride);
  r.key_map = expand(dev, ops, map, rows, count, stride);
  r.key_count = DeviceArray<int32_t>(dev, count);
  return r;
}

}  // namespace

StepIndex::StepIndex(Device& dev, Ops& ops, const ModelConfig& cfg, const ForwardBatch& b, const KvAccess& kv) {
  tokens = b.tokens();
  slices = static_cast<int64_t>(b.seqs.size());
  std::vector<int32_t> slice_of(static_cast<size_t>(tokens));
  for (size_t k = 0; k < b.seqs.size(); ++k) {
    const auto& s = b.seqs[k];
    DSV4_CHECK(s.offset >= 0 && s.count > 0 && s.offset + s.count <= tokens, "forward batch: bad slice {}", k);
    std::fill_n(slice_of.begin() + s.offset, s.count, static_cast<int32_t>(k));
    if (s.logits) logit_rows.push_back(s.offset + s.count - 1);
  }
  token_ids = DeviceArray<int32_t>(dev, b.token_ids);
  positions = DeviceArray<int32_t>(dev, b.positions);
  token_slice = DeviceArray<int32_t>(dev, slice_of);

  window_width = cfg.window_size;
  for (int l = 0; l < cfg.n_layers; ++l) layers.push_back(build_layer(dev, ops, cfg, b, kv, l));
}

}  // namespace dsv4
