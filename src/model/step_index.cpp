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

// Slot rows expanded on the device: row r holds items first[r] .. first[r] + count[r] − 1 of page
// list list_of[r] (first empty: from 0), −1 up to width.
DeviceArray<int32_t> expand(Device& dev, Ops& ops, const std::vector<ItemPages>& lists,
                            const std::vector<int32_t>& list_of, const std::vector<int32_t>& first,
                            const std::vector<int32_t>& count, int64_t width) {
  const int64_t rows = static_cast<int64_t>(list_of.size());
  DeviceArray<int32_t> out(dev, static_cast<size_t>(std::max<int64_t>(1, rows * width)));
  if (rows == 0 || width == 0) return out;
  int64_t stride = 1;
  std::vector<int32_t> base;
  int32_t per_page = 0;  // of the lists that have pages (an empty list can say anything)
  for (const auto& l : lists) {
    if (!l.pages.empty()) {
      DSV4_CHECK(per_page == 0 || l.per_page == per_page, "kv: page lists of one kind disagree on items per page");
      per_page = l.per_page;
    }
    stride = std::max(stride, static_cast<int64_t>(l.pages.size()));
  }
  per_page = std::max(per_page, 1);
  for (const auto& l : lists) base.push_back(static_cast<int32_t>(l.pages.empty() ? 0 : l.base));
  std::vector<int32_t> pages(lists.size() * static_cast<size_t>(stride), -1);
  for (size_t i = 0; i < lists.size(); ++i)
    std::copy(lists[i].pages.begin(), lists[i].pages.end(), pages.begin() + static_cast<int64_t>(i) * stride);
  const DeviceArray<int32_t> d_pages(dev, pages), d_base(dev, base), d_list(dev, list_of), d_count(dev, count),
      d_first(dev, first);
  ops.paged_slots({rows, static_cast<int32_t>(width), d_list.data(), first.empty() ? nullptr : d_first.data(),
                   d_count.data(), d_pages.data(), d_base.data(), static_cast<int64_t>(lists.size()),
                   static_cast<int32_t>(stride), per_page, out.data()});
  return out;
}

// Every page a step reads must be resident: the scheduler allocated it before the step.
void check_resident(const ItemPages& p, int32_t seq, const char* what) {
  for (const int32_t page : p.pages) DSV4_CHECK(page >= 0, "kv: a {} entry of sequence {} is not resident", what, seq);
}

LayerIndex build_layer(Device& dev, Ops& ops, const ModelConfig& cfg, const ForwardBatch& b, const KvAccess& kv,
                       int l) {
  LayerIndex r;
  const int64_t tokens = b.tokens();
  // Window: the same list layout whatever the chunking (positions t-W+1..t ascending, then -1),
  // which is what the reference lays out in prefill and in decode.
  const int W = cfg.window_size;
  r.window_write = DeviceArray<int32_t>(dev, per_token(b, kv, l, KvKind::kWindow));
  std::vector<ItemPages> windows;
  std::vector<int32_t> w_list(static_cast<size_t>(tokens)), w_first(w_list.size()), w_count(w_list.size());
  for (size_t k = 0; k < b.seqs.size(); ++k) {
    const auto& s = b.seqs[k];
    windows.push_back(
        kv.item_pages(s.seq, l, KvKind::kWindow, std::max<int64_t>(0, s.start - W + 1), s.start + s.count));
    check_resident(windows.back(), s.seq, "window");
    for (int64_t i = 0; i < s.count; ++i) {
      const int64_t t = s.start + i, from = std::max<int64_t>(0, t - W + 1);
      w_list[static_cast<size_t>(s.offset + i)] = static_cast<int32_t>(k);
      w_first[static_cast<size_t>(s.offset + i)] = static_cast<int32_t>(from);
      w_count[static_cast<size_t>(s.offset + i)] = static_cast<int32_t>(t - from + 1);
    }
  }
  r.window_read = expand(dev, ops, windows, w_list, w_first, w_count, W);
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
      lists.push_back(kv.item_pages(s.seq, l, KvKind::kCompressed, 0, (s.start + s.count) / ratio));
      check_resident(lists.back(), s.seq, "compressed");
      for (int64_t i = 0; i < s.count; ++i) {
        list_of[static_cast<size_t>(s.offset + i)] = static_cast<int32_t>(k);
        visible[static_cast<size_t>(s.offset + i)] = static_cast<int32_t>((s.start + i + 1) / ratio);
      }
    }
    r.compressed_width = static_cast<int32_t>(width);
    r.compressed_slots = expand(dev, ops, lists, list_of, {}, visible, width);
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
    keys.push_back(kv.item_pages(s.seq, l, KvKind::kIndexerKey, 0, n));
    map.push_back(kv.item_pages(s.seq, l, KvKind::kCompressed, 0, n));
    check_resident(keys.back(), s.seq, "indexer key");
  }
  r.key_slots = expand(dev, ops, keys, rows, {}, count, stride);
  r.key_map = expand(dev, ops, map, rows, {}, count, stride);
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
