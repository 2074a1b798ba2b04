#include "backend/cpu/sampling.h"

#include "backend/sample_row.h"

namespace dsv4::cpu {

void sample(ThreadPool& pool, const SampleParams& p) {
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    SampleScratch s;
    for (int64_t r = r0; r < r1; ++r) {
      const SampleRow& row = p.row[r];
      const std::span<const SampleEdit> edits =
          row.edit_end > row.edit_begin
              ? std::span<const SampleEdit>(p.edits + row.edit_begin,
                                            static_cast<size_t>(row.edit_end - row.edit_begin))
              : std::span<const SampleEdit>();
      const uint32_t* allow = row.allow_row >= 0 ? p.allow[row.allow_row] : nullptr;
      p.token[r] = sample_row(p.x + r * p.cols, p.limit, row, edits, allow, s, p.logprob ? p.logprob + r : nullptr,
                              p.top_id ? p.top_id + r * p.top_width : nullptr,
                              p.top_logprob ? p.top_logprob + r * p.top_width : nullptr, p.top_width,
                              p.rank ? p.rank + r : nullptr);
    }
  });
}

}  // namespace dsv4::cpu
