// The text of one choice as it is generated: token ids through the Detokenizer (which holds back partial
// UTF-8), then the stop strings (which hold back what could become one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/stop_matcher.h"
#include "tokenizer/detokenizer.h"

namespace dsv4::server {

class OutputText {
 public:
  OutputText(const Tokenizer& tokenizer, bool skip_special, std::vector<std::string> stop, bool include_stop)
      : detok_(tokenizer, skip_special), stop_(std::move(stop), include_stop) {}

  // The text that is final after `id` (often empty); nothing once a stop string matched.
  std::string push(int32_t id);
  // End of generation: what was held back (nothing after a stop string).
  std::string finish();

  bool stopped() const { return stop_.matched(); }
  const std::string& stop_string() const { return stop_.matched_stop(); }

 private:
  Detokenizer detok_;
  StopMatcher stop_;
};

}  // namespace dsv4::server
