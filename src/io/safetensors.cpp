#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>

#include "core/error.h"

namespace dsv4 {
namespace {

using nlohmann::json;

// Deepest container the header may hold: root object > tensor object > shape array.
constexpr int kMaxJsonDepth = 3;

uint64_t read_u64_le(std::span<const uint8_t> b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[static_cast<size_t>(i)];
  return v;
}

// A SAX pass that checks what a DOM parse would hide: duplicate keys (nlohmann keeps the last
// one) and nesting deeper than a header has. nlohmann's parse callbacks would do the same in
// quadratic time on objects with many keys.
class HeaderShapeCheck : public nlohmann::json_sax<json> {
 public:
  explicit HeaderShapeCheck(std::string_view file) : file_(file) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open();
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) fail("{}: header has duplicate key '{}'", file_, k);
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    open();
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail("{}: header is not valid JSON: {}", file_, e.what());
  }

 private:
  void open() {
    if (++depth_ > kMaxJsonDepth) fail("{}: header JSON nests deeper than a safetensors header can", file_);
  }

  std::string_view file_;
  int depth_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;  // one set per open object
};

json parse_header_json(std::string_view text, std::string_view file) {
  HeaderShapeCheck check(file);
  json::sax_parse(text.begin(), text.end(), &check);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // not expected after the SAX pass accepted the text
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
}

// A non-negative integer that fits in int64 (shape dims, offsets).
uint64_t as_count(const json& v, std::string_view file, std::string_view tensor, std::string_view field) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return v.get<uint64_t>();
  if (v.is_number_integer() && !v.is_number_unsigned())
    fail("{}: tensor '{}': {} has a negative value {}", file, tensor, field, v.get<int64_t>());
  fail("{}: tensor '{}': {} must hold non-negative integers, got {}", file, tensor, field, v.dump());
}

std::vector<int64_t> parse_shape(const json& v, std::string_view file, std::string_view tensor) {
  if (!v.is_array()) fail("{}: tensor '{}': shape must be an array, got {}", file, tensor, v.dump());
  std::vector<int64_t> shape;
  uint64_t numel = 1;
  for (const json& d : v) {
    uint64_t dim = as_count(d, file, tensor, "shape");
    if (__builtin_mul_overflow(numel, dim, &numel) || numel > uint64_t{std::numeric_limits<int64_t>::max()})
      fail("{}: tensor '{}': shape {} has too many elements", file, tensor, v.dump());
    shape.push_back(static_cast<int64_t>(dim));
  }
  return shape;
}

DType parse_dtype_field(const json& v, std::string_view file, std::string_view tensor) {
  if (!v.is_string()) fail("{}: tensor '{}': dtype must be a string, got {}", file, tensor, v.dump());
  auto t = parse_dtype(v.get<std::string>());
  if (!t) fail("{}: tensor '{}': unknown dtype '{}'", file, tensor, v.get<std::string>());
  return *t;
}

TensorInfo parse_tensor(const std::string& name, const json& v, uint64_t data_size, std::string_view file) {
  if (!v.is_object()) fail("{}: tensor '{}': entry must be an object, got {}", file, name, v.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) fail("{}: tensor '{}': missing '{}'", file, name, field);
  for (const auto& [key, unused] : v.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail("{}: tensor '{}': unknown field '{}'", file, name, key);
  TensorInfo t;
  t.name = name;
  t.dtype = parse_dtype_field(v["dtype"], file, name);
  t.shape = parse_shape(v["shape"], file, name);
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    fail("{}: tensor '{}': data_offsets must be [begin, end], got {}", file, name, off.dump());
  t.begin = as_count(off[0], file, name, "data_offsets");
  t.end = as_count(off[1], file, name, "data_offsets");
  if (t.begin > t.end) fail("{}: tensor '{}': data_offsets begin {} > end {}", file, name, t.begin, t.end);
  if (t.end > data_size)
    fail("{}: tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)", file, name, t.begin, t.end,
         data_size);
  uint64_t want = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(t.numel()), dtype_size(t.dtype), &want))
    fail("{}: tensor '{}': shape {} of {} has too many bytes", file, name, v["shape"].dump(), dtype_name(t.dtype));
  if (want != t.nbytes())
    fail("{}: tensor '{}': {} bytes in data_offsets, but shape {} of {} needs {}", file, name, t.nbytes(),
         v["shape"].dump(), dtype_name(t.dtype), want);
  return t;
}

