#include "server/generation_config.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace dsv4::server {

SamplingDefaults load_sampling_defaults(const std::filesystem::path& model_dir) {
  SamplingDefaults d;
  const auto path = model_dir / "generation_config.json";
  std::ifstream in(path);
  if (!in) return d;
  std::stringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  DSV4_CHECK(j.is_object(), "{} is not a JSON object", path.string());
  const auto number = [&](const char* key) -> std::optional<double> {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    DSV4_CHECK(it->is_number(), "{}: \"{}\" must be a number", path.string(), key);
    return it->get<double>();
  };
  d.temperature = number("temperature");
  d.top_p = number("top_p");
  d.min_p = number("min_p");
  d.repetition_penalty = number("repetition_penalty");
  if (const auto k = number("top_k")) d.top_k = static_cast<int64_t>(*k);
  if (const auto it = j.find("do_sample"); it != j.end() && it->is_boolean() && !it->get<bool>()) d.temperature = 0;
  return d;
}

}  // namespace dsv4::server
