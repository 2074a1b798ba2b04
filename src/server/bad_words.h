// bad_words (vLLM's sampling parameter): strings the model must not generate, as the token sequences the
// sampler bans (engine/sampler.h). As in vLLM, each word (leading whitespace stripped) is tokenized as is,
// and again after a space, the second kept only when it starts with another token and has as many
// tokens: the word is banned at the start of the text and in the middle of it.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dsv4::server {

// Throws ApiError 400 (param bad_words) for a word with no tokens.
std::vector<std::vector<int32_t>> tokenize_bad_words(const std::vector<std::string>& words, const Tokenizer& tok);

}  // namespace dsv4::server
