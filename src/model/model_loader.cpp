#include "model/model_loader.h"

#include "io/model_config_json.h"

namespace dsv4 {

LoadedModel load_model(const std::filesystem::path& dir) {
  LoadedModel m;
  m.dir = dir;
  auto cfg = load_model_config_ex(dir);
  m.config = cfg.config;
  m.checkpoint = std::make_unique<Checkpoint>(Checkpoint::open(dir));
  m.config.expert_format = infer_expert_format(*m.checkpoint, m.config, cfg.declared_expert_format);
  m.weights = bind_weights(*m.checkpoint, m.config);
  return m;
}

}  // namespace dsv4
