#include "server/prompt_truncation.h"

#include "server/api_error.h"

namespace dsv4::server {

void truncate_prompts(std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& o, int64_t max_model_len) {
  if (!o.truncate_prompt_tokens) return;
  const int64_t n = *o.truncate_prompt_tokens == -1 ? max_model_len : *o.truncate_prompt_tokens;
  if (n > max_model_len) {
    bad_request("truncate_prompt_tokens",
                "'truncate_prompt_tokens' ({}) is greater than the maximum model length ({}); choose a smaller value",
                n, max_model_len);
  }
  for (std::vector<int32_t>& p : prompts) {
    const auto keep = static_cast<size_t>(n);
    if (p.size() <= keep) continue;
    if (o.truncate_left) {
      p.erase(p.begin(), p.end() - static_cast<std::ptrdiff_t>(keep));
    } else {
      p.resize(keep);
    }
  }
}

}  // namespace dsv4::server
