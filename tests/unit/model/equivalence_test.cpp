// Chunk and batch invariance of the CPU forward (issue M1.3 item 4): the same sequence gives
// bit-identical logits prefilled whole, in chunks that cut compression boundaries anywhere,
// token by token, and batched with other sequences at other positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "model/dense_kv.h"
#include "model/model.h"
#include "model/paged_kv.h"
#include "testing/decode_steps.h"
#include "testing/tiny_model.h"

namespace dsv4 {
namespace {

class Equivalence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = &testing::tiny_model(11); }

  std::vector<int32_t> tokens(int64_t n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(model_->config.vocab_size - 1));
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = d(rng);
    return t;
  }

  // Runs `ids` through the model in chunks of `chunk`; returns the logits after every chunk.
  std::vector<std::vector<float>> run_chunked(const std::vector<int32_t>& ids, int64_t chunk, int threads = 2) {
    CpuOps ops(threads);
    HostDevice dev;
    Model m(model_->config, model_->weights, ops, dev);
    DenseKv kv(dev, model_->config, 1, static_cast<int64_t>(ids.size()));
    std::vector<std::vector<float>> out;
    for (int64_t s = 0; s < static_cast<int64_t>(ids.size()); s += chunk) {
      ForwardBatch b;
      b.add(0, s, ids.data() + s, std::min<int64_t>(chunk, static_cast<int64_t>(ids.size()) - s));
      out.push_back(m.forward(b, kv));
    }
    return out;
  }

  static const LoadedModel* model_;
};
const LoadedModel* Equivalence::model_ = nullptr;

TEST_F(Equivalence, ChunkedPrefillAndDecodeMatchWholePrefillBitForBit) {
  const auto ids = tokens(300, 1);
  const auto whole = run_chunked(ids, 300).back();
  ASSERT_EQ(whole.size(), static_cast<size_t>(model_->config.vocab_size));
  EXPECT_NE(whole, run_chunked(tokens(300, 9), 300).back());  // the logits do depend on the input
  for (int64_t chunk : {1, 7, 64}) {
    const auto got = run_chunked(ids, chunk).back();
    EXPECT_EQ(got, whole) << "chunk " << chunk;
  }
}

TEST_F(Equivalence, EveryPrefixMatchesTokenByTokenDecode) {
  // Decode logits after every token equal the whole prefill of that prefix (compression
  // boundaries at 4 and 128 included).
  const auto ids = tokens(140, 2);
  const auto steps = run_chunked(ids, 1);
  for (int64_t len : {1, 3, 4, 5, 127, 128, 129, 140}) {
    std::vector<int32_t> prefix(ids.begin(), ids.begin() + len);
    EXPECT_EQ(run_chunked(prefix, len).back(), steps[static_cast<size_t>(len - 1)]) << "prefix " << len;
  }
}

TEST_F(Equivalence, BatchedWithOthersAtOtherPositionsMatchesAlone) {
  const auto a = tokens(200, 3), b = tokens(260, 4), c = tokens(90, 5);
  const auto alone = run_chunked(a, 50);
  CpuOps ops(2);
  HostDevice dev;
  Model m(model_->config, model_->weights, ops, dev);
  DenseKv kv(dev, model_->config, 3, 300);
  // b starts earlier and decodes while a prefills; c joins later with its own chunks.
  for (int64_t s = 0; s < 60; s += 20) {
    ForwardBatch fb;
    fb.add(1, s, b.data() + s, 20);
    m.forward(fb, kv);
  }
  int64_t pb = 60, pc = 0;
  for (int64_t s = 0; s < 200; s += 50) {
    ForwardBatch fb;
    fb.add(1, pb, b.data() + pb, 1);  // b decodes one token
    ++pb;
    fb.add(0, s, a.data() + s, 50);  // a prefills a chunk
    if (s >= 100) {
      fb.add(2, pc, c.data() + pc, 30);  // c prefills too
      pc += 30;
    }
    const auto logits = m.forward(fb, kv);
    const size_t V = static_cast<size_t>(model_->config.vocab_size);
    const std::vector<float> mine(logits.begin() + static_cast<std::ptrdiff_t>(V),
                                  logits.begin() + static_cast<std::ptrdiff_t>(2 * V));
    EXPECT_EQ(mine, alone[static_cast<size_t>(s / 50)]) << "chunk at " << s;
  }
}

TEST_F(Equivalence, PagedCacheMatchesDenseCacheWithWindowsSlidingOut) {
  // Two sequences through the paged cache in uneven chunks: windows and compressor states slide
  // out (their pages are released and reused) while the dense cache keeps everything.
  const auto a = tokens(420, 7), b = tokens(333, 8);
  const auto dense_a = run_chunked(a, 420).back(), dense_b = run_chunked(b, 333).back();
  CpuOps ops(2);
  HostDevice dev;
  Model m(model_->config, model_->weights, ops, dev);
  OwnedPagedCache cache(model_->config, 2, 512, 128);
  cache.add(0, 420);
  cache.add(1, 333);
  std::vector<float> last_a, last_b;
  int64_t pa = 0, pb = 0;
  for (int step = 0; pa < 420 || pb < 333; ++step) {
    ForwardBatch fb;
    const int64_t na = std::min<int64_t>(420 - pa, 1 + (step * 37) % 91),
                  nb = std::min<int64_t>(333 - pb, 1 + (step * 53) % 29);
    if (na > 0) {
      cache.allocate(0, na, std::span<const int32_t>(a.data(), static_cast<size_t>(pa + na)));
      fb.add(0, pa, a.data() + pa, na);
    }
    if (nb > 0) {
      cache.allocate(1, nb, std::span<const int32_t>(b.data(), static_cast<size_t>(pb + nb)));
      fb.add(1, pb, b.data() + pb, nb);
    }
    const auto logits = m.forward(fb, cache.access());
    const size_t V = static_cast<size_t>(model_->config.vocab_size);
    size_t row = 0;
    if (na > 0) last_a.assign(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(V)), ++row;
    if (nb > 0)
      last_b.assign(logits.begin() + static_cast<std::ptrdiff_t>(row * V),
                    logits.begin() + static_cast<std::ptrdiff_t>((row + 1) * V));
    pa += na;
    pb += nb;
  }
  EXPECT_EQ(last_a, dense_a);
  EXPECT_EQ(last_b, dense_b);
  cache.manager().check_consistency();
}

