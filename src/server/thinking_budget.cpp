#include "server/thinking_budget.h"

#include "core/error.h"

namespace dsv4::server {
namespace {

class ThinkingBudget final : public TokenConstraint {
 public:
  ThinkingBudget(int64_t budget, int32_t think_end, std::shared_ptr<const std::vector<uint32_t>> any,
                 std::shared_ptr<const std::vector<uint32_t>> end_only, std::unique_ptr<TokenConstraint> inner)
      : budget_(budget),
        think_end_(think_end),
        any_(std::move(any)),
        end_only_(std::move(end_only)),
        inner_(std::move(inner)) {}

  std::span<const uint32_t> allowed() override {
    if (spent()) return *end_only_;
    return inner_ ? inner_->allowed() : std::span<const uint32_t>(*any_);
  }
  bool restricts() override { return spent() || (inner_ && inner_->restricts()); }

  bool accept(int32_t token) override {
    if (spent() && token != think_end_) return false;
    if (inner_ && !inner_->accept(token)) return false;
    history_.push_back(ended_);
    if (!ended_) {
      if (token == think_end_) {
        ended_ = true;
      } else {
        ++reasoning_;
      }
    }
    return true;
  }

  void rollback(size_t k) override {
    DSV4_CHECK(k <= history_.size(), "thinking budget: rolling back {} of {} tokens", k, history_.size());
    if (inner_) inner_->rollback(k);
    for (size_t i = 0; i < k; ++i) {
      const bool was_ended = history_.back();
      history_.pop_back();
      if (!was_ended) {  // the token was reasoning, or the "</think>" that ended it
        if (ended_) {
          ended_ = false;
        } else {
          --reasoning_;
        }
      }
    }
  }

 private:
  bool spent() const { return !ended_ && reasoning_ >= budget_; }  // only "</think>" may come

  int64_t budget_;
  int32_t think_end_;
  std::shared_ptr<const std::vector<uint32_t>> any_, end_only_;
  std::unique_ptr<TokenConstraint> inner_;
  int64_t reasoning_ = 0;      // reasoning tokens accepted
  bool ended_ = false;         // "</think>" accepted
  std::vector<bool> history_;  // per accepted token: whether the reasoning had ended before it
};

}  // namespace

ThinkingBudgetFactory::ThinkingBudgetFactory(int64_t budget, int32_t think_end, int32_t vocab,
                                             std::shared_ptr<const TokenConstraintFactory> inner)
    : budget_(budget), think_end_(think_end), inner_(std::move(inner)) {
  DSV4_CHECK(budget >= 0 && think_end >= 0 && think_end < vocab, "thinking budget: budget {}, </think> {}, vocab {}",
             budget, think_end, vocab);
  const auto words = static_cast<size_t>((vocab + 31) / 32);
  auto any = std::make_shared<std::vector<uint32_t>>(words, 0xffffffffu);
  if (vocab % 32 != 0) any->back() = (1u << (vocab % 32)) - 1;
  auto end_only = std::make_shared<std::vector<uint32_t>>(words, 0u);
  (*end_only)[static_cast<size_t>(think_end / 32)] = 1u << (think_end % 32);
  any_ = std::move(any);
  end_only_ = std::move(end_only);
}

std::unique_ptr<TokenConstraint> ThinkingBudgetFactory::make() const {
  return std::make_unique<ThinkingBudget>(budget_, think_end_, any_, end_only_, inner_ ? inner_->make() : nullptr);
}

}  // namespace dsv4::server
