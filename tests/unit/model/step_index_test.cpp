// StepIndex over the paged cache: every layer's expanded lists (window reads, ratio-128 entries,
// indexer keys and their entry map) equal the slots that PagedKv::slot() names one by one, for random
// batches of prefill chunks and decodes, padded and not, over many steps of a cache whose blocks get
// reused, so the page maps' incremental syncs are checked along the way. The lists of one unit are
// built once and shared by its layers: a wrong page map for any one layer shows up here.
#include "model/step_index.h"

#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/cpu_ops.h"
#include "model/paged_kv.h"
#include "model/step_shape.h"
#include "model_tools/presets.h"

namespace dsv4 {
namespace {

// The expanded rows [rows, width] against want(row, j), with the layer and list named on failure.
template <typename Want>
void expect_rows(const IndexArray& a, int64_t rows, int64_t width, int layer, const char* what, Want&& want) {
  ASSERT_TRUE(rows == 0 || width == 0 || a.data()) << what << " of layer " << layer << " was not expanded";
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      ASSERT_EQ(a.data()[r * width + j], want(r, j))
          << what << " of layer " << layer << ", row " << r << ", item " << j;
}

void expect_layer(const StepIndex& s, const ModelConfig& c, const ForwardBatch& b, const KvAccess& kv, int l) {
  const LayerIndex& r = s.layers[static_cast<size_t>(l)];
  std::vector<const SequenceSlice*> of_token(static_cast<size_t>(s.tokens));
  for (const auto& x : b.seqs)
    for (int64_t i = 0; i < x.count; ++i) of_token[static_cast<size_t>(x.offset + i)] = &x;
  const int W = c.window_size;
  expect_rows(r.window_read, s.tokens, W, l, "window", [&](int64_t t, int64_t j) {
    const SequenceSlice& x = *of_token[static_cast<size_t>(t)];
    const int64_t p = x.start + (t - x.offset), from = std::max<int64_t>(0, p - W + 1);
    return from + j <= p ? kv.slot(x.seq, l, KvKind::kWindow, from + j) : -1;
  });
  const int ratio = c.compress_ratio(l);
  if (ratio == 128) {
    expect_rows(r.compressed_slots, s.tokens, r.compressed_width, l, "compressed", [&](int64_t t, int64_t j) {
      const SequenceSlice& x = *of_token[static_cast<size_t>(t)];
      return j < (x.start + (t - x.offset) + 1) / ratio ? kv.slot(x.seq, l, KvKind::kCompressed, j) : -1;
    });
  } else if (ratio == 4) {
    for (const KvKind kind : {KvKind::kIndexerKey, KvKind::kCompressed}) {
      const IndexArray& a = kind == KvKind::kIndexerKey ? r.key_slots : r.key_map;
      expect_rows(a, s.slices, r.key_stride, l, kind == KvKind::kIndexerKey ? "keys" : "key map",
                  [&](int64_t k, int64_t j) {
                    const SequenceSlice& x = b.seqs[static_cast<size_t>(k)];
                    return j < (x.start + x.count) / ratio ? kv.slot(x.seq, l, kind, j) : -1;
                  });
    }
  }
}

// Sequences that grow by prefill chunks and decodes, and now and then finish and start over (their
// blocks then go to others, so page lists change between steps).
class Traffic {
 public:
  Traffic(const ModelConfig& c, uint32_t seed) : c_(c), cache_(c, kSeqs, kMaxLen, kSeqs * kMaxLen), rng_(seed) {
    ids_.assign(kMaxLen + 1, 3);
    len_.assign(kSeqs, 0);
    for (int32_t s = 0; s < kSeqs; ++s) start_over(s);
  }

  PagedKv& kv() { return cache_.access(); }

  // The next step: every sequence advances, by a decode or (unless decode_only) a prefill chunk.
  ForwardBatch next(bool decode_only) {
    ForwardBatch b;
    for (int32_t s = 0; s < kSeqs; ++s) {
      if (len_[static_cast<size_t>(s)] + 600 > kMaxLen || pick(0, 15) == 0) start_over(s);
      const int64_t n = decode_only || pick(0, 2) ? 1 : pick(2, 400);
      const int64_t at = len_[static_cast<size_t>(s)];
      cache_.allocate(s, n, std::span<const int32_t>(ids_.data(), static_cast<size_t>(at + n)));
      b.add(s, at, ids_.data(), n, true);
      len_[static_cast<size_t>(s)] = at + n;
    }
    return b;
  }

 private:
  static constexpr int32_t kSeqs = 5;
  static constexpr int64_t kMaxLen = 3000;
  int64_t pick(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  void start_over(int32_t s) {
    if (cache_.manager().has_request(static_cast<KvRequestId>(s))) cache_.manager().free(static_cast<KvRequestId>(s));
    const int64_t prompt = pick(1, 1500);
    cache_.add(s, prompt);
    cache_.allocate(s, prompt, std::span<const int32_t>(ids_.data(), static_cast<size_t>(prompt)));
    len_[static_cast<size_t>(s)] = prompt;
  }

  const ModelConfig& c_;
  OwnedPagedCache cache_;
  std::mt19937 rng_;
  std::vector<int32_t> ids_;
  std::vector<int64_t> len_;
};

TEST(StepIndex, ExpandedListsEqualThePerItemSlotsOfEveryLayer) {
  const ModelConfig& c = find_preset("tiny").config;
  HostDevice dev;
  CpuOps ops(2);
  StepArena arena;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    Traffic traffic(c, seed);
    for (int step = 0; step < 12; ++step) {
      const bool padded = step % 3 == 2;
      ForwardBatch b = traffic.next(padded);
      if (padded) b = pad_batch(b, *decode_shape(c, b));
      StepIndex s(dev, c, b, traffic.kv(), StepLayout{padded, padded ? &arena : nullptr});
      for (int l = 0; l < c.n_layers; ++l) {
        s.expand(ops, l);
        expect_layer(s, c, b, traffic.kv(), l);
        ASSERT_FALSE(testing::Test::HasFatalFailure()) << "seed " << seed << " step " << step;
        s.release_expanded(l);
      }
    }
  }
}

}  // namespace
}  // namespace dsv4
