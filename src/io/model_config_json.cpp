#include "io/model_config_json.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <functional>
#include <set>
#include <utility>

#include "core/error.h"
#include "io/hf_overrides.h"

namespace dsv4 {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// One ModelConfig field and its names in the two formats ("" where a format lacks it).
struct Field {
  const char* hf;
  const char* inference;
  std::function<void(ModelConfig&, const json&, const std::string&)> set;
  std::function<json(const ModelConfig&)> get;
};

template <typename T>
T as(const json& v, const std::string& where) {
  try {
    if constexpr (std::is_integral_v<T>) {
      DSV4_CHECK(v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<T>(v.get<double>())),
                 "{}: expected an integer, got {}", where, v.dump());
      return v.is_number_integer() ? v.get<T>() : static_cast<T>(v.get<double>());
    } else if constexpr (std::is_floating_point_v<T>) {
      DSV4_CHECK(v.is_number(), "{}: expected a number, got {}", where, v.dump());
      return v.get<T>();
    } else {
      DSV4_CHECK(v.is_string(), "{}: expected a string, got {}", where, v.dump());
      return v.get<T>();
    }
  } catch (const json::exception& e) {
    fail("{}: {}", where, e.what());
  }
}

template <typename T, typename M>
Field field(const char* hf, const char* inf, M ModelConfig::*member) {
  return {hf, inf,
          [member](ModelConfig& c, const json& v, const std::string& where) {
            c.*member = static_cast<M>(as<T>(v, where));
          },
          [member](const ModelConfig& c) { return json(c.*member); }};
}

ScoreFunc parse_score_func(const std::string& s, const std::string& where) {
  if (s == "sqrtsoftplus") return ScoreFunc::kSqrtSoftplus;
  if (s == "softmax") return ScoreFunc::kSoftmax;
  if (s == "sigmoid") return ScoreFunc::kSigmoid;
  fail("{}: unknown scoring function \"{}\" (sqrtsoftplus, softmax or sigmoid)", where, s);
}

