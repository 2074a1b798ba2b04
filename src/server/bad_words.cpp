#include "server/bad_words.h"

#include "server/api_error.h"

namespace dsv4::server {
namespace {

// Python's str.lstrip() for the whitespace a client would put before a word.
std::string strip_leading_space(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\n\r\f\v");
  return first == std::string::npos ? std::string() : s.substr(first);
}

}  // namespace

std::vector<std::vector<int32_t>> tokenize_bad_words(const std::vector<std::string>& words, const Tokenizer& tok) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string bare = strip_leading_space(word);
    std::vector<int32_t> alone = tok.encode(bare);
    if (alone.empty()) bad_request("bad_words", "'bad_words' entries must have at least one token, got \"{}\"", word);
    std::vector<int32_t> spaced = tok.encode(" " + bare);
    const bool new_first_token = !spaced.empty() && spaced.front() != alone.front() && spaced.size() == alone.size();
    out.push_back(std::move(alone));
    if (new_first_token) out.push_back(std::move(spaced));
  }
  return out;
}

}  // namespace dsv4::server
