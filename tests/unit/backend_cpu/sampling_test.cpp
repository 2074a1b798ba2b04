// The sample op on the CPU against a straightforward reference (full sorts, one pass per rule) on fresh
// random logits, with ties, masks, penalty edits, top-k / top-p / min-p boundaries and logprobs; and its
// shared math (the portable exp, the exact top-p and draw targets) against independent arithmetic.
#include "backend/cpu/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "op_test_util.h"
#include "sampling_test_util.h"

namespace dsv4 {
namespace {

using testing::SampleBatch;
using testing::SampleOut;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Sampled {
  int32_t token = -1;
  double logprob = 0;
  int64_t rank = 0;
  std::vector<int32_t> top_id;
  std::vector<double> top_logprob;
};

// The op's definition (backend/ops.h), rule by rule, sorting everything.
Sampled reference(const float* x, int64_t limit, const SampleRow& row, const std::vector<SampleEdit>& edits,
                  const uint32_t* allow, int32_t top_width) {
  std::vector<double> z(x, x + limit);
  for (int32_t e = row.edit_begin; e < row.edit_end; ++e) {
    const SampleEdit& d = edits[static_cast<size_t>(e)];
    double& v = z[static_cast<size_t>(d.id)];
    v = d.mask ? -kInf : (v > 0 ? v / d.pos_div : v * d.neg_mul) + d.add;
  }
  for (double& v : z) v = std::isnan(v) ? -kInf : v;
  for (int64_t i = 0; allow != nullptr && i < limit; ++i) {
    if (((allow[i / 32] >> (i % 32)) & 1u) == 0) z[static_cast<size_t>(i)] = -kInf;
  }
  const auto best = static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());
  Sampled out;
  out.token = row.force_id >= 0 ? row.force_id : best;  // a scored token: nothing drawn
  if (row.force_id < 0 && row.temperature > 0 && z[static_cast<size_t>(best)] > -kInf) {
    const double zmax = z[static_cast<size_t>(best)];
    std::vector<double> w(z.size());
    for (size_t i = 0; i < z.size(); ++i) w[i] = z[i] == zmax ? 1.0 : sampling::exp((z[i] - zmax) / row.temperature);
    std::vector<int32_t> heavy;  // candidates, heaviest first (ties: lower id)
    for (size_t i = 0; i < z.size(); ++i)
      if (w[i] > 0 && w[i] >= row.min_p) heavy.push_back(static_cast<int32_t>(i));
    std::stable_sort(heavy.begin(), heavy.end(),
                     [&](int32_t a, int32_t b) { return w[static_cast<size_t>(a)] > w[static_cast<size_t>(b)]; });
    const auto m = [&](int32_t id) { return static_cast<uint64_t>(std::ldexp(w[static_cast<size_t>(id)], 44)); };
    if (row.top_k > 0 && static_cast<int64_t>(heavy.size()) > row.top_k) heavy.resize(static_cast<size_t>(row.top_k));
    if (row.top_p < 1) {
      uint64_t total = 0;
      for (int32_t id : heavy) total += m(id);
      const uint64_t need = sampling::top_p_need(row.top_p, total);
      uint64_t acc = 0;
      size_t n = 0;
      while (n < heavy.size() && acc < need) acc += m(heavy[n++]);
      heavy.resize(n);
    }
    std::sort(heavy.begin(), heavy.end());
    uint64_t total = 0;
    for (int32_t id : heavy) total += m(id);
    const uint64_t target = sampling::draw_target(row.u, total);
    uint64_t acc = 0;
    for (int32_t id : heavy) {
      acc += m(id);
      if (acc > target) {
        out.token = id;
        break;
      }
    }
  }
  out.top_id.assign(static_cast<size_t>(top_width), -1);
  out.top_logprob.assign(static_cast<size_t>(top_width), 0);
  if (row.logprobs < 0) return out;
  std::vector<long double> raw(static_cast<size_t>(limit));
  for (int64_t i = 0; i < limit; ++i) raw[static_cast<size_t>(i)] = std::isnan(x[i]) ? -kInf : x[i];
  const long double mx = *std::max_element(raw.begin(), raw.end());
  long double sum = 0;
  for (long double v : raw) sum += std::exp(v - mx);
  const long double lse = mx + std::log(sum);
  out.logprob = static_cast<double>(raw[static_cast<size_t>(out.token)] - lse);
  const long double at = raw[static_cast<size_t>(out.token)];
  out.rank = 1 + std::count_if(raw.begin(), raw.end(), [&](long double v) { return v > at; });
  std::vector<int32_t> ids(static_cast<size_t>(limit));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return raw[static_cast<size_t>(a)] > raw[static_cast<size_t>(b)]; });
  for (int32_t j = 0; j < std::min<int32_t>(row.logprobs, static_cast<int32_t>(limit)); ++j) {
    out.top_id[static_cast<size_t>(j)] = ids[static_cast<size_t>(j)];
    out.top_logprob[static_cast<size_t>(j)] = static_cast<double>(raw[static_cast<size_t>(ids[j])] - lse);
  }
  return out;
}

