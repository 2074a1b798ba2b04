// ForwardBatch: one forward over several sequences, each contributing a contiguous run of tokens
// (a prefill chunk or one decode token) at its own position relative to the compression boundaries.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4 {

struct SequenceSlice {
  int32_t seq = 0;     // the sequence's index in the KvAccess
  int64_t start = 0;   // position of its first token in this forward
  int64_t count = 0;   // tokens in this forward
  int64_t offset = 0;  // its first row in the batch
  bool logits = true;  // compute logits for its last token
  // A padded step's filler (model/step_shape.h): reads what slice `seq` reads at `start`, writes no KV.
  bool shadow = false;
  // Prompt scoring (a request's prompt_logprobs), with score_top >= 0: row i of the slice is scored against
  // the slice's token i + 1 and its last row against score_next (none when -1: that row samples), each with
  // its score_top most likely ids (model.h TokenScore).
  int32_t score_top = -1;
  int32_t score_next = -1;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;  // [tokens]
  std::vector<int32_t> positions;  // [tokens]
  std::vector<SequenceSlice> seqs;
  int64_t score_limit = 0;  // scored logprobs run over the ids below it (the tokenizer's; 0: the model's)

  int64_t tokens() const { return static_cast<int64_t>(token_ids.size()); }
  // Appends `count` tokens of sequence `seq` starting at position `start`.
  void add(int32_t seq, int64_t start, const int32_t* ids, int64_t count, bool logits = true) {
    seqs.push_back({seq, start, count, tokens(), logits});
    for (int64_t i = 0; i < count; ++i) {
      token_ids.push_back(ids[i]);
      positions.push_back(static_cast<int32_t>(start + i));
    }
  }
  // Scores the last added slice's tokens (SequenceSlice::score_top).
  void score_last(int32_t top, int32_t next) {
    seqs.back().score_top = top;
    seqs.back().score_next = next;
  }
  bool scores() const {
    for (const SequenceSlice& s : seqs)
      if (s.score_top >= 0) return true;
    return false;
  }
};

}  // namespace dsv4
