// The thinking budget: after `budget` reasoning tokens only "</think>" may come, then anything (or the
// wrapped constraint's choice); rollbacks restore the count; the wrapped constraint sees every token.
#include "server/thinking_budget.h"

#include <gtest/gtest.h>

#include <vector>

namespace dsv4::server {
namespace {

constexpr int32_t kEnd = 77, kVocab = 100;

bool allows(TokenConstraint& c, int32_t id) {
  const std::span<const uint32_t> m = c.allowed();
  return static_cast<size_t>(id / 32) < m.size() && ((m[static_cast<size_t>(id / 32)] >> (id % 32)) & 1u) != 0;
}

// Allows even ids only, and records what it is told.
class EvenIds final : public TokenConstraint {
 public:
  explicit EvenIds(std::vector<int32_t>* log) : log_(log), mask_((kVocab + 31) / 32, 0x55555555u) {}
  std::span<const uint32_t> allowed() override { return mask_; }
  bool accept(int32_t token) override {
    if (token % 2 != 0 && token != kEnd) return false;
    log_->push_back(token);
    return true;
  }
  void rollback(size_t k) override { log_->resize(log_->size() - k); }

 private:
  std::vector<int32_t>* log_;
  std::vector<uint32_t> mask_;
};

class EvenIdsFactory final : public TokenConstraintFactory {
 public:
  explicit EvenIdsFactory(std::vector<int32_t>* log) : log_(log) {}
  std::unique_ptr<TokenConstraint> make() const override { return std::make_unique<EvenIds>(log_); }

 private:
  std::vector<int32_t>* log_;
};

TEST(ThinkingBudget, OnlyTheEndOfThinkingPastTheBudgetAndRollbacksRestoreTheCount) {
  const auto c = ThinkingBudgetFactory(2, kEnd, kVocab, nullptr).make();
  EXPECT_FALSE(c->restricts());  // within the budget any id may come: the sampler applies no allow-set
  EXPECT_TRUE(allows(*c, 5));
  EXPECT_TRUE(allows(*c, kVocab - 1));
  EXPECT_FALSE(allows(*c, kVocab));  // past the vocabulary
  ASSERT_TRUE(c->accept(5));
  ASSERT_TRUE(c->accept(6));
  EXPECT_TRUE(c->restricts());
  EXPECT_FALSE(allows(*c, 5));  // the budget is spent
  EXPECT_TRUE(allows(*c, kEnd));
  EXPECT_FALSE(c->accept(5));
  ASSERT_TRUE(c->accept(kEnd));
  EXPECT_FALSE(c->restricts());
  EXPECT_TRUE(allows(*c, 5));  // the answer: no limit
  ASSERT_TRUE(c->accept(5));
  ASSERT_TRUE(c->accept(9));
  c->rollback(3);  // 9, 5 and the end: two reasoning tokens, the budget spent again
  EXPECT_FALSE(allows(*c, 5));
  EXPECT_TRUE(allows(*c, kEnd));
  c->rollback(1);
  EXPECT_TRUE(allows(*c, 5));
  ASSERT_TRUE(c->accept(kEnd));  // the end before the budget: fine
  EXPECT_TRUE(allows(*c, 3));
}

TEST(ThinkingBudget, TheWrappedConstraintSeesEveryTokenAndDecidesWithinTheBudget) {
  std::vector<int32_t> log;
  const auto c = ThinkingBudgetFactory(1, kEnd, kVocab, std::make_shared<EvenIdsFactory>(&log)).make();
  EXPECT_TRUE(c->restricts());  // the wrapped constraint does
  EXPECT_FALSE(allows(*c, 3));  // the wrapped constraint's mask
  EXPECT_FALSE(c->accept(3));
  ASSERT_TRUE(c->accept(4));
  EXPECT_FALSE(c->accept(6));  // past the budget
  ASSERT_TRUE(c->accept(kEnd));
  ASSERT_TRUE(c->accept(8));
  EXPECT_EQ(log, (std::vector<int32_t>{4, kEnd, 8}));
  c->rollback(2);
  EXPECT_EQ(log, (std::vector<int32_t>{4}));
  EXPECT_FALSE(allows(*c, 6));
}

TEST(ThinkingBudget, AZeroBudgetEndsTheThinkingAtOnce) {
  const auto c = ThinkingBudgetFactory(0, kEnd, kVocab, nullptr).make();
  EXPECT_FALSE(allows(*c, 0));
  EXPECT_TRUE(allows(*c, kEnd));
}

}  // namespace
}  // namespace dsv4::server