// Runs the op and compares every row with the reference.
void expect_matches_reference(const SampleBatch& b, CpuOps& ops, const char* what) {
  SampleOut o;
  auto& [token, top_id, logprob, top_logprob, rank] = o;
  ops.sample(b.params(o));
  const auto w = static_cast<size_t>(b.top_width);
  for (size_t r = 0; r < b.rows.size(); ++r) {
    SCOPED_TRACE(::testing::Message() << what << " row " << r);
    const Sampled want = reference(b.x.data() + r * static_cast<size_t>(b.cols), b.limit, b.rows[r], b.edits,
                                   b.allow_set(b.rows[r]), b.top_width);
    ASSERT_EQ(token[r], want.token);
    const auto near = [](double got, double ref) { EXPECT_NEAR(got, ref, 1e-12 * std::max(1.0, std::fabs(ref))); };
    if (b.rows[r].logprobs >= 0) {
      near(logprob[r], want.logprob);
      EXPECT_EQ(rank[r], want.rank);
    } else {
      EXPECT_EQ(logprob[r], 0);
      EXPECT_EQ(rank[r], 0);
    }
    for (size_t j = 0; j < w; ++j) {
      ASSERT_EQ(top_id[r * w + j], want.top_id[j]) << "top " << j;
      near(top_logprob[r * w + j], want.top_logprob[j]);
    }
  }
}

TEST(SampleMath, ExpIsWithinAFewUlpOfLibm) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> d(-745.0, 0.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = i < 100000 ? d(rng) : d(rng) / 700.0;  // the whole range, then near 0
    const double want = std::exp(x), got = sampling::exp(x);
    ASSERT_LE(std::fabs(got - want), 4 * (std::nextafter(want, kInf) - want)) << x;
  }
  EXPECT_EQ(sampling::exp(0.0), 1.0);
  EXPECT_EQ(sampling::exp(-0.0), 1.0);
  EXPECT_EQ(sampling::exp(-kInf), 0.0);
  EXPECT_EQ(sampling::exp(-800.0), 0.0);
  EXPECT_GT(sampling::exp(-745.0), 0.0);  // subnormal
  EXPECT_TRUE(std::isnan(sampling::exp(std::nan(""))));
  EXPECT_NEAR(sampling::exp(1.0), std::exp(1.0), 1e-15);
  EXPECT_EQ(sampling::exp(710.0), kInf);
  EXPECT_NEAR(sampling::exp(709.5) / std::exp(709.5), 1.0, 1e-15);  // k = 1024
}