const char* score_func_name(ScoreFunc f) {
  switch (f) {
    case ScoreFunc::kSqrtSoftplus:
      return "sqrtsoftplus";
    case ScoreFunc::kSoftmax:
      return "softmax";
    case ScoreFunc::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      field<int64_t>("vocab_size", "vocab_size", &ModelConfig::vocab_size),
      field<int64_t>("hidden_size", "dim", &ModelConfig::dim),
      field<int64_t>("moe_intermediate_size", "moe_inter_dim", &ModelConfig::moe_inter_dim),
      field<int64_t>("num_hidden_layers", "n_layers", &ModelConfig::n_layers),
      field<int64_t>("num_hash_layers", "n_hash_layers", &ModelConfig::n_hash_layers),
      field<int64_t>("num_nextn_predict_layers", "n_mtp_layers", &ModelConfig::n_mtp_layers),
      field<int64_t>("num_attention_heads", "n_heads", &ModelConfig::n_heads),
      field<int64_t>("num_key_value_heads", "", &ModelConfig::n_kv_heads),
      field<int64_t>("n_routed_experts", "n_routed_experts", &ModelConfig::n_routed_experts),
      field<int64_t>("n_shared_experts", "n_shared_experts", &ModelConfig::n_shared_experts),
      field<int64_t>("num_experts_per_tok", "n_activated_experts", &ModelConfig::n_activated_experts),
      {"scoring_func", "score_func",
       [](ModelConfig& c, const json& v, const std::string& w) {
         c.score_func = parse_score_func(as<std::string>(v, w), w);
       },
       [](const ModelConfig& c) { return json(score_func_name(c.score_func)); }},
      field<double>("routed_scaling_factor", "route_scale", &ModelConfig::route_scale),
      field<double>("swiglu_limit", "swiglu_limit", &ModelConfig::swiglu_limit),
      field<int64_t>("q_lora_rank", "q_lora_rank", &ModelConfig::q_lora_rank),
      field<int64_t>("head_dim", "head_dim", &ModelConfig::head_dim),
      field<int64_t>("qk_rope_head_dim", "rope_head_dim", &ModelConfig::rope_head_dim),
      field<int64_t>("o_groups", "o_groups", &ModelConfig::o_groups),
      field<int64_t>("o_lora_rank", "o_lora_rank", &ModelConfig::o_lora_rank),
      field<int64_t>("sliding_window", "window_size", &ModelConfig::window_size),
      field<double>("rope_theta", "rope_theta", &ModelConfig::rope_theta),
      field<double>("compress_rope_theta", "compress_rope_theta", &ModelConfig::compress_rope_theta),
      field<int64_t>("index_n_heads", "index_n_heads", &ModelConfig::index_n_heads),
      field<int64_t>("index_head_dim", "index_head_dim", &ModelConfig::index_head_dim),
      field<int64_t>("index_topk", "index_topk", &ModelConfig::index_topk),
      field<int64_t>("hc_mult", "hc_mult", &ModelConfig::hc_mult),
      field<int64_t>("hc_sinkhorn_iters", "hc_sinkhorn_iters", &ModelConfig::hc_sinkhorn_iters),
      field<double>("hc_eps", "hc_eps", &ModelConfig::hc_eps),
      field<double>("rms_norm_eps", "norm_eps", &ModelConfig::norm_eps),
      field<int64_t>("max_position_embeddings", "", &ModelConfig::max_position_embeddings),
      field<int64_t>("bos_token_id", "", &ModelConfig::bos_token_id),
      field<int64_t>("eos_token_id", "", &ModelConfig::eos_token_id),
      {"tie_word_embeddings", "",
       [](ModelConfig& c, const json& v, const std::string& w) {
         DSV4_CHECK(v.is_boolean(), "{}: expected true or false", w);
         c.tie_word_embeddings = v.get<bool>();
       },
       [](const ModelConfig& c) { return json(c.tie_word_embeddings); }},
      {"norm_topk_prob", "",
       [](ModelConfig& c, const json& v, const std::string& w) {
         DSV4_CHECK(v.is_boolean(), "{}: expected true or false", w);
         c.norm_topk_prob = v.get<bool>();
       },
       [](const ModelConfig& c) { return json(c.norm_topk_prob); }},
      {"compress_ratios", "compress_ratios",
       [](ModelConfig& c, const json& v, const std::string& w) {
         DSV4_CHECK(v.is_array(), "{}: expected an array", w);
         c.compress_ratios.clear();
         for (size_t i = 0; i < v.size(); ++i)
           c.compress_ratios.push_back(static_cast<int>(as<int64_t>(v[i], w + "[" + std::to_string(i) + "]")));
       },
       [](const ModelConfig& c) { return json(c.compress_ratios); }},
  };
  return f;
}

// Keys this engine reads elsewhere or that carry no meaning for inference.
const std::set<std::string>& known_hf_extras() {
  static const std::set<std::string> k = {"architectures",     "attention_bias", "attention_dropout",    "hidden_act",
                                          "initializer_range", "model_type",     "quantization_config",  "rope_scaling",
                                          "topk_method",       "torch_dtype",    "transformers_version", "use_cache",
                                          "auto_map",          "dtype"};
  return k;
}

const std::set<std::string>& known_inference_extras() {
  static const std::set<std::string> k = {
      "original_seq_len", "rope_factor",  "beta_fast",      "beta_slow",   "dtype",
      "scale_fmt",        "expert_dtype", "max_batch_size", "max_seq_len", "scale_dtype"};
  return k;
}

// Keys of later revisions that change the architecture (MODEL.md §13): refused, not ignored.
void refuse_incompatible(const json& j, const std::string& origin) {
  static const char* kPrefixes[] = {"kv_source_", "index_source_", "dspark", "engram", "candidate_block", "vision_"};
  for (const auto& [key, value] : j.items()) {
    for (const char* p : kPrefixes) {
      DSV4_CHECK(
          key.rfind(p, 0) != 0,
          "{}: key \"{}\" belongs to an incompatible DeepSeek revision (V4.1 or a later checkpoint); this engine "
          "implements DeepSeek-V4 as released 2026-04-24",
          origin, key);
    }
  }
}

