// dsv4 tokenize: text on stdin -> JSON array of token ids on stdout (no special tokens added), or with
// --decode a JSON array of ids on stdin -> text on stdout. With --lines every stdin line is one JSON item
// (a string to encode, or an id array to decode) and every stdout line one answer, so scripts can batch.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_locator.h"
#include "tools/command.h"

namespace dsv4::tools {
namespace {

using nlohmann::json;

struct Options {
  std::string tokenizer;
  std::string model;
  bool decode = false;
  bool lines = false;
  bool skip_special = false;
};

std::vector<int32_t> parse_ids(const std::string& text, size_t line) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string where = line ? fmt::format("line {}: ", line) : "";
  if (j.is_discarded() || !j.is_array()) fail("{}expected a JSON array of token ids on stdin", where);
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const json& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX)
      fail("{}token ids must be integers, got {}", where, v.dump());
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

std::string ids_json(const std::vector<int32_t>& ids) { return json(ids).dump(); }

void run_lines(const Tokenizer& tok, const Options& o) {
  std::string line;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    if (o.decode) {
      std::cout << json(tok.decode(parse_ids(line, n), o.skip_special)).dump() << '\n';
      continue;
    }
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_string()) fail("line {}: expected a JSON string", n);
    std::cout << ids_json(tok.encode(j.get_ref<const std::string&>())) << '\n';
  }
}

void run(const Options& o) {
  const auto path = locate_tokenizer(TokenizerSearch::from_environment(o.tokenizer, o.model));
  spdlog::debug("tokenizer: {}", path.string());
  const Tokenizer tok = Tokenizer::load(path);
  std::ios::sync_with_stdio(false);
  if (o.lines) return run_lines(tok, o);
  const std::string input(std::istreambuf_iterator<char>(std::cin), {});
  if (o.decode) {
    std::cout << tok.decode(parse_ids(input, 0), o.skip_special);
  } else {
    std::cout << ids_json(tok.encode(input)) << '\n';
  }
}

void setup(CLI::App& cmd) {
  static Options o;
  cmd.add_option("--tokenizer", o.tokenizer, "tokenizer.json to use (default: the model's, else the embedded one)");
  add_model_option(cmd, o.model, /*required=*/false);
  cmd.add_flag("--decode", o.decode, "read a JSON array of ids, write the text");
  cmd.add_flag("--lines", o.lines, "one JSON string (or id array with --decode) per line in, one answer per line out");
  cmd.add_flag("--skip-special", o.skip_special, "with --decode, leave out special tokens");
  cmd.callback([] { run(o); });
}

}  // namespace

DSV4_COMMAND("tokenize", "text on stdin -> token ids (JSON), or ids -> text with --decode", setup);

}  // namespace dsv4::tools
