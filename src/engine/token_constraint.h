// A restriction of a request's next token (structured output): before each sample of the request the
// engine asks which ids may come next, and after it reports the id that was sampled. The server
// implements it with a grammar (server/structured_output.h); the engine knows nothing of grammars.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace dsv4 {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // The ids allowed next as an allow-set (id i: bit i % 32 of word i / 32; ids past the span never).
  // May be slow the first time a position is met (the engine asks while the step's forward runs); the
  // span stays valid and unchanged until the next accept or rollback, so the sample op reads it in place.
  virtual std::span<const uint32_t> allowed() = 0;
  // False when any id may come next (a thinking budget not yet spent): the sampler then applies no
  // allow-set, and a greedy request may take the argmax where the logits are. Cheap: asked before the step.
  virtual bool restricts() { return true; }
  // Moves past a sampled id; false (and no move) when the id was not allowed.
  virtual bool accept(int32_t token) = 0;
  // Takes back the last k accepted ids.
  virtual void rollback(size_t k) = 0;
};

// One constraint per sequence: the choices of an n > 1 request each get their own.
class TokenConstraintFactory {
 public:
  virtual ~TokenConstraintFactory() = default;
  virtual std::unique_ptr<TokenConstraint> make() const = 0;
};

}  // namespace dsv4
