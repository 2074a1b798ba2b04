// ThreadPool: static partition, full coverage, exceptions, nesting (core/thread_pool.h).
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <vector>

namespace dsv4 {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceWithTheStaticPartition) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0L, 1L, 2L, 7L, 100L, 1001L}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::mutex mu;
      std::set<std::pair<int64_t, int64_t>> chunks;
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        {
          std::lock_guard lock(mu);
          chunks.insert({b, e});
        }
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
      const int64_t c = std::min<int64_t>(threads, n);
      std::set<std::pair<int64_t, int64_t>> expected;
      for (int64_t i = 0; i < c; ++i) {
        if (n * i / c < n * (i + 1) / c) expected.insert({n * i / c, n * (i + 1) / c});
      }
      EXPECT_EQ(chunks, expected) << threads << " threads, n = " << n;
    }
  }
}

TEST(ThreadPool, MinChunkLimitsTheChunkCount) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.parallel_for(
      10, [&](int64_t, int64_t) { ++calls; }, 5);
  EXPECT_EQ(calls.load(), 2);
}

TEST(ThreadPool, RethrowsTheFirstExceptionAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(30,
                                 [](int64_t b, int64_t) {
                                   if (b > 0) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.parallel_for(6, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.parallel_for(10, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 60);
}

TEST(ThreadPool, ManyCallsInARow) {
  ThreadPool pool(4);
  int64_t total = 0;
  std::vector<int64_t> part(4);
  for (int round = 0; round < 2000; ++round) {
    std::fill(part.begin(), part.end(), 0);
    pool.parallel_for(4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) part[static_cast<size_t>(i)] = i + 1;
    });
    for (int64_t v : part) total += v;
  }
  EXPECT_EQ(total, 2000 * 10);
}

}  // namespace
}  // namespace dsv4