std::map<std::string, std::string> parse_metadata(const json& v, std::string_view file) {
  if (!v.is_object()) fail("{}: __metadata__ must be an object of strings, got {}", file, v.dump());
  std::map<std::string, std::string> md;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) fail("{}: __metadata__ '{}' must be a string, got {}", file, key, value.dump());
    md.emplace(key, value.get<std::string>());
  }
  return md;
}

// Two tensors with bytes in common are an error (empty tensors overlap nothing).
void check_overlaps(std::vector<TensorInfo>& tensors, std::string_view file) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  const TensorInfo* last = nullptr;  // the non-empty tensor reaching furthest so far
  for (const TensorInfo& t : tensors) {
    if (t.nbytes() == 0) continue;
    if (last && t.begin < last->end)
      fail("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", file, last->name, last->begin, last->end, t.name,
           t.begin, t.end);
    if (!last || t.end > last->end) last = &t;
  }
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> head, uint64_t file_size,
                                           std::string_view file_name) {
  const std::string_view file = file_name;
  if (file_size < 8 || head.size() < 8)
    fail("{}: file is {} bytes, too short for a safetensors header", file, std::min<uint64_t>(file_size, head.size()));
  const uint64_t n = read_u64_le(head.first(8));
  if (n > kMaxSafetensorsHeaderBytes)
    fail("{}: header length {} exceeds the limit of {} bytes", file, n, kMaxSafetensorsHeaderBytes);
  if (n > file_size - 8) fail("{}: header length {} runs past the end of the file ({} bytes)", file, n, file_size);
  if (n > head.size() - 8) fail("{}: header length {} exceeds the {} bytes given to the parser", file, n, head.size());
  if (n == 0) fail("{}: header is empty", file);
  std::string_view text(reinterpret_cast<const char*>(head.data() + 8), n);
  json root = parse_header_json(text, file);
  if (!root.is_object()) fail("{}: header must be a JSON object, got {}", file, root.type_name());

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = file_size - h.data_start;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      h.metadata = parse_metadata(value, file);
    } else {
      h.tensors.push_back(parse_tensor(key, value, data_size, file));
    }
  }
  check_overlaps(h.tensors, file);
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return h;
}

// ---- SafetensorsFile -----------------------------------------------------------------------------

namespace {

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", file, std::strerror(errno));
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", file, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", file);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) fail("{}: file is {} bytes, too short for a safetensors header", file, size);

  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) fail("{}: cannot mmap {} bytes: {}", file, size, std::strerror(errno));
  SafetensorsFile f;
  f.path_ = path;
  f.base_ = static_cast<const uint8_t*>(p);
  f.size_ = size;
  f.header_ = parse_safetensors_header({f.base_, size}, size, file);  // on throw, ~SafetensorsFile unmaps
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      header_(std::move(other.header_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    header_ = std::move(other.header_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() noexcept {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  base_ = nullptr;
  size_ = 0;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto& ts = header_.tensors;
  auto it =
      std::lower_bound(ts.begin(), ts.end(), name, [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != ts.end() && it->name == name ? &*it : nullptr;
}

const TensorInfo& SafetensorsFile::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("{}: no tensor '{}'", path_.string(), name);
  return *t;
}

std::span<const uint8_t> SafetensorsFile::bytes(const TensorInfo& t) const {
  const auto& ts = header_.tensors;
  const std::less<const TensorInfo*> before;  // a total order, even across unrelated objects
  DSV4_CHECK(!ts.empty() && !before(&t, ts.data()) && before(&t, ts.data() + ts.size()),
             "{}: tensor '{}' is not from this file", path_.string(), t.name);
  return {base_ + header_.data_start + t.begin, t.nbytes()};
}

void SafetensorsFile::prefetch(const TensorInfo& t) const {
  auto b = bytes(t);
  if (b.empty()) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(b.data()) & ~(page - 1);
  const uintptr_t stop = reinterpret_cast<uintptr_t>(b.data() + b.size());
  ::madvise(reinterpret_cast<void*>(start), stop - start, MADV_WILLNEED);
}

}  // namespace dsv4
