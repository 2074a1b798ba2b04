// Chunk and batch invariance of the CPU forward (issue M1.3 item 4): the same sequence gives
// bit-identical logits prefilled whole, in chunks that cut compression boundaries anywhere,
// token by token, and batched with other sequences at other positions.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/cpu_ops.h"
#include "model/dense_kv.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "model/presets.h"
#include "model/random_checkpoint.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {

class Equivalence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(testing::temp_dir("equiv"));
    write_random_checkpoint(find_preset("tiny").config, 11, *dir_);
    model_ = new LoadedModel(load_model(*dir_));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
  }

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

  static std::filesystem::path* dir_;
  static LoadedModel* model_;
};
std::filesystem::path* Equivalence::dir_ = nullptr;
LoadedModel* Equivalence::model_ = nullptr;

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
    const std::vector<float> mine(logits.begin() + static_cast<std::ptrdiff_t>(V), logits.begin() + static_cast<std::ptrdiff_t>(2 * V));
    EXPECT_EQ(mine, alone[static_cast<size_t>(s / 50)]) << "chunk at " << s;
  }
}

TEST_F(Equivalence, ThreadCountDoesNotChangeBits) {
  const auto ids = tokens(100, 6);
  EXPECT_EQ(run_chunked(ids, 100, 1).back(), run_chunked(ids, 100, 2).back());
}

}  // namespace
}  // namespace dsv4
