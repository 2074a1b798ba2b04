// The pre-tokenizer of a byte-level BPE tokenizer.json: Split steps (regex or string, "Isolated", not
// inverted), each applied to every piece of the previous step, then ByteLevel (optional prefix space and
// GPT-2 regex). Any other shape is refused when loading, naming what is not implemented.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/split_regex.h"

namespace dsv4 {

class PreTokenizer {
 public:
  // `spec` is tokenizer.json's "pre_tokenizer" value.
  static PreTokenizer from_json(const nlohmann::json& spec);

  // Calls emit(std::string_view) for each piece of text (valid UTF-8), as raw bytes: the byte-level
  // mapping is left to the BPE model.
  template <typename Emit>
  void split(std::string_view text, Emit&& emit) const {
    if (!text.empty()) run(0, text, emit);
  }

  size_t step_count() const { return steps_.size(); }

 private:
  template <typename Emit>
  void run(size_t step, std::string_view piece, Emit& emit) const;

  std::vector<SplitRegex> steps_;  // the Split steps, then ByteLevel's own regex when use_regex
  size_t byte_level_step_ = 0;     // where ByteLevel starts (its prefix space goes in before that step)
  bool add_prefix_space_ = false;
};

template <typename Emit>
void PreTokenizer::run(size_t step, std::string_view piece, Emit& emit) const {
  if (step == byte_level_step_ && add_prefix_space_ && piece.front() != ' ') {
    std::string spaced(1, ' ');
    spaced.append(piece.data(), piece.size());
    run(step, spaced, emit);
    return;
  }
  if (step == steps_.size()) {
    emit(piece);
    return;
  }
  steps_[step].split(piece, [&](std::string_view p) { run(step + 1, p, emit); });
}

}  // namespace dsv4
