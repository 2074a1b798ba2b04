// The device's side queue in Model::attention: a CSA layer sends its indexer there (its keys and
// weights from the layer's start, its selection once the query latent is made), the other layers their
// window KV and compressor, and the main queue joins it before sparse attention reads what it wrote. A host device that
// logs the queue calls and an Ops that logs each op with the queue it ran on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "model/dense_kv.h"
#include "model/model.h"
#include "testing/host_backed_device.h"
#include "testing/tiny_model.h"

namespace dsv4 {
namespace {

struct Log {
  std::vector<std::string> events;  // op names, "side:" prefixed on the side queue; queue calls in []
  bool side = false;
};

class QueueLogDevice final : public testing::HostBackedDevice {
 public:
  explicit QueueLogDevice(Log& log) : HostBackedDevice(true), log_(log) {}
  void begin_side() override {
    ASSERT_FALSE(log_.side);
    log_.side = true;
    log_.events.push_back("[begin_side]");
  }
  void end_side() override {
    ASSERT_TRUE(log_.side);
    log_.side = false;
    log_.events.push_back("[end_side]");
  }
  void join_side() override {
    ASSERT_FALSE(log_.side);
    log_.events.push_back("[join_side]");
  }

 private:
  Log& log_;
};

class QueueLogOps final : public Ops {
 public:
  explicit QueueLogOps(Log& log) : log_(log) {}

 protected:
#define DSV4_LOGGED_OP(name, P)                                           \
  void do_##name(const P##Params& p) override {                           \
    log_.events.push_back(std::string(log_.side ? "side:" : "") + #name); \
    cpu_.name(p);                                                         \
  }
  DSV4_FOR_EACH_OP(DSV4_LOGGED_OP)
#undef DSV4_LOGGED_OP

 private:
  Log& log_;
  CpuOps cpu_{1};
};

const LoadedModel& tiny() { return testing::tiny_model(3); }

// The events of one step (prefill of 9 tokens, so ratio-4 blocks complete) with overlap on or off,
// and the shared expert on the side queue or not.
std::vector<float> step(Log& log, bool overlap, bool shared = false) {
  QueueLogDevice dev(log);
  QueueLogOps ops(log);
  Model m(tiny().config, tiny().weights, ops, dev);
  m.set_overlap(overlap);
  m.set_shared_overlap(shared);
  DenseKv kv(dev, tiny().config, 1, 64);
  const int32_t ids[9] = {3, 1, 4, 1, 5, 9, 2, 6, 5};
  ForwardBatch b;
  b.add(0, 0, ids, 9);
  return m.forward(b, kv);
}

TEST(SideQueue, TheIndexerOrTheKvPathRunsBesideTheQueryAndJoinsBeforeSparseAttention) {
  Log log;
  const std::vector<float> with = step(log, true);
  int begins = 0, attentions_after_join = 0;
  bool joined = true;  // since the last branch ended
  std::vector<std::string> side_ops;
  std::string last_main, fork_after;  // the main queue's last op, and that at the last fork
  std::string previous;               // the event before this one
  int expansions = 0;
  for (const std::string& e : log.events) {
    if (e == "[begin_side]") ++begins, joined = false, fork_after = last_main;
    // A layer's page-list expansions run on the side queue, first in their branch, off the query path.
    EXPECT_NE(e, "paged_slots") << "an expansion on the main queue";
    if (e == "side:paged_slots") {
      ++expansions;
      EXPECT_TRUE(previous == "[begin_side]" || previous == "side:paged_slots") << "an expansion after " << previous;
    }
    previous = e;
    if (e[0] != '[' && e.rfind("side:", 0) != 0) last_main = e;
    if (e == "side:rope") {
      EXPECT_EQ(fork_after, "rms_norm") << "the index queries forked before the query latent was made";
    }
    if (e == "[join_side]") joined = true;
    if (e.rfind("side:", 0) == 0 && e != "side:paged_slots") side_ops.push_back(e);
    if (e == "sparse_attention") {
      EXPECT_TRUE(joined) << "sparse attention before the side queue joined";
      attentions_after_join += joined;
    }
    EXPECT_NE(e, "side:sparse_attention");
    EXPECT_NE(e, "side:moe_experts");
    EXPECT_NE(e, "side:moe_gate");
  }
  int csa = 0;
  for (int l = 0; l < tiny().config.n_layers; ++l) csa += tiny().config.compress_ratio(l) == 4;
  EXPECT_EQ(begins, tiny().config.n_layers + csa);
  EXPECT_EQ(attentions_after_join, tiny().config.n_layers);
  // Besides the expansions (checked above): per CSA layer, the indexer's compressor (step and emission)
  // and weights, then its projection, RoPE, Hadamard with the FP4 simulation, and the top-k. Per other
  // layer: wkv and the window insert, then (ratio 128) the compressor's step (its first emission comes
  // at position 127, past the step's 9 tokens).
  std::vector<std::string> want;
  bool kinds[3] = {};  // ratio 0, 4 and 128 layers met: the test covers each
  for (int l = 0; l < tiny().config.n_layers; ++l) {
    const int ratio = tiny().config.compress_ratio(l);
    kinds[ratio == 0 ? 0 : ratio == 4 ? 1 : 2] = true;
    if (ratio == 4) {
      want.insert(want.end(), {"side:compressor_step", "side:compressor_emit", "side:linear", "side:linear",
                               "side:rope", "side:hadamard", "side:indexer_topk"});
      continue;
    }
    want.insert(want.end(), {"side:linear", "side:kv_insert"});
    if (ratio != 0) want.push_back("side:compressor_step");
  }
  EXPECT_TRUE(kinds[1] && kinds[2]) << "the tiny model lacks a CSA or an HCA layer";
  EXPECT_EQ(side_ops, want);
  EXPECT_GE(expansions, tiny().config.n_layers) << "every layer expands at least its window";

  Log serial;
  EXPECT_EQ(step(serial, false), with);  // the same bits in order
  for (const std::string& e : serial.events) EXPECT_EQ(e.find("side"), std::string::npos) << e;
}

// DSV4_MOE_SIDE: each layer's shared expert alone on the side queue, started before the gate, and the
// routed experts (which add its output) on the main one; the same logits as the shared expert inside
// moe_experts.
TEST(SideQueue, TheSharedExpertRunsBesideTheRoutedOnes) {
  Log log;
  const std::vector<float> with = step(log, true, true);
  int shared = 0, branches = 0;
  bool in_branch = false, pending = false;  // a shared expert made and not yet added
  for (const std::string& e : log.events) {
    if (e == "[begin_side]") in_branch = true, ++branches;
    if (e == "[end_side]") in_branch = false;
    if (e == "side:shared_expert") ++shared, pending = true;
    if (e == "moe_gate") {
      EXPECT_TRUE(pending) << "the gate before its layer's shared expert";
    }
    if (e == "moe_experts") {
      EXPECT_TRUE(pending) << "moe_experts without a shared expert";
      pending = false;
    }
    EXPECT_NE(e, "shared_expert") << "the shared expert on the main queue";
    EXPECT_NE(e, "side:moe_experts");
  }
  EXPECT_FALSE(in_branch);
  EXPECT_EQ(shared, tiny().config.n_layers);
  int csa = 0;
  for (int l = 0; l < tiny().config.n_layers; ++l) csa += tiny().config.compress_ratio(l) == 4;
  EXPECT_EQ(branches, 2 * tiny().config.n_layers + csa);  // attention's branches (two a CSA layer), shared experts
  Log inside;
  EXPECT_EQ(step(inside, true, false), with);
}

}  // namespace
}  // namespace dsv4
