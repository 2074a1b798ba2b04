#include "io/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <random>

#include "core/error.h"
#include "io/safetensors_writer.h"
#include "testing/error_of.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// A file image: u64 little-endian header length, the header text, then `data_bytes` of data.
std::vector<uint8_t> raw_file(std::string_view header, size_t data_bytes = 0) {
  std::vector<uint8_t> f(8);
  for (size_t i = 0; i < 8; ++i) f[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  f.insert(f.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) f.push_back(static_cast<uint8_t>(i * 7 + 1));
  return f;
}

// The message of the dsv4::Error that parsing `f` throws ("" when it parses).
std::string parse_error(const std::vector<uint8_t>& f) {
  try {
    parse_safetensors_header(f, f.size(), "t.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const fs::path& p, std::span<const uint8_t> bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

using ::dsv4::testing::error_of;

// ---- header parser ----------------------------------------------------------------------------

TEST(SafetensorsHeader, ParsesTensorsMetadataGapsAndEmptyTensors) {
  auto f = raw_file(R"({"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[16,28]},)"
                    R"("a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                    R"("z":{"dtype":"I64","shape":[0,5],"data_offsets":[4,4]},)"
                    R"("__metadata__":{"format":"pt","k":"v"}}  )",
                    32);
  SafetensorsHeader h = parse_safetensors_header(f, f.size(), "t.safetensors");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");  // sorted by name
  EXPECT_EQ(h.tensors[0].dtype, DType::kF32);
  EXPECT_TRUE(h.tensors[0].shape.empty());
  EXPECT_EQ(h.tensors[0].numel(), 1);
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[1].begin, 16u);
  EXPECT_EQ(h.tensors[1].nbytes(), 12u);
  EXPECT_EQ(h.tensors[2].numel(), 0);
  EXPECT_EQ(h.tensors[2].nbytes(), 0u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("k"), "v");
  EXPECT_EQ(h.data_start, f.size() - 32);
}

TEST(SafetensorsHeader, EveryKnownDtypeParses) {
  for (const char* dt : {"BF16", "F16", "F32", "F64", "F8_E4M3", "F8_E8M0", "I8", "U8", "I16", "I32", "I64", "BOOL"}) {
    const size_t size = dtype_size(*parse_dtype(dt));
    auto f =
        raw_file(fmt::format(R"({{"t":{{"dtype":"{}","shape":[3],"data_offsets":[0,{}]}}}})", dt, 3 * size), 3 * size);
    EXPECT_EQ(parse_error(f), "") << dt;
  }
}

TEST(SafetensorsHeader, FileAndHeaderLengthErrors) {
  EXPECT_EQ(parse_error({1, 2, 3, 4, 5}), "t.safetensors: file is 5 bytes, too short for a safetensors header");
  auto f = raw_file("{}");
  f[0] = 200;  // header length 200 in a 10-byte file
  EXPECT_EQ(parse_error(f), "t.safetensors: header length 200 runs past the end of the file (10 bytes)");
  f[7] = 0x10;
  EXPECT_EQ(parse_error(f), "t.safetensors: header length 1152921504606847176 exceeds the limit of 100000000 bytes");
  EXPECT_EQ(parse_error(raw_file("")), "t.safetensors: header is empty");
  // The parser never looks past the bytes it is given, whatever the file size claims.
  auto g = raw_file("{}");
  EXPECT_EQ(error_of([&] { parse_safetensors_header(std::span(g).first(9), 100, "t.safetensors"); }),
            "t.safetensors: header length 2 exceeds the 9 bytes given to the parser");
}

TEST(SafetensorsHeader, JsonStructureErrors) {
  EXPECT_TRUE(parse_error(raw_file("{\"a\":")).starts_with("t.safetensors: header is not valid JSON: "));
  EXPECT_TRUE(parse_error(raw_file("{} x")).starts_with("t.safetensors: header is not valid JSON: "));
  EXPECT_TRUE(parse_error(raw_file("{\"\xff\":1}")).starts_with("t.safetensors: header is not valid JSON: "));
  EXPECT_EQ(parse_error(raw_file("[1,2]")), "t.safetensors: header must be a JSON object, got array");
  EXPECT_EQ(parse_error(raw_file("7")), "t.safetensors: header must be a JSON object, got number");
  EXPECT_EQ(parse_error(raw_file(R"({"t":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}})", 1)),
            "t.safetensors: header JSON nests deeper than a safetensors header can");
  EXPECT_EQ(parse_error(raw_file(R"({"t":[[[[[[]]]]]]})")),
            "t.safetensors: header JSON nests deeper than a safetensors header can");
}

TEST(SafetensorsHeader, DuplicateKeysAreRejected) {
  EXPECT_EQ(parse_error(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                 R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                 2)),
            "t.safetensors: header has duplicate key 'a'");
  EXPECT_EQ(parse_error(raw_file(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", 1)),
            "t.safetensors: header has duplicate key 'dtype'");
  // The same key in different objects is fine.
  EXPECT_EQ(parse_error(raw_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                 R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                 2)),
            "");
}

// A one-tensor header with the given fields (JSON text) and 64 data bytes.
std::string tensor_error(std::string_view fields) {
  return parse_error(raw_file(fmt::format(R"({{"w.0":{{{}}}}})", fields), 64));
}

TEST(SafetensorsHeader, TensorEntryErrorsNameFileAndTensor) {
  EXPECT_EQ(parse_error(raw_file(R"({"w.0":5})")), "t.safetensors: tensor 'w.0': entry must be an object, got 5");
  EXPECT_EQ(tensor_error(R"("shape":[1],"data_offsets":[0,1])"), "t.safetensors: tensor 'w.0': missing 'dtype'");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","data_offsets":[0,1])"), "t.safetensors: tensor 'w.0': missing 'shape'");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[1])"), "t.safetensors: tensor 'w.0': missing 'data_offsets'");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1)"),
            "t.safetensors: tensor 'w.0': unknown field 'x'");
  EXPECT_EQ(tensor_error(R"("dtype":"F4","shape":[1],"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': unknown dtype 'F4'");
  EXPECT_EQ(tensor_error(R"("dtype":3,"shape":[1],"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': dtype must be a string, got 3");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":{},"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': shape must be an array, got {}");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[2,-3],"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': shape has a negative value -3");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[2.5],"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': shape must hold non-negative integers, got 2.5");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":["2"],"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': shape must hold non-negative integers, got \"2\"");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': shape must hold non-negative integers, got 9223372036854775808");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': shape [4294967296,4294967296] has too many elements");
  // numel fits but numel * dtype size overflows.
  EXPECT_EQ(tensor_error(R"("dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,1])"),
            "t.safetensors: tensor 'w.0': shape [4611686018427387904] of I64 has too many bytes");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[1],"data_offsets":[0])"),
            "t.safetensors: tensor 'w.0': data_offsets must be [begin, end], got [0]");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[1],"data_offsets":[-1,0])"),
            "t.safetensors: tensor 'w.0': data_offsets has a negative value -1");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[1],"data_offsets":[5,4])"),
            "t.safetensors: tensor 'w.0': data_offsets begin 5 > end 4");
  EXPECT_EQ(tensor_error(R"("dtype":"U8","shape":[1],"data_offsets":[64,65])"),
            "t.safetensors: tensor 'w.0': data_offsets [64, 65] run past the data section (64 bytes)");
  EXPECT_EQ(tensor_error(R"("dtype":"BF16","shape":[2,3],"data_offsets":[0,10])"),
            "t.safetensors: tensor 'w.0': 10 bytes in data_offsets, but shape [2,3] of BF16 needs 12");
}

