// What the server measures per request, for /metrics and the stats log: time to first token, inter-token
// latency, end-to-end latency (vLLM's histograms and buckets, measured from the request's arrival), the n
// and longest output of each HTTP request, and finished requests by reason. The phases the engine sees
// (queue, prefill, decode) are counted in EngineStats. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "core/histogram.h"

namespace dsv4::server {

class RequestMetrics {
 public:
  struct Snapshot {
    Histogram ttft, itl, e2e;
    Histogram params_n;                        // the n of each HTTP request
    Histogram max_num_generation_tokens;       // the most tokens one of its choices generated
    std::map<std::string, uint64_t> finished;  // by finish reason
    uint64_t rejected = 0;                     // refused with 4xx/5xx before reaching the engine
  };

  RequestMetrics();

  void observe_ttft(double seconds);
  // `tokens` tokens arrived `seconds` after the previous ones: each is charged seconds / tokens.
  void observe_itl(double seconds, uint64_t tokens = 1);
  void observe_e2e(double seconds);
  void count_finished(std::string_view reason);
  // An HTTP request whose choices have all ended (vLLM observes these per parent request).
  void observe_request(int64_t n, int64_t max_generation_tokens, int64_t max_model_len);
  void count_rejected();

  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  Snapshot s_;
};

}  // namespace dsv4::server
