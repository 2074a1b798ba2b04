// A thinking budget: in thinking mode, at most `budget` tokens of reasoning, then "</think>" is the only
// token allowed, so the answer starts (Anthropic's thinking.budget_tokens, and DeepSeek's thinking object
// with the same field on chat). It wraps the request's other constraint (a grammar that starts after the
// reasoning, or none) and hands it every token, so structured output and forced tool calls still hold after
// the reasoning ends.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/token_constraint.h"

namespace dsv4::server {

class ThinkingBudgetFactory final : public TokenConstraintFactory {
 public:
  // `think_end`: the id of "</think>"; `vocab`: ids the masks cover; `inner` may be null.
  ThinkingBudgetFactory(int64_t budget, int32_t think_end, int32_t vocab,
                        std::shared_ptr<const TokenConstraintFactory> inner);
  std::unique_ptr<TokenConstraint> make() const override;

 private:
  int64_t budget_;
  int32_t think_end_;
  std::shared_ptr<const std::vector<uint32_t>> any_, end_only_;  // allow-sets: every id; "</think>" alone
  std::shared_ptr<const TokenConstraintFactory> inner_;
};

}  // namespace dsv4::server