TEST(SampleMath, TopPNeedAndDrawTargetAreExact) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> d(0.0, 1.0);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t total = rng() % 1024 + 1;
    const double p = i % 100 == 0 ? std::ldexp(d(rng), -1000) : std::max(d(rng), 1e-300);
    const long double exact = static_cast<long double>(p) * static_cast<long double>(total);  // exact in 64 bits
    ASSERT_EQ(sampling::top_p_need(p, total), static_cast<uint64_t>(std::ceil(exact))) << p << " " << total;
    const double u = d(rng);
    const long double uu = std::floor(std::ldexp(static_cast<long double>(u), 53));
    ASSERT_EQ(sampling::draw_target(u, total),
              static_cast<uint64_t>(std::floor(std::ldexp(uu * static_cast<long double>(total), -53))));
  }
  const uint64_t big = uint64_t{1} << 62;
  EXPECT_EQ(sampling::top_p_need(1.0, big), big);
  EXPECT_EQ(sampling::top_p_need(0.5, big + 1), big / 2 + 1);
  EXPECT_EQ(sampling::top_p_need(std::numeric_limits<double>::denorm_min(), big), 1u);
  EXPECT_EQ(sampling::draw_target(std::nextafter(1.0, 0.0), big), big - (big >> 53));  // U = 2^53 − 1
  EXPECT_EQ(sampling::draw_target(0.0, big), 0u);
  EXPECT_EQ(sampling::mass(1.0), uint64_t{1} << 44);
  EXPECT_EQ(sampling::mass(0x1p-45), 0u);
}

TEST(SampleOp, MatchesTheReferenceOnRandomLogitsAndParameters) {
  std::mt19937 rng(3);
  CpuOps ops(2);
  const double temps[] = {0, 0.25, 1, 2.5};
  const int64_t ks[] = {0, 1, 7, 200};
  const double ps[] = {1, 0.9, 0.3, 1e-9};
  const double mins[] = {0, 0.05, 0.6};
  const int32_t lps[] = {-1, 0, 5, 20};
  for (const int64_t cols : {1000, 4096}) {
    SampleBatch b;
    b.cols = cols;
    b.limit = cols - 37;  // ids past the limit (the padded vocabulary) are never chosen
    b.top_width = 20;
    std::uniform_real_distribution<double> u(0, 1);
    for (int r = 0; r < 96; ++r) {
      SampleRow row =
          testing::sample_row(temps[r % 4], ks[(r / 4) % 4], ps[(r / 16) % 4], mins[r % 3], u(rng), lps[(r / 3) % 4]);
      b.add_random_edits(row, rng, r % 3 == 0 ? 0 : 1 + static_cast<int>(rng() % 40));
      b.rows.push_back(row);
    }
    b.x = testing::random_f32(b.rows.size() * static_cast<size_t>(cols), rng, 3.0f);
    b.x[static_cast<size_t>(cols - 2)] = 90;  // past-the-limit ids may hold the largest logits
    b.x[static_cast<size_t>(cols - 1)] = 1e4f;
    expect_matches_reference(b, ops, "random");
  }
}

// Scored rows (force_id: a prompt token's logprob, rank and alternatives) beside drawn ones: the token is the
// forced id whatever the temperature, edits and allow-set say, and its logprob and rank are the raw
// logits' (the reference's rank: 1 + the ids with a larger raw logit).
TEST(SampleOp, ForcedRowsScoreTheirTokenOnTheRawLogits) {
  std::mt19937 rng(11);
  CpuOps ops(2);
  SampleBatch b;
  b.cols = 2048;
  b.limit = 2000;
  b.top_width = 5;
  std::uniform_real_distribution<double> u(0, 1);
  for (int r = 0; r < 40; ++r) {
    SampleRow row = testing::sample_row(r % 3 == 0 ? 0 : 0.8, r % 5, 1, 0, u(rng), r % 4 == 3 ? -1 : r % 6);
    if (r % 2 == 0) row.force_id = static_cast<int32_t>(rng() % static_cast<uint32_t>(b.limit));
    b.add_random_edits(row, rng, 1 + static_cast<int>(rng() % 30));
    if (r % 4 == 0) b.add_random_allow(row, rng, 0.01);
    b.rows.push_back(row);
  }
  b.x = testing::random_f32(b.rows.size() * static_cast<size_t>(b.cols), rng, 3.0f);
  expect_matches_reference(b, ops, "forced");
  SampleOut o;
  ops.sample(b.params(o));
  for (size_t r = 0; r < b.rows.size(); r += 2) EXPECT_EQ(o.token[r], b.rows[r].force_id) << r;
}

