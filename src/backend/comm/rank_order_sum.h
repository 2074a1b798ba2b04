// The host implementations' reduction: a sum in rank order, in fp32, rounded once to the element type,
// so that every rank computes the same bits from the same inputs.
#pragma once

#include <cstddef>
#include <span>

#include "core/dtype.h"

namespace dsv4 {

// Bytes per element of a type the collectives reduce (kF32, kBF16); throws for any other.
size_t reduce_element_size(DType type);

// out[i] = round(((in[0][i] + in[1][i]) + in[2][i]) + ...), each term widened to fp32. out may alias none of
// the inputs.
void rank_order_sum(std::span<const void* const> in, void* out, size_t count, DType type);

}  // namespace dsv4