bool is_inference_format(const json& j) { return j.contains("dim") && !j.contains("hidden_size"); }

WeightFormat parse_format(const std::string& s, const std::string& where) {
  if (s == "fp8") return WeightFormat::kFp8;
  if (s == "fp4") return WeightFormat::kFp4;
  if (s == "bf16" || s == "bfloat16") return WeightFormat::kBf16;
  fail("{}: unknown weight dtype \"{}\" (fp8, fp4 or bf16)", where, s);
}

void parse_quantization(ModelConfig& c, const json& q, const std::string& origin) {
  const std::string w = origin + ": quantization_config";
  DSV4_CHECK(q.is_object(), "{}: expected an object", w);
  // The one quantization this engine implements; an absent key means it.
  static constexpr std::pair<const char*, const char*> kOnly[] = {
      {"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"}, {"activation_scheme", "dynamic"}};
  for (const auto& [key, want] : kOnly) {
    if (!q.contains(key)) continue;
    const auto v = as<std::string>(q[key], w + "." + key);
    DSV4_CHECK(v == want, "{}.{}: \"{}\" is not supported ({})", w, key, v, want);
  }
  if (q.contains("weight_block_size")) {
    const auto& b = q["weight_block_size"];
    DSV4_CHECK(b.is_array() && b.size() == 2, "{}.weight_block_size: expected [rows, cols]", w);
    c.weight_block_rows = static_cast<int>(as<int64_t>(b[0], w + ".weight_block_size[0]"));
    c.weight_block_cols = static_cast<int>(as<int64_t>(b[1], w + ".weight_block_size[1]"));
  }
  c.weight_format = WeightFormat::kFp8;
}

void parse_rope_scaling(ModelConfig& c, const json& r, const std::string& origin) {
  const std::string w = origin + ": rope_scaling";
  DSV4_CHECK(r.is_object(), "{}: expected an object", w);
  const std::string type = r.contains("type")        ? as<std::string>(r["type"], w + ".type")
                           : r.contains("rope_type") ? as<std::string>(r["rope_type"], w + ".rope_type")
                                                     : "yarn";
  DSV4_CHECK(type == "yarn", "{}.type: \"{}\" is not supported (yarn)", w, type);
  if (r.contains("factor")) c.rope_factor = as<double>(r["factor"], w + ".factor");
  if (r.contains("original_max_position_embeddings"))
    c.original_seq_len = as<int64_t>(r["original_max_position_embeddings"], w + ".original_max_position_embeddings");
  if (r.contains("beta_fast")) c.beta_fast = as<double>(r["beta_fast"], w + ".beta_fast");
  if (r.contains("beta_slow")) c.beta_slow = as<double>(r["beta_slow"], w + ".beta_slow");
}

void parse_inference_extras(ModelConfig& c, const json& j, const std::string& origin) {
  auto num = [&](const char* k, auto& dst) {
    if (j.contains(k)) dst = as<std::remove_reference_t<decltype(dst)>>(j[k], origin + ": " + k);
  };
  num("original_seq_len", c.original_seq_len);
  num("rope_factor", c.rope_factor);
  num("beta_fast", c.beta_fast);
  num("beta_slow", c.beta_slow);
  if (j.contains("dtype"))
    c.weight_format = parse_format(as<std::string>(j["dtype"], origin + ": dtype"), origin + ": dtype");
  if (j.contains("expert_dtype"))
    c.expert_format =
        parse_format(as<std::string>(j["expert_dtype"], origin + ": expert_dtype"), origin + ": expert_dtype");
  if (j.contains("scale_fmt")) {
    const auto f = as<std::string>(j["scale_fmt"], origin + ": scale_fmt");
    DSV4_CHECK(f == "ue8m0", "{}: scale_fmt \"{}\" is not supported (ue8m0)", origin, f);
  }
}