// Allow-sets (allowed_token_ids, a grammar's mask) on fresh random rows beside rows without one: every
// token comes from its row's set, and everything else matches the reference.
TEST(SampleOp, AllowSetsKeepEveryTokenInsideTheRowsSet) {
  std::mt19937 rng(31);
  CpuOps ops(2);
  SampleBatch b;
  b.cols = 2085;
  b.limit = 2050;  // not a multiple of 32: the last word is partial
  b.top_width = 3;
  std::uniform_real_distribution<double> u(0, 1);
  const double shares[] = {0.0, 0.002, 0.3, 0.97};
  for (int r = 0; r < 64; ++r) {
    SampleRow row =
        testing::sample_row(r % 4 == 0 ? 0 : 0.8, r % 3 ? 0 : 20, r % 5 ? 1.0 : 0.9, 0, u(rng), r % 2 ? 3 : -1);
    b.add_random_edits(row, rng, static_cast<int>(rng() % 30));
    if (r % 4 != 3) b.add_random_allow(row, rng, shares[(r / 4) % 4]);
    b.rows.push_back(row);
  }
  b.x = testing::random_f32(b.rows.size() * static_cast<size_t>(b.cols), rng, 3.0f);
  expect_matches_reference(b, ops, "allow-sets");
  SampleOut o;
  ops.sample(b.params(o));
  int restricted = 0;
  for (size_t r = 0; r < b.rows.size(); ++r) {
    const SampleRow& row = b.rows[r];
    const uint32_t* allow = b.allow_set(row);
    if (allow == nullptr) continue;
    const auto allowed = [&](int64_t i) { return ((allow[i / 32] >> (i % 32)) & 1u) != 0; };
    std::set<int32_t> masked;  // by a mask edit
    for (int32_t e = row.edit_begin; e < row.edit_end; ++e)
      if (b.edits[static_cast<size_t>(e)].mask) masked.insert(b.edits[static_cast<size_t>(e)].id);
    bool any = false;
    for (int64_t i = 0; i < b.limit; ++i) any = any || (allowed(i) && !masked.contains(static_cast<int32_t>(i)));
    // Every allowed id masked too: all −inf, and the op's rule picks id 0.
    EXPECT_TRUE(any ? allowed(o.token[r]) : o.token[r] == 0) << "row " << r << " token " << o.token[r];
    ++restricted;
  }
  EXPECT_EQ(restricted, 48);
}

TEST(SampleOp, TiesGoToTheLowerIdEverywhere) {
  std::mt19937 rng(4);
  CpuOps ops(1);
  SampleBatch b;
  b.cols = b.limit = 64;
  b.top_width = 10;
  for (int r = 0; r < 200; ++r) {
    const double u = (r % 10) / 10.0;
    b.rows.push_back(testing::sample_row(r % 5 == 0 ? 0 : 0.7, (r / 5) % 6, r % 2 ? 1.0 : 0.5, (r % 4) * 0.25, u, 10));
  }
  b.x.resize(b.rows.size() * 64);
  for (auto& v : b.x) v = static_cast<float>(rng() % 3);  // three distinct values: many exact ties
  expect_matches_reference(b, ops, "ties");
  // Greedy and top_k = 1 both give the first maximum.
  SampleOut o;
  auto& [token, top_id, logprob, top_logprob, rank] = o;
  for (size_t r = 0; r < b.rows.size(); r += 5) b.rows[r] = testing::sample_row(0, 0, 1, 0, 0, 10);
  b.rows[1] = testing::sample_row(1, 1, 1, 0, 0.99, 10);
  ops.sample(b.params(o));
  for (size_t r : {size_t{0}, size_t{1}, size_t{5}}) {
    const float* row = b.x.data() + r * 64;
    EXPECT_EQ(token[r], std::max_element(row, row + 64) - row);
    EXPECT_EQ(top_id[r * 10], token[r]);
    EXPECT_LT(top_id[r * 10], top_id[r * 10 + 1]);  // equal raw logits: ascending ids
  }
}