TEST(SafetensorsHeader, OverlapsNameBothTensors) {
  EXPECT_EQ(parse_error(raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"U8","shape":[8],"data_offsets":[7,15]}})",
                                 16)),
            "t.safetensors: tensors 'a' [0, 8] and 'b' [7, 15] overlap");
  // Reported in data order, whatever the names.
  EXPECT_EQ(parse_error(raw_file(R"({"z":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                 R"("a":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                                 16)),
            "t.safetensors: tensors 'z' [0, 8] and 'a' [6, 10] overlap");
  // Empty tensors overlap nothing, and adjacent ranges do not overlap.
  EXPECT_EQ(parse_error(raw_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                 R"("e":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
                                 R"("b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})",
                                 16)),
            "");
}

TEST(SafetensorsHeader, MetadataMustBeStrings) {
  EXPECT_EQ(parse_error(raw_file(R"({"__metadata__":[1]})")),
            "t.safetensors: __metadata__ must be an object of strings, got [1]");
  EXPECT_EQ(parse_error(raw_file(R"({"__metadata__":{"n":1}})")),
            "t.safetensors: __metadata__ 'n' must be a string, got 1");
}

// ---- SafetensorsFile over real files -----------------------------------------------------------

TEST(SafetensorsFile, ReadsGoldenCheckpoint) {
  auto f = SafetensorsFile::open(testing::golden_dir("tiny-a") / "model-00001-of-00001.safetensors");
  EXPECT_EQ(f.tensors().size(), 427u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.data_start() % 8, 0u);
  EXPECT_TRUE(std::is_sorted(f.tensors().begin(), f.tensors().end(),
                             [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; }));

  const TensorInfo& wq = f.get("layers.0.attn.wq_a.weight");
  EXPECT_EQ(wq.dtype, DType::kF8E4M3);
  EXPECT_EQ(wq.shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(f.bytes(wq).size(), 32768u);
  const TensorInfo& wq_scale = f.get("layers.0.attn.wq_a.scale");
  EXPECT_EQ(wq_scale.dtype, DType::kF8E8M0);
  EXPECT_EQ(wq_scale.shape, (std::vector<int64_t>{1, 2}));
  auto sb = f.bytes(wq_scale);
  EXPECT_EQ(std::vector<uint8_t>(sb.begin(), sb.end()), (std::vector<uint8_t>{117, 117}));

  const TensorInfo& w1 = f.get("layers.0.ffn.experts.0.w1.weight");
  EXPECT_EQ(w1.dtype, DType::kI8);  // packed FP4 pairs
  EXPECT_EQ(w1.shape, (std::vector<int64_t>{128, 128}));
  auto wb = f.bytes(w1);
  EXPECT_EQ(std::accumulate(wb.begin(), wb.end(), uint64_t{0}), 1876801u);
  const TensorInfo& w1_scale = f.get("layers.0.ffn.experts.0.w1.scale");
  EXPECT_EQ(w1_scale.dtype, DType::kF8E8M0);
  EXPECT_EQ(w1_scale.shape, (std::vector<int64_t>{128, 8}));

  const TensorInfo& embed = f.get("embed.weight");
  EXPECT_EQ(embed.dtype, DType::kBF16);
  EXPECT_EQ(embed.shape, (std::vector<int64_t>{1024, 256}));
  auto eb = f.bytes(embed).first(8);
  EXPECT_EQ(std::vector<uint8_t>(eb.begin(), eb.end()), (std::vector<uint8_t>{254, 62, 130, 61, 172, 191, 7, 192}));
  EXPECT_EQ(f.get("layers.0.ffn.gate.tid2eid").dtype, DType::kI64);
  f.prefetch(embed);

  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_EQ(error_of([&] { f.get("nope"); }), f.path().string() + ": no tensor 'nope'");
}

TEST(SafetensorsFile, ReadsGoldenExpectedInputIds) {
  auto f = SafetensorsFile::open(testing::golden_dir("tiny-a") / "expected.safetensors");
  const TensorInfo& ids = f.get("input_ids");
  EXPECT_EQ(ids.dtype, DType::kI32);
  EXPECT_EQ(ids.shape, (std::vector<int64_t>{2, 340}));
  std::vector<int32_t> v(6);
  std::memcpy(v.data(), f.bytes(ids).data(), 24);
  EXPECT_EQ(v, (std::vector<int32_t>{863, 523, 337, 838, 575, 599}));
  EXPECT_EQ(f.get("logits").shape, (std::vector<int64_t>{41, 2, 1024}));
}

TEST(SafetensorsFile, TruncatedGoldenFileNamesFileAndTensor) {
  const fs::path src = testing::golden_dir("tiny-a") / "model-00001-of-00001.safetensors";
  const auto full = read_bytes(src);
  const auto good = SafetensorsFile::open(src);
  const fs::path cut = testing::temp_dir("st-trunc") / "cut.safetensors";

  const uint64_t keep = 1000000;  // data bytes kept
  write_bytes(cut, std::span(full).first(good.data_start() + keep));
  // Tensors are checked in name order: the first one reaching past the cut is reported.
  const auto it =
      std::find_if(good.tensors().begin(), good.tensors().end(), [&](const TensorInfo& t) { return t.end > keep; });
  ASSERT_NE(it, good.tensors().end());
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(cut); }),
            fmt::format("{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", cut.string(),
                        it->name, it->begin, it->end, keep));

  write_bytes(cut, std::span(full).first(100));
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(cut); }),
            fmt::format("{}: header length {} runs past the end of the file (100 bytes)", cut.string(),
                        good.data_start() - 8));
  write_bytes(cut, std::span(full).first(3));
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(cut); }),
            cut.string() + ": file is 3 bytes, too short for a safetensors header");
}

