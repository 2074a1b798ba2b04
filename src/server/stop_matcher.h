// Stop strings over a stream of text deltas (vLLM's `stop`). Text is released as soon as it can no longer
// be the start of a stop string: the matcher holds back only the longest tail that is a proper prefix of
// some stop string. Stop strings start with a UTF-8 lead byte and the deltas are whole characters (the
// Detokenizer holds back partial ones), so what is released never splits a character.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server {

class StopMatcher {
 public:
  // `stops` must not hold empty strings. With `include_stop`, a matched stop string is part of the output.
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  // Appends `delta`; returns the text now final. After a match it returns the text up to the stop string
  // (earliest match; the longest one at the same place) and nothing on later calls.
  std::string push(std::string_view delta);
  // End of generation: the held-back tail (empty after a match).
  std::string flush();

  bool matched() const { return matched_.has_value(); }
  const std::string& matched_stop() const { return *matched_; }  // only when matched()
  size_t held() const { return held_.size(); }

 private:
  size_t holdback(std::string_view text) const;

  std::vector<std::string> stops_;
  bool include_stop_;
  size_t max_len_ = 0;
  std::string held_;
  std::optional<std::string> matched_;
};

}  // namespace dsv4::server
