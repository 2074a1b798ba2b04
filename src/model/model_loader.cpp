#include "model/model_loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "core/error.h"
#include "io/model_config_json.h"

namespace dsv4 {
namespace {

// The config with the overrides, and the checkpoint tensors they drop. A real checkpoint's tensors can
// only be left out (fewer layers), never reshaped or added to: every tensor the overridden config binds
// must be one the checkpoint's own config binds, the same.
struct Overridden {
  ModelConfig config;
  std::set<std::string> dropped;
};

Overridden override_checkpoint(const std::filesystem::path& dir, const ModelConfig& base, const LoadOptions& o) {
  Overridden r{load_model_config_ex(dir, o.hf_overrides).config, {}};
  r.config.expert_format = base.expert_format;
  std::map<std::string, TensorSpec> had;
  for (auto& s : checkpoint_tensor_specs(base)) had.emplace(s.name, std::move(s));
  std::vector<std::string> changed;
  for (const auto& s : checkpoint_tensor_specs(r.config)) {
    const auto it = had.find(s.name);
    if (it == had.end())
      changed.push_back(fmt::format("{} (new)", s.name));
    else if (it->second.dtype != s.dtype || it->second.shape != s.shape)
      changed.push_back(fmt::format("{} ({} -> {})", s.name, it->second.shape, s.shape));
    if (it != had.end()) had.erase(it);
  }
  DSV4_CHECK(changed.empty(),
             "--hf-overrides {} changes {} tensor(s) of the checkpoint in {}, the first {}: a checkpoint can only lose "
             "layers (num_hidden_layers, num_nextn_predict_layers); use --load-format dummy for other shapes",
             o.hf_overrides.dump(), changed.size(), dir.string(), changed.front());
  for (const auto& [name, spec] : had) r.dropped.insert(name);
  return r;
}

void load_checkpoint(LoadedModel& m) {
  const LoadOptions& o = m.options;
  const ConfigLoadResult base = load_model_config_ex(m.dir);
  try {
    m.checkpoint = std::make_unique<Checkpoint>(Checkpoint::open(m.dir));
  } catch (const Error& e) {
    fail("{} (--load-format dummy runs a config.json alone, on random weights)", e.what());
  }
  m.config = base.config;
  m.config.expert_format = infer_expert_format(*m.checkpoint, base.config, base.declared_expert_format);
  std::set<std::string> dropped;
  if (!o.hf_overrides.empty()) {
    Overridden r = override_checkpoint(m.dir, m.config, o);
    m.config = r.config;
    dropped = std::move(r.dropped);
  }
  m.weights = bind_weights(*m.checkpoint, m.config, dropped);
}

}  // namespace

const char* load_format_name(LoadFormat f) { return f == LoadFormat::kDummy ? "dummy" : "auto"; }

LoadFormat parse_load_format(std::string_view name) {
  if (name == "auto") return LoadFormat::kAuto;
  if (name == "dummy") return LoadFormat::kDummy;
  fail("--load-format: \"{}\" is not a load format (auto: the checkpoint, dummy: random weights)", name);
}

std::string LoadOptions::describe() const {
  std::string s = format == LoadFormat::kDummy ? fmt::format("dummy (seed {})", seed) : "auto";
  if (!hf_overrides.empty()) s += fmt::format(", hf-overrides {}", hf_overrides.dump());
  return s;
}

nlohmann::ordered_json LoadOptions::to_json() const {
  nlohmann::ordered_json j{{"load_format", load_format_name(format)}, {"hf_overrides", hf_overrides}};
  if (format == LoadFormat::kDummy) j["seed"] = seed;
  return j;
}

std::vector<TensorSpec> LoadedModel::tensors() const {
  if (dummy) return dummy->specs();
  std::set<std::string> bound;
  for (auto& s : checkpoint_tensor_specs(config)) bound.insert(std::move(s.name));
  std::vector<TensorSpec> out;
  for (const auto& name : checkpoint->names()) {
    if (!bound.count(name)) continue;  // a layer the overrides drop
    const TensorInfo& t = *checkpoint->find(name);
    out.push_back({name, t.dtype, t.shape});
  }
  return out;
}

LoadedModel load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  LoadedModel m;
  m.dir = dir;
  m.options = options;
  if (options.format == LoadFormat::kAuto) {
    load_checkpoint(m);
    return m;
  }
  m.config = load_model_config_ex(dir, options.hf_overrides).config;
  m.dummy = std::make_unique<DummyWeights>(m.config, options.seed);
  m.weights = m.dummy->weights();
  return m;
}

}  // namespace dsv4