TEST_F(Equivalence, ThreadCountDoesNotChangeBits) {
  const auto ids = tokens(100, 6);
  EXPECT_EQ(run_chunked(ids, 100, 1).back(), run_chunked(ids, 100, 2).back());
}

TEST_F(Equivalence, PaddedDecodeStepsMatchEagerStepsBitForBit) {
  // Five sequences around compression boundaries (ratio-4 blocks and ratio-128 entries 0 and 1 complete
  // during the steps), padded to a batch of 8 with shadow slices, then of 4 once one leaves; the padded
  // steps' fixed emission lists, widened key and entry lists and shadows must change nothing.
  const testing::DecodeRun run{{125, 3, 250, 60, 131}, 12, 5};
  auto steps = [&](StepMode mode) {
    CpuOps ops(2);
    HostDevice dev;
    Model m(model_->config, model_->weights, ops, dev);
    m.set_step_mode(mode);
    return testing::decode_steps(m, nullptr, run);
  };
  const auto eager = steps(StepMode::kEager), padded = steps(StepMode::kPadded);
  ASSERT_EQ(padded.size(), eager.size());
  for (size_t k = 0; k < eager.size(); ++k) EXPECT_EQ(padded[k], eager[k]) << "step " << k;
  // Not vacuous: the steps see different positions, so their logits differ.
  EXPECT_NE(eager[0], eager[1]);
}

// Prompt scoring (prompt_logprobs): each scored token's logprob, rank and alternatives are those of the last
// row of a prefill of the tokens before it (its logits bit for bit: the exact tier is chunk-invariant), scored
// whole or in chunks that hand the next chunk's first token over (score_next).
TEST_F(Equivalence, ScoredPromptTokensMatchEachPrefixsLastRow) {
  const auto ids = tokens(150, 21);
  const int64_t n = static_cast<int64_t>(ids.size()), limit = model_->config.vocab_size - 3;
  constexpr int32_t kTop = 5;
  CpuOps ops(2);
  HostDevice dev;
  const auto scored = [&](std::vector<int64_t> cuts) {
    Model m(model_->config, model_->weights, ops, dev);
    DenseKv kv(dev, model_->config, 1, n);
    std::vector<TokenScore> out;
    cuts.push_back(n);
    for (size_t c = 0, s = 0; c < cuts.size(); s = static_cast<size_t>(cuts[c++])) {
      const auto e = static_cast<size_t>(cuts[c]);
      ForwardBatch b;
      b.score_limit = limit;
      b.add(0, static_cast<int64_t>(s), ids.data() + s, static_cast<int64_t>(e - s));
      b.score_last(kTop, e < ids.size() ? ids[e] : -1);
      StepLogits l = m.step(b, kv);
      out.insert(out.end(), l.scores.begin(), l.scores.end());
    }
    return out;
  };
  const auto whole = scored({});
  ASSERT_EQ(whole.size(), ids.size() - 1);
  const auto chunked = scored({4, 70, 129});
  ASSERT_EQ(chunked.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(chunked[i].position, whole[i].position);
    EXPECT_EQ(chunked[i].logprob, whole[i].logprob) << i;
    EXPECT_EQ(chunked[i].rank, whole[i].rank) << i;
    EXPECT_EQ(chunked[i].top_id, whole[i].top_id) << i;
  }
  for (const int64_t pos : {1, 4, 5, 100, 128, 129, 149}) {
    const TokenScore& t = whole[static_cast<size_t>(pos - 1)];
    ASSERT_EQ(t.position, pos);
    ASSERT_EQ(t.token, ids[static_cast<size_t>(pos)]);
    Model m(model_->config, model_->weights, ops, dev);
    DenseKv kv(dev, model_->config, 1, n);
    ForwardBatch b;
    b.add(0, 0, ids.data(), pos);
    const StepLogits l = m.step(b, kv);
    std::vector<float> x(static_cast<size_t>(model_->config.vocab_size));
    dev.to_host(x.data(), l.data, x.size() * sizeof(float));
    SampleInputs in;
    in.rows.push_back({.logprobs = kTop, .force_id = t.token});
    const SampleResult r = m.sample(l, limit, in);
    EXPECT_EQ(t.logprob, r.logprob[0]) << "position " << pos;
    EXPECT_EQ(t.top_id, r.top_id) << "position " << pos;
    EXPECT_EQ(t.top_logprob, r.top_logprob) << "position " << pos;
    const float at = x[static_cast<size_t>(t.token)];
    EXPECT_EQ(t.rank, 1 + std::count_if(x.begin(), x.begin() + limit, [&](float v) { return v > at; }))
        << "position " << pos;
  }
}

}  // namespace
}  // namespace dsv4
