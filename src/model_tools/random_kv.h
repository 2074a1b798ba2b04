// Random valid KV entries for benchmarks (`dsv4 bench step`): every page of a cache's tables filled with
// entries that the cache's own codecs encoded from random values, so that a timed step's indexer top-k
// and attention read data shaped like a model's (distinct scores, real scales) instead of zeros.
#pragma once

#include <cstdint>

#include "backend/device.h"
#include "core/model_config.h"
#include "model/kv_access.h"

namespace dsv4 {

// Fills every slot of every table of `kv` (the window, compressor and indexer states, compressed entries
// and indexer keys of each layer; a pool member that several layers share, once), seeded.
void fill_random_kv(const ModelConfig& c, const KvAccess& kv, Device& dev, uint32_t seed);

}  // namespace dsv4
