// Where the bytes behind a ModelWeights' views come from when no mapped checkpoint holds them
// (--load-format dummy: they are made from a seed). The views are addresses in the source's own
// host range; PlacedWeights acquires a tensor before it reads it and, on a GPU, releases it once the
// copy is on the device, so the host holds a few tensors at a time rather than the model.
#pragma once

#include <cstdint>

namespace dsv4 {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Host bytes every tensor takes (what a host device must hold for them).
  virtual uint64_t total_bytes() const = 0;
  // Makes the tensor holding `view` readable until it is released (no-op when it is); a rank's view of a
  // sharded weight starts inside its tensor.
  virtual void acquire(const void* view) = 0;
  // Frees the host bytes of an acquired tensor; acquiring it again makes them again.
  virtual void release(const void* view) = 0;
};

}  // namespace dsv4