TEST(SafetensorsFile, OpenErrors) {
  const fs::path dir = testing::temp_dir("st-open");
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(dir / "missing.safetensors"); }),
            (dir / "missing.safetensors").string() + ": cannot open: No such file or directory");
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(dir); }), dir.string() + ": not a regular file");
  write_bytes(dir / "bad.safetensors", raw_file(R"({"x":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})", 1));
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(dir / "bad.safetensors"); }),
            (dir / "bad.safetensors").string() + ": tensor 'x': unknown dtype 'Q9'");
}

TEST(SafetensorsFile, MoveKeepsMappingAndForeignTensorsAreRejected) {
  const fs::path dir = testing::temp_dir("st-move");
  write_bytes(dir / "a.safetensors", raw_file(R"({"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", 3));
  write_bytes(dir / "b.safetensors", raw_file(R"({"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", 3));
  auto a = SafetensorsFile::open(dir / "a.safetensors");
  auto b = SafetensorsFile::open(dir / "b.safetensors");
  EXPECT_EQ(error_of([&] { a.bytes(b.get("x")); }),
            (dir / "a.safetensors").string() + ": tensor 'x' is not from this file");
  SafetensorsFile moved(std::move(a));
  EXPECT_EQ(moved.bytes(moved.get("x"))[2], 15);  // raw_file data is 1, 8, 15, ...
  b = std::move(moved);
  EXPECT_EQ(b.path(), dir / "a.safetensors");
  EXPECT_EQ(b.bytes(b.get("x"))[1], 8);
}

// A 64 GiB sparse file opens instantly: only the header is read, pages come on demand.
TEST(SafetensorsFile, OpeningAHugeFileIsLazy) {
  const fs::path p = testing::temp_dir("st-huge") / "huge.safetensors";
  const uint64_t n = uint64_t{1} << 36;
  auto head = raw_file(fmt::format(R"({{"big":{{"dtype":"BF16","shape":[{}],"data_offsets":[0,{}]}}}})", n / 2, n));
  write_bytes(p, head);
  ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(head.size() + n)), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto f = SafetensorsFile::open(p);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 500.0);
  auto b = f.bytes(f.get("big"));
  EXPECT_EQ(b.size(), n);
  EXPECT_EQ(b[n - 1], 0);  // touches one page at the far end
}

// ---- writer ------------------------------------------------------------------------------------

struct RandomTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<RandomTensor> random_tensors(std::mt19937& rng, int count) {
  const DType types[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kF64, DType::kF8E4M3, DType::kF8E8M0,
                         DType::kI8,   DType::kU8,  DType::kI16, DType::kI32, DType::kI64,    DType::kBool};
  std::vector<RandomTensor> out;
  for (int i = 0; i < count; ++i) {
    RandomTensor t{fmt::format("layers.{}.w{}", rng() % 5, i), types[rng() % std::size(types)], {}, {}};
    const int rank = static_cast<int>(rng() % 4);  // 0 = a scalar
    for (int d = 0; d < rank; ++d) t.shape.push_back(static_cast<int64_t>(rng() % 7));
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    t.bytes.resize(static_cast<size_t>(numel) * dtype_size(t.dtype));
    for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
    out.push_back(std::move(t));
  }
  return out;
}

TEST(SafetensorsWriter, RoundTripIsBitExactAlignedAndDeterministic) {
  std::mt19937 rng(1234);
  const auto tensors = random_tensors(rng, 40);
  const fs::path dir = testing::temp_dir("st-write");
  for (const char* name : {"a.safetensors", "b.safetensors"}) {
    SafetensorsWriter w;
    // Add in a different order each time: the output must not depend on it.
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      const auto& t = tensors[i];
      if (i % 2) {
        w.add(t.name, t.dtype, t.shape, std::span<const uint8_t>(t.bytes));
      } else {
        w.add_lazy(t.name, t.dtype, t.shape, [&t](std::span<uint8_t> out) {
          ASSERT_EQ(out.size(), t.bytes.size());
          std::copy(t.bytes.begin(), t.bytes.end(), out.begin());
        });
      }
    }
    w.set_metadata("format", "pt");
    w.set_metadata("note", "round trip");
    EXPECT_EQ(w.size(), tensors.size());
    w.write(dir / name);
  }
  EXPECT_EQ(read_bytes(dir / "a.safetensors"), read_bytes(dir / "b.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "a.safetensors.tmp"));

  auto f = SafetensorsFile::open(dir / "a.safetensors");
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "round trip"}}));
  ASSERT_EQ(f.tensors().size(), tensors.size());
  EXPECT_EQ(f.data_start() % 8, 0u);
  uint64_t covered = 0;
  for (const auto& t : tensors) {
    const TensorInfo* info = f.find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, t.dtype);
    EXPECT_EQ(info->shape, t.shape);
    EXPECT_EQ(info->begin % dtype_size(t.dtype), 0u) << t.name;
    auto b = f.bytes(*info);
    EXPECT_TRUE(std::equal(b.begin(), b.end(), t.bytes.begin(), t.bytes.end())) << t.name;
    covered += b.size();
  }
  EXPECT_EQ(f.data_start() + covered, f.file_size());  // no gaps, as the reference reader requires
}