json read_json_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  DSV4_CHECK(in.good(), "cannot open {}", p.string());
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  DSV4_CHECK(!j.is_discarded(), "{}: not valid JSON", p.string());
  DSV4_CHECK(j.is_object(), "{}: expected a JSON object at the top level", p.string());
  return j;
}

// Every field both files give must agree (the HF file is what we load; the other is the reference's).
void cross_check(const ModelConfig& hf, const json& inf, const std::string& origin) {
  const ModelConfig ref = parse_model_config(inf, origin).config;
  for (const auto& f : fields()) {
    if (!*f.inference || !inf.contains(f.inference)) continue;
    DSV4_CHECK(f.get(hf) == f.get(ref), "{}: \"{}\" = {} disagrees with config.json \"{}\" = {}", origin, f.inference,
               f.get(ref).dump(), f.hf, f.get(hf).dump());
  }
  auto same = [&](const char* key, double a, double b) {
    DSV4_CHECK(!inf.contains(key) || a == b, "{}: \"{}\" = {} disagrees with config.json ({})", origin, key, b, a);
  };
  same("original_seq_len", static_cast<double>(hf.original_seq_len), static_cast<double>(ref.original_seq_len));
  same("rope_factor", hf.rope_factor, ref.rope_factor);
  same("beta_fast", hf.beta_fast, ref.beta_fast);
  same("beta_slow", hf.beta_slow, ref.beta_slow);
}

}  // namespace

ConfigLoadResult parse_model_config(const json& j, const std::string& origin) {
  DSV4_CHECK(j.is_object(), "{}: expected a JSON object", origin);
  refuse_incompatible(j, origin);
  ConfigLoadResult r;
  const bool inference = is_inference_format(j);
  std::set<std::string> used;
  for (const auto& f : fields()) {
    const char* key = inference ? f.inference : f.hf;
    if (!*key || !j.contains(key)) continue;
    f.set(r.config, j[key], origin + ": " + key);
    used.insert(key);
  }
  if (inference) {
    parse_inference_extras(r.config, j, origin);
    if (j.contains("expert_dtype")) r.declared_expert_format = r.config.expert_format;
    // The reference's ModelArgs defaults for keys its JSON may omit.
    if (!j.contains("n_mtp_layers") && !r.config.compress_ratios.empty())
      r.config.n_mtp_layers = static_cast<int>(r.config.compress_ratios.size()) - r.config.n_layers;
  } else {
    if (j.contains("model_type")) {
      const auto t = as<std::string>(j["model_type"], origin + ": model_type");
      DSV4_CHECK(t == "deepseek_v4", "{}: model_type \"{}\" is not supported (deepseek_v4)", origin, t);
    }
    if (j.contains("quantization_config"))
      parse_quantization(r.config, j["quantization_config"], origin);
    else
      r.config.weight_format = WeightFormat::kBf16;
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
      parse_rope_scaling(r.config, j["rope_scaling"], origin);
    if (j.contains("hidden_act")) {
      const auto a = as<std::string>(j["hidden_act"], origin + ": hidden_act");
      DSV4_CHECK(a == "silu", "{}: hidden_act \"{}\" is not supported (silu)", origin, a);
    }
  }
  const auto& extras = inference ? known_inference_extras() : known_hf_extras();
  for (const auto& [key, value] : j.items()) {
    if (used.count(key) || extras.count(key)) continue;
    r.warnings.push_back(fmt::format("{}: unknown key \"{}\" ignored", origin, key));
    spdlog::warn("{}", r.warnings.back());
  }
  DSV4_CHECK(!r.config.compress_ratios.empty(), "{}: compress_ratios is missing", origin);
  DSV4_CHECK(!r.config.tie_word_embeddings, "{}: tie_word_embeddings must be false for DeepSeek-V4", origin);
  try {
    r.config.validate();
  } catch (const Error& e) {
    fail("{}: {}", origin, e.what());
  }
  return r;
}

