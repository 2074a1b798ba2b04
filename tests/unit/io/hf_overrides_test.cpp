// --hf-overrides: merged over config.json before it is parsed (nested objects key by key), fewer layers
// cut compress_ratios consistently, and what is not an object or has the wrong type is refused by name.
#include "io/hf_overrides.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "io/model_config_json.h"
#include "testing/error_of.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {

using nlohmann::json;

std::filesystem::path flash() { return testing::data_dir() / "configs" / "deepseek-v4-flash"; }

json flash_json() {
  std::ifstream in(flash() / "config.json");
  return json::parse(in);
}

TEST(HfOverrides, MergeReplacesValuesAndMergesNestedObjects) {
  const json base = flash_json();
  const json j = apply_hf_overrides(base, parse_hf_overrides(R"({"n_routed_experts": 8, "rope_scaling": {"factor": 4},
                                                                  "max_position_embeddings": 4096})"));
  EXPECT_EQ(j["n_routed_experts"], 8);
  EXPECT_EQ(j["rope_scaling"]["factor"], 4);
  EXPECT_EQ(j["rope_scaling"]["beta_fast"], base["rope_scaling"]["beta_fast"]);  // kept beside the override
  EXPECT_EQ(j["compress_ratios"], base["compress_ratios"]);                      // same layers: untouched
  EXPECT_EQ(parse_hf_overrides(""), json::object());
}

TEST(HfOverrides, FewerLayersKeepTheFirstMainLayersAndTheMtpEntries) {
  const ModelConfig c =
      load_model_config_ex(flash(), parse_hf_overrides(R"({"num_hidden_layers": 2, "n_routed_experts": 8})")).config;
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.n_hash_layers, 2);  // at most the layers kept
  EXPECT_EQ(c.compress_ratios, (std::vector<int>{0, 0, 0}));
  const ModelConfig five = load_model_config_ex(flash(), json{{"num_hidden_layers", 5}}).config;
  EXPECT_EQ(five.compress_ratios, (std::vector<int>{0, 0, 4, 128, 4, 0}));
  EXPECT_EQ(five.n_hash_layers, 3);
  const ModelConfig no_mtp = load_model_config_ex(flash(), json{{"num_nextn_predict_layers", 0}}).config;
  EXPECT_EQ(no_mtp.compress_ratios.size(), 43u);
  // Ratios given with the layers are taken as they are.
  const ModelConfig own =
      load_model_config_ex(flash(),
                           json{{"num_hidden_layers", 2}, {"num_hash_layers", 1}, {"compress_ratios", {4, 128, 0}}})
          .config;
  EXPECT_EQ(own.compress_ratios, (std::vector<int>{4, 128, 0}));
  EXPECT_EQ(own.n_hash_layers, 1);
}

TEST(HfOverrides, WhatIsNotAnObjectOrHasTheWrongTypeIsRefusedByName) {
  EXPECT_NE(testing::error_of([] { parse_hf_overrides("{\"num_hidden_layers\": 2"); }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { parse_hf_overrides("[2]"); }).find("expected a JSON object"), std::string::npos);
  const json base = flash_json();
  for (const char* bad : {R"({"num_hidden_layers": "two"})", R"({"num_hidden_layers": 2.5})",
                          R"({"rope_scaling": {"factor": "x"}})", R"({"compress_ratios": 4})"}) {
    const std::string e = testing::error_of([&] { apply_hf_overrides(base, parse_hf_overrides(bad)); });
    const std::string key = json::parse(bad).begin().key();
    EXPECT_NE(e.find("\"" + key), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NE(testing::error_of([&] {
              apply_hf_overrides(base, json{{"num_hidden_layers", 44}});
            }).find("[1, 43]"),
            std::string::npos);
  // What the parser refuses names the config with the overrides.
  EXPECT_NE(testing::error_of([] {
              load_model_config_ex(flash(), json{{"n_routed_experts", 2}});
            }).find("with --hf-overrides"),
            std::string::npos);
}

}  // namespace
}  // namespace dsv4
