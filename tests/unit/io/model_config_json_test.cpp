// config.json -> ModelConfig: the real V4-Flash config, the golden folders, and every refusal.
#include "io/model_config_json.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

json read(const fs::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

void write(const fs::path& p, const json& j) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << j.dump(2);
}

std::string error_of(const json& j) {
  try {
    parse_model_config(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class ModelConfigJson : public ::testing::Test {
 protected:
  void SetUp() override { flash_ = read(testing::data_dir() / "configs/deepseek-v4-flash/config.json"); }
  json flash_;
};

TEST_F(ModelConfigJson, ReadsTheRealFlashConfig) {
  const auto r = parse_model_config(flash_, "flash");
  const ModelConfig& c = r.config;
  EXPECT_TRUE(r.warnings.empty());
  const ModelConfig ref = v4_flash_config();
  EXPECT_EQ(c.compress_ratios, ref.compress_ratios);
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.n_layers, 43);
  EXPECT_EQ(c.n_mtp_layers, 1);
  EXPECT_EQ(c.n_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_activated_experts, 6);
  EXPECT_EQ(c.n_hash_layers, 3);
  EXPECT_EQ(c.compress_rope_theta, 160000);
  EXPECT_EQ(c.rope_factor, 16);
  EXPECT_EQ(c.original_seq_len, 65536);
  EXPECT_EQ(c.route_scale, 1.5);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.weight_format, WeightFormat::kFp8);
  EXPECT_EQ(c.count_layers_with_ratio(0), 2);
  EXPECT_EQ(c.count_layers_with_ratio(4), 21);
  EXPECT_EQ(c.count_layers_with_ratio(128), 20);
}

TEST_F(ModelConfigJson, GoldenFolderCrossChecksInferenceConfig) {
  const auto r = load_model_config_ex(testing::golden_dir("tiny-a"));
  EXPECT_EQ(r.config.dim, 256);
  EXPECT_EQ(r.config.compress_ratios, (std::vector<int>{0, 4, 128, 4, 0}));
  EXPECT_EQ(r.config.index_topk, 8);
  EXPECT_EQ(r.declared_expert_format, WeightFormat::kFp4);
  EXPECT_EQ(load_model_config(testing::golden_dir("tiny-b")).index_topk, 16);
}

TEST_F(ModelConfigJson, InferenceFormatParsesToTheSameConfig) {
  const auto hf = load_model_config(testing::golden_dir("tiny-a"));
  const auto inf = load_model_config(testing::golden_dir("tiny-a") / "inference/config.json");
  EXPECT_EQ(to_hf_config_json(hf), to_hf_config_json(inf));
}

TEST_F(ModelConfigJson, WrittenConfigsReadBack) {
  const auto c = parse_model_config(flash_, "flash").config;
  EXPECT_EQ(to_hf_config_json(parse_model_config(json::parse(to_hf_config_json(c).dump()), "x").config),
            to_hf_config_json(c));
  EXPECT_EQ(to_hf_config_json(parse_model_config(json::parse(to_inference_config_json(c).dump()), "x").config),
            to_hf_config_json(c));
}

TEST_F(ModelConfigJson, UnknownKeysAreWarnedAbout) {
  flash_["my_new_knob"] = 3;
  const auto r = parse_model_config(flash_, "cfg.json");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "cfg.json: unknown key \"my_new_knob\" ignored");
}

TEST_F(ModelConfigJson, IncompatibleRevisionsAreRefusedNamingTheKey) {
  for (const char* key : {"kv_source_layer_ids", "index_source_layer_ids", "dspark_num_layers"}) {
    json j = flash_;
    j[key] = json::array({1, 2});
    EXPECT_NE(error_of(j).find(std::string("key \"") + key + "\" belongs to an incompatible"), std::string::npos)
        << error_of(j);
  }
}

TEST_F(ModelConfigJson, InconsistentFieldsGiveClearErrors) {
  json j = flash_;
  j["compress_ratios"].erase(j["compress_ratios"].end() - 1);
  EXPECT_EQ(
      error_of(j),
      "cfg.json: config: compress_ratios has 43 entries, expected num_hidden_layers + num_nextn_predict_layers = 44");
  j = flash_;
  j["qk_rope_head_dim"] = 96;
  EXPECT_EQ(error_of(j), "cfg.json: config: head_dim - qk_rope_head_dim = 416 must be a multiple of 64");
  j = flash_;
  j["compress_ratios"][5] = 2;
  EXPECT_EQ(error_of(j), "cfg.json: config: compress_ratios[5] = 2 (allowed: 0, 4, 128)");
  j = flash_;
  j["hidden_size"] = "big";
  EXPECT_EQ(error_of(j), "cfg.json: hidden_size: expected an integer, got \"big\"");
  j = flash_;
  j["hidden_size"] = 4000;
  EXPECT_EQ(error_of(j), "cfg.json: config: hidden_size (4000) must be a multiple of 128");
  j = flash_;
  j["quantization_config"]["scale_fmt"] = "fp32";
  EXPECT_EQ(error_of(j), "cfg.json: quantization_config.scale_fmt: \"fp32\" is not supported (ue8m0)");
  j = flash_;
  j["n_shared_experts"] = 2;
  EXPECT_EQ(error_of(j), "cfg.json: config: n_shared_experts must be 1, got 2");
  EXPECT_NE(error_of(json::array()).find("expected a JSON object"), std::string::npos);
}

TEST_F(ModelConfigJson, DisagreeingInferenceConfigIsRefused) {
  const fs::path dir = testing::temp_dir("cfg");
  write(dir / "config.json", read(testing::golden_dir("tiny-a") / "config.json"));
  json inf = read(testing::golden_dir("tiny-a") / "inference/config.json");
  inf["index_topk"] = 9;
  write(dir / "inference/config.json", inf);
  try {
    load_model_config(dir);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"index_topk\" = 9 disagrees with config.json \"index_topk\" = 8"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ModelConfigJson, MissingOrBrokenFilesAreNamed) {
  const fs::path dir = testing::temp_dir("cfg-missing");
  EXPECT_THROW(load_model_config(dir), Error);
  std::ofstream(dir / "config.json") << "{ not json";
  try {
    load_model_config(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "config.json").string() + ": not valid JSON");
  }
}

}  // namespace
}  // namespace dsv4
