#include "io/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path.string());
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

// The index's weight_map as name -> shard file name (a plain file name inside the folder).
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  const std::string file = index.string();
  json root = read_json_file(index);
  if (!root.is_object() || !root.contains("weight_map") || !root["weight_map"].is_object())
    fail("{}: expected an object with a \"weight_map\" object", file);
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : root["weight_map"].items()) {
    if (!shard.is_string()) fail("{}: weight_map '{}' must name a file, got {}", file, name, shard.dump());
    const std::string s = shard.get<std::string>();
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos)
      fail("{}: weight_map '{}' names '{}', which is not a file name in the folder", file, name, s);
    map.emplace(name, s);
  }
  if (map.empty()) fail("{}: weight_map is empty", file);
  return map;
}

std::vector<SafetensorsFile> open_indexed(const fs::path& dir) {
  const fs::path index = dir / kSafetensorsIndexName;
  const auto map = read_weight_map(index);
  std::map<std::string, size_t> shard_ids;  // file name -> position in `shards`
  for (const auto& [name, shard] : map) shard_ids.emplace(shard, 0);
  std::vector<SafetensorsFile> shards;
  for (auto& [shard, id] : shard_ids) {
    if (!fs::exists(dir / shard)) fail("{}: shard '{}' does not exist in {}", index.string(), shard, dir.string());
    id = shards.size();
    shards.push_back(SafetensorsFile::open(dir / shard));
  }
  for (const auto& [name, shard] : map) {
    if (!shards[shard_ids.at(shard)].find(name))
      fail("{}: tensor '{}' is mapped to '{}', which does not hold it", index.string(), name, shard);
  }
  for (const auto& [shard, id] : shard_ids) {
    for (const TensorInfo& t : shards[id].tensors()) {
      auto it = map.find(t.name);
      if (it == map.end() || it->second != shard)
        fail("{}: tensor '{}' is not listed for this shard in {}", shards[id].path().string(), t.name, index.string());
    }
  }
  return shards;
}

std::vector<SafetensorsFile> open_folder(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  if (files.empty()) fail("{}: no {} and no .safetensors files", dir.string(), kSafetensorsIndexName);
  std::sort(files.begin(), files.end());
  std::vector<SafetensorsFile> shards;
  for (const auto& f : files) shards.push_back(SafetensorsFile::open(f));
  return shards;
}

}  // namespace

Checkpoint Checkpoint::open(const std::filesystem::path& dir_or_file) {
  Checkpoint c;
  c.path_ = dir_or_file;
  std::error_code ec;
  if (fs::is_directory(dir_or_file, ec)) {
    c.shards_ = fs::exists(dir_or_file / kSafetensorsIndexName) ? open_indexed(dir_or_file) : open_folder(dir_or_file);
  } else if (dir_or_file.filename() == kSafetensorsIndexName) {
    c.shards_ = open_indexed(dir_or_file.parent_path());
  } else if (fs::exists(dir_or_file, ec)) {
    c.shards_.push_back(SafetensorsFile::open(dir_or_file));
  } else {
    fail("{}: no such file or folder", dir_or_file.string());
  }
  c.index_tensors();
  return c;
}

void Checkpoint::index_tensors() {
  for (size_t s = 0; s < shards_.size(); ++s) {
    for (const TensorInfo& t : shards_[s].tensors()) entries_.push_back({t.name, &t, static_cast<uint32_t>(s)});
  }
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  auto dup = std::adjacent_find(entries_.begin(), entries_.end(),
                                [](const Entry& a, const Entry& b) { return a.name == b.name; });
  if (dup != entries_.end())
    fail("{}: tensor '{}' is in both {} and {}", path_.string(), dup->name, shards_[dup->shard].path().string(),
         shards_[(dup + 1)->shard].path().string());
}

const Checkpoint::Entry* Checkpoint::lookup(std::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const Entry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const Entry* e = lookup(name);
  return e ? e->info : nullptr;
}

const SafetensorsFile& Checkpoint::shard_of(const TensorInfo& t) const {
  const Entry* e = lookup(t.name);
  if (!e || e->info != &t) fail("{}: tensor '{}' is not from this checkpoint", path_.string(), t.name);
  return shards_[e->shard];
}

std::span<const uint8_t> Checkpoint::bytes(const TensorInfo& t) const { return shard_of(t).bytes(t); }

TensorRef Checkpoint::tensor(std::string_view name) const {
  const Entry* e = lookup(name);
  if (!e) fail("{}: no tensor '{}'", path_.string(), name);
  const SafetensorsFile& f = shards_[e->shard];
  return {e->info, f.bytes(*e->info), &f};
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.emplace_back(e.name);
  return out;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const Entry& e : entries_) n += e.info->nbytes();
  return n;
}

}  // namespace dsv4
