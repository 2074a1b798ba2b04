#include "engine/stop_check.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

TEST(StopCheck, EosStopIdsMinTokensAndLengths) {
  SamplingParams p;
  p.max_tokens = 5;
  p.stop_token_ids = {7};
  EXPECT_EQ(check_stop(p, 1, 1, 10, 100, 1)->reason, FinishReason::kStop);
  EXPECT_EQ(check_stop(p, 1, 1, 10, 100, 1)->stop_token_id, 1);
  EXPECT_EQ(check_stop(p, 7, 2, 10, 100, 1)->stop_token_id, 7);
  EXPECT_FALSE(check_stop(p, 3, 4, 10, 100, 1));
  EXPECT_EQ(check_stop(p, 3, 5, 10, 100, 1)->reason, FinishReason::kLength);
  EXPECT_EQ(check_stop(p, 3, 1, 100, 100, 1)->reason, FinishReason::kLength);  // max_model_len
  p.ignore_eos = true;
  EXPECT_FALSE(check_stop(p, 1, 1, 10, 100, 1));
  p.min_tokens = 3;
  EXPECT_FALSE(check_stop(p, 7, 2, 10, 100, 1));
  EXPECT_TRUE(check_stop(p, 7, 3, 10, 100, 1));
}

}  // namespace
}  // namespace dsv4
