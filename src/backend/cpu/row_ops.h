// CPU row-wise ops without arithmetic of their own: quantization simulation, storing entries
// through the codecs, embedding lookup, row gathers, slots from page lists, greedy argmax.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

void quant_sim(ThreadPool& pool, const QuantSimParams& p);
void store_entries(ThreadPool& pool, const StoreEntriesParams& p);
void embed(ThreadPool& pool, const EmbedParams& p);
void gather_rows(ThreadPool& pool, const GatherRowsParams& p);
void paged_slots(ThreadPool& pool, const PagedSlotsParams& p);
void argmax(ThreadPool& pool, const ArgmaxParams& p);

}  // namespace dsv4::cpu
