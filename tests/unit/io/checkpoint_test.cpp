#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "io/safetensors_writer.h"
#include "testing/error_of.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

using ::dsv4::testing::error_of;

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& p, std::string_view text) { std::ofstream(p) << text; }

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Writes a file holding U8 tensors `names`, each [4] of random bytes.
void write_u8_file(const fs::path& p, std::mt19937& rng, std::initializer_list<const char*> names) {
  SafetensorsWriter w;
  for (const char* n : names) w.add(n, DType::kU8, {4}, random_bytes(rng, 4));
  w.write(p);
}

std::string index_json(const nlohmann::json& weight_map) {
  return nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump();
}

TEST(Checkpoint, OpensGoldenFolderThroughItsIndex) {
  const fs::path dir = testing::golden_dir("tiny-a");
  auto c = Checkpoint::open(dir);
  EXPECT_EQ(c.num_shards(), 1u);
  EXPECT_EQ(c.num_tensors(), 427u);  // expected*.safetensors beside the index are not shards
  EXPECT_FALSE(c.contains("input_ids"));
  EXPECT_EQ(c.total_bytes(), 7532718u);  // the index's total_size
  const auto names = c.names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.front(), "embed.weight");
  EXPECT_EQ(names.back(), "norm.weight");

  TensorRef w1 = c.tensor("layers.0.ffn.experts.0.w1.weight");
  EXPECT_EQ(w1.info->dtype, DType::kI8);
  EXPECT_EQ(w1.info->shape, (std::vector<int64_t>{128, 128}));  // [out, in/2]: packed FP4 pairs
  EXPECT_EQ(w1.data.size(), 128u * 128u);
  EXPECT_EQ(w1.file, &c.shard(0));
  const TensorInfo* scale = c.find("layers.0.ffn.experts.0.w1.scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(c.bytes(*scale).data(), c.shard(0).bytes(*scale).data());
  EXPECT_EQ(c.find("nope"), nullptr);
  EXPECT_EQ(error_of([&] { c.tensor("nope"); }), dir.string() + ": no tensor 'nope'");

  // The index file and the single shard open the same tensors.
  EXPECT_EQ(Checkpoint::open(dir / kSafetensorsIndexName).names(), names);
  EXPECT_EQ(Checkpoint::open(dir / "model-00001-of-00001.safetensors").names(), names);
}

TEST(Checkpoint, RewritingGoldenAsOneShardIsByteIdentical) {
  const fs::path src = testing::golden_dir("tiny-b");
  auto c = Checkpoint::open(src);
  ShardedCheckpointWriter w(uint64_t{1} << 40);
  for (const std::string& n : c.names()) {
    TensorRef t = c.tensor(n);
    w.add(n, t.info->dtype, t.info->shape, std::vector<uint8_t>(t.data.begin(), t.data.end()));
  }
  w.set_metadata("format", "pt");
  const fs::path out = testing::temp_dir("ckpt-golden");
  EXPECT_EQ(w.write(out), (std::vector<std::string>{"model-00001-of-00001.safetensors"}));
  EXPECT_TRUE(read_bytes(out / "model-00001-of-00001.safetensors") ==
              read_bytes(src / "model-00001-of-00001.safetensors"));
  EXPECT_TRUE(read_bytes(out / kSafetensorsIndexName) == read_bytes(src / kSafetensorsIndexName));
}

