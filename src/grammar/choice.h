// vLLM's guided_choice: the output is exactly one of the given strings.
#pragma once

#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace dsv4::grammar {

// Throws dsv4::Error for an empty list or a string that is not valid UTF-8.
Grammar choice_grammar(const std::vector<std::string>& choices);

}  // namespace dsv4::grammar