TEST(SafetensorsWriter, RewritingGoldenFileIsByteIdentical) {
  const fs::path src = testing::golden_dir("tiny-a") / "model-00001-of-00001.safetensors";
  auto f = SafetensorsFile::open(src);
  SafetensorsWriter w;
  for (const TensorInfo& t : f.tensors()) w.add(t.name, t.dtype, t.shape, f.bytes(t));
  for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
  EXPECT_EQ(w.data_bytes(), f.file_size() - f.data_start());
  const fs::path out = testing::temp_dir("st-golden") / "copy.safetensors";
  w.write(out);
  EXPECT_TRUE(read_bytes(out) == read_bytes(src));
}

TEST(SafetensorsWriter, RejectsBadTensors) {
  SafetensorsWriter w;
  w.add("a", DType::kU8, {2}, std::vector<uint8_t>{1, 2});
  EXPECT_EQ(error_of([&] { w.add("a", DType::kU8, {1}, std::vector<uint8_t>{1}); }),
            "safetensors writer: duplicate tensor 'a'");
  EXPECT_EQ(error_of([&] {
              w.add("b", DType::kBF16, {2, 2}, std::vector<uint8_t>(7));
            }),
            "tensor 'b': 7 bytes given, shape needs 8 bytes of BF16");
  EXPECT_EQ(error_of([&] { w.add("c", DType::kU8, {2, -1}, std::vector<uint8_t>{}); }), "tensor 'c': negative dim -1");
  EXPECT_EQ(error_of([&] { w.add("", DType::kU8, {1}, std::vector<uint8_t>{1}); }),
            "safetensors writer: invalid tensor name ''");
  EXPECT_EQ(error_of([&] { w.add("__metadata__", DType::kU8, {1}, std::vector<uint8_t>{1}); }),
            "safetensors writer: invalid tensor name '__metadata__'");
  EXPECT_EQ(error_of([&] { w.add_lazy("d", DType::kU8, {1}, {}); }), "tensor 'd': empty fill function");
  EXPECT_EQ(error_of([&] { w.add("e", DType::kI64, {int64_t{1} << 62}, std::vector<uint8_t>{}); }),
            "tensor 'e': shape too large");
  EXPECT_EQ(w.size(), 1u);
  const fs::path dir = testing::temp_dir("st-badwrite");
  EXPECT_EQ(error_of([&] { w.write(dir / "no" / "such" / "x.safetensors"); }),
            (dir / "no" / "such" / "x.safetensors.tmp").string() + ": cannot create: No such file or directory");
}

}  // namespace
}  // namespace dsv4