TEST(SampleOp, MasksPenaltiesAndEditOrder) {
  CpuOps ops(1);
  SampleBatch b;
  b.cols = b.limit = 6;
  b.x = {1, 4, 3, -2, 0.5f, 2};
  // Greedy over edits: mask the max (1), penalize 2 (3 / 2 = 1.5), bias then repetition on 5 ((2 + 1) / 3 = 1),
  // repetition on a negative logit (−2 · 4 = −8), presence on 4 (0.5 − 1).
  b.edits = {{.id = 1, .mask = true},
             {.id = 2, .pos_div = 2, .neg_mul = 2},
             {.id = 3, .pos_div = 4, .neg_mul = 4},
             {.id = 4, .add = -1},
             {.id = 5, .add = 1},
             {.id = 5, .pos_div = 3, .neg_mul = 3}};
  SampleRow g = testing::sample_row(0, 0, 1, 0, 0);
  g.edit_end = 6;
  b.rows = {g};
  SampleOut o;
  auto& [token, top_id, logprob, top_logprob, rank] = o;
  ops.sample(b.params(o));
  EXPECT_EQ(token[0], 2);             // 1.5 beats 1 (id 0) and 1 (id 5)
  std::swap(b.edits[4], b.edits[5]);  // repetition first, then bias: 2 / 3 + 1 > 1.5
  ops.sample(b.params(o));
  EXPECT_EQ(token[0], 5);
  // Every id masked: the first maximum of −inf is id 0, sampled or not, and nothing else is drawn.
  b.edits.clear();
  for (int32_t i = 0; i < 6; ++i) b.edits.push_back({.id = i, .mask = true});
  b.rows = {testing::sample_row(0, 0, 1, 0, 0), testing::sample_row(1, 3, 0.5, 0.1, 0.7, 2)};
  b.rows[0].edit_end = 6;
  b.rows[1].edit_begin = b.rows[1].edit_end = 6;  // the second row is unedited: rows' edits are their own
  b.x.insert(b.x.end(), b.x.begin(), b.x.end());
  b.top_width = 2;
  ops.sample(b.params(o));
  EXPECT_EQ(token[0], 0);
  EXPECT_NE(token[1], 0);
  EXPECT_EQ(top_id[2], 1);  // raw logprobs ignore the edits
  // A masked id is never drawn, whatever u.
  b.rows = {testing::sample_row(1.0, 0, 1, 0, 0), testing::sample_row(1.0, 0, 1, 0, 0.999999)};
  b.edits = {{.id = 0, .mask = true}, {.id = 5, .mask = true}, {.id = 0, .mask = true}, {.id = 5, .mask = true}};
  b.rows[0].edit_end = 2;
  b.rows[1].edit_begin = 2;
  b.rows[1].edit_end = 4;
  b.top_width = 0;
  ops.sample(b.params(o));
  EXPECT_EQ(token[0], 1);  // u = 0: the first survivor with mass (id 0 is masked)
  EXPECT_EQ(token[1], 4);  // u ~ 1: the last survivor (5 is masked)
}

