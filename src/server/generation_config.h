// The sampling defaults a model ships in generation_config.json (Hugging Face), which vLLM applies to
// requests that leave a field out: temperature, top_p, top_k, min_p, repetition_penalty.
#pragma once

#include <filesystem>

#include "server/generation_options.h"

namespace dsv4::server {

// An absent file gives no defaults; a malformed one throws dsv4::Error naming it. do_sample false means
// greedy (temperature 0), as in transformers.
SamplingDefaults load_sampling_defaults(const std::filesystem::path& model_dir);

}  // namespace dsv4::server
