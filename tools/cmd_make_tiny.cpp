// dsv4 make-tiny --preset NAME --out DIR [--seed N]: a random checkpoint in the official format.
#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "core/error.h"
#include "model/model_loader.h"
#include "model_tools/presets.h"
#include "model_tools/random_checkpoint.h"
#include "tools/command.h"

namespace dsv4::tools {
namespace {

struct Args {
  std::string preset = "tiny";
  std::string out;
  int64_t seed = -1;
  uint64_t shard_bytes = uint64_t{4} << 30;
  bool no_verify = false;
  int layers = 0;
};

// --layers N keeps the first N main layers of the preset's schedule (and its MTP blocks).
ModelConfig with_layers(ModelConfig c, int layers) {
  if (layers <= 0) return c;
  DSV4_CHECK(layers <= c.n_layers, "--layers {} exceeds the preset's {} layers", layers, c.n_layers);
  std::vector<int> ratios(c.compress_ratios.begin(), c.compress_ratios.begin() + layers);
  ratios.insert(ratios.end(), c.compress_ratios.begin() + c.n_layers, c.compress_ratios.end());
  c.compress_ratios = ratios;
  c.n_layers = layers;
  c.n_hash_layers = std::min(c.n_hash_layers, layers);
  return c;
}

void run(const Args& a) {
  const Preset& p = find_preset(a.preset);
  const uint64_t seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : p.default_seed;
  spdlog::info("make-tiny: preset {} ({}), seed {}, writing {}", p.name, p.description, seed, a.out);
  const auto t0 = std::chrono::steady_clock::now();
  const auto stats = write_random_checkpoint(with_layers(p.config, a.layers), seed, a.out, a.shard_bytes);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.no_verify) load_model(a.out);  // binds every tensor: the folder loads back as a model
  fmt::print("{}: {} tensors, {} bytes ({:.2f} GiB) in {} shard(s), {:.1f} s\n", a.out, stats.num_tensors,
             stats.tensor_bytes, static_cast<double>(stats.tensor_bytes) / (1 << 30), stats.num_shards, secs);
}

void setup(CLI::App& cmd) {
  static Args a;
  cmd.add_option("--preset", a.preset, "tiny | serve | flash-attn")->capture_default_str();
  cmd.add_option("--out", a.out, "output folder")->required();
  cmd.add_option("--seed", a.seed, "random seed (default: the preset's fixed seed)");
  cmd.add_option("--max-shard-bytes", a.shard_bytes, "largest shard size")->capture_default_str();
  cmd.add_option("--layers", a.layers, "keep only the first N main layers of the preset");
  cmd.add_flag("--no-verify", a.no_verify, "skip loading the result back");
  cmd.callback([] { run(a); });
}

}  // namespace

DSV4_COMMAND("make-tiny", "write a random checkpoint in the official DeepSeek-V4 format", setup);

}  // namespace dsv4::tools
