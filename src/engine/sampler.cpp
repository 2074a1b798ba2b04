#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace dsv4 {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A uniform double in [0, 1) from the top 53 bits: the same on every standard library.
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

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
  return s;
}

SampledToken Sampler::sample(std::span<const float> logits, SamplerState& s) {
  DSV4_CHECK(static_cast<int64_t>(logits.size()) == vocab_, "sampler: {} logits for a vocabulary of {}", logits.size(),
             vocab_);
  adjust(logits, s);
  SampledToken out;
  out.token = s.params.greedy() ? argmax() : draw(s);
  if (s.params.logprobs >= 0) add_logprobs(logits, s.params.logprobs, out);
  ++s.num_output;
  ++s.counts[out.token];
  if (s.params.repetition_penalty != 1.0) s.seen.insert(out.token);
  return out;
}

bool Sampler::plain_greedy(const SamplerState& s) const {
  const SamplingParams& p = s.params;
  const bool masked =
      s.num_output < p.min_tokens && (!p.stop_token_ids.empty() || (!p.ignore_eos && eos_ >= 0 && eos_ < limit_));
  return p.greedy() && p.logprobs < 0 && p.logit_bias.empty() && !masked && p.repetition_penalty == 1.0 &&
         p.presence_penalty == 0 && p.frequency_penalty == 0;
}

SampledToken Sampler::accept(int32_t token, SamplerState& s) const {
  DSV4_CHECK(token >= 0 && token < limit_, "sampler: token {} outside [0, {})", token, limit_);
  SampledToken out;
  out.token = token;
  ++s.num_output;
  ++s.counts[token];
  return out;
}

// Bias, min_tokens masks and penalties on the ids below the limit.
void Sampler::adjust(std::span<const float> logits, const SamplerState& s) {
  const SamplingParams& p = s.params;
  z_.assign(logits.begin(), logits.begin() + limit_);
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < limit_) z_[static_cast<size_t>(id)] += bias;
  }
  if (s.num_output < p.min_tokens) {
    for (int32_t id : p.stop_token_ids) {
      if (id < limit_) z_[static_cast<size_t>(id)] = kNegInf;
    }
    if (!p.ignore_eos && eos_ >= 0 && eos_ < limit_) z_[static_cast<size_t>(eos_)] = kNegInf;
  }
  if (p.repetition_penalty != 1.0) {
    for (int32_t id : s.seen) {
      if (id >= limit_) continue;
      double& v = z_[static_cast<size_t>(id)];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0 || p.frequency_penalty != 0) {
    for (const auto& [id, n] : s.counts) {
      if (id < limit_) z_[static_cast<size_t>(id)] -= p.frequency_penalty * n + p.presence_penalty;
    }
  }
}

int32_t Sampler::argmax() const {
  return static_cast<int32_t>(std::max_element(z_.begin(), z_.end()) - z_.begin());  // first maximum
}

// Temperature, min-p, top-k, top-p (vLLM's order), then one uniform draw walked over the survivors in id order.
int32_t Sampler::draw(SamplerState& s) {
  const SamplingParams& p = s.params;
  const double zmax = *std::max_element(z_.begin(), z_.end());
  if (zmax == kNegInf) return argmax();  // everything masked: nothing to draw from
  weight_.resize(z_.size());
  cand_.clear();
  const double min_w = p.min_p > 0 ? p.min_p : 0;  // relative to the most likely token's weight of 1
  for (size_t i = 0; i < z_.size(); ++i) {
    const double w = std::exp((z_[i] - zmax) / p.temperature);
    weight_[i] = w;
    if (w > 0 && w >= min_w) cand_.push_back(static_cast<int32_t>(i));
  }
  if (p.top_k > 0 && static_cast<int64_t>(cand_.size()) > p.top_k) keep_top_k(p.top_k);
  if (p.top_p < 1) keep_top_p(p.top_p);
  std::sort(cand_.begin(), cand_.end());
  double total = 0;
  for (int32_t id : cand_) total += weight_[static_cast<size_t>(id)];
  const double target = uniform(s.rng) * total;
  double acc = 0;
  for (int32_t id : cand_) {
    acc += weight_[static_cast<size_t>(id)];
    if (acc > target) return id;
  }
  return cand_.back();
}

// Heavier first; equal weights by id, so the cut is deterministic.
void Sampler::keep_top_k(int64_t k) {
  const auto heavier = [this](int32_t a, int32_t b) {
    const double wa = weight_[static_cast<size_t>(a)], wb = weight_[static_cast<size_t>(b)];
    return wa != wb ? wa > wb : a < b;
  };
  std::nth_element(cand_.begin(), cand_.begin() + (k - 1), cand_.end(), heavier);
  cand_.resize(static_cast<size_t>(k));
}

// The smallest set of most likely candidates whose mass reaches p of the candidates' total.
void Sampler::keep_top_p(double p) {
  const auto heavier = [this](int32_t a, int32_t b) {
    const double wa = weight_[static_cast<size_t>(a)], wb = weight_[static_cast<size_t>(b)];
    return wa != wb ? wa > wb : a < b;
  };
  double total = 0;
  for (int32_t id : cand_) total += weight_[static_cast<size_t>(id)];
  const double need = p * total;
  // Most of the mass usually sits in a few ids: sort a short head first, the rest only if needed.
  size_t sorted = std::min<size_t>(cand_.size(), 256);
  std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(sorted), cand_.end(), heavier);
  for (bool full = sorted == cand_.size();; full = true) {
    double acc = 0;
    for (size_t i = 0; i < sorted; ++i) {
      acc += weight_[static_cast<size_t>(cand_[i])];
      if (acc >= need) {
        cand_.resize(i + 1);
        return;
      }
    }
    if (full) return;  // rounding: keep everything
    std::sort(cand_.begin(), cand_.end(), heavier);
    sorted = cand_.size();
  }
}

void Sampler::add_logprobs(std::span<const float> logits, int32_t n, SampledToken& out) {
  const auto raw = logits.first(static_cast<size_t>(limit_));
  const double m = *std::max_element(raw.begin(), raw.end());
  double sum = 0;
  for (float v : raw) sum += std::exp(double{v} - m);
  const double lse = m + std::log(sum);
  out.has_logprobs = true;
  out.logprob = static_cast<float>(double{raw[static_cast<size_t>(out.token)]} - lse);
  if (n <= 0) return;
  cand_.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) cand_[i] = static_cast<int32_t>(i);
  const auto k = std::min<size_t>(static_cast<size_t>(n), raw.size());
  std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(),
                    [&](int32_t a, int32_t b) {
                      return raw[static_cast<size_t>(a)] != raw[static_cast<size_t>(b)]
                                 ? raw[static_cast<size_t>(a)] > raw[static_cast<size_t>(b)]
                                 : a < b;
                    });
  for (size_t i = 0; i < k; ++i) {
    out.top.push_back({cand_[i], static_cast<float>(double{raw[static_cast<size_t>(cand_[i])]} - lse)});
  }
}

}  // namespace dsv4