ConfigLoadResult load_model_config_ex(const fs::path& dir_or_file, const json& hf_overrides) {
  DSV4_CHECK(fs::exists(dir_or_file), "model path {} does not exist", dir_or_file.string());
  const fs::path file = fs::is_directory(dir_or_file) ? dir_or_file / "config.json" : dir_or_file;
  DSV4_CHECK(fs::exists(file), "{} has no config.json", dir_or_file.string());
  const json raw = read_json_file(file);
  const bool overridden = !hf_overrides.empty();
  ConfigLoadResult r = parse_model_config(overridden ? apply_hf_overrides(raw, hf_overrides) : raw,
                                          overridden ? file.string() + " with --hf-overrides" : file.string());
  const fs::path inf = file.parent_path() / "inference" / "config.json";
  if (file.filename() == "config.json" && fs::exists(inf) && !is_inference_format(raw)) {
    const json ij = read_json_file(inf);
    if (overridden) {
      // The overrides change config.json only: the reference's file would disagree; its expert dtype holds.
      if (ij.contains("expert_dtype")) {
        r.config.expert_format =
            parse_format(as<std::string>(ij["expert_dtype"], inf.string() + ": expert_dtype"), inf.string());
        r.declared_expert_format = r.config.expert_format;
      }
      return r;
    }
    cross_check(r.config, ij, inf.string());
    parse_inference_extras(r.config, ij, inf.string());
    if (ij.contains("expert_dtype")) r.declared_expert_format = r.config.expert_format;
  }
  return r;
}

ModelConfig load_model_config(const fs::path& dir_or_file) { return load_model_config_ex(dir_or_file).config; }

nlohmann::ordered_json to_hf_config_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["hc_eps"] = c.hc_eps;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.dim;
  j["index_head_dim"] = c.index_head_dim;
  j["index_n_heads"] = c.index_n_heads;
  j["index_topk"] = c.index_topk;
  j["initializer_range"] = 0.02;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["model_type"] = "deepseek_v4";
  j["moe_intermediate_size"] = c.moe_inter_dim;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["num_attention_heads"] = c.n_heads;
  j["num_experts_per_tok"] = c.n_activated_experts;
  j["num_hidden_layers"] = c.n_layers;
  j["num_hash_layers"] = c.n_hash_layers;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["num_nextn_predict_layers"] = c.n_mtp_layers;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["q_lora_rank"] = c.q_lora_rank;
  j["qk_rope_head_dim"] = c.rope_head_dim;
  j["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {c.weight_block_rows, c.weight_block_cols}}};
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_scaling"] = {{"beta_fast", c.beta_fast},
                       {"beta_slow", c.beta_slow},
                       {"factor", c.rope_factor},
                       {"original_max_position_embeddings", c.original_seq_len},
                       {"type", "yarn"}};
  j["rope_theta"] = c.rope_theta;
  j["routed_scaling_factor"] = c.route_scale;
  j["scoring_func"] = score_func_name(c.score_func);
  j["sliding_window"] = c.window_size;
  j["swiglu_limit"] = c.swiglu_limit;
  j["tie_word_embeddings"] = false;
  j["topk_method"] = "noaux_tc";
  j["torch_dtype"] = "bfloat16";
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  j["compress_rope_theta"] = c.compress_rope_theta;
  j["compress_ratios"] = c.compress_ratios;
  return j;
}

nlohmann::ordered_json to_inference_config_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  for (const auto& f : fields()) {
    if (*f.inference) j[f.inference] = f.get(c);
  }
  j["original_seq_len"] = c.original_seq_len;
  j["rope_factor"] = c.rope_factor;
  j["beta_fast"] = c.beta_fast;
  j["beta_slow"] = c.beta_slow;
  j["dtype"] = "fp8";
  j["scale_fmt"] = "ue8m0";
  j["expert_dtype"] = c.expert_format == WeightFormat::kFp4 ? "fp4" : "fp8";
  return j;
}

}  // namespace dsv4
