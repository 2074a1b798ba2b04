#include "model_tools/random_checkpoint.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>

#include "core/error.h"
#include "io/model_config_json.h"
#include "io/safetensors_writer.h"
#include "model/random_tensors.h"
#include "model/weights.h"

namespace dsv4 {
namespace fs = std::filesystem;

namespace {

// A quantized weight and its scales come from one float matrix; whichever of the two tensors is
// written first makes both, the other takes its half, and the bytes are freed once both are out.
struct QuantizedPair {
  std::mutex mu;
  bool ready = false;
  std::vector<uint8_t> data, scale;
};

void take(std::vector<uint8_t>& src, std::span<uint8_t> out) {
  DSV4_CHECK(src.size() == out.size(), "make-tiny: internal size mismatch ({} vs {})", src.size(), out.size());
  std::copy(src.begin(), src.end(), out.begin());
  std::vector<uint8_t>().swap(src);
}

// Adds a FP8/FP4 weight and its ".scale" tensor.
void add_quantized(ShardedCheckpointWriter& writer, const TensorSpec& s, const RandomTensors& gen) {
  const std::vector<int64_t> scale_shape = RandomTensors::scale_shape(s);
  auto pair = std::make_shared<QuantizedPair>();
  auto part = [pair, s, &gen, scale_shape](bool scale, std::span<uint8_t> o) {
    std::lock_guard lock(pair->mu);
    if (!pair->ready) {
      pair->data.resize(static_cast<size_t>(s.shape[0] * s.shape[1]));
      pair->scale.resize(static_cast<size_t>(scale_shape[0] * scale_shape[1]));
      gen.fill_quantized(s, pair->data, pair->scale);
      pair->ready = true;
    }
    take(scale ? pair->scale : pair->data, o);
  };
  writer.add_lazy(s.name, s.dtype, s.shape, [part](std::span<uint8_t> o) { part(false, o); });
  writer.add_lazy(RandomTensors::scale_name(s), DType::kF8E8M0, scale_shape,
                  [part](std::span<uint8_t> o) { part(true, o); });
}

void write_json(const fs::path& p, const nlohmann::ordered_json& j) {
  std::ofstream f(p);
  f << j.dump(2) << "\n";
  DSV4_CHECK(f.good(), "cannot write {}", p.string());
}

}  // namespace

RandomCheckpointStats write_random_checkpoint(const ModelConfig& cfg, uint64_t seed, const fs::path& out,
                                              uint64_t max_shard_bytes) {
  cfg.validate();
  fs::create_directories(out / "inference");
  write_json(out / "config.json", to_hf_config_json(cfg));
  write_json(out / "inference" / "config.json", to_inference_config_json(cfg));
  write_json(out / "generation_config.json", {{"bos_token_id", cfg.bos_token_id},
                                              {"eos_token_id", cfg.eos_token_id},
                                              {"do_sample", true},
                                              {"temperature", 1.0},
                                              {"top_p", 1.0}});

  const auto specs = checkpoint_tensor_specs(cfg);
  const RandomTensors gen(cfg, seed);  // outlives the writer's lazy fills, which run in write()
  ShardedCheckpointWriter writer(max_shard_bytes);
  writer.set_metadata("format", "pt");
  std::set<std::string> scales;  // added with their weights, still to be seen in the spec list
  RandomCheckpointStats stats;
  for (const auto& s : specs) {
    stats.num_tensors++;
    int64_t numel = 1;
    for (int64_t d : s.shape) numel *= d;
    stats.tensor_bytes += static_cast<uint64_t>(numel) * dtype_size(s.dtype);
    if (s.dtype == DType::kF8E8M0) {  // written together with its weight, which precedes it
      DSV4_CHECK(scales.erase(s.name) == 1, "make-tiny: scale {} has no weight before it", s.name);
    } else if (RandomTensors::is_quantized(s)) {
      add_quantized(writer, s, gen);
      scales.insert(RandomTensors::scale_name(s));
    } else {
      writer.add_lazy(s.name, s.dtype, s.shape, [&gen, s](std::span<uint8_t> o) { gen.fill(s, o); });
    }
  }
  DSV4_CHECK(scales.empty(), "make-tiny: {} scale tensors were never listed", scales.size());
  stats.num_shards = writer.write(out).size();
  return stats;
}

}  // namespace dsv4