TEST(Checkpoint, ShardedWriteReadsBackBitExact) {
  std::mt19937 rng(77);
  struct T {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<T> ts;
  for (int i = 0; i < 30; ++i) {
    const DType dt = i % 3 == 0 ? DType::kBF16 : (i % 3 == 1 ? DType::kF8E4M3 : DType::kF32);
    std::vector<int64_t> shape{1 + static_cast<int64_t>(rng() % 9), 1 + static_cast<int64_t>(rng() % 40)};
    ts.push_back({fmt::format("t{:02d}", i), dt, shape, random_bytes(rng, shape[0] * shape[1] * dtype_size(dt))});
  }
  ts.push_back({"huge", DType::kU8, {3000}, random_bytes(rng, 3000)});  // larger than a shard: alone
  const uint64_t max_shard = 1024;
  ShardedCheckpointWriter w(max_shard);
  uint64_t total = 0;
  for (const T& t : ts) {
    total += t.bytes.size();
    if (t.name.back() % 2) {
      w.add(t.name, t.dtype, t.shape, t.bytes);
    } else {
      w.add_lazy(t.name, t.dtype, t.shape,
                 [&t](std::span<uint8_t> out) { std::copy(t.bytes.begin(), t.bytes.end(), out.begin()); });
    }
  }
  w.set_metadata("format", "pt");
  const fs::path dir = testing::temp_dir("ckpt-sharded");
  const auto files = w.write(dir);
  ASSERT_GT(files.size(), 3u);
  EXPECT_EQ(files.front(), fmt::format("model-00001-of-{:05d}.safetensors", files.size()));

  auto c = Checkpoint::open(dir);
  EXPECT_EQ(c.num_shards(), files.size());
  EXPECT_EQ(c.num_tensors(), ts.size());
  EXPECT_EQ(c.total_bytes(), total);
  for (const T& t : ts) {
    TensorRef r = c.tensor(t.name);
    EXPECT_EQ(r.info->dtype, t.dtype);
    EXPECT_EQ(r.info->shape, t.shape);
    EXPECT_TRUE(std::equal(r.data.begin(), r.data.end(), t.bytes.begin(), t.bytes.end())) << t.name;
    EXPECT_EQ(r.file->metadata().at("format"), "pt");
  }
  for (size_t s = 0; s < c.num_shards(); ++s) {
    const auto& shard = c.shard(s);
    const uint64_t data = shard.file_size() - shard.data_start();
    EXPECT_TRUE(data <= max_shard || shard.tensors().size() == 1) << shard.path();
  }
  const auto index = nlohmann::json::parse(read_bytes(dir / kSafetensorsIndexName));
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_EQ(index["weight_map"].size(), ts.size());
  EXPECT_EQ(index["weight_map"]["huge"], c.shard_of(*c.find("huge")).path().filename().string());
}

TEST(Checkpoint, FolderWithoutIndexOpensEveryShard) {
  std::mt19937 rng(5);
  const fs::path dir = testing::temp_dir("ckpt-noindex");
  write_u8_file(dir / "b.safetensors", rng, {"x", "y"});
  write_u8_file(dir / "a.safetensors", rng, {"z"});
  write_text(dir / "notes.txt", "not a shard");
  auto c = Checkpoint::open(dir);
  EXPECT_EQ(c.num_shards(), 2u);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(c.shard_of(*c.find("z")).path(), dir / "a.safetensors");
  EXPECT_EQ(c.tensor("y").data.size(), 4u);

  write_u8_file(dir / "c.safetensors", rng, {"y"});
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }),
            fmt::format("{}: tensor 'y' is in both {} and {}", dir.string(), (dir / "b.safetensors").string(),
                        (dir / "c.safetensors").string()));
}

TEST(Checkpoint, MoveKeepsTensorsAndForeignTensorsAreRejected) {
  std::mt19937 rng(9);
  const fs::path dir = testing::temp_dir("ckpt-move");
  write_u8_file(dir / "a.safetensors", rng, {"p", "q"});
  auto a = Checkpoint::open(dir / "a.safetensors");
  auto b = Checkpoint::open(dir / "a.safetensors");
  const auto before = a.tensor("q").data;
  Checkpoint moved = std::move(a);
  EXPECT_EQ(moved.tensor("q").data.data(), before.data());
  EXPECT_EQ(error_of([&] { moved.bytes(*b.find("q")); }),
            (dir / "a.safetensors").string() + ": tensor 'q' is not from this checkpoint");
}

TEST(Checkpoint, IndexErrors) {
  std::mt19937 rng(3);
  const fs::path dir = testing::temp_dir("ckpt-index");
  const fs::path index = dir / kSafetensorsIndexName;
  write_u8_file(dir / "s1.safetensors", rng, {"a", "b"});
  write_u8_file(dir / "s2.safetensors", rng, {"c"});

  write_text(index, index_json({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}}));
  EXPECT_EQ(Checkpoint::open(dir).num_tensors(), 3u);

  write_text(index, index_json({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s3.safetensors"}}));
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }),
            fmt::format("{}: shard 's3.safetensors' does not exist in {}", index.string(), dir.string()));

  write_text(index, index_json({{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"c", "s2.safetensors"}}));
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }),
            fmt::format("{}: tensor 'b' is mapped to 's2.safetensors', which does not hold it", index.string()));

  write_text(index, index_json({{"a", "s1.safetensors"}, {"c", "s2.safetensors"}}));
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }), fmt::format("{}: tensor 'b' is not listed for this shard in {}",
                                                                  (dir / "s1.safetensors").string(), index.string()));

  write_text(index, index_json({{"a", "../s1.safetensors"}}));
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }),
            index.string() + ": weight_map 'a' names '../s1.safetensors', which is not a file name in the folder");
  write_text(index, index_json({{"a", 1}}));
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }), index.string() + ": weight_map 'a' must name a file, got 1");
  write_text(index, index_json(nlohmann::json::object()));
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }), index.string() + ": weight_map is empty");
  write_text(index, R"({"metadata":{}})");
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }),
            index.string() + ": expected an object with a \"weight_map\" object");
  write_text(index, "{oops");
  EXPECT_TRUE(error_of([&] { Checkpoint::open(dir); }).starts_with(index.string() + ": not valid JSON: "));
}

TEST(Checkpoint, PathErrors) {
  const fs::path dir = testing::temp_dir("ckpt-path");
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir); }),
            dir.string() + ": no model.safetensors.index.json and no .safetensors files");
  EXPECT_EQ(error_of([&] { Checkpoint::open(dir / "nothing"); }),
            (dir / "nothing").string() + ": no such file or folder");
  EXPECT_EQ(error_of([&] { ShardedCheckpointWriter w(0); }),
            "sharded checkpoint writer: max shard size must be positive");
  ShardedCheckpointWriter empty(100);
  EXPECT_EQ(error_of([&] { empty.write(dir / "out"); }), (dir / "out").string() + ": no tensors to write");
}

}  // namespace
}  // namespace dsv4