TEST(SampleOp, TopKTopPAndMinPBoundaries) {
  CpuOps ops(1);
  SampleBatch b;
  b.cols = b.limit = 5;
  b.x = {std::log(0.1f), std::log(0.4f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const auto draws = [&](SampleRow row) {
    std::set<int32_t> seen;
    SampleBatch c = b;
    for (int i = 0; i < 400; ++i) {
      row.u = (i + 0.5) / 400;
      c.rows = {row};
      SampleOut o;
      auto& [token, top_id, logprob, top_logprob, rank] = o;
      ops.sample(c.params(o));
      seen.insert(token[0]);
    }
    return seen;
  };
  EXPECT_EQ(draws(testing::sample_row(1, 0, 1, 0, 0)), (std::set<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(draws(testing::sample_row(1, 2, 1, 0, 0)), (std::set<int32_t>{1, 2}));
  EXPECT_EQ(draws(testing::sample_row(1, 5, 1, 0, 0)), (std::set<int32_t>{0, 1, 2, 3, 4}));  // k = candidates: no cut
  EXPECT_EQ(draws(testing::sample_row(1, 0, 0.65, 0, 0)), (std::set<int32_t>{1, 2}));        // 0.4 + 0.3 reaches 0.65
  EXPECT_EQ(draws(testing::sample_row(1, 0, 0.71, 0, 0)), (std::set<int32_t>{1, 2, 3}));
  EXPECT_EQ(draws(testing::sample_row(1, 0, 1e-12, 0, 0)), (std::set<int32_t>{1}));
  EXPECT_EQ(draws(testing::sample_row(1, 0, 1, 0.5, 0)), (std::set<int32_t>{1, 2}));  // p >= 0.2
  EXPECT_EQ(draws(testing::sample_row(1, 0, 1, 1.0, 0)), (std::set<int32_t>{1}));     // only the maximum
  EXPECT_EQ(draws(testing::sample_row(1, 3, 0.8, 0.3, 0)), (std::set<int32_t>{1, 2}));
}

TEST(SampleOp, DrawsFollowTheDistribution) {
  CpuOps ops(2);
  SampleBatch b;
  b.cols = b.limit = 4;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < 20000; ++i) {
    b.rows.push_back(testing::sample_row(0.5, 0, 1, 0, u(rng)));
    for (float p : {0.1f, 0.2f, 0.3f, 0.4f}) b.x.push_back(0.5f * std::log(p));  // at T = 0.5: p = 1:2:3:4 / 10
  }
  SampleOut o;
  auto& [token, top_id, logprob, top_logprob, rank] = o;
  ops.sample(b.params(o));
  std::vector<int> counts(4);
  for (int32_t t : token) ++counts[static_cast<size_t>(t)];
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[static_cast<size_t>(i)] / 20000.0, (i + 1) / 10.0, 0.015) << i;
}

TEST(SampleOp, RowsAreIndependentOfTheBatchAndTheThreads) {
  std::mt19937 rng(6);
  SampleBatch b;
  b.cols = b.limit = 3000;
  b.top_width = 5;
  std::uniform_real_distribution<double> u(0, 1);
  for (int r = 0; r < 33; ++r) {
    SampleRow row = testing::sample_row(0.9, r % 3 ? 50 : 0, r % 2 ? 0.95 : 1, 0.01, u(rng), 5);
    b.add_random_edits(row, rng, 10);
    b.rows.push_back(row);
  }
  b.x = testing::random_f32(b.rows.size() * 3000, rng, 2.0f);
  SampleOut o1, o3, alone;
  CpuOps a(1), c(3);
  a.sample(b.params(o1));
  c.sample(b.params(o3));
  EXPECT_EQ(o1.token, o3.token);
  EXPECT_EQ(o1.logprob, o3.logprob);
  EXPECT_EQ(o1.top_id, o3.top_id);
  SampleBatch single = b;  // row 7 alone
  single.rows = {b.rows[7]};
  single.x.assign(b.x.begin() + 7 * 3000, b.x.begin() + 8 * 3000);
  c.sample(single.params(alone));
  EXPECT_EQ(alone.token[0], o1.token[7]);
  EXPECT_EQ(alone.logprob[0], o1.logprob[7]);
}

TEST(SampleOp, BadParametersThrowBeforeWriting) {
  CpuOps ops(1);
  SampleBatch b;
  b.cols = b.limit = 8;
  b.x.assign(16, 0.5f);
  b.rows = {testing::sample_row(1, 0, 1, 0, 0.5, 2), testing::sample_row(0, 0, 1, 0, 0)};
  b.edits = {{.id = 1, .add = 1}, {.id = 3, .mask = true}};
  b.rows[0].edit_end = 1;
  b.rows[1].edit_begin = 1;
  b.rows[1].edit_end = 2;
  b.top_width = 2;
  // `change` edits the batch, then `tweak` the params built from it.
  const auto bad = [&](auto change, auto tweak, const char* what) {
    SampleBatch c = b;
    change(c);
    SampleOut o;
    SampleParams p = c.params(o);
    tweak(p);
    EXPECT_THROW(ops.sample(p), Error) << what;
    EXPECT_EQ(o.token, std::vector<int32_t>(2, -7)) << what;
    EXPECT_EQ(o.top_id, std::vector<int32_t>(4, -7)) << what;
  };
  const auto row = [&](auto change, const char* what) {
    bad(
        change, [](SampleParams&) {}, what);
  };
  const auto param = [&](auto tweak, const char* what) { bad([](SampleBatch&) {}, tweak, what); };
  {
    SampleOut o;
    EXPECT_NO_THROW(ops.sample(b.params(o)));
  }
  row([](SampleBatch& c) { c.rows[0].temperature = -1; }, "temperature < 0");
  row([](SampleBatch& c) { c.rows[0].temperature = kInf; }, "temperature inf");
  row([](SampleBatch& c) { c.rows[0].top_p = 0; }, "top_p 0");
  row([](SampleBatch& c) { c.rows[0].top_p = 1.5; }, "top_p > 1");
  row([](SampleBatch& c) { c.rows[0].top_p = std::nan(""); }, "top_p NaN");
  row([](SampleBatch& c) { c.rows[0].top_k = -1; }, "top_k < 0");
  row([](SampleBatch& c) { c.rows[0].min_p = 1.5; }, "min_p > 1");
  row([](SampleBatch& c) { c.rows[0].u = 1; }, "u = 1");
  row([](SampleBatch& c) { c.rows[0].logprobs = 3; }, "logprobs > top_width");
  row([](SampleBatch& c) { c.rows[0].logprobs = -2; }, "logprobs < -1");
  row([](SampleBatch& c) { c.edits[1].id = 8; }, "edit id >= limit");
  row([](SampleBatch& c) { c.edits[0].id = -1; }, "edit id < 0");
  row([](SampleBatch& c) { c.edits[1].pos_div = 0; }, "pos_div 0");
  row([](SampleBatch& c) { c.edits[1].add = std::nan(""); }, "add NaN");
  row([](SampleBatch& c) { c.rows[0].edit_end = 2; }, "overlapping edit ranges");
  row([](SampleBatch& c) { c.rows[1].edit_end = 3; }, "edit range past the edits");
  row(
      [](SampleBatch& c) {
        c.edits[0].id = 5;
        c.edits.insert(c.edits.begin() + 1, SampleEdit{.id = 2});
        c.rows[0].edit_end = 2;
        c.rows[1].edit_begin = 2;
        c.rows[1].edit_end = 3;
      },
      "edit ids not ascending");
  param([](SampleParams& p) { p.limit = 9; }, "limit > cols");
  param([](SampleParams& p) { p.limit = 0; }, "limit 0");
  param([](SampleParams& p) { p.top_width = kSampleMaxLogprobs + 1; }, "top_width too large");
  param([](SampleParams& p) { p.logprob = nullptr; }, "no logprob output");
  param([](SampleParams& p) { p.top_id = nullptr; }, "no top_id output");
  param([](SampleParams& p) { p.row = nullptr; }, "no rows");
  param([](SampleParams& p) { p.edits = nullptr; }, "no edits");
  row([](SampleBatch& c) { c.rows[1].allow_row = 0; }, "allow_row without allow-sets");
  row(
      [](SampleBatch& c) {
        c.allow.assign(1, 1u);
        c.rows[0].allow_row = 1;
      },
      "allow_row past the allow-sets");
  row([](SampleBatch& c) { c.rows[0].allow_row = -2; }, "allow_row < -1");
  param(
      [](SampleParams& p) {
        p.allow_rows = 1;
        p.allow = nullptr;
      },
      "allow-sets without memory");
  static const uint32_t* const kNullSet[] = {nullptr};
  param(
      [](SampleParams& p) {
        p.allow_rows = 1;
        p.allow = kNullSet;
      },
      "a null allow-set");
  SampleParams huge{};
  huge.cols = huge.limit = kSampleMaxLimit + 1;
  EXPECT_THROW(ops.sample(huge), Error);
}

}  // namespace
}  // namespace dsv4
