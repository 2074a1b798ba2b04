// Model: the DeepSeek-V4 layer stack written once against backend/Ops (MODEL.md §3-§7).
// It never sees requests and never allocates KV memory: a ForwardBatch says which tokens of which
// sequences run, and a KvAccess says where their KV state lives.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"
#include "backend/sample_row.h"
#include "core/model_config.h"
#include "model/forward_batch.h"
#include "model/kv_access.h"
#include "model/model_shard.h"
#include "model/placed_weights.h"
#include "model/shard_exchange.h"
#include "model/step_shape.h"
#include "model/weights.h"

namespace dsv4 {

struct StepIndex;  // per-forward index arrays (model/step_index.h)
class StepGraphs;  // recorded decode steps (model/step_graphs.h)

// What sample copies back, per slice with logits (backend/ops.h SampleParams).
struct SampleResult {
  std::vector<int32_t> token;       // [rows]
  std::vector<double> logprob;      // [rows], or empty when no row asks for logprobs
  int32_t top_width = 0;            // the largest logprobs count asked for
  std::vector<int32_t> top_id;      // [rows, top_width]
  std::vector<double> top_logprob;  // [rows, top_width]
  std::vector<int64_t> rank;        // [rows], when asked for: the chosen id's rank (0 for rows without logprobs)
};

// A scored prompt token (ForwardBatch slices with score_top >= 0): its raw logprob given the tokens before
// it, its rank among the vocabulary (1: the most likely id) and the score_top most likely ids there.
struct TokenScore {
  int32_t seq = 0;       // its slice's sequence
  int64_t position = 0;  // its position in that sequence
  int32_t token = 0;
  double logprob = 0;
  int64_t rank = 0;
  std::vector<int32_t> top_id;
  std::vector<double> top_logprob;
};

// The logits of one step on the device, [rows, vocab]: the slices with logits, in slice order.
struct StepLogits {
  const float* data = nullptr;
  int64_t rows = 0;
  DeviceArray<float> owned;        // eager steps own theirs; recorded steps share the StepGraphs buffer
  std::vector<TokenScore> scores;  // the batch's scored tokens, slice by slice (host memory)
};

class Model {
 public:
  Model(const ModelConfig& cfg, const ModelWeights& weights, Ops& ops, Device& dev);
  // One rank of a sharded run: `weights` are the whole model's; the rank keeps its shard of them
  // (model/weight_shard.h) and exchanges activations with its peers through the shard's communicators.
  // Every rank of the run must step together (the collectives meet layer by layer).
  Model(const ModelConfig& cfg, const ModelWeights& weights, Ops& ops, Device& dev, ModelShard shard);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }

  // Decode-only steps: eager, padded, or recorded and replayed (model/step_shape.h). Recorded, with the
  // side queue on, where the device can record, unless DSV4_CUDA_GRAPHS=0; eager elsewhere.
  void set_step_mode(StepMode mode);
  StepMode step_mode() const { return mode_; }
  // The indexer pipeline on the device's side queue, beside the query and KV projections (layers
  // without one: the window KV and the compressor there, beside the query projections).
  void set_overlap(bool on) { overlap_ = on; }
  bool overlap() const { return overlap_; }
  // With overlap on, also the MoE's shared expert on the side queue, beside the gate and the routed
  // experts (the default; DSV4_MOE_SIDE=0 keeps it on the main queue).
  void set_shared_overlap(bool on) { shared_overlap_ = on; }
  StepGraphStats graph_stats() const;

  // `weights` are host views (mmapped checkpoint); the model places them on `dev` itself.
  // The whole main stack; returns fp32 logits [slices with logits, vocab] on the host, in slice order.
  std::vector<float> forward(const ForwardBatch& batch, KvAccess& kv);
  // The same forward, then greedy ids where the logits are (ties to the lower id, ids < limit):
  // one id per slice with logits comes back instead of a row of vocab_size logits.
  std::vector<int32_t> forward_greedy(const ForwardBatch& batch, KvAccess& kv, int64_t limit);
  // The sample op where a step's logits are (step() below): one row of `in` per slice with logits (with
  // its edits and allow-set); a few numbers per row come back instead of a row of logits. Split from the
  // step so the host can make `in` while the step runs (ModelRunner).
  SampleResult sample(const StepLogits& logits, int64_t limit, const SampleInputs& in, bool ranks = false);

  // One whole step up to its logits, left running on the device (nothing waits): the forwards above
  // are this, then a copy back. Timing its return shows the host's share of a step (bench step).
  StepLogits step(const ForwardBatch& batch, KvAccess& kv);

  // A step without tokens of this rank's replica while the other replicas step (expert parallelism
  // across data-parallel replicas): every layer's expert exchange still meets its peers, and this rank's
  // experts run over the rows they send. Nothing else runs; returns when the device is done.
  void idle_step();

