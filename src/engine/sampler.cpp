#include "engine/sampler.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace dsv4 {

static_assert(kMaxLogprobs <= kSampleMaxLogprobs, "the sample op returns at most kSampleMaxLogprobs top ids");

namespace {

// A uniform double in [0, 1) from the top 53 bits: the same on every standard library.
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Whether the output so far ends with every id of `word` but its last (vLLM's bad-words rule: the
// output only, never the prompt).
bool completes(const std::vector<int32_t>& tail, const std::vector<int32_t>& word) {
  const size_t prefix = word.size() - 1;
  return prefix <= tail.size() && std::equal(word.begin(), word.end() - 1, tail.end() - static_cast<ptrdiff_t>(prefix));
}

}  // namespace

Sampler::Sampler(int64_t vocab, int64_t limit, int32_t eos)
    : vocab_(vocab), limit_(limit > 0 ? std::min(limit, vocab) : vocab), eos_(eos) {
  DSV4_CHECK(vocab > 0, "sampler: the vocabulary is empty");
}

SamplerState Sampler::start(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed) const {
  SamplerState s;
  s.params = params;
  s.rng.seed(params.seed.value_or(seed));
  if (params.repetition_penalty != 1.0) s.seen.insert(prompt.begin(), prompt.end());
  if (!params.allowed_token_ids.empty()) s.allowed = TokenMask::allow_set_of(params.allowed_token_ids, limit_);
  for (const auto& word : params.bad_words) s.tail_len = std::max(s.tail_len, word.size() - 1);
  if (params.constraint) s.constraint = params.constraint->make();
  return s;
}

SampledToken Sampler::sample(std::span<const float> logits, SamplerState& s) {
  DSV4_CHECK(static_cast<int64_t>(logits.size()) == vocab_, "sampler: {} logits for a vocabulary of {}", logits.size(),
             vocab_);
  inputs_.clear();
  const SampleRow row = prepare(s, inputs_);
  const auto width = static_cast<size_t>(std::max(row.logprobs, 0));
  top_id_.resize(width);
  top_logprob_.resize(width);
  double logprob = 0;
  const int32_t token =
      sample_row(logits.data(), limit_, row, inputs_.edits,
                 row.allow_row < 0 ? nullptr : inputs_.allow[static_cast<size_t>(row.allow_row)], scratch_, &logprob,
                 top_id_.data(), top_logprob_.data(), static_cast<int32_t>(width));
  return finish(s, row, token, logprob, top_id_, top_logprob_);
}

namespace {

// Whether the request's constraint restricts its next token (the constraint still sees every token).
bool constrains(const SamplerState& s) { return s.constraint && s.constraint->restricts(); }

}  // namespace

bool Sampler::plain_greedy(const SamplerState& s) const {
  const SamplingParams& p = s.params;
  return p.greedy() && p.logprobs < 0 && p.logit_bias.empty() && p.repetition_penalty == 1.0 &&
         p.presence_penalty == 0 && p.frequency_penalty == 0 && !constrains(s) && !token_mask(s).restricts();
}

TokenMask Sampler::token_mask(const SamplerState& s) const {
  const SamplingParams& p = s.params;
  TokenMask mask(limit_);
  if (s.num_output < p.min_tokens) {
    for (int32_t id : p.stop_token_ids) mask.ban(id);
    if (!p.ignore_eos && eos_ >= 0) mask.ban(eos_);
  }
  for (const auto& word : p.bad_words)
    if (completes(s.tail, word)) mask.ban(word.back());
  if (!s.allowed.empty()) mask.allow_only(s.allowed);
  if (constrains(s)) mask.allow_only(s.constraint->allowed());
  return mask;
}

void Sampler::record(int32_t token, SamplerState& s) const {
  DSV4_CHECK(token >= 0 && token < limit_, "sampler: token {} outside [0, {})", token, limit_);
  ++s.num_output;
  ++s.counts[token];
  if (s.params.repetition_penalty != 1.0) s.seen.insert(token);
  if (s.tail_len > 0) {
    s.tail.push_back(token);
    if (s.tail.size() > s.tail_len) s.tail.erase(s.tail.begin());
  }
}

int32_t Sampler::constrain(int32_t token, SamplerState& s) const {
  if (!s.constraint || s.constraint->accept(token)) return token;
  const std::span<const uint32_t> allowed = s.constraint->allowed();
  for (size_t w = 0; w < allowed.size(); ++w) {
    if (allowed[w] == 0) continue;
    const auto id = static_cast<int32_t>(w * 32 + static_cast<size_t>(std::countr_zero(allowed[w])));
    DSV4_CHECK(s.constraint->accept(id), "sampler: the token constraint refused id {} that it allows", id);
    return id;
  }
  fail("sampler: the token constraint allows no id");
}

SampledToken Sampler::accept(int32_t token, SamplerState& s) const {
  token = constrain(token, s);
  record(token, s);
  SampledToken out;
  out.token = token;
  return out;
}

// The edits reproduce the old in-place adjustment exactly when applied in order: bias adds; a banned
// id is −inf whatever came before or after; the repetition penalty (on seen ids) and then the
// presence/frequency penalty (on output ids) share one edit, applied after the bias. The mask's
// allow-set goes to the op whole, by pointer: the op makes every id outside it −inf after the edits.
const SampleRow& Sampler::prepare(SamplerState& s, SampleInputs& in) const {
  const SamplingParams& p = s.params;
  std::vector<SampleEdit>& edits = in.edits;
  SampleRow row;
  row.edit_begin = static_cast<int32_t>(edits.size());
  const TokenMask mask = token_mask(s);
  const auto is_masked = [&](int32_t id) { return mask.banned(id); };
  for (int32_t id : mask.banned_ids()) edits.push_back({.id = id, .mask = true});
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < limit_ && !is_masked(id)) edits.push_back({.id = id, .add = double{bias}});
  }
  const bool repeat = p.repetition_penalty != 1.0, penalize = p.presence_penalty != 0 || p.frequency_penalty != 0;
  const auto penalty = [&](int32_t id, bool seen, const int32_t* count) {
    if (id >= limit_ || is_masked(id)) return;
    SampleEdit e{.id = id};
    if (seen) e.pos_div = e.neg_mul = p.repetition_penalty;
    if (count) e.add = -(p.frequency_penalty * *count + p.presence_penalty);
    edits.push_back(e);
  };
  if (repeat) {
    for (int32_t id : s.seen) {
      const auto it = penalize ? s.counts.find(id) : s.counts.end();
      penalty(id, true, it == s.counts.end() ? nullptr : &it->second);
    }
  }
  if (penalize) {
    for (const auto& [id, n] : s.counts)
      if (!repeat || !s.seen.contains(id)) penalty(id, false, &n);
  }
  // Ids ascending for the op; stable, so an id's bias stays before its penalties.
  std::stable_sort(edits.begin() + row.edit_begin, edits.end(),
                   [](const SampleEdit& a, const SampleEdit& b) { return a.id < b.id; });
  row.edit_end = static_cast<int32_t>(edits.size());
  const std::span<const uint32_t> allow = mask.allow_set(s.allow_buffer);
  if (!allow.empty()) {
    row.allow_row = static_cast<int32_t>(in.allow.size());
    in.allow.push_back(allow.data());
  }
  if (!p.greedy()) {
    row.temperature = p.temperature;
    row.top_k = std::max<int64_t>(p.top_k, 0);
    row.top_p = p.top_p;
    row.min_p = p.min_p;
    row.u = uniform(s.rng);
  }
  row.logprobs = p.logprobs;
  in.rows.push_back(row);
  return in.rows.back();
}

SampledToken Sampler::finish(SamplerState& s, const SampleRow& row, int32_t token, double logprob,
                             std::span<const int32_t> top_id, std::span<const double> top_logprob) const {
  token = constrain(token, s);
  record(token, s);
  SampledToken out;
  out.token = token;
  if (row.logprobs < 0) return out;
  out.has_logprobs = true;
  out.logprob = static_cast<float>(logprob);
  const size_t n = std::min({static_cast<size_t>(row.logprobs), top_id.size(), top_logprob.size()});
  for (size_t j = 0; j < n && top_id[j] >= 0; ++j) out.top.push_back({top_id[j], static_cast<float>(top_logprob[j])});
  return out;
}

}  // namespace dsv4
