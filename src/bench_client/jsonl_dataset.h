// A file dataset (vLLM's "custom"): one JSON object a line, {"prompt": "text"} or {"prompt": [ids]}, with
// an optional "output_tokens" (else the default output length). Blank lines are skipped; anything else
// is an error naming the line, so that a typo never benchmarks a different workload silently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_client/bench_dataset.h"

namespace dsv4::bench {

std::vector<BenchRequest> jsonl_dataset(const std::string& path, int64_t default_output_len, int64_t num_prompts = 0);
// The same from text (the file's contents); `source` names it in errors.
std::vector<BenchRequest> parse_jsonl_dataset(const std::string& text, int64_t default_output_len,
                                              const std::string& source = "the dataset");

}  // namespace dsv4::bench
