// A generation request's token constraint: its structured-output field (structured_output_request.h)
// or forced tool call (forced_tool_call.h) as a grammar, compiled through the server's GrammarCache and
// handed to the engine as a TokenConstraintFactory (each choice gets its own grammar matcher). In
// thinking mode the constraint starts after the reasoning: any text up to "</think>", then the
// grammar. A grammar that cannot be compiled is a 400 naming the field and what was refused.
#pragma once

#include <memory>

#include "engine/token_constraint.h"
#include "server/grammar_cache.h"
#include "server/structured_output_request.h"

namespace dsv4::server {

struct ConstraintRequest {
  const StructuredOutputRequest* structured = nullptr;
  const ToolChoice* tool_choice = nullptr;  // chat: forced calls when required or named
  const Json* tools = nullptr;
  bool thinking = false;
  int64_t thinking_budget = -1;  // thinking: reasoning tokens at most (thinking_budget.h); -1: no limit
};

// Null when the request constrains nothing. A thinking budget wraps the grammar (or stands alone).
std::shared_ptr<const TokenConstraintFactory> make_constraint(GrammarCache& cache, const Tokenizer& tokenizer,
                                                              int32_t eos, const ConstraintRequest& r);

}  // namespace dsv4::server
