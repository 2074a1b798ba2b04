#include "tools/load_flags.h"

#include "io/hf_overrides.h"

namespace dsv4::tools {

LoadOptions LoadFlags::options() const {
  LoadOptions o;
  o.format = parse_load_format(load_format);
  o.hf_overrides = parse_hf_overrides(hf_overrides);
  o.seed = seed.value_or(0);
  return o;
}

void add_load_flags(CLI::App& cmd, LoadFlags& f, bool seed) {
  cmd.add_option("--load-format", f.load_format, "auto (the checkpoint) or dummy (random weights from --seed)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "dummy"}))
      ->group(kLoadFlagGroup);
  cmd.add_option("--hf-overrides", f.hf_overrides,
                 "JSON object merged over config.json, e.g. '{\"num_hidden_layers\": 2, \"n_routed_experts\": 8}'")
      ->group(kLoadFlagGroup);
  if (seed && !cmd.get_option_no_throw("--seed"))
    cmd.add_option("--seed", f.seed, "seed of --load-format dummy's weights (default 0)")->group(kLoadFlagGroup);
}

}  // namespace dsv4::tools
