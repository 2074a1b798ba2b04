#include "bench_client/jsonl_dataset.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace dsv4::bench {
namespace {

BenchRequest parse_line(const std::string& line, int64_t default_output_len, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  DSV4_CHECK(j.is_object() && j.contains("prompt"), "{}: not a JSON object with a \"prompt\"", where);
  BenchRequest r;
  const nlohmann::json& p = j["prompt"];
  if (p.is_string()) {
    r.text = p.get<std::string>();
    DSV4_CHECK(!r.text.empty(), "{}: the prompt is empty", where);
  } else {
    DSV4_CHECK(p.is_array() && !p.empty(), "{}: \"prompt\" must be a string or a list of token ids", where);
    for (const auto& t : p) {
      DSV4_CHECK(t.is_number_integer() && t.get<int64_t>() >= 0, "{}: token ids must be non-negative integers", where);
      r.prompt.push_back(t.get<int32_t>());
    }
  }
  r.output_len = default_output_len;
  if (j.contains("output_tokens")) {
    DSV4_CHECK(j["output_tokens"].is_number_integer() && j["output_tokens"].get<int64_t>() > 0,
               "{}: \"output_tokens\" must be a positive integer", where);
    r.output_len = j["output_tokens"].get<int64_t>();
  }
  return r;
}

}  // namespace

std::vector<BenchRequest> parse_jsonl_dataset(const std::string& text, int64_t default_output_len,
                                              const std::string& source) {
  DSV4_CHECK(default_output_len > 0, "--custom-output-len must be positive");
  std::vector<BenchRequest> out;
  std::istringstream in(text);
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_line(line, default_output_len, source + " line " + std::to_string(number)));
  }
  DSV4_CHECK(!out.empty(), "{} has no prompts", source);
  return out;
}

std::vector<BenchRequest> jsonl_dataset(const std::string& path, int64_t default_output_len, int64_t num_prompts) {
  std::ifstream f(path);
  DSV4_CHECK(f.good(), "--dataset-path {}: cannot read it", path);
  std::stringstream buf;
  buf << f.rdbuf();
  auto out = parse_jsonl_dataset(buf.str(), default_output_len, path);
  if (num_prompts > 0 && static_cast<int64_t>(out.size()) > num_prompts) out.resize(static_cast<size_t>(num_prompts));
  return out;
}

}  // namespace dsv4::bench