  // Pieces, for isolated-block checks: embed -> hc streams [tokens, hc, dim] bf16; one block in place.
  DeviceArray<uint16_t> embed(const ForwardBatch& batch);
  void run_block(int layer, const ForwardBatch& batch, KvAccess& kv, uint16_t* h);

 private:
  struct Layer;
  // The step's device work: embed, every block, the head into logits [s.logit_rows, vocab]; with `scored`,
  // its scored tokens into *scores.
  void run_step(StepIndex& s, KvAccess& kv, float* logits, const ForwardBatch* scored = nullptr,
                std::vector<TokenScore>* scores = nullptr);
  // The scored tokens of `batch` from the final hc streams h: the head over rows kScoreRows at a time,
  // then the sample op with each row's token forced.
  void score(const ForwardBatch& batch, const uint16_t* h, std::vector<TokenScore>& out);
  DeviceArray<uint16_t> embed(const int32_t* ids, int64_t tokens);
  // hc_head, final norm and head GEMM for the hc streams of `rows` of h.
  void head(const std::vector<int64_t>& rows, int64_t tokens, const uint16_t* h, float* logits);
  void attention(const Layer& L, StepIndex& s, KvAccess& kv, const uint16_t* x, uint16_t* out);
  void window_and_compressed_kv(const Layer& L, const StepIndex& s, KvAccess& kv, const uint16_t* x);
  void indexer_keys(const Layer& L, const StepIndex& s, KvAccess& kv, const uint16_t* x, uint16_t* w);
  void indexer_select(const Layer& L, const StepIndex& s, KvAccess& kv, const uint16_t* qr, const uint16_t* w,
                      int32_t* out_slots);
  void compress(const Layer& L, const StepIndex& s, KvAccess& kv, const uint16_t* x, bool for_indexer);
  void moe(const Layer& L, const StepIndex& s, const uint16_t* x, uint16_t* out);
  // Routing: indices and weights [tokens, topk] of x's tokens.
  void gate(const Layer& L, const StepIndex& s, const uint16_t* x, int32_t* idx, float* wts);
  // The grouped output projection and wo_b of the attention output o (this rank's heads) into out.
  void output_projection(const Layer& L, int64_t T, const uint16_t* o, uint16_t* out);
  // Sharded experts (model/sharded_moe.cpp): sliced by TP rank, or owned whole (expert parallel).
  void moe_sliced(const Layer& L, const StepIndex& s, const uint16_t* x, uint16_t* out);
  void moe_owned(const Layer& L, const StepIndex& s, const uint16_t* x, uint16_t* out);
  // Expert parallelism's round trip: rows `xs` (their experts `ids`, routing weights `wts`; rank-major
  // blocks of send[r] rows) go to the ranks owning those experts, this rank's experts run over the rows
  // sent here, and each sent row's output comes back [sum(send), dim].
  DeviceArray<uint16_t> exchange_experts(const Layer& L, std::span<const int64_t> send, const uint16_t* xs,
                                         const int32_t* ids, const float* wts);
  // The shared expert's output on every rank (its rows split by TP rank, or whole): [T, dim], or with
  // `whole` false and w2 split, this rank's w2 rows of it [T, its rows] (no gather).
  DeviceArray<uint16_t> shared_expert(const Layer& L, int64_t T, const uint16_t* x, bool whole);
  // A step's hyper-connection scratch (a sublayer's input x and output y, its post and comb) and the last
  // sublayer's hc_post, held back to run with the next sublayer's hc_pre as one op (Ops::hc_post_pre), or
  // alone before the head (flush_hc_post).
  struct HcCarry {
    DeviceArray<uint16_t> x, y;
    DeviceArray<float> post, comb;
    std::optional<HcPostParams> pending;
  };
  HcCarry hc_carry(int64_t tokens);
  void flush_hc_post(HcCarry& c);
  // One block; expands the layer's lists first and frees them after. Its last hc_post stays pending in c.
  void run_block(const Layer& L, StepIndex& s, KvAccess& kv, uint16_t* h, HcCarry& c);

  ModelConfig cfg_;
  ModelShard shard_;
  ModelWeights host_;      // this rank's views of the weights (model/weight_shard.h)
  PlacedWeights placed_;   // the weights where ops read them
  const ModelWeights& w_;  // = placed_.get()
  Ops& ops_;
  Device& dev_;
  std::vector<Layer> layers_;
  StepMode mode_ = StepMode::kEager;
  bool overlap_ = false;
  bool shared_overlap_ = true;
  std::unique_ptr<StepGraphs> graphs_;
  ShardExchange exchange_{dev_, shard_};
};

}  // namespace dsv4
